//! A proof run: one solver process asked many questions, each bounded by
//! the per-query limit (the solver answers `unknown` past it) and all of
//! them by the run's deadline (questions past it are not asked).
//!
//! An answer the solver could not give is an [`Unproved`], which callers
//! report as "unknown", never as a proof: a timeout must not read as
//! "equivalent". A solver process that failed (or was cut off by the
//! deadline mid-question) is dropped and the next question starts a new
//! one.

use std::time::{Duration, Instant};

use cedar_policy::{RequestEnv, Schema};
use cedar_policy_symcc::err::Error as SymccError;
use serde::Serialize;

use super::solver::{Compiler, Solver};

/// Why a question has no answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", content = "detail", rename_all = "kebab-case")]
pub enum Unproved {
    /// The solver answered `unknown`: the per-query limit passed (or the
    /// question is beyond what it decides).
    #[error("the solver answered `unknown` (per-query limit {0} ms)")]
    QueryLimit(u64),
    /// The run's deadline passed before or while the question was asked.
    #[error("the run's time limit ({0} s) was reached")]
    RunLimit(u64),
    /// The question could not be asked (the solver failed, a policy could
    /// not be compiled, a model could not be read back).
    #[error("{0}")]
    Failed(String),
}

/// One request environment: a principal type, an action and a resource
/// type the schema says the action applies to. Proofs hold per environment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct EnvName {
    /// The action's id, e.g. `call_tool` or a typed tool action.
    pub action: String,
    /// The principal type, e.g. `Gateway::Agent`.
    pub principal: String,
    /// The resource type, e.g. `Gateway::Tool`.
    pub resource: String,
}

impl EnvName {
    fn of(env: &RequestEnv) -> Self {
        EnvName {
            action: env.action().id().unescaped().to_string(),
            principal: env.principal().to_string(),
            resource: env.resource().to_string(),
        }
    }
}

impl std::fmt::Display for EnvName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |t: &str| t.rsplit("::").next().unwrap_or(t).to_string();
        write!(
            f,
            "{} ({} → {})",
            self.action,
            short(&self.principal),
            short(&self.resource)
        )
    }
}

/// Every request environment of `schema`, by action, then principal and
/// resource type, with its name.
pub(crate) fn request_envs(schema: &Schema) -> Vec<(EnvName, RequestEnv)> {
    let mut envs: Vec<(EnvName, RequestEnv)> = schema
        .request_envs()
        .map(|env| (EnvName::of(&env), env))
        .collect();
    envs.sort_by(|a, b| a.0.cmp(&b.0));
    envs
}

/// The solver of a run and its deadline.
pub struct Prover {
    solver: Solver,
    /// The process questions go to; `None` until the first question and
    /// after a failure.
    compiler: Option<Compiler>,
    deadline: Instant,
    run_limit: Duration,
}

impl std::fmt::Debug for Prover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prover")
            .field("solver", &self.solver)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Prover {
    /// A run on `solver` that asks nothing after `run_limit` from now.
    pub fn new(solver: Solver, run_limit: Duration) -> Self {
        Prover {
            solver,
            compiler: None,
            deadline: Instant::now() + run_limit,
            run_limit,
        }
    }

    /// The solver this run asks.
    pub fn solver(&self) -> &Solver {
        &self.solver
    }

    /// Whether the run's deadline has passed.
    pub(crate) fn out_of_time(&self) -> Result<(), Unproved> {
        match Instant::now() >= self.deadline {
            true => Err(Unproved::RunLimit(self.run_limit.as_secs())),
            false => Ok(()),
        }
    }

    /// Asks one question of the solver, within the run's deadline.
    pub(crate) async fn ask<T>(
        &mut self,
        question: impl AsyncFnOnce(&mut Compiler) -> Result<T, SymccError>,
    ) -> Result<T, Unproved> {
        self.out_of_time()?;
        let compiler = match &mut self.compiler {
            Some(c) => c,
            None => {
                let started = self
                    .solver
                    .compiler()
                    .map_err(|e| Unproved::Failed(e.to_string()))?;
                self.compiler.insert(started)
            }
        };
        let answer = tokio::time::timeout_at(self.deadline.into(), question(compiler)).await;
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(SymccError::SolverUnknown)) => Err(Unproved::QueryLimit(
                u64::try_from(self.solver.query_timeout.as_millis()).unwrap_or(u64::MAX),
            )),
            Ok(Err(e @ SymccError::SolverError(_))) => {
                // The process may be dead or mid-answer: start a new one.
                self.compiler = None;
                Err(Unproved::Failed(format!("the solver failed: {e}")))
            }
            Ok(Err(e)) => Err(Unproved::Failed(e.to_string())),
            Err(_) => {
                // Cut off mid-question: its answer would be read by the next.
                self.compiler = None;
                Err(Unproved::RunLimit(self.run_limit.as_secs()))
            }
        }
    }
}
