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

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use super::db::{Conn, Db, Value};
use super::decisions::{self, NewDecision};
use super::observations::NewObservation;
use crate::params;

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
    ack: Option<oneshot::Sender<Result<(), Arc<StoreError>>>>,
}

/// Opens the writer's connection.
pub type Connector = Box<dyn FnMut() -> Result<Box<Conn>, StoreError> + Send>;

/// Handle to the writer thread; cheap to clone.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
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
        capacity: usize,
        batch_max: usize,
    ) -> Result<Writer, StoreError> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        std::thread::Builder::new()
            .name("cedargate-writer".into())
            .spawn(move || run(connect, initial, rx, batch_max.max(1)))
            .map_err(|e| StoreError::Write(format!("cannot start writer thread: {e}")))?;
        Ok(Writer { tx })
    }

    /// Writes `ops` and waits until they are durably committed.
    pub async fn submit(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Job {
                ops,
                ack: Some(ack),
            })
            .await
            .map_err(|_| StoreError::Write("writer is stopped".into()))?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Write(e.to_string())),
            Err(_) => Err(StoreError::Write("writer stopped before commit".into())),
        }
    }

    /// Queues `ops` without waiting for the commit (waits only for queue
    /// space). A later [`Writer::submit`] or [`Writer::flush`] returning Ok
    /// implies these committed too: jobs commit in queue order.
    pub async fn enqueue(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        self.tx
            .send(Job { ops, ack: None })
            .await
            .map_err(|_| StoreError::Write("writer is stopped".into()))
    }

    /// Queues `ops` only if there is room now (for observers on the
    /// decision path, which must never wait); `false` when the queue is full.
    pub fn try_enqueue(&self, ops: Vec<WriteOp>) -> bool {
        self.tx.try_send(Job { ops, ack: None }).is_ok()
    }

    /// Blocking variant of [`Writer::submit`] for synchronous callers (CLI).
    pub fn submit_blocking(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .blocking_send(Job {
                ops,
                ack: Some(ack),
            })
            .map_err(|_| StoreError::Write("writer is stopped".into()))?;
        match done.blocking_recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Write(e.to_string())),
            Err(_) => Err(StoreError::Write("writer stopped before commit".into())),
        }
    }

    /// Waits until everything queued so far is committed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.submit(Vec::new()).await
    }
}

/// Entity snapshot hashes known to be committed; most decisions reuse a
/// session's slice, so this skips re-inserting the same text. Bounded by
/// clearing (a miss only costs an idempotent insert).
const KNOWN_SNAPSHOTS_MAX: usize = 4096;

fn run(
    mut connect: Connector,
    mut conn: Option<Box<Conn>>,
    mut rx: mpsc::Receiver<Job>,
    batch_max: usize,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(batch_max);
    let mut known = Known::default();
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let durable = batch.iter().any(|job| job.ack.is_some());
        if conn.is_none() {
            match connect() {
                Ok(c) => conn = Some(c),
                Err(e) => tracing::warn!(error = %e, "writer cannot reach the database"),
            }
        }
        let result = match conn.as_deref_mut() {
            Some(c) => {
                let r = commit(c, &batch, &known, durable);
                match &r {
                    Ok(_) => c.bound_wal(),
                    Err(_) => c.rollback(),
                }
                r
            }
            None => Err(StoreError::Unavailable("no database connection".into())),
        };
        let outcome = match result {
            Ok(committed) => {
                known.learn(committed);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = batch.len(), "durable write failed; batch rolled back");
                if conn.as_deref().is_some_and(Db::is_broken) {
                    conn = None;
                }
                // The snapshots this batch meant to insert are gone with it.
                Err(Arc::new(e))
            }
        };
        for job in batch.drain(..) {
            if let Some(ack) = job.ack {
                // The requester may have gone away; the write stands.
                let _ = ack.send(outcome.clone());
            }
        }
    }
}

/// Entity snapshots known to be stored, valid while the newest anchor
/// stays where it was when they were learnt.
#[derive(Default)]
struct Known {
    hashes: std::collections::HashSet<String>,
    anchor: i64,
}

/// What a committed batch teaches [`Known`].
struct Committed {
    snapshots: Vec<String>,
    /// The newest anchor the batch saw (`None`: it read no chain head).
    anchor: Option<i64>,
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
    }
}

/// Commits a batch in one transaction; returns the snapshot hashes it
/// inserted (known to be stored once this returns Ok).
fn commit(
    tx: &mut Conn,
    batch: &[Job],
    known: &Known,
    durable: bool,
) -> Result<Committed, StoreError> {
    tx.begin(durable)?;
    let chained = batch
        .iter()
        .any(|job| job.ops.iter().any(|op| matches!(op, WriteOp::Decision(_))));
    let (mut seq, mut hash, anchor) = if chained {
        tx.lock_chain()?;
        let head = decisions::chain_head(tx)?;
        (head.seq, head.hash, Some(head.anchor.0))
    } else {
        (0, String::new(), None)
    };
    let anchor_seq = anchor.unwrap_or(known.anchor);
    let mut snapshots: Vec<String> = Vec::new();
    for job in batch {
        for op in &job.ops {
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
                    hash = decisions::insert(tx, seq, &hash, d)?;
                }
                WriteOp::Observation(o) => super::observations::insert(tx, o)?,
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
    }
    tx.commit()?;
    Ok(Committed { snapshots, anchor })
}
