//! Durable state in embedded SQLite: tenants (orgs, projects, agents, keys,
//! sessions), observations with FTS5 search, and the decision trail.
//!
//! Reads go through a small pool of connections on the blocking thread pool.
//! Writes on the request path (decision records, observations) go through
//! the single [`writer::Writer`] thread, which group-commits them: many
//! requests share one transaction and one fsync, and each waits for the
//! commit that contains its rows before it is acknowledged.

pub mod audit_query;
pub mod decisions;
pub mod graph;
pub mod observations;
pub mod shadow;
pub mod tenants;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

pub use writer::{WriteOp, Writer};

/// Number of pooled read connections.
const READ_POOL_SIZE: usize = 4;

/// A storage failure. Messages never include secrets.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
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

/// Versioned migrations, applied in order at open. Never edit a shipped
/// entry: add a new version.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("store/migrations/0001_init.sql")),
    (2, include_str!("store/migrations/0002_graph.sql")),
    (3, include_str!("store/migrations/0003_a2a.sql")),
    (4, include_str!("store/migrations/0004_lifecycle.sql")),
];

/// The store: read pool plus the group-commit writer.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
    writer: Writer,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    readers: Vec<Mutex<Connection>>,
    next: AtomicUsize,
}

/// Opens a connection with the pragmas every connection needs: WAL so
/// readers never block the writer, FULL sync so a commit survives power
/// loss, foreign keys on, and a busy timeout for the rare cross-connection
/// write (admin changes).
pub fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;",
    )?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY,
             applied_at TEXT NOT NULL
         );",
    )?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for (version, sql) in MIGRATIONS {
        let done: bool = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?1)",
            [version],
            |r| r.get(0),
        )?;
        if !done {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                rusqlite::params![version, crate::ids::now_rfc3339()],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies
    /// migrations and starts the writer thread.
    pub fn open(
        path: &Path,
        write_queue: usize,
        group_commit_max: usize,
    ) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let mut conn = open_connection(path)?;
        migrate(&mut conn)?;
        let writer = Writer::start(conn, write_queue, group_commit_max)?;
        let readers = (0..READ_POOL_SIZE)
            .map(|_| open_connection(path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                readers,
                next: AtomicUsize::new(0),
            }),
            writer,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The group-commit writer.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Runs `f` with a pooled connection on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.with_conn(f))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Runs `f` with a pooled connection on the current thread (CLI use).
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.inner.with_conn(f)
    }
}

impl Inner {
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let n = self.readers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        // Prefer an idle connection; otherwise wait on the round-robin pick.
        for i in 0..n {
            if let Some(slot) = self.readers.get((start + i) % n)
                && let Ok(mut conn) = slot.try_lock()
            {
                return f(&mut conn);
            }
        }
        let slot = self
            .readers
            .get(start % n.max(1))
            .ok_or_else(|| StoreError::Task("read pool is empty".into()))?;
        let mut conn = slot
            .lock()
            .map_err(|_| StoreError::Task("read connection poisoned".into()))?;
        f(&mut conn)
    }
}
