//! Durable state in embedded SQLite (the default) or PostgreSQL: tenants
//! (orgs, projects, agents, keys, sessions), observations with full-text
//! search, the knowledge graph, A2A rows and the decision trail. Every
//! query is written once against [`db::Db`].
//!
//! Reads go through a small pool of connections on the blocking thread pool.
//! Writes on the request path (decision records, observations) go through
//! the single [`writer::Writer`] thread, which group-commits them: many
//! requests share one transaction and one fsync, and each waits for the
//! commit that contains its rows before it is acknowledged.

pub mod a2a_cards;
pub mod a2a_hooks;
pub mod audit_query;
pub mod checkpoints;
pub mod db;
pub mod decisions;
pub mod graph;
pub mod instances;
pub mod notify;
pub mod observations;
pub mod people;
pub mod policy_active;
pub mod policy_candidates;
pub mod rate_limits;
mod read_here;
mod read_threads;
pub use read_threads::ReadQueueLevels;
pub mod retention;
pub mod shadow;
pub mod space;
pub mod tenants;
pub mod terminations;
pub mod trail_stats;
mod trail_texts;
pub mod upstreams;
pub mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::params;
pub use db::{Backend, Conn, Location};
use db::{Db, PgManager, PgTarget, SqliteConn};
pub use writer::{QueueBounds, WriteOp, Writer};

/// Number of pooled SQLite read connections.
const SQLITE_READ_POOL: usize = 4;

/// A storage failure. Messages never include secrets.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL reported an error (or the connection failed).
    #[error("database error: {}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    /// No pooled connection could be had in time (database unreachable).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A referenced row does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A row with the same id exists.
    #[error("{0}")]
    Conflict(String),
    /// Input the store refuses.
    #[error("{0}")]
    Invalid(String),
    /// The writer thread is gone or the commit failed.
    #[error("durable write failed: {0}")]
    Write(String),
    /// A stored value could not be decoded.
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    /// The blocking task failed.
    #[error("storage task failed: {0}")]
    Task(String),
    /// Filesystem problem (data directory).
    #[error("cannot prepare `{path}`: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The server's own message when there is one (`postgres::Error` alone
/// prints only "db error").
fn postgres_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

impl StoreError {
    /// Whether the database could not be reached (as opposed to refusing
    /// a statement): the caller answers "unavailable" and may retry.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Postgres(e) => e.is_closed() || e.code().is_none(),
            _ => false,
        }
    }
}

/// Versioned migrations, applied in order at open. Never edit a shipped
/// entry: add a new version. Both backends share the version numbers.
const SQLITE_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("store/migrations/0001_init.sql")),
    (2, include_str!("store/migrations/0002_graph.sql")),
    (3, include_str!("store/migrations/0003_a2a.sql")),
    (4, include_str!("store/migrations/0004_lifecycle.sql")),
    (5, include_str!("store/migrations/0005_instances.sql")),
    (
        6,
        include_str!("store/migrations/0006_mcp_terminations.sql"),
    ),
    (7, include_str!("store/migrations/0007_upstreams.sql")),
    (8, include_str!("store/migrations/0008_rate_limits.sql")),
    (9, include_str!("store/migrations/0009_trail_retention.sql")),
    (10, include_str!("store/migrations/0010_recall_scope.sql")),
    (
        11,
        include_str!("store/migrations/0011_console_indexes.sql"),
    ),
    (
        12,
        include_str!("store/migrations/0012_console_resource_decision.sql"),
    ),
    (13, include_str!("store/migrations/0013_recall_terms.sql")),
    (14, include_str!("store/migrations/0014_trail_recent.sql")),
    (
        15,
        include_str!("store/migrations/0015_text_index_waits.sql"),
    ),
    (
        16,
        include_str!("store/migrations/0016_trail_checkpoints.sql"),
    ),
    (18, include_str!("store/migrations/0018_trail_guards.sql")),
    (
        21,
        include_str!("store/migrations/0021_upstream_new_tools.sql"),
    ),
    (
        24,
        include_str!("store/migrations/0024_a2a_telemetry_bounds.sql"),
    ),
    (
        25,
        include_str!("store/migrations/0025_person_sessions.sql"),
    ),
    (26, include_str!("store/migrations/0026_upstream_oauth.sql")),
    (44, include_str!("store/migrations/0044_pdp_keys.sql")),
    (
        45,
        include_str!("store/migrations/0045_policy_candidates.sql"),
    ),
    (
        46,
        include_str!("store/migrations/0046_decision_traces.sql"),
    ),
    (48, include_str!("store/migrations/0048_policy_active.sql")),
];

/// The PostgreSQL translation of the same versions.
const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("store/migrations/postgres/0001_init.sql")),
    (2, include_str!("store/migrations/postgres/0002_graph.sql")),
    (3, include_str!("store/migrations/postgres/0003_a2a.sql")),
    (
        4,
        include_str!("store/migrations/postgres/0004_lifecycle.sql"),
    ),
    (
        5,
        include_str!("store/migrations/postgres/0005_instances.sql"),
    ),
    (
        6,
        include_str!("store/migrations/postgres/0006_mcp_terminations.sql"),
    ),
    (
        7,
        include_str!("store/migrations/postgres/0007_upstreams.sql"),
    ),
    (
        8,
        include_str!("store/migrations/postgres/0008_rate_limits.sql"),
    ),
    (
        9,
        include_str!("store/migrations/postgres/0009_trail_retention.sql"),
    ),
    (
        10,
        include_str!("store/migrations/postgres/0010_recall_scope.sql"),
    ),
    (
        11,
        include_str!("store/migrations/postgres/0011_console_indexes.sql"),
    ),
    (
        12,
        include_str!("store/migrations/postgres/0012_console_resource_decision.sql"),
    ),
    (
        13,
        include_str!("store/migrations/postgres/0013_recall_terms.sql"),
    ),
    (
        14,
        include_str!("store/migrations/postgres/0014_trail_recent.sql"),
    ),
    (
        15,
        include_str!("store/migrations/postgres/0015_text_index_waits.sql"),
    ),
    (
        16,
        include_str!("store/migrations/postgres/0016_trail_checkpoints.sql"),
    ),
    (
        18,
        include_str!("store/migrations/postgres/0018_trail_guards.sql"),
    ),
    (
        21,
        include_str!("store/migrations/postgres/0021_upstream_new_tools.sql"),
    ),
    (
        24,
        include_str!("store/migrations/postgres/0024_a2a_telemetry_bounds.sql"),
    ),
    (
        25,
        include_str!("store/migrations/postgres/0025_person_sessions.sql"),
    ),
    (
        26,
        include_str!("store/migrations/postgres/0026_upstream_oauth.sql"),
    ),
    (
        44,
        include_str!("store/migrations/postgres/0044_pdp_keys.sql"),
    ),
    (
        45,
        include_str!("store/migrations/postgres/0045_policy_candidates.sql"),
    ),
    (
        46,
        include_str!("store/migrations/postgres/0046_decision_traces.sql"),
    ),
    (
        48,
        include_str!("store/migrations/postgres/0048_policy_active.sql"),
    ),
];

/// Applies every pending migration in one transaction; returns the versions
/// applied. On PostgreSQL an advisory lock serializes instances starting
/// together.
pub fn migrate(conn: &mut Conn) -> Result<Vec<i64>, StoreError> {
    let migrations = match conn.backend() {
        Backend::Sqlite => SQLITE_MIGRATIONS,
        Backend::Postgres => POSTGRES_MIGRATIONS,
    };
    if conn.backend() == Backend::Postgres {
        // The connection's search_path names the store's schema; create it
        // on first use (`?schema=` may name a new one).
        let schema: String =
            conn.query_row("SELECT current_setting('search_path')", params![], |r| {
                r.get(0)
            })?;
        let schema = schema.trim_matches('"');
        if !schema.is_empty() && !schema.contains(['"', ',']) {
            conn.execute_batch(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))?;
        }
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version BIGINT PRIMARY KEY,
             applied_at TEXT NOT NULL
         );",
    )?;
    conn.transaction(|tx| {
        if tx.backend() == Backend::Postgres {
            tx.execute("SELECT pg_advisory_xact_lock(7216354021)", &[])?;
        }
        let mut applied = Vec::new();
        for (version, sql) in migrations {
            let done: bool = tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?1)",
                params![*version],
                |r| r.get(0),
            )?;
            if !done {
                tx.execute_batch(sql)?;
                tx.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                    params![*version, crate::ids::now_rfc3339()],
                )?;
                applied.push(*version);
            }
        }
        Ok(applied)
    })
}

/// Every applied migration: `(version, applied_at)`, oldest first.
pub fn applied_migrations(conn: &mut Conn) -> Result<Vec<(i64, String)>, StoreError> {
    conn.query_map(
        "SELECT version, applied_at FROM schema_migrations ORDER BY version",
        params![],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// How the store reaches its database.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Writer queue capacity (jobs).
    pub write_queue: usize,
    /// Records the writer's queued jobs may hold at once.
    pub write_queue_records: usize,
    /// Bytes the writer's queued jobs may hold at once.
    pub write_queue_bytes: usize,
    /// Jobs per group commit at most.
    pub group_commit_max: usize,
    /// How long a durable batch waits for announced requests still on
    /// their way (see [`writer`]'s commit delay); zero: never.
    pub commit_delay: Duration,
    /// Requests in flight before a durable batch waits for them.
    pub commit_siblings: usize,
    /// PostgreSQL pool size (connections, besides the writer's).
    pub pool_size: u32,
    /// How long a request waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// SQLite: the WAL's bound in bytes (`journal_size_limit`, and the size
    /// past which the writer checkpoints in TRUNCATE mode).
    pub wal_max_bytes: u64,
    /// SQLite: free bytes the database's filesystem must keep, else trail
    /// writes are refused ([`space::DiskGuard`]); 0: off.
    pub min_free_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        let queue = QueueBounds::default();
        StoreOptions {
            write_queue: queue.jobs,
            write_queue_records: queue.records,
            write_queue_bytes: queue.bytes,
            group_commit_max: queue.batch_max,
            commit_delay: queue.commit_delay,
            commit_siblings: queue.commit_siblings,
            pool_size: 16,
            acquire_timeout: Duration::from_secs(3),
            wal_max_bytes: 64 * 1024 * 1024,
            min_free_bytes: 0,
        }
    }
}

impl StoreOptions {
    /// The writer's queue bounds.
    pub fn queue_bounds(&self) -> QueueBounds {
        QueueBounds {
            jobs: self.write_queue,
            records: self.write_queue_records,
            bytes: self.write_queue_bytes,
            batch_max: self.group_commit_max,
            commit_delay: self.commit_delay,
            commit_siblings: self.commit_siblings,
            commit_here: false,
        }
    }
}

/// The store: read pool plus the group-commit writer.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
    writer: Writer,
}

#[derive(Debug)]
struct Inner {
    location: Location,
    pool: Pool,
    /// Migrations are applied (false while a PostgreSQL server that was
    /// unreachable at start-up has not come back yet).
    migrated: AtomicBool,
    /// Free space on the database's filesystem (SQLite; off on PostgreSQL).
    space: space::DiskGuard,
}

enum Pool {
    Sqlite {
        readers: Vec<Mutex<SqliteConn>>,
        next: AtomicUsize,
        /// Where [`Store::read`] runs: one thread per reader.
        threads: read_threads::ReadThreads,
        /// What recent reads cost, by the key their caller names
        /// ([`Store::read_keyed`]).
        costs: read_here::Costs,
    },
    Postgres(r2d2::Pool<PgManager>),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pool::Sqlite { readers, .. } => write!(f, "SqlitePool({})", readers.len()),
            Pool::Postgres(p) => write!(f, "PostgresPool({:?})", p.state()),
        }
    }
}

/// Logs r2d2's connection errors at debug level (the caller reports them).
#[derive(Debug)]
struct QuietErrors;
impl r2d2::HandleError<StoreError> for QuietErrors {
    fn handle_error(&self, error: StoreError) {
        tracing::debug!(error = %error, "database connection attempt failed");
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` with the
    /// default options.
    pub fn open(
        path: &std::path::Path,
        write_queue: usize,
        group_commit_max: usize,
    ) -> Result<Store, StoreError> {
        Self::open_location(
            &Location::Sqlite(path.to_path_buf()),
            &StoreOptions {
                write_queue,
                group_commit_max,
                ..StoreOptions::default()
            },
        )
    }

    /// Opens the store at `url` (`sqlite://…` or `postgres://…`).
    pub fn open_url(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        Self::open_location(&Location::parse(url)?, options)
    }

    /// Opens the store at `url` and fails unless the database answers and
    /// is migrated (operator commands, which cannot wait).
    pub fn open_ready(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        let store = Self::open_url(url, options)?;
        store.ensure_ready_blocking()?;
        Ok(store)
    }

    /// Opens the store, applies migrations and starts the writer thread.
    /// A PostgreSQL server that cannot be reached is not an error: the
    /// store starts unmigrated, [`Store::ensure_ready`] retries, and every
    /// request fails cleanly meanwhile.
    pub fn open_location(location: &Location, options: &StoreOptions) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Self::open_sqlite(path, options),
            Location::Postgres(target) => Self::open_postgres(target, options),
        }
    }

    fn open_sqlite(path: &std::path::Path, options: &StoreOptions) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let wal = options.wal_max_bytes;
        let mut conn = SqliteConn::open(path)?.with_wal_limit(wal)?;
        migrate(&mut conn)?;
        // Observations a crash left out of the text index join it now.
        let db: &mut Conn = &mut conn;
        db.transaction(observations::index_waiting)?;
        // A WAL left large by an earlier run (or a crash) shrinks now.
        match conn.checkpoint() {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(database = %path.display(), "start-up WAL checkpoint kept from completing by another process")
            }
            Err(e) => {
                tracing::warn!(database = %path.display(), error = %e, "start-up WAL checkpoint failed")
            }
        }
        let connect_path = path.to_path_buf();
        let writer = Writer::start(
            Box::new(move || {
                Ok(Box::new(SqliteConn::open(&connect_path)?.with_wal_limit(wal)?) as Box<Conn>)
            }),
            Some(Box::new(conn)),
            QueueBounds {
                commit_here: true,
                ..options.queue_bounds()
            },
        )?;
        let readers = (0..SQLITE_READ_POOL)
            .map(|_| {
                SqliteConn::open(path)
                    .and_then(|c| c.with_wal_limit(wal))
                    .map(Mutex::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        Ok(Store {
            inner: Arc::new(Inner {
                location: Location::Sqlite(path.to_path_buf()),
                pool: Pool::Sqlite {
                    readers,
                    next: AtomicUsize::new(0),
                    threads: read_threads::ReadThreads::start(SQLITE_READ_POOL)?,
                    costs: read_here::Costs::new(),
                },
                migrated: AtomicBool::new(true),
                space: space::DiskGuard::new(Some(dir), options.min_free_bytes),
            }),
            writer,
        })
    }

    fn open_postgres(target: &PgTarget, options: &StoreOptions) -> Result<Store, StoreError> {
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(options.acquire_timeout)
            .error_handler(Box::new(QuietErrors))
            .build_unchecked(PgManager::new(target.clone()));
        let writer_target = target.clone();
        let writer = Writer::start(
            Box::new(move || Ok(Box::new(writer_target.connect()?) as Box<Conn>)),
            None,
            options.queue_bounds(),
        )?;
        let store = Store {
            inner: Arc::new(Inner {
                location: Location::Postgres(Box::new(target.clone())),
                pool: Pool::Postgres(pool),
                migrated: AtomicBool::new(false),
                space: space::DiskGuard::off(),
            }),
            writer,
        };
        match store.ensure_ready_blocking() {
            Ok(()) => {}
            Err(e) if e.is_unavailable() => {
                tracing::warn!(database = %target.display, error = %e, "database unreachable at start-up; serving not-ready until it answers");
            }
            Err(e) => return Err(e),
        }
        Ok(store)
    }

    /// Where the store lives (for messages; no password).
    pub fn location(&self) -> &Location {
        &self.inner.location
    }

    /// Whether migrations are applied.
    pub fn is_migrated(&self) -> bool {
        self.inner.migrated.load(Ordering::Acquire)
    }

    /// Applies migrations if they were not yet (the database was
    /// unreachable at start-up).
    pub fn ensure_ready_blocking(&self) -> Result<(), StoreError> {
        if self.is_migrated() {
            return Ok(());
        }
        let applied = self.inner.with_conn(migrate)?;
        if !applied.is_empty() {
            tracing::info!(versions = ?applied, database = %self.inner.location.display(), "migrations applied");
        }
        self.inner.migrated.store(true, Ordering::Release);
        Ok(())
    }

    /// Async form of [`Store::ensure_ready_blocking`].
    pub async fn ensure_ready(&self) -> Result<(), StoreError> {
        if self.is_migrated() {
            return Ok(());
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.ensure_ready_blocking())
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// The disk-space guard of the database's filesystem.
    pub fn space(&self) -> &space::DiskGuard {
        &self.inner.space
    }

    /// The database's name as OpenTelemetry's `db.system.name` spells it.
    pub fn backend_name(&self) -> &'static str {
        match self.location() {
            Location::Sqlite(_) => "sqlite",
            Location::Postgres(_) => "postgresql",
        }
    }

    /// The group-commit writer.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// `NotFound` ("org `…` not found") unless the org exists: the check
    /// every org-scoped operator route makes first.
    pub async fn require_org(&self, org_id: &str) -> Result<(), StoreError> {
        let id = org_id.to_string();
        self.read(move |c| tenants::require_org(c, &id)).await
    }

    /// Waits until every observation committed before this call is in the
    /// full-text index (SQLite indexes after answering the commit; see
    /// `writer.rs`): a recall calls this before searching, so it finds
    /// what was remembered the moment the remember was answered.
    pub async fn text_indexed(&self) {
        self.writer.text_indexed().await;
    }

    /// Runs `f` with a pooled connection off the async workers: on
    /// SQLite's read threads, on PostgreSQL the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Conn) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        match &self.inner.pool {
            Pool::Sqlite { threads, .. } => threads.run(move || inner.with_conn(f)).await,
            Pool::Postgres(_) => tokio::task::spawn_blocking(move || inner.with_conn(f))
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?,
        }
    }

    /// [`Store::read`] for a read whose cost depends on `key` (a recall:
    /// its org and project): on SQLite it runs on the calling thread when
    /// the key's recent reads were cheap and a connection is idle (see
    /// `store/read_here.rs`), on a read thread otherwise.
    pub async fn read_keyed<T, K, F>(&self, key: K, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        K: std::hash::Hash,
        F: Fn(&mut Conn) -> Result<T, StoreError> + Send + 'static,
    {
        let Pool::Sqlite { threads, costs, .. } = &self.inner.pool else {
            return self.read(f).await;
        };
        if costs.cheap(&key)
            && let Some(done) = self.inner.with_idle_conn(|c| timed(&f, c))
        {
            costs.record(&key, done.1);
            return done.0;
        }
        let inner = Arc::clone(&self.inner);
        let (result, took) = threads
            .run(move || inner.with_conn(|c| Ok(timed(&f, c))))
            .await?;
        costs.record(&key, took);
        result
    }

    /// SQLite reads waiting for a read thread (zeros on PostgreSQL, whose
    /// reads wait in its connection pool instead).
    pub fn read_queue(&self) -> ReadQueueLevels {
        match &self.inner.pool {
            Pool::Sqlite { threads, .. } => threads.levels(),
            Pool::Postgres(_) => ReadQueueLevels::default(),
        }
    }

    /// Runs `f` with a pooled connection on the current thread (CLI use;
    /// never from an async task: the PostgreSQL client blocks).
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.inner.with_conn(f)
    }

    /// Checkpoints the SQLite WAL into the database and truncates it (clean
    /// shutdown, after an archive); a no-op on PostgreSQL. Readers that
    /// keep it from completing are logged, not an error.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        let done = self.read(|c| c.checkpoint()).await?;
        if !done {
            tracing::warn!("WAL checkpoint kept from completing by readers");
        }
        Ok(())
    }

    /// Runs a trivial query on a pooled connection: the readiness probe's
    /// proof that reads are served now, not only that a pool exists.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.read(|c| c.query_row("SELECT 1", params![], |r| r.get::<i64>(0)))
            .await
            .map(|_| ())
    }
}

/// The first idle read connection from the round-robin pick `start`
/// (never waits).
fn idle_reader(
    readers: &[Mutex<SqliteConn>],
    start: usize,
) -> Option<std::sync::MutexGuard<'_, SqliteConn>> {
    let n = readers.len();
    (0..n).find_map(|i| readers.get((start + i) % n)?.try_lock().ok())
}

/// Runs a read, with the time it took.
fn timed<T>(
    f: &impl Fn(&mut Conn) -> Result<T, StoreError>,
    conn: &mut Conn,
) -> (Result<T, StoreError>, Duration) {
    let start = std::time::Instant::now();
    let result = f(conn);
    (result, start.elapsed())
}

impl Inner {
    /// Runs `f` on an idle SQLite read connection, or `None` when every
    /// one is taken (never waits; never on PostgreSQL).
    fn with_idle_conn<T>(&self, f: impl FnOnce(&mut Conn) -> T) -> Option<T> {
        let Pool::Sqlite { readers, next, .. } = &self.pool else {
            return None;
        };
        let start = next.fetch_add(1, Ordering::Relaxed);
        let mut conn = idle_reader(readers, start)?;
        Some(f(&mut *conn))
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.pool {
            Pool::Sqlite { readers, next, .. } => {
                let start = next.fetch_add(1, Ordering::Relaxed);
                // Prefer an idle connection; otherwise wait on the round-robin pick.
                if let Some(mut conn) = idle_reader(readers, start) {
                    return f(&mut *conn);
                }
                let slot = readers
                    .get(start % readers.len().max(1))
                    .ok_or_else(|| StoreError::Task("read pool is empty".into()))?;
                let mut conn = slot
                    .lock()
                    .map_err(|_| StoreError::Task("read connection poisoned".into()))?;
                f(&mut *conn)
            }
            Pool::Postgres(pool) => {
                let mut conn = pool
                    .get()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                let result = f(&mut *conn);
                if result.is_err() {
                    // A statement that failed inside an explicit
                    // transaction leaves it aborted: end it before the
                    // connection goes back to the pool.
                    conn.rollback();
                }
                result
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name of the thread a keyed read of `key` ran on, the read
    /// sleeping `hold` first.
    async fn ran_on(store: &Store, key: &str, hold: Duration) -> Option<String> {
        store
            .read_keyed(key, move |_| {
                std::thread::sleep(hold);
                Ok(std::thread::current().name().map(str::to_string))
            })
            .await
            .unwrap()
    }

    /// A store on a new SQLite file (the directory lives as long as the
    /// first element).
    async fn temp_store() -> (tempfile::TempDir, std::path::PathBuf, Store) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let open_path = path.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(&open_path, 64, 16))
            .await
            .unwrap()
            .unwrap();
        (dir, path, store)
    }

    #[tokio::test]
    async fn a_keyed_read_runs_here_only_while_its_key_reads_cheaply() {
        let (_dir, _path, store) = temp_store().await;
        let read_thread = Some("cedargate-read".to_string());
        let here = std::thread::current().name().map(str::to_string);
        assert_ne!(here, read_thread);
        // Never measured: a read thread. Measured cheap: here.
        assert_eq!(ran_on(&store, "p1", Duration::ZERO).await, read_thread);
        assert_eq!(ran_on(&store, "p1", Duration::ZERO).await, here);
        // Another key is not known cheap.
        assert_eq!(ran_on(&store, "p2", Duration::ZERO).await, read_thread);
        // A read that took longer than the bound sends the next away.
        let slow = read_here::HERE_MAX * 2;
        assert_eq!(ran_on(&store, "p1", slow).await, here);
        assert_eq!(ran_on(&store, "p1", Duration::ZERO).await, read_thread);
    }

    /// Whether a termination of `session` is stored.
    async fn terminated(store: &Store, session: &'static str) -> bool {
        store
            .read(move |c| terminations::is_stored(c, session))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_lone_durable_write_commits_on_its_own_thread_and_never_overtakes_the_queue() {
        let (_dir, _path, store) = temp_store().await;
        let writer = store.writer();
        // Alone: committed by the requester, and stored.
        let op = |s| terminations::terminate_op(s, "2026-11-26T00:00:00Z");
        writer.submit(vec![op("s1")]).await.unwrap();
        assert_eq!(writer.commits_here(), 1);
        assert!(terminated(&store, "s1").await);
        // Another tool call in flight: the queue, where a group commit
        // gathers them.
        let (mine, other) = (writer.call_started(), writer.call_started());
        writer.submit(vec![op("s2")]).await.unwrap();
        assert_eq!(writer.commits_here(), 1);
        assert!(terminated(&store, "s2").await);
        drop(other);
        // Only the caller's own call in flight: here.
        writer.submit(vec![op("s5")]).await.unwrap();
        assert_eq!(writer.commits_here(), 2);
        drop(mine);
        // A write queued just before is committed first, every time: the
        // resume lands after the termination, so none is left.
        for _ in 0..50 {
            writer.enqueue(vec![op("s3")]).await.unwrap();
            writer
                .submit(vec![terminations::resume_op("s3")])
                .await
                .unwrap();
            assert!(!terminated(&store, "s3").await);
        }
        // Alone again: the requester commits.
        let before = writer.commits_here();
        writer.submit(vec![op("s4")]).await.unwrap();
        assert_eq!(writer.commits_here(), before + 1);
    }

    #[tokio::test]
    async fn a_lone_write_waits_for_another_process_on_the_writer_thread_not_its_own() {
        let (_dir, path, store) = temp_store().await;
        // Another process holds the database's write lock (as the CLI does
        // while it prunes the trail).
        let mut other = SqliteConn::open(&path).unwrap();
        other.begin(true).unwrap();
        let writer = store.writer().clone();
        let submitted = tokio::spawn(async move {
            let op = terminations::terminate_op("s1", "2026-11-26T00:00:00Z");
            writer.submit(vec![op]).await
        });
        // On this one-thread runtime a commit blocked here would hold the
        // timer back for SQLite's busy timeout (10 s).
        let started = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(!submitted.is_finished());
        other.commit().unwrap();
        submitted.await.unwrap().unwrap();
        assert_eq!(store.writer().commits_here(), 0);
        assert!(terminated(&store, "s1").await);
    }

    /// The entity slice of [`record`]'s decisions.
    const ENTITIES: &str = "[]";

    /// A decision record with `id`, as the PEP would hand it over.
    fn record(id: &str) -> decisions::NewDecision {
        use sha2::Digest;
        decisions::NewDecision {
            id: id.to_string(),
            time: "2026-11-27T00:00:00Z".into(),
            org_id: Some("o1".into()),
            session_id: Some("s1".into()),
            principal: "Gateway::Agent::\"a1\"".into(),
            action: "call_tool".into(),
            resource: "Gateway::Tool::\"t1\"".into(),
            context: "{}".into(),
            entities_hash: hex::encode(sha2::Sha256::digest(ENTITIES)),
            entities: Some(ENTITIES.into()),
            policy_hash: crate::policy::set_hash::bundle_hash("", []),
            decision: "allow".into(),
            reasons: "[]".into(),
            errors: "[]".into(),
            outcome: "{}".into(),
            notes: "{}".into(),
        }
    }

    /// The trail's records in order: (seq, id).
    async fn trail(store: &Store) -> Vec<(i64, String)> {
        let rows = store.read(|c| decisions::page(c, 0, 100)).await.unwrap();
        rows.into_iter().map(|r| (r.seq, r.record.id)).collect()
    }

    #[tokio::test]
    async fn the_writer_appends_after_records_another_process_chained_meanwhile() {
        let (_dir, path, store) = temp_store().await;
        let writer = store.writer();
        let decision = |id: &str| WriteOp::Decision(Box::new(record(id)));
        // The (empty) policy set the records name, as a start-up records it.
        let set = WriteOp::PolicySet {
            hash: crate::policy::set_hash::bundle_hash("", []),
            schema_path: "schema".into(),
            schema_text: String::new(),
            files: "[]".into(),
            loaded_at: "2026-11-27T00:00:00Z".into(),
        };
        writer.submit(vec![set, decision("w1")]).await.unwrap();
        writer.submit(vec![decision("w2")]).await.unwrap();
        // Another process (the CLI, another instance) appends to the chain.
        let mut other = SqliteConn::open(&path).unwrap();
        for id in ["o1", "o2"] {
            other.begin(true).unwrap();
            let head = decisions::chain_head(&mut other).unwrap();
            let d = record(id);
            decisions::insert_snapshot(&mut other, &d.entities_hash, ENTITIES).unwrap();
            decisions::insert(&mut other, head.seq + 1, &head.hash, &d).unwrap();
            other.commit().unwrap();
        }
        // Alone (on this thread) and through the queue: both after them.
        writer.submit(vec![decision("w3")]).await.unwrap();
        let _calls = (writer.call_started(), writer.call_started());
        writer.submit(vec![decision("w4")]).await.unwrap();
        let ids = ["w1", "w2", "o1", "o2", "w3", "w4"];
        let expected: Vec<(i64, String)> = (1..).zip(ids.map(String::from)).collect();
        assert_eq!(trail(&store).await, expected);
        let report = store.read(decisions::verify).await.unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.checked, 6);
    }

    #[test]
    fn both_backends_have_the_same_migration_versions() {
        let versions = |m: &[(i64, &str)]| m.iter().map(|(v, _)| *v).collect::<Vec<_>>();
        assert_eq!(versions(SQLITE_MIGRATIONS), versions(POSTGRES_MIGRATIONS));
        // Strictly increasing from 1 (a version may be reserved by work
        // that lands separately; it is applied whenever it arrives).
        let v = versions(SQLITE_MIGRATIONS);
        assert_eq!(v.first(), Some(&1));
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
    }
}
