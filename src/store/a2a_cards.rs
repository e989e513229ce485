//! Registered A2A peers (`agent_cards`) and each org's bridge settings
//! (`a2a_settings`).
//!
//! Rows here are plain columns: the protocol generation is its text and the
//! credential source is the two names it may be kept under. `a2a::registry`
//! turns them into its typed `CardRow` and back, so this file needs nothing
//! from the A2A module and the store stays the bottom layer.
//!
//! **Architecture Invariant:** only the *name* of a peer credential (an
//! environment variable or a file path) is ever stored, never its value.

use super::StoreError;
use super::db::{Conn, Row};
use crate::params;

/// One registered peer, column for column.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCard {
    /// Row id (the `agentCardId` of events).
    pub id: String,
    /// Owning org.
    pub org_id: String,
    /// Tool namespace and Cedar `PeerAgent` id; fixed at registration.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Base URL as registered.
    pub url: String,
    /// Protocol generation the operator pinned (`0.3`, `1.0`), if any.
    pub pinned_version: Option<String>,
    /// Environment variable holding the peer's bearer token.
    pub secret_env: Option<String>,
    /// Absolute path of a file holding the peer's bearer token.
    pub secret_file: Option<String>,
    /// The last valid card (JSON text).
    pub card: Option<String>,
    /// Where that card was found.
    pub card_url: Option<String>,
    /// `healthy`, `unreachable` or `invalid`.
    pub health: String,
    /// Why the last fetch failed.
    pub last_error: Option<String>,
    /// When the card was last fetched.
    pub checked_at: String,
    /// Registration time.
    pub created_at: String,
}

/// What a card fetch found, as it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchRecord<'a> {
    /// A valid card: stored, and the peer is healthy.
    Valid {
        /// The card as served (JSON text).
        card: &'a str,
        /// Where it was found.
        card_url: &'a str,
    },
    /// No card could be fetched; the last valid card is kept.
    Unreachable(&'a str),
    /// A card was fetched but is unusable; the last valid card is kept.
    Invalid(&'a str),
}

const COLUMNS: &str = "id, org_id, slug, name, url, pinned_version, secret_env, secret_file, card, card_url, health, last_error, checked_at, created_at";

fn row(r: &Row) -> Result<StoredCard, StoreError> {
    Ok(StoredCard {
        id: r.get(0)?,
        org_id: r.get(1)?,
        slug: r.get(2)?,
        name: r.get(3)?,
        url: r.get(4)?,
        pinned_version: r.get(5)?,
        secret_env: r.get(6)?,
        secret_file: r.get(7)?,
        card: r.get(8)?,
        card_url: r.get(9)?,
        health: r.get(10)?,
        last_error: r.get(11)?,
        checked_at: r.get(12)?,
        created_at: r.get(13)?,
    })
}

/// Inserts a registration; a taken slug is a conflict.
pub fn insert(conn: &mut Conn, c: &StoredCard) -> Result<(), StoreError> {
    let taken: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM agent_cards WHERE org_id = ?1 AND slug = ?2)",
        params![c.org_id, c.slug],
        |r| r.get(0),
    )?;
    if taken {
        return Err(StoreError::Conflict(format!(
            "org `{}` already has an A2A agent named `{}` (slug `{}`); refresh or deregister it, or register under another `name`",
            c.org_id, c.name, c.slug
        )));
    }
    conn.execute(
        &format!("INSERT INTO agent_cards ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"),
        params![
            c.id,
            c.org_id,
            c.slug,
            c.name,
            c.url,
            c.pinned_version,
            c.secret_env,
            c.secret_file,
            c.card,
            c.card_url,
            c.health,
            c.last_error,
            c.checked_at,
            c.created_at,
        ],
    )?;
    Ok(())
}

/// The peers of an org, oldest registration first.
pub fn list(conn: &mut Conn, org_id: &str) -> Result<Vec<StoredCard>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM agent_cards WHERE org_id = ?1 ORDER BY created_at, id"),
        params![org_id],
        row,
    )
}

/// Every registered peer (the background refresh).
pub fn list_all(conn: &mut Conn) -> Result<Vec<StoredCard>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM agent_cards ORDER BY org_id, created_at, id"),
        params![],
        row,
    )
}

/// One peer of an org.
pub fn get(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<StoredCard>, StoreError> {
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM agent_cards WHERE org_id = ?1 AND id = ?2"),
        params![org_id, id],
        row,
    )
}

/// Deregisters a peer.
pub fn delete(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM agent_cards WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "org `{org_id}` has no A2A agent `{id}`"
        )));
    }
    Ok(())
}

/// Stores a fetch result. A failed fetch keeps the last valid card (for the
/// API); only its health changes, which hides the peer's tools.
pub fn record_fetch(conn: &mut Conn, id: &str, fetched: FetchRecord<'_>) -> Result<(), StoreError> {
    match fetched {
        FetchRecord::Valid { card, card_url } => conn.execute(
            "UPDATE agent_cards SET card = ?2, card_url = ?3, health = 'healthy', last_error = NULL, checked_at = ?4 WHERE id = ?1",
            params![id, card, card_url, crate::ids::now_rfc3339()],
        )?,
        FetchRecord::Unreachable(e) => conn.execute(
            "UPDATE agent_cards SET health = 'unreachable', last_error = ?2, checked_at = ?3 WHERE id = ?1",
            params![id, e, crate::ids::now_rfc3339()],
        )?,
        FetchRecord::Invalid(e) => conn.execute(
            "UPDATE agent_cards SET health = 'invalid', last_error = ?2, checked_at = ?3 WHERE id = ?1",
            params![id, e, crate::ids::now_rfc3339()],
        )?,
    };
    Ok(())
}

/// An org's bridge timeout, if it set one.
pub fn timeout_ms(conn: &mut Conn, org_id: &str) -> Result<Option<u64>, StoreError> {
    let v: Option<i64> = conn.query_opt(
        "SELECT timeout_ms FROM a2a_settings WHERE org_id = ?1",
        params![org_id],
        |r| r.get(0),
    )?;
    Ok(v.and_then(|v| u64::try_from(v).ok()))
}

/// Sets an org's bridge timeout.
pub fn set_timeout_ms(conn: &mut Conn, org_id: &str, ms: u64) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO a2a_settings (org_id, timeout_ms, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (org_id) DO UPDATE SET timeout_ms = excluded.timeout_ms, updated_at = excluded.updated_at",
        params![org_id, i64::try_from(ms).unwrap_or(i64::MAX), crate::ids::now_rfc3339()],
    )?;
    Ok(())
}
