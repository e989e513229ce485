//! An upstream's credential, as registered (`auth`) and as sent: a bearer
//! token read from an environment variable or a file at each request
//! (`{"type": "bearer", "secretEnv" | "secretFile"}`, [`PeerAuth`], the same
//! as A2A peers), or the gateway's own token from an authorization server
//! (`{"type": "oauth-client-credentials", …}`, [`ClientCredentials`],
//! obtained and cached by [`TokenSource`]). Either way only where the
//! secret is found is stored and shown, and the token goes only to the
//! upstream it belongs to.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::oauth_token::{self, ClientCredentials, ClientCredentialsError, TokenSource};
use crate::a2a::registry::{AuthError, PeerAuth};

/// Where an upstream's credential comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// A static bearer token in an environment variable or a file.
    Bearer(PeerAuth),
    /// A token the gateway obtains with the client credentials grant.
    ClientCredentials(ClientCredentials),
}

/// Why a registration's `auth` is refused (answered as 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAuth {
    /// A bad bearer source.
    #[error(transparent)]
    Bearer(#[from] AuthError),
    /// Bad client credentials.
    #[error(transparent)]
    ClientCredentials(#[from] ClientCredentialsError),
}

impl UpstreamAuth {
    /// Checks the registration's shape (secrets are read only when needed).
    pub fn validate(&self) -> Result<(), InvalidAuth> {
        match self {
            UpstreamAuth::Bearer(auth) => Ok(auth.validate()?),
            UpstreamAuth::ClientCredentials(client) => Ok(client.validate()?),
        }
    }

    /// The bearer token to send to the upstream with row id `upstream`
    /// now: read from its source, or from `tokens`.
    pub async fn token(&self, upstream: &str, tokens: &TokenSource) -> Result<String, String> {
        match self {
            UpstreamAuth::Bearer(auth) => auth.resolve().map_err(|e| e.to_string()),
            UpstreamAuth::ClientCredentials(client) => tokens
                .token(upstream, client)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// The upstream answered 401 to `token`: an obtained token may be
    /// replaced (a static one is read again at every request anyway).
    pub fn rejected(&self, upstream: &str, token: &str, tokens: &TokenSource) {
        if let UpstreamAuth::ClientCredentials(_) = self {
            tokens.rejected(upstream, token);
        }
    }
}

impl Serialize for UpstreamAuth {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            UpstreamAuth::Bearer(auth) => auth.serialize(serializer),
            UpstreamAuth::ClientCredentials(client) => client.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for UpstreamAuth {
    /// `type` chooses the shape: the client credentials one, else a bearer
    /// source (`bearer`, or no `type`: refused as missing); any other
    /// `type` is refused naming both.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = Value::deserialize(deserializer)?;
        match value.get("type").and_then(Value::as_str) {
            Some(oauth_token::KIND) => ClientCredentials::deserialize(value)
                .map(UpstreamAuth::ClientCredentials)
                .map_err(D::Error::custom),
            Some("bearer") | None => PeerAuth::deserialize(value)
                .map(UpstreamAuth::Bearer)
                .map_err(D::Error::custom),
            Some(other) => Err(D::Error::custom(format!(
                "`auth.type` must be `bearer` or `{}`, not `{}`",
                oauth_token::KIND,
                other.chars().take(100).collect::<String>()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_kinds_read_and_show_as_registered() {
        let bearer = json!({"type": "bearer", "secretEnv": "TOKEN"});
        let oauth = json!({
            "type": "oauth-client-credentials", "issuer": "https://idp.example",
            "clientId": "gw", "secretEnv": "GW_SECRET", "resource": "https://up.example/mcp",
        });
        for shown in [bearer, oauth] {
            let auth: UpstreamAuth = serde_json::from_value(shown.clone()).unwrap();
            assert_eq!(auth.validate(), Ok(()));
            assert_eq!(serde_json::to_value(&auth).unwrap(), shown);
        }
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        let with_secret = json!({
            "type": "oauth-client-credentials", "issuer": "https://idp.example",
            "clientId": "gw", "secretEnv": "S", "resource": "https://up.example/",
            "clientSecret": "plain",
        });
        let err = serde_json::from_value::<UpstreamAuth>(with_secret).unwrap_err();
        assert!(err.to_string().contains("clientSecret"), "{err}");
        let missing = json!({"type": "oauth-client-credentials", "issuer": "https://idp.example"});
        let err = serde_json::from_value::<UpstreamAuth>(missing).unwrap_err();
        assert!(err.to_string().contains("clientId"), "{err}");
        let basic = json!({"type": "basic", "secretEnv": "X"});
        let err = serde_json::from_value::<UpstreamAuth>(basic).unwrap_err();
        assert!(
            err.to_string().contains("oauth-client-credentials"),
            "{err}"
        );
    }
}
