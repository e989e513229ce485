//! The trail filter as the console's forms send it: every field optional,
//! an empty field meaning "any", times as RFC 3339 or as a browser's
//! `datetime-local` value (`YYYY-MM-DDTHH:MM[:SS]`, read as UTC).

use serde::{Deserialize, Serialize};

use super::error::ConsoleError;
use crate::store::audit_query::DecisionFilter;

/// The filter fields of a console form.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct FilterForm {
    #[serde(default)]
    pub org: String,
    #[serde(default)]
    pub session: String,
    #[serde(default)]
    pub principal: String,
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub decision: String,
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    /// A W3C trace id (the decision page links a record's trace here).
    #[serde(default)]
    pub trace: String,
    /// A decision application: its decisions only.
    #[serde(default)]
    pub application: String,
}

fn given(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// A form time as RFC 3339 (a `datetime-local` value is read as UTC).
pub fn time(name: &str, text: &str) -> Result<Option<String>, ConsoleError> {
    let Some(t) = given(text) else {
        return Ok(None);
    };
    let candidates = [t.clone(), format!("{t}Z"), format!("{t}:00Z")];
    candidates
        .iter()
        .find_map(|c| crate::ids::parse_rfc3339(c).ok())
        .map(|parsed| Some(crate::ids::rfc3339(parsed)))
        .ok_or_else(|| {
            ConsoleError::BadRequest(format!(
                "`{name}` must be a time like 2026-01-31T13:45 (UTC) or RFC 3339, not `{t}`"
            ))
        })
}

impl FilterForm {
    /// The store's filter; a value that can never match is a 400.
    pub fn to_filter(&self) -> Result<DecisionFilter, ConsoleError> {
        DecisionFilter {
            org: given(&self.org),
            session: given(&self.session),
            principal: given(&self.principal),
            action: given(&self.action),
            resource: given(&self.resource),
            decision: given(&self.decision),
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            trace: given(&self.trace),
            application: given(&self.application),
        }
        .normalized()
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_times_are_utc() {
        assert_eq!(
            time("since", "2026-01-31T13:45").unwrap().as_deref(),
            Some("2026-01-31T13:45:00.000Z")
        );
        assert_eq!(
            time("since", "2026-01-31T13:45:07+01:00")
                .unwrap()
                .as_deref(),
            Some("2026-01-31T12:45:07.000Z")
        );
        assert!(time("since", "yesterday").is_err());
        assert_eq!(time("since", " ").unwrap(), None);
    }
}
