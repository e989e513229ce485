//! The C2SP signed-note format (<https://c2sp.org/signed-note>) with
//! Ed25519 keys: what the trail's checkpoints are written in.
//!
//! A note is a text of one or more non-empty lines, each ending in a
//! newline, then a blank line, then one signature line per signer:
//! `— <key name> <base64(key id || signature)>`. The signature is over the
//! text (its final newline included). An Ed25519 key's id is the first 4
//! bytes of SHA-256(name || 0x0A || 0x01 || public key), big-endian.
//!
//! Keys are written the way the format's reference implementation writes
//! them:
//! - the verifier key (what an auditor is given) is
//!   `<name>+<key id, 8 hex digits>+<base64(0x01 || public key)>`;
//! - the signer key (the secret, kept in a file) is
//!   `PRIVATE+KEY+<name>+<key id>+<base64(0x01 || 32-byte seed)>`.
//!
//! A key name is non-empty and has no whitespace and no `+`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// The signature-type byte of an Ed25519 key.
const ED25519: u8 = 0x01;
/// The prefix of a signer key.
const PRIVATE_PREFIX: &str = "PRIVATE+KEY+";
/// What starts a signature line: an em dash and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// Why a key or a note was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// A key name with whitespace or `+`, or empty.
    #[error("invalid key name `{0}` (it must be non-empty, with no space and no `+`)")]
    Name(String),
    /// A key in neither accepted form.
    #[error("invalid key: {0}")]
    Key(String),
    /// A note that does not follow the format.
    #[error("malformed note: {0}")]
    Malformed(String),
    /// No signature line by a given key verifies.
    #[error("no valid signature by the given key(s) (signed by: {0})")]
    Unverified(String),
}

/// An Ed25519 key that signs notes under a name.
pub struct NoteSigner {
    name: String,
    id: u32,
    key: SigningKey,
}

impl std::fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .field("id", &format_args!("{:08x}", self.id))
            .finish_non_exhaustive()
    }
}

/// An Ed25519 public key that checks notes signed under its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    id: u32,
    key: VerifyingKey,
}

/// Checks a key name.
pub fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.contains('+') || name.chars().any(char::is_whitespace) {
        return Err(NoteError::Name(name.to_string()));
    }
    Ok(())
}

/// The key id of an Ed25519 public key named `name`.
fn key_id(name: &str, public: &VerifyingKey) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ED25519]);
    h.update(public.as_bytes());
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

impl NoteSigner {
    /// A new random key named `name`.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| NoteError::Key(format!("no randomness: {e}")))?;
        Self::from_seed(name, seed)
    }

    fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self, NoteError> {
        check_name(name)?;
        let key = SigningKey::from_bytes(&seed);
        Ok(Self {
            name: name.to_string(),
            id: key_id(name, &key.verifying_key()),
            key,
        })
    }

    /// Reads a signer key (`PRIVATE+KEY+name+id+base64`).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::Key(format!("not a signer key ({why})"));
        let rest = text
            .trim()
            .strip_prefix(PRIVATE_PREFIX)
            .ok_or_else(|| bad("no `PRIVATE+KEY+` prefix"))?;
        let (name, id, key) = split_key(rest).ok_or_else(|| bad("expected name+id+key"))?;
        let seed: [u8; 32] = typed_key(key)
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| bad("the key is not a base64 Ed25519 seed"))?;
        let signer = Self::from_seed(name, seed)?;
        if Some(signer.id) != u32::from_str_radix(id, 16).ok() {
            return Err(bad("its id does not match its name and key"));
        }
        Ok(signer)
    }

    /// The signer key's text (the secret).
    pub fn to_private_text(&self) -> String {
        let mut typed = vec![ED25519];
        typed.extend_from_slice(self.key.as_bytes());
        format!(
            "{PRIVATE_PREFIX}{}+{:08x}+{}",
            self.name,
            self.id,
            STANDARD.encode(typed)
        )
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The matching verifier.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            id: self.id,
            key: self.key.verifying_key(),
        }
    }

    /// The note of `text` (non-empty lines, each ending in a newline)
    /// signed by this key.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        check_text(text)?;
        let signature = self.key.sign(text.as_bytes());
        let mut blob = self.id.to_be_bytes().to_vec();
        blob.extend_from_slice(&signature.to_bytes());
        Ok(format!(
            "{text}\n{SIGNATURE_PREFIX}{} {}\n",
            self.name,
            STANDARD.encode(blob)
        ))
    }
}

impl NoteVerifier {
    /// Reads a verifier key (`name+id+base64(0x01 || public key)`).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::Key(format!("`{text}` is not a verifier key ({why})"));
        let (name, id, key) = split_key(text.trim()).ok_or_else(|| bad("expected name+id+key"))?;
        check_name(name)?;
        let public: [u8; 32] = typed_key(key)
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| bad("the key is not a base64 Ed25519 public key"))?;
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("not a valid Ed25519 key"))?;
        let verifier = Self {
            id: key_id(name, &key),
            name: name.to_string(),
            key,
        };
        if Some(verifier.id) != u32::from_str_radix(id, 16).ok() || id.len() != 8 {
            return Err(bad("its id does not match its name and key"));
        }
        Ok(verifier)
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id as 8 hex digits.
    pub fn id_hex(&self) -> String {
        format!("{:08x}", self.id)
    }
}

impl std::fmt::Display for NoteVerifier {
    /// The verifier key's text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut typed = vec![ED25519];
        typed.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{:08x}+{}",
            self.name,
            self.id,
            STANDARD.encode(typed)
        )
    }
}

/// `name+id+key`, the name free of `+`.
fn split_key(text: &str) -> Option<(&str, &str, &str)> {
    let mut parts = text.splitn(3, '+');
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// The key bytes after the Ed25519 type byte.
fn typed_key(b64: &str) -> Option<Vec<u8>> {
    let bytes = STANDARD.decode(b64).ok()?;
    match bytes.split_first() {
        Some((&ED25519, key)) => Some(key.to_vec()),
        _ => None,
    }
}

/// Checks a note text: non-empty, newline-terminated lines, none blank.
fn check_text(text: &str) -> Result<(), NoteError> {
    let Some(body) = text.strip_suffix('\n') else {
        return Err(NoteError::Malformed(
            "the text must end with a newline".into(),
        ));
    };
    if body.split('\n').any(str::is_empty) {
        return Err(NoteError::Malformed("the text has a blank line".into()));
    }
    Ok(())
}

/// Opens a note: returns its text when at least one signature line is by
/// one of `verifiers` (same name and key id) and verifies. A signature by
/// a known key that does not verify refuses the note.
pub fn open<'n>(note: &'n str, verifiers: &[NoteVerifier]) -> Result<&'n str, NoteError> {
    let split = note
        .rfind("\n\n")
        .ok_or_else(|| NoteError::Malformed("no blank line before the signatures".into()))?;
    let (text, signatures) = (&note[..split + 1], &note[split + 2..]);
    check_text(text)?;
    let mut verified = false;
    let mut signers = Vec::new();
    for line in signatures.lines() {
        let (name, id, signature) = signature_line(line)?;
        signers.push(format!("{name} {id:08x}"));
        for v in verifiers.iter().filter(|v| v.name == name && v.id == id) {
            if v.key.verify_strict(text.as_bytes(), &signature).is_err() {
                return Err(NoteError::Unverified(format!(
                    "{name} {id:08x}, whose signature does not match the text"
                )));
            }
            verified = true;
        }
    }
    if verified {
        Ok(text)
    } else {
        Err(NoteError::Unverified(signers.join(", ")))
    }
}

/// One signature line: the name, the key id and the Ed25519 signature.
fn signature_line(line: &str) -> Result<(&str, u32, Signature), NoteError> {
    let bad = || NoteError::Malformed(format!("bad signature line `{line}`"));
    let rest = line.strip_prefix(SIGNATURE_PREFIX).ok_or_else(bad)?;
    let (name, b64) = rest.split_once(' ').ok_or_else(bad)?;
    let blob = STANDARD.decode(b64).map_err(|_| bad())?;
    let (id, sig) = blob.split_at_checked(4).ok_or_else(bad)?;
    let id = u32::from_be_bytes(id.try_into().map_err(|_| bad())?);
    let sig: [u8; 64] = sig.try_into().map_err(|_| bad())?;
    Ok((name, id, Signature::from_bytes(&sig)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn a_signed_note_opens_with_its_key_and_only_with_it() {
        let signer = NoteSigner::generate("example.com/log").unwrap();
        let text = "example.com/log\n3\nAAAA\n";
        let note = signer.sign(text).unwrap();
        assert!(note.starts_with(text));
        assert!(note.contains("\n\n\u{2014} example.com/log "));
        let v = NoteVerifier::parse(&signer.verifier().to_string()).unwrap();
        assert_eq!(open(&note, std::slice::from_ref(&v)).unwrap(), text);

        let other = NoteSigner::generate("example.com/log").unwrap().verifier();
        assert!(matches!(
            open(&note, &[other]),
            Err(NoteError::Unverified(_))
        ));
        let forged = note.replacen("\n3\n", "\n4\n", 1);
        assert!(matches!(open(&forged, &[v]), Err(NoteError::Unverified(_))));
    }

    #[test]
    fn the_private_key_text_round_trips_and_a_wrong_id_is_refused() {
        let signer = NoteSigner::generate("cedargate").unwrap();
        let text = signer.to_private_text();
        let back = NoteSigner::parse(&text).unwrap();
        assert_eq!(back.verifier(), signer.verifier());
        let id = format!("+{:08x}+", signer.id);
        let wrong = text.replace(&id, "+00000000+");
        assert!(NoteSigner::parse(&wrong).is_err());
        assert!(NoteVerifier::parse("cedargate+00000000+AQ==").is_err());
        assert!(NoteSigner::generate("two words").is_err());
        assert!(NoteSigner::generate("a+b").is_err());
    }

    /// The example key and note of the format's reference implementation:
    /// the same key id, byte for byte the same signed note, and it opens.
    #[test]
    fn the_reference_example_signs_and_opens_byte_for_byte() {
        let skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
        let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n";
        let want = format!(
            "{text}\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        );
        let signer = NoteSigner::parse(skey).unwrap();
        assert_eq!(signer.to_private_text(), skey);
        assert_eq!(signer.verifier().to_string(), vkey);
        assert_eq!(signer.sign(text).unwrap(), want);
        let v = NoteVerifier::parse(vkey).unwrap();
        assert_eq!(v.id_hex(), "c74f20a3");
        assert_eq!(open(&want, &[v]).unwrap(), text);
    }
}
