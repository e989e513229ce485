//! What a candidate policy set allows that the live one does not, and the
//! other way round, proved for every request of every request environment
//! (principal type, action, resource type) of the effective schema.
//!
//! Per environment two questions go to the solver: does the candidate
//! imply the live set (else it **widens**: some request it allows, the
//! live set denies), and does the live set imply the candidate (else it
//! narrows). Each "no" comes with a witness, decided again by the real
//! authorizer under both sets ([`super::witness`]); a witness whose
//! decisions are not the flip the solver claimed is reported as a
//! disagreement. An environment the solver could not settle in time is
//! "unknown", never "equivalent".
//!
//! Both sets are read with the gateway's facts about typed tools
//! ([`Assumptions`]): a typed tool is decided only under its own action,
//! and that action only on that tool; a dropped typed action decides
//! nothing. Requests the gateway never makes cannot be counterexamples.

use std::time::Instant;

use cedar_policy::RequestEnv;
use cedar_policy_symcc::CompiledPolicySet;
use serde::Serialize;

use super::PolicyBundle;
use super::prove_assumptions::Assumptions;
use super::prover::{EnvName, Prover, Unproved, request_envs};
use super::witness::Witness;

/// The names of the two sets in witnesses.
pub const LIVE: &str = "live";
/// See [`LIVE`].
pub const CANDIDATE: &str = "candidate";

/// How the candidate compares with the live set in one environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every request gets the same decision.
    Equivalent,
    /// The candidate allows a subset of what the live set allows.
    LessPermissive,
    /// The candidate allows a superset of what the live set allows.
    MorePermissive,
    /// Each allows something the other denies.
    Incomparable,
    /// Not settled (a limit passed or the solver failed).
    Unknown,
}

/// One direction of the comparison.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Direction {
    /// Proved: no such request.
    None,
    /// Such a request, as the solver gave it, decided again.
    Found {
        /// The request.
        witness: Box<Witness>,
        /// Set when the authorizer's decisions are not the flip the solver
        /// claimed: a bug in the solver, its encoding or the authorizer.
        disagreement: Option<String>,
    },
    /// Not settled.
    Unknown {
        /// Why.
        why: Unproved,
    },
}

impl Direction {
    fn found(&self) -> bool {
        matches!(self, Direction::Found { .. })
    }
}

/// The comparison in one environment.
#[derive(Debug, Clone, Serialize)]
pub struct EnvDiff {
    /// The environment.
    pub env: EnvName,
    /// The verdict.
    pub verdict: Verdict,
    /// A request the candidate allows and the live set denies.
    pub widening: Direction,
    /// A request the live set allows and the candidate denies.
    pub narrowing: Direction,
    /// Time spent on this environment (compiling both sets, both questions,
    /// re-deciding the witnesses).
    pub millis: u64,
}

/// The comparison in every environment.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// Per environment, by action.
    pub envs: Vec<EnvDiff>,
    /// What both sets were read with, beside their policies.
    pub assumptions: Vec<String>,
    /// The whole run.
    pub millis: u64,
}

impl DiffReport {
    /// Environments where the candidate allows something the live set denies.
    pub fn widenings(&self) -> usize {
        self.envs.iter().filter(|e| e.widening.found()).count()
    }

    /// Environments whose widening question was not settled.
    pub fn unsettled(&self) -> usize {
        let unknown = |d: &Direction| matches!(d, Direction::Unknown { .. });
        self.envs.iter().filter(|e| unknown(&e.widening)).count()
    }

    /// Witnesses the authorizer decided otherwise than the solver claimed.
    pub fn disagreements(&self) -> usize {
        let disagrees = |d: &Direction| {
            matches!(
                d,
                Direction::Found {
                    disagreement: Some(_),
                    ..
                }
            )
        };
        self.envs
            .iter()
            .map(|e| usize::from(disagrees(&e.widening)) + usize::from(disagrees(&e.narrowing)))
            .sum()
    }
}

/// Why two sets cannot be compared.
#[derive(Debug, thiserror::Error)]
#[error(
    "the live and candidate sets were loaded with different schemas; compare sets of one effective schema"
)]
pub struct SchemaMismatch;

/// Compares `candidate` with `live` in every environment of their schema.
pub async fn diff(
    live: &PolicyBundle,
    candidate: &PolicyBundle,
    prover: &mut Prover,
) -> Result<DiffReport, SchemaMismatch> {
    if live.schema_hash != candidate.schema_hash {
        return Err(SchemaMismatch);
    }
    let started = Instant::now();
    let assumptions = Assumptions::of(live);
    let mut envs = Vec::new();
    for (name, env) in request_envs(&live.schema) {
        let begun = Instant::now();
        let (widening, narrowing) = match compile_both((live, candidate), &assumptions, &env) {
            Ok(sets) => compare(&sets, live, candidate, prover).await,
            Err(why) => (
                Direction::Unknown { why: why.clone() },
                Direction::Unknown { why },
            ),
        };
        envs.push(EnvDiff {
            env: name,
            verdict: verdict(&widening, &narrowing),
            widening,
            narrowing,
            millis: millis(begun),
        });
    }
    Ok(DiffReport {
        envs,
        assumptions: Assumptions::STATED
            .iter()
            .map(ToString::to_string)
            .collect(),
        millis: millis(started),
    })
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The verdict of the two directions.
fn verdict(widening: &Direction, narrowing: &Direction) -> Verdict {
    match (widening, narrowing) {
        (Direction::Found { .. }, Direction::Found { .. }) => Verdict::Incomparable,
        (Direction::Found { .. }, _) => Verdict::MorePermissive,
        (Direction::None, Direction::Found { .. }) => Verdict::LessPermissive,
        (Direction::None, Direction::None) => Verdict::Equivalent,
        _ => Verdict::Unknown,
    }
}

/// Both sets compiled for one environment: (live, candidate).
type Compiled = (CompiledPolicySet, CompiledPolicySet);

/// Compiles each set's slice for `env`, with the gateway's assumptions.
fn compile_both(
    (live, candidate): (&PolicyBundle, &PolicyBundle),
    assumptions: &Assumptions,
    env: &RequestEnv,
) -> Result<Compiled, Unproved> {
    let assumed = assumptions.for_env(live, env)?;
    let compile = |name: &str, bundle: &PolicyBundle| -> Result<CompiledPolicySet, Unproved> {
        let mut set = bundle
            .slices
            .get(env.action())
            .unwrap_or(&bundle.policies)
            .clone();
        for p in &assumed {
            set.add(p.clone())
                .map_err(|e| Unproved::Failed(e.to_string()))?;
        }
        CompiledPolicySet::compile(&set, env, &bundle.schema)
            .map_err(|e| Unproved::Failed(format!("cannot compile the {name} set: {e}")))
    };
    Ok((compile(LIVE, live)?, compile(CANDIDATE, candidate)?))
}

/// Asks both directions and re-decides their witnesses.
async fn compare(
    (live_set, candidate_set): &Compiled,
    live: &PolicyBundle,
    candidate: &PolicyBundle,
    prover: &mut Prover,
) -> (Direction, Direction) {
    let sets = [(LIVE, live), (CANDIDATE, candidate)];
    let widening = prover
        .ask(async |c| {
            c.check_implies_with_counterexample_opt(candidate_set, live_set)
                .await
        })
        .await;
    let widening = direction(widening, &sets, CANDIDATE);
    let narrowing = prover
        .ask(async |c| {
            c.check_implies_with_counterexample_opt(live_set, candidate_set)
                .await
        })
        .await;
    let narrowing = direction(narrowing, &sets, LIVE);
    (widening, narrowing)
}

/// One direction from the solver's answer: a witness `allowed_by` allows
/// and the other set denies.
fn direction(
    answer: Result<Option<cedar_policy_symcc::Env>, Unproved>,
    sets: &[(&str, &PolicyBundle)],
    allowed_by: &str,
) -> Direction {
    let env = match answer {
        Err(why) => return Direction::Unknown { why },
        Ok(None) => return Direction::None,
        Ok(Some(env)) => env,
    };
    let witness = Witness::of(&env, sets);
    let flips = sets
        .iter()
        .all(|(name, _)| witness.allows(name) == Some(*name == allowed_by));
    let disagreement = (!flips).then(|| {
        format!(
            "the solver claims `{allowed_by}` allows this request and the other set denies it, but the authorizer decides {}",
            witness
                .decisions
                .iter()
                .map(|d| format!("{}: {}", d.set, if d.allows { "allow" } else { "deny" }))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    Direction::Found {
        witness: Box::new(witness),
        disagreement,
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use cedar_policy::{Context, Entities, EntityUid, Request};

    use super::*;
    use crate::policy::PolicyFile;
    use crate::policy::load::bundle_from_sources;

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn bundle(text: &str) -> PolicyBundle {
        let files = vec![PolicyFile {
            path: "p.cedar".into(),
            text: text.into(),
        }];
        bundle_from_sources("s", SCHEMA, files).unwrap_or_else(|e| panic!("{}", e.render()))
    }

    fn uid(text: &str) -> EntityUid {
        EntityUid::from_str(text).unwrap()
    }

    /// A witness the authorizer does not flip as the solver claimed is
    /// reported as a disagreement, never passed on as a widening.
    #[test]
    fn a_witness_the_authorizer_does_not_flip_is_a_disagreement() {
        let live = bundle("@id(\"none\")\nforbid (principal, action, resource);\n");
        let candidate = bundle(
            "@id(\"keys\")\npermit (principal is Gateway::ApiKey, action == Gateway::Action::\"access_session\", resource);\n",
        );
        let sets = [(LIVE, &live), (CANDIDATE, &candidate)];
        let request = |principal: &str| {
            let request = Request::new(
                uid(principal),
                uid("Gateway::Action::\"access_session\""),
                uid("Gateway::Session::\"s\""),
                Context::empty(),
                None,
            )
            .unwrap();
            cedar_policy_symcc::Env {
                request,
                entities: Entities::empty(),
            }
        };
        // The candidate does allow a key: the flip holds.
        let flips = direction(
            Ok(Some(request("Gateway::ApiKey::\"k\""))),
            &sets,
            CANDIDATE,
        );
        assert!(
            matches!(
                &flips,
                Direction::Found {
                    disagreement: None,
                    ..
                }
            ),
            "{flips:?}"
        );
        // A person is allowed by neither: a claimed widening is a bug.
        let wrong = direction(Ok(Some(request("Gateway::User::\"u\""))), &sets, CANDIDATE);
        let Direction::Found {
            disagreement: Some(why),
            witness,
        } = wrong
        else {
            panic!("{wrong:?}")
        };
        assert!(why.contains("live: deny, candidate: deny"), "{why}");
        assert_eq!(witness.allows(CANDIDATE), Some(false));
        assert_eq!(
            verdict(
                &Direction::None,
                &Direction::Unknown {
                    why: Unproved::RunLimit(1)
                }
            ),
            Verdict::Unknown
        );
    }
}
