//! The proof gate of a reload (`[lifecycle] prove`): the candidate set
//! compared with the active one by the solver (`crate::policy::prove_diff`),
//! per request environment, off the async threads and never on the request
//! path (decisions keep using the active set while it runs).
//!
//! - `report`: the candidate is activated as before; the proof then runs in
//!   the background and is kept as the last proof (`GET /admin/policies`,
//!   the console's Policy set page) and logged.
//! - `refuse-widening`: the proof runs first. A candidate that allows a
//!   request the active set denies, or whose proof was not settled (a
//!   limit passed, no solver, the live policies do not load under the
//!   candidate's schema, a disagreement), is refused: the active set stays,
//!   and the refusal, its counterexamples and the candidate's text are
//!   recorded in the trail, until an admin accepts that exact candidate
//!   hash (`POST /admin/policies/accept`).
//!
//! When the effective schema changed (the schema file, or upstream typed
//! actions), the live policies are loaded again under the candidate's
//! schema so both are read with one vocabulary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::ProveMode;
use crate::policy::prove_diff::{self, DiffReport, Direction, Verdict};
use crate::policy::prover::Prover;
use crate::policy::solver::Solver;
use crate::policy::witness::Witness;
use crate::policy::{PolicyBundle, load};

/// Counterexamples a proof keeps (widenings first).
const KEPT_COUNTEREXAMPLES: usize = 8;

/// What a proof concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Every environment is equivalent.
    Equivalent,
    /// Nothing widens; something narrows.
    Narrower,
    /// Some environment widens.
    Widens,
    /// Nothing was found to widen, but not everything was settled.
    Unknown,
    /// No proof could be made (no solver, schemas that cannot be read
    /// together, a disagreement between the solver and the authorizer).
    Failed,
}

/// One environment's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct EnvVerdict {
    /// `action (Principal → Resource)`.
    pub env: String,
    /// Its action id.
    pub action: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Time spent on it.
    pub millis: u64,
}

/// One counterexample of a proof.
#[derive(Debug, Clone, Serialize)]
pub struct Counterexample {
    /// Where.
    pub env: String,
    /// `widening` (the candidate allows it) or `narrowing`.
    pub direction: &'static str,
    /// The request, decided again under both sets.
    pub witness: Witness,
}

/// A reload's proof, as the admin API and the console show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateProof {
    /// When it finished.
    pub at: String,
    /// What triggered the reload.
    pub trigger: String,
    /// The mode it ran in.
    pub mode: ProveMode,
    /// The active set it was compared with.
    pub live_hash: String,
    /// The candidate.
    pub candidate_hash: String,
    /// What it concluded.
    pub outcome: Outcome,
    /// Why it failed, or what it found, in one line.
    pub message: String,
    /// Environments that widen, narrow, or were not settled.
    pub widenings: usize,
    /// See `widenings`.
    pub narrowings: usize,
    /// See `widenings`.
    pub unsettled: usize,
    /// The whole proof.
    pub millis: u64,
    /// Every environment's verdict.
    pub envs: Vec<EnvVerdict>,
    /// The first counterexamples, widenings first.
    pub counterexamples: Vec<Counterexample>,
}

impl GateProof {
    /// Whether `refuse-widening` lets this candidate through.
    pub fn passes(&self) -> bool {
        matches!(self.outcome, Outcome::Equivalent | Outcome::Narrower)
    }
}

/// What a proof runs with: the solver found at start-up (none: the proof
/// fails), the run's limit and the mode it reports.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The solver.
    pub solver: Option<Solver>,
    /// The whole proof's time limit (`[prove] run_timeout_secs`).
    pub run: Duration,
    /// `[lifecycle] prove`.
    pub mode: ProveMode,
}

/// Proves `candidate` against `live` on a blocking thread with a runtime
/// of its own (compiling policies is CPU work).
pub async fn prove(
    setting: Setting,
    live: Arc<PolicyBundle>,
    candidate: Arc<PolicyBundle>,
    trigger: &str,
) -> GateProof {
    let Setting { solver, run, mode } = setting;
    let (live2, candidate2) = (Arc::clone(&live), Arc::clone(&candidate));
    let trigger2 = trigger.to_string();
    let proving = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let report = compare(solver, run, &live2, &candidate2);
        summarize(report, (&live2, &candidate2), (mode, &trigger2), started)
    });
    match proving.await {
        Ok(proof) => proof,
        Err(e) => summarize(
            Err(format!("the proof task failed: {e}")),
            (&live, &candidate),
            (mode, trigger),
            Instant::now(),
        ),
    }
}

/// The diff of the two sets under one schema, or why there is none.
fn compare(
    solver: Option<Solver>,
    run: Duration,
    live: &PolicyBundle,
    candidate: &PolicyBundle,
) -> Result<DiffReport, String> {
    let solver = solver.ok_or("no SMT solver (see `[prove] solver`)")?;
    let rebuilt;
    let live = if live.schema_hash == candidate.schema_hash {
        live
    } else {
        rebuilt = load::bundle_from_sources(
            &candidate.schema_path,
            &candidate.schema_text,
            live.files.clone(),
        )
        .map_err(|e| {
            format!("the active policies do not load under the candidate's schema: {e}")
        })?;
        &rebuilt
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the proof's runtime: {e}"))?;
    runtime
        .block_on(async {
            let mut prover = Prover::new(solver, run);
            prove_diff::diff(live, candidate, &mut prover).await
        })
        .map_err(|e| e.to_string())
}

/// The proof that could not be made against the set `live_hash` (it does
/// not load, say): `failed`, with why.
pub fn not_made(
    live_hash: &str,
    candidate: &PolicyBundle,
    (mode, trigger): (ProveMode, &str),
    why: String,
) -> GateProof {
    let mut proof = failed(
        (live_hash, &candidate.hash),
        (mode, trigger),
        Instant::now(),
    );
    proof.message = why;
    proof
}

/// A proof of `candidate` against `live` that concluded nothing yet.
fn failed(
    (live, candidate): (&str, &str),
    (mode, trigger): (ProveMode, &str),
    started: Instant,
) -> GateProof {
    GateProof {
        at: crate::ids::now_rfc3339(),
        trigger: trigger.to_string(),
        mode,
        live_hash: live.to_string(),
        candidate_hash: candidate.to_string(),
        outcome: Outcome::Failed,
        message: String::new(),
        widenings: 0,
        narrowings: 0,
        unsettled: 0,
        millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        envs: Vec::new(),
        counterexamples: Vec::new(),
    }
}

/// The proof of a report (or of why there is none).
fn summarize(
    report: Result<DiffReport, String>,
    (live, candidate): (&PolicyBundle, &PolicyBundle),
    (mode, trigger): (ProveMode, &str),
    started: Instant,
) -> GateProof {
    let mut proof = failed((&live.hash, &candidate.hash), (mode, trigger), started);
    let report = match report {
        Ok(r) => r,
        Err(why) => {
            proof.message = why;
            return proof;
        }
    };
    proof.widenings = report.widenings();
    proof.unsettled = report.unsettled();
    proof.narrowings = report
        .envs
        .iter()
        .filter(|e| matches!(e.narrowing, Direction::Found { .. }))
        .count();
    (proof.outcome, proof.message) = conclusion(&report, proof.narrowings);
    proof.envs = report
        .envs
        .iter()
        .map(|e| EnvVerdict {
            env: e.env.to_string(),
            action: e.env.action.clone(),
            verdict: e.verdict,
            millis: e.millis,
        })
        .collect();
    proof.counterexamples = counterexamples(&report);
    proof
}

/// The outcome of a report and its one-line message.
fn conclusion(report: &DiffReport, narrowings: usize) -> (Outcome, String) {
    let n = |k: usize| format!("{k} request environment(s)");
    if report.disagreements() > 0 {
        return (
            Outcome::Failed,
            format!(
                "BUG: the authorizer decided {} counterexample(s) otherwise than the solver claimed",
                report.disagreements()
            ),
        );
    }
    match (report.widenings(), report.unsettled(), narrowings) {
        (0, 0, 0) => (
            Outcome::Equivalent,
            "equivalent in every request environment".into(),
        ),
        (0, 0, k) => (
            Outcome::Narrower,
            format!("less permissive in {}, widens nowhere", n(k)),
        ),
        (0, u, _) => (
            Outcome::Unknown,
            format!("not settled in {} within the limits", n(u)),
        ),
        (w, _, _) => (
            Outcome::Widens,
            format!("allows requests the active set denies in {}", n(w)),
        ),
    }
}

/// The first counterexamples of a report, widenings first.
fn counterexamples(report: &DiffReport) -> Vec<Counterexample> {
    let mut out = Vec::new();
    for (direction, pick) in [
        (
            "widening",
            (|e: &prove_diff::EnvDiff| &e.widening) as fn(&_) -> &_,
        ),
        ("narrowing", |e: &prove_diff::EnvDiff| &e.narrowing),
    ] {
        for env in &report.envs {
            if let Direction::Found { witness, .. } = pick(env) {
                out.push(Counterexample {
                    env: env.env.to_string(),
                    direction,
                    witness: (**witness).clone(),
                });
            }
        }
    }
    out.truncate(KEPT_COUNTEREXAMPLES);
    out
}

/// Counterexamples a refusal's trail record keeps.
const RECORDED_COUNTEREXAMPLES: usize = 3;

/// The `outcome` of a refusal's trail record: the proof's conclusion and
/// its first widening counterexamples (each a request an auditor can
/// decide again: principal, action, resource, context, entities).
pub fn refusal_outcome(proof: &GateProof) -> serde_json::Value {
    let counterexamples: Vec<serde_json::Value> = proof
        .counterexamples
        .iter()
        .filter(|c| c.direction == "widening")
        .take(RECORDED_COUNTEREXAMPLES)
        .map(|c| {
            serde_json::json!({
                "env": c.env,
                "principal": c.witness.principal,
                "action": c.witness.action,
                "resource": c.witness.resource,
                "context": c.witness.context,
                "entities": c.witness.entities,
            })
        })
        .collect();
    serde_json::json!({
        "candidateHash": proof.candidate_hash,
        "liveHash": proof.live_hash,
        "trigger": proof.trigger,
        "outcome": proof.outcome,
        "message": proof.message,
        "widenings": proof.widenings,
        "unsettled": proof.unsettled,
        "counterexamples": counterexamples,
    })
}
