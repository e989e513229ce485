//! Gateway instances sharing one database: each instance upserts its row at
//! start-up, on every policy reload and on a heartbeat, so
//! `GET /admin/policies` can show which policy hash every live instance
//! runs. A row not refreshed for a few heartbeats is an instance that is
//! gone.

use serde::Serialize;

use super::StoreError;
use super::db::Conn;
use crate::params;

/// One instance as stored.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Random id chosen at start-up.
    pub id: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Its last heartbeat (RFC 3339).
    pub last_seen: String,
    /// The policy-set hash it runs.
    pub policy_hash: String,
    /// The address it listens on.
    pub listen: String,
    /// The gateway version.
    pub version: String,
}

/// Inserts or refreshes an instance's row.
pub fn upsert(conn: &mut Conn, i: &Instance) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO gateway_instances (id, started_at, last_seen, policy_hash, listen, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen,
             policy_hash = excluded.policy_hash, listen = excluded.listen",
        params![
            i.id,
            i.started_at,
            i.last_seen,
            i.policy_hash,
            i.listen,
            i.version
        ],
    )?;
    Ok(())
}

/// Instances seen at or after `since`, oldest start first.
pub fn live(conn: &mut Conn, since: &str) -> Result<Vec<Instance>, StoreError> {
    conn.query_map(
        "SELECT id, started_at, last_seen, policy_hash, listen, version FROM gateway_instances
         WHERE last_seen >= ?1 ORDER BY started_at, id",
        params![since],
        |r| {
            Ok(Instance {
                id: r.get(0)?,
                started_at: r.get(1)?,
                last_seen: r.get(2)?,
                policy_hash: r.get(3)?,
                listen: r.get(4)?,
                version: r.get(5)?,
            })
        },
    )
}

/// Forgets an instance (clean shutdown) and rows not seen since `before`.
pub fn remove(conn: &mut Conn, id: &str, before: &str) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM gateway_instances WHERE id = ?1 OR last_seen < ?2",
        params![id, before],
    )?;
    Ok(())
}
