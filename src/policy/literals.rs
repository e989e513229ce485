//! What a policy set can single out by name: every string literal in its
//! policies and every id its template links bind.
//!
//! `tools/list` decides `view_tool` once for all the A2A tools of a peer
//! that no policy can tell apart; Cedar can tell two such tools apart only
//! by comparing their uid with a literal, so a tool whose name is one of
//! these strings is decided on its own. The endpoint asks this module
//! rather than reading policy text itself, so policy analysis stays with
//! the policies. The scan is deliberately coarse (any literal anywhere
//! counts): a false match only costs one more decision, never shares a
//! verdict a policy could tell apart.

use std::collections::HashSet;

use super::PolicyBundle;

impl PolicyBundle {
    /// Every string literal (unescaped) and template-link id in this
    /// bundle's policies: the tool names a policy could single out.
    pub fn string_literals(&self) -> HashSet<String> {
        let mut out = HashSet::new();
        for p in self.policies.policies() {
            collect(&p.to_string(), &mut out);
            if let Some(links) = p.template_links() {
                for uid in links.values() {
                    out.insert(uid.id().unescaped().to_string());
                }
            }
        }
        out
    }
}

/// Collects the (unescaped) contents of every `"…"` in Cedar source text.
fn collect(text: &str, out: &mut HashSet<String>) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut lit = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => lit.push('\n'),
                    Some('r') => lit.push('\r'),
                    Some('t') => lit.push('\t'),
                    Some('0') => lit.push('\0'),
                    Some('u') => {
                        let hex: String = chars
                            .by_ref()
                            .skip_while(|c| *c == '{')
                            .take_while(|c| *c != '}')
                            .collect();
                        if let Some(ch) =
                            u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)
                        {
                            lit.push(ch);
                        }
                    }
                    Some(other) => lit.push(other),
                    None => break,
                },
                other => lit.push(other),
            }
        }
        out.insert(lit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_are_found_and_unescaped() {
        let mut out = HashSet::new();
        collect(
            r#"forbid (principal, action, resource == Gateway::Tool::"ops.deploy") when { context.x == "a\"b" && "\u{6f}ps.x" == "y" };"#,
            &mut out,
        );
        for s in ["ops.deploy", "a\"b", "ops.x", "y"] {
            assert!(out.contains(s), "{s} in {out:?}");
        }
    }
}
