//! `[auth]` and `[[auth.issuers]]`: which identity providers' access tokens
//! the gateway accepts, and how their claims become a Cedar principal.
//!
//! Nothing here is required: with no issuer the gateway accepts only its own
//! daemon keys, exactly as before. Every default follows what the common
//! providers (Okta, Entra ID, Keycloak, Auth0) issue; `README.md` ("Sign in
//! with your identity provider") gives each one's keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[auth]`: the gateway as an OAuth 2.1 resource server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The identity providers whose tokens are accepted (none: keys only).
    pub issuers: Vec<IssuerConfig>,
    /// The gateway's resource identifier (RFC 8707) besides the exact
    /// endpoint URL a client used: a token whose `aud` names either is
    /// for this server. Default: `public_url`, else none (the endpoint URL
    /// alone).
    pub resource: Option<String>,
    /// `scopes_supported` of the protected-resource metadata, and the scope
    /// a 401 challenge asks for when no policy names one. `offline_access`
    /// is never advertised.
    pub scopes_supported: Vec<String>,
    /// Scopes a 401 challenge asks for (a subset of `scopes_supported`;
    /// empty: all of them).
    pub challenge_scopes: Vec<String>,
    /// Broader scopes that imply narrower ones: `{"mcp:admin" =
    /// ["mcp:tools", "mcp:read"]}`. A token holding a key holds its values
    /// too, transitively.
    pub scope_implies: BTreeMap<String, Vec<String>>,
    /// Longest `Authorization` token accepted, in bytes; a longer one is
    /// refused (401) before any parsing.
    pub max_token_bytes: usize,
    /// Validated tokens kept (by SHA-256 of the token, until they expire).
    pub token_cache_entries: u64,
    /// Longest an introspected (opaque) token is trusted without asking the
    /// provider again: a revocation takes effect within this time.
    pub introspection_cache_secs: u64,
    /// A key set is fetched again after this long when the provider's
    /// `Cache-Control: max-age` says nothing (clamped to 1 min … 1 day).
    pub jwks_cache_secs: u64,
    /// An unknown `kid` fetches the key set again at most once per this
    /// interval per issuer, so a flood of made-up kids cannot hammer the
    /// provider; in between, unknown kids fail closed.
    pub unknown_kid_refresh_secs: u64,
    /// Time allowed to each request to a provider (discovery, keys,
    /// introspection).
    pub fetch_timeout_ms: u64,
    /// Largest discovery document, key set or introspection answer read.
    pub max_fetch_bytes: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            issuers: Vec::new(),
            resource: None,
            scopes_supported: vec!["mcp:read".into(), "mcp:tools".into(), "mcp:admin".into()],
            challenge_scopes: Vec::new(),
            scope_implies: BTreeMap::new(),
            max_token_bytes: 16 * 1024,
            token_cache_entries: 100_000,
            introspection_cache_secs: 30,
            jwks_cache_secs: 900,
            unknown_kid_refresh_secs: 30,
            fetch_timeout_ms: 5_000,
            max_fetch_bytes: 256 * 1024,
        }
    }
}

/// One `[[auth.issuers]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer identifier, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// The key set's URL; default: `jwks_uri` of the issuer's discovery
    /// document (`/.well-known/openid-configuration`, else
    /// `/.well-known/oauth-authorization-server`).
    pub jwks_uri: Option<String>,
    /// RFC 7662 introspection endpoint for opaque tokens; default: the
    /// discovery document's, when `introspection_client_id` is set.
    pub introspection_endpoint: Option<String>,
    /// The gateway's client id at the introspection endpoint; opaque tokens
    /// are introspected only when it is set.
    pub introspection_client_id: Option<String>,
    /// Environment variable holding that client's secret.
    pub introspection_secret_env: Option<String>,
    /// Or a file holding it (trailing whitespace ignored); the variable wins
    /// when both are set.
    pub introspection_secret_file: Option<std::path::PathBuf>,
    /// Signature algorithms accepted: asymmetric only (`RS256`, `RS384`,
    /// `RS512`, `PS256`, `PS384`, `PS512`, `ES256`, `ES384`, `EdDSA`).
    pub algorithms: Vec<String>,
    /// Audiences accepted besides the gateway's endpoint URL and
    /// `auth.resource` (for providers that stamp an API identifier).
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// Require the RFC 9068 header `typ: at+jwt` (set it where the provider
    /// issues RFC 9068 tokens: an ID token presented as an access token is
    /// then refused by its type as well as by its audience).
    pub require_at_jwt: bool,
    /// The org every token of this issuer belongs to (an org id).
    pub org: Option<String>,
    /// Or: the claim naming the org, mapped through `org_map` (a value not
    /// in the map is taken as the org id itself).
    pub org_claim: Option<String>,
    /// Claim value → org id.
    pub org_map: BTreeMap<String, String>,
    /// The claim holding the subject.
    pub subject_claim: String,
    /// The claim holding the groups (an array of strings, or one string).
    pub groups_claim: String,
    /// The claim holding the display name (else `preferred_username`, else
    /// the email, else the subject).
    pub name_claim: String,
    /// The claim holding the email.
    pub email_claim: String,
    /// Tag name → claim: each becomes an entity tag of the user
    /// (`principal.getTag("department")`) when the claim is a string,
    /// number or boolean.
    pub tags: BTreeMap<String, String>,
}

impl Default for IssuerConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            jwks_uri: None,
            introspection_endpoint: None,
            introspection_client_id: None,
            introspection_secret_env: None,
            introspection_secret_file: None,
            algorithms: ["RS256", "ES256"].map(String::from).to_vec(),
            audiences: Vec::new(),
            leeway_secs: 60,
            require_at_jwt: false,
            org: None,
            org_claim: None,
            org_map: BTreeMap::new(),
            subject_claim: "sub".into(),
            groups_claim: "groups".into(),
            name_claim: "name".into(),
            email_claim: "email".into(),
            tags: BTreeMap::new(),
        }
    }
}
