//! The texts the trail's records name by hash, checked by `verify`: each
//! record's entity snapshot (`entity_snapshots`, named by the SHA-256 of
//! its JSON) and its policy set (`policy_sets`, named by the set's hash,
//! `crate::policy::set_hash`).
//!
//! The record's hash covers only the names, so these checks are what binds
//! the texts into the chain: a text edited in place no longer recomputes
//! to the name its records carry, and a text deleted is missing. Replay
//! and the console load a recorded set by its name and refuse one whose
//! texts do not recompute to it (`crate::replay::recorded_bundle`), so an
//! edited set is never shown as the deciding one.
//!
//! Each text is checked once per verification, the first time a record in
//! the range names it; a broken snapshot is reported at every record that
//! names it, a broken policy set once, at the first such record (a set
//! decides thousands of records).

use std::collections::HashSet;

use super::StoreError;
use super::db::Conn;
use crate::params;
use crate::policy::PolicyFile;
use crate::policy::set_hash::{bundle_hash, holds_separator};
use sha2::{Digest, Sha256};

/// What one verification found of the named texts so far.
#[derive(Default)]
pub(crate) struct NamedTexts {
    /// Snapshots that matched their hash.
    snapshots_ok: HashSet<String>,
    /// Policy sets checked (whatever was found).
    sets_checked: HashSet<String>,
}

impl NamedTexts {
    /// Checks the texts the record at `seq` names, adding any problem.
    pub(crate) fn check(
        &mut self,
        conn: &mut Conn,
        seq: i64,
        entities_hash: &str,
        policy_hash: &str,
        problems: &mut Vec<String>,
    ) -> Result<(), StoreError> {
        if !self.snapshots_ok.contains(entities_hash) {
            match snapshot_problem(conn, entities_hash)? {
                None => {
                    self.snapshots_ok.insert(entities_hash.to_string());
                }
                Some(p) => problems.push(format!("seq {seq}: {p}")),
            }
        }
        if self.sets_checked.insert(policy_hash.to_string())
            && let Some(p) = policy_set_problem(conn, policy_hash)?
        {
            problems.push(format!("seq {seq}: {p}"));
        }
        Ok(())
    }
}

/// Why the snapshot named `hash` is not the one recorded, if it is not.
fn snapshot_problem(conn: &mut Conn, hash: &str) -> Result<Option<String>, StoreError> {
    let json: Option<String> = conn.query_opt(
        "SELECT entities FROM entity_snapshots WHERE hash = ?1",
        params![hash],
        |r| r.get(0),
    )?;
    Ok(match json {
        None => Some(format!("entity snapshot `{hash}` is missing")),
        Some(json) if hex::encode(Sha256::digest(json.as_bytes())) != hash => {
            Some(format!("entity snapshot `{hash}` does not match its hash"))
        }
        Some(_) => None,
    })
}

/// Why the policy set named `hash` is not the one recorded, if it is not:
/// missing, unreadable, holding the hash's separator, or with texts that
/// recompute to another hash (an edited policy set).
fn policy_set_problem(conn: &mut Conn, hash: &str) -> Result<Option<String>, StoreError> {
    let stored: Option<(String, String)> = conn.query_opt(
        "SELECT schema_text, files FROM policy_sets WHERE hash = ?1",
        params![hash],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((schema_text, files)) = stored else {
        return Ok(Some(format!("policy set `{hash}` is missing")));
    };
    let files: Vec<PolicyFile> = match serde_json::from_str(&files) {
        Ok(f) => f,
        Err(e) => {
            return Ok(Some(format!(
                "policy set `{hash}`: its stored files are unreadable ({e})"
            )));
        }
    };
    let texts = || files.iter().map(|f| (f.path.as_str(), f.text.as_str()));
    if holds_separator(&schema_text)
        || texts().any(|(p, t)| holds_separator(p) || holds_separator(t))
    {
        return Ok(Some(format!(
            "policy set `{hash}`: its stored text holds a NUL byte, which its hash cannot bind"
        )));
    }
    let recomputed = bundle_hash(&schema_text, texts());
    Ok((recomputed != hash).then(|| {
        format!(
            "policy set `{hash}`: its stored text does not match its hash (edited policy set; the text hashes to `{recomputed}`)"
        )
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    /// The problem verification reports for a set stored with `schema`
    /// and `files` under the hash of `named` (schema and files as named).
    fn problem_of(
        schema: &str,
        files: &[(&str, &str)],
        named: (&str, &[(&str, &str)]),
    ) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("t.db"), 8, 8).unwrap();
        let hash = bundle_hash(named.0, named.1.iter().copied());
        let stored: Vec<PolicyFile> = files
            .iter()
            .map(|(path, text)| PolicyFile {
                path: path.to_string(),
                text: text.to_string(),
            })
            .collect();
        let stored = serde_json::to_string(&stored).unwrap();
        store
            .read_blocking(|c| {
                c.execute(
                    "INSERT INTO policy_sets (hash, schema_path, schema_text, files, loaded_at)
                     VALUES (?1, 's', ?2, ?3, 't')",
                    params![hash, schema, stored],
                )?;
                let mut problems = Vec::new();
                NamedTexts::default().check(c, 1, "e", &hash, &mut problems)?;
                Ok(problems.into_iter().find(|p| p.contains("policy set")))
            })
            .unwrap()
    }

    #[test]
    fn a_policy_set_verifies_only_as_recorded_and_without_a_separator() {
        let files = [("a.cedar", "permit (principal, action, resource);")];
        assert_eq!(problem_of("", &files, ("", &files)), None);
        let forged = [("a.cedar", "forbid (principal, action, resource);")];
        let edited = problem_of("", &forged, ("", &files)).unwrap();
        assert!(edited.contains("edited policy set"), "{edited}");
        // Two files re-split into one whose text holds the separator: the
        // same hash, another set.
        let two = [
            ("a.cedar", "permit (principal, action, resource);"),
            ("b.cedar", "//"),
        ];
        let one = [(
            "a.cedar",
            "permit (principal, action, resource);\0b.cedar\0//",
        )];
        assert_eq!(
            bundle_hash("", one.iter().copied()),
            bundle_hash("", two.iter().copied())
        );
        let resplit = problem_of("", &one, ("", &two)).unwrap();
        assert!(resplit.contains("NUL byte"), "{resplit}");
    }
}
