//! What a tool is, as listed and as policies see it: its name, description
//! and `inputSchema` (with the compiled validator), its Cedar entity
//! (group, `readOnly`, the peer it belongs to) and the action a call is
//! decided under.
//!
//! **Architecture Invariant:** a spec knows nothing about how its tool
//! runs; that is the `ToolAdapter` (`adapter.rs`)'s job.

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::policy::Action;
use crate::policy::entities::{ToolEntity, UpstreamToolFacts};

/// One tool as listed and called.
#[derive(Debug)]
pub struct ToolSpec {
    /// Canonical name (also the Cedar `Tool` id).
    pub name: String,
    /// Human description for `tools/list`.
    pub description: String,
    /// JSON Schema of the arguments, shown verbatim in `tools/list`.
    pub input_schema: Value,
    /// Tool group (`memory`, `graph`, `a2a`): the Cedar parent.
    pub group: String,
    /// Whether the tool only reads.
    pub read_only: bool,
    /// Slug of the A2A peer serving it (its Cedar `PeerAgent` parent).
    /// Tools of one peer are indistinguishable to a policy that does not
    /// name them, which `tools/list` uses to decide them per class.
    pub peer: Option<String>,
    /// The group action a call is decided under (`call_tool`, or
    /// `a2a_invoke` for a remote peer's tool); a typed tool has its own
    /// action inside it.
    pub action: Action,
    /// Whether a call also needs `write_node` on the project (graph writes).
    pub writes_graph: bool,
    /// Whether the arguments the tool runs with (and `context.args`) keep
    /// the gateway's authoritative `context` member. Remote peers never
    /// get it: the session's identity is not forwarded to third parties.
    pub keeps_tenant_context: bool,
    /// The upstream MCP server serving it and what its annotations say
    /// (its Cedar `McpServer` parent and attributes).
    pub upstream: Option<UpstreamToolFacts>,
    /// The remote tools it is indistinguishable from (`None`: a built-in
    /// tool, decided alone).
    pub class: Option<ToolClass>,
    validator: jsonschema::Validator,
    /// The `tools/list` entry, serialized once.
    listing_json: String,
}

/// The remote tools a policy cannot tell apart without naming one (by its
/// uid, a literal): the same Cedar parent and the same attributes. The
/// tools of one A2A peer all are; an upstream server's tools are when
/// their annotations agree. `tools/list` decides each class once
/// (`mcp::tool_classes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolClass {
    /// Equal for exactly the tools sharing parent and attributes.
    pub key: String,
    /// How the `tools/list` record names the class: the parent's kind
    /// (`peerAgent`, `mcpServer`)…
    pub parent_kind: &'static str,
    /// …and its id.
    pub parent: String,
}

/// A tool whose `inputSchema` does not compile.
#[derive(Debug, thiserror::Error)]
#[error("tool `{name}` has an invalid inputSchema: {reason}")]
pub struct InvalidSchema {
    /// The tool.
    pub name: String,
    /// What the JSON Schema compiler said.
    pub reason: String,
}

/// A rejected argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError {
    /// JSON pointer (or property name) of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ToolSpec {
    /// A built-in tool decided under `call_tool`, compiling its schema.
    pub fn new(
        name: &str,
        description: &str,
        input_schema: Value,
        group: &str,
        read_only: bool,
    ) -> Result<ToolSpec, InvalidSchema> {
        let validator = jsonschema::validator_for(&input_schema).map_err(|e| InvalidSchema {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        let listing =
            json!({ "name": name, "description": description, "inputSchema": input_schema });
        Ok(ToolSpec {
            listing_json: listing.to_string(),
            name: name.to_string(),
            description: description.to_string(),
            input_schema,
            group: group.to_string(),
            read_only,
            peer: None,
            action: Action::CallTool,
            writes_graph: false,
            keeps_tenant_context: true,
            upstream: None,
            class: None,
            validator,
        })
    }

    /// The same tool, served by the A2A peer `slug`: decided under
    /// `a2a_invoke`, its arguments sent without the gateway's context.
    pub fn with_peer(mut self, slug: &str) -> ToolSpec {
        self.peer = Some(slug.to_string());
        self.class = Some(ToolClass {
            key: format!("peer\u{1f}{slug}"),
            parent_kind: "peerAgent",
            parent: slug.to_string(),
        });
        self.action = Action::A2aInvoke;
        self.keeps_tenant_context = false;
        self
    }

    /// The same tool, served by an upstream MCP server: decided under
    /// `call_tool` as a child of its `McpServer`, its arguments sent
    /// without the gateway's context, listed as `listing` (the upstream's
    /// own entry under the gateway's name).
    pub fn with_upstream(mut self, facts: UpstreamToolFacts, listing: &Value) -> ToolSpec {
        self.group = "upstream".into();
        // Every attribute of the Cedar entity (see `policy::entities`).
        let key = serde_json::to_string(&(
            &facts.server,
            self.read_only,
            facts.destructive,
            facts.open_world,
            &facts.title,
        ))
        .unwrap_or_default();
        self.class = Some(ToolClass {
            key: format!("mcp\u{1f}{key}"),
            parent_kind: "mcpServer",
            parent: facts.server.clone(),
        });
        self.upstream = Some(facts);
        self.keeps_tenant_context = false;
        self.listing_json = listing.to_string();
        self
    }

    /// The same tool, writing the project's knowledge graph.
    pub fn writing_graph(mut self) -> ToolSpec {
        self.writes_graph = true;
        self
    }

    /// Checks `args` against the input schema; every error names its field.
    /// At most [`MAX_ARGUMENT_ERRORS`] errors are reported, each repeating
    /// at most a short prefix of the caller's input (see [`echo`]).
    pub fn validate(&self, args: &Value) -> Result<(), Vec<ArgumentError>> {
        let errors: Vec<ArgumentError> = self
            .validator
            .iter_errors(args)
            .take(MAX_ARGUMENT_ERRORS)
            .map(|e| ArgumentError {
                field: echo(&field_of(&e)).into_owned(),
                message: message_of(&e),
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The entry in `tools/list`, serialized once (a listing of a large
    /// catalog is assembled from these instead of serializing it per call).
    pub fn listing_json(&self) -> &str {
        &self.listing_json
    }

    /// How the PEP sees this tool.
    pub fn entity(&self) -> ToolEntity {
        ToolEntity {
            name: self.name.clone(),
            group: self.group.clone(),
            kind: self.group.clone(),
            read_only: self.read_only,
            peer: self.peer.clone(),
            upstream: self.upstream.clone(),
        }
    }
}

/// The field a validation error is about: the missing property for
/// `required`, `arguments` for the arguments as a whole, else the instance
/// path with dots.
fn field_of(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().as_str().to_string();
    match e.kind() {
        jsonschema::error::ValidationErrorKind::Required { property } => {
            let prop = property
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| property.to_string());
            if path.is_empty() {
                prop
            } else {
                format!("{path}/{prop}")
            }
        }
        _ if path.is_empty() => "arguments".to_string(),
        _ => path.trim_start_matches('/').replace('/', "."),
    }
}

/// The validator's message, with the offending value shown by a prefix of
/// its JSON text when it is long, and the whole message bounded.
fn message_of(e: &jsonschema::ValidationError<'_>) -> String {
    let mut shown = Capped(Vec::new());
    // Stops with an error once the cap is reached: the prefix is all we show.
    let complete = serde_json::to_writer(&mut shown, &**e.instance()).is_ok();
    let message = if complete {
        e.to_string()
    } else {
        let text = String::from_utf8_lossy(&shown.0);
        e.masked_with(echo(&text)).to_string()
    };
    prefix(&message, MESSAGE_MAX_CHARS).into_owned()
}

/// A writer keeping the first [`CAPPED_BYTES`] bytes, then failing.
struct Capped(Vec<u8>);

/// Enough bytes for [`ECHO_MAX_CHARS`] characters and one more.
const CAPPED_BYTES: usize = 4 * (ECHO_MAX_CHARS + 1);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = CAPPED_BYTES.saturating_sub(self.0.len());
        if room == 0 && !buf.is_empty() {
            return Err(std::io::Error::other("echo prefix complete"));
        }
        let head = buf.get(..buf.len().min(room)).unwrap_or_default();
        self.0.extend_from_slice(head);
        Ok(head.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Most characters of caller input (a value, a field, a tool or method
/// name) an error message or its `data` repeats; longer input is cut to
/// this prefix followed by `…`.
pub const ECHO_MAX_CHARS: usize = 128;

/// Most characters of one argument error's message (a message may repeat
/// several bounded echoes, e.g. the unexpected property names).
pub const MESSAGE_MAX_CHARS: usize = 512;

/// Most argument errors one call reports.
pub const MAX_ARGUMENT_ERRORS: usize = 8;

/// Caller input as an error may repeat it: at most [`ECHO_MAX_CHARS`]
/// characters, then `…`. Cutting an already cut text changes nothing.
pub fn echo(text: &str) -> Cow<'_, str> {
    prefix(text, ECHO_MAX_CHARS)
}

/// `text` cut to its first `max` characters followed by `…`, when longer.
pub fn prefix(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((end, _)) if text.get(end..) == Some("…") => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", text.get(..end).unwrap_or(text))),
    }
}

/// The `tools/list` result holding `entries` ([`ToolSpec::listing_json`]).
pub fn list_result(entries: &[&str]) -> String {
    format!("{{\"tools\":[{}]}}", entries.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_cuts_long_input_once() {
        assert_eq!(echo("short"), "short");
        let long = "é".repeat(1000);
        let cut = echo(&long);
        assert_eq!(cut.chars().count(), ECHO_MAX_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(echo(&cut), cut);
        let exact = "x".repeat(ECHO_MAX_CHARS);
        assert_eq!(echo(&exact), exact);
    }

    #[test]
    fn a_huge_bad_value_is_shown_by_a_prefix() {
        let spec = ToolSpec::new(
            "t",
            "",
            json!({"type":"object","properties":{"content":{"type":"string","maxLength":4}}}),
            "memory",
            false,
        )
        .unwrap();
        let errors = spec
            .validate(&json!({"content": "a".repeat(900_000)}))
            .unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "content");
        assert!(errors[0].message.len() < 300, "{}", errors[0].message);
        assert!(
            errors[0].message.ends_with("… is longer than 4 characters"),
            "{}",
            errors[0].message
        );
        let short = spec.validate(&json!({"content": "abcdef"})).unwrap_err();
        assert_eq!(short[0].message, "\"abcdef\" is longer than 4 characters");
    }
}
