//! PostgreSQL for tests: a schema of its own per test on the machine's
//! shared server (so parallel tests never see each other's tables), and a
//! throwaway private cluster for the tests that must stop or restart the
//! database without touching the shared server.
//!
//! The `postgres` client runs its own tokio runtime and panics when called
//! on a runtime thread, so every helper here that talks to a server does so
//! on a plain thread: they are all safe to call from `#[tokio::test]`s.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::str::FromStr;
use std::time::Duration;

/// Where the PostgreSQL server binaries live on Debian.
const PG_LIB: &str = "/usr/lib/postgresql";

/// How long a connection attempt may take before a test gives up on it
/// (an unreachable server must skip or fail quickly, not hang).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared server: `CG_TEST_PG_URL`, or the machine's local one.
pub fn shared_url() -> String {
    std::env::var("CG_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Whether the suite runs against PostgreSQL (`CG_TEST_BACKEND=postgres`)
/// instead of the default SQLite store.
pub fn backend_is_postgres() -> bool {
    std::env::var("CG_TEST_BACKEND").is_ok_and(|v| v == "postgres")
}

/// Whether we run under CI (`CI=true`), where a missing PostgreSQL must
/// fail a test rather than skip it.
pub fn in_ci() -> bool {
    super::skip::in_ci()
}

/// Panics under CI; elsewhere reports the test skipped, and why, where
/// `cargo test` shows it ([`super::skip`]). The caller returns right after.
pub fn skip_unless_ci(why: &str) {
    super::skip::skipped(&format!("PostgreSQL unavailable: {why}"));
}

/// Splits the gateway's `schema` query parameter off `url`: the `postgres`
/// crate rejects parameters it does not know.
pub fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.strip_prefix("schema=") {
            Some(s) => {
                schema = Some(s.to_string());
                false
            }
            None => !kv.is_empty(),
        })
        .collect();
    if rest.is_empty() {
        (base.to_string(), schema)
    } else {
        (format!("{base}?{}", rest.join("&")), schema)
    }
}

/// `name` quoted as an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `e` with its causes: the client's own message alone ("error connecting
/// to server") does not say what went wrong.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// Runs `f` on a plain thread (never a tokio one) and waits for it; scoped,
/// so `f` may borrow from the caller.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .map_err(|_| "the PostgreSQL helper thread panicked".to_string())
    })
}

/// Connects to `url` (its `schema` parameter, if any, becomes the
/// `search_path`) and runs `f` with the client, off the tokio runtime.
pub fn with_client<T, F>(url: &str, f: F) -> Result<T, String>
where
    T: Send,
    F: FnOnce(&mut postgres::Client) -> Result<T, postgres::Error> + Send,
{
    off_runtime(|| {
        let (plain, schema) = split_schema(url);
        let mut config =
            postgres::Config::from_str(&plain).map_err(|e| format!("bad URL {plain}: {e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let mut client = config
            .connect(postgres::NoTls)
            .map_err(|e| format!("cannot connect to {plain}: {}", describe(&e)))?;
        if let Some(s) = schema {
            client
                .batch_execute(&format!("SET search_path TO {}", quote_ident(&s)))
                .map_err(|e| format!("cannot set search_path to {s}: {}", describe(&e)))?;
        }
        f(&mut client).map_err(|e| format!("on {url}: {}", describe(&e)))
    })?
}

/// Creates a new empty schema on the server `base` names and returns `base`
/// with `schema=<it>` added, so each test gets tables nobody else sees.
pub fn try_fresh_schema_url(base: &str) -> Result<String, String> {
    // Creation time first (8 hex digits of Unix seconds), so a sweep can
    // drop what earlier runs left behind (a test that panicked mid-way, a
    // gateway stopped and never restarted).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let name = format!(
        "t_{:08x}{}",
        now & 0xffff_ffff,
        cedargate::ids::random_hex(4).map_err(|e| format!("no randomness: {e}"))?
    );
    let sql = format!("CREATE SCHEMA {}", quote_ident(&name));
    let (plain, _) = split_schema(base);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| sweep_stale_schemas(&plain, now));
    with_client(&plain, |c| c.batch_execute(&sql))?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{sep}schema={name}"))
}

/// Drops test schemas created more than two hours before `now` (no test
/// run lasts that long). Best effort.
fn sweep_stale_schemas(plain: &str, now: u64) {
    let stale = with_client(plain, |c| {
        let rows = c.query(
            "SELECT nspname FROM pg_namespace WHERE nspname ~ '^t_[0-9a-f]{16}$'",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>())
    })
    .unwrap_or_default()
    .into_iter()
    .filter(|name| {
        name.get(2..10)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .is_some_and(|t| t + 7200 < (now & 0xffff_ffff))
    });
    for name in stale {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", quote_ident(&name));
        let _ = with_client(plain, |c| c.batch_execute(&sql));
    }
}

/// Like [`try_fresh_schema_url`], panicking (the test fails) when the
/// server cannot be reached.
pub fn fresh_schema_url(base: &str) -> String {
    try_fresh_schema_url(base)
        .unwrap_or_else(|e| panic!("cannot create a test schema on {base}: {e}"))
}

/// Drops the schema a [`fresh_schema_url`] URL names, with its tables.
/// Best effort: cleanup must never fail a test.
pub fn drop_schema(url_with_schema: &str) {
    let (plain, schema) = split_schema(url_with_schema);
    let Some(schema) = schema else {
        return;
    };
    let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", quote_ident(&schema));
    if let Err(e) = with_client(&plain, |c| c.batch_execute(&sql)) {
        eprintln!("could not drop test schema {schema}: {e}");
    }
}

/// A fresh schema that is dropped when this goes out of scope, even when
/// the test panics, so failed runs leave nothing on the shared server.
pub struct FreshSchema {
    /// The server URL with `schema=<name>` added.
    pub url: String,
}

impl FreshSchema {
    /// A new schema on the server `base` names.
    pub fn new(base: &str) -> Result<FreshSchema, String> {
        try_fresh_schema_url(base).map(|url| FreshSchema { url })
    }
}

impl Drop for FreshSchema {
    fn drop(&mut self) {
        drop_schema(&self.url);
    }
}

/// The newest installed PostgreSQL's `bin` directory.
fn pg_bin_dir() -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(PG_LIB)
        .map_err(|e| format!("no PostgreSQL server binaries: cannot list {PG_LIB}: {e}"))?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<f64>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, bin)| bin)
        .ok_or_else(|| format!("no PostgreSQL server binaries: no {PG_LIB}/<version>/bin/initdb"))
}

/// Whether we run as root (initdb and postgres refuse to).
fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A port nobody listens on right now (bound, then released).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Runs `cmd`, turning a failure into a message naming it, with its output.
fn run(mut cmd: Command) -> Result<Output, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{shown} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    }
}

/// A private PostgreSQL server in a temporary directory, for tests that
/// stop or restart the database: doing that to the machine's shared server
/// would break every other test running at the time. Stopped (immediately)
/// and deleted on drop.
pub struct PrivateCluster {
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    port: u16,
    as_postgres: bool,
    /// Holds data dir, socket dir and log; dropped after the server stops.
    root: tempfile::TempDir,
}

impl PrivateCluster {
    /// Initialises and starts a new cluster on a free port. Errors say which
    /// step failed and why; callers skip outside CI or fail under it.
    pub fn start() -> Result<PrivateCluster, String> {
        let bin = pg_bin_dir()?;
        let as_postgres = running_as_root();
        // Under /tmp, not $TMPDIR: the `postgres` user must reach it.
        let root = tempfile::Builder::new()
            .prefix("cedargate-pg-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("cannot create a directory under /tmp: {e}"))?;
        let socket = root.path().join("sock");
        std::fs::create_dir(&socket).map_err(|e| format!("cannot create {socket:?}: {e}"))?;
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("-R").arg("postgres:postgres").arg(root.path());
            run(chown)?;
        }
        let mut cluster = PrivateCluster {
            data: root.path().join("data"),
            log: root.path().join("server.log"),
            socket,
            bin,
            port: 0,
            as_postgres,
            root,
        };
        let mut initdb = cluster.command("initdb");
        initdb
            .arg("-D")
            .arg(&cluster.data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8", "--no-locale"]);
        run(initdb)?;
        // The free port may be taken between probing and binding: retry.
        let mut last = String::new();
        for _ in 0..3 {
            cluster.port = free_port()?;
            match cluster.start_again() {
                Ok(()) => return Ok(cluster),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connection URL (the cluster's `postgres` database; stable across
    /// restarts).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server, letting sessions end (`-m fast`), and waits.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl_stop("fast")
    }

    /// Starts the stopped server again on the same port, and waits until it
    /// accepts connections.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.port,
            self.socket.display()
        );
        let mut start = self.command("pg_ctl");
        start
            .arg("start")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(options)
            .arg("-w");
        run(start).map(|_| ()).map_err(|e| {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })
    }

    /// Stops then starts the server.
    pub fn restart(&self) -> Result<(), String> {
        self.stop()?;
        self.start_again()
    }

    /// `pg_ctl stop` in `mode`, waiting for the server to be gone.
    fn pg_ctl_stop(&self, mode: &str) -> Result<(), String> {
        let mut stop = self.command("pg_ctl");
        stop.arg("stop")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", mode, "-w"]);
        run(stop).map(|_| ())
    }

    /// One of the server binaries, as `postgres` when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("/usr/sbin/runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        // The test's own cwd may be closed to the `postgres` user.
        cmd.current_dir(self.root.path());
        cmd
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let _ = self.pg_ctl_stop("immediate");
        }
        // `root` is removed after this, with the server already gone.
    }
}
