//! The MCP stdio transport as the client sees it: the gateway starts the
//! upstream as a child process and speaks newline-delimited JSON-RPC on
//! its stdin and stdout; what it writes on stderr is its log.
//!
//! One [`StdioServer`] per declared server and gateway instance: several
//! instances with the same config each run their own child.
//!
//! Decisions:
//! - **Environment.** The child gets only the declared `env` plus a
//!   minimal safe set taken from the gateway's own environment when set
//!   ([`INHERITED_ENV`]: `PATH`, `HOME`, `LANG`, `LC_ALL`, `TZ`, `TMPDIR`),
//!   never anything else of it (the admin token, the database URL, cloud
//!   credentials): a secret the server needs is declared in its `env`.
//! - **Process group.** The child leads a process group of its own and is
//!   stopped by killing the group (SIGKILL), so what it started (`npx`
//!   starts `node`) goes with it; its exit status is always collected.
//! - **Output.** Each stdout line is one JSON-RPC message. Responses are
//!   matched to their request by id; a list change (`notifications/{tools,resources,prompts}/list_changed`)
//!   is handed to the debounced refresh under the server's row id (other
//!   notifications are ignored); a request
//!   of the server is answered (`ping` with an empty result, anything else
//!   -32601: the gateway offers no client capabilities). A line longer
//!   than the answer bound, one that is not a JSON-RPC message, or a
//!   response whose id is missing or names no request sent (a late answer
//!   to a request given up excepted), means
//!   the stream can no longer be trusted: what waits fails -32203 and the
//!   child is killed and restarted like a crashed one.
//! - **Crashes.** A child that exits (or whose pipes break) fails what is
//!   in flight with -32202; nothing is resent (the server may have run
//!   it). It is started again on the next request once its backoff has
//!   passed: 0.5 s, doubling up to 30 s, back to 0.5 s after a child
//!   stayed up 30 s; until then requests fail at once with -32202.
//! - **stderr.** Logged line by line (`upstream_stderr`), each line cut at
//!   [`STDERR_LINE_BYTES`]; the last [`STDERR_TAIL`] lines are kept for
//!   the registry API; at most [`STDERR_LOG_BURST`] lines are logged per
//!   10 s (the rest counted), so a chatty server cannot flood the log.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
// tokio-util: bounded line framing of the child's output (already in the
// build through hyper/h2; its `LinesCodec` bounds a line's length).
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use super::client::response_result;
use super::wire::{ClientError, Pending, too_large};
use crate::mcp::protocol;

/// Variables of the gateway's environment a child inherits (when set).
pub const INHERITED_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// First delay before a crashed child is started again.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(500);

/// Longest delay between two starts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A child up this long resets the backoff.
pub const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Longest stderr line kept or logged, in bytes (longer ones are cut).
pub const STDERR_LINE_BYTES: usize = 1024;

/// stderr lines kept for the registry API.
pub const STDERR_TAIL: usize = 20;

/// stderr lines logged per 10 s window.
pub const STDERR_LOG_BURST: u32 = 50;

/// What to run (its `Debug` shows the names of `env`, never the values).
#[derive(Clone, PartialEq, Eq)]
pub struct Spawn {
    /// The program (looked up on the child's `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Declared environment (on top of [`INHERITED_ENV`]).
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for Spawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawn")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// One declared stdio server on this instance: its child (when running),
/// the restart schedule and what the registry API shows.
#[derive(Debug)]
pub struct StdioServer {
    slug: String,
    spawn: Spawn,
    max_bytes: usize,
    /// Never held across an await.
    state: SyncMutex<State>,
    /// Held while a child starts, so one starts at a time.
    starting: Mutex<()>,
    stderr: Arc<StderrTail>,
    /// Where a list change (`notifications/{tools,resources,prompts}/list_changed`) goes (the row id, and the
    /// runtime's queue of announcements).
    announce: std::sync::OnceLock<(String, tokio::sync::mpsc::Sender<String>)>,
}

/// The child and its restart schedule.
#[derive(Debug)]
struct State {
    link: Option<Arc<Link>>,
    /// No start before this instant (a crash or failed start is backing off).
    retry_at: Option<Instant>,
    /// The delay the next failure waits.
    next_backoff: Duration,
    /// Children started so far.
    starts: u64,
    last_error: Option<String>,
}

/// A running child: its stdin, the responses waited for on its stdout.
#[derive(Debug)]
struct Link {
    stdin: Arc<Mutex<ChildStdin>>,
    pending: Arc<Pending>,
    version: String,
    started: Instant,
    pid: Option<u32>,
    kill: Arc<Notify>,
    /// Set by the monitor once the child's exit status is collected.
    exited: tokio::sync::watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Link {
    /// Kills the process group of a child still running (the aborted
    /// monitor drops the child, whose `kill_on_drop` has the runtime reap
    /// it).
    fn drop(&mut self) {
        if !*self.exited.borrow() {
            kill_group(self.pid);
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Request ids of this process's stdio requests.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl StdioServer {
    /// A server not started yet (it starts on its first request).
    pub fn new(slug: &str, spawn: Spawn, max_bytes: usize) -> StdioServer {
        StdioServer {
            slug: slug.to_string(),
            spawn,
            max_bytes,
            state: SyncMutex::new(State {
                link: None,
                retry_at: None,
                next_backoff: BACKOFF_INITIAL,
                starts: 0,
                last_error: None,
            }),
            starting: Mutex::new(()),
            stderr: Arc::new(StderrTail::default()),
            announce: std::sync::OnceLock::new(),
        }
    }

    /// Hands each a list change (`notifications/{tools,resources,prompts}/list_changed`) of this server's
    /// children to `tx` as `id` (set once, when the runtime is built).
    pub fn announce_to(&self, id: &str, tx: tokio::sync::mpsc::Sender<String>) {
        let _ = self.announce.set((id.to_string(), tx));
    }

    /// What was declared.
    pub fn spawn_spec(&self) -> &Spawn {
        &self.spawn
    }

    /// Sends one request to the child (started first when it is not
    /// running) and returns its `result`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let (link, _) = self.link().await?;
        link.request(method, params).await
    }

    /// The protocol version the running child agreed to (starting it when
    /// it is not running).
    pub async fn version(&self) -> Result<String, ClientError> {
        Ok(self.link().await?.1)
    }

    /// The running child, started when there is none and no backoff is
    /// pending (one start at a time; the others wait for it).
    async fn link(&self) -> Result<(Arc<Link>, String), ClientError> {
        if let Some(live) = self.live()? {
            return Ok(live);
        }
        let _one_start = self.starting.lock().await;
        if let Some(live) = self.live()? {
            return Ok(live);
        }
        self.state().starts += 1;
        let started = self.start().await;
        let mut state = self.state();
        match started {
            Ok(link) => {
                let link = Arc::new(link);
                tracing::info!(upstream = %self.slug, pid = ?link.pid, version = %link.version, "stdio server started");
                state.link = Some(Arc::clone(&link));
                state.retry_at = None;
                let version = link.version.clone();
                Ok((link, version))
            }
            Err(e) => {
                tracing::warn!(upstream = %self.slug, error = %e, "stdio server did not start");
                state.back_off(e.to_string());
                Err(e)
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The running child if there is one; a child found dead schedules its
    /// restart; within a backoff, the reason it is down.
    fn live(&self) -> Result<Option<(Arc<Link>, String)>, ClientError> {
        let mut state = self.state();
        if let Some(link) = &state.link {
            if link.pending.is_open() {
                return Ok(Some((Arc::clone(link), link.version.clone())));
            }
            let up_for = link.started.elapsed();
            let reason = link.pending.reason().unwrap_or_else(exited);
            state.link = None;
            if up_for >= STABLE_AFTER {
                state.next_backoff = BACKOFF_INITIAL;
            }
            state.back_off(reason.to_string());
        }
        match state.retry_at {
            Some(at) if Instant::now() < at => Err(ClientError::Transport(format!(
                "the stdio server `{}` is down (restarting in {} ms): {}",
                self.slug,
                at.saturating_duration_since(Instant::now()).as_millis(),
                state.last_error.as_deref().unwrap_or("it exited")
            ))),
            _ => Ok(None),
        }
    }

    /// Starts the child and initializes it.
    async fn start(&self) -> Result<Link, ClientError> {
        let mut child = self.command().spawn().map_err(|e| {
            ClientError::Transport(format!(
                "cannot start the stdio server `{}` (`{}`): {e}",
                self.slug, self.spawn.command
            ))
        })?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_group(pid);
            return Err(ClientError::Transport(
                "the child's pipes are missing".into(),
            ));
        };
        let pending = Arc::new(Pending::open());
        let stdin = Arc::new(Mutex::new(stdin));
        let kill = Arc::new(Notify::new());
        let (exited_tx, exited) = tokio::sync::watch::channel(false);
        let out = FramedRead::new(stdout, LinesCodec::new_with_max_length(self.max_bytes));
        let mut tasks = vec![
            tokio::spawn(read_stdout(
                out,
                Arc::clone(&pending),
                Arc::clone(&stdin),
                Arc::clone(&kill),
                self.max_bytes,
            )),
            tokio::spawn(read_stderr(
                stderr,
                self.slug.clone(),
                Arc::clone(&self.stderr),
            )),
            tokio::spawn(monitor(
                child,
                Arc::clone(&pending),
                Arc::clone(&kill),
                exited_tx,
                self.slug.clone(),
            )),
        ];
        if let Some((id, tx)) = self.announce.get() {
            tasks.push(tokio::spawn(announce(
                Arc::clone(&pending),
                id.clone(),
                tx.clone(),
            )));
        }
        let mut link = Link {
            stdin,
            pending,
            version: String::new(),
            started: Instant::now(),
            pid,
            kill,
            exited,
            tasks,
        };
        link.version = link.initialize().await?;
        Ok(link)
    }

    /// The child's command: its own process group, piped stdio, only the
    /// safe environment and the declared one.
    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.spawn.command);
        cmd.args(&self.spawn.args)
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .filter_map(|k| std::env::var_os(k).map(|v| (k.to_string(), v))),
            )
            .envs(&self.spawn.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    /// Stops the child (gateway shutdown): kills its group and waits for
    /// its exit.
    pub async fn stop(&self) {
        let link = self.state().link.take();
        if let Some(link) = link {
            link.kill.notify_one();
            let mut exited = link.exited.clone();
            let reaped = exited.wait_for(|done| *done);
            if tokio::time::timeout(Duration::from_secs(5), reaped)
                .await
                .is_err()
            {
                tracing::warn!(upstream = %self.slug, "stdio server did not exit within 5 s");
            }
        }
    }

    /// What the registry API shows of this instance's child.
    pub fn status(&self) -> Value {
        let stderr = self.stderr.tail();
        let starting = self.starting.try_lock().is_err();
        let state = self.state();
        let (name, pid) = match &state.link {
            Some(l) if l.pending.is_open() => ("up", l.pid),
            _ if starting => ("starting", None),
            Some(_) => ("down", None),
            None if state.retry_at.is_some() => ("down", None),
            None => ("not-started", None),
        };
        let retry_in = state
            .retry_at
            .map(|at| at.saturating_duration_since(Instant::now()).as_millis());
        json!({
            "state": name,
            "pid": pid,
            "starts": state.starts,
            "lastError": state.last_error,
            "retryInMs": retry_in,
            "stderrTail": stderr,
        })
    }
}

impl State {
    /// Schedules the next start after the current backoff, and doubles it.
    fn back_off(&mut self, error: String) {
        self.retry_at = Some(Instant::now() + self.next_backoff);
        self.next_backoff = (self.next_backoff * 2).min(BACKOFF_MAX);
        self.last_error = Some(error);
    }
}

impl Link {
    /// `initialize` offering the newest version the gateway speaks, any it
    /// supports accepted; then `notifications/initialized`.
    async fn initialize(&self) -> Result<String, ClientError> {
        let params = json!({
            "protocolVersion": protocol::LATEST,
            "capabilities": {},
            "clientInfo": { "name": "cedargate", "version": env!("CARGO_PKG_VERSION") },
        });
        let result = self.request("initialize", params).await?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .filter(|v| protocol::SUPPORTED.contains(v))
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "the upstream offered protocol version {}, which the gateway does not speak",
                    result.get("protocolVersion").unwrap_or(&Value::Null)
                ))
            })?
            .to_string();
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        write_line(&self.stdin, &self.pending, &note).await?;
        Ok(version)
    }

    /// One request: waited for by id, then written.
    async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = Value::from(NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let waiter = self.pending.expect(&id).ok_or_else(exited)?;
        write_line(&self.stdin, &self.pending, &body).await?;
        response_result(waiter.answer().await?)
    }
}

fn exited() -> ClientError {
    ClientError::Transport("the stdio server exited".into())
}

/// Writes one message as one line; a broken pipe closes the link.
async fn write_line(
    stdin: &Mutex<ChildStdin>,
    pending: &Pending,
    message: &Value,
) -> Result<(), ClientError> {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    let mut stdin = stdin.lock().await;
    let written = async {
        stdin.write_all(&line).await?;
        stdin.flush().await
    }
    .await;
    written.map_err(|e| {
        let err = ClientError::Transport(format!("cannot write to the stdio server: {e}"));
        pending.close(&err);
        err
    })
}

/// Reads the child's stdout to its end: responses to their requests,
/// requests of the server answered, anything unusable ends the link.
async fn read_stdout(
    mut lines: FramedRead<tokio::process::ChildStdout, LinesCodec>,
    pending: Arc<Pending>,
    stdin: Arc<Mutex<ChildStdin>>,
    kill: Arc<Notify>,
    max: usize,
) {
    let reason = 'read: loop {
        let line = match lines.next().await {
            None => break exited(),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => break too_large(max),
            Some(Err(LinesCodecError::Io(e))) => {
                break ClientError::Transport(format!("cannot read the stdio server: {e}"));
            }
            Some(Ok(line)) => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            break ClientError::Invalid("the stdio server wrote a line that is not JSON".into());
        };
        let messages = match message {
            Value::Array(batch) => batch,
            one => vec![one],
        };
        for m in messages {
            if !m.is_object() {
                continue;
            }
            if let (Some(id), Some(method)) = (m.get("id"), m.get("method").and_then(Value::as_str))
            {
                let answer = answer_request(id, method);
                let _ = write_line(&stdin, &pending, &answer).await;
            } else if let Err(e) = pending.deliver(m) {
                break 'read e;
            }
        }
    };
    let unusable = matches!(reason, ClientError::Invalid(_));
    pending.close(&reason);
    if unusable {
        tracing::warn!(error = %reason, "stdio server output unusable; killing it");
        kill.notify_one();
    }
}

/// While the child's output is read, hands each of its
/// a list change (`notifications/{tools,resources,prompts}/list_changed`) to the refresh (a full queue already
/// holds a listing to come).
async fn announce(pending: Arc<Pending>, id: String, tx: tokio::sync::mpsc::Sender<String>) {
    while pending.next_list_changed().await {
        let _ = tx.try_send(id.clone());
    }
}

/// The answer to a request of the server.
fn answer_request(id: &Value, method: &str) -> Value {
    if method == "ping" {
        json!({ "jsonrpc": "2.0", "id": id, "result": {} })
    } else {
        json!({ "jsonrpc": "2.0", "id": id, "error": {
            "code": -32601, "message": format!("the gateway does not offer `{method}`") } })
    }
}

/// Owns the child: waits for its exit (or a kill order), collects its
/// status and fails what is in flight.
async fn monitor(
    mut child: Child,
    pending: Arc<Pending>,
    kill: Arc<Notify>,
    exited: tokio::sync::watch::Sender<bool>,
    slug: String,
) {
    let pid = child.id();
    let status = tokio::select! {
        status = child.wait() => status,
        () = kill.notified() => {
            kill_group(pid);
            child.wait().await
        }
    };
    // What the child started in its group goes with it.
    kill_group(pid);
    exited.send_replace(true);
    let text = match &status {
        Ok(s) => s.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(upstream = %slug, status = %text, "stdio server exited");
    pending.close(&ClientError::Transport(format!(
        "the stdio server `{slug}` exited ({text})"
    )));
}

/// Kills the child's process group (ignored when it is gone).
fn kill_group(pid: Option<u32>) {
    let pid = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The last stderr lines, and the log budget of the current window.
#[derive(Debug, Default)]
struct StderrTail {
    inner: SyncMutex<TailInner>,
}

#[derive(Debug, Default)]
struct TailInner {
    lines: VecDeque<String>,
    window: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl StderrTail {
    /// Keeps a line; whether it may be logged (and how many were not,
    /// when a window closes).
    fn push(&self, line: String) -> (bool, u64) {
        let mut t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if t.lines.len() == STDERR_TAIL {
            t.lines.pop_front();
        }
        t.lines.push_back(line);
        let mut dropped = 0;
        if t.window
            .is_none_or(|w| w.elapsed() >= Duration::from_secs(10))
        {
            t.window = Some(Instant::now());
            t.logged = 0;
            dropped = std::mem::take(&mut t.suppressed);
        }
        t.logged += 1;
        let log = t.logged <= STDERR_LOG_BURST;
        if !log {
            t.suppressed += 1;
        }
        (log, dropped)
    }

    fn tail(&self) -> Vec<String> {
        let t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        t.lines.iter().cloned().collect()
    }
}

/// Logs the child's stderr, line by line, within the bounds.
async fn read_stderr(stderr: tokio::process::ChildStderr, slug: String, tail: Arc<StderrTail>) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(STDERR_LINE_BYTES));
    while let Some(next) = lines.next().await {
        let line = match next {
            Ok(line) => line,
            // The codec skips the rest of that line.
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                format!("[a line longer than {STDERR_LINE_BYTES} bytes was left out]")
            }
            Err(LinesCodecError::Io(_)) => break,
        };
        let (log, dropped) = tail.push(line.clone());
        if dropped > 0 {
            tracing::warn!(target: "upstream_stderr", upstream = %slug, dropped, "stdio server stderr lines not logged");
        }
        if log {
            tracing::info!(target: "upstream_stderr", upstream = %slug, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_env_values() {
        let spawn = Spawn {
            command: "npx".into(),
            args: vec!["server".into()],
            env: [("API_TOKEN".to_string(), "s3cret-value".to_string())].into(),
        };
        let shown = format!("{spawn:?}");
        assert!(
            shown.contains("API_TOKEN") && !shown.contains("s3cret-value"),
            "{shown}"
        );
    }

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        let mut s = State {
            link: None,
            retry_at: None,
            next_backoff: BACKOFF_INITIAL,
            starts: 0,
            last_error: None,
        };
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(s.next_backoff.as_millis());
            s.back_off("x".into());
        }
        assert_eq!(
            seen,
            [
                500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000
            ]
        );
    }

    #[test]
    fn the_stderr_tail_and_log_budget_are_bounded() {
        let t = StderrTail::default();
        let logged = (0..100).filter(|i| t.push(format!("line {i}")).0).count();
        assert_eq!(logged, STDERR_LOG_BURST as usize);
        let tail = t.tail();
        assert_eq!(tail.len(), STDERR_TAIL);
        assert_eq!(tail.last().map(String::as_str), Some("line 99"));
    }
}
