//! Which names may be written into Cedar text, and how they are written.
//!
//! A tool name becomes an action id of the effective schema and each
//! `inputSchema` property name an attribute of its `context.args`; both
//! come from outside (an upstream MCP server's listing). The effective
//! schema is one text shared by every org, so one name Cedar refuses would
//! make every reload and every start-up fail.
//!
//! **Rule:** a name is *writable* when it holds no control character
//! (Unicode `Cc`: `\0`, `\b`, `\u{1}`, newlines, DEL, …) and none of the
//! invisible formatting characters that make two names look alike or
//! reorder the text around them (zero-width spaces and joiners, bidi
//! embeddings, overrides and isolates, line and paragraph separators, the
//! soft hyphen, the byte-order mark). Anything else is written quoted, with
//! Cedar's escapes for `"` and `\`. An upstream tool whose name or any
//! property name is not writable is refused at registration and refresh
//! (`src/upstream/README.md`, "Cedar names"); `schema_gen` never
//! writes one into the schema either, whatever hands it the tool, and
//! checks each generated action on its own before it joins the schema.

use std::fmt::Write as _;

use serde_json::Value;

/// Invisible formatting characters refused in names (besides `Cc`).
const INVISIBLE: &[char] = &[
    '\u{00AD}', // soft hyphen
    '\u{061C}', // Arabic letter mark
    '\u{180E}', // Mongolian vowel separator
    '\u{200B}', '\u{200C}', '\u{200D}', '\u{200E}', '\u{200F}', // zero width, marks
    '\u{2028}', '\u{2029}', // line and paragraph separators
    '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', // bidi embeddings
    '\u{2060}', '\u{2061}', '\u{2062}', '\u{2063}', '\u{2064}', // word joiner, invisibles
    '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', // bidi isolates
    '\u{FEFF}', // byte-order mark
];

/// Whether `name` may be written into Cedar text (the module doc's rule).
pub fn writable(name: &str) -> bool {
    !name
        .chars()
        .any(|c| c.is_control() || INVISIBLE.contains(&c))
}

/// `name` as a quoted Cedar string: `"` and `\` escaped, and (for a name
/// that is not [`writable`], which is never written) every control
/// character as `\u{…}`. Never JSON's escapes: Cedar has no `\b`, `\f` or
/// `\u0001`.
pub fn quote(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() || INVISIBLE.contains(&c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Why an MCP tool definition cannot be typed in Cedar: its `name` or a
/// property name of its `inputSchema` (at any depth) is not [`writable`].
/// The reason shows the offending name escaped, so it is safe to log and
/// display. `None` when every name is writable.
pub fn unwritable_tool(definition: &Value) -> Option<String> {
    if let Some(name) = definition.get("name").and_then(Value::as_str)
        && !writable(name)
    {
        return Some(format!(
            "the tool name `{}` holds a control or invisible character, which cannot be written in Cedar",
            name.escape_debug()
        ));
    }
    let schema = definition.get("inputSchema")?;
    unwritable_property(schema, "inputSchema").map(|path| {
        format!(
            "the inputSchema property `{path}` holds a control or invisible character, which cannot be written in Cedar"
        )
    })
}

/// The path of the first property name that is not writable, escaped.
fn unwritable_property(schema: &Value, path: &str) -> Option<String> {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                for name in props.keys() {
                    if !writable(name) {
                        return Some(format!("{path}.{}", name.escape_debug()));
                    }
                }
            }
            map.iter().find_map(|(key, v)| {
                let child = format!("{path}.{}", key.escape_debug());
                unwritable_property(v, &child)
            })
        }
        Value::Array(items) => items
            .iter()
            .find_map(|v| unwritable_property(v, &format!("{path}[]"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn control_and_invisible_characters_are_not_writable() {
        for bad in [
            "re\u{8}ad",
            "a\u{0}",
            "\u{1}",
            "x\ny",
            "x\u{7f}",
            "a\u{202e}b",
            "a\u{200b}",
        ] {
            assert!(!writable(bad), "{bad:?}");
        }
        for good in [
            "fs.read",
            "read-file",
            "ünïcödé",
            "a\"b",
            "a\\b",
            "with space",
            "",
        ] {
            assert!(writable(good), "{good:?}");
        }
    }

    #[test]
    fn quoting_uses_cedar_escapes_only() {
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(quote("a\u{8}b\u{1}"), r#""a\u{8}b\u{1}""#);
    }

    #[test]
    fn a_tool_is_refused_for_its_name_or_any_nested_property_name() {
        let ok = json!({"name": "read", "inputSchema": {"type": "object",
            "properties": {"path": {"type": "string"}}}});
        assert_eq!(unwritable_tool(&ok), None);
        let name = json!({"name": "re\u{8}ad", "inputSchema": {"type": "object"}});
        assert!(unwritable_tool(&name).unwrap().contains("re\\u{8}ad"));
        let nested = json!({"name": "read", "inputSchema": {"type": "object", "properties": {
            "opts": {"type": "array", "items": {"type": "object",
                "properties": {"pa\u{0}th": {"type": "string"}}}}}}});
        let reason = unwritable_tool(&nested).unwrap();
        assert!(reason.contains("pa\\0th"), "{reason}");
        assert!(!reason.contains('\u{0}'));
    }
}
