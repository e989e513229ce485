//! The standing `GET` stream of a Streamable HTTP session: where an
//! upstream speaking 2025-03-26, 2025-06-18 or 2025-11-25 sends the
//! notifications that answer no request, `notifications/tools/list_changed`
//! among them. Each announcement is handed to the debounced refresh
//! (`refresh::list_changed_loop`) under the upstream's row id.
//!
//! Decisions:
//! - **One per upstream session.** The runtime keeps at most one stream per
//!   upstream (keyed by its row id); a new session replaces it, and
//!   dropping the [`Standing`] (session replaced, server deleted) aborts
//!   its task, so the stream ends with its session.
//! - **Not offered.** 405 (or a `2xx` that is not an event stream) means the
//!   upstream offers no such stream: the task ends and the background
//!   refresh covers that server. So does any other 4xx a retry would not
//!   change (all but 401, 403, 408 and 429, which are retried). A 404 to a request carrying the session
//!   id means the session expired: the task ends too; the next call
//!   initializes a new session, which opens a new stream.
//! - **Reconnect.** A stream that ends or fails is opened again after the
//!   `retry` the upstream last gave (at most [`BACKOFF_MAX`]), else after a
//!   backoff of 0.5 s doubling to 30 s (reset once a stream stayed up
//!   30 s), with `Last-Event-ID` set to the last event id seen so a
//!   resumable upstream replays what was missed.
//! - **Bounds.** An event larger than the answer bound closes the stream
//!   (then reconnects as above); the credential is read at each connect.
//! - **What is read.** Only the list changes (`notifications/tools/`,
//!   `resources/` or `prompts/list_changed`, `wire::is_list_changed`); requests the
//!   upstream sends here (`ping`, sampling) are not answered: the gateway
//!   declares no client capabilities.
//! - **2026-07-28.** A session of that revision has no `GET` stream (its
//!   `subscriptions/listen` is not opened here): the background refresh
//!   covers those servers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::ACCEPT;
use tokio::sync::mpsc;

use super::credentials::UpstreamAuth;
use super::oauth_token::TokenSource;
use super::wire::{
    ClientError, event_end, event_message, is_event_stream, is_list_changed, too_large, transport,
};
use crate::mcp::protocol;

/// First delay before a stream is opened again.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(500);

/// Longest delay between two attempts (and longest `retry` honoured).
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A stream up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Whether a Streamable HTTP session of `version` may hold a standing
/// stream (the revisions from 2025-03-26 up to 2025-11-25).
pub fn offered_in(version: &str) -> bool {
    !protocol::is_modern(version) && version != "2024-11-05"
}

/// What the standing stream of one session needs.
#[derive(Debug, Clone)]
pub struct Params {
    /// Outbound HTTP (no overall timeout: the stream is long-lived).
    pub http: reqwest::Client,
    /// The MCP endpoint.
    pub url: reqwest::Url,
    /// The session's `Mcp-Session-Id` (None: a stateless upstream).
    pub session_id: Option<String>,
    /// The negotiated protocol version.
    pub version: String,
    /// The upstream's credential source, read at each connect.
    pub auth: Option<UpstreamAuth>,
    /// Where an OAuth client's token comes from.
    pub tokens: Arc<TokenSource>,
    /// Largest event accepted, in bytes.
    pub max_bytes: usize,
    /// The upstream's row id, announced on `list_changed`.
    pub server_id: String,
    /// Where announcements go.
    pub announce: mpsc::Sender<String>,
}

/// A running standing stream; dropping it ends the stream.
#[derive(Debug)]
pub struct Standing {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Standing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Standing {
    /// Opens the stream in the background.
    pub fn open(params: Params) -> Standing {
        Standing {
            task: tokio::spawn(run(params)),
        }
    }
}

/// Why a connection attempt ended without a stream.
enum Refused {
    /// The upstream offers no standing stream.
    NotOffered(String),
    /// The session expired.
    Expired,
    /// Worth trying again.
    Failed(ClientError),
}

/// What reading one stream left for the next attempt.
#[derive(Default)]
struct Resume {
    last_event_id: Option<String>,
    retry: Option<Duration>,
}

/// Connects, reads, and reconnects until the upstream refuses the stream
/// for good.
async fn run(p: Params) {
    let mut resume = Resume::default();
    let mut backoff = BACKOFF_INITIAL;
    loop {
        let started = Instant::now();
        let ended = match connect(&p, resume.last_event_id.as_deref()).await {
            Ok(resp) => read(resp, &p, &mut resume).await,
            Err(Refused::NotOffered(why)) => {
                tracing::info!(upstream = %p.server_id, %why, "upstream offers no standing stream; the background refresh covers it");
                return;
            }
            Err(Refused::Expired) => {
                tracing::info!(upstream = %p.server_id, "upstream session expired; its standing stream ends");
                return;
            }
            Err(Refused::Failed(e)) => e,
        };
        if started.elapsed() >= STABLE_AFTER {
            backoff = BACKOFF_INITIAL;
        }
        let wait = resume.retry.unwrap_or(backoff);
        tracing::info!(upstream = %p.server_id, error = %ended, wait_ms = wait.as_millis(), "upstream standing stream ended; reconnecting");
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// `GET` on the endpoint with the session's headers.
async fn connect(p: &Params, last_event_id: Option<&str>) -> Result<reqwest::Response, Refused> {
    let mut req = p
        .http
        .get(p.url.clone())
        .header(ACCEPT, "text/event-stream")
        .header("MCP-Protocol-Version", &p.version);
    if let Some(id) = &p.session_id {
        req = req.header("Mcp-Session-Id", id);
    }
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id);
    }
    let mut token = None;
    if let Some(auth) = &p.auth {
        let bearer = auth.token(&p.server_id, &p.tokens).await.map_err(|e| {
            Refused::Failed(ClientError::Transport(format!(
                "cannot authenticate to the upstream: {e}"
            )))
        })?;
        req = req.bearer_auth(&bearer);
        token = Some((auth, bearer));
    }
    let resp = req
        .send()
        .await
        .map_err(|e| Refused::Failed(transport(&e)))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED
        && let Some((auth, bearer)) = token
    {
        auth.rejected(&p.server_id, &bearer, &p.tokens);
    }
    if status == reqwest::StatusCode::NOT_FOUND && p.session_id.is_some() {
        return Err(Refused::Expired);
    }
    if not_offered(status) {
        return Err(Refused::NotOffered(format!("HTTP {}", status.as_u16())));
    }
    if !status.is_success() {
        return Err(Refused::Failed(ClientError::Status(status.as_u16())));
    }
    if !is_event_stream(&resp) {
        return Err(Refused::NotOffered("not an event stream".into()));
    }
    Ok(resp)
}

/// Reads one stream to its end (or past the bound), announcing each
/// `list_changed` and keeping the last event id and `retry`.
async fn read(mut resp: reqwest::Response, p: &Params, resume: &mut Resume) -> ClientError {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        while let Some(end) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            take_fields(&event, resume);
            if event_message(&event).is_some_and(|m| is_list_changed(&m)) {
                // A full queue already holds a listing to come.
                let _ = p.announce.try_send(p.server_id.clone());
            }
        }
        if buffer.len() > p.max_bytes {
            return too_large(p.max_bytes);
        }
        match resp.chunk().await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk),
            Ok(None) => {
                return ClientError::Transport("the upstream closed its standing stream".into());
            }
            Err(e) => return transport(&e),
        }
    }
}

/// A status that asking again will not change: 405, and any other client
/// error but those a later attempt may clear (401, 403, 408, 429).
fn not_offered(status: reqwest::StatusCode) -> bool {
    status.is_client_error() && ![401, 403, 408, 429].contains(&status.as_u16())
}

/// The event's `id:` and `retry:` fields, kept for the next connect.
fn take_fields(event: &[u8], resume: &mut Resume) {
    let Ok(text) = std::str::from_utf8(event) else {
        return;
    };
    for line in text.lines() {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match name {
            "id" if !value.contains('\0') => {
                resume.last_event_id = Some(value.to_string()).filter(|v| !v.is_empty());
            }
            "retry" => {
                if let Ok(ms) = value.trim().parse::<u64>() {
                    resume.retry = Some(Duration::from_millis(ms).min(BACKOFF_MAX));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_and_retry_are_kept_within_bounds() {
        let mut r = Resume::default();
        take_fields(b"id: 7\nretry: 250\ndata: {}\n\n", &mut r);
        assert_eq!(r.last_event_id.as_deref(), Some("7"));
        assert_eq!(r.retry, Some(Duration::from_millis(250)));
        take_fields(b"retry: 99999999\n\n", &mut r);
        assert_eq!(r.retry, Some(BACKOFF_MAX));
        take_fields(b"id:\n\n", &mut r);
        assert_eq!(r.last_event_id, None);
    }

    #[test]
    fn client_errors_that_a_retry_cannot_clear_end_the_stream() {
        use reqwest::StatusCode as S;
        for s in [S::METHOD_NOT_ALLOWED, S::BAD_REQUEST, S::NOT_ACCEPTABLE] {
            assert!(not_offered(s), "{s}");
        }
        for s in [S::UNAUTHORIZED, S::TOO_MANY_REQUESTS, S::BAD_GATEWAY, S::OK] {
            assert!(!not_offered(s), "{s}");
        }
    }

    #[test]
    fn only_the_revisions_with_a_get_stream_open_one() {
        assert!(offered_in("2025-03-26") && offered_in("2025-11-25"));
        assert!(!offered_in("2024-11-05") && !offered_in(protocol::MODERN));
    }
}
