//! Console sign-in: the admin token or the read-only auditor token (unless
//! `console.shared_tokens` is off), or a person the identity provider
//! signed in (`super::idp`), traded for a session cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/console`, `Secure` when `public_url` is
//! https, `Max-Age` of `console.session_ttl_secs`): both ways open the
//! sign-in through [`Sessions::open`]. Sign-ins are kept in this
//! instance's memory, bounded in number and lifetime; signing out forgets
//! one at once.
//!
//! Every POST carries the sign-in's CSRF token as the `csrf` form field
//! ([`Posted`]); the sign-in form itself carries a one-time token bound to
//! a short-lived cookie (double submit), so a third-party page cannot sign
//! a browser in either. The form's token is single-use: this instance
//! keeps the tokens it issued (bounded in number, for [`LOGIN_FORM_SECS`])
//! and the first post of one spends it, so a replayed sign-in post is
//! refused (403) whatever its token field holds.
//!
//! A wrong token is a guess: it is charged to the client's address and to
//! every address together (`crate::guesses`); a throttled address gets 429
//! with `Retry-After` and its post is not checked.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::ConsoleState;
use super::error::ConsoleError;
use super::oidc::config::OidcConfig;
use crate::config::ConsoleConfig;
use crate::gateway::Gateway;
use crate::guesses::throttle::Class;
use crate::guesses::{self, Entry};

/// The session cookie.
pub const COOKIE_NAME: &str = "cg_console";
/// The sign-in form's double-submit cookie.
const LOGIN_COOKIE: &str = "cg_console_login";
/// Seconds the sign-in form stays usable.
const LOGIN_FORM_SECS: u64 = 600;
/// Most sign-in form tokens kept at once (the oldest are dropped beyond it).
const MAX_LOGIN_FORMS: u64 = 10_000;
/// Most sign-ins kept at once (the oldest are dropped beyond it).
const MAX_SIGN_INS: u64 = 10_000;

pub use super::role::Role;

/// The binding cookie of a sign-in with the identity provider under way
/// (`SameSite=Lax`: the provider's redirect back is a cross-site
/// navigation, which a `Strict` cookie would not follow).
pub const IDP_COOKIE: &str = "cg_console_idp";

/// A person the identity provider signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Person {
    /// The issuer, as its tokens name it.
    pub issuer: String,
    /// Their subject at that issuer.
    pub subject: String,
    /// Display name.
    pub name: String,
    /// Email, when the provider gave one.
    pub email: Option<String>,
}

/// One sign-in.
#[derive(Debug)]
struct SignIn {
    role: Role,
    csrf: String,
    /// Who, when the identity provider signed them in (none for a token).
    person: Option<Arc<Person>>,
}

/// The sign-ins of this instance.
pub struct Sessions {
    live: moka::sync::Cache<String, Arc<SignIn>>,
    /// Sign-in form tokens issued and not spent yet.
    forms: moka::sync::Cache<String, ()>,
    ttl: Duration,
    secure: bool,
}

impl Sessions {
    /// Sign-ins lasting `console.session_ttl_secs`; cookies marked
    /// `Secure` when `secure`.
    pub fn new(config: &ConsoleConfig, secure: bool) -> Sessions {
        let ttl = Duration::from_secs(config.session_ttl_secs.max(1));
        Sessions {
            live: moka::sync::Cache::builder()
                .max_capacity(MAX_SIGN_INS)
                .time_to_live(ttl)
                .build(),
            forms: moka::sync::Cache::builder()
                .max_capacity(MAX_LOGIN_FORMS)
                .time_to_live(Duration::from_secs(LOGIN_FORM_SECS))
                .build(),
            ttl,
            secure,
        }
    }

    fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        self.cookie_with(name, value, max_age, "Strict")
    }

    fn cookie_with(&self, name: &str, value: &str, max_age: u64, same_site: &str) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{name}={value}; Path={}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}",
            super::PATH
        )
    }

    /// The `Set-Cookie` of a sign-in with the identity provider's binding
    /// (an empty `value` with `max_age` 0 clears it).
    pub fn idp_cookie(&self, value: &str, max_age: u64) -> String {
        self.cookie_with(IDP_COOKIE, value, max_age, "Lax")
    }

    /// Signs a viewer in with `role` (and `person`, when the identity
    /// provider named one): the session cookie's `Set-Cookie`. Token and
    /// identity-provider sign-ins both come through here, so they get the
    /// same cookie, lifetime and CSRF token.
    pub fn open(&self, role: Role, person: Option<Person>) -> Result<String, ConsoleError> {
        let (Ok(id), Ok(csrf)) = (crate::ids::random_hex(32), crate::ids::random_hex(32)) else {
            return Err(ConsoleError::Render);
        };
        let person = person.map(Arc::new);
        self.live
            .insert(id.clone(), Arc::new(SignIn { role, csrf, person }));
        Ok(self.cookie(COOKIE_NAME, &id, self.ttl.as_secs()))
    }
}

/// A signed-in viewer.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// What they may do.
    pub role: Role,
    /// The CSRF token every form of theirs carries.
    pub csrf: String,
    /// Who, when the identity provider signed them in.
    pub person: Option<Arc<Person>>,
}

impl Viewer {
    /// Whether they may change things.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// The value of cookie `name`, if sent.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn state(parts: &Parts) -> Result<Arc<ConsoleState>, ConsoleError> {
    parts
        .extensions
        .get::<Arc<ConsoleState>>()
        .cloned()
        .ok_or(ConsoleError::Render)
}

impl FromRequestParts<Arc<Gateway>> for Viewer {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        _gw: &Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        let console = state(parts)?;
        let signed_in =
            cookie(&parts.headers, COOKIE_NAME).and_then(|id| console.sessions.live.get(id));
        match signed_in {
            Some(s) => Ok(Viewer {
                role: s.role,
                csrf: s.csrf.clone(),
                person: s.person.clone(),
            }),
            None if parts.method == Method::GET => Err(ConsoleError::SignIn),
            None => Err(ConsoleError::Forbidden("sign in first".into())),
        }
    }
}

/// A form posted by a signed-in viewer, its CSRF token checked before the
/// handler runs.
pub struct Posted<T> {
    /// Who posted it.
    pub viewer: Viewer,
    /// The form's other fields.
    pub form: T,
}

/// A form's CSRF field next to its own fields.
#[derive(Debug, Deserialize)]
struct WithCsrf<T> {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    rest: T,
}

impl<T: DeserializeOwned + Send> FromRequest<Arc<Gateway>> for Posted<T> {
    type Rejection = ConsoleError;

    async fn from_request(req: Request, gw: &Arc<Gateway>) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, gw).await?;
        let req = Request::from_parts(parts, body);
        let Form(form) = Form::<WithCsrf<T>>::from_request(req, gw)
            .await
            .map_err(|e| ConsoleError::BadRequest(e.body_text()))?;
        if !crate::auth::tokens_equal(&form.csrf, &viewer.csrf) {
            return Err(ConsoleError::Forbidden(
                "the form's CSRF token is missing or wrong: reload the page and try again".into(),
            ));
        }
        Ok(Posted {
            viewer,
            form: form.rest,
        })
    }
}

/// An admin's posted form; an auditor gets 403.
pub struct AdminPosted<T>(pub Posted<T>);

impl<T: DeserializeOwned + Send> FromRequest<Arc<Gateway>> for AdminPosted<T> {
    type Rejection = ConsoleError;

    async fn from_request(req: Request, gw: &Arc<Gateway>) -> Result<Self, Self::Rejection> {
        let posted = Posted::<T>::from_request(req, gw).await?;
        if !posted.viewer.is_admin() {
            let why = match posted.viewer.person {
                None => "the auditor token is read-only: this needs the admin token",
                Some(_) => "auditors only read: this needs an admin (one of `admin_groups`)",
            };
            return Err(ConsoleError::Forbidden(why.into()));
        }
        Ok(AdminPosted(posted))
    }
}

/// `GET /console/login`: the identity provider's button when
/// `[console.oidc]` is set, and the token form (with a fresh double-submit
/// token) unless `console.shared_tokens` is off.
pub async fn login_form(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
) -> Response {
    login_page(&gw, &console, StatusCode::OK, None)
}

fn login_page(
    gw: &Gateway,
    console: &ConsoleState,
    status: StatusCode,
    error: Option<&str>,
) -> Response {
    let idp = gw.config.console.oidc.as_ref().map(OidcConfig::label);
    if !shared_tokens_enabled(&gw.config) {
        let page = super::templates::render::<ConsoleError>(
            "login.html",
            minijinja::context! { idp, tokens => false },
        );
        return page.map_or_else(IntoResponse::into_response, |html| {
            (status, html).into_response()
        });
    }
    let Ok(token) = crate::ids::random_hex(16) else {
        return ConsoleError::Render.into_response();
    };
    console.sessions.forms.insert(token.clone(), ());
    let page = super::templates::render::<ConsoleError>(
        "login.html",
        minijinja::context! { csrf => token, error, idp, tokens => true },
    );
    match page {
        Ok(html) => (
            status,
            [(
                SET_COOKIE,
                console
                    .sessions
                    .cookie(LOGIN_COOKIE, &token, LOGIN_FORM_SECS),
            )],
            html,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Whether `config` lets a shared token sign in to the console.
pub fn shared_tokens_enabled(config: &crate::config::Config) -> bool {
    config.console.shared_tokens
        && [&config.admin_token, &config.auditor_token]
            .iter()
            .any(|t| t.as_deref().is_some_and(|t| !t.is_empty()))
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/login`: the admin token signs in an admin, the auditor
/// token an auditor; anything else is 401 and signs no one in.
pub async fn login(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
    extensions: Extensions,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !shared_tokens_enabled(&gw.config) {
        return ConsoleError::Forbidden(
            "signing in with a shared token is turned off (`console.shared_tokens = false`): sign in with the identity provider".into(),
        )
        .into_response();
    }
    let client = guesses::client_of(&extensions);
    if let Err(t) = guesses::admit(&gw, Class::Operator, client, Entry::Console).await {
        return throttled(&t);
    }
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    let issued = !expected.is_empty() && crate::auth::tokens_equal(expected, &form.csrf);
    // Spent by this post, whatever comes of it: a replay finds it gone.
    if !issued || console.sessions.forms.remove(&form.csrf).is_none() {
        return ConsoleError::Forbidden(
            "the sign-in form expired, was already used or did not come from this console: open it again".into(),
        )
        .into_response();
    }
    let Some(role) = role_of(&gw, &form.token) else {
        tracing::warn!("console: sign-in with a wrong token");
        if let Err(t) = guesses::failed(&gw, Class::Operator, client, Entry::Console).await {
            return throttled(&t);
        }
        return login_page(&gw, &console, StatusCode::UNAUTHORIZED, Some("wrong token"));
    };
    guesses::succeeded(&gw, Class::Operator, client);
    let session_cookie = match console.sessions.open(role, None) {
        Ok(cookie) => cookie,
        Err(e) => return e.into_response(),
    };
    tracing::info!(role = ?role, "console: signed in");
    (
        StatusCode::SEE_OTHER,
        [
            (LOCATION, super::PATH.to_string()),
            (SET_COOKIE, session_cookie),
        ],
    )
        .into_response()
}

fn throttled(t: &guesses::throttle::Throttled) -> Response {
    ConsoleError::Throttled {
        message: guesses::message(t, "tokens"),
        retry_after_secs: t.retry_after_secs,
    }
    .into_response()
}

/// Which role `token` signs in, if any (constant-time comparisons).
fn role_of(gw: &Gateway, token: &str) -> Option<Role> {
    let matches = |configured: &Option<String>| {
        configured
            .as_deref()
            .is_some_and(|t| !t.is_empty() && crate::auth::tokens_equal(token, t))
    };
    if matches(&gw.config.admin_token) {
        Some(Role::Admin)
    } else if matches(&gw.config.auditor_token) {
        Some(Role::Auditor)
    } else {
        None
    }
}

/// `POST /console/logout`: forgets the sign-in and clears the cookie.
pub async fn logout(
    Extension(console): Extension<Arc<ConsoleState>>,
    headers: HeaderMap,
    _posted: Posted<Empty>,
) -> Response {
    if let Some(id) = cookie(&headers, COOKIE_NAME) {
        console.sessions.live.invalidate(id);
    }
    (
        StatusCode::SEE_OTHER,
        [
            (LOCATION, format!("{}/login", super::PATH)),
            (SET_COOKIE, console.sessions.cookie(COOKIE_NAME, "", 0)),
        ],
    )
        .into_response()
}

/// A form with nothing but its CSRF token.
#[derive(Debug, Default, Deserialize)]
pub struct Empty {}
