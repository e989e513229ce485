//! Entity and relationship extraction from observation text, behind the
//! [`Extractor`] seam (an LLM-backed extractor can implement it later).
//!
//! The built-in [`RuleExtractor`] is deterministic. Its rules, applied per
//! sentence (sentences end at `.`/`!`/`?`/`;` followed by a space or the end,
//! and at line breaks):
//!
//! **Entities** are, in order of precedence where they overlap:
//! 1. a `` `backticked` `` span of 2–64 characters;
//! 2. a file path: a word with a `/` or ending in a source-file extension
//!    (`.rs`, `.ts`, `.py`, `.go`, `.sql`, `.toml`, …): type `File`;
//! 3. a CamelCase identifier with at least two humps (`AuthService`,
//!    `PostgresDB`, `UserController`);
//! 4. a `snake_case` / `kebab-case` identifier with at least two parts, one
//!    of which is a component noun (`billing-worker`, `user_repo`), so that
//!    words like `re-run` or `follow-up` are not entities;
//! 5. a known technology (`Postgres`, `Redis`, `Kafka`, `S3`, …, see
//!    [`TECHNOLOGIES`]), matched as a whole word in any case;
//! 6. a lowercase word followed by a component noun (`payments service`,
//!    `session cache`, `orders queue`): the two words form the name.
//!
//! **Types** come from the technology table, else from the last part of the
//! name ([`TYPE_SUFFIXES`]: `…Service` → `Service`, `…Repository`/`…Repo` →
//! `Repository`, `…DB` → `Database`, …), else `Component`.
//!
//! **Relationships** link two entities of the same sentence that are next
//! to each other (no entity in between) when the text between them holds a
//! relation phrase of [`RELATIONS`] (`calls`, `depends on`, `reads from`,
//! `publishes to`, …, `uses`); passive `is called by` / `is used by` swaps
//! the direction; `migrated from A to B` gives `B replaces A`. A bare
//! conjunction (`and`, `or`, `,`) between two entities repeats the previous
//! relationship of the sentence with the same subject (`A calls B and C`).
//! Self-links are dropped. Nothing else becomes an edge: co-occurrence alone
//! is not a relationship.
//!
//! **Descriptions** are the first sentence that mentions the entity, cut to
//! 200 characters.

use std::collections::HashMap;

/// Longest description kept.
const MAX_DESCRIPTION: usize = 200;

/// Longest text between two entities that can still carry their relation.
const MAX_GAP: usize = 80;

/// An entity found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The spelling found.
    pub name: String,
    /// Inferred type.
    pub entity_type: String,
    /// The sentence that introduced it.
    pub description: String,
}

/// A relationship between two entities of [`Extraction::entities`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// Index of the source entity.
    pub source: usize,
    /// Relationship name.
    pub relationship: String,
    /// Index of the target entity.
    pub target: usize,
}

/// What an extractor found in one text. Entities are distinct by
/// resolution key ([`super::text::resolution_key`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extraction {
    /// The entities.
    pub entities: Vec<Entity>,
    /// The relationships between them.
    pub relations: Vec<Relation>,
}

/// Turns observation text into entities and relationships.
pub trait Extractor: Send + Sync + std::fmt::Debug {
    /// Extracts from one observation.
    fn extract(&self, text: &str) -> Extraction;
}

/// The deterministic rule-based extractor (rules in the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleExtractor;

/// Known technologies: lowercase spelling → (display name, type).
pub const TECHNOLOGIES: &[(&str, &str, &str)] = &[
    ("postgres", "Postgres", "Database"),
    ("postgresql", "PostgreSQL", "Database"),
    ("mysql", "MySQL", "Database"),
    ("sqlite", "SQLite", "Database"),
    ("mongodb", "MongoDB", "Database"),
    ("dynamodb", "DynamoDB", "Database"),
    ("clickhouse", "ClickHouse", "Database"),
    ("snowflake", "Snowflake", "Database"),
    ("elasticsearch", "Elasticsearch", "SearchEngine"),
    ("redis", "Redis", "Cache"),
    ("memcached", "Memcached", "Cache"),
    ("kafka", "Kafka", "Queue"),
    ("rabbitmq", "RabbitMQ", "Queue"),
    ("sqs", "SQS", "Queue"),
    ("nats", "NATS", "Queue"),
    ("s3", "S3", "Storage"),
    ("kubernetes", "Kubernetes", "Platform"),
    ("k8s", "Kubernetes", "Platform"),
    ("docker", "Docker", "Platform"),
    ("terraform", "Terraform", "Tool"),
    ("nginx", "Nginx", "Gateway"),
    ("graphql", "GraphQL", "Protocol"),
    ("grpc", "gRPC", "Protocol"),
    ("stripe", "Stripe", "ExternalService"),
    ("workos", "WorkOS", "ExternalService"),
    ("auth0", "Auth0", "ExternalService"),
    ("okta", "Okta", "ExternalService"),
    ("sentry", "Sentry", "ExternalService"),
    ("datadog", "Datadog", "ExternalService"),
    ("github", "GitHub", "ExternalService"),
    ("vercel", "Vercel", "Platform"),
    ("cloudflare", "Cloudflare", "Platform"),
    ("celery", "Celery", "Queue"),
];

/// Name suffix (lowercase, last part of the name) → type.
pub const TYPE_SUFFIXES: &[(&str, &str)] = &[
    ("service", "Service"),
    ("svc", "Service"),
    ("controller", "Controller"),
    ("repository", "Repository"),
    ("repo", "Repository"),
    ("db", "Database"),
    ("database", "Database"),
    ("store", "Database"),
    ("cache", "Cache"),
    ("queue", "Queue"),
    ("topic", "Queue"),
    ("worker", "Worker"),
    ("job", "Worker"),
    ("client", "Client"),
    ("api", "API"),
    ("endpoint", "API"),
    ("gateway", "Gateway"),
    ("proxy", "Gateway"),
    ("handler", "Handler"),
    ("middleware", "Middleware"),
    ("module", "Module"),
    ("library", "Module"),
    ("lib", "Module"),
    ("table", "Table"),
    ("bucket", "Storage"),
    ("cluster", "Infrastructure"),
    ("pipeline", "Pipeline"),
    ("manager", "Component"),
    ("provider", "Component"),
    ("server", "Server"),
    ("scheduler", "Worker"),
];

/// Relation phrases, checked in order (longer and more specific first).
/// `true` marks a passive phrase whose direction is swapped.
pub const RELATIONS: &[(&str, &str, bool)] = &[
    ("is called by", "calls", true),
    ("are called by", "calls", true),
    ("is used by", "uses", true),
    ("are used by", "uses", true),
    ("is consumed by", "consumes", true),
    ("is backed by", "backed_by", false),
    ("backed by", "backed_by", false),
    ("depends on", "depends_on", false),
    ("depend on", "depends_on", false),
    ("relies on", "depends_on", false),
    ("rely on", "depends_on", false),
    ("requires", "depends_on", false),
    ("reads from", "reads_from", false),
    ("read from", "reads_from", false),
    ("loads from", "reads_from", false),
    ("fetches from", "reads_from", false),
    ("queries", "reads_from", false),
    ("writes to", "writes_to", false),
    ("write to", "writes_to", false),
    ("persists to", "writes_to", false),
    ("persists in", "writes_to", false),
    ("stores in", "writes_to", false),
    ("saves to", "writes_to", false),
    ("publishes to", "publishes_to", false),
    ("publishes", "publishes_to", false),
    ("emits to", "publishes_to", false),
    ("sends to", "publishes_to", false),
    ("enqueues to", "publishes_to", false),
    ("pushes to", "publishes_to", false),
    ("subscribes to", "consumes", false),
    ("consumes from", "consumes", false),
    ("consumes", "consumes", false),
    ("listens to", "consumes", false),
    ("authenticates with", "authenticates_with", false),
    ("authenticates against", "authenticates_with", false),
    ("authenticates via", "authenticates_with", false),
    ("authenticates through", "authenticates_with", false),
    ("routes to", "routes_to", false),
    ("proxies to", "routes_to", false),
    ("forwards to", "routes_to", false),
    ("runs on", "runs_on", false),
    ("deployed on", "runs_on", false),
    ("deployed to", "runs_on", false),
    ("hosted on", "runs_on", false),
    ("is part of", "part_of", false),
    ("belongs to", "part_of", false),
    ("inherits from", "extends", false),
    ("extends", "extends", false),
    ("implements", "implements", false),
    ("replaced", "replaces", false),
    ("replaces", "replaces", false),
    ("wraps", "wraps", false),
    ("caches", "caches", false),
    ("contains", "contains", false),
    ("owns", "contains", false),
    ("calls", "calls", false),
    ("call", "calls", false),
    ("invokes", "calls", false),
    ("invoke", "calls", false),
    ("reads", "reads_from", false),
    ("writes", "writes_to", false),
    ("uses", "uses", false),
    ("use", "uses", false),
    ("using", "uses", false),
    ("talks to", "calls", false),
];

/// Component nouns: they make a lowercase word before them, or a
/// snake/kebab identifier containing them, an entity.
const COMPONENT_NOUNS: &[&str] = &[
    "service",
    "svc",
    "api",
    "db",
    "database",
    "queue",
    "worker",
    "cache",
    "gateway",
    "client",
    "server",
    "controller",
    "repository",
    "repo",
    "job",
    "pipeline",
    "cluster",
    "bucket",
    "table",
    "topic",
    "handler",
    "proxy",
    "store",
    "scheduler",
    "module",
];

/// Words that never start a "word + component noun" entity.
const NOT_A_NAME: &[&str] = &[
    "a", "an", "the", "this", "that", "each", "every", "our", "their", "its", "new", "old", "same",
    "other", "any", "some", "one", "which", "what", "to", "of", "and", "or", "in", "on", "for",
    "by", "from", "with", "into", "is", "are", "was", "be", "it", "as", "at", "no", "not", "all",
    "main", "calls", "uses", "reads", "writes", "queries", "via", "then", "when", "also",
];

const SOURCE_EXTENSIONS: &[&str] = &[
    "rs", "ts", "tsx", "js", "jsx", "py", "go", "java", "kt", "rb", "sql", "toml", "yaml", "yml",
    "json", "proto", "cedar", "sh", "c", "h", "cpp", "cs", "swift",
];

/// One mention in a sentence: byte span, name, type.
#[derive(Debug, Clone)]
struct Mention {
    start: usize,
    end: usize,
    name: String,
    entity_type: String,
}

impl Extractor for RuleExtractor {
    fn extract(&self, text: &str) -> Extraction {
        let mut out = Extraction::default();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        for sentence in sentences(text) {
            let mentions = mentions(sentence);
            let mut idx = Vec::with_capacity(mentions.len());
            for m in &mentions {
                let key = super::text::resolution_key(&m.name);
                if key.is_empty() {
                    idx.push(None);
                    continue;
                }
                let i = *by_key.entry(key).or_insert_with(|| {
                    out.entities.push(Entity {
                        name: m.name.clone(),
                        entity_type: m.entity_type.clone(),
                        description: truncate(sentence.trim(), MAX_DESCRIPTION),
                    });
                    out.entities.len() - 1
                });
                idx.push(Some(i));
            }
            let mut last: Option<(usize, String)> = None;
            // The relation phrase between each pair of neighbouring mentions.
            let gaps: Vec<Option<Found>> = mentions
                .windows(2)
                .map(|w| match (w.first(), w.get(1)) {
                    (Some(ma), Some(mb)) => {
                        let gap = sentence.get(ma.end..mb.start).unwrap_or("");
                        if gap.len() > MAX_GAP {
                            None
                        } else {
                            relation_between(sentence.get(..ma.start).unwrap_or(""), gap)
                        }
                    }
                    _ => None,
                })
                .collect();
            for (pair, w) in mentions.windows(2).enumerate() {
                let (Some(a), Some(b)) = (
                    idx.get(pair).copied().flatten(),
                    idx.get(pair + 1).copied().flatten(),
                ) else {
                    last = None;
                    continue;
                };
                let (Some(ma), Some(mb)) = (w.first(), w.get(1)) else {
                    continue;
                };
                let gap = sentence.get(ma.end..mb.start).unwrap_or("");
                // "A calls B and C uses D": C starts a new clause, so the
                // conjunction does not extend "A calls" to C.
                let next_has_relation = gaps.get(pair + 1).is_some_and(Option::is_some);
                let rel = match gaps.get(pair).and_then(Option::as_ref) {
                    Some(Found::Forward(r)) => {
                        last = Some((a, r.clone()));
                        Some((a, r.clone(), b))
                    }
                    Some(Found::Backward(r)) => {
                        last = Some((b, r.clone()));
                        Some((b, r.clone(), a))
                    }
                    None if is_conjunction(gap) && !next_has_relation => {
                        last.clone().map(|(s, r)| (s, r, b))
                    }
                    None => {
                        last = None;
                        None
                    }
                };
                if let Some((s, r, t)) = rel
                    && s != t
                {
                    let relation = Relation {
                        source: s,
                        relationship: r,
                        target: t,
                    };
                    if !out.relations.contains(&relation) {
                        out.relations.push(relation);
                    }
                }
            }
        }
        out
    }
}

enum Found {
    Forward(String),
    Backward(String),
}

/// The relation phrase in `gap` (text between two entities); `before` is
/// the sentence before the first one (for `migrated from A to B`).
fn relation_between(before: &str, gap: &str) -> Option<Found> {
    let g = format!(" {} ", normalize_space(&gap.to_lowercase()));
    let b = normalize_space(&before.to_lowercase());
    if g.trim() == "to"
        && [
            "migrated from",
            "moved from",
            "switched from",
            "migrating from",
        ]
        .iter()
        .any(|p| b.ends_with(p))
    {
        return Some(Found::Backward("replaces".into()));
    }
    for (phrase, rel, passive) in RELATIONS {
        if g.contains(&format!(" {phrase} ")) {
            return Some(if *passive {
                Found::Backward((*rel).to_string())
            } else {
                Found::Forward((*rel).to_string())
            });
        }
    }
    None
}

fn is_conjunction(gap: &str) -> bool {
    let g = normalize_space(&gap.to_lowercase());
    matches!(
        g.as_str(),
        "and" | "or" | "," | ", and" | ", or" | "&" | "/"
    )
}

fn normalize_space(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Splits text into sentences (see the module doc).
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_break = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let end = match c {
            '\n' => Some(i),
            '.' | '!' | '?' | ';' if next_is_break => Some(i),
            _ => None,
        };
        if let Some(end) = end {
            if let Some(s) = text.get(start..end)
                && !s.trim().is_empty()
            {
                out.push(s);
            }
            start = i + c.len_utf8();
        }
    }
    if let Some(s) = text.get(start..)
        && !s.trim().is_empty()
    {
        out.push(s);
    }
    out
}

/// Words of a sentence with their byte spans; backticked spans are one
/// word (flagged). Word characters: alphanumerics and `_-./`.
fn words(sentence: &str) -> Vec<(usize, usize, &str, bool)> {
    let mut out = Vec::new();
    let bytes: Vec<(usize, char)> = sentence.char_indices().collect();
    let mut i = 0;
    while let Some(&(pos, c)) = bytes.get(i) {
        if c == '`' {
            let close = bytes
                .iter()
                .skip(i + 1)
                .position(|(_, c)| *c == '`')
                .map(|p| p + i + 1);
            if let Some(close) = close
                && let Some(&(cpos, _)) = bytes.get(close)
            {
                if let Some(inner) = sentence.get(pos + 1..cpos) {
                    out.push((pos + 1, cpos, inner, true));
                }
                i = close + 1;
                continue;
            }
            i += 1;
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while let Some(&(_, d)) = bytes.get(j) {
                if d.is_alphanumeric() || matches!(d, '_' | '-' | '.' | '/') {
                    j += 1;
                } else {
                    break;
                }
            }
            let end = bytes.get(j).map(|(p, _)| *p).unwrap_or(sentence.len());
            let mut word = sentence.get(pos..end).unwrap_or("");
            // Trailing punctuation is not part of the word.
            while let Some(stripped) = word
                .strip_suffix('.')
                .or_else(|| word.strip_suffix('-'))
                .or_else(|| word.strip_suffix('/'))
            {
                word = stripped;
            }
            if !word.is_empty() {
                out.push((pos, pos + word.len(), word, false));
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn technology(word: &str) -> Option<(&'static str, &'static str)> {
    let lower = word.to_lowercase();
    TECHNOLOGIES
        .iter()
        .find(|(w, _, _)| *w == lower)
        .map(|(_, name, t)| (*name, *t))
}

fn is_file(word: &str) -> bool {
    if word.contains("://") {
        return false;
    }
    let has_ext = word
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && SOURCE_EXTENSIONS.contains(&ext));
    has_ext || (word.contains('/') && word.chars().filter(|c| c.is_alphabetic()).count() >= 3)
}

fn is_camel(word: &str) -> bool {
    if !word.chars().all(|c| c.is_alphanumeric()) {
        return false;
    }
    let mut chars = word.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    if !first.is_uppercase() {
        return false;
    }
    let mut seen_lower = false;
    for c in chars {
        if c.is_lowercase() {
            seen_lower = true;
        } else if c.is_uppercase() && seen_lower {
            return true;
        }
    }
    false
}

fn is_compound_identifier(word: &str) -> bool {
    let parts: Vec<&str> = word.split(['_', '-']).collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(char::is_alphanumeric))
        && parts
            .iter()
            .any(|p| COMPONENT_NOUNS.contains(&p.to_lowercase().as_str()))
}

/// The type of a name from its last part.
pub fn type_of(name: &str) -> String {
    if let Some((_, t)) = technology(name) {
        return t.to_string();
    }
    let parts = super::text::split_identifier(name);
    if let Some(last) = parts.last()
        && let Some((_, t)) = TYPE_SUFFIXES.iter().find(|(s, _)| s == last)
    {
        return (*t).to_string();
    }
    if is_file(name) {
        return "File".to_string();
    }
    "Component".to_string()
}

/// The entity mentions of one sentence, in order, without overlaps.
fn mentions(sentence: &str) -> Vec<Mention> {
    let words = words(sentence);
    let mut out: Vec<Mention> = Vec::new();
    let mut i = 0;
    while let Some(&(start, end, word, quoted)) = words.get(i) {
        let mention = |name: &str, t: String, end: usize| Mention {
            start,
            end,
            name: name.to_string(),
            entity_type: t,
        };
        if quoted {
            let len = word.chars().count();
            if (2..=64).contains(&len) {
                out.push(mention(word, type_of(word), end));
            }
        } else if is_file(word) {
            out.push(mention(word, "File".into(), end));
        } else if is_camel(word) || is_compound_identifier(word) {
            out.push(mention(word, type_of(word), end));
        } else if let Some((name, t)) = technology(word) {
            // "postgres db" / "redis cache": the noun belongs to the name.
            match words.get(i + 1) {
                Some(&(_, nend, next, false))
                    if COMPONENT_NOUNS.contains(&next.to_lowercase().as_str()) =>
                {
                    out.push(mention(&format!("{word} {next}"), t.into(), nend));
                    i += 2;
                    continue;
                }
                _ => out.push(mention(name, t.into(), end)),
            }
        } else if word.chars().all(|c| c.is_alphabetic())
            && word.chars().next().is_some_and(char::is_lowercase)
            && word.len() >= 3
            && !NOT_A_NAME.contains(&word.to_lowercase().as_str())
            && !COMPONENT_NOUNS.contains(&word.to_lowercase().as_str())
            && let Some(&(_, nend, next, false)) = words.get(i + 1)
            && COMPONENT_NOUNS.contains(&next.to_lowercase().as_str())
            && sentence
                .get(end..)
                .is_some_and(|rest| rest.trim_start().starts_with(next))
        {
            let name = format!("{word} {next}");
            let t = type_of(&name);
            out.push(mention(&name, t, nend));
            i += 2;
            continue;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn triples(text: &str) -> Vec<(String, String, String)> {
        let x = RuleExtractor.extract(text);
        x.relations
            .iter()
            .map(|r| {
                (
                    x.entities[r.source].name.clone(),
                    r.relationship.clone(),
                    x.entities[r.target].name.clone(),
                )
            })
            .collect()
    }

    fn t(a: &str, r: &str, b: &str) -> (String, String, String) {
        (a.into(), r.into(), b.into())
    }

    #[test]
    fn engineering_notes() {
        assert_eq!(
            triples(
                "AuthService calls UserRepository to load the account, and UserRepository reads from PostgresDB."
            ),
            vec![
                t("AuthService", "calls", "UserRepository"),
                t("UserRepository", "reads_from", "PostgresDB")
            ]
        );
        assert_eq!(
            triples(
                "The billing-worker depends on Redis and Kafka; it publishes to the invoices queue."
            ),
            vec![
                t("billing-worker", "depends_on", "Redis"),
                t("billing-worker", "depends_on", "Kafka")
            ]
        );
        assert_eq!(
            triples("UserRepository is called by SessionController."),
            vec![t("SessionController", "calls", "UserRepository")]
        );
        assert_eq!(
            triples("We migrated from MySQL to PostgreSQL last sprint."),
            vec![t("PostgreSQL", "replaces", "MySQL")]
        );
        assert_eq!(
            triples(
                "Fixed a race in src/auth/session.rs: SessionStore writes to Redis without a lock."
            ),
            vec![t("SessionStore", "writes_to", "Redis")]
        );
        assert_eq!(
            triples("The payments service authenticates with Stripe via `stripe-client`."),
            vec![t("payments service", "authenticates_with", "Stripe")]
        );
    }

    #[test]
    fn entities_types_and_descriptions() {
        let x = RuleExtractor.extract(
            "AuthService validates tokens. The orders queue is backed by SQS. See handlers/login.ts for details.",
        );
        let got: Vec<(&str, &str)> = x
            .entities
            .iter()
            .map(|e| (e.name.as_str(), e.entity_type.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("AuthService", "Service"),
                ("orders queue", "Queue"),
                ("SQS", "Queue"),
                ("handlers/login.ts", "File"),
            ]
        );
        assert_eq!(x.entities[0].description, "AuthService validates tokens");
        assert_eq!(
            triples("The orders queue is backed by SQS."),
            vec![t("orders queue", "backed_by", "SQS")]
        );
    }

    #[test]
    fn no_entities_in_plain_prose() {
        let x = RuleExtractor.extract("Re-run the follow-up tests tomorrow, then ship it.");
        assert!(x.entities.is_empty(), "{x:?}");
        assert!(RuleExtractor.extract("").entities.is_empty());
        assert!(RuleExtractor.extract("`").entities.is_empty());
    }

    #[test]
    fn a_conjunction_does_not_carry_into_a_new_clause() {
        assert_eq!(
            triples(
                "The billing-worker publishes to Kafka and InvoiceService consumes from Kafka."
            ),
            vec![
                t("billing-worker", "publishes_to", "Kafka"),
                t("InvoiceService", "consumes", "Kafka")
            ]
        );
    }

    #[test]
    fn co_occurrence_is_not_a_relationship() {
        assert!(triples("AuthService and PostgresDB were both slow today.").is_empty());
    }

    #[test]
    fn spellings_in_one_text_are_one_entity() {
        let x = RuleExtractor.extract(
            "AuthService is slow. The auth-service pods restart; auth service logs show it.",
        );
        assert_eq!(x.entities.len(), 1, "{x:?}");
    }
}
