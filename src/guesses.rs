//! Throttling of credential guesses: wrong admin tokens (`/admin`), wrong
//! admin or auditor tokens at the console's sign-in, and wrong daemon keys
//! (`rsk_live_…`: the MCP endpoints, `POST /api/sessions` and the AuthZEN
//! endpoints).
//!
//! - **Only failures spend.** A wrong credential spends one token of its
//!   client address's bucket, then one of the bucket of all addresses
//!   together (`[credential_guesses]`: by default 10 in a row per address
//!   and 10 a minute after that; 100 in a row in all and 300 a minute). A
//!   correct credential spends nothing, so a good client keeps working
//!   under any flood of wrong guesses from other addresses.
//! - **Refused before any check.** The failure that empties a bucket is
//!   answered 429 instead of 401, and from then on every attempt of that
//!   address (or, for the total, of every address not known) is answered
//!   429 with `Retry-After` (the seconds until the bucket regains a token)
//!   without its credential being looked at, a correct one included.
//! - **When the total bound is reached**, an address that presented a
//!   correct credential of the same class within `known_address_secs`
//!   (24 hours) is still checked (its own bucket holds); any other address
//!   is refused until the total regains a token. A spread-out attack thus
//!   locks out new addresses for its duration, never the daemons and
//!   operators already at work.
//! - **Two classes.** Operator tokens (admin and auditor) and daemon keys
//!   have buckets of their own, so a fleet of daemons with a revoked key
//!   never throttles the console's sign-in, nor the reverse.
//! - **What is a guess.** A wrong token or a daemon key whose id is unknown
//!   or whose secret does not match, and, where identity providers are
//!   configured, an access token the gateway refuses (`invalid_token`:
//!   forged, expired, for another resource; each costs a signature check).
//!   A request without a credential is refused (401) and spends nothing.
//! - **The client address** is the TCP peer of the connection. Behind a
//!   reverse proxy every client has the proxy's address, so the
//!   per-address bound applies to all of them together: set it for that,
//!   or throttle at the proxy. `X-Forwarded-For` is not read (any client
//!   could write it). IPv6 clients are counted by their /64.
//! - **The trail.** The first refusal of a burst (an address's, or the
//!   total's) is recorded as a `credential_guesses_throttled` event
//!   (`src/audit/events.rs`) before it is answered; later refusals write
//!   nothing until the burst has been quiet for `burst_quiet_secs`. Refused
//!   access tokens are recorded the same way before they are answered, one
//!   `access_token_refused` event per burst of an address and a reason
//!   (expired, signature, audience…), so a flood of forged tokens leaves a
//!   few records, and a client whose tokens keep expiring one a burst.
//! - **Per instance.** The buckets live in each instance's memory; behind
//!   a load balancer of n instances an address gets up to n times its
//!   bound.

pub mod throttle;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::Extensions;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::gateway::{Gateway, ResolveError};
use crate::mcp::error::RefusedToken;
use crate::store::WriteOp;
use throttle::{Class, Scope, Throttled};

/// Where a credential was presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// The admin API.
    Admin,
    /// The console's sign-in form.
    Console,
    /// The MCP endpoints.
    Mcp,
    /// `POST /api/sessions`.
    Sessions,
    /// The AuthZEN endpoints of the decision applications.
    Pdp,
}

impl Entry {
    fn name(self) -> &'static str {
        match self {
            Entry::Admin => "admin",
            Entry::Console => "console",
            Entry::Mcp => "mcp",
            Entry::Sessions => "sessions",
            Entry::Pdp => "pdp",
        }
    }
}

/// The client's address: the connection's peer, which the server puts in
/// every request's extensions; unspecified (one shared bucket) when a
/// request did not come through it.
pub fn client_of(extensions: &Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// Before a credential from `client` is checked: `Err` (answer 429) when
/// the address or all addresses are throttled; a burst's first refusal is
/// recorded.
pub async fn admit(
    gw: &Gateway,
    class: Class,
    client: IpAddr,
    entry: Entry,
) -> Result<(), Throttled> {
    let refused = gw.guesses.admit(class, client);
    refused_recorded(gw, refused, entry).await
}

/// After a wrong credential from `client`: `Err` (answer 429 rather than
/// 401) when this failure emptied a bucket that now refuses it.
pub async fn failed(
    gw: &Gateway,
    class: Class,
    client: IpAddr,
    entry: Entry,
) -> Result<(), Throttled> {
    let refused = gw.guesses.failed(class, client);
    refused_recorded(gw, refused, entry).await
}

/// After a correct credential from `client`.
pub fn succeeded(gw: &Gateway, class: Class, client: IpAddr) {
    gw.guesses.succeeded(class, client);
}

async fn refused_recorded(
    gw: &Gateway,
    refused: Result<(), Throttled>,
    entry: Entry,
) -> Result<(), Throttled> {
    if let Err(t) = &refused
        && t.first_in_burst
    {
        record(gw, t, entry).await;
    }
    refused
}

/// Records the first refusal of a burst (a failure to record is logged:
/// the refusal stands either way).
async fn record(gw: &Gateway, t: &Throttled, entry: Entry) {
    let config = gw.guesses.config();
    let (address, burst, per_minute) = match t.scope {
        Scope::Address(a) => (
            Some(address_text(a)),
            config.per_address_burst,
            config.per_address_per_minute,
        ),
        Scope::Total => (None, config.total_burst, config.total_per_minute),
    };
    tracing::warn!(
        credential = t.class.name(),
        scope = t.scope.name(),
        address = address.as_deref().unwrap_or("*"),
        entry = entry.name(),
        retry_after_secs = t.retry_after_secs,
        "wrong credentials throttled"
    );
    let event = crate::audit::events::guesses_event(
        &crate::audit::events::ThrottledGuesses {
            credential: t.class.name(),
            scope: t.scope.name(),
            address: address.as_deref(),
            entry: entry.name(),
            retry_after_secs: t.retry_after_secs,
            burst,
            per_minute,
        },
        &gw.pep.current().hash,
    );
    submit(gw, event, "a throttled burst of wrong credentials").await;
}

/// Writes one event durably (a failure to record `what` is logged: the
/// refusal stands either way).
async fn submit(gw: &Gateway, event: crate::store::decisions::NewDecision, what: &str) {
    let submitted = gw
        .store
        .writer()
        .submit(vec![WriteOp::Decision(Box::new(event))])
        .await;
    if let Err(e) = submitted {
        tracing::error!(error = %e, "cannot record {what}");
    }
}

/// An address key as recorded: IPv6 with its /64.
fn address_text(a: IpAddr) -> String {
    match a {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("{v6}/64"),
    }
}

/// Why `what` (`tokens`, `keys`) were refused, as a sentence.
pub fn message(t: &Throttled, what: &str) -> String {
    let whose = match t.scope {
        Scope::Address(_) => "this address",
        Scope::Total => "all addresses",
    };
    format!(
        "too many wrong {what} from {whose}; retry after {} s",
        t.retry_after_secs
    )
}

/// The daemon-key guard of the MCP routes and `POST /api/sessions`: a
/// throttled address is refused before anything else; a presented key is
/// checked here (a correct one is cached for the handler, which checks it
/// again), and a wrong one is charged, then answered by the handler (401)
/// or here (429) when it emptied a bucket. Without a daemon key the
/// handler answers as before.
pub async fn daemon_keys(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let client = client_of(req.extensions());
    let path = req.uri().path();
    let entry = if path.starts_with("/api/mcp/") || path.starts_with("/mcp/") {
        Entry::Mcp
    } else if path == "/api/sessions" {
        Entry::Sessions
    } else {
        Entry::Pdp
    };
    if let Err(t) = admit(&gw, Class::DaemonKey, client, entry).await {
        return throttled(entry, &t);
    }
    let Ok(presented) = crate::auth::bearer_key(req.headers()) else {
        return access_token(&gw, client, entry, req, next).await;
    };
    match gw.authenticate(&presented).await {
        Ok(_) => {
            succeeded(&gw, Class::DaemonKey, client);
            next.run(req).await
        }
        // The handler answers the wrong key (401) in its usual shape.
        Err(ResolveError::UnknownKey) => match failed(&gw, Class::DaemonKey, client, entry).await {
            Err(t) => throttled(entry, &t),
            Ok(()) => next.run(req).await,
        },
        // The store failed: the handler meets it again and answers it.
        Err(_) => next.run(req).await,
    }
}

/// A request with no daemon key: an access token the gateway refuses
/// (the answer carries [`RefusedToken`]) spends like a wrong key, so a
/// flood of forged or expired tokens meets the same bounds (each costs a
/// signature check or an introspection), and the first refusal of a burst
/// from its address for its reason is recorded; a request with no
/// credential at all spends nothing.
async fn access_token(
    gw: &Gateway,
    client: IpAddr,
    entry: Entry,
    req: Request,
    next: Next,
) -> Response {
    let resp = next.run(req).await;
    let Some(&RefusedToken(reason)) = resp.extensions().get::<RefusedToken>() else {
        return resp;
    };
    if gw.guesses.first_refusal(client, reason) {
        record_refused_token(gw, client, reason, entry).await;
    }
    if let Err(t) = failed(gw, Class::DaemonKey, client, entry).await {
        return throttled(entry, &t);
    }
    resp
}

/// Records the first refusal of a burst of access tokens (a failure to
/// record is logged: the refusal stands either way).
async fn record_refused_token(gw: &Gateway, client: IpAddr, reason: &str, entry: Entry) {
    let address = address_text(throttle::address_key(client));
    tracing::warn!(
        address,
        reason,
        entry = entry.name(),
        "access tokens refused"
    );
    let event = crate::audit::events::refused_token_event(
        &crate::audit::events::RefusedToken {
            address: &address,
            reason,
            entry: entry.name(),
            burst_quiet_secs: gw.guesses.config().burst_quiet_secs,
        },
        &gw.pep.current().hash,
    );
    submit(gw, event, "a burst of refused access tokens").await;
}

/// The 429 of `entry`, in its own error format.
fn throttled(entry: Entry, t: &Throttled) -> Response {
    match entry {
        Entry::Mcp => crate::mcp::error::McpError::CredentialGuesses {
            scope: t.scope.name(),
            retry_after_secs: t.retry_after_secs,
        }
        .into_response(),
        _ => crate::error::AppError::TooManyRequests {
            message: message(t, "keys"),
            retry_after_secs: t.retry_after_secs,
        }
        .into_response(),
    }
}
