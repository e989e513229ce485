//! The hash that names a policy set: what every decision record carries as
//! its `policy_hash`, and what `policy_sets` stores the set's texts under.
//!
//! It is computed from the texts alone (the effective schema, then each
//! file's path and text, in load order), so `audit verify` recomputes it
//! from the stored texts and an edited text no longer matches the hash the
//! records name (`src/store/trail_texts.rs`). The schema's path and the
//! load time are labels and not part of it.
//!
//! The parts are separated by a NUL byte (version 1, kept so that every
//! recorded set keeps its name): a set whose texts hold a NUL could be
//! re-split into other files with the same hash, so verification refuses
//! such a set ([`holds_separator`]).

use sha2::{Digest, Sha256};

/// The hash of a set with `schema_text` and `files` as `(path, text)`.
pub fn bundle_hash<'a>(
    schema_text: &str,
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"cedargate-policy-bundle-v1\0");
    hasher.update(schema_text.as_bytes());
    for (path, text) in files {
        hasher.update(b"\0");
        hasher.update(path.as_bytes());
        hasher.update(b"\0");
        hasher.update(text.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Whether a text holds the byte [`bundle_hash`] separates its parts with.
pub fn holds_separator(text: &str) -> bool {
    text.contains('\0')
}
