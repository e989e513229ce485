//! `@requires_scope("…")`: the OAuth scopes a policy says would change its
//! answer, read once per bundle, so a denied person can be told which
//! scopes to ask their identity provider for (a step-up) instead of a
//! plain refusal.
//!
//! The annotation goes on a `permit` or a `forbid` whose condition reads
//! `context.token.scopes`, e.g.
//!
//! ```cedar
//! @id("admin-tools-need-admin-scope")
//! @requires_scope("mcp:admin")
//! forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
//! unless { context has token && context.token.scopes.contains("mcp:admin") };
//! ```
//!
//! Its value is one scope or several separated by single spaces (RFC 6749
//! §3.3: each a scope token of visible ASCII without `"` or `\`, at most
//! [`MAX_SCOPE_BYTES`] bytes); anything else refuses the whole set at load
//! (start-up or reload) with a diagnostic naming the file and the policy.
//!
//! The scopes are kept per action, from the action slices: a decision of
//! an action can only be changed by the policies that can apply to it, so
//! only their scopes are candidates. The annotation is advice to the
//! gateway, never authority: whether a candidate scope actually turns the
//! deny into an allow is decided by Cedar (the gateway decides the same
//! request again with the scope added, `src/mcp/step_up.rs`).

use std::collections::{BTreeSet, HashMap};

use cedar_policy::{EntityUid, PolicySet};

use super::action_slices::ActionSlices;
use super::identity::MAX_SCOPE_BYTES;

/// The annotation's key.
pub const ANNOTATION: &str = "requires_scope";

/// The scopes named by `@requires_scope` of the policies that can apply
/// to each action.
#[derive(Debug, Clone, Default)]
pub struct RequiredScopes {
    by_action: HashMap<EntityUid, BTreeSet<String>>,
    /// Every annotated scope, for a set that could not be sliced (every
    /// action then decides with all of it).
    all: BTreeSet<String>,
    unsliced: bool,
}

impl RequiredScopes {
    /// Reads each policy's annotation once (an annotation that does not
    /// parse names nothing here: [`parse`] refused it at load), then
    /// gathers the scopes of every action's slice.
    pub fn of(slices: &ActionSlices, policies: &PolicySet) -> Self {
        let named: HashMap<&cedar_policy::PolicyId, Vec<String>> = policies
            .policies()
            .filter_map(|p| {
                let scopes = parse(p.annotation(ANNOTATION)?).ok()?;
                Some((p.id(), scopes))
            })
            .collect();
        let mut by_action: HashMap<EntityUid, BTreeSet<String>> = HashMap::new();
        for (action, slice) in slices.iter() {
            let scopes: BTreeSet<String> = slice
                .policies()
                .filter_map(|p| named.get(p.id()))
                .flatten()
                .cloned()
                .collect();
            if !scopes.is_empty() {
                by_action.insert(action.clone(), scopes);
            }
        }
        RequiredScopes {
            by_action,
            all: named.into_values().flatten().collect(),
            unsliced: slices.iter().next().is_none(),
        }
    }

    /// The scopes named by the policies that can apply to `action`.
    pub fn for_action(&self, action: &EntityUid) -> &BTreeSet<String> {
        if self.unsliced {
            return &self.all;
        }
        static NONE: BTreeSet<String> = BTreeSet::new();
        self.by_action.get(action).unwrap_or(&NONE)
    }
}

/// The scopes of one annotation value, or why it is malformed.
pub fn parse(value: &str) -> Result<Vec<String>, String> {
    if value.trim().is_empty() {
        return Err("names no scope; write `@requires_scope(\"<scope>\")`".into());
    }
    let mut scopes = Vec::new();
    for scope in value.split(' ') {
        if scope.is_empty() {
            return Err("separate its scopes with single spaces".into());
        }
        if let Some(bad) = scope
            .chars()
            .find(|c| !matches!(c, '\x21'..='\x7e') || *c == '"' || *c == '\\')
        {
            return Err(format!(
                "scope {scope:?} holds {bad:?}; a scope is visible ASCII without `\"` or `\\`"
            ));
        }
        if scope.len() > MAX_SCOPE_BYTES {
            return Err(format!("a scope is longer than {MAX_SCOPE_BYTES} bytes"));
        }
        if !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_string());
        }
    }
    Ok(scopes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_names_one_scope_or_several() {
        assert_eq!(parse("mcp:admin"), Ok(vec!["mcp:admin".to_string()]));
        assert_eq!(
            parse("mcp:admin files:write mcp:admin"),
            Ok(vec!["mcp:admin".to_string(), "files:write".to_string()])
        );
        assert_eq!(
            parse("https://api.example/write!#$%&'()*+,-./[]^_`{|}~"),
            Ok(vec![
                "https://api.example/write!#$%&'()*+,-./[]^_`{|}~".to_string()
            ])
        );
    }

    #[test]
    fn a_malformed_annotation_says_what_is_wrong() {
        for (value, says) in [
            ("", "names no scope"),
            ("   ", "names no scope"),
            ("mcp:admin  mcp:tools", "single spaces"),
            (" mcp:admin", "single spaces"),
            ("mcp:\"admin\"", "visible ASCII"),
            ("mcp\\admin", "visible ASCII"),
            ("mcp:admin\tx", "visible ASCII"),
            ("mcp:ädmin", "visible ASCII"),
        ] {
            let err = parse(value).expect_err(value);
            assert!(err.contains(says), "{value:?}: {err}");
        }
        assert!(parse(&"s".repeat(MAX_SCOPE_BYTES + 1)).is_err());
        assert!(parse(&"s".repeat(MAX_SCOPE_BYTES)).is_ok());
    }

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn bundle(text: &str) -> Result<super::super::PolicyBundle, super::super::PolicyLoadError> {
        let files = vec![super::super::PolicyFile {
            path: "policies/scopes.cedar".into(),
            text: text.into(),
        }];
        super::super::load::bundle_from_sources("schemas/gateway.cedarschema", SCHEMA, files)
    }

    #[test]
    fn each_action_has_the_scopes_of_the_policies_that_can_apply_to_it() {
        let bundle = bundle(
            r#"
            @id("admin") @requires_scope("mcp:admin")
            forbid (principal is Gateway::User, action == Gateway::Action::"call_tool", resource)
            unless { context has token && context.token.scopes.contains("mcp:admin") };
            @id("sessions") @requires_scope("mcp:read files:read")
            permit (principal, action in [Gateway::Action::"access_session"], resource)
            when { context has token && context.token.scopes.contains("mcp:read") };
            @id("plain") permit (principal, action, resource);
            "#,
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        let tool = super::super::Kind::Tool.uid("t");
        let call: Vec<&String> = bundle
            .required_scopes(super::super::Action::CallTool, &tool)
            .iter()
            .collect();
        assert_eq!(call, ["mcp:admin"]);
        let session = super::super::Kind::Session.uid("s");
        let access: Vec<&String> = bundle
            .required_scopes(super::super::Action::AccessSession, &session)
            .iter()
            .collect();
        assert_eq!(access, ["files:read", "mcp:read"]);
        assert!(
            bundle
                .required_scopes(super::super::Action::ViewTool, &tool)
                .is_empty()
        );
    }

    #[test]
    fn a_malformed_annotation_refuses_the_set_naming_file_and_policy() {
        let Err(e) = bundle(
            "@id(\"ok\") @requires_scope(\"mcp:admin\")\npermit (principal, action, resource);\n\
             @id(\"bad\") @requires_scope(\"mcp:admin \\\"x\\\"\")\npermit (principal, action, resource);\n",
        ) else {
            panic!("a malformed @requires_scope was accepted");
        };
        let rendered = e.render();
        assert_eq!(e.diagnostics.len(), 1, "{rendered}");
        let d = &e.diagnostics[0];
        assert_eq!((d.file.as_str(), d.line), ("policies/scopes.cedar", 3));
        assert!(
            d.message.contains("policy `bad`: `@requires_scope` scope"),
            "{rendered}"
        );
    }
}
