//! Fields the request path adds to a decision record's `notes` once the
//! record is built: the caller's W3C trace context and a person's token
//! `jti`.
//!
//! **Why not parse and re-serialize:** by then a call's record carries its
//! folded prelude decisions ([`super::prelude`]) in `notes`, context text
//! included, so a round trip through `serde_json::Value` rebuilt and
//! re-escaped all of it for every record of every request: a person's
//! `tools/call` spent more on stamping its `jti` than on deciding it. The
//! notes are read only for their top-level keys (values skipped, not
//! built) and the fields are appended before the closing brace. That is
//! the text the round trip wrote: `serde_json` keeps keys in insertion
//! order in this build (its `preserve_order` feature is on), so new keys
//! went last, and the writers of `notes` write compact JSON.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;

/// `notes` (a JSON object, or `null`/anything else, read as no notes) with
/// `fields` (key, string value) added at its end, unless the notes already
/// hold the first field's key: the fields are one group (a `traceparent`
/// and its `tracestate`), added together or not at all.
pub fn stamped(notes: &str, fields: &[(&str, &str)]) -> String {
    let Some((first, _)) = fields.first() else {
        return notes.to_string();
    };
    let object = top_level_keys(notes);
    if object
        .as_ref()
        .is_some_and(|keys| keys.contains_key(*first))
    {
        return notes.to_string();
    }
    let mut out = match object {
        Some(keys) if !keys.is_empty() => {
            let body = notes.trim_end();
            let mut out = body[..body.len() - 1].to_string();
            out.push(',');
            out
        }
        _ => String::from("{"),
    };
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, key);
        out.push(':');
        push_json_string(&mut out, value);
    }
    out.push('}');
    out
}

/// The top-level keys of `notes` when it is a JSON object (values are
/// checked and skipped, never built), else `None`.
fn top_level_keys(notes: &str) -> Option<BTreeMap<String, IgnoredAny>> {
    serde_json::from_str(notes).ok()
}

fn push_json_string(out: &mut String, s: &str) {
    // Serializing a `&str` cannot fail; the fallback keeps the JSON valid.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// What the `Value` round trip this replaces wrote.
    fn round_trip(notes: &str, fields: &[(&str, &str)]) -> String {
        let mut map = match serde_json::from_str(notes) {
            Ok(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        if map.contains_key(fields[0].0) {
            return notes.to_string();
        }
        for (k, v) in fields {
            map.insert((*k).into(), (*v).into());
        }
        Value::Object(map).to_string()
    }

    #[test]
    fn fields_are_added_as_the_round_trip_added_them() {
        let prelude = json!({
            "prelude": {"format": 1, "context": "{\"session\":{\"id\":\"s\\\"1\"}}",
                        "decisions": [{"id": "d", "reasons": ["p"], "errors": []}]},
            "zeta": null, "alpha": [1, 2.5, "x"]
        })
        .to_string();
        let cases = [
            "null",
            "{}",
            "not json",
            "[1,2]",
            "{\"a\":1}",
            prelude.as_str(),
        ];
        for notes in cases {
            for fields in [
                &[("jti", "j-1")][..],
                &[("traceparent", "00-ab-cd-01"), ("tracestate", "k=v")][..],
                &[("jti", "quote\" and \\ and \u{1}")][..],
            ] {
                let got = stamped(notes, fields);
                assert_eq!(got, round_trip(notes, fields), "{notes} {fields:?}");
                let parsed: Value = serde_json::from_str(&got).unwrap();
                assert_eq!(parsed[fields[0].0], fields[0].1);
            }
        }
    }

    #[test]
    fn notes_holding_the_first_key_are_kept_as_they_are() {
        let notes = r#"{"jti":"earlier","x":1}"#;
        assert_eq!(stamped(notes, &[("jti", "later")]), notes);
        let traced = r#"{"traceparent":"00-a-b-01"}"#;
        assert_eq!(
            stamped(
                traced,
                &[("traceparent", "00-c-d-01"), ("tracestate", "k=v")]
            ),
            traced
        );
    }

    #[test]
    fn a_key_nested_deeper_is_not_the_top_level_one() {
        let notes = r#"{"prelude":{"jti":"inner"}}"#;
        assert_eq!(
            stamped(notes, &[("jti", "j")]),
            r#"{"prelude":{"jti":"inner"},"jti":"j"}"#
        );
    }
}
