//! Sign-in with the identity provider (`[console.oidc]`):
//! `GET /console/login/idp` starts one and sends the browser to the
//! provider, with a `SameSite=Lax` cookie binding the sign-in to this
//! browser; `GET /console/callback` finishes it (`oidc::relying_party`)
//! and opens the console session exactly as a token sign-in does.
//!
//! The callback answers a short page that moves on to the overview
//! (`<meta http-equiv="refresh">` and a link) rather than a redirect: the
//! session cookie is `SameSite=Strict`, and a browser does not send it on
//! a redirect that is still part of the provider's cross-site navigation,
//! so a 303 to `/console` would land on the sign-in form. The page is a
//! navigation of the console's own, which sends it.
//!
//! Every failure (an unknown, spent or forged state, another browser, the
//! provider's `error=access_denied`, a failed exchange, a refused ID
//! token, a person in none of the groups) answers a page saying why and
//! opens no session. The binding cookie is cleared when its sign-in ends,
//! well or not; a callback naming a state not under way leaves it, as it
//! may belong to a sign-in still going on in this browser.

use std::sync::Arc;

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::ConsoleState;
use super::auth::{self, Person};
use super::error::ConsoleError;
use super::oidc::relying_party::{Callback, PENDING_SECS, RelyingParty, SignInError, SignedIn};
use crate::gateway::Gateway;

/// `GET /console/login/idp`: to the provider's authorization endpoint.
pub async fn start(
    State(gw): State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
) -> Response {
    let party = match relying_party(&gw) {
        Ok(party) => party,
        Err(e) => return e.into_response(),
    };
    match party.begin().await {
        Ok(begun) => (
            StatusCode::SEE_OTHER,
            [
                (LOCATION, begun.location),
                (
                    SET_COOKIE,
                    console.sessions.idp_cookie(&begun.browser, PENDING_SECS),
                ),
            ],
        )
            .into_response(),
        Err(e) => ConsoleError::from(e).into_response(),
    }
}

/// `GET /console/callback`: the provider's answer.
pub async fn callback(
    State(gw): State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
    headers: HeaderMap,
    query: Result<Query<Callback>, QueryRejection>,
) -> Response {
    let party = match relying_party(&gw) {
        Ok(party) => party,
        Err(e) => return e.into_response(),
    };
    let answer = match query {
        Ok(Query(answer)) => answer,
        Err(e) => return ConsoleError::BadRequest(e.body_text()).into_response(),
    };
    let browser = auth::cookie(&headers, auth::IDP_COOKIE);
    let (mut response, ended) = match party.finish(&answer, browser).await {
        Ok(signed_in) => (signed_in_page(&console, signed_in), true),
        Err(e) => {
            let ended = !matches!(e, SignInError::UnknownState);
            (ConsoleError::from(e).into_response(), ended)
        }
    };
    if ended && let Ok(clear) = console.sessions.idp_cookie("", 0).parse() {
        response.headers_mut().append(SET_COOKIE, clear);
    }
    response
}

fn relying_party(gw: &Gateway) -> Result<&RelyingParty, ConsoleError> {
    gw.console_idp.as_ref().ok_or_else(|| {
        ConsoleError::NotFound("no identity provider is configured (`[console.oidc]`)".into())
    })
}

/// The session opened, and the page that moves on to the overview.
fn signed_in_page(console: &ConsoleState, signed_in: SignedIn) -> Response {
    let SignedIn { identity, role } = signed_in;
    let person = Person {
        issuer: identity.issuer,
        subject: identity.subject,
        name: identity.name,
        email: identity.email,
    };
    tracing::info!(issuer = %person.issuer, subject = %person.subject, role = ?role,
        "console: signed in with the identity provider");
    let cookie = match console.sessions.open(role, Some(person.clone())) {
        Ok(cookie) => cookie,
        Err(e) => return e.into_response(),
    };
    let page = super::templates::render::<ConsoleError>(
        "signed_in.html",
        minijinja::context! { person, role },
    );
    match page {
        Ok(html) => (StatusCode::OK, [(SET_COOKIE, cookie)], html).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A sign-in that did not happen, as its page: the provider failing is
/// 502, a callback without a code 400, anything refused 403.
impl From<SignInError> for ConsoleError {
    fn from(e: SignInError) -> Self {
        tracing::warn!(error = %e, "console: sign-in with the identity provider refused");
        let message = e.to_string();
        match e {
            SignInError::Provider(_) => ConsoleError::Provider(message),
            SignInError::NoCode => ConsoleError::BadRequest(message),
            SignInError::Random => ConsoleError::Render,
            _ => ConsoleError::Forbidden(message),
        }
    }
}
