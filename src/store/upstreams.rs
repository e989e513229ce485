//! Registered upstream MCP servers (`mcp_servers`).
//!
//! Rows here are plain columns: the tool definitions are their JSON text
//! and the credential source is the two names a bearer token may be kept
//! under, or an OAuth client registration (`oauth_*`) whose secret is
//! named the same way.
//! `upstream::registry` turns them into its typed rows and back, so this
//! file needs nothing from the upstream module.
//!
//! **Architecture Invariant:** only the *name* of an upstream credential
//! (an environment variable or a file path) is ever stored, never its value
//! (nor a token obtained with it).

use super::StoreError;
use super::db::{Conn, Row};
use crate::params;

/// One registered upstream, column for column.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredUpstream {
    /// Row id.
    pub id: String,
    /// Owning org.
    pub org_id: String,
    /// Cedar `McpServer` id; fixed at registration.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// `streamable-http`, `sse` or `stdio`.
    pub transport: String,
    /// Endpoint URL.
    pub url: String,
    /// Tool name prefix.
    pub prefix: String,
    /// Environment variable holding the upstream's bearer token.
    pub secret_env: Option<String>,
    /// Absolute path of a file holding the upstream's bearer token.
    pub secret_file: Option<String>,
    /// The gateway's OAuth client registration for the upstream's token
    /// (none: the bearer token above, if any).
    pub oauth: Option<StoredOAuthClient>,
    /// Budget of one call, in milliseconds.
    pub timeout_ms: i64,
    /// Whether tools first seen after the first listing are exposed at
    /// once (the explicit `approveNewTools: true`).
    pub approve_new_tools: bool,
    /// Whether the first listing's tools wait for an approval too (the
    /// explicit `approveNewTools: false`).
    pub hold_first_listing: bool,
    /// Tool definitions with their pins (JSON array text).
    pub tools: String,
    /// Protocol version negotiated at the last listing.
    pub protocol_version: Option<String>,
    /// `healthy`, `unreachable` or `invalid`.
    pub health: String,
    /// Why the last listing failed.
    pub last_error: Option<String>,
    /// When the tools were last listed.
    pub checked_at: String,
    /// Registration time.
    pub created_at: String,
}

/// An upstream's OAuth client credentials registration, column for
/// column: the secret's variable name, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOAuthClient {
    /// The authorization server's issuer.
    pub issuer: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// Environment variable holding the client secret.
    pub secret_env: String,
    /// Scopes asked for.
    pub scope: Option<String>,
    /// The upstream's resource identifier (RFC 8707).
    pub resource: String,
}

/// What a listing found, as it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingRecord<'a> {
    /// The upstream answered: its tools (JSON text) and the version spoken.
    Listed {
        /// Definitions with their pins.
        tools: &'a str,
        /// Negotiated protocol version.
        protocol_version: &'a str,
    },
    /// The upstream could not be reached; the last definitions are kept.
    Unreachable(&'a str),
    /// The upstream answered something unusable; the definitions are kept.
    Invalid(&'a str),
}

const COLUMNS: &str = "id, org_id, slug, name, transport, url, prefix, secret_env, secret_file, timeout_ms, approve_new_tools, tools, protocol_version, health, last_error, checked_at, created_at, hold_first_listing, oauth_issuer, oauth_client_id, oauth_secret_env, oauth_scope, oauth_resource";

/// The OAuth columns (from index 18), when the row has a complete one.
fn oauth(r: &Row) -> Result<Option<StoredOAuthClient>, StoreError> {
    let issuer: Option<String> = r.get(18)?;
    let client_id: Option<String> = r.get(19)?;
    let secret_env: Option<String> = r.get(20)?;
    let resource: Option<String> = r.get(22)?;
    let (Some(issuer), Some(client_id), Some(secret_env), Some(resource)) =
        (issuer, client_id, secret_env, resource)
    else {
        return Ok(None);
    };
    Ok(Some(StoredOAuthClient {
        issuer,
        client_id,
        secret_env,
        scope: r.get(21)?,
        resource,
    }))
}

fn row(r: &Row) -> Result<StoredUpstream, StoreError> {
    Ok(StoredUpstream {
        oauth: oauth(r)?,
        id: r.get(0)?,
        org_id: r.get(1)?,
        slug: r.get(2)?,
        name: r.get(3)?,
        transport: r.get(4)?,
        url: r.get(5)?,
        prefix: r.get(6)?,
        secret_env: r.get(7)?,
        secret_file: r.get(8)?,
        timeout_ms: r.get(9)?,
        approve_new_tools: r.get(10)?,
        tools: r.get(11)?,
        protocol_version: r.get(12)?,
        health: r.get(13)?,
        last_error: r.get(14)?,
        checked_at: r.get(15)?,
        created_at: r.get(16)?,
        hold_first_listing: r.get(17)?,
    })
}

/// Inserts a registration; a taken slug is a conflict.
pub fn insert(conn: &mut Conn, u: &StoredUpstream) -> Result<(), StoreError> {
    let taken: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM mcp_servers WHERE org_id = ?1 AND slug = ?2)",
        params![u.org_id, u.slug],
        |r| r.get(0),
    )?;
    if taken {
        return Err(StoreError::Conflict(format!(
            "org `{}` already has an MCP server named `{}` (slug `{}`); refresh or delete it, or register under another `name`",
            u.org_id, u.name, u.slug
        )));
    }
    write_row(conn, u, "")
}

/// Inserts a server declared in the config file, or updates its declared
/// settings (pins, health and creation time stay); a slug another server
/// of the org has is a conflict.
pub fn upsert_declared(conn: &mut Conn, u: &StoredUpstream) -> Result<(), StoreError> {
    let other: Option<String> = conn.query_opt(
        "SELECT id FROM mcp_servers WHERE org_id = ?1 AND slug = ?2 AND id <> ?3",
        params![u.org_id, u.slug, u.id],
        |r| r.get(0),
    )?;
    if let Some(other) = other {
        return Err(StoreError::Conflict(format!(
            "org `{}` already has an MCP server with slug `{}` (`{other}`)",
            u.org_id, u.slug
        )));
    }
    write_row(
        conn,
        u,
        " ON CONFLICT (id) DO UPDATE SET name = excluded.name, transport = excluded.transport, url = excluded.url, \
         prefix = excluded.prefix, timeout_ms = excluded.timeout_ms, approve_new_tools = excluded.approve_new_tools, \
         hold_first_listing = excluded.hold_first_listing",
    )
}

/// Inserts every column of `u`, followed by `on_conflict` (empty: a plain
/// insert).
fn write_row(conn: &mut Conn, u: &StoredUpstream, on_conflict: &str) -> Result<(), StoreError> {
    let oauth = u.oauth.as_ref();
    conn.execute(
        &format!("INSERT INTO mcp_servers ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23){on_conflict}"),
        params![
            u.id,
            u.org_id,
            u.slug,
            u.name,
            u.transport,
            u.url,
            u.prefix,
            u.secret_env,
            u.secret_file,
            u.timeout_ms,
            u.approve_new_tools,
            u.tools,
            u.protocol_version,
            u.health,
            u.last_error,
            u.checked_at,
            u.created_at,
            u.hold_first_listing,
            oauth.map(|o| &o.issuer),
            oauth.map(|o| &o.client_id),
            oauth.map(|o| &o.secret_env),
            oauth.and_then(|o| o.scope.as_ref()),
            oauth.map(|o| &o.resource),
        ],
    )?;
    Ok(())
}

/// `(id, org_id, slug, health)` of every registered upstream: what the
/// health readings need, without the pinned definitions.
pub fn list_health(conn: &mut Conn) -> Result<Vec<(String, String, String, String)>, StoreError> {
    conn.query_map(
        "SELECT id, org_id, slug, health FROM mcp_servers ORDER BY org_id, created_at, id",
        params![],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
}

/// The upstreams of an org, oldest registration first.
pub fn list(conn: &mut Conn, org_id: &str) -> Result<Vec<StoredUpstream>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM mcp_servers WHERE org_id = ?1 ORDER BY created_at, id"),
        params![org_id],
        row,
    )
}

/// Every registered upstream of every org (the typed actions of their
/// tools and the background refresh).
pub fn list_all(conn: &mut Conn) -> Result<Vec<StoredUpstream>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM mcp_servers ORDER BY org_id, created_at, id"),
        params![],
        row,
    )
}

/// One upstream of an org.
pub fn get(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<StoredUpstream>, StoreError> {
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM mcp_servers WHERE org_id = ?1 AND id = ?2"),
        params![org_id, id],
        row,
    )
}

/// Deletes a registration.
pub fn delete(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM mcp_servers WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "org `{org_id}` has no MCP server `{id}`"
        )));
    }
    Ok(())
}

/// Replaces the tool definitions (after an approval) when the stored ones
/// are still `expected`, the text the caller read; false when another
/// write (a refresh, another approval) came first. Pins are read, merged
/// and written back, so an unguarded write would undo a concurrent one.
pub fn set_tools(
    conn: &mut Conn,
    id: &str,
    expected: &str,
    tools: &str,
) -> Result<bool, StoreError> {
    let n = conn.execute(
        "UPDATE mcp_servers SET tools = ?3 WHERE id = ?1 AND tools = ?2",
        params![id, expected, tools],
    )?;
    stored_or_raced(conn, id, n)
}

/// `Ok(true)` when an update changed the row, `Ok(false)` when the row is
/// there but its definitions changed since they were read, `NotFound`
/// when it is gone.
fn stored_or_raced(conn: &mut Conn, id: &str, updated: u64) -> Result<bool, StoreError> {
    if updated > 0 {
        return Ok(true);
    }
    let exists: Option<i64> = conn.query_opt(
        "SELECT 1 FROM mcp_servers WHERE id = ?1",
        params![id],
        |r| r.get(0),
    )?;
    match exists {
        Some(_) => Ok(false),
        None => Err(StoreError::NotFound(format!("no MCP server `{id}`"))),
    }
}

/// Stores a listing. A failed listing keeps the last definitions (for the
/// API) but the health hides the upstream's tools. A successful one
/// carries definitions merged with the pins read as `expected`, and is
/// stored only while they are still those (false otherwise, as
/// [`set_tools`]); a failed one changes no definition and always lands.
pub fn record_listing(
    conn: &mut Conn,
    id: &str,
    expected: &str,
    listing: ListingRecord<'_>,
) -> Result<bool, StoreError> {
    let now = crate::ids::now_rfc3339();
    let n = match listing {
        ListingRecord::Listed {
            tools,
            protocol_version,
        } => conn.execute(
            "UPDATE mcp_servers SET tools = ?2, protocol_version = ?3, health = 'healthy', last_error = NULL, checked_at = ?4 WHERE id = ?1 AND tools = ?5",
            params![id, tools, protocol_version, now, expected],
        )?,
        ListingRecord::Unreachable(e) => conn.execute(
            "UPDATE mcp_servers SET health = 'unreachable', last_error = ?2, checked_at = ?3 WHERE id = ?1",
            params![id, e, now],
        )?,
        ListingRecord::Invalid(e) => conn.execute(
            "UPDATE mcp_servers SET health = 'invalid', last_error = ?2, checked_at = ?3 WHERE id = ?1",
            params![id, e, now],
        )?,
    };
    stored_or_raced(conn, id, n)
}
