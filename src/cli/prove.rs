//! `policy diff [--prove]`: what a candidate policy directory changes,
//! and, proved by the solver for every request environment, what it
//! allows that the live set denies; `policy lint --prove`: dead,
//! redundant, shadowed and erroring policies. Neither needs a running
//! gateway or a database: a security team runs them on a pull request.
//!
//! Exit status: 0 nothing widens (or `--allow-widening`); 1 the candidate
//! allows a request the live set denies; 2 it could not run (a set that
//! does not load, no solver); 3 no widening was found but some
//! environment was not settled in time ("unknown"); 4 the authorizer
//! decided a counterexample otherwise than the solver claimed (a bug,
//! whatever the flags).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::config::Config;
use crate::lifecycle::tool_schemas;
use crate::lifecycle::upstream_types::typed_upstream_tools;
use crate::policy::prove_diff::{self, DiffReport, Direction, EnvDiff, Verdict};
use crate::policy::prove_lint::{self, Finding, LintReport, Problem};
use crate::policy::prover::Prover;
use crate::policy::schema_gen::ToolSchema;
use crate::policy::set_diff::{self, PolicyChanges};
use crate::policy::solver::{self, Solver};
use crate::policy::witness::Witness;
use crate::policy::{PolicyBundle, load};
use crate::store::Store;
use crate::tools::Catalog;

/// Exit status when a widening is found.
const WIDENS: u8 = 1;
/// Exit status when the command cannot run.
const CANNOT_RUN: u8 = 2;
/// Exit status when some widening question was not settled.
const UNSETTLED: u8 = 3;
/// Exit status when the authorizer and the solver disagree.
const DISAGREES: u8 = 4;

/// The solver settings a proof command may override.
#[derive(Debug, Args)]
pub struct ProveLimits {
    /// Time one solver query may take, in ms (default: `[prove]
    /// query_timeout_ms`); past it the environment is "unknown".
    #[arg(long, value_name = "MS")]
    pub query_timeout_ms: Option<u64>,
    /// Time the whole proof may take, in seconds (default: `[prove]
    /// run_timeout_secs`).
    #[arg(long, value_name = "SECS")]
    pub run_timeout_secs: Option<u64>,
}

/// What the effective schema types besides the schema file and the
/// built-in tools.
#[derive(Debug, Args)]
pub struct Vocabulary {
    /// Also type the tools of the upstream MCP servers approved in the
    /// configured database, as the gateway does (off by default, so the
    /// command needs no database).
    #[arg(long)]
    pub upstreams: bool,
}

/// `policy diff` flags.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The candidate policy directory.
    #[arg(value_name = "CANDIDATE_DIR")]
    pub candidate: PathBuf,
    /// The live policy directory (default: `policies_dir` of the config).
    #[arg(long, value_name = "DIR")]
    pub live: Option<PathBuf>,
    /// Prove, for every request environment, what each set allows that the
    /// other denies (needs the solver, `bash solver/build.sh`).
    #[arg(long)]
    pub prove: bool,
    /// Exit 0 even when the candidate allows requests the live set denies.
    #[arg(long, requires = "prove")]
    pub allow_widening: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Solver limits.
    #[command(flatten)]
    pub limits: ProveLimits,
    /// The effective schema.
    #[command(flatten)]
    pub vocabulary: Vocabulary,
}

/// Runs `policy diff`.
pub fn diff(config: &Config, args: &DiffArgs) -> ExitCode {
    let live_dir = args
        .live
        .clone()
        .unwrap_or_else(|| config.policies_dir.clone());
    let loaded = tools(config, &args.vocabulary).and_then(|tools| {
        Ok((
            load_set(config, &live_dir, &tools)?,
            load_set(config, &args.candidate, &tools)?,
        ))
    });
    let (live, candidate) = match loaded {
        Ok(sets) => sets,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let changes = set_diff::changes(&live, &candidate);
    if !args.prove {
        if args.json {
            println!("{}", serde_json::json!({ "policies": changes }));
        } else {
            print!("{}", render_changes(&changes));
            println!("(pass --prove to prove what the change allows and denies)");
        }
        return ExitCode::SUCCESS;
    }
    let solver = match find_solver(config, &args.limits) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let run = run_limit(config, &args.limits);
    let report = match block_on(async {
        let mut prover = Prover::new(solver.clone(), run);
        prove_diff::diff(&live, &candidate, &mut prover).await
    }) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    report_diff(&report, &changes, &solver, args)
}

/// Prints the report and picks the exit status.
fn report_diff(
    report: &DiffReport,
    changes: &PolicyChanges,
    solver: &Solver,
    args: &DiffArgs,
) -> ExitCode {
    if args.json {
        let json = serde_json::json!({
            "policies": changes,
            "solver": { "path": solver.path, "version": solver.version },
            "proof": report,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
    } else {
        print!("{}", render_changes(changes));
        print!("{}", render_proof(report, solver));
    }
    let disagreements = report.disagreements();
    if disagreements > 0 {
        eprintln!(
            "BUG: the authorizer decided {disagreements} counterexample(s) otherwise than the solver claimed; the proof cannot be trusted (please report it with this output)"
        );
        return ExitCode::from(DISAGREES);
    }
    if report.widenings() > 0 && !args.allow_widening {
        eprintln!(
            "error: the candidate allows requests the live set denies in {} request environment(s); pass --allow-widening to accept that",
            report.widenings()
        );
        return ExitCode::from(WIDENS);
    }
    if report.unsettled() > 0 && !args.allow_widening {
        eprintln!(
            "error: {} request environment(s) were not settled within the limits: the candidate may widen there",
            report.unsettled()
        );
        return ExitCode::from(UNSETTLED);
    }
    ExitCode::SUCCESS
}

/// The tools the effective schema types: the built-in ones, and with
/// `--upstreams` those of the approved upstream servers in the database.
fn tools(config: &Config, vocabulary: &Vocabulary) -> Result<Vec<ToolSchema>, String> {
    let mut tools = Catalog::builtin()
        .map(|c| tool_schemas(&c))
        .map_err(|e| format!("error: {e}"))?;
    if vocabulary.upstreams {
        let store = Store::open_ready(&config.database_url(), &config.store_options())
            .map_err(|e| format!("error: --upstreams: {e}"))?;
        let (upstream, notes) = store
            .read_blocking(typed_upstream_tools)
            .map_err(|e| format!("error: --upstreams: {e}"))?;
        for note in notes {
            eprintln!("note: {note}");
        }
        tools.extend(upstream);
    }
    Ok(tools)
}

/// Loads one set under the effective schema of `tools`.
fn load_set(
    config: &Config,
    dir: &std::path::Path,
    tools: &[ToolSchema],
) -> Result<PolicyBundle, String> {
    load::load_bundle_with_tools(&config.schema_file, dir, tools).map_err(|e| e.render())
}

/// The solver, with the query limit of the flags or the config.
pub(super) fn find_solver(config: &Config, limits: &ProveLimits) -> Result<Solver, String> {
    let query = Duration::from_millis(
        limits
            .query_timeout_ms
            .unwrap_or(config.prove.query_timeout_ms),
    );
    match block_on(solver::find(config.prove.solver.as_deref(), query)) {
        Ok(found) => found.map_err(|e| e.to_string()),
        Err(e) => Err(format!("cannot start the runtime: {e}")),
    }
}

/// The run's time limit, from the flags or the config.
pub(super) fn run_limit(config: &Config, limits: &ProveLimits) -> Duration {
    Duration::from_secs(
        limits
            .run_timeout_secs
            .unwrap_or(config.prove.run_timeout_secs),
    )
}

/// Runs `future` on a runtime of its own (the proof commands are not
/// inside one).
pub(super) fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future))
}

/// The policies added, removed and changed.
fn render_changes(changes: &PolicyChanges) -> String {
    if changes.is_empty() {
        return "policies: none added, removed or changed\n".into();
    }
    let mut out = String::from("policies:\n");
    for (label, ids) in [
        ("added", &changes.added),
        ("removed", &changes.removed),
        ("changed", &changes.changed),
    ] {
        for id in ids {
            out.push_str(&format!("  {label:<8} {id}\n"));
        }
    }
    out
}

/// The proof, one line per environment and a witness under each flip.
fn render_proof(report: &DiffReport, solver: &Solver) -> String {
    let mut out = format!(
        "proof: cvc5 {} (`{}`), {} request environments, per-query limit {} ms\n",
        solver.version,
        solver.path.display(),
        report.envs.len(),
        solver.query_timeout.as_millis()
    );
    for a in &report.assumptions {
        out.push_str(&format!("  assuming {a}\n"));
    }
    let width = report
        .envs
        .iter()
        .map(|e| e.env.to_string().chars().count())
        .max()
        .unwrap_or(0);
    for env in &report.envs {
        out.push_str(&render_env(env, width));
    }
    out.push_str(&summary(report));
    out
}

fn render_env(env: &EnvDiff, width: usize) -> String {
    let name = env.env.to_string();
    let pad = width.saturating_sub(name.chars().count());
    let mut out = format!(
        "  {name}{}  {:<18} {:>6} ms\n",
        " ".repeat(pad),
        verdict_word(env.verdict),
        env.millis
    );
    for (which, label, direction) in [
        (
            "widening",
            "WIDENS: the candidate allows, the live set denies",
            &env.widening,
        ),
        (
            "narrowing",
            "narrows: the live set allows, the candidate denies",
            &env.narrowing,
        ),
    ] {
        match direction {
            Direction::None => {}
            Direction::Unknown { why } => out.push_str(&format!("    {which} unknown: {why}\n")),
            Direction::Found {
                witness,
                disagreement,
            } => {
                out.push_str(&format!("    {label}:\n"));
                out.push_str(&render_witness(witness, "      "));
                if let Some(d) = disagreement {
                    out.push_str(&format!("    BUG: {d}\n"));
                }
            }
        }
    }
    out
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Equivalent => "equivalent",
        Verdict::LessPermissive => "less permissive",
        Verdict::MorePermissive => "MORE PERMISSIVE",
        Verdict::Incomparable => "INCOMPARABLE",
        Verdict::Unknown => "unknown",
    }
}

fn summary(report: &DiffReport) -> String {
    let count = |v: Verdict| report.envs.iter().filter(|e| e.verdict == v).count();
    format!(
        "summary: {} equivalent, {} less permissive, {} more permissive, {} incomparable, {} unknown ({} ms)\n",
        count(Verdict::Equivalent),
        count(Verdict::LessPermissive),
        count(Verdict::MorePermissive),
        count(Verdict::Incomparable),
        count(Verdict::Unknown),
        report.millis
    )
}

/// A witness: the request, its entities, and each set's decision.
pub(super) fn render_witness(w: &Witness, indent: &str) -> String {
    let mut out = format!(
        "{indent}principal: {}\n{indent}action:    {}\n{indent}resource:  {}\n{indent}context:   {}\n",
        w.principal, w.action, w.resource, w.context
    );
    let entities = w.entities.as_array().map(Vec::as_slice).unwrap_or_default();
    out.push_str(&format!(
        "{indent}entities:{}\n",
        if entities.is_empty() { " none" } else { "" }
    ));
    for e in entities {
        out.push_str(&format!("{indent}  {}\n", render_entity(e)));
    }
    for d in &w.decisions {
        let word = |allowed: bool| if allowed { "allow" } else { "deny" };
        let mut line = format!("{indent}{}: {}", d.set, word(d.allows));
        if d.gateway_allows != d.allows {
            line.push_str(&format!(
                " (the gateway's verdict: {}: an erroring forbid denies)",
                word(d.gateway_allows)
            ));
        }
        if !d.reasons.is_empty() {
            line.push_str(&format!(", by {}", d.reasons.join(", ")));
        }
        if !d.errors.is_empty() {
            line.push_str(&format!(", errors: {}", d.errors.join("; ")));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// One entity as `Type::"id" in [parents] {attrs} tags {…}`.
fn render_entity(e: &serde_json::Value) -> String {
    let uid = |u: &serde_json::Value| {
        let ty = u
            .get("type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?");
        let id = u.get("id").cloned().unwrap_or(serde_json::Value::Null);
        format!("{ty}::{id}")
    };
    let mut out = e.get("uid").map(uid).unwrap_or_default();
    let parents: Vec<String> = e
        .get("parents")
        .and_then(serde_json::Value::as_array)
        .map(|p| p.iter().map(uid).collect())
        .unwrap_or_default();
    if !parents.is_empty() {
        out.push_str(&format!(" in [{}]", parents.join(", ")));
    }
    for key in ["attrs", "tags"] {
        match e.get(key) {
            Some(v) if v.as_object().is_some_and(|m| !m.is_empty()) => {
                out.push_str(&format!(" {}{v}", if key == "tags" { "tags " } else { "" }));
            }
            _ => {}
        }
    }
    out
}

/// `policy lint` flags.
#[derive(Debug, Args)]
pub struct LintArgs {
    /// Policy directory (default: `policies_dir` of the config).
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// Prove each finding with the solver (required: every check of
    /// `lint` is a proof today).
    #[arg(long, required = true)]
    pub prove: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Solver limits.
    #[command(flatten)]
    pub limits: ProveLimits,
    /// The effective schema.
    #[command(flatten)]
    pub vocabulary: Vocabulary,
}

/// Runs `policy lint --prove`. Exit status: 0 no finding; 1 findings; 2 it
/// could not run; 3 no finding but some question unsettled; 4 the
/// authorizer decided a witness otherwise than the solver claimed.
pub fn lint(config: &Config, args: &LintArgs) -> ExitCode {
    let dir = args
        .policies
        .clone()
        .unwrap_or_else(|| config.policies_dir.clone());
    let bundle = match tools(config, &args.vocabulary).and_then(|t| load_set(config, &dir, &t)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let solver = match find_solver(config, &args.limits) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    let run = run_limit(config, &args.limits);
    let report = match block_on(async {
        let mut prover = Prover::new(solver.clone(), run);
        prove_lint::lint(&bundle, &mut prover).await
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(CANNOT_RUN);
        }
    };
    if args.json {
        let json = serde_json::json!({
            "solver": { "path": solver.path, "version": solver.version },
            "lint": report,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
    } else {
        print!("{}", render_lint(&report, &bundle, &solver));
    }
    lint_status(&report)
}

fn lint_status(report: &LintReport) -> ExitCode {
    if report.disagreements() > 0 {
        eprintln!(
            "BUG: the authorizer decided {} witness(es) otherwise than the solver claimed; the findings cannot be trusted (please report it with this output)",
            report.disagreements()
        );
        return ExitCode::from(DISAGREES);
    }
    if !report.findings.is_empty() {
        return ExitCode::from(WIDENS);
    }
    if !report.unsettled.is_empty() {
        eprintln!(
            "error: {} question(s) were not settled within the limits",
            report.unsettled.len()
        );
        return ExitCode::from(UNSETTLED);
    }
    ExitCode::SUCCESS
}

/// The lint report, one finding after the other.
fn render_lint(report: &LintReport, bundle: &PolicyBundle, solver: &Solver) -> String {
    let mut out = format!(
        "lint: {} policies, {} request environments (cvc5 {}, per-query limit {} ms)\n",
        bundle.policy_ids.len(),
        report.envs,
        solver.version,
        solver.query_timeout.as_millis()
    );
    for f in &report.findings {
        out.push_str(&render_finding(f));
    }
    for u in &report.unsettled {
        out.push_str(&format!(
            "  unsettled  `{}` ({}) in {}: {}\n",
            u.policy, u.check, u.env, u.why
        ));
    }
    out.push_str(&format!(
        "summary: {} finding(s), {} unsettled question(s) ({} ms)\n",
        report.findings.len(),
        report.unsettled.len(),
        report.millis
    ));
    out
}

fn render_finding(f: &Finding) -> String {
    let by = |none: &str| match f.by.as_slice() {
        [] => none.to_string(),
        ids => ids
            .iter()
            .map(|id| format!("`{id}`"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let (word, what) = match f.kind {
        Problem::Dead => ("dead", "matches no request: it never applies".to_string()),
        Problem::Redundant => (
            "redundant",
            format!("every request it allows is allowed by {}", by("the other permits together")),
        ),
        Problem::Shadowed => (
            "shadowed",
            format!("every request it matches is denied by {}: it can never allow", by("the forbids together")),
        ),
        Problem::CanError => ("can error", match f.effect {
            "forbid" => "errors on some well-typed request: Cedar skips it there (the gateway denies such a request, failing closed)".to_string(),
            _ => "errors on some well-typed request: Cedar skips it there, so it grants nothing".to_string(),
        }),
    };
    let mut out = format!("  {word:<10} {} `{}`: {what}\n", f.effect, f.policy);
    if let (Some(env), Some(w)) = (&f.env, &f.witness) {
        out.push_str(&format!("    for example, in {env}:\n"));
        out.push_str(&render_witness(w, "      "));
    }
    if let Some(d) = &f.disagreement {
        out.push_str(&format!("    BUG: {d}\n"));
    }
    out
}
