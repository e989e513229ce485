//! Agent cards: parsing and validating what a peer publishes at
//! `/.well-known/agent-card.json`, in either protocol generation, and the
//! naming rules that turn an agent and its skills into MCP tool names.
//!
//! A 0.3 card names its endpoint with top-level `url`, `preferredTransport`
//! and `protocolVersion` (plus `additionalInterfaces`); a 1.0 card lists
//! `supportedInterfaces[{url, protocolBinding, protocolVersion}]`. Real SDKs
//! serve both at once, so both are read and merged.
//!
//! **Architecture Invariant:** this module does no I/O; it turns JSON into
//! a [`ParsedCard`] or says precisely why it cannot.

use serde_json::{Value, json};

/// Most skills one card may declare.
pub const MAX_SKILLS: usize = 1_000;
/// Longest skill id accepted (tool names stay within MCP's 128 characters).
const MAX_SKILL_ID: usize = 64;
/// Longest slug.
pub const MAX_SLUG: usize = 48;

/// An A2A protocol generation the bridge speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// A2A 0.3: `message/send`, parts with `kind`.
    V0_3,
    /// A2A 1.0: `SendMessage` with `A2A-Version: 1.0`.
    V1_0,
}

impl ProtocolVersion {
    /// The version as written on the wire and in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V0_3 => "0.3",
            ProtocolVersion::V1_0 => "1.0",
        }
    }

    /// Reads a declared version (`0.3`, `0.3.0`, `1.0`, `1.0.1`, …);
    /// anything else is a version the bridge does not speak.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        let mut it = s.trim().split('.');
        match (it.next(), it.next()) {
            (Some("0"), Some("3")) => Some(ProtocolVersion::V0_3),
            (Some("1"), Some("0")) => Some(ProtocolVersion::V1_0),
            _ => None,
        }
    }
}

/// One JSON-RPC endpoint a card declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Where to POST.
    pub url: String,
    /// Which protocol it speaks.
    pub version: ProtocolVersion,
}

/// One skill, as it becomes a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Skill id (the part after the dot in the tool name).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
    /// The skill's `inputSchema`, used verbatim when present.
    pub input_schema: Option<Value>,
}

/// A validated card.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCard {
    /// Agent name.
    pub name: String,
    /// Agent description.
    pub description: String,
    /// JSON-RPC interfaces the bridge can use, in declaration order.
    pub interfaces: Vec<Interface>,
    /// Skills with usable ids.
    pub skills: Vec<Skill>,
    /// Skills left out, and why (a bad id, a broken schema, a duplicate).
    pub warnings: Vec<String>,
}

/// Why an agent card is refused (the message is stored as the peer's
/// `lastError` and shown by the operator API).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// The card is not a JSON object.
    #[error("the agent card is not a JSON object")]
    NotObject,
    /// The card has no usable `name`.
    #[error("the agent card has no `name`")]
    NoName,
    /// No interface the bridge can call.
    #[error("the agent card declares no JSON-RPC interface for A2A 0.3 or 1.0 with an http(s) URL")]
    NoInterface,
    /// The card has no `skills` array.
    #[error("the agent card has no `skills` array")]
    NoSkills,
    /// More skills than a card may declare.
    #[error("the agent card declares {0} skills; at most {max} are accepted", max = MAX_SKILLS)]
    TooManySkills(usize),
    /// The pinned protocol generation is not among the card's interfaces.
    #[error("the card declares no JSON-RPC interface for A2A `{}`", .0.as_str())]
    NoInterfaceFor(ProtocolVersion),
    /// The card has no interface at all.
    #[error("the card declares no JSON-RPC interface")]
    NoJsonRpc,
}

/// Why a skill's `inputSchema` is left out (the skill is skipped with a
/// warning; the card stays usable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SchemaError {
    /// Not an object.
    #[error("`inputSchema` is not a JSON object")]
    NotObject,
    /// Describes something other than an object.
    #[error("`inputSchema` must describe an object (`\"type\": \"object\"`)")]
    NotObjectType,
    /// Does not compile.
    #[error("`inputSchema` is not a valid JSON Schema: {0}")]
    Invalid(String),
}

impl ParsedCard {
    /// The interface to use: the pinned version if the card declares it,
    /// else the newest version declared.
    pub fn choose(&self, pinned: Option<ProtocolVersion>) -> Result<&Interface, CardError> {
        match pinned {
            Some(v) => self
                .interfaces
                .iter()
                .find(|i| i.version == v)
                .ok_or(CardError::NoInterfaceFor(v)),
            None => self
                .interfaces
                .iter()
                .max_by_key(|i| i.version)
                .ok_or(CardError::NoJsonRpc),
        }
    }
}

fn string_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn is_jsonrpc(binding: Option<&str>) -> bool {
    // A 0.3 card may omit the transport: JSON-RPC is its default.
    binding.is_none_or(|b| b.eq_ignore_ascii_case("JSONRPC"))
}

fn absolute_http(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
}

/// Validates a card and extracts what the bridge needs.
pub fn parse(card: &Value) -> Result<ParsedCard, CardError> {
    if !card.is_object() {
        return Err(CardError::NotObject);
    }
    let name = string_field(card, "name")
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or(CardError::NoName)?
        .to_string();
    let description = string_field(card, "description")
        .unwrap_or_default()
        .to_string();

    let mut interfaces: Vec<Interface> = Vec::new();
    let mut push = |url: &str, version: ProtocolVersion| {
        if absolute_http(url)
            && !interfaces
                .iter()
                .any(|i| i.url == url && i.version == version)
        {
            interfaces.push(Interface {
                url: url.to_string(),
                version,
            });
        }
    };
    if let Some(list) = card.get("supportedInterfaces").and_then(Value::as_array) {
        for i in list {
            let version = string_field(i, "protocolVersion").and_then(ProtocolVersion::parse);
            if let (Some(url), Some(version)) = (string_field(i, "url"), version)
                && is_jsonrpc(string_field(i, "protocolBinding"))
            {
                push(url, version);
            }
        }
    }
    // 0.3 shape: the main endpoint, then `additionalInterfaces`.
    let top_version = match string_field(card, "protocolVersion") {
        Some(v) => ProtocolVersion::parse(v),
        None => Some(ProtocolVersion::V0_3),
    };
    if let (Some(url), Some(version)) = (string_field(card, "url"), top_version)
        && is_jsonrpc(string_field(card, "preferredTransport"))
    {
        push(url, version);
        if let Some(list) = card.get("additionalInterfaces").and_then(Value::as_array) {
            for i in list {
                if let Some(url) = string_field(i, "url")
                    && is_jsonrpc(string_field(i, "transport"))
                {
                    push(url, version);
                }
            }
        }
    }
    if interfaces.is_empty() {
        return Err(CardError::NoInterface);
    }

    let skills_json = card
        .get("skills")
        .and_then(Value::as_array)
        .ok_or(CardError::NoSkills)?;
    if skills_json.len() > MAX_SKILLS {
        return Err(CardError::TooManySkills(skills_json.len()));
    }
    let mut skills: Vec<Skill> = Vec::new();
    let mut warnings = Vec::new();
    for (n, s) in skills_json.iter().enumerate() {
        let Some(id) = string_field(s, "id") else {
            warnings.push(format!("skill #{n} has no `id`; skipped"));
            continue;
        };
        if !valid_skill_id(id) {
            warnings.push(format!(
                "skill `{id}`: ids must be 1 to {MAX_SKILL_ID} characters of A-Z a-z 0-9 _ - . ; skipped"
            ));
            continue;
        }
        if skills.iter().any(|k| k.id == id) {
            warnings.push(format!("skill `{id}` is declared twice; the first is kept"));
            continue;
        }
        let input_schema = match s.get("inputSchema") {
            None | Some(Value::Null) => None,
            Some(schema) => {
                if let Err(e) = check_schema(schema) {
                    warnings.push(format!("skill `{id}`: {e}; skipped"));
                    continue;
                }
                Some(schema.clone())
            }
        };
        skills.push(Skill {
            id: id.to_string(),
            name: string_field(s, "name").unwrap_or(id).to_string(),
            description: string_field(s, "description")
                .unwrap_or_default()
                .to_string(),
            input_schema,
        });
    }
    Ok(ParsedCard {
        name,
        description,
        interfaces,
        skills,
        warnings,
    })
}

/// A skill's `inputSchema` must describe an object and compile.
fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    if !schema.is_object() {
        return Err(SchemaError::NotObject);
    }
    if let Some(t) = schema.get("type")
        && t != "object"
    {
        return Err(SchemaError::NotObjectType);
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| SchemaError::Invalid(e.to_string()))
}

fn valid_skill_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SKILL_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The namespace of an agent's tools: lowercased, every run of
/// non-alphanumerics one `_`, none at either end
/// (`Vercel Ops` → `vercel_ops`, `Linear (prod)` → `linear_prod`).
pub fn slugify(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// The canonical tool name `<agentSlug>.<skillId>`.
pub fn tool_name(slug: &str, skill_id: &str) -> String {
    format!("{slug}.{skill_id}")
}

/// The legacy alias `a2a_<agentSlug>_<skillId>` with every non-alphanumeric
/// of the skill id as `_` (`create-issue` → `create_issue`).
pub fn legacy_alias(slug: &str, skill_id: &str) -> String {
    let skill: String = skill_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("a2a_{slug}_{skill}")
}

/// The input schema a tool shows: the skill's, else any object.
pub fn input_schema(skill: &Skill) -> Value {
    skill
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({ "type": "object", "additionalProperties": true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_names_follow_the_published_table() {
        let cases = [
            (
                "Vercel Ops",
                "deploy",
                "vercel_ops.deploy",
                "a2a_vercel_ops_deploy",
            ),
            (
                "code-reviewer",
                "review",
                "code_reviewer.review",
                "a2a_code_reviewer_review",
            ),
            (
                "Linear (prod)",
                "create-issue",
                "linear_prod.create-issue",
                "a2a_linear_prod_create_issue",
            ),
        ];
        for (name, skill, tool, alias) in cases {
            let slug = slugify(name);
            assert_eq!(tool_name(&slug, skill), tool, "{name}");
            assert_eq!(legacy_alias(&slug, skill), alias, "{name}");
        }
        assert_eq!(slugify("  --Ops!! "), "ops");
        assert_eq!(slugify("()"), "");
    }

    #[test]
    fn versions() {
        assert_eq!(ProtocolVersion::parse("0.3.0"), Some(ProtocolVersion::V0_3));
        assert_eq!(ProtocolVersion::parse("1.0"), Some(ProtocolVersion::V1_0));
        assert_eq!(ProtocolVersion::parse("0.2.5"), None);
        assert_eq!(ProtocolVersion::parse("2.0"), None);
    }

    #[test]
    fn a_0_3_card_and_a_1_0_card_are_both_read() {
        let old = json!({
            "name": "Old", "url": "http://127.0.0.1:1/rpc", "protocolVersion": "0.3.0",
            "skills": [{"id": "a"}]
        });
        let p = parse(&old).unwrap();
        assert_eq!(p.choose(None).unwrap().version, ProtocolVersion::V0_3);
        let new = json!({
            "name": "New",
            "supportedInterfaces": [
                {"url": "http://127.0.0.1:1/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "http://127.0.0.1:1/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
            ],
            "url": "http://127.0.0.1:1/v03", "protocolVersion": "0.3",
            "skills": [{"id": "a", "inputSchema": {"type": "object"}}, {"id": "bad id"}, {"id": "a"},
                       {"id": "s", "inputSchema": {"type": "string"}}]
        });
        let p = parse(&new).unwrap();
        let chosen = p.choose(None).unwrap();
        assert_eq!(
            (chosen.url.as_str(), chosen.version),
            ("http://127.0.0.1:1/v1", ProtocolVersion::V1_0)
        );
        let pinned = p.choose(Some(ProtocolVersion::V0_3)).unwrap();
        assert_eq!(pinned.url, "http://127.0.0.1:1/v03");
        assert_eq!(p.skills.len(), 1);
        assert_eq!(p.warnings.len(), 3, "{:?}", p.warnings);
    }

    #[test]
    fn broken_cards_say_why() {
        let cases = [
            (json!([]), "not a JSON object"),
            (json!({"url": "http://x/", "skills": []}), "no `name`"),
            (json!({"name": "x", "skills": []}), "no JSON-RPC interface"),
            (
                json!({"name": "x", "url": "ftp://x/", "skills": []}),
                "no JSON-RPC interface",
            ),
            (json!({"name": "x", "url": "http://x/"}), "no `skills`"),
            (
                json!({"name": "x", "url": "http://x/", "preferredTransport": "GRPC", "skills": []}),
                "no JSON-RPC interface",
            ),
        ];
        for (card, expected) in cases {
            let err = parse(&card).unwrap_err().to_string();
            assert!(err.contains(expected), "{card}: {err}");
        }
        let only_old = parse(&json!({"name": "x", "url": "http://x/", "skills": []})).unwrap();
        assert!(
            only_old
                .choose(Some(ProtocolVersion::V1_0))
                .unwrap_err()
                .to_string()
                .contains("`1.0`")
        );
    }
}
