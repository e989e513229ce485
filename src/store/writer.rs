//! The group-commit writer: one OS thread owns the write connection, takes
//! jobs from a bounded queue, and commits everything waiting in one
//! transaction (one fsync for many requests). A job's acknowledgement is
//! sent only after the transaction holding it committed, which is what lets
//! the MCP endpoint answer only after its decision record is durable.
//!
//! The decision chain (`seq`, `prev_hash`) is assigned here, in commit
//! order, so concurrent requests never race on it.
//!
//! Only a batch that someone waits on pays for a sync: a batch made of
//! enqueued jobs alone (records whose answer never promised durability)
//! commits without one (SQLite `synchronous = NORMAL`, PostgreSQL
//! `synchronous_commit = off`); the next durable commit's sync covers it,
//! so it becomes durable at the next `submit` or `flush`, which is exactly
//! what `enqueue` promises.
//!
//! The queue is bounded three ways: jobs (the channel), and the records
//! and bytes the queued jobs hold ([`budget`]): a job takes its weight in
//! permits before it enters the queue and gives them back once its
//! transaction is over, so a flood of large jobs (a batch of 64
//! `tools/list` is one job) waits instead of growing memory. A job heavier
//! than a bound passes alone.
//!
//! The chain head is read inside each transaction, after
//! [`Db::lock_chain`], so several processes (the CLI beside a server, or
//! several gateway instances on one PostgreSQL database) append to one
//! chain without gaps or forks. A connection that broke is dropped and
//! reopened for the next batch; a failed batch is never acknowledged.
//!
//! An archive (see [`super::retention`]) may prune old records and the
//! entity snapshots only they referenced, from any process. The writer
//! skips inserting snapshots it knows are stored; it reads the newest
//! anchor with the chain head, and forgets what it knew when the anchor
//! moved, so a pruned snapshot is stored again with the next record that
//! needs it.
//!
//! On SQLite the writer also keeps the WAL bounded: after a commit that
//! left the `-wal` file over `database.wal_max_bytes`, it checkpoints in
//! TRUNCATE mode ([`Db::checkpoint`]).
//!
//! **Commit delay** (PostgreSQL's `commit_delay` / `commit_siblings`): a
//! durable commit costs a sync and the write of every page it touched,
//! whatever the number of jobs it holds. Under concurrent load the jobs
//! reach the writer one or two at a time (each request thread is busy
//! until the moment it submits), so batches stayed small and every request
//! paid most of a sync and of the hot index pages. Requests that will
//! commit durably announce themselves ([`Writer::expect_commit`]); when at
//! least `commit_siblings` of them are in flight and some have not
//! submitted yet, the writer sleeps `commit_delay` once before committing
//! a durable batch, so the next few join it. A lone request (concurrency
//! 1, or fewer in flight than `commit_siblings`) never waits.
//!
//! **A requester commits itself when it is alone** (SQLite only): handing
//! a job to the writer thread and its acknowledgement back costs two
//! thread wake-ups, tens of µs each on a small VM: at concurrency 1 three
//! of a durable call's eight context switches. So [`Writer::submit`] runs
//! the commit on the calling thread when nothing is queued or committing
//! (the connection's lock is free, taken with `try_lock`, never waited
//! for) and no other tool call is in flight ([`Writer::call_started`],
//! counted from a call's start, a remote tool's too). Otherwise it queues
//! as before, so group commit is unchanged whenever two calls overlap:
//! committing each on its own thread under load measured 7% more CPU per
//! proxied call at concurrency 16 (a sync per call instead of per batch).
//! Order holds: a job queued earlier is counted in `queued` until its
//! batch committed, which keeps every later request on the queue. The
//! caller's thread blocks for one commit (a sync, a few hundred µs), like
//! a read on a requesting worker (`read_here.rs`), or a few ms when SQLite
//! checkpoints itself (every thousand WAL pages). What could block it
//! longer goes to the writer thread: a write lock held by another process
//! (the CLI pruning the trail; the caller tries to begin without waiting
//! and queues when it cannot), and the checkpoint that bounds the WAL
//! (which may wait up to a second for readers), nudged with an empty job.
//! PostgreSQL's client may not block an async worker, so there every job
//! goes through the queue.
//!
//! **Observations wait for the text index** (SQLite, migration 15): a
//! commit stores an observation without adding it to the FTS5 index (a new
//! segment per transaction: four or five pages more to write and sync on
//! the answer's path). The waiting observations are indexed together, in
//! one transaction without a sync of its own, when a recall needs them
//! ([`Writer::text_indexed`]: on the recall's thread when the connection
//! is free and no other call is in flight, as a lone commit is, else by
//! the writer thread while the recall waits), or by the writer thread once
//! [`INDEX_TEXT_AT`] wait. So an agent finds what it remembered the moment
//! it was answered, and a run of remembers writes the index's pages once
//! per run instead of once per call. Indexing after every commit instead
//! (a second transaction per call) cost more than it saved: a remember at
//! concurrency 1 went from 415 to 500 µs p50.

pub mod budget;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use budget::{Budget, Held, QueueLevels, Weight};

use super::db::{Conn, Db, Value};
use super::decisions::{self, NewDecision};
use super::observations::NewObservation;
use super::{Backend, StoreError};
use crate::params;

/// What a requester waiting for its job learns: the chain position of the
/// job's first decision record (if it held one), or the batch's failure.
type Acked = Result<Option<i64>, Arc<StoreError>>;

/// One durable write.
#[derive(Debug)]
pub enum WriteOp {
    /// Append a decision to the chained trail.
    Decision(Box<NewDecision>),
    /// Store an observation (agent memory).
    Observation(Box<NewObservation>),
    /// Write the knowledge graph (ingest or feedback).
    Graph(Box<super::graph::GraphWrite>),
    /// Record the policy bundle decisions will reference (idempotent).
    PolicySet {
        /// Bundle hash.
        hash: String,
        /// Schema file path.
        schema_path: String,
        /// Schema text.
        schema_text: String,
        /// JSON `[{path, text}]`.
        files: String,
        /// When it was loaded.
        loaded_at: String,
    },
    /// Record a shadow-mode divergence (not chained).
    ShadowDivergence(Box<super::shadow::Divergence>),
    /// One parameterized statement of a module's own tables (telemetry
    /// rows). Statements must not be able to fail on their data (no foreign
    /// keys, `ON CONFLICT DO NOTHING` on keys), because a failure rolls back the batch.
    Exec {
        /// The statement (a constant, so prepared statements are cached).
        sql: &'static str,
        /// Its parameters.
        params: Vec<Value>,
    },
    /// Remember the protocol version a session negotiated.
    SessionProtocol {
        /// Session id.
        session_id: String,
        /// Negotiated version.
        version: String,
    },
}

struct Job {
    ops: Vec<WriteOp>,
    /// Told the batch's outcome; a failure is shared by every job of the
    /// batch, hence the `Arc`.
    ack: Option<oneshot::Sender<Acked>>,
    /// The job's share of the queue's budget, given back when the job is
    /// dropped (after its transaction).
    _held: Held,
}

/// The queue's bounds.
#[derive(Debug, Clone, Copy)]
pub struct QueueBounds {
    /// Jobs queued at most (`limits.write_queue`).
    pub jobs: usize,
    /// Records the queued jobs hold at most (`limits.write_queue_records`).
    pub records: usize,
    /// Bytes the queued jobs hold at most (`limits.write_queue_bytes`).
    pub bytes: usize,
    /// Jobs per group commit at most (`limits.group_commit_max`).
    pub batch_max: usize,
    /// How long a durable batch waits for requests still on their way
    /// (`limits.commit_delay_us`; zero: never).
    pub commit_delay: Duration,
    /// Requests that must be in flight before a batch waits for them
    /// (`limits.commit_siblings`).
    pub commit_siblings: usize,
    /// Whether a requester may commit on its own thread (SQLite: the
    /// module doc's "commits itself when it is alone").
    pub commit_here: bool,
}

impl Default for QueueBounds {
    fn default() -> Self {
        QueueBounds {
            jobs: 16 * 1024,
            records: 32 * 1024,
            bytes: 32 * 1024 * 1024,
            batch_max: 1024,
            commit_delay: Duration::from_micros(150),
            commit_siblings: 4,
            commit_here: false,
        }
    }
}

/// Opens the writer's connection.
pub type Connector = Box<dyn FnMut() -> Result<Box<Conn>, StoreError> + Send>;

/// Handle to the writer thread; cheap to clone.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    budget: Arc<Budget>,
    /// Requests that announced a durable commit and have not finished.
    expected: Arc<AtomicUsize>,
    shared: Arc<Shared>,
}

/// What the writer thread and a requester committing itself share.
struct Shared {
    /// The write connection; held for the whole of each commit.
    state: Mutex<State>,
    /// Jobs sent to the queue whose batch has not committed yet.
    queued: AtomicUsize,
    /// Commits a requester ran on its own thread, since start.
    here_commits: AtomicU64,
    /// Tool calls in flight ([`Writer::call_started`]).
    calls: Arc<AtomicUsize>,
    /// Whether a requester may commit itself.
    here: bool,
    /// Observations committed, and those in the full-text index.
    text: Arc<TextIndex>,
}

/// How far the full-text index is behind the observations (SQLite; on
/// PostgreSQL both stay zero): counts of observations since start.
#[derive(Debug)]
struct TextIndex {
    /// Observations committed (counted before their commit is answered).
    written: AtomicU64,
    /// Observations committed before the last indexing began.
    indexed: watch::Sender<u64>,
    /// A recall waits: the writer thread indexes after its next batch.
    wanted: AtomicBool,
}

impl TextIndex {
    /// Observations committed and not yet indexed (exact under the
    /// writer state's lock, which every commit and indexing holds).
    fn waiting(&self) -> u64 {
        let written = self.written.load(Ordering::Acquire);
        written.saturating_sub(*self.indexed.borrow())
    }
}

/// Observations that may wait for the text index before the writer thread
/// indexes them unasked: bounds what one indexing (or the recall that
/// asks for it) costs, about 20 µs of CPU per observation.
const INDEX_TEXT_AT: u64 = 64;

/// The longest a recall waits for the text index; past it (the indexing
/// failing, which the writer logs and retries after its next batch) the
/// search runs on what is indexed.
const TEXT_INDEX_WAIT: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("queued", &self.queued)
            .field("here", &self.here)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Nothing queued or committing, and no tool call in flight but the
    /// caller's: when a requester may use the write connection itself.
    fn alone(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0 && self.calls.load(Ordering::Relaxed) <= 1
    }
}

/// The write connection, how to open it again, and the snapshots it is
/// known to hold.
struct State {
    conn: Option<Box<Conn>>,
    connect: Connector,
    known: Known,
    /// Records waiting in SQLite's `decisions_recent` (`None`: not known
    /// yet on this connection; counted when next needed).
    recent: Option<u64>,
    /// Observations committed and indexed (SQLite; rows a crash left
    /// waiting are indexed when the store opens).
    text: Arc<TextIndex>,
}

/// A counted request: one that will commit durably soon
/// ([`Writer::expect_commit`]), or a tool call in flight
/// ([`Writer::call_started`]); it stops counting when dropped.
#[derive(Debug)]
pub struct Expected(Arc<AtomicUsize>);

impl Drop for Expected {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a transaction of the writer's own (indexing, moving records)
/// waits for a write lock another process holds.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// The writer thread: as long as the connection's busy timeout.
    ForLock,
    /// A requester's thread: never (the writer thread is asked instead).
    Never,
}

/// When a durable batch waits for more jobs, and for how long.
#[derive(Debug, Clone, Copy)]
struct Delay {
    wait: Duration,
    siblings: usize,
}

/// The longest commit delay honoured, whatever the configuration says: a
/// delay is meant to be a fraction of a sync, and a large one would only
/// hold every concurrent call back.
const MAX_COMMIT_DELAY: Duration = Duration::from_millis(10);

impl Delay {
    fn new(wait: Duration, siblings: usize) -> Delay {
        Delay {
            wait: wait.min(MAX_COMMIT_DELAY),
            siblings,
        }
    }

    /// Whether a durable batch of `batched` jobs waits, with `expected`
    /// requests announced: only with enough of them in flight, and only
    /// for requests that have not submitted yet.
    fn waits(&self, expected: usize, batched: usize) -> bool {
        !self.wait.is_zero() && expected >= self.siblings.max(2) && expected > batched
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("ops", &self.ops.len()).finish()
    }
}

impl Writer {
    /// Starts the writer thread. `initial` is the first connection (if
    /// already open); `connect` opens one whenever there is none (at first
    /// use, or after the database dropped the last one).
    pub fn start(
        connect: Connector,
        initial: Option<Box<Conn>>,
        bounds: QueueBounds,
    ) -> Result<Writer, StoreError> {
        let (tx, rx) = mpsc::channel(bounds.jobs.max(1));
        let batch_max = bounds.batch_max.max(1);
        let expected = Arc::new(AtomicUsize::new(0));
        let queue = Queue {
            rx,
            batch_max,
            expected: Arc::clone(&expected),
            delay: Delay::new(bounds.commit_delay, bounds.commit_siblings),
        };
        let text = Arc::new(TextIndex {
            written: AtomicU64::new(0),
            indexed: watch::Sender::new(0),
            wanted: AtomicBool::new(false),
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                conn: initial,
                connect,
                known: Known::default(),
                recent: None,
                text: Arc::clone(&text),
            }),
            queued: AtomicUsize::new(0),
            here_commits: AtomicU64::new(0),
            calls: Arc::new(AtomicUsize::new(0)),
            here: bounds.commit_here,
            text,
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("cedargate-writer".into())
            .spawn(move || run(&thread_shared, queue))
            .map_err(|e| StoreError::Write(format!("cannot start writer thread: {e}")))?;
        Ok(Writer {
            tx,
            budget: Budget::new(bounds.records, bounds.bytes),
            expected,
            shared,
        })
    }

    /// Announces a request that will [`Writer::submit`] soon (a tool
    /// call): while enough such requests are in flight, a durable batch
    /// waits briefly for them (see the module doc). Hold the guard until
    /// the request's commit returned.
    pub fn expect_commit(&self) -> Expected {
        self.expected.fetch_add(1, Ordering::Relaxed);
        Expected(Arc::clone(&self.expected))
    }

    /// Waits until every observation committed before this call is in the
    /// full-text index (at most [`TEXT_INDEX_WAIT`]): what a recall does
    /// before searching. Returns at once on PostgreSQL, and on SQLite
    /// whenever the writer has caught up.
    pub async fn text_indexed(&self) {
        let shared = &*self.shared;
        let text = &shared.text;
        let target = text.written.load(Ordering::Acquire);
        if *text.indexed.borrow() >= target {
            return;
        }
        // Alone, index on this thread (as a lone commit does).
        if shared.here
            && shared.alone()
            && let Ok(mut state) = shared.state.try_lock()
        {
            state.index_text(Wait::Never);
        }
        if *text.indexed.borrow() >= target {
            return;
        }
        text.wanted.store(true, Ordering::Release);
        let mut indexed = text.indexed.subscribe();
        if *indexed.borrow() < target {
            self.try_enqueue(Vec::new());
        }
        let caught_up = indexed.wait_for(|n| *n >= target);
        if tokio::time::timeout(TEXT_INDEX_WAIT, caught_up)
            .await
            .is_err()
        {
            tracing::warn!(
                "recall searched before the text index caught up with the newest observations"
            );
        }
    }

    /// Commits requesters ran on their own thread since start.
    pub fn commits_here(&self) -> u64 {
        self.shared.here_commits.load(Ordering::Relaxed)
    }

    /// What the queue holds now and held at most (the `/metrics` gauges).
    pub fn levels(&self) -> QueueLevels {
        self.budget.levels()
    }

    /// A job for `ops`, once the queue's budget has room for it.
    async fn job(
        &self,
        ops: Vec<WriteOp>,
        ack: Option<oneshot::Sender<Acked>>,
    ) -> Result<Job, StoreError> {
        let held = self
            .budget
            .acquire(weigh(&ops))
            .await
            .map_err(|_| stopped())?;
        Ok(Job {
            ops,
            ack,
            _held: held,
        })
    }

    /// Writes `ops` and waits until they are durably committed: on this
    /// thread when the requester is alone (module doc), else through the
    /// queue.
    pub async fn submit(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        self.submit_chained(ops).await.map(drop)
    }

    /// [`Writer::submit`], returning the chain position (`seq`) of the
    /// first decision record of `ops`, if it holds any: the others follow
    /// it without gaps, in the order of `ops`.
    pub async fn submit_chained(&self, ops: Vec<WriteOp>) -> Result<Option<i64>, StoreError> {
        let ops = match self.commit_here(ops) {
            Ok(committed) => return committed,
            Err(ops) => ops,
        };
        let (ack, done) = oneshot::channel();
        let job = self.job(ops, Some(ack)).await?;
        self.send(job).await?;
        acknowledged(done.await)
    }

    /// Counts a tool call in flight until the guard is dropped: while
    /// another one is, a requester's commit goes through the queue.
    pub fn call_started(&self) -> Expected {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        Expected(Arc::clone(&self.shared.calls))
    }

    /// Commits `ops` durably on the calling thread if nothing is queued or
    /// committing and no other tool call is in flight; gives `ops` back
    /// otherwise.
    fn commit_here(
        &self,
        ops: Vec<WriteOp>,
    ) -> Result<Result<Option<i64>, StoreError>, Vec<WriteOp>> {
        let shared = &*self.shared;
        let alone = || shared.alone();
        if !shared.here || !alone() {
            return Err(ops);
        }
        let Ok(mut state) = shared.state.try_lock() else {
            return Err(ops);
        };
        // A job queued meanwhile may be waiting for this lock: it goes first.
        if !alone() {
            return Err(ops);
        }
        // Another process holding the database's write lock (the CLI
        // pruning the trail) is waited for on the writer thread, never here.
        let Some(committed) = state.commit_now(&ops) else {
            return Err(ops);
        };
        shared.here_commits.fetch_add(1, Ordering::Relaxed);
        let unbounded = state.conn.as_deref_mut().is_some_and(Db::wal_over_bound);
        let later = state.move_due() || state.text.waiting() >= INDEX_TEXT_AT;
        drop(state);
        if unbounded || later {
            // The writer thread checkpoints on this empty job, indexes the
            // observations and moves the trail's recent records.
            self.try_enqueue(Vec::new());
        }
        Ok(committed.map(|firsts| firsts.first().copied().flatten()))
    }

    /// Queues `ops` without waiting for the commit (waits only for queue
    /// space). A later [`Writer::submit`] or [`Writer::flush`] returning Ok
    /// implies these committed too: jobs commit in queue order.
    pub async fn enqueue(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let job = self.job(ops, None).await?;
        self.send(job).await
    }

    /// Sends a job to the writer thread, counted in `queued` from before
    /// it enters the queue until its batch committed.
    async fn send(&self, job: Job) -> Result<(), StoreError> {
        self.entering_queue();
        self.tx.send(job).await.map_err(|_| self.not_queued())
    }

    /// Counts a job about to enter the queue in `queued` (the writer thread
    /// uncounts it once its batch committed).
    fn entering_queue(&self) {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// Uncounts a job the queue did not take; the error to report.
    fn not_queued(&self) -> StoreError {
        self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        stopped()
    }

    /// Queues `ops` only if there is room now, in jobs, records and bytes
    /// (for observers on the decision path, which must never wait);
    /// `false` when the queue is full.
    pub fn try_enqueue(&self, ops: Vec<WriteOp>) -> bool {
        let Some(held) = self.budget.try_acquire(weigh(&ops)) else {
            return false;
        };
        self.entering_queue();
        self.tx
            .try_send(Job {
                ops,
                ack: None,
                _held: held,
            })
            .map_err(|_| self.not_queued())
            .is_ok()
    }

    /// Blocking variant of [`Writer::submit`] for synchronous callers
    /// (CLI, outside the runtime).
    pub fn submit_blocking(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        // Callers outside the runtime (the CLI) wait for permits on their thread.
        let job = futures_executor::block_on(self.job(ops, Some(ack)))?;
        self.entering_queue();
        self.tx.blocking_send(job).map_err(|_| self.not_queued())?;
        acknowledged(done.blocking_recv()).map(drop)
    }

    /// Waits until everything queued so far is committed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.submit(Vec::new()).await
    }
}

fn stopped() -> StoreError {
    StoreError::Write("writer is stopped".into())
}

fn acknowledged(
    outcome: Result<Acked, oneshot::error::RecvError>,
) -> Result<Option<i64>, StoreError> {
    match outcome {
        Ok(Ok(first)) => Ok(first),
        Ok(Err(e)) => Err(StoreError::Write(e.to_string())),
        Err(_) => Err(StoreError::Write("writer stopped before commit".into())),
    }
}

/// What `ops` weigh in the queue's budget.
fn weigh(ops: &[WriteOp]) -> Weight {
    ops.iter().fold(Weight::default(), |w, op| Weight {
        records: w.records + op.records(),
        bytes: w.bytes + op.bytes(),
    })
}

/// Heap text lengths, summed.
fn text<const N: usize>(parts: [&str; N]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or_default()
}

fn size_of<T>() -> u64 {
    std::mem::size_of::<T>() as u64
}

impl WriteOp {
    /// Rows this write inserts or changes (a graph write: its nodes,
    /// edges and consumed observations).
    fn records(&self) -> u64 {
        match self {
            WriteOp::Graph(g) => match &**g {
                super::graph::GraphWrite::Ingest {
                    nodes,
                    edges,
                    observations,
                    ..
                } => (nodes.len() + edges.len() + observations.len()).max(1) as u64,
                super::graph::GraphWrite::Feedback {
                    nodes,
                    edges,
                    node_embeddings,
                    edge_embeddings,
                    ..
                } => (nodes.len() + edges.len() + node_embeddings.len() + edge_embeddings.len())
                    .max(1) as u64,
            },
            _ => 1,
        }
    }

    /// The bytes this write holds while queued: its own size and its text
    /// (an estimate; a decision's entity slice is not counted, since every
    /// decision of a session view shares one copy of it).
    fn bytes(&self) -> u64 {
        size_of::<WriteOp>()
            + match self {
                WriteOp::Decision(d) => size_of::<NewDecision>() + decision_text(d),
                WriteOp::Observation(o) => {
                    size_of::<NewObservation>()
                        + text([&o.id, &o.org_id, &o.project_id, &o.session_id, &o.agent_id])
                        + text([&o.content, opt(&o.obs_type), &o.created_at])
                }
                WriteOp::Graph(g) => super::graph::queued_bytes(g),
                WriteOp::PolicySet {
                    hash,
                    schema_path,
                    schema_text,
                    files,
                    loaded_at,
                } => text([hash, schema_path, schema_text, files, loaded_at]),
                WriteOp::ShadowDivergence(d) => {
                    size_of::<super::shadow::Divergence>() + divergence_text(d)
                }
                WriteOp::Exec { params, .. } => params
                    .iter()
                    .map(|p| {
                        size_of::<Value>()
                            + match p {
                                Value::Text(t) => t.len() as u64,
                                Value::Blob(b) => b.len() as u64,
                                _ => 0,
                            }
                    })
                    .sum(),
                WriteOp::SessionProtocol {
                    session_id,
                    version,
                } => text([session_id, version]),
            }
    }
}

fn decision_text(d: &NewDecision) -> u64 {
    text([
        &d.id,
        &d.time,
        opt(&d.org_id),
        opt(&d.session_id),
        &d.principal,
    ]) + text([
        &d.action,
        &d.resource,
        &d.context,
        &d.entities_hash,
        &d.policy_hash,
    ]) + text([&d.decision, &d.reasons, &d.errors, &d.outcome, &d.notes])
}

fn divergence_text(d: &super::shadow::Divergence) -> u64 {
    let list = |v: &[String]| v.iter().map(|s| s.len() as u64 + 24).sum::<u64>();
    text([
        &d.decision_id,
        &d.time,
        &d.action,
        &d.principal,
        &d.resource,
    ]) + text([
        &d.live_hash,
        &d.live_decision,
        &d.candidate_dir,
        &d.candidate_hash,
    ]) + text([&d.candidate_decision])
        + list(&d.live_reasons)
        + list(&d.live_errors)
        + list(&d.candidate_reasons)
        + list(&d.candidate_errors)
}

/// Records the trail's recent table (SQLite) collects before the writer
/// moves them into the indexed table: each move writes the indexes' pages
/// once for this many records, where each durable commit used to write a
/// leaf of every index; a bigger batch holds the next request longer.
const MOVE_RECENT_AT: u64 = 256;

/// Entity snapshot hashes known to be committed; most decisions reuse a
/// session's slice, so this skips re-inserting the same text. Bounded by
/// clearing (a miss only costs an idempotent insert).
const KNOWN_SNAPSHOTS_MAX: usize = 4096;

/// The writer thread's end of the queue.
struct Queue {
    rx: mpsc::Receiver<Job>,
    batch_max: usize,
    expected: Arc<AtomicUsize>,
    delay: Delay,
}

impl Queue {
    /// The next batch: the first job (waiting for it), everything queued
    /// behind it, and, for a durable batch while other announced requests
    /// are still on their way, what arrives within the commit delay.
    /// `None` once every sender is gone.
    fn next_batch(&mut self, batch: &mut Vec<Job>) -> Option<()> {
        batch.push(self.rx.blocking_recv()?);
        self.drain(batch);
        let durable = batch.iter().filter(|job| job.ack.is_some()).count();
        if durable > 0
            && self
                .delay
                .waits(self.expected.load(Ordering::Relaxed), durable)
        {
            std::thread::sleep(self.delay.wait);
            self.drain(batch);
        }
        Some(())
    }

    fn drain(&mut self, batch: &mut Vec<Job>) {
        while batch.len() < self.batch_max {
            match self.rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
    }
}

fn run(shared: &Shared, mut queue: Queue) {
    let mut batch: Vec<Job> = Vec::with_capacity(queue.batch_max);
    while queue.next_batch(&mut batch).is_some() {
        let durable = batch.iter().any(|job| job.ack.is_some());
        let ops: Vec<&[WriteOp]> = batch.iter().map(|job| job.ops.as_slice()).collect();
        let outcome = shared.lock().commit(&ops, durable).map_err(|e| {
            tracing::error!(error = %e, jobs = batch.len(), "durable write failed; batch rolled back");
            Arc::new(e)
        });
        drop(ops);
        shared.queued.fetch_sub(batch.len(), Ordering::AcqRel);
        for (at, job) in batch.drain(..).enumerate() {
            if let Some(ack) = job.ack {
                // The requester may have gone away; the write stands.
                let first = outcome
                    .as_ref()
                    .map(|firsts| firsts.get(at).copied().flatten());
                let _ = ack.send(first.map_err(Arc::clone));
            }
        }
        // After the answers: no request waits on work it does not need.
        let mut state = shared.lock();
        state.index_text_if_due();
        state.move_recent_if_due();
    }
}

impl State {
    /// Commits `ops` (each job's ops in order) in one transaction, opening
    /// a connection first if there is none, then checkpoints a WAL past its
    /// bound (the writer thread's job). A failed commit is rolled back and
    /// leaves what is known as it was.
    fn commit(
        &mut self,
        ops: &[&[WriteOp]],
        durable: bool,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        if self.conn.is_none() {
            match (self.connect)() {
                Ok(c) => {
                    self.conn = Some(c);
                    self.recent = None;
                    // A data version is a connection's own count.
                    self.known.head = None;
                }
                Err(e) => tracing::warn!(error = %e, "writer cannot reach the database"),
            }
        }
        let Some(conn) = self.conn.as_deref_mut() else {
            return Err(StoreError::Unavailable("no database connection".into()));
        };
        if !durable && ops.iter().all(|ops| ops.is_empty()) {
            // A nudge to checkpoint or index: every earlier job is
            // committed already, and nobody waits for a sync.
            conn.bound_wal();
            return Ok(Vec::new());
        }
        let written = conn
            .begin(durable)
            .and_then(|()| write(conn, ops, &self.known));
        if written.is_ok() {
            conn.bound_wal();
        }
        self.settle(written)
    }

    /// Commits `ops` durably if the connection is open and the database's
    /// write lock free now; `None` (nothing written) otherwise.
    fn commit_now(&mut self, ops: &[WriteOp]) -> Option<Result<Vec<Option<i64>>, StoreError>> {
        let conn = self.conn.as_deref_mut()?;
        let written = match conn.begin_now(true) {
            Ok(false) => return None,
            Ok(true) => write(conn, &[ops], &self.known),
            Err(e) => Err(e),
        };
        Some(self.settle(written))
    }

    /// Whether enough records wait in the trail's recent table to move them
    /// (SQLite only; PostgreSQL has one table).
    fn move_due(&mut self) -> bool {
        let Some(conn) = self.conn.as_deref_mut() else {
            return false;
        };
        if conn.backend() != Backend::Sqlite {
            return false;
        }
        let recent = match self.recent {
            Some(n) => n,
            None => match decisions::recent_count(conn) {
                Ok(n) => *self.recent.insert(n),
                Err(_) => return false,
            },
        };
        recent >= MOVE_RECENT_AT
    }

    /// Moves the trail's recent records into the indexed table once
    /// [`MOVE_RECENT_AT`] wait, in a transaction that needs no sync of its
    /// own: the records are durable already, and a crash before the next
    /// sync only leaves them recent (the move is one transaction).
    fn move_recent_if_due(&mut self) {
        if !self.move_due() {
            return;
        }
        match self.unsynced(Wait::ForLock, decisions::move_recent) {
            Ok(true) => self.recent = Some(0),
            Ok(false) => {}
            Err(e) => {
                self.recent = None;
                tracing::warn!(error = %e, "moving the trail's recent records failed; they stay readable where they are");
            }
        }
    }

    /// Indexes the waiting observations once [`INDEX_TEXT_AT`] wait or a
    /// recall asked for them.
    fn index_text_if_due(&mut self) {
        let wanted = self.text.wanted.swap(false, Ordering::AcqRel);
        if wanted || self.text.waiting() >= INDEX_TEXT_AT {
            self.index_text(Wait::ForLock);
        }
    }

    /// Adds the observations waiting for the full-text index to it, in a
    /// transaction that needs no sync of its own (the rows are durable
    /// already; a crash leaves them waiting, and opening the store indexes
    /// them). A failure is logged and retried when next asked. On a
    /// requester's thread (`Wait::Never`) a write lock another process
    /// holds is not waited for, as a lone commit does not wait: the writer
    /// thread indexes instead.
    fn index_text(&mut self, wait: Wait) {
        if self.text.waiting() == 0 {
            return;
        }
        // Under the state's lock every counted observation is committed.
        let target = self.text.written.load(Ordering::Acquire);
        let index = |conn: &mut Conn| super::observations::index_waiting(conn).map(drop);
        match self.unsynced(wait, index) {
            Ok(true) => {
                self.text.indexed.send_if_modified(|n| {
                    let behind = *n < target;
                    *n = (*n).max(target);
                    behind
                });
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "indexing new observations failed; they are stored and wait for the next try");
            }
        }
    }

    /// Runs `work` in a transaction that needs no sync of its own (its
    /// inputs are durable already), then bounds the WAL. `Ok(false)`: not
    /// run (no connection, or `Wait::Never` and another process holds the
    /// write lock). A failure is rolled back, and a broken connection
    /// dropped.
    fn unsynced(
        &mut self,
        wait: Wait,
        work: impl FnOnce(&mut Conn) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let Some(conn) = self.conn.as_deref_mut() else {
            return Ok(false);
        };
        let begun = match wait {
            Wait::Never => conn.begin_now(false),
            Wait::ForLock => conn.begin(false).map(|()| true),
        };
        let done = begun.and_then(|begun| {
            if begun {
                work(conn)?;
                conn.commit()?;
            }
            Ok(begun)
        });
        match &done {
            Ok(true) => conn.bound_wal(),
            Ok(false) => {}
            Err(_) => {
                conn.rollback();
                if conn.is_broken() {
                    self.conn = None;
                }
            }
        }
        done
    }

    /// After a commit: learns the snapshots it stored, or rolls a failure
    /// back (dropping a broken connection; the snapshots a failed batch
    /// meant to insert are gone with it).
    fn settle(
        &mut self,
        written: Result<Committed, StoreError>,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        match written {
            Ok(mut committed) => {
                let firsts = std::mem::take(&mut committed.firsts);
                self.recent = self.recent.map(|n| n.saturating_add(committed.decisions));
                let sqlite = self
                    .conn
                    .as_deref()
                    .is_some_and(|c| c.backend() == Backend::Sqlite);
                if committed.observations > 0 && sqlite {
                    let text = &self.text.written;
                    text.fetch_add(committed.observations, Ordering::AcqRel);
                }
                self.known.learn(committed);
                Ok(firsts)
            }
            Err(e) => {
                self.known.head = None;
                if let Some(conn) = self.conn.as_deref_mut() {
                    conn.rollback();
                    if conn.is_broken() {
                        self.conn = None;
                    }
                }
                Err(e)
            }
        }
    }
}

/// Entity snapshots known to be stored, valid while the newest anchor
/// stays where it was when they were learnt; and the chain's head as this
/// connection's last chained commit left it.
#[derive(Default)]
struct Known {
    hashes: std::collections::HashSet<String>,
    anchor: i64,
    head: Option<KnownHead>,
}

/// The chain's head after this connection's last chained commit, and the
/// database's data version then (SQLite, [`Db::data_version`]). While the
/// version reads the same, no other connection committed since, so the
/// head is still the chain's: a batch appends after it without reading
/// the trail's newest row and the newest anchor (two queries on every
/// commit's path). Another process appending or pruning changes the
/// version, and the head is read again. Only this connection's own
/// commits leave the version as it was, and all of them go through
/// [`write`] (which learns the new head) or move records without
/// changing the head.
struct KnownHead {
    version: i64,
    head: decisions::ChainHead,
}

/// What a committed batch teaches [`Known`] and the recent-records count.
struct Committed {
    snapshots: Vec<String>,
    /// The newest anchor the batch saw (`None`: it read no chain head).
    anchor: Option<i64>,
    /// The head it left, when the backend tells other writers apart.
    head: Option<KnownHead>,
    /// Decision records it appended.
    decisions: u64,
    /// Observations it stored.
    observations: u64,
    /// Per job, the `seq` of its first decision record.
    firsts: Vec<Option<i64>>,
}

impl Known {
    /// Whether `hash` is known stored, given the anchor a batch read.
    fn contains(&self, hash: &str, anchor: i64) -> bool {
        anchor == self.anchor && self.hashes.contains(hash)
    }

    fn learn(&mut self, c: Committed) {
        if let Some(anchor) = c.anchor.filter(|a| *a != self.anchor) {
            // An archive pruned snapshots: forget what was known before it.
            self.hashes.clear();
            self.anchor = anchor;
        }
        if self.hashes.len() + c.snapshots.len() > KNOWN_SNAPSHOTS_MAX {
            self.hashes.clear();
        }
        self.hashes.extend(c.snapshots);
        if c.head.is_some() {
            self.head = c.head;
        }
    }

    /// The chain's head for a batch that appends to it, in the transaction
    /// just begun (which holds the chain lock), and the database's data
    /// version it was read at: the known head while the version says
    /// nobody else committed, else read.
    fn chain_head(&self, tx: &mut Conn) -> Result<(Option<i64>, decisions::ChainHead), StoreError> {
        let version = tx.data_version()?;
        if let Some(known) = self.head.as_ref().filter(|k| Some(k.version) == version) {
            return Ok((version, known.head.clone()));
        }
        Ok((version, decisions::chain_head(tx)?))
    }
}

/// Writes a batch in the transaction just begun and commits it; returns
/// the snapshot hashes it inserted (known to be stored once this returns
/// Ok).
fn write(tx: &mut Conn, batch: &[&[WriteOp]], known: &Known) -> Result<Committed, StoreError> {
    let chained = batch
        .iter()
        .any(|ops| ops.iter().any(|op| matches!(op, WriteOp::Decision(_))));
    let (mut seq, mut hash, anchor, version) = if chained {
        tx.lock_chain()?;
        let (version, head) = known.chain_head(tx)?;
        (head.seq, head.hash, Some(head.anchor), version)
    } else {
        (0, String::new(), None, None)
    };
    let read_anchor = anchor.as_ref().map(|a| a.0);
    let anchor_seq = read_anchor.unwrap_or(known.anchor);
    let first_seq = seq;
    let mut observations = 0;
    let mut snapshots: Vec<String> = Vec::new();
    let mut firsts = Vec::with_capacity(batch.len());
    for ops in batch {
        let job_first = seq + 1;
        let mut chained_here = false;
        for op in *ops {
            match op {
                WriteOp::Decision(d) => {
                    if let Some(entities) = &d.entities
                        && !known.contains(&d.entities_hash, anchor_seq)
                        && !snapshots.contains(&d.entities_hash)
                    {
                        decisions::insert_snapshot(tx, &d.entities_hash, entities)?;
                        snapshots.push(d.entities_hash.clone());
                    }
                    seq += 1;
                    chained_here = true;
                    hash = decisions::insert(tx, seq, &hash, d)?;
                }
                WriteOp::Observation(o) => {
                    super::observations::insert(tx, o)?;
                    observations += 1;
                }
                WriteOp::ShadowDivergence(d) => super::shadow::insert(tx, d)?,
                WriteOp::Graph(g) => super::graph::apply(tx, g)?,
                WriteOp::PolicySet {
                    hash: h,
                    schema_path,
                    schema_text,
                    files,
                    loaded_at,
                } => {
                    tx.execute(
                        "INSERT INTO policy_sets (hash, schema_path, schema_text, files, loaded_at)
                         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                        params![h, schema_path, schema_text, files, loaded_at],
                    )?;
                }
                WriteOp::Exec { sql, params } => {
                    let bound: Vec<_> = params.iter().map(Value::as_param).collect();
                    tx.execute(sql, &bound)?;
                }
                WriteOp::SessionProtocol {
                    session_id,
                    version,
                } => {
                    tx.execute(
                        "UPDATE sessions SET protocol_version = ?2 WHERE id = ?1",
                        params![session_id, version],
                    )?;
                }
            }
        }
        firsts.push(chained_here.then_some(job_first));
    }
    tx.commit()?;
    let head = version.zip(anchor).map(|(version, anchor)| KnownHead {
        version,
        head: decisions::ChainHead { seq, hash, anchor },
    });
    Ok(Committed {
        snapshots,
        anchor: read_anchor,
        head,
        decisions: u64::try_from(seq - first_seq).unwrap_or(0),
        observations,
        firsts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delay(us: u64, siblings: usize) -> Delay {
        Delay::new(Duration::from_micros(us), siblings)
    }

    #[test]
    fn a_configured_delay_is_held_to_ten_milliseconds() {
        assert_eq!(delay(150, 4).wait, Duration::from_micros(150));
        assert_eq!(delay(10_000, 4).wait, MAX_COMMIT_DELAY);
        assert_eq!(delay(5_000_000, 4).wait, MAX_COMMIT_DELAY);
    }

    #[test]
    fn a_batch_waits_only_for_announced_requests_still_on_their_way() {
        let d = delay(150, 4);
        // Concurrency 1: the lone request's own job is in the batch.
        assert!(!d.waits(1, 1));
        // Fewer in flight than the siblings threshold: no wait.
        assert!(!d.waits(3, 1));
        // Enough in flight, some not submitted yet: wait once.
        assert!(d.waits(4, 1));
        assert!(d.waits(32, 2));
        // Everyone in flight already in the batch: nothing to wait for.
        assert!(!d.waits(8, 8));
        // A delay of zero turns it off; a threshold below 2 counts as 2.
        assert!(!delay(0, 4).waits(32, 1));
        assert!(!delay(150, 0).waits(1, 0));
        assert!(delay(150, 0).waits(2, 1));
    }

    #[test]
    fn an_announcement_counts_until_it_is_dropped() {
        let expected = Arc::new(AtomicUsize::new(0));
        let first = {
            expected.fetch_add(1, Ordering::Relaxed);
            Expected(Arc::clone(&expected))
        };
        let second = {
            expected.fetch_add(1, Ordering::Relaxed);
            Expected(Arc::clone(&expected))
        };
        assert_eq!(expected.load(Ordering::Relaxed), 2);
        drop(first);
        assert_eq!(expected.load(Ordering::Relaxed), 1);
        drop(second);
        assert_eq!(expected.load(Ordering::Relaxed), 0);
    }
}
