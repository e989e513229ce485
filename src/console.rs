//! The web console at `/console`: server-rendered pages for auditors and
//! security teams over the decision trail, replay and what-if, the policy
//! set, and the remote tools. Decisions are in `src/console/README.md`.
//!
//! The console is served only when someone can sign in: with
//! `admin_token` or `auditor_token` (unless `console.shared_tokens` is
//! off), or with the identity provider of `[console.oidc]`; otherwise
//! `/console` is not routed at all (404), like `/admin`. Reading needs a
//! sign-in (a token, or a person in `admin_groups` or `auditor_groups`);
//! changing anything (reload, approving held upstream tools) needs an
//! admin, a CSRF token, and is recorded in the trail with who did it.

mod auth;
mod candidates;
mod chart;
mod decision;
mod error;
mod filters;
mod idp;
mod jobs;
pub mod oidc;
mod overview;
mod peers;
mod policies;
mod replay;
mod role;
mod templates;
mod trail;
mod whatif;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Extension};
use axum::http::{HeaderName, header};
use axum::routing::{get, post};

use crate::config::Config;
use crate::gateway::Gateway;

/// The path the console is served under.
pub const PATH: &str = "/console";

/// The headers of every console answer, error pages included (set around
/// the whole router by `server::headers`, so a path no route matches gets
/// them too). A handler's own `Cache-Control` is kept.
pub const SECURITY_HEADERS: [(HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::CACHE_CONTROL, "no-store"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// Largest form a console page accepts (a candidate policy text).
const MAX_FORM_BYTES: usize = 512 * 1024;

/// What the console keeps between requests: sign-ins and replays.
pub(crate) struct ConsoleState {
    sessions: auth::Sessions,
    jobs: jobs::Jobs,
}

/// Whether the console is served: someone can sign in, with a shared
/// token (a non-empty admin or auditor token, `console.shared_tokens` on)
/// or with the identity provider (`[console.oidc]`).
pub fn enabled(config: &Config) -> bool {
    auth::shared_tokens_enabled(config) || config.console.oidc.is_some()
}

/// The console's routes, to be nested under [`PATH`].
pub fn routes(config: &Config) -> Router<Arc<Gateway>> {
    let state = Arc::new(ConsoleState {
        sessions: auth::Sessions::new(&config.console, config.base_url().starts_with("https://")),
        jobs: jobs::Jobs::new(config.console.replay_jobs),
    });
    Router::new()
        .route("/", get(overview::page))
        .route("/login", get(auth::login_form).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/login/idp", get(idp::start))
        .route("/callback", get(idp::callback))
        .route("/decisions/{id}", get(decision::page))
        .route("/replay", get(replay::form).post(replay::start))
        .route("/replay/{job}", get(replay::status))
        .route("/replay/{job}/cancel", post(replay::cancel))
        .route("/whatif", post(whatif::run))
        .route("/policies", get(policies::page))
        .route("/policies/reload", post(policies::reload))
        .route("/peers", get(peers::page))
        .route("/peers/{org}/mcp/{id}/approve", post(peers::approve))
        .route("/assets/console.css", get(templates::stylesheet))
        .route("/assets/console.js", get(templates::script))
        .layer(Extension(state))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
}
