//! One sign-in with the identity provider, from the redirect to the role.
//!
//! [`RelyingParty::begin`] discovers the provider's authorization endpoint
//! (`identity::fetch`, once per process), starts a [`Pending`] sign-in and
//! answers where to send the browser: `response_type=code`, the client id,
//! the redirect URI, the scopes, `state`, `nonce` and an S256
//! `code_challenge`. [`RelyingParty::finish`] takes the callback's query:
//! the state must name a sign-in started here and not finished (it is
//! spent whatever comes next), the browser must be the one that started
//! it (its binding cookie), an `iss` parameter (RFC 9207) must be the
//! issuer (and must be there when the provider's metadata says it always
//! is), and an `error` from the provider ends it. The code is then
//! exchanged at the token endpoint with the verifier (HTTP basic client
//! authentication), the ID token checked (`identity::id_token`: signature
//! with the issuer's published keys, `iss`, `aud` = the client id, `exp`,
//! `nonce`), and where it lacks the groups, name or email claim, the
//! userinfo endpoint's answer fills them in (only those claims, and only
//! when its `sub` is the ID token's). The groups then give the role: any
//! of `admin_groups` an admin, else any of `auditor_groups` an auditor,
//! else the person is refused, as they are when no groups claim came.
//! Group names are compared exactly.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::config::{OidcConfig, OidcConfigError};
use super::pending::Pending;
use crate::console::role::Role;
use crate::identity::fetch::Fetcher;
use crate::identity::id_token::{IdTokenError, IdTokens};
use crate::identity::{AuthConfig, ClaimError, Identity, IssuerConfig};

/// Seconds a started sign-in may take to come back.
pub const PENDING_SECS: u64 = 600;
/// Most sign-ins under way at once (the oldest are dropped beyond it).
const MAX_PENDING: u64 = 10_000;

/// The callback's query parameters.
#[derive(Debug, Default, Deserialize)]
pub struct Callback {
    /// The sign-in's `state`.
    pub state: Option<String>,
    /// The authorization code, on success.
    pub code: Option<String>,
    /// The provider's error code (`access_denied`, …), on failure.
    pub error: Option<String>,
    /// Its explanation.
    pub error_description: Option<String>,
    /// The issuer that answered (RFC 9207), when the provider says.
    pub iss: Option<String>,
}

/// A sign-in started: where to send the browser and its binding.
#[derive(Debug)]
pub struct Begun {
    /// The authorization request's URL.
    pub location: String,
    /// The binding cookie's value.
    pub browser: String,
}

/// A person signed in.
#[derive(Debug)]
pub struct SignedIn {
    /// Who, as the ID token (and userinfo) describe them.
    pub identity: Identity,
    /// What their groups let them do.
    pub role: Role,
}

/// Why a sign-in did not happen. Messages are shown on the page.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The state names no sign-in under way here.
    #[error("this sign-in is unknown, expired or was already used: sign in again")]
    UnknownState,
    /// The binding cookie is missing or belongs to another sign-in.
    #[error("this sign-in was started in another browser or tab: sign in again")]
    OtherBrowser,
    /// The callback came from another issuer, or does not name the
    /// issuer that says it always does (RFC 9207 `iss`).
    #[error("the sign-in answer does not come from `{0}` (its `iss`)")]
    WrongIssuer(String),
    /// The provider answered with an error (`access_denied`, …).
    #[error("the identity provider did not sign you in: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// Its error code.
        error: String,
        /// Its explanation.
        description: Option<String>,
    },
    /// Neither a code nor an error came back.
    #[error("the sign-in answer carries no authorization code")]
    NoCode,
    /// The provider could not be reached, or answered something unusable.
    #[error("{0}")]
    Provider(String),
    /// The ID token is refused.
    #[error("the identity provider's ID token is refused: {0}")]
    IdToken(#[from] IdTokenError),
    /// The claims cannot describe a person.
    #[error("the identity provider's claims are refused: {0}")]
    Claims(#[from] ClaimError),
    /// No groups claim came back.
    #[error(
        "the identity provider sent no `{claim}` claim for {who}: ask its administrator to release it to this console (scope `groups`), then sign in again"
    )]
    NoGroupsClaim {
        /// The person.
        who: String,
        /// The claim.
        claim: String,
    },
    /// The person is in none of the console's groups.
    #[error(
        "{who} is in none of the groups that may use this console; ask an administrator to add you to one of them"
    )]
    NoRole {
        /// The person.
        who: String,
    },
    /// No random state could be made.
    #[error("the sign-in could not be started")]
    Random,
}

/// The console's client at its identity provider.
pub struct RelyingParty {
    label: String,
    client_id: String,
    client_secret: String,
    redirect_uri: String,
    scope: String,
    issuer: IssuerConfig,
    admin_groups: Vec<String>,
    auditor_groups: Vec<String>,
    fetcher: Arc<Fetcher>,
    id_tokens: IdTokens,
    pending: Pending,
}

impl std::fmt::Debug for RelyingParty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelyingParty")
            .field("issuer", &self.issuer.issuer)
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

impl RelyingParty {
    /// The client `config` describes (its secret read from the
    /// environment now); no provider is contacted.
    pub fn new(
        config: &OidcConfig,
        auth: &AuthConfig,
        base_url: &str,
    ) -> Result<RelyingParty, OidcConfigError> {
        let client_secret = config.check(base_url)?;
        let issuer = config.issuer_config(auth);
        let fetcher = Fetcher::new(
            Duration::from_millis(auth.fetch_timeout_ms),
            auth.max_fetch_bytes,
        )
        .map(Arc::new)
        .map_err(|e| OidcConfigError(format!("cannot build the HTTP client: {e}")))?;
        let id_tokens = IdTokens::new(&issuer, auth, fetcher.clone(), &config.client_id)
            .map_err(|e| OidcConfigError(e.to_string()))?;
        Ok(RelyingParty {
            label: config.label(),
            client_id: config.client_id.clone(),
            client_secret,
            redirect_uri: config.redirect_uri(base_url),
            scope: config.scopes.join(" "),
            issuer,
            admin_groups: config.admin_groups.clone(),
            auditor_groups: config.auditor_groups.clone(),
            fetcher,
            id_tokens,
            pending: Pending::new(MAX_PENDING, Duration::from_secs(PENDING_SECS)),
        })
    }

    /// What the sign-in button names.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Starts a sign-in: the authorization request to send the browser to.
    pub async fn begin(&self) -> Result<Begun, SignInError> {
        let endpoint = self.endpoint("authorization_endpoint").await?;
        let mut url = reqwest::Url::parse(&endpoint).map_err(|_| {
            SignInError::Provider("the provider's authorization endpoint is not a URL".into())
        })?;
        let started = self.pending.start().map_err(|_| SignInError::Random)?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", &self.redirect_uri)
            .append_pair("scope", &self.scope)
            .append_pair("state", &started.state)
            .append_pair("nonce", &started.nonce)
            .append_pair("code_challenge", &started.challenge)
            .append_pair("code_challenge_method", "S256");
        Ok(Begun {
            location: url.into(),
            browser: started.browser,
        })
    }

    /// Finishes the sign-in a callback answers, in a browser whose binding
    /// cookie holds `browser`.
    pub async fn finish(
        &self,
        callback: &Callback,
        browser: Option<&str>,
    ) -> Result<SignedIn, SignInError> {
        let flow = callback
            .state
            .as_deref()
            .and_then(|state| self.pending.take(state))
            .ok_or(SignInError::UnknownState)?;
        if !browser.is_some_and(|b| crate::auth::tokens_equal(b, &flow.browser)) {
            return Err(SignInError::OtherBrowser);
        }
        self.check_answer(callback, self.iss_required().await)?;
        let code = callback.code.as_deref().ok_or(SignInError::NoCode)?;
        let tokens = self.exchange(code, &flow.verifier).await?;
        let id_token = tokens
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                SignInError::Provider(
                    "the token endpoint answered no ID token (is `openid` among the scopes?)"
                        .into(),
                )
            })?;
        let mut claims = self.id_tokens.verify(id_token, &flow.nonce).await?;
        let access_token = tokens.get("access_token").and_then(Value::as_str);
        if let (true, Some(token)) = (self.lacks_claims(&claims), access_token) {
            self.add_userinfo(&mut claims, token).await?;
        }
        let identity = crate::identity::claims::identity(&self.issuer, &claims)?;
        let has_groups = claims.contains_key(&self.issuer.groups_claim);
        let role = self.role_of(&identity, has_groups)?;
        Ok(SignedIn { identity, role })
    }

    /// Whether the provider says its answers carry `iss` (RFC 9207
    /// `authorization_response_iss_parameter_supported`); then one without
    /// it is refused.
    async fn iss_required(&self) -> bool {
        let metadata = self.fetcher.metadata(&self.issuer.issuer).await;
        metadata.is_ok_and(|m| m.flag("authorization_response_iss_parameter_supported"))
    }

    /// The callback's `iss` (required when `iss_required`) and `error`.
    fn check_answer(&self, callback: &Callback, iss_required: bool) -> Result<(), SignInError> {
        let wrong = match callback.iss.as_deref() {
            Some(iss) => iss != self.issuer.issuer,
            None => iss_required,
        };
        if wrong {
            return Err(SignInError::WrongIssuer(self.issuer.issuer.clone()));
        }
        if let Some(error) = &callback.error {
            return Err(SignInError::Refused {
                error: bounded(error),
                description: callback.error_description.as_deref().map(bounded),
            });
        }
        Ok(())
    }

    /// A string endpoint of the provider's metadata.
    async fn endpoint(&self, name: &str) -> Result<String, SignInError> {
        let metadata = self
            .fetcher
            .metadata(&self.issuer.issuer)
            .await
            .map_err(|e| {
                SignInError::Provider(format!("the identity provider could not be asked: {e}"))
            })?;
        metadata.endpoint(name).ok_or_else(|| {
            SignInError::Provider(format!("the identity provider names no `{name}`"))
        })
    }

    /// The token endpoint's answer to the code.
    async fn exchange(&self, code: &str, verifier: &str) -> Result<Value, SignInError> {
        let endpoint = self.endpoint("token_endpoint").await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("code_verifier", verifier),
        ];
        let client = (self.client_id.as_str(), Some(self.client_secret.as_str()));
        self.fetcher
            .post_form(&endpoint, client, &form)
            .await
            .map_err(|e| {
                SignInError::Provider(format!("the sign-in code could not be exchanged: {e}"))
            })
    }

    /// The claims the console reads from an ID token.
    fn wanted(&self) -> [&str; 4] {
        [
            self.issuer.groups_claim.as_str(),
            self.issuer.name_claim.as_str(),
            self.issuer.email_claim.as_str(),
            "preferred_username",
        ]
    }

    /// Whether the ID token lacks the groups, name or email claim.
    fn lacks_claims(&self, claims: &Map<String, Value>) -> bool {
        self.wanted()[..3].iter().any(|c| !claims.contains_key(*c))
    }

    /// Fills the claims the console reads and the ID token lacks from the
    /// userinfo endpoint, when the provider has one. An answer for another
    /// subject is refused (OpenID Connect Core §5.3.2).
    async fn add_userinfo(
        &self,
        claims: &mut Map<String, Value>,
        token: &str,
    ) -> Result<(), SignInError> {
        let metadata = self.fetcher.metadata(&self.issuer.issuer).await;
        let Some(endpoint) = metadata.ok().and_then(|m| m.endpoint("userinfo_endpoint")) else {
            return Ok(());
        };
        let info = match self.fetcher.get_json_bearer(&endpoint, token).await {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(error = %e, "console: the userinfo endpoint did not answer; using the ID token's claims");
                return Ok(());
            }
        };
        if info.get("sub") != claims.get("sub") {
            return Err(SignInError::Provider(
                "the userinfo answer is about another person".into(),
            ));
        }
        for name in self.wanted() {
            if let (false, Some(value)) = (claims.contains_key(name), info.get(name)) {
                claims.insert(name.to_string(), value.clone());
            }
        }
        Ok(())
    }

    /// The role `identity`'s groups give.
    fn role_of(&self, identity: &Identity, has_groups: bool) -> Result<Role, SignInError> {
        let who = match &identity.email {
            Some(email) if *email != identity.name => format!("{} ({email})", identity.name),
            _ => identity.name.clone(),
        };
        if !has_groups {
            return Err(SignInError::NoGroupsClaim {
                who,
                claim: self.issuer.groups_claim.clone(),
            });
        }
        let in_any = |list: &[String]| identity.groups.iter().any(|g| list.contains(g));
        if in_any(&self.admin_groups) {
            Ok(Role::Admin)
        } else if in_any(&self.auditor_groups) {
            Ok(Role::Auditor)
        } else {
            Err(SignInError::NoRole { who })
        }
    }
}

/// A provider's string, cut to what a page shows.
fn bounded(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn party() -> RelyingParty {
        let config = OidcConfig {
            issuer: "https://idp.example.com".into(),
            client_id: "console".into(),
            client_secret_env: Some("PATH".into()),
            admin_groups: vec!["sre".into()],
            auditor_groups: vec!["audit".into(), "sre-oncall".into()],
            ..OidcConfig::default()
        };
        RelyingParty::new(&config, &AuthConfig::default(), "https://gw.example.com").unwrap()
    }

    fn person(p: &RelyingParty, claims: Value) -> (Identity, bool) {
        let claims = claims.as_object().cloned().unwrap();
        let has = claims.contains_key("groups");
        (
            crate::identity::claims::identity(&p.issuer, &claims).unwrap(),
            has,
        )
    }

    #[test]
    fn groups_give_the_role_admin_first_and_exactly() {
        let p = party();
        let cases = [
            (json!(["dev", "sre"]), Some(Role::Admin)),
            (json!(["audit", "sre"]), Some(Role::Admin)),
            (json!("sre-oncall"), Some(Role::Auditor)),
            (json!(["SRE", "sre "]), None),
            (json!([]), None),
        ];
        for (groups, expected) in cases {
            let (id, has) = person(&p, json!({"sub": "a", "name": "Ann", "groups": groups}));
            match (p.role_of(&id, has), expected) {
                (Ok(role), Some(want)) => assert_eq!(role, want, "{groups}"),
                (Err(SignInError::NoRole { who }), None) => assert_eq!(who, "Ann"),
                (other, _) => panic!("{groups}: {other:?}"),
            }
        }
        let (id, has) = person(&p, json!({"sub": "a", "email": "a@example.com"}));
        let err = p.role_of(&id, has).unwrap_err().to_string();
        assert!(err.contains("no `groups` claim for a@example.com"), "{err}");
    }

    #[test]
    fn the_answer_of_another_issuer_or_an_error_ends_the_sign_in() {
        let p = party();
        let answer = Callback {
            iss: Some("https://evil.example".into()),
            code: Some("c".into()),
            ..Callback::default()
        };
        assert!(matches!(
            p.check_answer(&answer, false),
            Err(SignInError::WrongIssuer(_))
        ));
        let answer = Callback {
            error: Some("access_denied".into()),
            error_description: Some("the user said no".into()),
            iss: Some("https://idp.example.com".into()),
            ..Callback::default()
        };
        let err = p.check_answer(&answer, true).unwrap_err().to_string();
        assert!(err.contains("access_denied (the user said no)"), "{err}");
        assert!(p.check_answer(&Callback::default(), false).is_ok());
        let unnamed = p.check_answer(&Callback::default(), true);
        assert!(
            matches!(unnamed, Err(SignInError::WrongIssuer(_))),
            "a provider that names itself always must name itself here"
        );
    }

    #[tokio::test]
    async fn a_state_not_started_here_or_from_another_browser_is_refused() {
        let p = party();
        let forged = Callback {
            state: Some("forged".into()),
            code: Some("c".into()),
            ..Callback::default()
        };
        let err = p.finish(&forged, Some("b")).await.unwrap_err();
        assert!(matches!(err, SignInError::UnknownState), "{err}");
        let started = p.pending.start().unwrap();
        let answer = Callback {
            state: Some(started.state.clone()),
            code: Some("c".into()),
            ..Callback::default()
        };
        let err = p.finish(&answer, Some("another")).await.unwrap_err();
        assert!(matches!(err, SignInError::OtherBrowser), "{err}");
        let err = p.finish(&answer, Some(&started.browser)).await.unwrap_err();
        assert!(
            matches!(err, SignInError::UnknownState),
            "spent by the first try: {err}"
        );
    }
}
