//! Stdio upstream servers declared in the config file (`[[upstreams]]`):
//! checked once at start-up and turned into this instance's
//! [`StdioServer`]s, keyed by their registry row id.
//!
//! Decisions (see also `README.md`, Declared servers):
//! - the row id is `stdio-<org>-<slug>` (a slug has no `-`, so two
//!   declarations never share one): every instance with the same config
//!   names the same row, and each runs its own child;
//! - a declaration the config cannot mean (no command, a bad name, prefix
//!   or budget, an `env` name that cannot be one, the same slug twice for
//!   an org) stops the start-up with a message naming it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::stdio::{Spawn, StdioServer};
use crate::a2a::card;
use crate::config::DeclaredUpstream;

/// One declared server on this instance.
#[derive(Debug)]
pub struct Declared {
    /// Registry row id.
    pub id: String,
    /// Owning org.
    pub org: String,
    /// Cedar `McpServer` id.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Tool name prefix.
    pub prefix: String,
    /// Budget of one call.
    pub timeout: Duration,
    /// `approveNewTools` as declared (unset: the first listing approved,
    /// later new tools held; see `registry::approves_new`).
    pub approve_new_tools: Option<bool>,
    /// The child.
    pub server: Arc<StdioServer>,
}

/// The row id of a declared server.
pub fn row_id(org: &str, slug: &str) -> String {
    format!("stdio-{org}-{slug}")
}

/// Checks every declaration; `max_bytes` bounds each answer line and
/// `default_ms` / `max_ms` are the call budget's default and bound.
pub fn check(
    list: &[DeclaredUpstream],
    max_bytes: usize,
    default_ms: u64,
    max_ms: u64,
) -> Result<HashMap<String, Arc<Declared>>, String> {
    let mut out = HashMap::new();
    for (i, d) in list.iter().enumerate() {
        let at = format!("[[upstreams]] #{} (`{}`)", i + 1, d.name);
        let declared = one(d, max_bytes, default_ms, max_ms).map_err(|e| format!("{at}: {e}"))?;
        if out.contains_key(&declared.id) {
            return Err(format!(
                "{at}: org `{}` already declares a server with slug `{}`",
                d.org, declared.slug
            ));
        }
        out.insert(declared.id.clone(), Arc::new(declared));
    }
    Ok(out)
}

fn one(
    d: &DeclaredUpstream,
    max_bytes: usize,
    default_ms: u64,
    max_ms: u64,
) -> Result<Declared, String> {
    if d.org.trim().is_empty() {
        return Err("`org` is required".into());
    }
    if d.command.trim().is_empty() {
        return Err("`command` is required".into());
    }
    if let Some(bad) = d
        .env
        .keys()
        .find(|k| k.is_empty() || k.contains(['=', '\0']))
    {
        return Err(format!("`env` name `{bad}` is not a variable name"));
    }
    if d.env.values().any(|v| v.contains('\0')) {
        return Err("an `env` value holds a NUL byte".into());
    }
    let slug = card::slugify(&d.name);
    if slug.is_empty() || slug.len() > card::MAX_SLUG {
        return Err(format!(
            "`name` must have letters or digits and make a namespace of at most {} characters",
            card::MAX_SLUG
        ));
    }
    let prefix = match &d.prefix {
        None => slug.clone(),
        Some(p) if p.is_empty() || (card::slugify(p) == *p && p.len() <= card::MAX_SLUG) => {
            p.clone()
        }
        Some(p) => {
            return Err(format!(
                "`prefix` must be empty or lowercase letters, digits and `_`, not `{p}`"
            ));
        }
    };
    let ms = d.timeout_ms.unwrap_or(default_ms);
    if ms == 0 || ms > max_ms {
        return Err(format!("`timeoutMs` must be 1 to {max_ms}"));
    }
    let spawn = Spawn {
        command: d.command.clone(),
        args: d.args.clone(),
        env: d.env.clone(),
    };
    Ok(Declared {
        id: row_id(&d.org, &slug),
        org: d.org.clone(),
        server: Arc::new(StdioServer::new(&slug, spawn, max_bytes)),
        slug,
        name: d.name.trim().to_string(),
        prefix,
        timeout: Duration::from_millis(ms),
        approve_new_tools: d.approve_new_tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(name: &str, command: &str) -> DeclaredUpstream {
        DeclaredUpstream {
            org: "acme".into(),
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: Default::default(),
            prefix: None,
            timeout_ms: None,
            approve_new_tools: None,
        }
    }

    #[test]
    fn declarations_are_checked() {
        let ok = check(&[decl("Files", "npx")], 1024, 30_000, 600_000).unwrap();
        let d = &ok["stdio-acme-files"];
        assert_eq!((d.slug.as_str(), d.prefix.as_str()), ("files", "files"));
        assert_eq!(d.timeout, Duration::from_secs(30));
        let err = check(&[decl("files", " ")], 1024, 30_000, 600_000).unwrap_err();
        assert!(err.contains("`command` is required"), "{err}");
        let err = check(
            &[decl("files", "npx"), decl("Files", "node")],
            1024,
            30_000,
            600_000,
        )
        .unwrap_err();
        assert!(err.contains("#2"), "{err}");
        let mut long = decl("files", "npx");
        long.timeout_ms = Some(600_001);
        assert!(check(&[long], 1024, 30_000, 600_000).is_err());
        let mut env = decl("files", "npx");
        env.env.insert("A=B".into(), "x".into());
        assert!(check(&[env], 1024, 30_000, 600_000).is_err());
    }
}
