//! Per-org rate-limit overrides (`org_rate_limits`): the overridden buckets
//! as JSON text, read and written whole. The JSON's shape belongs to
//! `crate::rate_limits`; the store keeps it as it is given.

use super::StoreError;
use super::db::Conn;
use crate::params;

/// An org's override JSON, if it set one.
pub fn get(conn: &mut Conn, org_id: &str) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT limits FROM org_rate_limits WHERE org_id = ?1",
        params![org_id],
        |r| r.get(0),
    )
}

/// Sets (replaces) an org's override.
pub fn set(conn: &mut Conn, org_id: &str, limits: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO org_rate_limits (org_id, limits, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (org_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at",
        params![org_id, limits, crate::ids::now_rfc3339()],
    )?;
    Ok(())
}

/// Removes an org's override; whether there was one.
pub fn clear(conn: &mut Conn, org_id: &str) -> Result<bool, StoreError> {
    let n = conn.execute(
        "DELETE FROM org_rate_limits WHERE org_id = ?1",
        params![org_id],
    )?;
    Ok(n > 0)
}
