//! Text normalization shared by extraction, entity resolution, search and
//! the local embedder: identifier splitting, search tokens and the
//! resolution key. One definition, so an entity found by extraction is the
//! one search and resolution find.

/// Words that carry no meaning for search or embeddings.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "our", "so", "that",
    "the", "their", "this", "to", "under", "us", "was", "we", "what", "when", "where", "which",
    "who", "why", "with", "you",
];

/// Splits an identifier or phrase into lowercase parts: at non-alphanumeric
/// characters and at camelCase boundaries (`HTTPServer` → `http`, `server`;
/// `PostgresDB` → `postgres`, `db`).
pub fn split_identifier(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = word.chars().collect();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
            let next = chars.get(i + 1).copied();
            let boundary = c.is_uppercase()
                && prev.is_some_and(|p| {
                    p.is_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
                });
            if boundary && !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            current.extend(c.to_lowercase());
        }
        if !current.is_empty() {
            parts.push(current);
        }
    }
    parts
}

/// Search and embedding tokens: identifier parts without stop words.
pub fn tokens(text: &str) -> Vec<String> {
    split_identifier(text)
        .into_iter()
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
        .collect()
}

/// Spellings of one thing that resolve to the same key.
const ALIASES: &[(&str, &str)] = &[
    ("postgresql", "postgres"),
    ("postgresdb", "postgres"),
    ("postgresdatabase", "postgres"),
    ("k8s", "kubernetes"),
    ("mongo", "mongodb"),
];

/// The entity-resolution key: lowercase alphanumerics only, so
/// `AuthService`, `auth-service`, `auth_service` and `auth service` are one
/// entity; a few well-known aliases (`PostgreSQL`, `PostgresDB` →
/// `postgres`) fold further.
pub fn resolution_key(name: &str) -> String {
    let key: String = name
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect();
    match ALIASES.iter().find(|(a, _)| *a == key) {
        Some((_, canonical)) => (*canonical).to_string(),
        None => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_at_case_and_punctuation() {
        assert_eq!(split_identifier("HTTPServer"), vec!["http", "server"]);
        assert_eq!(split_identifier("PostgresDB"), vec!["postgres", "db"]);
        assert_eq!(
            split_identifier("auth-service v2"),
            vec!["auth", "service", "v2"]
        );
        assert_eq!(
            split_identifier("OAuth2Client"),
            vec!["o", "auth2", "client"]
        );
        assert_eq!(
            tokens("How does the AuthService work?"),
            vec!["auth", "service", "work"]
        );
    }

    #[test]
    fn spellings_resolve_to_one_key() {
        for s in [
            "AuthService",
            "auth-service",
            "auth_service",
            "Auth Service",
        ] {
            assert_eq!(resolution_key(s), "authservice");
        }
        for s in ["Postgres", "PostgreSQL", "PostgresDB", "postgres db"] {
            assert_eq!(resolution_key(s), "postgres");
        }
        assert_eq!(resolution_key("!!"), "");
    }
}
