//! The agent card parser (`a2a::card::parse`) over what a peer publishes
//! at `/.well-known/agent-card.json`, and the naming rules applied to it.
//!
//! Properties checked beyond "never panics":
//! - an accepted card has a non-empty name and at least one interface,
//!   each an absolute http(s) URL, one of which `choose` picks;
//! - its skills are at most `MAX_SKILLS`, with distinct ids of 1 to 64
//!   characters of `A-Z a-z 0-9 _ - .`, each schema an object schema;
//! - tool names and legacy aliases are made of the slug and the id.
#![no_main]

use std::collections::HashSet;

use cedargate::a2a::card::{self, MAX_SKILLS};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(parsed) = card::parse(&value) else {
        return;
    };
    assert!(!parsed.name.trim().is_empty());
    assert!(!parsed.interfaces.is_empty());
    for i in &parsed.interfaces {
        let url = url::Url::parse(&i.url).expect("an interface URL parses");
        assert!(matches!(url.scheme(), "http" | "https"), "{url}");
    }
    let chosen = parsed
        .choose(None)
        .expect("a card with interfaces has a choice");
    assert!(
        parsed
            .interfaces
            .iter()
            .all(|i| i.version <= chosen.version)
    );
    assert!(parsed.skills.len() <= MAX_SKILLS);
    let slug = card::slugify(&parsed.name);
    assert!(
        slug.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    );
    assert!(!slug.starts_with('_') && !slug.ends_with('_'));
    let mut ids = HashSet::new();
    for skill in &parsed.skills {
        assert!(ids.insert(skill.id.clone()), "duplicate skill {}", skill.id);
        assert!((1..=64).contains(&skill.id.len()));
        assert!(
            skill
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        );
        let schema = card::input_schema(skill);
        assert!(schema.is_object());
        if let Some(t) = schema.get("type") {
            assert_eq!(t, "object");
        }
        let tool = card::tool_name(&slug, &skill.id);
        assert_eq!(tool, format!("{slug}.{}", skill.id));
        let alias = card::legacy_alias(&slug, &skill.id);
        assert!(alias.starts_with("a2a_"));
    }
});
