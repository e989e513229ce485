//! Identifier rules and small helpers shared by the store, the admin API and
//! the PEP: ids become Cedar entity ids, so they are kept printable and short.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Longest id accepted for orgs, projects, agents and roles.
pub const MAX_ID_LEN: usize = 64;

/// Why an operator-chosen id is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Empty or longer than [`MAX_ID_LEN`].
    #[error("{kind} id must be 1 to {max} characters, got {len}", max = MAX_ID_LEN)]
    Length {
        /// What the id names (`org`, `project`, …).
        kind: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A character outside `[A-Za-z0-9_.-]`.
    #[error("{kind} id `{id}` may only contain letters, digits, `_`, `-` and `.`")]
    Charset {
        /// What the id names.
        kind: String,
        /// The id as given.
        id: String,
    },
}

/// A timestamp that is not RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an RFC 3339 time: {source}")]
pub struct TimeError {
    /// The text as given.
    pub text: String,
    /// What the parser found.
    pub source: time::error::Parse,
}

/// Checks an operator-chosen id: 1..=64 chars of `[A-Za-z0-9_.-]`.
pub fn validate_id(kind: &str, id: &str) -> Result<(), IdError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(IdError::Length {
            kind: kind.to_string(),
            len: id.len(),
        });
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(IdError::Charset {
            kind: kind.to_string(),
            id: id.to_string(),
        });
    }
    Ok(())
}

/// What a decision application's name may be (its folder's name, see
/// `src/pdp.rs`).
pub const APP_NAME_RULE: &str = "1 to 64 of `[A-Za-z0-9_.-]`, not starting with `.`";

/// Whether `name` may name a decision application: an id
/// ([`validate_id`]) that does not start with `.` (no hidden folder, no
/// `..`).
pub fn valid_app_name(name: &str) -> bool {
    !name.starts_with('.') && validate_id("application", name).is_ok()
}

/// Current UTC time as RFC 3339 with millisecond precision (the form Cedar's
/// `datetime` accepts and the audit trail stores).
pub fn now_rfc3339() -> String {
    rfc3339(OffsetDateTime::now_utc())
}

/// Formats a time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Parses an RFC 3339 timestamp (used by CLI filters).
pub fn parse_rfc3339(s: &str) -> Result<OffsetDateTime, TimeError> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|source| TimeError {
        text: s.to_string(),
        source,
    })
}

/// `n` random bytes, hex-encoded, from the operating system's CSPRNG.
pub fn random_hex(n: usize) -> Result<String, getrandom::Error> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf)?;
    Ok(hex::encode(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("org", "acme-1.prod_x").is_ok());
        assert!(validate_id("org", "").is_err());
        assert!(validate_id("org", "a b").is_err());
        assert!(validate_id("org", "a\"b").is_err());
        assert!(validate_id("org", &"x".repeat(65)).is_err());
    }

    #[test]
    fn rfc3339_has_millis_and_z() {
        let t = time::macros::datetime!(2026-11-22 02:04:05.123 UTC);
        assert_eq!(rfc3339(t), "2026-11-22T02:04:05.123Z");
    }
}
