//! The agent-card registry: registered peers (one [`CardRow`] each, kept
//! by `store::a2a_cards`), the fetch that turns a peer URL into a validated
//! card and a health, and the per-org tool set built from the healthy rows.
//!
//! **Architecture Invariant:** a peer credential is stored only as the
//! *name* of an environment variable or file; its value is read when a
//! request needs it and never written anywhere.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::card::{self, ParsedCard, ProtocolVersion};
use crate::store::StoreError;
use crate::store::a2a_cards::{self, FetchRecord, StoredCard};
use crate::store::db::Conn;
use crate::tools::ToolSpec;

/// Longest secret accepted from an environment variable or file.
const MAX_SECRET_BYTES: usize = 8 * 1024;

/// Longest per-org bridge timeout accepted (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Where a peer's bearer credential is found. Only the name is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerAuth {
    /// Always `bearer`: the credential is sent as `Authorization: Bearer …`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Environment variable holding the token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// Absolute path of a file holding the token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<String>,
}

/// Why a registration's `auth` is refused (answered as 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Only bearer credentials are supported.
    #[error("`auth.type` must be `bearer`, not `{0}`")]
    NotBearer(String),
    /// The variable name is empty, too long or has other characters.
    #[error("`auth.secretEnv` must be an environment variable name (A-Z a-z 0-9 _)")]
    BadEnvName,
    /// The file path is relative or too long.
    #[error("`auth.secretFile` must be an absolute path")]
    RelativeFile,
    /// Neither or both sources are given.
    #[error("`auth` needs exactly one of `secretEnv` or `secretFile`")]
    NotOneSource,
}

/// Why a peer's credential could not be read when a request needed it.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The environment variable is not set.
    #[error("secret environment variable `{0}` is not set")]
    EnvUnset(String),
    /// The file could not be read.
    #[error("cannot read secret file `{path}`: {source}")]
    File {
        /// The configured path.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is larger than any token.
    #[error("secret file `{0}` is larger than {max} bytes", max = MAX_SECRET_BYTES)]
    FileTooLarge(String),
    /// No source is configured.
    #[error("no secret source configured")]
    NoSource,
    /// The secret is blank.
    #[error("the peer secret is empty")]
    Empty,
    /// The secret is too long or has control characters.
    #[error("the peer secret is not a usable bearer token")]
    Unusable,
}

impl PeerAuth {
    /// Checks the shape: `bearer`, exactly one source, a plausible name.
    pub fn validate(&self) -> Result<(), AuthError> {
        if self.kind != "bearer" {
            return Err(AuthError::NotBearer(self.kind.clone()));
        }
        match (&self.secret_env, &self.secret_file) {
            (Some(env), None) => {
                let ok = !env.is_empty()
                    && env.len() <= 128
                    && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ok {
                    return Err(AuthError::BadEnvName);
                }
                Ok(())
            }
            (None, Some(path)) => {
                if !std::path::Path::new(path).is_absolute() || path.len() > 4096 {
                    return Err(AuthError::RelativeFile);
                }
                Ok(())
            }
            _ => Err(AuthError::NotOneSource),
        }
    }

    /// Reads the credential now.
    pub fn resolve(&self) -> Result<String, SecretError> {
        let raw = match (&self.secret_env, &self.secret_file) {
            (Some(env), _) => std::env::var(env).map_err(|_| SecretError::EnvUnset(env.clone()))?,
            (None, Some(path)) => read_secret_file(path)?,
            (None, None) => return Err(SecretError::NoSource),
        };
        let token = raw.trim();
        if token.is_empty() {
            return Err(SecretError::Empty);
        }
        if token.len() > MAX_SECRET_BYTES || token.chars().any(|c| c.is_control()) {
            return Err(SecretError::Unusable);
        }
        Ok(token.to_string())
    }
}

/// Reads a secret file, refusing one larger than any token before reading.
fn read_secret_file(path: &str) -> Result<String, SecretError> {
    let unreadable = |source| SecretError::File {
        path: path.to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if meta.len() > MAX_SECRET_BYTES as u64 {
        return Err(SecretError::FileTooLarge(path.to_string()));
    }
    std::fs::read_to_string(path).map_err(unreadable)
}

/// Health of a registered peer.
pub mod health {
    /// The card was fetched and is valid: its skills are tools.
    pub const HEALTHY: &str = "healthy";
    /// The card could not be fetched: no tools until a refresh succeeds.
    pub const UNREACHABLE: &str = "unreachable";
    /// A card was fetched but is not usable: no tools.
    pub const INVALID: &str = "invalid";
}

/// One registered peer, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct CardRow {
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
    /// Protocol the operator pinned, if any.
    pub pinned_version: Option<ProtocolVersion>,
    /// Where the credential is found.
    pub auth: Option<PeerAuth>,
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

impl CardRow {
    /// The stored card, parsed (None when none is stored or it no longer
    /// parses).
    pub fn parsed(&self) -> Option<ParsedCard> {
        let text = self.card.as_deref()?;
        let value: Value = serde_json::from_str(text).ok()?;
        card::parse(&value).ok()
    }

    /// The API view: names of where secrets live, never their values.
    pub fn to_api(&self) -> Value {
        let parsed = self.parsed();
        let chosen = parsed
            .as_ref()
            .and_then(|p| p.choose(self.pinned_version).ok().cloned());
        let exposed = self.health == health::HEALTHY;
        let skills: Vec<Value> = parsed
            .as_ref()
            .map(|p| {
                p.skills
                    .iter()
                    .map(|s| {
                        json!({
                            "id": s.id,
                            "name": s.name,
                            "tool": card::tool_name(&self.slug, &s.id),
                            "legacyAlias": card::legacy_alias(&self.slug, &s.id),
                            "hasInputSchema": s.input_schema.is_some(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "id": self.id,
            "orgId": self.org_id,
            "slug": self.slug,
            "name": self.name,
            "url": self.url,
            "cardUrl": self.card_url,
            "interfaceUrl": chosen.as_ref().map(|i| i.url.clone()),
            "protocolVersion": chosen.as_ref().map(|i| i.version.as_str()),
            "pinnedProtocolVersion": self.pinned_version.map(ProtocolVersion::as_str),
            "auth": self.auth,
            "health": self.health,
            "lastError": self.last_error,
            "checkedAt": self.checked_at,
            "createdAt": self.created_at,
            "exposed": exposed,
            "skills": skills,
            "warnings": parsed.map(|p| p.warnings).unwrap_or_default(),
        })
    }
}

impl CardRow {
    /// The row as the store keeps it: the pinned generation as its text,
    /// the credential source as the names it is kept under.
    fn to_stored(&self) -> StoredCard {
        StoredCard {
            id: self.id.clone(),
            org_id: self.org_id.clone(),
            slug: self.slug.clone(),
            name: self.name.clone(),
            url: self.url.clone(),
            pinned_version: self.pinned_version.map(|v| v.as_str().to_string()),
            secret_env: self.auth.as_ref().and_then(|a| a.secret_env.clone()),
            secret_file: self.auth.as_ref().and_then(|a| a.secret_file.clone()),
            card: self.card.clone(),
            card_url: self.card_url.clone(),
            health: self.health.clone(),
            last_error: self.last_error.clone(),
            checked_at: self.checked_at.clone(),
            created_at: self.created_at.clone(),
        }
    }
}

impl From<StoredCard> for CardRow {
    /// A stored row with its pinned generation parsed (an unknown one reads
    /// as unpinned) and its credential source as a bearer [`PeerAuth`].
    fn from(r: StoredCard) -> CardRow {
        let auth = if r.secret_env.is_some() || r.secret_file.is_some() {
            Some(PeerAuth {
                kind: "bearer".into(),
                secret_env: r.secret_env,
                secret_file: r.secret_file,
            })
        } else {
            None
        };
        CardRow {
            id: r.id,
            org_id: r.org_id,
            slug: r.slug,
            name: r.name,
            url: r.url,
            pinned_version: r.pinned_version.as_deref().and_then(ProtocolVersion::parse),
            auth,
            card: r.card,
            card_url: r.card_url,
            health: r.health,
            last_error: r.last_error,
            checked_at: r.checked_at,
            created_at: r.created_at,
        }
    }
}

// The registry's storage, in its own types. The statements are in
// `store::a2a_cards`; these only convert, so callers keep one vocabulary.

/// Inserts a registration; a taken slug is a conflict.
pub fn insert(conn: &mut Conn, c: &CardRow) -> Result<(), StoreError> {
    a2a_cards::insert(conn, &c.to_stored())
}

/// The peers of an org, oldest registration first.
pub fn list(conn: &mut Conn, org_id: &str) -> Result<Vec<CardRow>, StoreError> {
    let rows = a2a_cards::list(conn, org_id)?;
    Ok(rows.into_iter().map(CardRow::from).collect())
}

/// Every registered peer (the background refresh).
pub fn list_all(conn: &mut Conn) -> Result<Vec<CardRow>, StoreError> {
    let rows = a2a_cards::list_all(conn)?;
    Ok(rows.into_iter().map(CardRow::from).collect())
}

/// One peer of an org.
pub fn get(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<CardRow>, StoreError> {
    Ok(a2a_cards::get(conn, org_id, id)?.map(CardRow::from))
}

/// Deregisters a peer.
pub fn delete(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    a2a_cards::delete(conn, org_id, id)
}

/// Stores a fetch result. A failed fetch keeps the last valid card (for the
/// API) but the health hides its tools.
pub fn record_fetch(conn: &mut Conn, id: &str, fetched: &Fetched) -> Result<(), StoreError> {
    let card_text;
    let record = match fetched {
        Fetched::Valid { card, card_url, .. } => {
            card_text = card.to_string();
            FetchRecord::Valid {
                card: &card_text,
                card_url,
            }
        }
        Fetched::Unreachable(e) => FetchRecord::Unreachable(e),
        Fetched::Invalid(e) => FetchRecord::Invalid(e),
    };
    a2a_cards::record_fetch(conn, id, record)
}

/// An org's bridge timeout, if it set one.
pub fn timeout_ms(conn: &mut Conn, org_id: &str) -> Result<Option<u64>, StoreError> {
    a2a_cards::timeout_ms(conn, org_id)
}

/// Sets an org's bridge timeout.
pub fn set_timeout_ms(conn: &mut Conn, org_id: &str, ms: u64) -> Result<(), StoreError> {
    a2a_cards::set_timeout_ms(conn, org_id, ms)
}

/// What fetching a card found.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// A valid card.
    Valid {
        /// The card as served.
        card: Value,
        /// Where it was found.
        card_url: String,
        /// The parsed card.
        parsed: Box<ParsedCard>,
    },
    /// No card could be fetched (network, HTTP status, timeout).
    Unreachable(String),
    /// A card was fetched but is unusable.
    Invalid(String),
}

/// The well-known card paths, newest first.
const CARD_PATHS: [&str; 2] = ["/.well-known/agent-card.json", "/.well-known/agent.json"];

/// Fetches and validates the card of the peer at `base`, falling back from
/// `agent-card.json` to `agent.json`. `pinned` must be declared by the card.
pub async fn fetch(
    client: &reqwest::Client,
    base: &str,
    bearer: Option<&str>,
    pinned: Option<ProtocolVersion>,
    timeout: Duration,
    max_bytes: usize,
) -> Fetched {
    let base = base.trim_end_matches('/');
    let mut last = String::new();
    for path in CARD_PATHS {
        let url = format!("{base}{path}");
        // Ask for the newest card shape: SDKs serving both generations
        // answer the 1.0 card (which keeps skill `inputSchema`s).
        let mut req = client
            .get(&url)
            .header("A2A-Version", "1.0")
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(timeout);
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let mut source: &dyn std::error::Error = &e;
                while let Some(next) = source.source() {
                    source = next;
                }
                return Fetched::Unreachable(format!("cannot fetch `{url}`: {source}"));
            }
        };
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            last = format!("`{url}` answered HTTP 404");
            continue;
        }
        if !status.is_success() {
            return Fetched::Unreachable(format!("`{url}` answered HTTP {}", status.as_u16()));
        }
        let body = match read_limited(resp, max_bytes).await {
            Ok(b) => b,
            Err(e) => return Fetched::Unreachable(format!("cannot read `{url}`: {e}")),
        };
        let card: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return Fetched::Invalid(format!("`{url}` is not JSON: {e}")),
        };
        let parsed = match card::parse(&card) {
            Ok(p) => p,
            Err(e) => return Fetched::Invalid(format!("`{url}`: {e}")),
        };
        if let Err(e) = parsed.choose(pinned) {
            return Fetched::Invalid(format!("`{url}`: {e}"));
        }
        return Fetched::Valid {
            card,
            card_url: url,
            parsed: Box::new(parsed),
        };
    }
    Fetched::Unreachable(format!("no agent card found: {last}"))
}

/// Why a card body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The connection failed mid-body.
    #[error("{0}")]
    Read(#[from] reqwest::Error),
    /// The body is larger than the configured limit.
    #[error("the card is larger than {0} bytes")]
    TooLarge(usize),
}

async fn read_limited(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max {
            return Err(BodyError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Everything the bridge needs to call one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerTarget {
    /// Registry row id.
    pub card_id: String,
    /// Org.
    pub org_id: String,
    /// Slug (Cedar `PeerAgent` id).
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Registered base URL (the `PeerAgent`'s `url`).
    pub base_url: String,
    /// Interface URL the card declares for the chosen version, as declared
    /// (what events carry).
    pub interface_url: String,
    /// The same URL parsed once, for every call to send to.
    pub interface: reqwest::Url,
    /// Chosen protocol generation.
    pub version: ProtocolVersion,
    /// Credential source.
    pub auth: Option<PeerAuth>,
}

/// One A2A tool of an org.
#[derive(Debug)]
pub struct A2aTool {
    /// The catalog entry (canonical name).
    pub spec: Arc<ToolSpec>,
    /// The peer.
    pub target: Arc<PeerTarget>,
    /// The skill it invokes.
    pub skill_id: String,
    /// Its legacy alias (None when another tool already took that name).
    pub alias: Option<String>,
}

/// The A2A tool set of one org, built from its healthy peers.
#[derive(Debug, Default)]
pub struct OrgPeers {
    /// Tools in registration order, then skill order.
    pub tools: Vec<Arc<A2aTool>>,
    /// Canonical name → tool.
    pub by_name: HashMap<String, Arc<A2aTool>>,
    /// Legacy alias → canonical name.
    pub aliases: HashMap<String, String>,
    /// Peers that expose tools.
    pub peers: Vec<Arc<PeerTarget>>,
    /// Wall-clock budget of one call.
    pub timeout: Duration,
}

impl OrgPeers {
    /// Builds the set; names already taken (by an earlier peer or skill)
    /// are skipped, so registration is idempotent by name.
    pub fn build(rows: &[CardRow], timeout: Duration) -> OrgPeers {
        let mut out = OrgPeers {
            timeout,
            ..OrgPeers::default()
        };
        for row in rows.iter().filter(|r| r.health == health::HEALTHY) {
            let Some(parsed) = row.parsed() else {
                continue;
            };
            let Ok(iface) = parsed.choose(row.pinned_version) else {
                continue;
            };
            // Card validation accepted only URLs that parse.
            let Ok(interface) = reqwest::Url::parse(&iface.url) else {
                continue;
            };
            let target = Arc::new(PeerTarget {
                card_id: row.id.clone(),
                org_id: row.org_id.clone(),
                slug: row.slug.clone(),
                name: row.name.clone(),
                base_url: row.url.clone(),
                interface_url: iface.url.clone(),
                interface,
                version: iface.version,
                auth: row.auth.clone(),
            });
            let mut any = false;
            for skill in &parsed.skills {
                let name = card::tool_name(&row.slug, &skill.id);
                if out.by_name.contains_key(&name) || out.aliases.contains_key(&name) {
                    tracing::warn!(tool = %name, "A2A tool name already registered; skipped");
                    continue;
                }
                let mut description = format!(
                    "Invokes the {} skill on remote A2A agent {}",
                    skill.id, row.name
                );
                if !skill.description.is_empty() {
                    description.push_str(". ");
                    description.push_str(&skill.description);
                }
                let spec = match ToolSpec::new(
                    &name,
                    &description,
                    card::input_schema(skill),
                    "a2a",
                    false,
                ) {
                    Ok(s) => s.with_peer(&row.slug),
                    Err(e) => {
                        tracing::warn!(tool = %name, error = %e, "A2A skill skipped");
                        continue;
                    }
                };
                let alias = card::legacy_alias(&row.slug, &skill.id);
                let alias = if out.by_name.contains_key(&alias) || out.aliases.contains_key(&alias)
                {
                    tracing::warn!(alias = %alias, "A2A legacy alias already registered; skipped");
                    None
                } else {
                    out.aliases.insert(alias.clone(), name.clone());
                    Some(alias)
                };
                let tool = Arc::new(A2aTool {
                    spec: Arc::new(spec),
                    target: Arc::clone(&target),
                    skill_id: skill.id.clone(),
                    alias,
                });
                out.by_name.insert(name, Arc::clone(&tool));
                out.tools.push(tool);
                any = true;
            }
            if any {
                out.peers.push(target);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, slug: &str, health: &str, skills: &[&str]) -> CardRow {
        let card = json!({
            "name": slug,
            "url": format!("http://127.0.0.1:9/{slug}"),
            "skills": skills.iter().map(|s| json!({"id": s})).collect::<Vec<_>>(),
        });
        CardRow {
            id: id.into(),
            org_id: "acme".into(),
            slug: slug.into(),
            name: slug.into(),
            url: "http://127.0.0.1:9".into(),
            pinned_version: None,
            auth: None,
            card: Some(card.to_string()),
            card_url: None,
            health: health.into(),
            last_error: None,
            checked_at: String::new(),
            created_at: String::new(),
        }
    }

    #[test]
    fn names_already_taken_are_skipped_and_unhealthy_peers_expose_nothing() {
        // `a_b` + `c` and `a` + `b-c` share the alias `a2a_a_b_c`.
        let rows = [
            row("1", "a_b", health::HEALTHY, &["c"]),
            row("2", "a", health::HEALTHY, &["b-c", "d"]),
            row("3", "down", health::UNREACHABLE, &["x"]),
            row("4", "bad", health::INVALID, &["y"]),
        ];
        let peers = OrgPeers::build(&rows, Duration::from_secs(1));
        let names: Vec<&str> = peers.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["a_b.c", "a.b-c", "a.d"]);
        assert_eq!(
            peers.aliases.get("a2a_a_b_c").map(String::as_str),
            Some("a_b.c")
        );
        assert_eq!(peers.by_name["a.b-c"].alias, None);
        assert_eq!(peers.by_name["a.d"].alias.as_deref(), Some("a2a_a_d"));
        assert_eq!(peers.peers.len(), 2);
        // Building again from the same rows gives the same set.
        let again = OrgPeers::build(&rows, Duration::from_secs(1));
        assert_eq!(again.tools.len(), 3);
    }

    #[test]
    fn auth_sources_are_checked() {
        let auth = |env: Option<&str>, file: Option<&str>| PeerAuth {
            kind: "bearer".into(),
            secret_env: env.map(str::to_string),
            secret_file: file.map(str::to_string),
        };
        assert!(auth(Some("TOKEN_1"), None).validate().is_ok());
        assert!(auth(Some("BAD-NAME"), None).validate().is_err());
        assert!(auth(None, Some("/run/secrets/t")).validate().is_ok());
        assert!(auth(None, Some("rel/t")).validate().is_err());
        assert!(auth(Some("A"), Some("/x")).validate().is_err());
        assert!(auth(None, None).validate().is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "  \n").unwrap();
        let empty = auth(None, Some(path.to_str().unwrap()));
        assert!(empty.resolve().unwrap_err().to_string().contains("empty"));
    }
}
