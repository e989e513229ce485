//! One connection interface over both backends, so every query of the store
//! is written once. A store function takes `&mut Conn` (`dyn Db`), binds
//! [`Param`]s and reads owned [`Row`]s; the SQL is SQLite's dialect with
//! `?N` placeholders, which the PostgreSQL connection rewrites to `$N`.
//! The few statements that differ (full-text search, triggers, advisory
//! locks) ask [`Db::backend`] and choose.
//!
//! Both connections cache prepared statements by their text, so the hot
//! inserts of the writer are parsed once per connection.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::StoreError;

/// Which database a connection talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite (the default).
    Sqlite,
    /// A PostgreSQL server (or a compatible engine).
    Postgres,
}

/// A bound parameter, borrowed from the caller.
#[derive(Clone, Copy, Debug)]
pub enum Param<'a> {
    /// SQL NULL.
    Null,
    /// An integer (also booleans, as 0/1).
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

/// An owned value: a column read back, or a parameter kept for later.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Value {
    /// SQL NULL.
    #[default]
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl Value {
    /// This value as a parameter.
    pub fn as_param(&self) -> Param<'_> {
        match self {
            Value::Null => Param::Null,
            Value::Int(i) => Param::Int(*i),
            Value::Real(f) => Param::Real(*f),
            Value::Text(s) => Param::Text(s),
            Value::Blob(b) => Param::Blob(b),
        }
    }
}

/// Anything that binds as a parameter (by reference, so `params!` never
/// moves its arguments).
pub trait ToParam {
    /// This value as a parameter.
    fn to_param(&self) -> Param<'_>;
}

impl ToParam for Value {
    fn to_param(&self) -> Param<'_> {
        self.as_param()
    }
}
impl ToParam for Param<'_> {
    fn to_param(&self) -> Param<'_> {
        *self
    }
}
impl ToParam for str {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl ToParam for String {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl ToParam for [u8] {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl ToParam for Vec<u8> {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl ToParam for i64 {
    fn to_param(&self) -> Param<'_> {
        Param::Int(*self)
    }
}
impl ToParam for i32 {
    fn to_param(&self) -> Param<'_> {
        Param::Int(i64::from(*self))
    }
}
impl ToParam for u32 {
    fn to_param(&self) -> Param<'_> {
        Param::Int(i64::from(*self))
    }
}
impl ToParam for bool {
    fn to_param(&self) -> Param<'_> {
        Param::Int(i64::from(*self))
    }
}
impl ToParam for f64 {
    fn to_param(&self) -> Param<'_> {
        Param::Real(*self)
    }
}
impl<T: ToParam> ToParam for Option<T> {
    fn to_param(&self) -> Param<'_> {
        self.as_ref().map_or(Param::Null, ToParam::to_param)
    }
}
impl<T: ToParam + ?Sized> ToParam for &T {
    fn to_param(&self) -> Param<'_> {
        (**self).to_param()
    }
}

/// `params![a, b, …]`: a slice of [`Param`]s borrowed from the arguments.
#[macro_export]
macro_rules! params {
    () => { &[] as &[$crate::store::db::Param<'_>] };
    ($($p:expr),+ $(,)?) => { &[$($crate::store::db::ToParam::to_param(&$p)),+][..] };
}

/// One result row, owned.
#[derive(Clone, Debug, Default)]
pub struct Row {
    values: Vec<Value>,
}

impl Row {
    /// Column `i`, converted.
    pub fn get<T: FromValue>(&self, i: usize) -> Result<T, StoreError> {
        let v = self
            .values
            .get(i)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {i}")))?;
        T::from_value(v).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "column {i} holds {v:?}, not a {}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// Every column, owned.
    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    /// Column `i` as text, moved out of the row (it reads NULL afterwards):
    /// for readers of many rows that would otherwise copy every string.
    pub fn take_text(&mut self, i: usize) -> Result<String, StoreError> {
        match self.values.get_mut(i).map(std::mem::take) {
            Some(Value::Text(s)) => Ok(s),
            other => Err(StoreError::Corrupt(format!(
                "column {i} holds {other:?}, not text"
            ))),
        }
    }

    /// Column `i` as text or NULL, moved out of the row.
    pub fn take_opt_text(&mut self, i: usize) -> Result<Option<String>, StoreError> {
        match self.values.get_mut(i).map(std::mem::take) {
            Some(Value::Null) => Ok(None),
            Some(Value::Text(s)) => Ok(Some(s)),
            other => Err(StoreError::Corrupt(format!(
                "column {i} holds {other:?}, not text or NULL"
            ))),
        }
    }
}

/// A Rust type a column converts to.
pub trait FromValue: Sized {
    /// `None` when the value has another type.
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for Value {
    fn from_value(v: &Value) -> Option<Self> {
        Some(v.clone())
    }
}
impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Real(f) => Some(*f),
            #[allow(
                clippy::cast_precision_loss,
                reason = "SQLite stores whole floats as integers"
            )]
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Blob(b) => Some(b.clone()),
            _ => None,
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// A connection of either backend.
pub trait Db: Send {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// Runs one statement; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError>;
    /// Runs one query; returns every row.
    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError>;
    /// Runs several statements without parameters (migrations).
    fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError>;
    /// Starts a write transaction. `durable == false` may skip the sync of
    /// the commit (a later durable commit covers it).
    fn begin(&mut self, durable: bool) -> Result<(), StoreError>;
    /// Like [`Db::begin`], but `Ok(false)` at once, with no transaction
    /// open, where `begin` would wait for another connection's write lock
    /// (SQLite); other backends begin as usual.
    fn begin_now(&mut self, durable: bool) -> Result<bool, StoreError> {
        self.begin(durable).map(|()| true)
    }
    /// Commits the open transaction.
    fn commit(&mut self) -> Result<(), StoreError>;
    /// A number that changes whenever another connection (of this process
    /// or another) committed to the database since this connection last
    /// asked (SQLite's `PRAGMA data_version`; this connection's own
    /// commits leave it as it was). `None` where the backend has no such
    /// number (PostgreSQL): nothing read earlier may then be trusted.
    fn data_version(&mut self) -> Result<Option<i64>, StoreError> {
        Ok(None)
    }
    /// Rolls the open transaction back (best effort).
    fn rollback(&mut self);
    /// Serializes appends to the decision chain across every writer of the
    /// database, until the transaction ends.
    fn lock_chain(&mut self) -> Result<(), StoreError>;
    /// Whether the connection is unusable (the server went away).
    fn is_broken(&self) -> bool;
    /// Checkpoints the write-ahead log into the database and truncates it
    /// (SQLite `wal_checkpoint(TRUNCATE)`); `Ok(false)` when readers kept
    /// it from completing. PostgreSQL manages its own WAL: a no-op.
    fn checkpoint(&mut self) -> Result<bool, StoreError> {
        Ok(true)
    }
    /// After a commit: checkpoints when the WAL grew past its bound
    /// (SQLite with a WAL limit; a no-op otherwise). Never fails the commit.
    fn bound_wal(&mut self) {}
    /// Whether [`Db::bound_wal`] would checkpoint now.
    fn wal_over_bound(&mut self) -> bool {
        false
    }
}

/// The connection type store functions take.
pub type Conn = dyn Db;

impl dyn Db + '_ {
    /// The first row, mapped; `None` when there is none.
    pub fn query_opt<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        match self.query(sql, params)?.first() {
            Some(row) => f(row).map(Some),
            None => Ok(None),
        }
    }

    /// The first row, mapped; an error when there is none.
    pub fn query_row<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.query_opt(sql, params, f)?
            .ok_or_else(|| StoreError::NotFound("query returned no rows".into()))
    }

    /// Every row, mapped.
    pub fn query_map<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnMut(&Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.query(sql, params)?.iter().map(f).collect()
    }

    /// Every row, moved into `f` (which may take its values without
    /// copying them).
    pub fn query_map_owned<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnMut(Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.query(sql, params)?.into_iter().map(f).collect()
    }

    /// Runs `f` in a transaction: committed when it returns Ok, rolled
    /// back otherwise.
    pub fn transaction<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.begin(true)?;
        match f(self) {
            Ok(v) => {
                self.commit()?;
                Ok(v)
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }
}

/// Whether `e` is a primary-key or unique-constraint violation.
pub fn is_unique_violation(e: &StoreError) -> bool {
    match e {
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => {
            f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
        }
        StoreError::Postgres(e) => e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION),
        _ => false,
    }
}

// ---------------------------------------------------------------- SQLite --

/// A SQLite connection.
#[derive(Debug)]
pub struct SqliteConn {
    conn: rusqlite::Connection,
    /// `PRAGMA synchronous` is FULL (a commit syncs the WAL). Connections
    /// open with FULL; the first explicit transaction switches to NORMAL,
    /// and [`Db::commit`] then syncs the WAL itself when it must.
    synced: bool,
    /// A commit since the last sync of the WAL wrote frames unsynced.
    unsynced: bool,
    /// The open transaction is durable.
    durable: bool,
    /// `total_changes()` when the open transaction began.
    changes_at_begin: u64,
    /// `database.wal_max_bytes`, when set: `journal_size_limit`, and the
    /// size past which a commit is followed by a checkpoint.
    wal_limit: Option<u64>,
    /// The WAL size past which the next checkpoint is tried (the limit, or
    /// further when readers kept the last one from completing).
    checkpoint_above: u64,
    /// The `-wal` file, kept open once a commit needed it: each durable
    /// commit syncs it and each bounded commit reads its size without
    /// opening it again.
    wal_file: Option<std::fs::File>,
    /// The WAL's size as the last commit left it (read once per commit,
    /// with the look that finds the file to sync).
    wal_len: u64,
}

/// How long a checkpoint waits for readers to leave the WAL before it
/// gives up (it is tried again once the WAL grew by another limit).
const CHECKPOINT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// The busy timeout of every SQLite connection.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl SqliteConn {
    /// Opens `path` with the pragmas every connection needs: WAL so readers
    /// never block the writer, FULL sync so a commit survives power loss,
    /// foreign keys on, and a busy timeout for the rare cross-connection
    /// write (admin changes).
    ///
    /// Every connection also runs with the query planner stability
    /// guarantee (QPSG): a statement's plan never depends on the values
    /// bound to it, so a cached statement is never re-prepared because a
    /// new value was bound. Without it SQLite (3.54) marks `col = ?` terms
    /// to re-prepare whenever the value moves between 0/1 and anything
    /// else; FTS5's own segment lookup (`… WHERE segid=? AND term<=?`)
    /// binds segment ids 1, 2, 3… in turn, so every recall re-compiled it
    /// several times (about a sixth of a recall's CPU). Every query here is
    /// written with `?N` parameters and its plan chosen in its text (`+col`,
    /// `CAST`), so no plan relies on a bound value.
    pub fn open(path: &Path) -> Result<SqliteConn, StoreError> {
        let conn = rusqlite::Connection::open(path)?;
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA foreign_keys = ON;",
        )?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(SqliteConn {
            conn,
            synced: true,
            unsynced: false,
            durable: true,
            changes_at_begin: 0,
            wal_limit: None,
            checkpoint_above: u64::MAX,
            wal_file: None,
            wal_len: 0,
        })
    }

    /// Bounds this connection's WAL to `bytes`: `journal_size_limit` (a
    /// WAL that is reset is truncated to it) and a TRUNCATE checkpoint
    /// after any commit that leaves the WAL larger ([`Db::bound_wal`]).
    pub fn with_wal_limit(mut self, bytes: u64) -> Result<SqliteConn, StoreError> {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.conn
            .execute_batch(&format!("PRAGMA journal_size_limit = {bytes};"))?;
        self.wal_limit = Some(bytes as u64);
        self.checkpoint_above = bytes as u64;
        Ok(self)
    }

    /// Size of the `-wal` file now (0 when there is none).
    #[cfg(test)]
    fn wal_size(&mut self) -> u64 {
        match self.wal() {
            Ok(Some((_, len))) => len,
            _ => 0,
        }
    }

    /// After a commit: the WAL's size, its frames made durable first when
    /// `sync` (`fdatasync`: the data and the size, not the timestamps; what
    /// SQLite itself does with `synchronous = FULL`). Linux flushes an
    /// inode's dirty pages whichever descriptor asks, so SQLite's own
    /// descriptor is covered.
    fn look_at_wal(&mut self, sync: bool) -> Result<u64, StoreError> {
        match self.wal()? {
            Some((file, len)) => {
                if sync {
                    file.sync_data()
                        .map_err(|e| StoreError::Write(format!("fsync of the WAL: {e}")))?;
                }
                Ok(len)
            }
            // No WAL file: everything was checkpointed (and synced) already.
            None => Ok(0),
        }
    }

    /// The open `-wal` file and its size now: opened on first use, and
    /// again when the one held was unlinked (SQLite deletes the WAL when
    /// the last connection closes; a later connection creates a new file).
    /// `None` for an in-memory database or while no WAL file exists. One
    /// `statx` per call, on every commit's path ([`links_and_size`]).
    fn wal(&mut self) -> Result<Option<(&std::fs::File, u64)>, StoreError> {
        let held = self.wal_file.as_ref().and_then(links_and_size);
        let len = match held {
            Some((links, len)) if links > 0 => len,
            _ => {
                self.wal_file = None;
                let Some(path) = self.conn.path().filter(|p| !p.is_empty()) else {
                    return Ok(None); // in-memory database: nothing to make durable
                };
                let wal = format!("{path}-wal");
                let file = match std::fs::File::open(&wal) {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(StoreError::Write(format!("open {wal}: {e}"))),
                };
                let len = links_and_size(&file).map_or(0, |(_, len)| len);
                self.wal_file = Some(file);
                len
            }
        };
        Ok(self.wal_file.as_ref().map(|f| (f, len)))
    }
}

/// A file's link count and size, asked for without its timestamps.
///
/// Why not `metadata()`: Linux (6.13 and later) keeps a file's change
/// time coarse until someone reads it; once read, the next write stamps a
/// fine-grained time, which dirties the inode, and ext4 then writes the
/// inode's block synchronously inside the next `fdatasync`: a second
/// device round trip per commit. A full `fstat` of the WAL after every
/// commit made each durable commit about 45 µs slower (a 20-frame write and
/// `fdatasync`, 178 against 223–243 µs p50 on a virtio disk); `statx` with
/// only the link count and the size reads no time and costs nothing.
#[cfg(target_os = "linux")]
fn links_and_size(file: &std::fs::File) -> Option<(u64, u64)> {
    use rustix::fs::{AtFlags, StatxFlags};
    let wanted = StatxFlags::NLINK | StatxFlags::SIZE;
    match rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, wanted) {
        Ok(s) if StatxFlags::from_bits_retain(s.stx_mask).contains(wanted) => {
            Some((u64::from(s.stx_nlink), s.stx_size))
        }
        // No `statx` (a kernel before 4.11, a sandbox that refuses it) or
        // an answer without the fields: the full `fstat`.
        _ => fstat_links_and_size(file),
    }
}

#[cfg(not(target_os = "linux"))]
fn links_and_size(file: &std::fs::File) -> Option<(u64, u64)> {
    fstat_links_and_size(file)
}

/// A file's link count and size from a full `fstat` (which reads its
/// times too).
fn fstat_links_and_size(file: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    Some((meta.nlink(), meta.len()))
}

#[cfg(test)]
impl SqliteConn {
    /// How many times the cached statement of `sql` was re-prepared (SQLite
    /// recompiles a statement when a schema change or a new binding of a
    /// parameter its plan depends on invalidates it).
    pub(crate) fn reprepares(&self, sql: &str) -> Result<i32, StoreError> {
        let stmt = self.conn.prepare_cached(sql)?;
        Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(i) => ValueRef::Integer(i),
            Param::Real(f) => ValueRef::Real(f),
            Param::Text(s) => ValueRef::Text(s.as_bytes()),
            Param::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

fn sqlite_value(v: rusqlite::types::ValueRef<'_>) -> Result<Value, StoreError> {
    use rusqlite::types::ValueRef;
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(
            std::str::from_utf8(t)
                .map_err(|e| StoreError::Corrupt(format!("text column is not UTF-8: {e}")))?
                .to_string(),
        ),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}

impl Db for SqliteConn {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let n = self
            .conn
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params.iter()))?;
        Ok(n as u64)
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut values = Vec::with_capacity(width);
            for i in 0..width {
                values.push(sqlite_value(r.get_ref(i)?)?);
            }
            out.push(Row { values });
        }
        Ok(out)
    }

    fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.conn.execute_batch(sql)?)
    }

    fn begin(&mut self, durable: bool) -> Result<(), StoreError> {
        // Only batches someone waits on pay for an fsync. SQLite runs with
        // NORMAL (a commit appends its WAL frames unsynced) and a durable
        // commit syncs the WAL file itself, which covers every frame
        // appended before it: one fsync per durable batch, and no pragma
        // switch between durable and best-effort batches.
        if self.synced {
            self.conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
            self.synced = false;
        }
        self.durable = durable;
        self.changes_at_begin = self.conn.total_changes();
        // Cached like any statement: every commit begins, and preparing
        // the text again each time showed in a lone commit's profile.
        self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(())
    }

    fn begin_now(&mut self, durable: bool) -> Result<bool, StoreError> {
        self.conn.busy_timeout(std::time::Duration::ZERO)?;
        let begun = self.begin(durable);
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        match begun {
            Ok(()) => Ok(true),
            Err(StoreError::Sqlite(e))
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        // A transaction that changed no row wrote no WAL frame.
        if self.conn.total_changes() != self.changes_at_begin {
            self.unsynced = true;
        }
        // One look at the WAL per commit: the file to sync, and the size
        // the bound reads ([`Db::bound_wal`], [`Db::wal_over_bound`]).
        if self.durable && self.unsynced {
            self.wal_len = self.look_at_wal(true)?;
            self.unsynced = false;
        } else if self.wal_limit.is_some() {
            // A size that cannot be read leaves the WAL unbounded this once.
            self.wal_len = self.look_at_wal(false).unwrap_or(0);
        }
        Ok(())
    }

    fn data_version(&mut self) -> Result<Option<i64>, StoreError> {
        let mut stmt = self.conn.prepare_cached("PRAGMA data_version")?;
        Ok(Some(stmt.query_row([], |r| r.get::<_, i64>(0))?))
    }

    fn rollback(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    fn lock_chain(&mut self) -> Result<(), StoreError> {
        Ok(()) // BEGIN IMMEDIATE already holds the database's write lock
    }

    fn is_broken(&self) -> bool {
        false
    }

    fn checkpoint(&mut self) -> Result<bool, StoreError> {
        self.conn.busy_timeout(CHECKPOINT_WAIT)?;
        let busy = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            });
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        Ok(busy? == 0)
    }

    fn wal_over_bound(&mut self) -> bool {
        self.wal_limit.is_some() && self.wal_len > self.checkpoint_above
    }

    fn bound_wal(&mut self) {
        let Some(limit) = self.wal_limit else { return };
        let size = self.wal_len;
        if size <= self.checkpoint_above {
            return;
        }
        match self.checkpoint() {
            Ok(true) => self.checkpoint_above = limit,
            Ok(false) => {
                tracing::debug!(
                    wal_bytes = size,
                    "WAL checkpoint kept from completing by readers"
                );
                self.checkpoint_above = size.saturating_add(limit);
            }
            Err(e) => {
                tracing::warn!(error = %e, "WAL checkpoint failed");
                self.checkpoint_above = size.saturating_add(limit);
            }
        }
    }
}

// ------------------------------------------------------------ PostgreSQL --

/// Where a PostgreSQL store lives: the server and the schema in it.
#[derive(Clone, Debug)]
pub struct PgTarget {
    /// Connection settings (the URL without our own `schema` parameter).
    pub config: postgres::Config,
    /// The schema every table lives in (`public` unless `?schema=` says).
    pub schema: String,
    /// The URL with any password masked, for messages.
    pub display: String,
}

impl PgTarget {
    /// Parses `postgres://…[?schema=name&…]`. The `schema` parameter is
    /// ours; everything else is the server's connection string.
    pub fn parse(url: &str) -> Result<PgTarget, StoreError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = "public".to_string();
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("schema", v)) => schema = v.to_string(),
                _ => rest.push(pair),
            }
        }
        if schema.is_empty()
            || schema.len() > 63
            || !schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(StoreError::Invalid(format!(
                "database url: schema `{schema}` must be 1-63 of [A-Za-z0-9_]"
            )));
        }
        let cleaned = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: postgres::Config = cleaned
            .parse()
            .map_err(|e| StoreError::Invalid(format!("database url: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(5));
        }
        config.application_name("cedargate");
        Ok(PgTarget {
            config,
            schema,
            display: mask_password(url),
        })
    }

    /// Opens a connection whose `search_path` is the store's schema.
    pub fn connect(&self) -> Result<PgConn, StoreError> {
        let mut client = self.config.connect(postgres::NoTls)?;
        // (a client dropped here, on failure, is on a blocking thread)
        client.batch_execute(&format!("SET search_path TO \"{}\"", self.schema))?;
        Ok(PgConn {
            client: Some(client),
            statements: HashMap::new(),
            chain_key: chain_lock_key(&self.schema),
            in_transaction: false,
        })
    }
}

/// `postgres://user:secret@host` → `postgres://user:***@host`.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// The advisory-lock key of a schema's decision chain (stable across
/// instances and versions: the first 8 bytes of SHA-256).
fn chain_lock_key(schema: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("cedargate.decisions.{schema}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
    i64::from_be_bytes(bytes)
}

/// Prepared statements kept per PostgreSQL connection.
const PG_STATEMENT_CACHE: usize = 256;

/// A PostgreSQL connection with its prepared-statement cache.
pub struct PgConn {
    /// Dropped by hand: closing a sync client blocks on its own runtime,
    /// which panics on a thread that drives async tasks.
    client: Option<postgres::Client>,
    statements: HashMap<String, postgres::Statement>,
    chain_key: i64,
    /// A transaction is open (so a failure must roll it back).
    in_transaction: bool,
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConn")
            .field("statements", &self.statements.len())
            .finish_non_exhaustive()
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // On a runtime thread: close the connection elsewhere.
            let _ = std::thread::Builder::new()
                .name("cedargate-pg-close".into())
                .spawn(move || drop(client));
        } else {
            drop(client);
        }
    }
}

impl PgConn {
    fn cl(&mut self) -> Result<&mut postgres::Client, StoreError> {
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("connection closed".into()))
    }

    fn closed(&self) -> bool {
        self.client.as_ref().is_none_or(postgres::Client::is_closed)
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, StoreError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let stmt = self.cl()?.prepare(&to_dollar_placeholders(sql))?;
        if self.statements.len() >= PG_STATEMENT_CACHE {
            self.statements.clear();
        }
        self.statements.insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    /// The underlying client (LISTEN and other PostgreSQL-only work).
    pub fn client(&mut self) -> Result<&mut postgres::Client, StoreError> {
        self.cl()
    }
}

/// Rewrites `?N` (and bare `?`) placeholders to PostgreSQL's `$N`, leaving
/// string literals and quoted identifiers alone.
pub fn to_dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut next_bare = 1;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                out.push('$');
                if digits.is_empty() {
                    out.push_str(&next_bare.to_string());
                    next_bare += 1;
                } else {
                    out.push_str(&digits);
                }
            }
            None => out.push(c),
        }
    }
    out
}

impl postgres::types::ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::{IsNull, Type};
        match *self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(i) => match *ty {
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                #[allow(
                    clippy::cast_precision_loss,
                    reason = "integer bound to a float column"
                )]
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Param::Real(f) => match *ty {
                #[allow(clippy::cast_possible_truncation, reason = "float4 column")]
                Type::FLOAT4 => (f as f32).to_sql(ty, out),
                _ => f.to_sql(ty, out),
            },
            Param::Text(s) => s.to_sql(ty, out),
            Param::Blob(b) => b.to_sql(ty, out),
        }
    }

    fn accepts(_ty: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn pg_value(row: &postgres::Row, i: usize) -> Result<Value, StoreError> {
    use postgres::types::Type;
    let ty = row.columns().get(i).map(|c| c.type_().clone());
    let v = match ty {
        Some(Type::INT8) => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Some(Type::INT4) => row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| Value::Int(i64::from(v))),
        Some(Type::INT2) => row
            .try_get::<_, Option<i16>>(i)?
            .map(|v| Value::Int(i64::from(v))),
        Some(Type::BOOL) => row
            .try_get::<_, Option<bool>>(i)?
            .map(|v| Value::Int(i64::from(v))),
        Some(Type::FLOAT8) => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Some(Type::FLOAT4) => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| Value::Real(f64::from(v))),
        Some(Type::BYTEA) => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob),
        Some(Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR) => {
            row.try_get::<_, Option<String>>(i)?.map(Value::Text)
        }
        other => {
            return Err(StoreError::Corrupt(format!(
                "column {i} has unsupported type {other:?}"
            )));
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

fn pg_params<'a>(params: &'a [Param<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|p| p as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

impl Db for PgConn {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let stmt = self.statement(sql)?;
        Ok(self.cl()?.execute(&stmt, &pg_params(params))?)
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        let stmt = self.statement(sql)?;
        let rows = self.cl()?.query(&stmt, &pg_params(params))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| pg_value(r, i))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|values| Row { values })
            })
            .collect()
    }

    fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.cl()?.batch_execute(sql)?)
    }

    fn begin(&mut self, durable: bool) -> Result<(), StoreError> {
        // An asynchronous commit is still ordered in the WAL: the next
        // synchronous commit flushes the WAL up to itself, covering it.
        let sql = if durable {
            "BEGIN"
        } else {
            "BEGIN; SET LOCAL synchronous_commit TO OFF"
        };
        self.cl()?.batch_execute(sql)?;
        self.in_transaction = true;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.in_transaction = false;
        Ok(self.cl()?.batch_execute("COMMIT")?)
    }

    fn rollback(&mut self) {
        if std::mem::take(&mut self.in_transaction)
            && let Some(c) = self.client.as_mut().filter(|c| !c.is_closed())
        {
            let _ = c.batch_execute("ROLLBACK");
        }
    }

    fn lock_chain(&mut self) -> Result<(), StoreError> {
        let key = self.chain_key;
        self.cl()?
            .execute("SELECT pg_advisory_xact_lock($1)", &[&key])?;
        Ok(())
    }

    fn is_broken(&self) -> bool {
        self.closed()
    }
}

/// r2d2 manager for pooled PostgreSQL connections.
#[derive(Debug)]
pub struct PgManager {
    target: PgTarget,
}

impl PgManager {
    /// A manager connecting to `target`.
    pub fn new(target: PgTarget) -> Self {
        PgManager { target }
    }
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = StoreError;

    fn connect(&self) -> Result<PgConn, StoreError> {
        self.target.connect()
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), StoreError> {
        conn.cl()?.simple_query("")?;
        Ok(())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.closed()
    }
}

/// Where a store lives, parsed from the configured URL.
#[derive(Clone, Debug)]
pub enum Location {
    /// `sqlite://path` (relative to the working directory) or a plain path.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`.
    Postgres(Box<PgTarget>),
}

impl Location {
    /// Parses a database URL.
    pub fn parse(url: &str) -> Result<Location, StoreError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::Invalid(
                    "database url: `sqlite://` needs a file path".into(),
                ));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Location::Postgres(Box::new(PgTarget::parse(url)?)));
        }
        Err(StoreError::Invalid(format!(
            "database url `{}` must start with sqlite:// or postgres://",
            mask_password(url)
        )))
    }

    /// The backend this location is on.
    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }

    /// For messages (no password).
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(p) => format!("sqlite://{}", p.display()),
            Location::Postgres(t) => t.display.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_is_found_by_its_links_and_size_and_reopened_once_unlinked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut conn = SqliteConn::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x TEXT)").unwrap();
        conn.begin(true).unwrap();
        conn.execute("INSERT INTO t VALUES (?1)", &[Param::Text("a row")])
            .unwrap();
        conn.commit().unwrap();
        let wal = dir.path().join("t.db-wal");
        let on_disk = std::fs::metadata(&wal).unwrap().len();
        assert!(on_disk > 0);
        assert_eq!(conn.wal_size(), on_disk);

        // The held file unlinked (as when SQLite deletes the WAL and a later
        // connection creates another): its link count reads 0, and the next
        // look opens the file that is there now.
        let held = conn.wal_file.as_ref().unwrap().try_clone().unwrap();
        std::fs::remove_file(&wal).unwrap();
        assert_eq!(links_and_size(&held), Some((0, on_disk)));
        std::fs::write(&wal, b"0123456789").unwrap();
        assert_eq!(conn.wal_size(), 10);
        assert_eq!(
            links_and_size(conn.wal_file.as_ref().unwrap()),
            Some((1, 10))
        );
        // The fallback without `statx` reads the same.
        let now = conn.wal_file.as_ref().unwrap();
        assert_eq!(fstat_links_and_size(now), Some((1, 10)));
        assert_eq!(fstat_links_and_size(&held), Some((0, on_disk)));
    }

    #[test]
    fn placeholders_become_dollar_numbers_outside_quotes() {
        assert_eq!(
            to_dollar_placeholders("SELECT a FROM t WHERE b = ?2 AND c = ?1 AND d = '?3'"),
            "SELECT a FROM t WHERE b = $2 AND c = $1 AND d = '?3'"
        );
        assert_eq!(to_dollar_placeholders("VALUES (?, ?)"), "VALUES ($1, $2)");
    }

    #[test]
    fn urls_choose_the_backend_and_keep_the_schema_out_of_the_connection() {
        assert_eq!(
            Location::parse("sqlite://data/x.db").unwrap().backend(),
            Backend::Sqlite
        );
        let Location::Postgres(t) =
            Location::parse("postgres://u:pw@127.0.0.1:5432/test?schema=t_1&sslmode=disable")
                .unwrap()
        else {
            panic!("not postgres");
        };
        assert_eq!(t.schema, "t_1");
        assert_eq!(
            t.display,
            "postgres://u:***@127.0.0.1:5432/test?schema=t_1&sslmode=disable"
        );
        assert_eq!(t.config.get_dbname(), Some("test"));
        assert!(Location::parse("mysql://x").is_err());
        assert!(Location::parse("postgres://h/db?schema=a;drop").is_err());
    }

    /// FTS5 looks up a term's leaf page with this statement, binding one
    /// segment id after another; a re-prepare per bind cost a recall about
    /// a sixth of its CPU.
    #[test]
    fn a_statement_is_not_re_prepared_when_a_new_value_is_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = SqliteConn::open(&dir.path().join("q.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE idx (segid, term, pgno, PRIMARY KEY (segid, term)) WITHOUT ROWID;
             INSERT INTO idx VALUES (1, 'a', 2), (2, 'a', 4), (3, 'b', 6);",
        )
        .unwrap();
        let sql = "SELECT pgno FROM idx WHERE segid=?1 AND term<=?2 ORDER BY term DESC LIMIT 1";
        let mut pages = Vec::new();
        for segid in [1_i64, 2, 1, 3, 1] {
            let rows = conn.query(sql, params![segid, "b"]).unwrap();
            pages.push(rows.first().map(|r| r.get::<i64>(0).unwrap()));
        }
        assert_eq!(pages, [Some(2), Some(4), Some(2), Some(6), Some(2)]);
        assert_eq!(conn.reprepares(sql).unwrap(), 0);
    }

    #[test]
    fn chain_lock_keys_differ_per_schema() {
        assert_ne!(chain_lock_key("public"), chain_lock_key("t_1"));
        assert_eq!(chain_lock_key("public"), chain_lock_key("public"));
    }
}
