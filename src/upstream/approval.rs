//! Approving held definitions, for the admin API and the console alike.
//!
//! An approval reads the row, approves in memory, and writes the pins back
//! only while the stored ones are those it read (`ServerRow::stored_tools`).
//! A refresh (by an operator, the timer, or a `list_changed`) that stored
//! a listing in between makes the approval read again and approve afresh,
//! so neither write undoes the other: an approved definition is never put
//! back on hold by a refresh that read the row before it, and a definition
//! a refresh newly held is never dropped by an approval built on older
//! pins. An approval names, for each tool, the held definition's hash (the
//! console's form sends the hash it showed; the API's `heldHashes`), never
//! just a tool name: a tool holding another definition by then (a refresh
//! held a newer one) fails the whole approval, nothing stored. So what is
//! approved is always exactly what the approver saw.
//! Each approved definition is a decision-trail event
//! (`upstream_tool_approved`, with the old and new hash) and the org's
//! tool set is invalidated on every instance.

use std::collections::BTreeMap;

use super::refresh::{self, WRITE_ATTEMPTS, read_row};
use super::registry::{self, HeldChange, PinnedTool, ServerRow};
use crate::audit::events::UPSTREAM_TOOL_APPROVED;
use crate::cluster::coherence;
use crate::error::AppError;
use crate::gateway::Gateway;

/// What an approval did.
#[derive(Debug)]
pub enum Approval {
    /// A tool's held definition is not the one reviewed (`reviewed`
    /// named another hash, or the tool holds nothing); nothing was stored.
    Changed {
        /// The tool, as named in `reviewed`.
        tool: String,
        /// The hash held now (empty when nothing is held).
        held: String,
    },
    /// Stored: the row as stored, and how many definitions were approved.
    Approved {
        /// The row after the approval.
        row: Box<ServerRow>,
        /// Definitions released from hold.
        approved: usize,
    },
}

/// Approves the held definitions `reviewed` names (tool, the upstream's or
/// the gateway's name → the held hash the approver reviewed) of one
/// upstream: each named tool must hold exactly that definition, or nothing
/// is approved (a refresh may hold a newer one between a review and its
/// approval). `trigger` names who asked (`approve`, `console`).
pub async fn approve(
    gw: &Gateway,
    org: &str,
    id: &str,
    reviewed: &BTreeMap<String, String>,
    trigger: &str,
) -> Result<Approval, AppError> {
    for _ in 0..WRITE_ATTEMPTS {
        let mut row = read_row(gw, org, id).await?;
        let before = row.tools.clone();
        let approved = match registry::approve(&mut row, reviewed) {
            Ok(n) => n,
            Err((tool, held)) => return Ok(Approval::Changed { tool, held }),
        };
        let (row, stored) = gw
            .store
            .read(move |c| registry::set_tools(c, &mut row).map(|s| (row, s)))
            .await?;
        if !stored {
            continue;
        }
        tracing::info!(upstream = %row.slug, org = %org, approved, "upstream tool definitions approved");
        let changes = approved_changes(&before, &row.tools);
        refresh::record_events(gw, &row, &changes, UPSTREAM_TOOL_APPROVED, trigger).await?;
        coherence::changed(gw, org).await;
        return Ok(Approval::Approved {
            row: Box::new(row),
            approved,
        });
    }
    Err(AppError::Conflict(
        "the MCP server's definitions kept changing while the approval was stored; try again"
            .into(),
    ))
}

/// Why an approval naming a reviewed hash was refused.
pub fn changed(tool: &str, held: &str) -> String {
    if held.is_empty() {
        format!("`{tool}` holds no definition now; nothing approved")
    } else {
        format!(
            "the held definition of `{tool}` is now `{held}`, not the one reviewed; \
             review it again (nothing approved)"
        )
    }
}

/// The definitions an approval changed: old and new approved hash.
fn approved_changes(before: &[PinnedTool], after: &[PinnedTool]) -> Vec<HeldChange> {
    after
        .iter()
        .filter_map(|t| {
            let old = before.iter().find(|b| b.name == t.name)?;
            (old.hash != t.hash).then(|| HeldChange {
                tool: t.name.clone(),
                old_hash: old.hash.clone(),
                new_hash: t.hash.clone(),
            })
        })
        .collect()
}
