//! Trail events: what happens to the gateway's tools outside a request
//! and an auditor must see in the same tamper-evident chain as the
//! decisions (today: upstream tool definitions held and approved, and
//! upstream listings refused for crossing `[upstream_limits]`, whose
//! outcome is `{upstream, cap, limit, found, tool, trigger}`).
//!
//! An event is a trail record like a decision (same table, same hash
//! chain, so `audit verify` covers it) but records no Cedar decision:
//! - `action` names the event (`upstream_tool_held`,
//!   `upstream_tool_approved`), never a Cedar action;
//! - `decision` is `event`; `reasons`, `errors` are `[]`, `context` `{}`,
//!   the entity snapshot the empty list `[]` (every record names a stored
//!   snapshot, which `audit verify` checks);
//! - `principal` is the upstream server (`Gateway::McpServer::"<slug>"`),
//!   `resource` the tool under its gateway name (`Gateway::Tool::"<name>"`);
//! - `policy_hash` is the set active when it happened;
//! - `outcome` holds the facts: `{"upstream", "tool", "oldHash",
//!   "newHash", "trigger"}` (`oldHash` empty for a tool never approved;
//!   `trigger` `refresh`, `background-refresh`, `list-changed` or
//!   `approve`).
//!
//! One event is about the gateway's credentials rather than its tools:
//! `credential_guesses_throttled`, the first refusal of a throttled burst
//! of wrong credentials (`crate::guesses`). Its `principal` is the client
//! (`Gateway::Client::"<address>"`, `"*"` for all addresses together), its
//! `resource` the credentials (`Gateway::Credential::"operator_token"` or
//! `"daemon_key"`), no org, and `outcome` holds `{"credential", "scope"
//! (address or total), "address", "entry" (admin, console, mcp or
//! sessions), "retryAfterSeconds", "burst", "perMinute"}`.
//!
//! Another is `access_token_refused`, the first refusal of a burst of
//! access tokens from one address for one reason (`crate::guesses`): the
//! same `principal`, `resource` `Gateway::Credential::"access_token"`, no
//! org, and `outcome` `{"credential", "reason" (one word:
//! `crate::identity::TokenError::reason`, never the token nor its claims),
//! "address", "entry" (mcp), "burstQuietSeconds"}`.
//!
//! Two are about the policy set (`crate::lifecycle::gate`):
//! `policy_set_refused`, a reload's candidate refused by its proof, and
//! `policy_set_accepted`, an admin accepting a candidate despite it. Their
//! `principal` is the candidate (`Gateway::PolicySet::"<hash>"`, its text
//! recorded as a policy set beside the refusal), `resource` the active
//! set, no org; a refusal's `outcome` holds `{candidateHash, liveHash,
//! trigger, outcome, message, widenings, unsettled, counterexamples}`
//! (the first three widening requests, each with its context and
//! entities), an acceptance's `{candidateHash, liveHash, by}`.
//!
//! `audit replay` counts events and decides nothing for them.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::policy::Kind;
use crate::store::decisions::NewDecision;

/// The `decision` column of an event.
pub const EVENT: &str = "event";

/// An upstream tool's changed (or new) definition was held until approved.
pub const UPSTREAM_TOOL_HELD: &str = "upstream_tool_held";

/// A held upstream tool definition was approved.
pub const UPSTREAM_TOOL_APPROVED: &str = "upstream_tool_approved";

/// A burst of wrong credentials was throttled (recorded once per burst).
pub const CREDENTIAL_GUESSES_THROTTLED: &str = "credential_guesses_throttled";

/// A burst of access tokens was refused (recorded once per burst and
/// reason).
pub const ACCESS_TOKEN_REFUSED: &str = "access_token_refused";

/// A reload's candidate was refused by its proof (`[lifecycle] prove =
/// "refuse-widening"`).
pub const POLICY_SET_REFUSED: &str = "policy_set_refused";

/// An admin accepted a candidate despite its proof.
pub const POLICY_SET_ACCEPTED: &str = "policy_set_accepted";

/// The entity snapshot of an event: none.
const NO_ENTITIES: &str = "[]";

/// Whether a trail record is an event rather than a decision.
pub fn is_event(record: &NewDecision) -> bool {
    record.decision == EVENT
}

/// What an upstream definition event is about.
#[derive(Debug, Clone, Copy)]
pub struct DefinitionChange<'a> {
    /// The org of the server.
    pub org_id: &'a str,
    /// The server's registry id.
    pub upstream_id: &'a str,
    /// The server's slug (Cedar `McpServer` id).
    pub slug: &'a str,
    /// The upstream's name for the tool.
    pub tool: &'a str,
    /// The gateway's name for it.
    pub gateway_name: &'a str,
    /// The approved hash before (empty: none).
    pub old_hash: &'a str,
    /// The listed (held) or newly approved hash.
    pub new_hash: &'a str,
    /// What found or made the change.
    pub trigger: &'a str,
}

/// A throttled burst of wrong credentials.
#[derive(Debug, Clone, Copy)]
pub struct ThrottledGuesses<'a> {
    /// `operator_token` or `daemon_key`.
    pub credential: &'a str,
    /// `address` or `total`.
    pub scope: &'a str,
    /// The client address (IPv6: its /64); `None` for the total.
    pub address: Option<&'a str>,
    /// Where the burst was first refused: `admin`, `console`, `mcp`,
    /// `sessions`.
    pub entry: &'a str,
    /// Seconds until an attempt was checked again.
    pub retry_after_secs: u64,
    /// The bucket's burst.
    pub burst: u32,
    /// The bucket's tokens regained per minute.
    pub per_minute: u32,
}

/// The trail record of a throttled burst of wrong credentials.
pub fn guesses_event(guesses: &ThrottledGuesses<'_>, policy_hash: &str) -> NewDecision {
    let outcome = json!({
        "credential": guesses.credential,
        "scope": guesses.scope,
        "address": guesses.address,
        "entry": guesses.entry,
        "retryAfterSeconds": guesses.retry_after_secs,
        "burst": guesses.burst,
        "perMinute": guesses.per_minute,
    });
    let client = guesses.address.unwrap_or("*");
    credential_event(
        CREDENTIAL_GUESSES_THROTTLED,
        (client, guesses.credential),
        &outcome,
        policy_hash,
    )
}

/// A refused access token, as [`refused_token_event`] records it.
#[derive(Debug, Clone, Copy)]
pub struct RefusedToken<'a> {
    /// The client's address (IPv6 by its /64).
    pub address: &'a str,
    /// Why it was refused (`crate::identity::TokenError::reason`).
    pub reason: &'a str,
    /// Where it was presented (`mcp`).
    pub entry: &'a str,
    /// Quiet seconds that end the burst.
    pub burst_quiet_secs: u64,
}

/// The trail record of the first refusal of a burst of access tokens.
pub fn refused_token_event(refused: &RefusedToken<'_>, policy_hash: &str) -> NewDecision {
    let outcome = json!({
        "credential": "access_token",
        "reason": refused.reason,
        "address": refused.address,
        "entry": refused.entry,
        "burstQuietSeconds": refused.burst_quiet_secs,
    });
    credential_event(
        ACCESS_TOKEN_REFUSED,
        (refused.address, "access_token"),
        &outcome,
        policy_hash,
    )
}

/// An event about the gateway's credentials: `principal` the client,
/// `resource` the credential, no org.
fn credential_event(
    action: &str,
    (client, credential): (&str, &str),
    outcome: &serde_json::Value,
    policy_hash: &str,
) -> NewDecision {
    NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: crate::ids::now_rfc3339(),
        org_id: None,
        session_id: None,
        principal: format!("Gateway::Client::{}", json!(client)),
        action: action.to_string(),
        resource: format!("Gateway::Credential::{}", json!(credential)),
        context: "{}".into(),
        entities_hash: hex::encode(Sha256::digest(NO_ENTITIES.as_bytes())),
        entities: Some(NO_ENTITIES.into()),
        policy_hash: policy_hash.to_string(),
        decision: EVENT.into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: outcome.to_string(),
        notes: "null".into(),
    }
}

/// The trail record of a policy set event ([`POLICY_SET_REFUSED`],
/// [`POLICY_SET_ACCEPTED`]): `principal` the candidate
/// (`Gateway::PolicySet::"<hash>"`), `resource` the active set, no org;
/// `policy_hash` the active set's.
pub fn policy_set_event(
    action: &str,
    (candidate, live): (&str, &str),
    outcome: &serde_json::Value,
) -> NewDecision {
    NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: crate::ids::now_rfc3339(),
        org_id: None,
        session_id: None,
        principal: format!("Gateway::PolicySet::{}", json!(candidate)),
        action: action.to_string(),
        resource: format!("Gateway::PolicySet::{}", json!(live)),
        context: "{}".into(),
        entities_hash: hex::encode(Sha256::digest(NO_ENTITIES.as_bytes())),
        entities: Some(NO_ENTITIES.into()),
        policy_hash: live.to_string(),
        decision: EVENT.into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: outcome.to_string(),
        notes: "null".into(),
    }
}

/// The trail record of one definition event (`action` one of
/// [`UPSTREAM_TOOL_HELD`], [`UPSTREAM_TOOL_APPROVED`]).
pub fn definition_event(
    action: &str,
    change: &DefinitionChange<'_>,
    policy_hash: &str,
) -> NewDecision {
    let outcome = json!({
        "upstream": change.upstream_id,
        "tool": change.tool,
        "oldHash": change.old_hash,
        "newHash": change.new_hash,
        "trigger": change.trigger,
    });
    NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: crate::ids::now_rfc3339(),
        org_id: Some(change.org_id.to_string()),
        session_id: None,
        principal: Kind::McpServer.uid(change.slug).to_string(),
        action: action.to_string(),
        resource: Kind::Tool.uid(change.gateway_name).to_string(),
        context: "{}".into(),
        entities_hash: hex::encode(Sha256::digest(NO_ENTITIES.as_bytes())),
        entities: Some(NO_ENTITIES.into()),
        policy_hash: policy_hash.to_string(),
        decision: EVENT.into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: outcome.to_string(),
        notes: "null".into(),
    }
}

/// An upstream's listing over one of the `[upstream_limits]` caps was
/// refused (`crate::upstream::caps`).
pub const UPSTREAM_LISTING_REFUSED: &str = "upstream_listing_refused";

/// What a refused listing event is about.
#[derive(Debug, Clone, Copy)]
pub struct ListingRefusal<'a> {
    /// The org of the server.
    pub org_id: &'a str,
    /// The server's registry id (at a refused registration, the id it
    /// would have had; nothing is stored under it).
    pub upstream_id: &'a str,
    /// The server's slug (Cedar `McpServer` id).
    pub slug: &'a str,
    /// The `[upstream_limits]` key crossed.
    pub cap: &'a str,
    /// Its bound.
    pub limit: usize,
    /// What the listing would have made it.
    pub found: usize,
    /// The tool at fault (a definition over its bound), under the
    /// gateway's name.
    pub tool: Option<&'a str>,
    /// What listed (`register`, `refresh`, …).
    pub trigger: &'a str,
}

/// The trail record of a refused listing: principal and resource the
/// server (the resource is the tool when one definition was at fault);
/// outcome `{upstream, cap, limit, found, tool, trigger}`.
pub fn listing_refused_event(refusal: &ListingRefusal<'_>, policy_hash: &str) -> NewDecision {
    let resource = match refusal.tool {
        Some(tool) => Kind::Tool.uid(tool),
        None => Kind::McpServer.uid(refusal.slug),
    };
    let outcome = json!({
        "upstream": refusal.upstream_id,
        "cap": refusal.cap,
        "limit": refusal.limit,
        "found": refusal.found,
        "tool": refusal.tool,
        "trigger": refusal.trigger,
    });
    NewDecision {
        resource: resource.to_string(),
        outcome: outcome.to_string(),
        action: UPSTREAM_LISTING_REFUSED.to_string(),
        ..definition_event(
            UPSTREAM_LISTING_REFUSED,
            &DefinitionChange {
                org_id: refusal.org_id,
                upstream_id: refusal.upstream_id,
                slug: refusal.slug,
                tool: "",
                gateway_name: "",
                old_hash: "",
                new_hash: "",
                trigger: refusal.trigger,
            },
            policy_hash,
        )
    }
}
