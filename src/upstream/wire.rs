//! What both upstream transports share: the failure classes and their
//! JSON-RPC codes, and the reading of `text/event-stream` events (a
//! Streamable HTTP answer stream and the legacy transport's long-lived
//! stream carry messages the same way), and the responses waited for on a
//! stream many requests share ([`Pending`]: the HTTP+SSE event stream, a
//! stdio child's output).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::oneshot;

/// Gateway-side failure codes, shared with the A2A bridge.
pub mod codes {
    /// The upstream did not answer within the budget.
    pub const TIMEOUT: i64 = -32201;
    /// The upstream could not be reached (or answered an HTTP error).
    pub const TRANSPORT: i64 = -32202;
    /// The upstream answered something that is not a usable MCP answer.
    pub const INVALID_RESPONSE: i64 = -32203;
}

/// Why a request to an upstream failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// No answer within the budget (-32201).
    #[error("the upstream did not answer within {0} ms")]
    Timeout(u64),
    /// Connection failure (-32202).
    #[error("{0}")]
    Transport(String),
    /// The upstream answered an HTTP error status (-32202).
    #[error("the upstream answered HTTP {0}")]
    Status(u16),
    /// Not a usable MCP answer (-32203).
    #[error("{0}")]
    Invalid(String),
    /// The upstream answered 404 to a request carrying its session id: the
    /// session expired (the caller initializes again).
    #[error("the upstream session expired")]
    Expired,
    /// The upstream answered a JSON-RPC error (passed on as it is).
    #[error("{message}")]
    Remote {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
        /// Its `data`, if any.
        data: Value,
    },
}

impl ClientError {
    /// The JSON-RPC code the caller gets.
    pub fn code(&self) -> i64 {
        match self {
            ClientError::Timeout(_) => codes::TIMEOUT,
            ClientError::Transport(_) | ClientError::Status(_) | ClientError::Expired => {
                codes::TRANSPORT
            }
            ClientError::Invalid(_) => codes::INVALID_RESPONSE,
            ClientError::Remote { code, .. } => *code,
        }
    }

    /// The failure class recorded with the call.
    pub fn class(&self) -> &'static str {
        match self {
            ClientError::Timeout(_) => "timeout",
            ClientError::Transport(_) | ClientError::Status(_) | ClientError::Expired => {
                "transport"
            }
            ClientError::Invalid(_) => "invalid-response",
            ClientError::Remote { .. } => UPSTREAM_ERROR,
        }
    }
}

/// The class of an upstream's own JSON-RPC error: whatever its code (even
/// one the gateway uses for its own decisions, -32003, -3220x, -32029), it
/// reaches the agent marked `error.data.source: "upstream"`.
pub const UPSTREAM_ERROR: &str = "upstream-error";

/// Whether `message` is a response (a message without `method`), which
/// must carry the id of the request it answers.
pub fn is_response(message: &Value) -> bool {
    message.is_object() && message.get("method").is_none()
}

/// `message` when it answers request `id`; a response with a missing,
/// null or other id is an invalid response (-32203): it answers nothing
/// the gateway asked, and taking it would give one request another's
/// answer.
pub fn answering(message: Value, id: &Value) -> Result<Value, ClientError> {
    match message.get("id") {
        Some(got) if got == id => Ok(message),
        got => Err(wrong_id(got)),
    }
}

/// The failure of a response that names no request the gateway waits for.
fn wrong_id(got: Option<&Value>) -> ClientError {
    match got {
        None | Some(Value::Null) => {
            ClientError::Invalid("the upstream's response carries no request id".into())
        }
        Some(other) => {
            let text = other.to_string();
            ClientError::Invalid(format!(
                "the upstream answered with the id {}, which names no request the gateway sent it",
                crate::tools::spec::echo(&text)
            ))
        }
    }
}

/// A connection failure, named by its innermost cause.
pub fn transport(e: &(dyn std::error::Error + 'static)) -> ClientError {
    let mut source = e;
    while let Some(next) = source.source() {
        source = next;
    }
    ClientError::Transport(format!("cannot reach the upstream: {source}"))
}

/// Whether an answer is an event stream (`text/event-stream`, with or
/// without parameters).
pub fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"))
}

pub fn too_large(max: usize) -> ClientError {
    ClientError::Invalid(format!("the upstream's answer is larger than {max} bytes"))
}

/// The end (after the blank line) of the first complete event in `buf`.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The JSON message in an event's `data:` lines, if it holds one.
pub fn event_message(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// Senders of the responses waited for, by request id (as JSON text).
type Waiting = HashMap<String, oneshot::Sender<Result<Value, ClientError>>>;

/// How many ids of requests given up (timed out, or answered in a POST's
/// body) a stream remembers, so their late answers are let pass.
const ABANDONED: usize = 1024;

/// Whether `message` is an upstream's announcement that one of its lists
/// changed: `notifications/tools/list_changed`, `resources/list_changed`
/// or `prompts/list_changed`. Each lists the tools again (a tool change is
/// what pins are about) and wakes the listen streams, which re-check the
/// resources and prompts they follow.
pub fn is_list_changed(message: &Value) -> bool {
    message.get("id").is_none()
        && matches!(
            message.get("method").and_then(Value::as_str),
            Some(
                "notifications/tools/list_changed"
                    | "notifications/resources/list_changed"
                    | "notifications/prompts/list_changed"
            )
        )
}

/// The requests waiting for their response on one shared stream, and
/// whether that stream is still read.
#[derive(Debug, Default)]
pub struct Pending {
    /// The waiting requests, or why the stream closed.
    waiting: Mutex<Option<Waiting>>,
    /// Ids of requests no longer waited for, oldest first.
    abandoned: Mutex<std::collections::VecDeque<String>>,
    reason: Mutex<Option<ClientError>>,
    /// Signalled by a list change ([`is_list_changed`]; and once more when
    /// the stream closes, so a waiter sees it closed and stops).
    list_changed: tokio::sync::Notify,
}

impl Pending {
    /// A stream being read.
    pub fn open() -> Pending {
        Pending {
            waiting: Mutex::new(Some(HashMap::new())),
            abandoned: Mutex::new(std::collections::VecDeque::new()),
            reason: Mutex::new(None),
            list_changed: tokio::sync::Notify::new(),
        }
    }

    fn waiting(&self) -> MutexGuard<'_, Option<Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the stream is still read.
    pub fn is_open(&self) -> bool {
        self.waiting().is_some()
    }

    /// Hands a response to the request waiting for it, and signals a
    /// list change ([`is_list_changed`]; other notifications and requests
    /// are ignored). A response whose id is missing, null, or names no
    /// request sent on this stream is an error: the stream can no longer be
    /// trusted to answer each request with its own response (the caller
    /// closes it). The late answer of a request given up is let pass.
    pub fn deliver(&self, message: Value) -> Result<(), ClientError> {
        if is_list_changed(&message) {
            self.list_changed.notify_one();
            return Ok(());
        }
        if !is_response(&message) {
            return Ok(());
        }
        let key = match message.get("id") {
            None | Some(Value::Null) => return Err(wrong_id(message.get("id"))),
            Some(id) => id.to_string(),
        };
        let tx = self.waiting().as_mut().and_then(|w| w.remove(&key));
        if let Some(tx) = tx {
            let _ = tx.send(Ok(message));
            return Ok(());
        }
        let mut abandoned = self.abandoned();
        match abandoned.iter().position(|k| *k == key) {
            Some(at) => {
                abandoned.remove(at);
                Ok(())
            }
            None => Err(wrong_id(message.get("id"))),
        }
    }

    fn abandoned(&self) -> MutexGuard<'_, std::collections::VecDeque<String>> {
        self.abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the stream closed and fails every waiting request with
    /// `reason` (once: a later close changes nothing).
    pub fn close(&self, reason: &ClientError) {
        let Some(waiting) = self.waiting().take() else {
            return;
        };
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        for (_, tx) in waiting {
            let _ = tx.send(Err(reason.clone()));
        }
        self.list_changed.notify_one();
    }

    /// Waits for the next list change ([`is_list_changed`]): true, or
    /// false once the stream is closed (no more will come).
    pub async fn next_list_changed(&self) -> bool {
        self.list_changed.notified().await;
        self.is_open()
    }

    /// Why the stream closed (None while it is open).
    pub fn reason(&self) -> Option<ClientError> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Registers a wait for the response to `id`, before the request is
    /// sent so a fast answer is not missed (None: the stream closed).
    pub fn expect(self: &Arc<Self>, id: &Value) -> Option<Waiter> {
        let (tx, rx) = oneshot::channel();
        let key = id.to_string();
        self.waiting().as_mut()?.insert(key.clone(), tx);
        Some(Waiter {
            pending: Arc::clone(self),
            key,
            rx: Some(rx),
        })
    }
}

/// A registered wait for one response.
#[derive(Debug)]
pub struct Waiter {
    pending: Arc<Pending>,
    key: String,
    rx: Option<oneshot::Receiver<Result<Value, ClientError>>>,
}

impl Waiter {
    /// The response, when the stream brings it, or why it never will.
    pub async fn answer(mut self) -> Result<Value, ClientError> {
        let closed =
            || ClientError::Transport("the upstream's stream closed before the answer".into());
        let Some(rx) = self.rx.take() else {
            return Err(closed());
        };
        rx.await.unwrap_or_else(|_| Err(closed()))
    }
}

impl Drop for Waiter {
    /// A request given up (timed out, or answered another way) stops being
    /// waited for.
    fn drop(&mut self) {
        let given_up = self
            .pending
            .waiting()
            .as_mut()
            .and_then(|w| w.remove(&self.key))
            .is_some();
        if given_up {
            let mut abandoned = self.pending.abandoned();
            if abandoned.len() == ABANDONED {
                abandoned.pop_front();
            }
            abandoned.push_back(self.key.clone());
        }
    }
}
