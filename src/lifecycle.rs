//! The policy lifecycle around the PEP: loading a candidate set (effective
//! schema → parse → strict validation → policy tests), hot reload (file
//! watch, SIGHUP, `POST /admin/policies/reload`) with an atomic swap,
//! shadow evaluation of a candidate directory, and the decision observer
//! that feeds metrics and shadow mode.
//!
//! This file holds the state the gateway keeps ([`Lifecycle`]) and the
//! steps that need no gateway (loading a candidate, recording a set); the
//! reload itself, which swaps the gateway's PEP, is in [`reload`], above
//! the gateway.
//!
//! **Architecture Invariant:** a set becomes active only through
//! [`reload::reload`] (or start-up, [`startup`]), and only after every
//! step passed; any failure leaves the last good set active and is
//! reported in [`ReloadStatus`].

pub mod admin;
pub mod gate;
pub mod reload;
pub mod shadow;
pub mod startup;
pub mod upstream_types;
pub mod watch;

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::metrics::Metrics;
use crate::policy::schema_gen::ToolSchema;
use crate::policy::tests_runner::{self, TestReport};
use crate::policy::{Action, DecisionObserver, Observed, PolicyBundle, PolicyLoadError};
use crate::store::WriteOp;
use crate::tools::Catalog;

/// Why a candidate set was rejected.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    /// Parse or strict-validation errors.
    #[error("{}", .0.render())]
    Policies(#[from] PolicyLoadError),
    /// The policy tests could not be read.
    #[error("policy tests: {0}")]
    TestFiles(String),
    /// Some policy tests failed.
    #[error(
        "{} of {} policy test(s) failed:\n{}\nif the new verdicts are intended, update the expected decisions in the policies' tests/ directory",
        .0.failed(),
        .0.outcomes.len(),
        .0.failures().join("\n")
    )]
    Tests(TestReport),
}

impl CandidateError {
    /// One-line summary.
    pub fn summary(&self) -> String {
        match self {
            CandidateError::Policies(e) => e.to_string(),
            CandidateError::TestFiles(e) => format!("policy tests: {e}"),
            CandidateError::Tests(r) => format!(
                "{} of {} policy test(s) failed: {}",
                r.failed(),
                r.outcomes.len(),
                r.failures().join("; ")
            ),
        }
    }
}

/// The tools whose arguments the effective schema types: every catalog
/// tool, in the group action that decides it.
pub fn tool_schemas(catalog: &Catalog) -> Vec<ToolSchema> {
    catalog
        .all()
        .iter()
        .map(|t| ToolSchema {
            name: t.name.clone(),
            group: if t.group == "a2a" {
                Action::A2aInvoke
            } else {
                Action::CallTool
            },
            input_schema: t.input_schema.clone(),
            dropped: None,
        })
        .collect()
}

/// Loads a set the way every activation does: effective schema, parse,
/// strict validation, then the policy tests under `policies_dir/tests`.
pub fn load_candidate(
    schema_file: &Path,
    policies_dir: &Path,
    tools: &[ToolSchema],
) -> Result<(PolicyBundle, TestReport), CandidateError> {
    let bundle = crate::policy::load::load_bundle_with_tools(schema_file, policies_dir, tools)?;
    let report = tests_runner::run_dir(&bundle, policies_dir)
        .map_err(|e| CandidateError::TestFiles(e.to_string()))?;
    if report.failed() > 0 {
        return Err(CandidateError::Tests(report));
    }
    Ok((bundle, report))
}

/// The write op that records a bundle, so replay can find it by hash. A
/// set is recorded before it decides anything (at start-up, by the first
/// heartbeat, and by every reload).
pub fn policy_set_op(bundle: &PolicyBundle) -> WriteOp {
    WriteOp::PolicySet {
        hash: bundle.hash.clone(),
        schema_path: bundle.schema_path.clone(),
        schema_text: bundle.schema_text.clone(),
        files: serde_json::to_string(&bundle.files).unwrap_or_else(|_| "[]".into()),
        loaded_at: bundle.loaded_at.clone(),
    }
}

/// One reload attempt as reported by `GET /admin/policies`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// When it ran.
    pub at: String,
    /// `startup`, `file-watch`, `sighup`, `admin`.
    pub trigger: String,
    /// `applied`, `unchanged`, `rejected` (it does not load, validate or
    /// pass its tests) or `refused` (its proof: `[lifecycle] prove =
    /// "refuse-widening"`).
    pub result: String,
    /// Hash of the set it loaded (absent when rejected).
    pub hash: Option<String>,
    /// What the proof of the candidate concluded, when one ran before the
    /// swap (`refuse-widening`); the whole proof is the last proof.
    pub proof: Option<String>,
    /// Why it was rejected.
    pub message: Option<String>,
    /// Located problems (`file:line:col: message`).
    pub diagnostics: Vec<String>,
    /// Failed policy tests.
    pub test_failures: Vec<String>,
    /// Policy tests that ran.
    pub tests_run: usize,
    /// What the loaded set warns of (validation warnings, policies naming
    /// a dropped typed action: `crate::policy::dropped`); also logged.
    pub warnings: Vec<String>,
}

/// What reloads have done so far.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadStatus {
    /// The latest attempt.
    pub last_attempt: Option<Attempt>,
    /// The latest rejected attempt.
    pub last_error: Option<Attempt>,
}

/// Lifecycle state shared by the gateway.
#[derive(Debug)]
pub struct Lifecycle {
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Shadow evaluation.
    pub shadow: Arc<shadow::Shadow>,
    /// The catalog's tools (fixed for the process).
    catalog_tools: Vec<ToolSchema>,
    /// The upstream MCP tools typed from every org's approved pins (see
    /// [`upstream_types`]); replaced when the registry changes.
    upstream_tools: Mutex<Vec<ToolSchema>>,
    /// Wakes the task that rebuilds `upstream_tools` after a registry change.
    pub(crate) upstreams_changed: Arc<tokio::sync::Notify>,
    status: Mutex<ReloadStatus>,
    /// One reload at a time, so two triggers never race on the swap.
    reload_lock: tokio::sync::Mutex<()>,
    /// The solver reloads are proved with, found once at start-up (none:
    /// proofs are off whatever `[lifecycle] prove` says; `refuse-widening`
    /// refuses to start without one).
    solver: std::sync::OnceLock<crate::policy::solver::Solver>,
    /// The last proof a reload made.
    last_proof: Mutex<Option<Arc<gate::GateProof>>>,
}

impl Lifecycle {
    /// State for a gateway whose catalog is `catalog`.
    pub fn new(catalog: &Catalog, writer: crate::store::Writer) -> Lifecycle {
        let metrics = Arc::new(Metrics::new());
        Lifecycle {
            shadow: Arc::new(shadow::Shadow::new(Arc::clone(&metrics), writer)),
            metrics,
            catalog_tools: tool_schemas(catalog),
            upstream_tools: Mutex::new(Vec::new()),
            upstreams_changed: Arc::new(tokio::sync::Notify::new()),
            status: Mutex::new(ReloadStatus::default()),
            reload_lock: tokio::sync::Mutex::new(()),
            solver: std::sync::OnceLock::new(),
            last_proof: Mutex::new(None),
        }
    }

    /// Sets the solver reloads are proved with (once, at start-up).
    pub fn set_solver(&self, solver: crate::policy::solver::Solver) {
        let _ = self.solver.set(solver);
    }

    /// The solver reloads are proved with, if one was found.
    pub fn solver(&self) -> Option<&crate::policy::solver::Solver> {
        self.solver.get()
    }

    /// Keeps `proof` as the last proof.
    pub fn set_last_proof(&self, proof: gate::GateProof) {
        if let Ok(mut p) = self.last_proof.lock() {
            *p = Some(Arc::new(proof));
        }
    }

    /// The last proof a reload made.
    pub fn last_proof(&self) -> Option<Arc<gate::GateProof>> {
        self.last_proof.lock().ok().and_then(|p| p.clone())
    }

    /// The tools whose arguments the effective schema types now: the
    /// catalog's, then the upstream tools of every org.
    pub fn tools(&self) -> Vec<ToolSchema> {
        let mut tools = self.catalog_tools.clone();
        if let Ok(upstream) = self.upstream_tools.lock() {
            tools.extend(upstream.iter().cloned());
        }
        tools
    }

    /// Replaces the upstream tools; false when they were already these.
    pub(crate) fn set_upstream_tools(&self, tools: Vec<ToolSchema>) -> bool {
        let Ok(mut current) = self.upstream_tools.lock() else {
            return false;
        };
        let same = current.len() == tools.len()
            && current.iter().zip(&tools).all(|(a, b)| {
                a.name == b.name && a.input_schema == b.input_schema && a.dropped == b.dropped
            });
        if same {
            return false;
        }
        *current = tools;
        true
    }

    /// Notes a registry change: the upstream tool types are rebuilt (and
    /// the policy set re-validated) by the task [`upstream_types::start`]
    /// runs, debounced.
    pub fn registry_changed(&self) {
        self.upstreams_changed.notify_one();
    }

    /// The observer to install on the PEP.
    pub fn observer(&self) -> Arc<dyn DecisionObserver> {
        Arc::new(GatewayObserver {
            metrics: Arc::clone(&self.metrics),
            shadow: Arc::clone(&self.shadow),
        })
    }

    /// A copy of the reload status.
    pub fn status(&self) -> ReloadStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn record(&self, attempt: &Attempt) {
        self.metrics.reload(&attempt.result);
        if let Ok(mut s) = self.status.lock() {
            if attempt.result == "rejected" || attempt.result == "refused" {
                s.last_error = Some(attempt.clone());
            }
            s.last_attempt = Some(attempt.clone());
        }
    }

    /// Notes the set activated at start-up.
    pub fn started(&self, bundle: &PolicyBundle, tests_run: usize) {
        self.metrics
            .active_set(&bundle.hash, unix(&bundle.loaded_at));
        self.record(&Attempt {
            at: bundle.loaded_at.clone(),
            trigger: "startup".into(),
            result: "applied".into(),
            hash: Some(bundle.hash.clone()),
            proof: None,
            message: None,
            diagnostics: Vec::new(),
            test_failures: Vec::new(),
            tests_run,
            warnings: bundle.warnings.clone(),
        });
    }
}

fn unix(rfc3339: &str) -> i64 {
    crate::ids::parse_rfc3339(rfc3339)
        .map(|t| t.unix_timestamp())
        .unwrap_or(0)
}

/// Feeds every decision to the metrics and the shadow candidate.
#[derive(Debug)]
struct GatewayObserver {
    metrics: Arc<Metrics>,
    shadow: Arc<shadow::Shadow>,
}

impl DecisionObserver for GatewayObserver {
    fn observe(&self, d: &Observed<'_>) {
        self.metrics
            .decision(d.action.name(), d.verdict.allowed, d.elapsed.as_secs_f64());
        self.shadow.observe(d);
    }

    fn redecides(&self) -> bool {
        self.shadow.is_active()
    }
}
