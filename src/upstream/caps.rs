//! Caps on what upstream servers declare (`[upstream_limits]`): tools per
//! server, bytes per definition, bytes of every definition of one org.
//!
//! Every listed definition is held in memory in the org's tool set,
//! hashed, typed into the policy schema and sent in each agent's
//! `tools/list`, so an upstream declaring thousands of tools or megabytes
//! of descriptions makes every reload slow and every listing heavy (3,000
//! tools: 11 s per reload, 190 MB more memory; 12 MB of descriptions in
//! each `tools/list`). Decisions:
//!
//! - **What counts.** A definition's bytes are its JSON as listed
//!   (`serde_json` text, whatever the upstream put in it). The org's total
//!   counts the definitions of its other servers as stored (approved and
//!   held alike) plus this listing's, so one org's servers together stay
//!   within the bound and no org's declarations cost another's.
//! - **Refused as a whole.** A listing over a cap is not applied: at
//!   registration the server is refused (400, nothing stored); at a
//!   refresh it is recorded like any unusable listing (health `invalid`,
//!   `lastError` naming the cap, its tools hidden until a listing within
//!   the caps). Keeping part of a listing would offer a set of tools the
//!   upstream never declared.
//! - **Recorded.** Each refusal is a trail event
//!   (`upstream_listing_refused`, see `crate::audit::events`) with the cap,
//!   its bound and what was found; a refresh that finds the same refusal
//!   as the last one records nothing new.
//! - **Read no further.** The listing stops reading pages once it holds
//!   one tool more than the cap, so a server listing a million tools costs
//!   the cap, not the million.

use serde_json::Value;

use super::registry::{Listing, PinnedTool, ServerRow};
use crate::config::UpstreamLimitsConfig;

/// The trail's name of the tools-per-server cap.
pub const TOOLS_PER_SERVER: &str = "max_tools_per_server";

/// The trail's name of the bytes-per-definition cap.
pub const DEFINITION_BYTES: &str = "max_definition_bytes";

/// The trail's name of the bytes-per-org cap.
pub const ORG_DECLARED_BYTES: &str = "max_org_declared_bytes";

/// A listing over one of the caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Which cap (`[upstream_limits]` key).
    pub cap: &'static str,
    /// Its bound.
    pub limit: usize,
    /// What the listing would make it.
    pub found: usize,
    /// The tool at fault, for a definition over its bound.
    pub tool: Option<String>,
}

impl Refusal {
    /// The reason, as the API and the registry show it.
    pub fn message(&self) -> String {
        match (self.cap, &self.tool) {
            (DEFINITION_BYTES, Some(tool)) => format!(
                "the upstream's definition of `{}` is {} bytes, over `[upstream_limits] \
                 {DEFINITION_BYTES}` ({}); the listing was refused",
                crate::tools::spec::echo(tool),
                self.found,
                self.limit
            ),
            (TOOLS_PER_SERVER, _) => format!(
                "the upstream lists more than {} tools (`[upstream_limits] {TOOLS_PER_SERVER}`); \
                 the listing was refused",
                self.limit
            ),
            _ => format!(
                "the org's upstream servers would declare {} bytes of tool definitions, over \
                 `[upstream_limits] {ORG_DECLARED_BYTES}` ({}); the listing was refused",
                self.found, self.limit
            ),
        }
    }
}

/// The bytes of one definition as JSON text.
pub fn definition_bytes(definition: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, definition);
    count.0
}

/// The bytes a stored server declares: its approved and held definitions.
pub fn declared_bytes(row: &ServerRow) -> usize {
    row.tools
        .iter()
        .map(|t| {
            let held = t
                .held
                .as_ref()
                .map_or(0, |h| definition_bytes(&h.definition));
            definition_bytes(&t.definition) + held
        })
        .sum()
}

/// The first cap `tools` crosses; `others` is what the org's other
/// servers declare.
pub fn check(
    tools: &[PinnedTool],
    limits: &UpstreamLimitsConfig,
    others: usize,
) -> Result<(), Refusal> {
    if tools.len() > limits.max_tools_per_server {
        return Err(Refusal {
            cap: TOOLS_PER_SERVER,
            limit: limits.max_tools_per_server,
            found: tools.len(),
            tool: None,
        });
    }
    let mut total = others;
    for tool in tools {
        let bytes = definition_bytes(&tool.definition);
        if bytes > limits.max_definition_bytes {
            return Err(Refusal {
                cap: DEFINITION_BYTES,
                limit: limits.max_definition_bytes,
                found: bytes,
                tool: Some(tool.name.clone()),
            });
        }
        total += bytes;
    }
    if total > limits.max_org_declared_bytes {
        return Err(Refusal {
            cap: ORG_DECLARED_BYTES,
            limit: limits.max_org_declared_bytes,
            found: total,
            tool: None,
        });
    }
    Ok(())
}

/// `listing` within the caps as it is; over one, an unusable listing
/// naming the cap, and the refusal. `rows` are the org's servers as
/// stored; `server` is the one listed (its own stored pins do not count).
pub fn screen(
    listing: Listing,
    limits: &UpstreamLimitsConfig,
    rows: &[ServerRow],
    server: &str,
) -> (Listing, Option<Refusal>) {
    let Listing::Listed { tools, .. } = &listing else {
        return (listing, None);
    };
    let others = rows
        .iter()
        .filter(|r| r.id != server)
        .map(declared_bytes)
        .sum();
    match check(tools, limits, others) {
        Ok(()) => (listing, None),
        Err(refusal) => (Listing::Invalid(refusal.message()), Some(refusal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> PinnedTool {
        PinnedTool::pin(json!({"name": name, "description": description}))
            .unwrap_or_else(|| unreachable!("named"))
    }

    #[test]
    fn each_cap_is_crossed_by_one_more() {
        let limits = UpstreamLimitsConfig {
            max_tools_per_server: 2,
            max_definition_bytes: 100,
            max_org_declared_bytes: 150,
        };
        let two = [tool("a", ""), tool("b", "")];
        assert_eq!(check(&two, &limits, 0), Ok(()));
        let three = [tool("a", ""), tool("b", ""), tool("c", "")];
        assert_eq!(
            check(&three, &limits, 0).map_err(|r| r.cap),
            Err(TOOLS_PER_SERVER)
        );
        let base = definition_bytes(&json!({"name": "a", "description": ""}));
        let exact = tool("a", &"x".repeat(100 - base));
        assert_eq!(definition_bytes(&exact.definition), 100);
        assert_eq!(check(std::slice::from_ref(&exact), &limits, 0), Ok(()));
        let over = tool("a", &"x".repeat(101 - base));
        assert_eq!(
            check(std::slice::from_ref(&over), &limits, 0).map_err(|r| r.cap),
            Err(DEFINITION_BYTES)
        );
        assert_eq!(check(std::slice::from_ref(&exact), &limits, 50), Ok(()));
        assert_eq!(
            check(std::slice::from_ref(&exact), &limits, 51).map_err(|r| r.cap),
            Err(ORG_DECLARED_BYTES)
        );
    }
}
