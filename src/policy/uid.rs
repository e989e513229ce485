//! Entity uids as the rest of the gateway sees them.
//!
//! [`Uid`] is a newtype over Cedar's `EntityUid` so that only `src/policy/`
//! names Cedar: the endpoint, the decision trail and replay pass uids
//! around, print them and parse recorded ones, and nothing more. The
//! wrapper is free (same layout, same clone cost), and it displays exactly
//! as Cedar prints the uid, which is the text the decision trail stores.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::EntityUid;

/// A Cedar entity uid, e.g. `Gateway::Agent::"claude"`.
#[derive(Clone, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Uid(pub(super) EntityUid);

impl Uid {
    /// The entity id, unescaped (`claude` for `Gateway::Agent::"claude"`).
    pub fn id(&self) -> &str {
        self.0.id().unescaped()
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

// Forwarded rather than derived so the wrapper never shows in a log line.
impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A uid text that is not Cedar uid syntax.
///
/// Displays as Cedar's own parse error; cloneable (the error is shared) so
/// a cache of parsed uids can hand the same failure to every record.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct UidError(Arc<cedar_policy::ParseErrors>);

impl FromStr for Uid {
    type Err = UidError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EntityUid::from_str(s)
            .map(Uid)
            .map_err(|e| UidError(Arc::new(e)))
    }
}

// Conversions for code that drives Cedar itself (benchmarks, tests);
// inside `src/` only this module's parent names Cedar's type.
impl From<EntityUid> for Uid {
    fn from(uid: EntityUid) -> Self {
        Uid(uid)
    }
}

impl From<Uid> for EntityUid {
    fn from(uid: Uid) -> Self {
        uid.0
    }
}

impl AsRef<EntityUid> for Uid {
    fn as_ref(&self) -> &EntityUid {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_and_parses_as_cedar_does() {
        let text = r#"Gateway::Tool::"a \"quoted\" name""#;
        let cedar: EntityUid = text.parse().unwrap();
        let uid: Uid = text.parse().unwrap();
        assert_eq!(uid.to_string(), cedar.to_string());
        assert_eq!(format!("{uid:?}"), format!("{cedar:?}"));
        assert_eq!(uid.id(), "a \"quoted\" name");
        let bad = "not a uid".parse::<Uid>().unwrap_err();
        let cedar_bad = "not a uid".parse::<EntityUid>().unwrap_err();
        assert_eq!(bad.to_string(), cedar_bad.to_string());
    }
}
