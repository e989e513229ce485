//! The policy-lifecycle and auditor commands: `policy validate|fmt|test`,
//! `schema print`, `audit query|replay|export|verify`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

use crate::config::Config;
use crate::lifecycle::{CandidateError, tool_schemas};
use crate::policy::load;
use crate::policy::tests_runner;
use crate::store::audit_query::{self, DecisionFilter, Order};
use crate::store::{Store, decisions};
use crate::tools::Catalog;

/// `policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Strictly validate the policies against the effective schema.
    Validate(PolicyDir),
    /// Format the policy files with the Cedar formatter.
    Fmt {
        /// The directory (default: the configured one).
        #[command(flatten)]
        dir: PolicyDir,
        /// Change nothing; exit 1 when a file is not formatted.
        #[arg(long)]
        check: bool,
    },
    /// Compare a candidate policy directory with the live one: the policies
    /// it adds, removes and changes; with `--prove`, per request
    /// environment, what it allows that the live set denies and the other
    /// way round, each with a counterexample.
    Diff(super::prove::DiffArgs),
    /// Find dead policies, redundant permits, permits forbids shadow
    /// entirely and policies that can error, each proved by the solver.
    Lint(super::prove::LintArgs),
    /// Run the policy tests under `<policies>/tests` (Cedar `run-tests` format).
    Test {
        /// The directory (default: the configured one).
        #[command(flatten)]
        dir: PolicyDir,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--policies DIR`
#[derive(Debug, Args)]
pub struct PolicyDir {
    /// Policy directory (default: `policies_dir` of the config).
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
}

impl PolicyDir {
    fn resolve(&self, config: &Config) -> PathBuf {
        self.policies
            .clone()
            .unwrap_or_else(|| config.policies_dir.clone())
    }
}

/// `schema …`
#[derive(Debug, Subcommand)]
pub enum SchemaCmd {
    /// Print the effective schema (the schema file plus the typed tool actions).
    Print,
}

/// Time, org and action filters shared by the audit commands.
#[derive(Debug, Args, Clone)]
pub struct RangeArgs {
    /// Earliest decision time (RFC 3339, inclusive).
    #[arg(long)]
    pub since: Option<String>,
    /// Latest decision time (RFC 3339, exclusive).
    #[arg(long)]
    pub until: Option<String>,
    /// Only this org.
    #[arg(long)]
    pub org: Option<String>,
    /// Only this action (e.g. `call_tool`).
    #[arg(long)]
    pub action: Option<String>,
}

impl RangeArgs {
    fn filter(&self) -> Result<DecisionFilter, CommandError> {
        DecisionFilter {
            org: self.org.clone(),
            action: self.action.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
            ..DecisionFilter::default()
        }
        .normalized()
        .map_err(CommandError::Filter)
    }
}

/// `audit query` flags: the filters of `GET /admin/decisions`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// Only the decisions of this W3C trace (32 hex digits: the caller's
    /// trace, or the one the gateway started, as the console shows it).
    #[arg(long, value_name = "ID")]
    pub trace: Option<String>,
    /// Only this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only `allow` or `deny`.
    #[arg(long)]
    pub decision: Option<String>,
    /// Time, org and action.
    #[command(flatten)]
    pub range: RangeArgs,
    /// At most this many decisions.
    #[arg(short = 'n', long, default_value_t = 100)]
    pub limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

/// `audit query`: the matching decisions, oldest first, one line each.
pub fn query(config: &Config, args: &QueryArgs) -> ExitCode {
    let filter = DecisionFilter {
        org: args.range.org.clone(),
        session: args.session.clone(),
        action: args.range.action.clone(),
        decision: args.decision.clone(),
        since: args.range.since.clone(),
        until: args.range.until.clone(),
        trace: args.trace.clone(),
        ..DecisionFilter::default()
    }
    .normalized();
    let filter = match filter {
        Ok(f) => f,
        Err(e) => return failed(&CommandError::Filter(e)),
    };
    let store = match open_store(config) {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    let limit = args.limit.max(1);
    let found = store
        .read_blocking(move |c| audit_query::page_filtered(c, &filter, None, Order::Asc, limit));
    match found {
        Ok(decisions) => {
            for d in decisions {
                if args.json {
                    println!("{}", serde_json::to_string(&d).unwrap_or_default());
                } else {
                    println!("{}", crate::audit::format_line(&d));
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => failed(&CommandError::Store(e)),
    }
}

/// Why a command could not get started; printed as `error: …`.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    /// The built-in tool catalog does not load.
    #[error(transparent)]
    Catalog(#[from] crate::tools::InvalidSchema),
    /// A decision filter is invalid.
    #[error(transparent)]
    Filter(#[from] crate::store::audit_query::FilterError),
    /// The store cannot be opened.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Replay output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayFormat {
    /// A readable table.
    Table,
    /// The full report as JSON.
    Json,
}

/// `audit replay` flags.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The candidate policy directory to replay under.
    #[arg(long, value_name = "DIR", required_unless_present = "recorded")]
    pub policies: Option<PathBuf>,
    /// Replay each decision under the policy set that made it instead.
    #[arg(long, conflicts_with = "policies")]
    pub recorded: bool,
    /// Only the decisions of this decision application; with `--policies`,
    /// DIR is a candidate folder of that application (`schema.cedarschema`,
    /// `policies/`), each decision decided on the entity data it was
    /// decided on.
    #[arg(long, value_name = "APP")]
    pub app: Option<String>,
    /// Which decisions.
    #[command(flatten)]
    pub range: RangeArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReplayFormat::Table)]
    pub format: ReplayFormat,
    /// Exit 1 when any decision flips (for CI gates on policy changes).
    #[arg(long)]
    pub fail_on_flip: bool,
}

/// `audit export` flags.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// `jsonl` (stored records) or `ocsf` (OCSF events).
    #[arg(long, value_enum, default_value_t = crate::audit::export::Format::Jsonl)]
    pub format: crate::audit::export::Format,
    /// Which decisions.
    #[command(flatten)]
    pub range: RangeArgs,
}

/// `audit verify` flags.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Verify from the first decision at or after this time.
    #[arg(long, conflicts_with = "from_seq")]
    pub since: Option<String>,
    /// Verify up to the last decision before this time.
    #[arg(long, conflicts_with = "to_seq")]
    pub until: Option<String>,
    /// Verify from this chain position.
    #[arg(long)]
    pub from_seq: Option<i64>,
    /// Verify up to this chain position.
    #[arg(long)]
    pub to_seq: Option<i64>,
    /// Verify an archive file written by `audit archive` on its own
    /// (no database needed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "until", "from_seq", "to_seq"])]
    pub archive: Option<PathBuf>,
    /// Also check the trail against its signed checkpoints with this
    /// public key, in verifier-key form `name+id+base64` as `audit key`
    /// prints it (repeat for each key that signed: one per instance that
    /// does not share the key file).
    #[arg(long = "key", value_name = "PUBKEY", conflicts_with = "archive")]
    pub key: Vec<String>,
    /// Also check the checkpoints of this file (a copy kept by `audit
    /// checkpoints --out`).
    #[arg(
        long,
        value_name = "FILE",
        requires = "key",
        conflicts_with = "archive"
    )]
    pub checkpoints: Option<PathBuf>,
}

fn catalog() -> Result<Catalog, CommandError> {
    Catalog::builtin().map_err(CommandError::Catalog)
}

/// Runs a `policy` command.
pub fn policy(config: &Config, cmd: &PolicyCmd) -> ExitCode {
    match cmd {
        PolicyCmd::Validate(dir) => validate(config, &dir.resolve(config)),
        PolicyCmd::Fmt { dir, check } => fmt(&dir.resolve(config), *check),
        PolicyCmd::Test { dir, json } => test(config, &dir.resolve(config), *json),
        PolicyCmd::Diff(args) => super::prove::diff(config, args),
        PolicyCmd::Lint(args) => super::prove::lint(config, args),
    }
}

fn validate(config: &Config, dir: &Path) -> ExitCode {
    let tools = match catalog() {
        Ok(c) => tool_schemas(&c),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match load::load_bundle_with_tools(&config.schema_file, dir, &tools) {
        Ok(b) => {
            for w in &b.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "policy set valid: {} policies, hash {}",
                b.policy_ids.len(),
                b.hash
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::FAILURE
        }
    }
}

fn fmt(dir: &Path, check: bool) -> ExitCode {
    let files = match load::read_policy_files(dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}", e.render());
            return ExitCode::FAILURE;
        }
    };
    let mut unformatted = 0;
    let mut failed = false;
    for file in &files {
        match crate::policy::fmt::format_file(file) {
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
            Ok(f) if !f.changed => {}
            Ok(f) if check => {
                unformatted += 1;
                println!("would reformat {}", f.path);
            }
            Ok(f) => match std::fs::write(&f.path, &f.text) {
                Ok(()) => println!("formatted {}", f.path),
                Err(e) => {
                    eprintln!("error: cannot write `{}`: {e}", f.path);
                    failed = true;
                }
            },
        }
    }
    if failed || (check && unformatted > 0) {
        if check && unformatted > 0 {
            eprintln!("{unformatted} file(s) are not formatted; run `cedargate policy fmt`");
        }
        return ExitCode::FAILURE;
    }
    if check {
        println!("{} file(s) formatted", files.len());
    }
    ExitCode::SUCCESS
}

fn test(config: &Config, dir: &Path, json: bool) -> ExitCode {
    let tools = match catalog() {
        Ok(c) => tool_schemas(&c),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bundle = match load::load_bundle_with_tools(&config.schema_file, dir, &tools) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{}", CandidateError::Policies(e));
            return ExitCode::FAILURE;
        }
    };
    let report = match tests_runner::run_dir(&bundle, dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        println!("running {} test(s)", report.outcomes.len());
        for o in &report.outcomes {
            match &o.message {
                None => println!("  test {} :: {} ... ok", o.file, o.name),
                Some(m) => println!("  test {} :: {} ... FAILED: {m}", o.file, o.name),
            }
        }
        println!("{} passed, {} failed", report.passed(), report.failed());
    }
    if report.outcomes.is_empty() {
        eprintln!(
            "warning: no policy tests under `{}`",
            dir.join(tests_runner::TESTS_DIR).display()
        );
    }
    if report.failed() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs a `schema` command.
pub fn schema(config: &Config, cmd: &SchemaCmd) -> ExitCode {
    let SchemaCmd::Print = cmd;
    let tools = match catalog() {
        Ok(c) => tool_schemas(&c),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let file = config.schema_file.display().to_string();
    let text = match std::fs::read_to_string(&config.schema_file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read schema `{file}`: {e}");
            return ExitCode::FAILURE;
        }
    };
    match load::effective_schema(&file, &text, &tools) {
        Ok((effective, generated)) => {
            print!("{effective}");
            if !effective.ends_with('\n') {
                println!();
            }
            for n in &generated.notes {
                eprintln!("note: {n}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", e.render());
            ExitCode::FAILURE
        }
    }
}

/// Prints `error: …` and fails.
fn failed(e: &CommandError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

fn open_store(config: &Config) -> Result<Store, CommandError> {
    Ok(Store::open_ready(
        &config.database_url(),
        &config.store_options(),
    )?)
}

/// `audit replay`.
pub fn replay(config: &Config, args: &ReplayArgs) -> ExitCode {
    let filter = args.range.filter().and_then(|f| {
        DecisionFilter {
            application: args.app.clone(),
            ..f
        }
        .normalized()
        .map_err(CommandError::Filter)
    });
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let against = match replay_against(config, args) {
        Ok(a) => a,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let store = match open_store(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let control = crate::replay::Control::default();
    let replayed = super::progress::watched_by(
        "replaying",
        None,
        || control.records_read(),
        || store.read_blocking(|c| replay_counted(c, &filter, &against, &control)),
    );
    let report = match replayed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    report_replay(&report, args)
}

/// The replay, counting the records it read in `control`.
fn replay_counted(
    c: &mut crate::store::Conn,
    filter: &DecisionFilter,
    against: &crate::replay::Against,
    control: &crate::replay::Control,
) -> Result<crate::replay::ReplayReport, crate::store::StoreError> {
    crate::replay::replay_with(c, filter, against, control).map_err(|e| match e {
        crate::replay::ReplayError::Store(s) => s,
        crate::replay::ReplayError::Filter(f) => crate::store::StoreError::Invalid(f),
        e @ crate::replay::ReplayError::Cancelled(_) => {
            crate::store::StoreError::Invalid(e.to_string())
        }
    })
}

/// Prints a replay's report; the exit code it calls for.
fn report_replay(report: &crate::replay::ReplayReport, args: &ReplayArgs) -> ExitCode {
    match args.format {
        ReplayFormat::Table => print!("{}", crate::replay::render_table(report)),
        ReplayFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        ),
    }
    if !report.unreplayable.is_empty() {
        eprintln!(
            "error: {} decision(s) could not be replayed",
            report.unreplayable.len()
        );
        return ExitCode::FAILURE;
    }
    if args.fail_on_flip && report.flip_count() > 0 {
        eprintln!("{} decision(s) flipped", report.flip_count());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// What `audit replay` decides under: the recorded sets, a candidate of
/// the gateway's set, or a candidate folder of one application; a
/// candidate that does not load is the rendered error.
fn replay_against(config: &Config, args: &ReplayArgs) -> Result<crate::replay::Against, String> {
    let Some(dir) = &args.policies else {
        return Ok(crate::replay::Against::Recorded);
    };
    if let Some(app) = &args.app {
        let set = crate::policy::application::load::load_app(app, dir).map_err(|e| e.render())?;
        return Ok(crate::replay::Against::Application {
            name: app.clone(),
            bundle: set.bundle,
        });
    }
    let tools = catalog()
        .map(|c| tool_schemas(&c))
        .map_err(|e| format!("error: {e}"))?;
    load::load_bundle_with_tools(&config.schema_file, dir, &tools)
        .map(|b| crate::replay::Against::Candidate(Arc::new(b)))
        .map_err(|e| e.render())
}

/// `audit export`.
pub fn export(config: &Config, args: &ExportArgs) -> ExitCode {
    let filter = match args.range.filter() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let store = match open_store(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let exported = std::sync::atomic::AtomicU64::new(0);
    super::progress::watched("exporting", None, &exported, || {
        let mut cursor = None;
        loop {
            let rows = match store
                .read_blocking(|c| audit_query::page_filtered(c, &filter, cursor, Order::Asc, 4096))
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let Some(last) = rows.last() else { break };
            cursor = Some(last.seq);
            if crate::audit::export::write(&mut out, &rows, args.format).is_err() {
                // A closed pipe (`| head`) ends the export quietly.
                return ExitCode::SUCCESS;
            }
            exported.fetch_add(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        use std::io::Write as _;
        let _ = out.flush();
        ExitCode::SUCCESS
    })
}

/// `audit verify`.
pub fn verify(config: &Config, args: &VerifyArgs) -> ExitCode {
    if let Some(file) = &args.archive {
        return super::trail::verify_file(file);
    }
    let store = match open_store(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut times = Vec::new();
    for (name, t) in [("since", &args.since), ("until", &args.until)] {
        match t {
            None => times.push(None),
            Some(t) => match crate::ids::parse_rfc3339(t) {
                Ok(p) => times.push(Some(crate::ids::rfc3339(p))),
                Err(_) => {
                    eprintln!("error: `--{name}` must be an RFC 3339 time, not `{t}`");
                    return ExitCode::from(2);
                }
            },
        }
    }
    let (since, until) = (
        times.first().cloned().flatten(),
        times.get(1).cloned().flatten(),
    );
    let ranged = since.is_some() || until.is_some();
    // The bar's end: the chain's head (what an unbounded check walks to).
    let head = store
        .read_blocking(decisions::chain_head)
        .ok()
        .map(|h| u64::try_from(h.seq - h.anchor.0).unwrap_or(0));
    let checked = std::sync::atomic::AtomicU64::new(0);
    let result = super::progress::watched("verifying", head, &checked, || {
        verify_walk(
            &store,
            ranged,
            (since.as_deref(), until.as_deref()),
            args,
            &checked,
        )
    });
    report_verified(result)
}

/// The walk of `audit verify`: the range, the newest anchor, the report.
fn verify_walk(
    store: &Store,
    ranged: bool,
    (since, until): (Option<&str>, Option<&str>),
    args: &VerifyArgs,
    checked: &std::sync::atomic::AtomicU64,
) -> Result<Option<VerifiedRange>, crate::store::StoreError> {
    store.read_blocking(|c| {
        let (from, to) = if ranged {
            match audit_query::seq_range(c, since, until)? {
                Some(r) => r,
                None => return Ok(None),
            }
        } else {
            (args.from_seq.unwrap_or(1), args.to_seq.unwrap_or(i64::MAX))
        };
        let anchor = crate::store::retention::anchors(c)?.pop();
        decisions::verify_range_counted(c, from, to, checked).map(|r| Some((from, r, anchor)))
    })
}

/// The first seq checked, the report, and the newest archive anchor.
type VerifiedRange = (
    i64,
    decisions::VerifyReport,
    Option<crate::store::retention::Anchor>,
);

/// Prints what `audit verify` found; its exit code.
fn report_verified(result: Result<Option<VerifiedRange>, crate::store::StoreError>) -> ExitCode {
    match result {
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        Ok(None) => {
            println!("no decisions in that range");
            ExitCode::SUCCESS
        }
        Ok(Some((from, report, anchor))) => {
            if let Some(a) = &anchor {
                println!(
                    "records up to seq {} were archived (last archive: {} records, {} file sha256 {}, at {}); the chain verifies from the anchor hash {}",
                    a.seq, a.records, a.format, a.archive_sha256, a.archived_at, a.hash
                );
            }
            if report.problems.is_empty() {
                println!(
                    "decision trail intact: {} records verified (seq {}..{}, head hash {})",
                    report.checked,
                    if report.checked == 0 {
                        0
                    } else {
                        from.max(report.last_seq - report.checked + 1)
                    },
                    report.last_seq,
                    report.head_hash
                );
                ExitCode::SUCCESS
            } else {
                for p in &report.problems {
                    eprintln!("tampered: {p}");
                }
                eprintln!(
                    "decision trail verification FAILED: {} problem(s) in {} records",
                    report.problems.len(),
                    report.checked
                );
                ExitCode::FAILURE
            }
        }
    }
}
