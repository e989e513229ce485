//! Console actions that change something (a policy reload, approving held
//! upstream tool definitions) are chained into the decision trail as
//! operator records: action `console:<verb>`, principal
//! `Gateway::Console::"admin"`, the form's inputs as context, an empty
//! entity snapshot, the active policy hash, decision `allow` (an admin
//! sign-in allowed it) and the action's result as outcome. The notes say
//! who: `{"via": "console", "operator": …}`, the person the identity
//! provider signed in (`issuer`, `subject`, `name`, `email`), or
//! `{"token": "admin"}` for the shared admin token. They verify and export
//! like every record; replay skips them (no Cedar decision).

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::auth::Viewer;
use super::error::ConsoleError;
use crate::gateway::Gateway;
use crate::store::WriteOp;
use crate::store::decisions::{NewDecision, OPERATOR_ACTION_PREFIX};

/// The principal of every console operator record.
pub const PRINCIPAL: &str = "Gateway::Console::\"admin\"";

/// One console action to record.
pub struct Action<'a> {
    /// Who did it.
    pub by: &'a Viewer,
    /// `reload_policies`, `approve_tools`.
    pub verb: &'a str,
    /// The org it changed, if one.
    pub org: Option<&'a str>,
    /// What it changed (a uid).
    pub resource: String,
    /// The inputs.
    pub context: Value,
    /// What came of it.
    pub outcome: Value,
}

/// Records `action` durably; returns the record's id.
pub async fn record(gw: &Gateway, action: Action<'_>) -> Result<String, ConsoleError> {
    let entities = "[]";
    let record = NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: crate::ids::now_rfc3339(),
        org_id: action.org.map(str::to_string),
        session_id: None,
        principal: PRINCIPAL.into(),
        action: format!("{OPERATOR_ACTION_PREFIX}{}", action.verb),
        resource: action.resource,
        context: action.context.to_string(),
        entities_hash: hex::encode(Sha256::digest(entities.as_bytes())),
        entities: Some(entities.into()),
        policy_hash: gw.pep.current().hash.clone(),
        decision: "allow".into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: action.outcome.to_string(),
        notes: serde_json::json!({ "via": "console", "operator": operator(action.by) }).to_string(),
    };
    let id = record.id.clone();
    gw.store
        .writer()
        .submit(vec![WriteOp::Decision(Box::new(record))])
        .await?;
    Ok(id)
}

/// Who a record names as its operator.
fn operator(viewer: &Viewer) -> Value {
    match &viewer.person {
        Some(person) => serde_json::json!({
            "issuer": person.issuer,
            "subject": person.subject,
            "name": person.name,
            "email": person.email,
        }),
        None => serde_json::json!({ "token": viewer.role }),
    }
}
