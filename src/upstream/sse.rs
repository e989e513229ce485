//! The legacy HTTP+SSE transport (protocol 2024-11-05) as the client
//! sees it: `GET <url>` opens a long-lived event stream whose first
//! `endpoint` event names where messages are POSTed; responses come back
//! on that stream (the POST answers 202) and are matched to their request
//! by id. A server that answers the POST with the JSON-RPC response in its
//! body (seed 004's shape) is read the same way as Streamable HTTP.
//!
//! Decisions:
//! - the `endpoint` must be on the stream's own origin (scheme, host,
//!   port): the upstream's credential is never sent to a host it names;
//! - the stream is read by one task per session; an event larger than the
//!   answer bound closes the stream (its pending requests fail -32203), and
//!   so does a response whose id is missing or names no request sent on
//!   it (a late answer to a request given up excepted): the stream no
//!   longer answers each request with its own response;
//! - when the stream ends, requests waiting on it fail -32202 (never
//!   resent: the upstream may have run them), and the session is dead: the
//!   next request opens a new stream and initializes again;
//! - requests the upstream sends on the stream (sampling, roots, ping) are
//!   not answered: the gateway offers no client capabilities.

use std::sync::Arc;

use reqwest::header::ACCEPT;
use serde_json::Value;

use super::wire::{
    ClientError, Pending, Waiter, event_end, event_message, is_event_stream, too_large, transport,
};

/// One open event stream and the endpoint its messages are POSTed to.
#[derive(Debug)]
pub struct Stream {
    /// Where messages go (from the `endpoint` event).
    pub post_url: reqwest::Url,
    shared: Arc<Pending>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reader.abort();
        // The reader will not close it now: tell a `ListChanged` waiter.
        self.shared.close(&closed());
    }
}

/// A stream's a list change (`notifications/{tools,resources,prompts}/list_changed`) announcements.
#[derive(Debug, Clone)]
pub struct ListChanged {
    shared: Arc<Pending>,
}

impl ListChanged {
    /// Waits for the next announcement: true, or false once the stream
    /// is closed (no more will come).
    pub async fn next(&self) -> bool {
        self.shared.next_list_changed().await
    }
}

fn closed() -> ClientError {
    ClientError::Transport("the upstream's event stream closed before the answer".into())
}

impl Stream {
    /// Whether the stream is still being read.
    pub fn is_open(&self) -> bool {
        self.shared.is_open()
    }

    /// The announcements of a list change (`notifications/{tools,resources,prompts}/list_changed`) on this
    /// stream. Holding it does not keep the stream open.
    pub fn list_changed(&self) -> ListChanged {
        ListChanged {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Registers a wait for the response to `id` (before it is sent, so a
    /// fast answer is not missed); a dead stream means the session expired.
    pub fn expect(&self, id: &Value) -> Result<Waiter, ClientError> {
        self.shared.expect(id).ok_or(ClientError::Expired)
    }
}

/// Opens the stream at `url` and waits for its `endpoint` event.
pub async fn open(
    http: &reqwest::Client,
    url: &reqwest::Url,
    bearer: Option<&str>,
    max_bytes: usize,
) -> Result<Stream, ClientError> {
    let mut req = http.get(url.clone()).header(ACCEPT, "text/event-stream");
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let mut resp = req.send().await.map_err(|e| transport(&e))?;
    if !resp.status().is_success() {
        return Err(ClientError::Transport(format!(
            "the upstream answered HTTP {} to its event stream request",
            resp.status().as_u16()
        )));
    }
    if !is_event_stream(&resp) {
        return Err(ClientError::Invalid(
            "the upstream's SSE URL did not answer an event stream".into(),
        ));
    }
    let mut buffer = Vec::new();
    let post_url = loop {
        if let Some(end) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            if let Some(post_url) = endpoint(&event, url) {
                break post_url?;
            }
            continue;
        }
        if buffer.len() > max_bytes {
            return Err(too_large(max_bytes));
        }
        match resp.chunk().await.map_err(|e| transport(&e))? {
            Some(chunk) => buffer.extend_from_slice(&chunk),
            None => {
                return Err(ClientError::Invalid(
                    "the upstream's event stream ended without an `endpoint` event".into(),
                ));
            }
        }
    };
    let shared = Arc::new(Pending::open());
    let reader = tokio::spawn(read(resp, buffer, Arc::clone(&shared), max_bytes));
    Ok(Stream {
        post_url,
        shared,
        reader,
    })
}

/// The entry point of the stream's `endpoint` parser: for an `endpoint`
/// event of the stream at `base`, where messages are POSTed (on the
/// stream's own origin, else refused); None for any other event.
pub fn endpoint(event: &[u8], base: &reqwest::Url) -> Option<Result<reqwest::Url, ClientError>> {
    endpoint_data(event).map(|data| same_origin(base, &data))
}

/// The data of an `endpoint` event.
fn endpoint_data(event: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(event).ok()?;
    let mut name = None;
    let mut data = Vec::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event:") {
            name = Some(n.trim());
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    (name == Some("endpoint")).then(|| data.join("\n").trim().to_string())
}

/// The endpoint, resolved against the stream's URL, on the same origin.
fn same_origin(base: &reqwest::Url, endpoint: &str) -> Result<reqwest::Url, ClientError> {
    let url = base.join(endpoint).map_err(|e| {
        ClientError::Invalid(format!("the upstream's `endpoint` is not a URL: {e}"))
    })?;
    if url.origin() != base.origin() {
        return Err(ClientError::Invalid(format!(
            "the upstream's `endpoint` {url} is not on the origin of its event stream"
        )));
    }
    Ok(url)
}

/// Reads the stream to its end, handing each response to its request.
async fn read(mut resp: reqwest::Response, mut buffer: Vec<u8>, shared: Arc<Pending>, max: usize) {
    let reason = 'read: loop {
        while let Some(end) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            if let Some(message) = event_message(&event)
                && let Err(e) = shared.deliver(message)
            {
                break 'read e;
            }
        }
        if buffer.len() > max {
            break too_large(max);
        }
        match resp.chunk().await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk),
            Ok(None) => break closed(),
            Err(e) => break transport(&e),
        }
    };
    tracing::info!(error = %reason, "upstream event stream closed");
    shared.close(&reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_event_is_read_and_kept_on_its_origin() {
        let event = b"event: endpoint\ndata: /message?sessionId=abc\n\n";
        assert_eq!(
            endpoint_data(event).as_deref(),
            Some("/message?sessionId=abc")
        );
        assert_eq!(endpoint_data(b"event: message\ndata: {}\n\n"), None);
        let base = reqwest::Url::parse("http://127.0.0.1:9/sse").unwrap();
        assert_eq!(
            same_origin(&base, "/messages/?session_id=1")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/messages/?session_id=1"
        );
        assert!(same_origin(&base, "http://elsewhere/messages/").is_err());
    }
}
