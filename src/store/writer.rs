//! The group-commit writer: one OS thread owns the write connection, takes
//! jobs from a bounded queue, and commits everything waiting in one
//! transaction (one fsync for many requests). A job's acknowledgement is
//! sent only after the transaction holding it committed, which is what lets
//! the MCP endpoint answer only after its decision record is durable.
//!
//! The decision chain (`seq`, `prev_hash`) is assigned here, in commit
//! order, so concurrent requests never race on it.
//!
//! Only a batch that someone waits on pays for an fsync: a batch made of
//! enqueued jobs alone (records whose answer never promised durability)
//! commits with `synchronous = NORMAL`. In WAL mode that appends the frames
//! without syncing; the next durable commit's fsync of the same WAL file
//! covers them, so they become durable at the next `submit` or `flush`,
//! which is exactly what `enqueue` promises.

use rusqlite::{Connection, params};
use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use super::decisions::{self, NewDecision};
use super::observations::NewObservation;

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
    /// keys, `OR IGNORE` on keys), because a failure rolls back the batch.
    Exec {
        /// The statement (a constant, so prepared statements are cached).
        sql: &'static str,
        /// Its parameters.
        params: Vec<rusqlite::types::Value>,
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
    ack: Option<oneshot::Sender<Result<(), String>>>,
}

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
    /// Starts the writer thread on `conn` with a queue of `capacity` jobs,
    /// committing at most `batch_max` jobs per transaction.
    pub fn start(
        conn: Connection,
        capacity: usize,
        batch_max: usize,
    ) -> Result<Writer, StoreError> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (seq, hash) = decisions::chain_head(&conn)?;
        std::thread::Builder::new()
            .name("cedargate-writer".into())
            .spawn(move || run(conn, rx, batch_max.max(1), seq, hash))
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
            Ok(Err(e)) => Err(StoreError::Write(e)),
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
            Ok(Err(e)) => Err(StoreError::Write(e)),
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
    mut conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    batch_max: usize,
    mut seq: i64,
    mut hash: String,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(batch_max);
    let mut known: std::collections::HashSet<String> = std::collections::HashSet::new();
    // The connection opens with `synchronous = FULL`.
    let mut synced = true;
    // Whether a commit since the last fsync of the WAL skipped its sync.
    let mut unsynced = false;
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let durable = batch.iter().any(|job| job.ack.is_some());
        let result = set_durability(&conn, durable, &mut synced)
            .and_then(|()| commit(&mut conn, &batch, seq, &hash, &known))
            .and_then(|done| {
                if !durable {
                    unsynced = true;
                } else if unsynced {
                    // A durable batch may write no WAL frame (a flush, an
                    // idempotent insert), so SQLite would not sync: sync
                    // the earlier unsynced frames explicitly.
                    sync_wal(&conn)?;
                    unsynced = false;
                }
                Ok(done)
            });
        let outcome = match result {
            Ok((new_seq, new_hash, snapshots)) => {
                seq = new_seq;
                hash = new_hash;
                if known.len() + snapshots.len() > KNOWN_SNAPSHOTS_MAX {
                    known.clear();
                }
                known.extend(snapshots);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = batch.len(), "durable write failed; batch rolled back");
                // The chain head is unchanged by a rolled-back transaction,
                // but re-read it in case the failure was in COMMIT itself.
                if let Ok((s, h)) = decisions::chain_head(&conn) {
                    seq = s;
                    hash = h;
                }
                Err(e.to_string())
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

/// Switches the connection between `synchronous = FULL` (a commit that
/// someone waits on) and `NORMAL` (no fsync), only when it changes.
fn set_durability(conn: &Connection, durable: bool, synced: &mut bool) -> Result<(), StoreError> {
    if durable != *synced {
        let mode = if durable { "FULL" } else { "NORMAL" };
        conn.execute_batch(&format!("PRAGMA synchronous = {mode};"))?;
        *synced = durable;
    }
    Ok(())
}

/// Fsyncs the WAL file itself (Linux flushes an inode's dirty pages
/// whichever descriptor asks).
fn sync_wal(conn: &Connection) -> Result<(), StoreError> {
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(()); // in-memory database: nothing to make durable
    };
    let wal = format!("{path}-wal");
    match std::fs::File::open(&wal) {
        Ok(file) => file
            .sync_all()
            .map_err(|e| StoreError::Write(format!("fsync {wal}: {e}"))),
        // No WAL file: everything was checkpointed (and synced) already.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::Write(format!("open {wal}: {e}"))),
    }
}

/// Commits a batch; returns the new chain head and the snapshot hashes it
/// inserted (known to be durable once this returns Ok).
fn commit(
    conn: &mut Connection,
    batch: &[Job],
    seq: i64,
    hash: &str,
    known: &std::collections::HashSet<String>,
) -> Result<(i64, String, Vec<String>), StoreError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut seq = seq;
    let mut hash = hash.to_string();
    let mut snapshots: Vec<String> = Vec::new();
    for job in batch {
        for op in &job.ops {
            match op {
                WriteOp::Decision(d) => {
                    if let Some(entities) = &d.entities
                        && !known.contains(&d.entities_hash)
                        && !snapshots.contains(&d.entities_hash)
                    {
                        decisions::insert_snapshot(&tx, &d.entities_hash, entities)?;
                        snapshots.push(d.entities_hash.clone());
                    }
                    seq += 1;
                    hash = decisions::insert(&tx, seq, &hash, d)?;
                }
                WriteOp::Observation(o) => super::observations::insert(&tx, o)?,
                WriteOp::ShadowDivergence(d) => super::shadow::insert(&tx, d)?,
                WriteOp::Graph(g) => super::graph::apply(&tx, g)?,
                WriteOp::PolicySet {
                    hash: h,
                    schema_path,
                    schema_text,
                    files,
                    loaded_at,
                } => {
                    tx.prepare_cached(
                        "INSERT OR IGNORE INTO policy_sets (hash, schema_path, schema_text, files, loaded_at)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![h, schema_path, schema_text, files, loaded_at])?;
                }
                WriteOp::Exec { sql, params } => {
                    tx.prepare_cached(sql)?
                        .execute(rusqlite::params_from_iter(params.iter()))?;
                }
                WriteOp::SessionProtocol {
                    session_id,
                    version,
                } => {
                    tx.prepare_cached("UPDATE sessions SET protocol_version = ?2 WHERE id = ?1")?
                        .execute(params![session_id, version])?;
                }
            }
        }
    }
    tx.commit()?;
    Ok((seq, hash, snapshots))
}
