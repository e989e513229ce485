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

    /// The uid as it displays (Cedar's text, as the trail records it),
    /// built by concatenation when nothing needs escaping: a gateway type
    /// and an id of printable ASCII without quotes or backslashes (the
    /// ids the gateway makes). Every decision record prints two uids, and
    /// Cedar's formatter, escaping char by char, was 2.5% of a call's CPU.
    pub fn text(&self) -> String {
        let ty = self.0.type_name();
        let id = self.id();
        let mut namespace = ty.namespace_components();
        let plain = namespace.next() == Some(super::NAMESPACE)
            && namespace.next().is_none()
            && id
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && !matches!(b, b'"' | b'\\' | b'\''));
        if !plain {
            return self.0.to_string();
        }
        let base = ty.basename();
        let mut text = String::with_capacity(super::NAMESPACE.len() + base.len() + id.len() + 6);
        for part in [super::NAMESPACE, "::", base, "::\"", id, "\""] {
            text.push_str(part);
        }
        text
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
        // The plain path prints what Cedar prints, and escapes go to Cedar.
        for id in [
            "a \"quoted\" name",
            "claude",
            "0193b1c2-7d4e-7f00-8a1b-2c3d4e5f6a7b",
            "fs.read_file",
            "it's",
            "back\\slash",
            "tab\there",
            "é ü",
            "",
            "~ !#$%&()*+,-./:;<=>?@[]^_`{|}",
        ] {
            for uid in [
                super::super::Kind::Tool.uid(id),
                super::super::Kind::Agent.uid(id),
                super::super::Kind::User.uid(id),
                super::super::Kind::Group.uid(id),
            ] {
                assert_eq!(uid.text(), uid.to_string(), "{id}");
            }
        }
        for text in [r#"Other::Tool::"x""#, r#"Tool::"x""#, r#"A::B::C::"x""#] {
            let uid: Uid = text.parse().unwrap();
            assert_eq!(uid.text(), uid.to_string(), "{text}");
        }
        let bad = "not a uid".parse::<Uid>().unwrap_err();
        let cedar_bad = "not a uid".parse::<EntityUid>().unwrap_err();
        assert_eq!(bad.to_string(), cedar_bad.to_string());
    }
}
