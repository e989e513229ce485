//! `[console.oidc]`: people sign in to the console with an OpenID provider
//! (authorization code + PKCE), and the groups the provider names for them
//! decide whether they are admins or auditors. Off by default.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::identity::{AuthConfig, IssuerConfig};

/// The console's path its sign-ins come back to, after `public_url`.
pub const CALLBACK_PATH: &str = "/console/callback";

/// `[console.oidc]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer, exactly as its ID tokens carry it in `iss`; its
    /// endpoints are discovered from it. When it is one of
    /// `[[auth.issuers]]`, that entry's `algorithms`, `leeway_secs`,
    /// `jwks_uri` and subject, name and email claims are used; any other
    /// issuer URL is used with their defaults.
    pub issuer: String,
    /// The sign-in page's button reads "Sign in with" this; default: the
    /// issuer's host.
    pub display_name: Option<String>,
    /// The console's client id at the provider (a confidential web client
    /// allowed the authorization code grant).
    pub client_id: String,
    /// The environment variable holding the client's secret (read at
    /// start-up; the gateway refuses to start without it). Not a
    /// `CEDARGATE_*` name: those are configuration keys.
    pub client_secret_env: Option<String>,
    /// Or: a file holding it (a mounted secret; one trailing newline is
    /// ignored). Exactly one of the two is set.
    pub client_secret_file: Option<PathBuf>,
    /// The redirect URI registered at the provider; default
    /// `<public_url>/console/callback`.
    pub redirect_uri: Option<String>,
    /// The scopes asked for; `openid` is required.
    pub scopes: Vec<String>,
    /// The claim holding the person's groups (an array of strings, or one
    /// string), read from the ID token, else from the userinfo answer.
    /// Default: the `groups_claim` of the issuer's `[[auth.issuers]]`
    /// entry, else `groups`.
    pub groups_claim: Option<String>,
    /// A person in any of these groups signs in as an admin.
    pub admin_groups: Vec<String>,
    /// A person in any of these groups (and in no admin group) signs in as
    /// an auditor. A person in neither list is refused.
    pub auditor_groups: Vec<String>,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            display_name: None,
            client_id: String::new(),
            client_secret_env: None,
            client_secret_file: None,
            redirect_uri: None,
            scopes: ["openid", "profile", "email", "groups"]
                .map(String::from)
                .to_vec(),
            groups_claim: None,
            admin_groups: Vec::new(),
            auditor_groups: Vec::new(),
        }
    }
}

/// Why `[console.oidc]` is refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[console.oidc]: {0}")]
pub struct OidcConfigError(pub String);

impl OidcConfig {
    /// The label of the sign-in button.
    pub fn label(&self) -> String {
        self.display_name.clone().unwrap_or_else(|| {
            reqwest::Url::parse(&self.issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_else(|| self.issuer.clone())
        })
    }

    /// The redirect URI: the configured one, else the callback under
    /// `base_url`.
    pub fn redirect_uri(&self, base_url: &str) -> String {
        self.redirect_uri
            .clone()
            .unwrap_or_else(|| format!("{}{CALLBACK_PATH}", base_url.trim_end_matches('/')))
    }

    /// The issuer's entry the sign-in validates with and maps claims by:
    /// its `[[auth.issuers]]` entry when listed, else the defaults; the
    /// groups claim is the console's.
    pub fn issuer_config(&self, auth: &AuthConfig) -> IssuerConfig {
        let mut issuer = auth
            .issuers
            .iter()
            .find(|i| i.issuer == self.issuer)
            .cloned()
            .unwrap_or_else(|| IssuerConfig {
                issuer: self.issuer.clone(),
                ..IssuerConfig::default()
            });
        if let Some(claim) = &self.groups_claim {
            issuer.groups_claim.clone_from(claim);
        }
        issuer
    }

    /// Checks every key; answers the client secret.
    pub fn check(&self, base_url: &str) -> Result<String, OidcConfigError> {
        let refuse = |reason: &str| Err(OidcConfigError(reason.to_string()));
        let url = reqwest::Url::parse(&self.issuer);
        if !url.is_ok_and(|u| matches!(u.scheme(), "https" | "http")) {
            return refuse("`issuer` must be the provider's http(s) issuer URL");
        }
        if self.client_id.trim().is_empty() {
            return refuse("`client_id` is required");
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            return refuse("`scopes` must include `openid`");
        }
        if self.admin_groups.is_empty() && self.auditor_groups.is_empty() {
            return refuse("name at least one group in `admin_groups` or `auditor_groups`");
        }
        let redirect = reqwest::Url::parse(&self.redirect_uri(base_url));
        if !redirect.is_ok_and(|u| matches!(u.scheme(), "https" | "http")) {
            return refuse(
                "`redirect_uri` (default `<public_url>/console/callback`) is not an http(s) URL",
            );
        }
        self.client_secret()
    }

    /// The client secret, from its variable or its file.
    fn client_secret(&self) -> Result<String, OidcConfigError> {
        let secret = match (&self.client_secret_env, &self.client_secret_file) {
            (Some(var), None) => std::env::var(var).map_err(|_| {
                OidcConfigError(format!(
                    "the environment variable `{var}` (`client_secret_env`) is not set"
                ))
            })?,
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                OidcConfigError(format!(
                    "cannot read `client_secret_file` `{}`: {e}",
                    path.display()
                ))
            })?,
            _ => {
                return Err(OidcConfigError(
                    "set exactly one of `client_secret_env` and `client_secret_file`".into(),
                ));
            }
        };
        let secret = secret.strip_suffix('\n').unwrap_or(&secret);
        if secret.is_empty() {
            return Err(OidcConfigError("the client secret is empty".into()));
        }
        Ok(secret.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OidcConfig {
        OidcConfig {
            issuer: "https://idp.example.com/tenant".into(),
            client_id: "console".into(),
            client_secret_env: Some("PATH".into()),
            admin_groups: vec!["sre".into()],
            ..OidcConfig::default()
        }
    }

    #[test]
    fn the_redirect_uri_and_label_follow_the_public_url_and_the_issuer() {
        let c = config();
        assert_eq!(
            c.redirect_uri("https://gw.example.com/"),
            "https://gw.example.com/console/callback"
        );
        assert_eq!(c.label(), "idp.example.com");
        let named = OidcConfig {
            display_name: Some("Okta".into()),
            redirect_uri: Some("https://console.example.com/cb".into()),
            ..c
        };
        assert_eq!(named.label(), "Okta");
        assert_eq!(named.redirect_uri("x"), "https://console.example.com/cb");
    }

    #[test]
    fn a_listed_issuer_lends_its_entry_and_the_groups_claim_is_the_consoles() {
        let auth = AuthConfig {
            issuers: vec![IssuerConfig {
                issuer: "https://idp.example.com/tenant".into(),
                algorithms: vec!["PS256".into()],
                groups_claim: "roles".into(),
                ..IssuerConfig::default()
            }],
            ..AuthConfig::default()
        };
        let listed = config().issuer_config(&auth);
        assert_eq!(
            (listed.algorithms[0].as_str(), listed.groups_claim.as_str()),
            ("PS256", "roles")
        );
        let own = OidcConfig {
            groups_claim: Some("teams".into()),
            ..config()
        };
        assert_eq!(own.issuer_config(&auth).groups_claim, "teams");
        let elsewhere = OidcConfig {
            issuer: "https://other.example".into(),
            ..config()
        };
        let default = elsewhere.issuer_config(&auth);
        assert_eq!(
            (default.issuer.as_str(), default.groups_claim.as_str()),
            ("https://other.example", "groups")
        );
    }

    #[test]
    fn unusable_settings_are_refused_with_the_key_named() {
        let base = "http://127.0.0.1:8080";
        assert!(config().check(base).is_ok(), "PATH is always set");
        let cases: [(OidcConfig, &str); 8] = [
            (
                OidcConfig {
                    issuer: "idp.example.com".into(),
                    ..config()
                },
                "`issuer`",
            ),
            (
                OidcConfig {
                    client_id: " ".into(),
                    ..config()
                },
                "`client_id`",
            ),
            (
                OidcConfig {
                    scopes: vec!["profile".into()],
                    ..config()
                },
                "`openid`",
            ),
            (
                OidcConfig {
                    admin_groups: vec![],
                    ..config()
                },
                "`admin_groups`",
            ),
            (
                OidcConfig {
                    client_secret_env: None,
                    ..config()
                },
                "exactly one of `client_secret_env` and `client_secret_file`",
            ),
            (
                OidcConfig {
                    client_secret_file: Some("/nonexistent/secret".into()),
                    ..config()
                },
                "exactly one of",
            ),
            (
                OidcConfig {
                    client_secret_env: Some("CG_TEST_SURELY_UNSET_VARIABLE".into()),
                    ..config()
                },
                "`CG_TEST_SURELY_UNSET_VARIABLE`",
            ),
            (
                OidcConfig {
                    client_secret_env: None,
                    client_secret_file: Some("/nonexistent/secret".into()),
                    ..config()
                },
                "`/nonexistent/secret`",
            ),
        ];
        for (c, named) in cases {
            let err = c.check(base).unwrap_err().to_string();
            assert!(err.contains(named), "{err}");
        }
    }

    #[test]
    fn a_secret_file_is_read_without_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret\n").unwrap();
        let c = OidcConfig {
            client_secret_env: None,
            client_secret_file: Some(path.clone()),
            ..config()
        };
        assert_eq!(c.check("http://h").unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        assert!(
            c.check("http://h")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
    }
}
