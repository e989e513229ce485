//! `cedargate audit export`: the decision trail as JSON lines (the stored
//! record, chain fields included) or as OCSF events for a SIEM.
//!
//! OCSF mapping (schema 1.0.0, the shape Cedar's own local agent logs):
//! class Entity Management (`class_uid` 3004, category IAM 3), `entity` the
//! principal, `entity_result` the resource, `activity_name` the action,
//! `status_code` `Allow`/`Deny`, `status_detail` the determining policies
//! (or the errors), `severity_id` from the error count, and the rest of the
//! record (context, policy and entity hashes, chain position, outcome)
//! under `unmapped`.

use std::io::Write;

use serde_json::{Value, json};

use crate::store::decisions::StoredDecision;

/// Export formats.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One stored record per line.
    Jsonl,
    /// One OCSF event per line.
    Ocsf,
}

/// One record in `format`, as a single line of JSON.
pub fn line(d: &StoredDecision, format: Format) -> String {
    match format {
        Format::Jsonl => serde_json::to_string(d).unwrap_or_default(),
        Format::Ocsf => ocsf(d).to_string(),
    }
}

/// Writes every record of `rows` to `out`, one per line.
pub fn write(out: &mut impl Write, rows: &[StoredDecision], format: Format) -> std::io::Result<()> {
    for d in rows {
        writeln!(out, "{}", line(d, format))?;
    }
    Ok(())
}

fn entity(uid: &str) -> Value {
    // `Gateway::Agent::"claude"` → type `Gateway::Agent`, name `claude`.
    match uid.rfind("::\"") {
        Some(i) => json!({
            "type": uid.get(..i).unwrap_or(uid),
            "name": uid.get(i + 3..uid.len().saturating_sub(1)).unwrap_or(uid),
            "uid": uid,
        }),
        None => json!({ "name": uid, "uid": uid }),
    }
}

/// The OCSF event of one decision.
pub fn ocsf(d: &StoredDecision) -> Value {
    let r = &d.record;
    let reasons: Vec<String> = serde_json::from_str(&r.reasons).unwrap_or_default();
    let errors: Vec<String> = serde_json::from_str(&r.errors).unwrap_or_default();
    let time_ms = crate::ids::parse_rfc3339(&r.time)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .unwrap_or(0);
    let (severity_id, severity) = match errors.len() {
        0 => (1, "Informational"),
        1 => (2, "Low"),
        _ => (3, "Medium"),
    };
    let allowed = r.decision == "allow";
    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
    json!({
        "category_uid": 3,
        "category_name": "Identity & Access Management",
        "class_uid": 3004,
        "class_name": "Entity Management",
        "activity_id": 99,
        "activity_name": r.action,
        "type_uid": 300_499,
        "type_name": format!("Entity Management: {}", r.action),
        "time": time_ms,
        "severity_id": severity_id,
        "severity": severity,
        "status_id": if errors.is_empty() { 1 } else { 2 },
        "status": if errors.is_empty() { "Success" } else { "Failure" },
        "status_code": if allowed { "Allow" } else { "Deny" },
        "status_detail": if errors.is_empty() { reasons.join(",") } else { errors.join(",") },
        "message": format!(
            "{} {} {} on {}: {} by [{}]",
            r.principal,
            if allowed { "was allowed" } else { "was denied" },
            r.action,
            r.resource,
            r.decision,
            reasons.join(", ")
        ),
        "entity": entity(&r.principal),
        "entity_result": entity(&r.resource),
        "metadata": {
            "version": "1.0.0",
            "uid": r.id,
            "product": { "name": "cedargate", "vendor_name": "cedargate", "version": env!("CARGO_PKG_VERSION") },
            "log_name": "decisions",
            "sequence": d.seq,
        },
        "unmapped": {
            "org_id": r.org_id,
            "session_id": r.session_id,
            "decision": r.decision,
            "determined_policies": reasons,
            "evaluation_errors": errors,
            "context": parse(&r.context),
            "policy_hash": r.policy_hash,
            "entities_hash": r.entities_hash,
            "outcome": parse(&r.outcome),
            "notes": parse(&r.notes),
            "prev_hash": d.prev_hash,
            "hash": d.hash,
        },
    })
}

/// The record an OCSF event of [`ocsf`] was made from, as far as the event
/// holds it: the stored texts of its context, outcome and notes come back
/// re-serialized, its time at millisecond precision. `ocsf` of the result
/// is the event again, so an event that differs from it in any byte was
/// not written as it stands (`audit verify --archive`). `None` when a
/// field the event always carries is missing or of the wrong type.
pub fn ocsf_record(event: &Value) -> Option<StoredDecision> {
    let (meta, unmapped) = (&event["metadata"], &event["unmapped"]);
    let text = |v: &Value| v.as_str().map(str::to_string);
    let optional = |v: &Value| match v {
        Value::Null => Some(None),
        v => v.as_str().map(|s| Some(s.to_string())),
    };
    let nanos = i128::from(event["time"].as_i64()?) * 1_000_000;
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()?;
    Some(StoredDecision {
        seq: meta["sequence"].as_i64()?,
        record: crate::store::decisions::NewDecision {
            id: text(&meta["uid"])?,
            time: crate::ids::rfc3339(time),
            org_id: optional(&unmapped["org_id"])?,
            session_id: optional(&unmapped["session_id"])?,
            principal: text(&event["entity"]["uid"])?,
            action: text(&event["activity_name"])?,
            resource: text(&event["entity_result"]["uid"])?,
            context: unmapped["context"].to_string(),
            entities_hash: text(&unmapped["entities_hash"])?,
            entities: None,
            policy_hash: text(&unmapped["policy_hash"])?,
            decision: text(&unmapped["decision"])?,
            reasons: unmapped["determined_policies"].to_string(),
            errors: unmapped["evaluation_errors"].to_string(),
            outcome: unmapped["outcome"].to_string(),
            notes: unmapped["notes"].to_string(),
        },
        prev_hash: text(&unmapped["prev_hash"])?,
        hash: text(&unmapped["hash"])?,
    })
}
