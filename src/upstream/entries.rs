//! Resources, resource templates and prompts of an org's upstream servers,
//! under the gateway's names. Nothing here asks Cedar: `src/mcp/entries.rs`
//! decides each entry before it is listed and each read before this
//! module sends it.
//!
//! - **Names.** A prompt is `<prefix>.<name>` like a tool; a resource (and
//!   a template) is `<prefix>+<uri>`, the upstream's URI behind the
//!   server's prefix and a `+` (`everything+demo://resource/static/1`):
//!   a slug never holds `+`, so the URI splits back unambiguously, and a
//!   slug of letters and digits keeps it a valid URI scheme. With
//!   `prefix: ""` names and URIs are exactly the upstream's.
//! - **Resolution.** A gateway URI or prompt name belongs to the first
//!   server (registration order) whose non-empty prefix it carries, else
//!   to the first server registered without a prefix; the same order
//!   decides which entry is listed when two servers give one name.
//! - **Live, not pinned.** Unlike tools, these lists are asked of the
//!   upstreams at each list request and not pinned: a resource or prompt
//!   carries no schema or annotations a policy decides on (a policy sees
//!   the name or URI only), and what it returns is content that changes by
//!   nature. Each list reads every page of every healthy server within
//!   the server's timeout; a server that does not offer the list (-32601)
//!   adds nothing, one that fails is left out of that list with a warning.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Upstreams;
use super::client::ClientError;
use super::registry::{OrgUpstreams, ServerTarget, gateway_name};
use super::{MAX_LIST_PAGES, millis};
use crate::mcp::jsonrpc::METHOD_NOT_FOUND;

/// Which list of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    Templates,
    /// `prompts/list`.
    Prompts,
}

impl EntryKind {
    /// The list method.
    pub fn method(self) -> &'static str {
        match self {
            EntryKind::Resources => "resources/list",
            EntryKind::Templates => "resources/templates/list",
            EntryKind::Prompts => "prompts/list",
        }
    }

    /// The member of the list result holding the entries.
    pub fn key(self) -> &'static str {
        match self {
            EntryKind::Resources => "resources",
            EntryKind::Templates => "resourceTemplates",
            EntryKind::Prompts => "prompts",
        }
    }

    /// The member of an entry that names it.
    pub fn id_field(self) -> &'static str {
        match self {
            EntryKind::Resources => "uri",
            EntryKind::Templates => "uriTemplate",
            EntryKind::Prompts => "name",
        }
    }

    /// Whether entries are prompts (else resources).
    pub fn is_prompt(self) -> bool {
        self == EntryKind::Prompts
    }
}

/// One listed entry under the gateway's name.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its server.
    pub target: Arc<ServerTarget>,
    /// The gateway's name (URI, template or prompt name).
    pub id: String,
    /// The upstream's own.
    pub upstream: String,
    /// The upstream's entry with its name replaced by the gateway's.
    pub entry: Value,
}

/// The gateway URI of an upstream resource URI (or template).
pub fn gateway_uri(prefix: &str, uri: &str) -> String {
    if prefix.is_empty() {
        uri.to_string()
    } else {
        format!("{prefix}+{uri}")
    }
}

/// The gateway's name of an entry of `kind`.
pub fn gateway_id(kind: EntryKind, prefix: &str, upstream: &str) -> String {
    if kind.is_prompt() {
        gateway_name(prefix, upstream)
    } else {
        gateway_uri(prefix, upstream)
    }
}

/// The server a gateway URI (`prompt` false) or prompt name belongs to, and
/// the upstream's own URI or name (see the module doc).
pub fn resolve(set: &OrgUpstreams, prompt: bool, id: &str) -> Option<(Arc<ServerTarget>, String)> {
    let separator = if prompt { '.' } else { '+' };
    let prefixed = set.healthy.iter().find_map(|t| {
        let rest = id.strip_prefix(t.prefix.as_str())?;
        let rest = rest.strip_prefix(separator)?;
        (!t.prefix.is_empty()).then(|| (Arc::clone(t), rest.to_string()))
    });
    prefixed.or_else(|| {
        set.healthy
            .iter()
            .find(|t| t.prefix.is_empty())
            .map(|t| (Arc::clone(t), id.to_string()))
    })
}

/// Renames the `uri` of each of a `resources/read` result's `contents` to
/// the gateway's URI (nothing changes without a prefix).
pub fn renamed_contents(prefix: &str, result: &mut Value) {
    if prefix.is_empty() {
        return;
    }
    let Some(Value::Array(contents)) = result.get_mut("contents") else {
        return;
    };
    for content in contents {
        if let Some(Value::String(uri)) = content.get_mut("uri") {
            *uri = gateway_uri(prefix, uri);
        }
    }
}

impl Upstreams {
    /// The entries of `kind` of every healthy server of the org, asked
    /// concurrently, in registration order then listing order; a name
    /// given twice is listed once (first server wins).
    pub async fn list_entries(self: &Arc<Self>, set: &OrgUpstreams, kind: EntryKind) -> Vec<Entry> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, target) in set.healthy.iter().enumerate() {
            let (me, target) = (Arc::clone(self), Arc::clone(target));
            tasks.spawn(async move { (i, me.list_one(&target, kind).await) });
        }
        let mut lists = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(list) => lists.push(list),
                Err(e) => tracing::error!(error = %e, "upstream listing task failed"),
            }
        }
        lists.sort_by_key(|(i, _)| *i);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for entry in lists.into_iter().flat_map(|(_, list)| list) {
            if seen.insert(entry.id.clone()) {
                out.push(entry);
            } else {
                tracing::warn!(entry = %entry.id, server = %entry.target.slug, "upstream entry name already listed; left out");
            }
        }
        out
    }

    /// One server's entries of `kind`, every page, within its timeout.
    async fn list_one(&self, target: &Arc<ServerTarget>, kind: EntryKind) -> Vec<Entry> {
        let budget = target.timeout;
        let listed = match tokio::time::timeout(budget, self.pages(target, kind)).await {
            Ok(listed) => listed,
            Err(_) => Err(ClientError::Timeout(millis(budget))),
        };
        match listed {
            Ok(entries) => entries,
            Err(ClientError::Remote { code, .. }) if code == METHOD_NOT_FOUND => Vec::new(),
            Err(e) => {
                tracing::warn!(server = %target.slug, method = kind.method(), error = %e, "upstream list failed; its entries are left out");
                Vec::new()
            }
        }
    }

    async fn pages(
        &self,
        target: &Arc<ServerTarget>,
        kind: EntryKind,
    ) -> Result<Vec<Entry>, ClientError> {
        let mut out = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let mut page = self
                .forward(target, kind.method(), params, Default::default())
                .await?;
            let Some(Value::Array(listed)) = page.get_mut(kind.key()).map(Value::take) else {
                return Err(ClientError::Invalid(format!(
                    "the upstream's {} result has no `{}` array",
                    kind.method(),
                    kind.key()
                )));
            };
            out.extend(listed.into_iter().filter_map(|e| entry(target, kind, e)));
            cursor = page.get("nextCursor").filter(|c| !c.is_null()).cloned();
            if cursor.is_none() {
                break;
            }
        }
        Ok(out)
    }
}

/// An upstream entry under the gateway's name (an entry without a string
/// name is skipped).
fn entry(target: &Arc<ServerTarget>, kind: EntryKind, mut value: Value) -> Option<Entry> {
    let field = kind.id_field();
    let upstream = value.get(field)?.as_str()?.to_string();
    let id = gateway_id(kind, &target.prefix, &upstream);
    if let Value::Object(map) = &mut value {
        map.insert(field.into(), id.clone().into());
    }
    Some(Entry {
        target: Arc::clone(target),
        id,
        upstream,
        entry: value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target(slug: &str, prefix: &str) -> Arc<ServerTarget> {
        Arc::new(ServerTarget {
            id: slug.into(),
            org_id: "acme".into(),
            slug: slug.into(),
            prefix: prefix.into(),
            url: "http://127.0.0.1:1/mcp".into(),
            endpoint: reqwest::Url::parse("http://127.0.0.1:1/mcp")
                .unwrap_or_else(|_| unreachable!("constant URL")),
            transport: "streamable-http".into(),
            auth: None,
            timeout: Duration::from_secs(1),
        })
    }

    #[test]
    fn names_split_back_to_their_server() {
        let set = OrgUpstreams {
            healthy: vec![
                target("docs", "docs"),
                target("docs_b", "docs_b"),
                target("raw", ""),
            ],
            ..OrgUpstreams::default()
        };
        let (t, uri) = resolve(&set, false, "docs+file:///a.md").unwrap_or_else(|| unreachable!());
        assert_eq!((t.slug.as_str(), uri.as_str()), ("docs", "file:///a.md"));
        let (t, uri) = resolve(&set, false, "docs_b+x://y").unwrap_or_else(|| unreachable!());
        assert_eq!((t.slug.as_str(), uri.as_str()), ("docs_b", "x://y"));
        let (t, name) = resolve(&set, true, "docs.review.code").unwrap_or_else(|| unreachable!());
        assert_eq!((t.slug.as_str(), name.as_str()), ("docs", "review.code"));
        let (t, uri) = resolve(&set, false, "test://static").unwrap_or_else(|| unreachable!());
        assert_eq!((t.slug.as_str(), uri.as_str()), ("raw", "test://static"));
        let prefixed_only = OrgUpstreams {
            healthy: vec![target("docs", "docs")],
            ..OrgUpstreams::default()
        };
        assert!(resolve(&prefixed_only, false, "test://static").is_none());
        assert!(resolve(&prefixed_only, true, "docs").is_none());
    }

    #[test]
    fn read_contents_take_the_gateway_uri() {
        let mut r = json!({"contents": [{"uri": "x://1", "text": "t"}]});
        renamed_contents("docs", &mut r);
        assert_eq!(r["contents"][0]["uri"], "docs+x://1");
        renamed_contents("", &mut r);
        assert_eq!(r["contents"][0]["uri"], "docs+x://1");
    }
}
