//! Registered upstream MCP servers: one [`ServerRow`] each (kept by
//! `store::upstreams`), the tool definitions each listing found with their
//! pinned hashes, and the per-org tool set built from the healthy rows.
//!
//! **Architecture Invariant:** an upstream credential is stored only as the
//! *name* of an environment variable or file ([`UpstreamAuth`]: a bearer
//! token as for A2A peers, or an OAuth client whose secret is named so);
//! its value is read when a request needs it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::credentials::UpstreamAuth;
use super::oauth_token::{self, ClientCredentials};
use crate::a2a::registry::PeerAuth;
use crate::policy::Action;
use crate::policy::entities::UpstreamToolFacts;
use crate::policy::schema_gen::ToolSchema;
use crate::store::StoreError;
use crate::store::db::Conn;
use crate::store::upstreams::{self, ListingRecord, StoredOAuthClient, StoredUpstream};
use crate::tools::ToolSpec;

/// The Streamable HTTP transport.
pub const STREAMABLE_HTTP: &str = "streamable-http";

/// The legacy HTTP+SSE transport (2024-11-05): `url` is the event stream.
pub const SSE: &str = "sse";

/// A child process declared in the config file (`[[upstreams]]`); its
/// `url` is `stdio:<slug>`, what it runs is known only to the config.
pub const STDIO: &str = "stdio";

/// Health of a registered upstream.
pub mod health {
    /// The last listing succeeded: its tools are offered.
    pub const HEALTHY: &str = "healthy";
    /// The upstream could not be reached: no tools until a refresh succeeds.
    pub const UNREACHABLE: &str = "unreachable";
    /// The upstream answered something unusable: no tools.
    pub const INVALID: &str = "invalid";
}

/// One upstream tool: the definition an operator (or the first listing)
/// approved, and a changed or new definition held until approved.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedTool {
    /// The upstream's name for it.
    pub name: String,
    /// The approved definition as the upstream listed it (null: none yet).
    pub definition: Value,
    /// SHA-256 of its name, description, input schema and annotations
    /// (empty: none approved yet).
    pub hash: String,
    /// A listed definition that differs from the approved one (or a new
    /// tool of a server that approves new tools by hand): the tool is not
    /// offered until it is approved.
    pub held: Option<Held>,
    /// What else in the org already has the tool's gateway name (set at
    /// each listing): the tool is not offered while it collides.
    pub collides_with: Option<String>,
    /// Since when the upstream no longer lists the tool (RFC 3339): the
    /// pin is kept, not offered, and its typed action stays declared but
    /// dropped, so the policies naming it still validate (see [`merge`]).
    pub unlisted: Option<String>,
}

/// A definition waiting for an operator's approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// The definition as listed.
    pub definition: Value,
    /// Its hash.
    pub hash: String,
    /// When it was first listed.
    pub seen_at: String,
}

/// A definition that became held at a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldChange {
    /// The upstream's name for the tool.
    pub tool: String,
    /// The approved hash (empty for a new tool).
    pub old_hash: String,
    /// The listed hash.
    pub new_hash: String,
}

impl PinnedTool {
    /// Pins a listed definition (None when it has no string `name`).
    pub fn pin(definition: Value) -> Option<PinnedTool> {
        let name = definition.get("name")?.as_str()?.to_string();
        let hash = definition_hash(&definition);
        Some(PinnedTool {
            name,
            definition,
            hash,
            held: None,
            collides_with: None,
            unlisted: None,
        })
    }

    /// Whether the tool is offered: approved, still listed, nothing held,
    /// no collision, and a name Cedar can hold.
    pub fn offered(&self) -> bool {
        self.held.is_none()
            && !self.hash.is_empty()
            && self.collides_with.is_none()
            && self.unlisted.is_none()
            && self.refusal().is_none()
    }

    /// Why an approved tool the upstream stopped listing is not offered.
    pub fn unlisted_reason(&self) -> Option<String> {
        self.unlisted.as_ref().map(|since| {
            format!(
                "the upstream no longer lists this tool (since {since}); its typed action stays declared but dropped until it is listed again (held until approved if its definition changed)"
            )
        })
    }

    /// Why the approved definition is refused, read from it each time (so
    /// a definition stored before the rule is refused too): a name or
    /// property name Cedar cannot hold (`crate::policy::cedar_names`).
    pub fn refusal(&self) -> Option<String> {
        crate::policy::cedar_names::unwritable_tool(&self.definition)
    }

    fn to_json(&self) -> Value {
        let mut v = json!({ "name": self.name, "hash": self.hash, "definition": self.definition });
        if let (Some(h), Value::Object(map)) = (&self.held, &mut v) {
            map.insert(
                "held".into(),
                json!({ "hash": h.hash, "definition": h.definition, "seenAt": h.seen_at }),
            );
        }
        if let (Some(c), Value::Object(map)) = (&self.collides_with, &mut v) {
            map.insert("collidesWith".into(), c.clone().into());
        }
        if let (Some(u), Value::Object(map)) = (&self.unlisted, &mut v) {
            map.insert("unlistedAt".into(), u.clone().into());
        }
        v
    }

    fn from_json(v: &Value) -> Option<PinnedTool> {
        let held = match v.get("held") {
            Some(h) => Some(Held {
                hash: h.get("hash")?.as_str()?.to_string(),
                definition: h.get("definition")?.clone(),
                seen_at: h.get("seenAt")?.as_str()?.to_string(),
            }),
            None => None,
        };
        Some(PinnedTool {
            name: v.get("name")?.as_str()?.to_string(),
            hash: v.get("hash")?.as_str()?.to_string(),
            definition: v.get("definition")?.clone(),
            held,
            collides_with: v
                .get("collidesWith")
                .and_then(Value::as_str)
                .map(str::to_string),
            unlisted: v
                .get("unlistedAt")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

/// How many approved tools a server no longer lists are kept as unlisted
/// pins (the oldest unlisted first go beyond it), so an upstream renaming
/// its tools at every listing cannot grow its row without bound.
pub const MAX_UNLISTED: usize = 256;

/// The pins after a listing: a definition equal to the approved one is
/// kept; a changed one is held (the approved one stays on record); a new
/// tool is approved at once when `approve_new` (see [`approves_new`]),
/// else held. An approved tool no longer listed keeps its pin, marked
/// unlisted (not offered, its typed action declared but dropped, so no
/// policy naming it stops validating: what an upstream stops listing never
/// breaks the policy set); listed again, it is offered if its definition
/// is the pinned one, else held until approved by hash. A tool never
/// approved that is no longer listed is dropped. Returns the pins and the
/// definitions that became held at this listing.
pub fn merge(
    previous: &[PinnedTool],
    listed: Vec<PinnedTool>,
    approve_new: bool,
) -> (Vec<PinnedTool>, Vec<HeldChange>) {
    let now = crate::ids::now_rfc3339();
    let mut changes = Vec::new();
    let mut out = Vec::with_capacity(listed.len());
    for new in listed {
        let before = previous.iter().find(|p| p.name == new.name);
        let mut pin = match before {
            Some(p) if p.hash == new.hash => {
                out.push(PinnedTool {
                    held: None,
                    unlisted: None,
                    ..p.clone()
                });
                continue;
            }
            None if approve_new => {
                out.push(new);
                continue;
            }
            Some(p) => PinnedTool {
                unlisted: None,
                ..p.clone()
            },
            None => PinnedTool {
                name: new.name.clone(),
                definition: Value::Null,
                hash: String::new(),
                held: None,
                collides_with: None,
                unlisted: None,
            },
        };
        let already = before
            .and_then(|p| p.held.as_ref())
            .filter(|h| h.hash == new.hash);
        if already.is_none() {
            changes.push(HeldChange {
                tool: new.name.clone(),
                old_hash: pin.hash.clone(),
                new_hash: new.hash.clone(),
            });
        }
        pin.held = Some(Held {
            seen_at: already.map_or_else(|| now.clone(), |h| h.seen_at.clone()),
            definition: new.definition,
            hash: new.hash,
        });
        out.push(pin);
    }
    out.extend(unlisted(previous, &out, &now));
    (out, changes)
}

/// The approved pins of `previous` that `listed` lacks, marked unlisted
/// (since `now`, or since when they already were), the most recently
/// unlisted [`MAX_UNLISTED`] of them.
fn unlisted(previous: &[PinnedTool], listed: &[PinnedTool], now: &str) -> Vec<PinnedTool> {
    let mut gone: Vec<PinnedTool> = previous
        .iter()
        .filter(|p| !p.hash.is_empty() && !listed.iter().any(|l| l.name == p.name))
        .map(|p| PinnedTool {
            held: None,
            unlisted: Some(p.unlisted.clone().unwrap_or_else(|| now.to_string())),
            ..p.clone()
        })
        .collect();
    gone.sort_by(|a, b| {
        b.unlisted
            .cmp(&a.unlisted)
            .then_with(|| a.name.cmp(&b.name))
    });
    gone.truncate(MAX_UNLISTED);
    gone
}

/// Whether the next listing of `row` approves the tools it finds new: its
/// first listing does (registering a server approves what it lists then)
/// unless it was registered with `"approveNewTools": false`; a later one
/// only when it was registered with `"approveNewTools": true`. So a tool
/// that appears after the first pin (a renamed `wipe` → `wipe_v2` calling
/// itself read-only) waits for an operator by default.
pub fn approves_new(row: &ServerRow) -> bool {
    let first = row.protocol_version.is_none();
    row.approve_new_tools || (first && !row.hold_first_listing)
}

/// A tool whose gateway name something else of the org already has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The upstream's name for the tool.
    pub tool: String,
    /// The gateway's name for it.
    pub name: String,
    /// What has that name already.
    pub with: String,
}

/// Marks each tool of `row` whose gateway name is in `taken` (gateway
/// name → what has it) as colliding, clears the mark of the others, and
/// returns the collisions.
pub fn mark_collisions(row: &mut ServerRow, taken: &HashMap<String, String>) -> Vec<Collision> {
    let prefix = row.prefix.clone();
    let mut out = Vec::new();
    for tool in &mut row.tools {
        let name = gateway_name(&prefix, &tool.name);
        tool.collides_with = taken.get(&name).cloned();
        if let Some(with) = &tool.collides_with {
            out.push(Collision {
                tool: tool.name.clone(),
                name,
                with: with.clone(),
            });
        }
    }
    out
}

/// The gateway's name of an upstream tool or prompt: `<prefix>.<name>`,
/// or the name itself without a prefix.
pub fn gateway_name(prefix: &str, tool: &str) -> String {
    if prefix.is_empty() {
        tool.to_string()
    } else {
        format!("{prefix}.{tool}")
    }
}

/// Whether `name` names the upstream tool `tool`: by the upstream's name
/// or the gateway's (`<prefix>.<tool>`).
pub fn is_named(prefix: &str, tool: &str, name: &str) -> bool {
    name == tool || name == gateway_name(prefix, tool)
}

/// Approves, for each tool `reviewed` names (the upstream's or the
/// gateway's name), the held definition whose hash it names. Returns how
/// many were approved, or the first tool that does not hold that hash now,
/// with the hash it holds (empty: none); nothing is approved then.
pub fn approve(
    row: &mut ServerRow,
    reviewed: &BTreeMap<String, String>,
) -> Result<usize, (String, String)> {
    let prefix = row.prefix.clone();
    let held_hash = |row: &ServerRow, name: &str| {
        row.tools
            .iter()
            .find(|t| is_named(&prefix, &t.name, name))
            .and_then(|t| t.held.as_ref())
            .map(|h| h.hash.clone())
            .unwrap_or_default()
    };
    for (name, hash) in reviewed {
        let held = held_hash(row, name);
        if held.is_empty() || held != *hash {
            return Err((name.clone(), held));
        }
    }
    let mut approved = 0;
    for tool in &mut row.tools {
        let selected = reviewed.keys().any(|n| is_named(&prefix, &tool.name, n));
        if selected && let Some(held) = tool.held.take() {
            tool.definition = held.definition;
            tool.hash = held.hash;
            approved += 1;
        }
    }
    Ok(approved)
}

/// The hash a definition is pinned by: SHA-256 of the canonical JSON
/// (object keys sorted) of its `name`, `description`, `inputSchema` and
/// `annotations` (absent members as null).
pub fn definition_hash(definition: &Value) -> String {
    let member = |k: &str| canonical(definition.get(k).unwrap_or(&Value::Null));
    let text = format!(
        "[{},{},{},{}]",
        member("name"),
        member("description"),
        member("inputSchema"),
        member("annotations")
    );
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// JSON text with object keys sorted at every level.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// One registered upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRow {
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
    /// The MCP endpoint (`stdio:<slug>` for a declared child process).
    pub url: String,
    /// Tool name prefix (`<prefix>.<tool>`).
    pub prefix: String,
    /// Where the credential is found.
    pub auth: Option<UpstreamAuth>,
    /// Budget of one call.
    pub timeout_ms: u64,
    /// Whether tools first seen after the first listing are offered at
    /// once (only when asked for: `"approveNewTools": true`).
    pub approve_new_tools: bool,
    /// Whether the first listing's tools wait for an approval too
    /// (`"approveNewTools": false`).
    pub hold_first_listing: bool,
    /// The definitions of the last successful listing.
    pub tools: Vec<PinnedTool>,
    /// The definitions' text as read from the store (empty for a row not
    /// stored yet). A write of new pins is stored only while the row still
    /// holds this text, so a refresh and an approval that overlap cannot
    /// undo each other: the later one reads again and merges afresh.
    pub stored_tools: String,
    /// Version negotiated at that listing.
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

impl ServerRow {
    /// The gateway's name for the upstream tool `tool`.
    pub fn tool_name(&self, tool: &str) -> String {
        gateway_name(&self.prefix, tool)
    }

    /// The API view: where secrets live, never their values. `detail`
    /// adds the pinned definitions.
    pub fn to_api(&self, detail: bool) -> Value {
        let mut v = json!({
            "id": self.id,
            "orgId": self.org_id,
            "slug": self.slug,
            "name": self.name,
            "transport": self.transport,
            "url": self.url,
            "prefix": self.prefix,
            "auth": self.auth,
            "timeoutMs": self.timeout_ms,
            "approveNewTools": self.approve_new_tools,
            "holdFirstListing": self.hold_first_listing,
            "protocolVersion": self.protocol_version,
            "health": self.health,
            "lastError": self.last_error,
            "checkedAt": self.checked_at,
            "createdAt": self.created_at,
            "toolCount": self.tools.len(),
            "heldCount": self.tools.iter().filter(|t| t.held.is_some()).count(),
        });
        if detail && let Value::Object(map) = &mut v {
            let tools: Vec<Value> = self
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "tool": self.tool_name(&t.name),
                        "status": if t.refusal().is_some() {
                            "refused"
                        } else if t.unlisted.is_some() {
                            "unlisted"
                        } else if t.collides_with.is_some() {
                            "collision"
                        } else if t.offered() {
                            "approved"
                        } else {
                            "held"
                        },
                        "collidesWith": t.collides_with,
                        "reason": t.refusal().or_else(|| t.unlisted_reason()).or_else(|| {
                            t.held.as_ref().and_then(|h| {
                                crate::policy::cedar_names::unwritable_tool(&h.definition)
                            })
                        }),
                        "hash": t.hash,
                        "definition": t.definition,
                        "held": t.held.as_ref().map(|h| json!({
                            "hash": h.hash, "definition": h.definition, "seenAt": h.seen_at,
                        })),
                    })
                })
                .collect();
            map.insert("tools".into(), Value::Array(tools));
        }
        v
    }

    /// The bearer token source, when the credential is one.
    fn bearer(&self) -> Option<&PeerAuth> {
        match &self.auth {
            Some(UpstreamAuth::Bearer(auth)) => Some(auth),
            _ => None,
        }
    }

    fn to_stored(&self) -> StoredUpstream {
        StoredUpstream {
            id: self.id.clone(),
            org_id: self.org_id.clone(),
            slug: self.slug.clone(),
            name: self.name.clone(),
            transport: self.transport.clone(),
            url: self.url.clone(),
            prefix: self.prefix.clone(),
            secret_env: self.bearer().and_then(|a| a.secret_env.clone()),
            secret_file: self.bearer().and_then(|a| a.secret_file.clone()),
            oauth: match &self.auth {
                Some(UpstreamAuth::ClientCredentials(c)) => Some(StoredOAuthClient {
                    issuer: c.issuer.clone(),
                    client_id: c.client_id.clone(),
                    secret_env: c.secret_env.clone(),
                    scope: c.scope.clone(),
                    resource: c.resource.clone(),
                }),
                _ => None,
            },
            timeout_ms: i64::try_from(self.timeout_ms).unwrap_or(i64::MAX),
            approve_new_tools: self.approve_new_tools,
            hold_first_listing: self.hold_first_listing,
            tools: tools_text(&self.tools),
            protocol_version: self.protocol_version.clone(),
            health: self.health.clone(),
            last_error: self.last_error.clone(),
            checked_at: self.checked_at.clone(),
            created_at: self.created_at.clone(),
        }
    }
}

fn tools_text(tools: &[PinnedTool]) -> String {
    Value::Array(tools.iter().map(PinnedTool::to_json).collect()).to_string()
}

impl From<StoredUpstream> for ServerRow {
    /// A stored row; definitions that no longer parse read as none.
    fn from(r: StoredUpstream) -> ServerRow {
        let bearer = (r.secret_env.is_some() || r.secret_file.is_some()).then(|| PeerAuth {
            kind: "bearer".into(),
            secret_env: r.secret_env,
            secret_file: r.secret_file,
        });
        let auth = match r.oauth {
            Some(o) => Some(UpstreamAuth::ClientCredentials(ClientCredentials {
                kind: oauth_token::KIND.into(),
                issuer: o.issuer,
                client_id: o.client_id,
                secret_env: o.secret_env,
                scope: o.scope,
                resource: o.resource,
            })),
            None => bearer.map(UpstreamAuth::Bearer),
        };
        let tools = serde_json::from_str::<Value>(&r.tools)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(PinnedTool::from_json)
            .collect();
        ServerRow {
            id: r.id,
            org_id: r.org_id,
            slug: r.slug,
            name: r.name,
            transport: r.transport,
            url: r.url,
            prefix: r.prefix,
            auth,
            timeout_ms: u64::try_from(r.timeout_ms).unwrap_or(0),
            approve_new_tools: r.approve_new_tools,
            hold_first_listing: r.hold_first_listing,
            tools,
            stored_tools: r.tools,
            protocol_version: r.protocol_version,
            health: r.health,
            last_error: r.last_error,
            checked_at: r.checked_at,
            created_at: r.created_at,
        }
    }
}

// The registry's storage, in its own types (statements in `store::upstreams`).

/// Inserts a registration; a taken slug is a conflict.
pub fn insert(conn: &mut Conn, row: &ServerRow) -> Result<(), StoreError> {
    upstreams::insert(conn, &row.to_stored())
}

/// Stores a server declared in the config file: inserted when absent,
/// else its declared settings (name, prefix, budget, approval) replace the
/// stored ones and its pins stay. A slug the org already uses for another
/// server is a conflict.
pub fn upsert_declared(conn: &mut Conn, row: &ServerRow) -> Result<(), StoreError> {
    upstreams::upsert_declared(conn, &row.to_stored())
}

/// The upstreams of an org, oldest registration first.
pub fn list(conn: &mut Conn, org_id: &str) -> Result<Vec<ServerRow>, StoreError> {
    Ok(upstreams::list(conn, org_id)?
        .into_iter()
        .map(ServerRow::from)
        .collect())
}

/// Every org's upstreams (typed actions, background refresh).
pub fn list_all(conn: &mut Conn) -> Result<Vec<ServerRow>, StoreError> {
    Ok(upstreams::list_all(conn)?
        .into_iter()
        .map(ServerRow::from)
        .collect())
}

/// The tools whose arguments the effective schema types, from every org's
/// approved pins (held definitions do not count until approved; a tool
/// hidden by a collision does not count; an unreachable server's pins
/// still do, so an outage never invalidates the policies written on its
/// tools). A tool its upstream no longer lists keeps its action, declared
/// but dropped ([`schema_gen::UNLISTED_NOTE`]), so a policy naming it
/// still validates. One entry per org and gateway name:
/// [`schema_gen::agreeing`] decides what two orgs' entries for one name
/// become.
///
/// [`schema_gen::agreeing`]: crate::policy::schema_gen::agreeing
/// [`schema_gen::UNLISTED_NOTE`]: crate::policy::schema_gen::UNLISTED_NOTE
pub fn typed_schemas(rows: &[ServerRow]) -> Vec<ToolSchema> {
    let mut out = Vec::new();
    for row in rows {
        for pinned in row.tools.iter().filter(|t| !t.hash.is_empty()) {
            if let Some(reason) = pinned.refusal() {
                tracing::warn!(upstream = %row.slug, org = %row.org_id, reason = %reason, "upstream tool refused: not offered, not typed");
                continue;
            }
            if pinned.collides_with.is_some() {
                continue;
            }
            let Some(schema @ Value::Object(_)) = pinned.definition.get("inputSchema") else {
                continue;
            };
            out.push(ToolSchema {
                name: row.tool_name(&pinned.name),
                group: Action::CallTool,
                input_schema: schema.clone(),
                dropped: pinned
                    .unlisted
                    .as_ref()
                    .map(|_| crate::policy::schema_gen::UNLISTED_NOTE.to_string()),
            });
        }
    }
    out
}

/// One upstream of an org.
pub fn get(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<ServerRow>, StoreError> {
    Ok(upstreams::get(conn, org_id, id)?.map(ServerRow::from))
}

/// Stores the row's pins (after an approval) unless the stored ones
/// changed since the row was read; false then (read again and retry).
pub fn set_tools(conn: &mut Conn, row: &mut ServerRow) -> Result<bool, StoreError> {
    let text = tools_text(&row.tools);
    let stored = upstreams::set_tools(conn, &row.id, &row.stored_tools, &text)?;
    if stored {
        row.stored_tools = text;
    }
    Ok(stored)
}

/// Deletes a registration.
pub fn delete(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    upstreams::delete(conn, org_id, id)
}

/// What listing an upstream's tools found.
#[derive(Debug, Clone)]
pub enum Listing {
    /// The tools, pinned, and the version spoken.
    Listed {
        /// Definitions.
        tools: Vec<PinnedTool>,
        /// Negotiated version.
        protocol_version: String,
    },
    /// The upstream could not be reached.
    Unreachable(String),
    /// The upstream answered something unusable.
    Invalid(String),
}

/// Stores a listing applied to `row` (a failed one keeps the last
/// definitions) unless its pins changed since the row was read; false
/// then, as [`set_tools`].
pub fn record_listing(
    conn: &mut Conn,
    row: &mut ServerRow,
    listing: &Listing,
) -> Result<bool, StoreError> {
    let text = match listing {
        Listing::Listed { tools, .. } => tools_text(tools),
        _ => String::new(),
    };
    let record = match listing {
        Listing::Listed {
            protocol_version, ..
        } => ListingRecord::Listed {
            tools: &text,
            protocol_version,
        },
        Listing::Unreachable(e) => ListingRecord::Unreachable(e),
        Listing::Invalid(e) => ListingRecord::Invalid(e),
    };
    let stored = upstreams::record_listing(conn, &row.id, &row.stored_tools, record)?;
    if stored && matches!(listing, Listing::Listed { .. }) {
        row.stored_tools = text;
    }
    Ok(stored)
}

/// Everything a call needs to reach one upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTarget {
    /// Registry row id.
    pub id: String,
    /// Org.
    pub org_id: String,
    /// Slug (Cedar `McpServer` id).
    pub slug: String,
    /// Name prefix of its tools, prompts and resources (empty: the
    /// upstream's own names).
    pub prefix: String,
    /// The endpoint as registered.
    pub url: String,
    /// The same, parsed once.
    pub endpoint: reqwest::Url,
    /// `streamable-http` or `sse`.
    pub transport: String,
    /// Credential source.
    pub auth: Option<UpstreamAuth>,
    /// Budget of one call.
    pub timeout: Duration,
}

/// One upstream tool of an org.
#[derive(Debug)]
pub struct UpstreamTool {
    /// The catalog entry (the gateway's name).
    pub spec: Arc<ToolSpec>,
    /// The server.
    pub target: Arc<ServerTarget>,
    /// The upstream's name for it.
    pub upstream_name: String,
    /// Its pinned hash.
    pub hash: String,
}

/// The upstream tool set of one org, built from its healthy rows.
#[derive(Debug, Default)]
pub struct OrgUpstreams {
    /// Tools in registration order, then listing order.
    pub tools: Vec<Arc<UpstreamTool>>,
    /// Gateway name → tool.
    pub by_name: HashMap<String, Arc<UpstreamTool>>,
    /// Servers that offer tools.
    pub servers: Vec<Arc<ServerTarget>>,
    /// Every healthy server, in registration order (resources and prompts
    /// are asked of each).
    pub healthy: Vec<Arc<ServerTarget>>,
}

impl OrgUpstreams {
    /// Builds the set; a name already taken (by an earlier server) is
    /// skipped, and so is a definition whose schema does not compile.
    pub fn build(rows: &[ServerRow]) -> OrgUpstreams {
        let mut out = OrgUpstreams::default();
        for row in rows.iter().filter(|r| r.health == health::HEALTHY) {
            let Ok(endpoint) = reqwest::Url::parse(&row.url) else {
                continue;
            };
            let target = Arc::new(ServerTarget {
                id: row.id.clone(),
                org_id: row.org_id.clone(),
                slug: row.slug.clone(),
                prefix: row.prefix.clone(),
                url: row.url.clone(),
                endpoint,
                transport: row.transport.clone(),
                auth: row.auth.clone(),
                timeout: Duration::from_millis(row.timeout_ms.max(1)),
            });
            out.healthy.push(Arc::clone(&target));
            let mut any = false;
            for pinned in row.tools.iter().filter(|t| t.offered()) {
                let name = row.tool_name(&pinned.name);
                if out.by_name.contains_key(&name) {
                    tracing::warn!(tool = %name, "upstream tool name already taken; skipped");
                    continue;
                }
                let Some(spec) = spec_for(&name, &row.slug, pinned) else {
                    continue;
                };
                let tool = Arc::new(UpstreamTool {
                    spec: Arc::new(spec),
                    target: Arc::clone(&target),
                    upstream_name: pinned.name.clone(),
                    hash: pinned.hash.clone(),
                });
                out.by_name.insert(name, Arc::clone(&tool));
                out.tools.push(tool);
                any = true;
            }
            if any {
                out.servers.push(target);
            }
        }
        out
    }
}

/// The spec of one upstream tool under the gateway's `name`: its schema,
/// its annotations as Cedar attributes, and the upstream's own listing
/// entry renamed.
fn spec_for(name: &str, slug: &str, pinned: &PinnedTool) -> Option<ToolSpec> {
    let def = &pinned.definition;
    let description = def
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let schema = match def.get("inputSchema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({ "type": "object" }),
    };
    let hint = |k: &str| {
        def.get("annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_bool)
    };
    let title = def
        .get("annotations")
        .and_then(|a| a.get("title"))
        .or_else(|| def.get("title"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let read_only = hint("readOnlyHint").unwrap_or(false);
    let facts = UpstreamToolFacts {
        server: slug.to_string(),
        destructive: hint("destructiveHint").unwrap_or(!read_only),
        open_world: hint("openWorldHint").unwrap_or(true),
        title,
    };
    let mut listing: Map<String, Value> = def.as_object().cloned().unwrap_or_default();
    listing.insert("name".into(), name.into());
    listing.insert("inputSchema".into(), schema.clone());
    match ToolSpec::new(name, description, schema, "upstream", read_only) {
        Ok(spec) => Some(spec.with_upstream(facts, &Value::Object(listing))),
        Err(e) => {
            tracing::warn!(tool = %name, error = %e, "upstream tool skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_ignores_key_order_and_sees_every_pinned_member() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"a": {}}}});
        let b = json!({"inputSchema": {"properties": {"a": {}}, "type": "object"}, "description": "d", "name": "t"});
        assert_eq!(definition_hash(&a), definition_hash(&b));
        let c = json!({"name": "t", "description": "e", "inputSchema": {"type": "object", "properties": {"a": {}}}});
        assert_ne!(definition_hash(&a), definition_hash(&c));
        let d = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"a": {}}}, "annotations": {"destructiveHint": true}});
        assert_ne!(definition_hash(&a), definition_hash(&d));
    }

    fn pins(names: impl Iterator<Item = String>) -> Vec<PinnedTool> {
        names
            .filter_map(|n| PinnedTool::pin(json!({"name": n, "inputSchema": {"type": "object"}})))
            .collect()
    }

    #[test]
    fn unlisted_pins_are_kept_up_to_their_bound_and_a_never_approved_one_is_forgotten() {
        let first = pins((0..=MAX_UNLISTED).map(|i| format!("t{i}")));
        let (mut kept, _) = merge(&[], first, true);
        let new = PinnedTool::pin(json!({"name": "new"})).unwrap();
        let (held, _) = merge(&kept, vec![new], false);
        assert!(held.iter().any(|p| p.name == "new" && p.held.is_some()));
        // One more approved tool than the bound stops being listed: the
        // bound is kept, every kept pin unlisted and not offered; the held
        // tool that was never approved is forgotten when it goes too.
        kept.extend(held.into_iter().filter(|p| p.name == "new"));
        let (after, _) = merge(&kept, Vec::new(), false);
        assert_eq!(after.len(), MAX_UNLISTED);
        assert!(after.iter().all(|p| p.unlisted.is_some() && !p.offered()));
        assert!(!after.iter().any(|p| p.name == "new"));
        // Listed again as pinned, a tool is offered again; the pins round-trip.
        let back = pins(std::iter::once(after[0].name.clone()));
        let (again, _) = merge(&after, back, false);
        assert!(again[0].offered(), "{again:?}");
        let text = tools_text(&after);
        assert!(text.contains("unlistedAt"));
    }
}
