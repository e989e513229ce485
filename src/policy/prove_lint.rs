//! Problems in one policy set, proved by the solver over every request of
//! every request environment the policy can apply to (its action slice):
//!
//! - **dead**: the policy matches no request at all;
//! - **redundant**: a permit every request of which another permit (or the
//!   other permits together) allows too;
//! - **shadowed**: a permit that matches requests, every one of which a
//!   forbid (or the forbids together) denies: it can never allow;
//! - **can error**: a policy whose evaluation errors for some well-typed
//!   request. Cedar skips such a policy; the gateway denies when it is a
//!   forbid (fail closed), but a permit that errors grants nothing.
//!
//! A finding holds only when every environment was settled: a question the
//! solver did not answer in time leaves its policy out and is listed as
//! unsettled. Witnesses (an erroring request, a request a shadowed permit
//! matches) are decided again by the authorizer; one it decides otherwise
//! than the solver claimed is a disagreement.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use cedar_policy::{Effect, Policy, PolicySet, RequestEnv};
use cedar_policy_symcc::{CompiledPolicy, CompiledPolicySet};
use serde::Serialize;

use super::PolicyBundle;
use super::prover::{EnvName, Prover, Unproved, request_envs};
use super::witness::Witness;

/// The name of the set in witnesses.
const SET: &str = "policies";

/// What is wrong with a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Problem {
    /// It matches no request.
    Dead,
    /// Every request it allows, other permits allow.
    Redundant,
    /// Every request it matches, forbids deny.
    Shadowed,
    /// It errors for some well-typed request.
    CanError,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The policy's id.
    pub policy: String,
    /// `permit` or `forbid`.
    pub effect: &'static str,
    /// What is wrong.
    pub kind: Problem,
    /// The policies that cover (redundant) or shadow (shadowed) it; empty
    /// when only all of them together do.
    pub by: Vec<String>,
    /// Where the witness comes from.
    pub env: Option<EnvName>,
    /// A request showing it (erroring, or matched and denied).
    pub witness: Option<Box<Witness>>,
    /// Set when the authorizer decided the witness otherwise than the
    /// solver claimed.
    pub disagreement: Option<String>,
}

/// A question the solver did not settle.
#[derive(Debug, Clone, Serialize)]
pub struct Unsettled {
    /// The policy asked about.
    pub policy: String,
    /// Which check.
    pub check: &'static str,
    /// Where.
    pub env: EnvName,
    /// Why.
    pub why: Unproved,
}

/// Every finding of a set.
#[derive(Debug, Clone, Serialize)]
pub struct LintReport {
    /// Findings by policy id, then kind.
    pub findings: Vec<Finding>,
    /// Questions not settled (their policies' findings are left out).
    pub unsettled: Vec<Unsettled>,
    /// Request environments examined.
    pub envs: usize,
    /// The whole run.
    pub millis: u64,
}

impl LintReport {
    /// Findings whose witness the authorizer decided otherwise.
    pub fn disagreements(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.disagreement.is_some())
            .count()
    }
}

/// What is known of one policy so far, over the environments seen.
#[derive(Debug)]
struct Tally {
    effect: Effect,
    /// Environments it matches some request in.
    matches: usize,
    /// Some question about it was not settled.
    unsettled: bool,
    /// Permits: covered by other permits wherever it matches, and which
    /// single permits cover it in every such environment.
    covered: bool,
    coverers: Option<BTreeSet<String>>,
    /// Permits: denied by forbids wherever it matches, and which single
    /// forbids shadow it in every such environment.
    shadowed: bool,
    shadowers: Option<BTreeSet<String>>,
    shadow_witness: Option<(EnvName, Box<Witness>)>,
    error_witness: Option<(EnvName, Box<Witness>)>,
}

impl Tally {
    fn new(effect: Effect) -> Self {
        Tally {
            effect,
            matches: 0,
            unsettled: false,
            covered: true,
            coverers: None,
            shadowed: true,
            shadowers: None,
            shadow_witness: None,
            error_witness: None,
        }
    }
}

/// One policy compiled for one environment.
struct Compiled {
    id: String,
    effect: Effect,
    source: Policy,
    policy: CompiledPolicy,
}

/// Lints `bundle` in every request environment of its schema.
pub async fn lint(bundle: &PolicyBundle, prover: &mut Prover) -> LintReport {
    let started = Instant::now();
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    for p in bundle.policies.policies() {
        tallies.insert(p.id().to_string(), Tally::new(p.effect()));
    }
    let mut unsettled = Vec::new();
    let envs = request_envs(&bundle.schema);
    for (name, env) in &envs {
        let slice = bundle.slices.get(env.action()).unwrap_or(&bundle.policies);
        let mut step = Step {
            bundle,
            name,
            env,
            tallies: &mut tallies,
            unsettled: &mut unsettled,
        };
        step.run(slice, prover).await;
    }
    LintReport {
        findings: findings(tallies),
        unsettled,
        envs: envs.len(),
        millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// The lint of one environment.
struct Step<'a> {
    bundle: &'a PolicyBundle,
    name: &'a EnvName,
    env: &'a RequestEnv,
    tallies: &'a mut BTreeMap<String, Tally>,
    unsettled: &'a mut Vec<Unsettled>,
}

impl Step<'_> {
    async fn run(&mut self, slice: &PolicySet, prover: &mut Prover) {
        let compiled = self.compile(slice);
        for (i, policy) in compiled.iter().enumerate() {
            let matches = self.check_matches(policy, prover).await;
            self.check_errors(policy, prover).await;
            if matches != Some(true) || policy.effect != Effect::Permit {
                continue;
            }
            let others: Vec<&Compiled> = compiled
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, c)| c)
                .collect();
            self.check_covered(policy, &others, prover).await;
            self.check_shadowed(policy, &others, prover).await;
        }
    }

    /// Each policy of the slice compiled for this environment; one that
    /// cannot be compiled is unsettled.
    fn compile(&mut self, slice: &PolicySet) -> Vec<Compiled> {
        let mut out = Vec::new();
        for p in slice.policies() {
            match CompiledPolicy::compile(p, self.env, &self.bundle.schema) {
                Ok(policy) => out.push(Compiled {
                    id: p.id().to_string(),
                    effect: p.effect(),
                    source: p.clone(),
                    policy,
                }),
                Err(e) => {
                    self.unsettle(p.id().as_ref(), "compile", Unproved::Failed(e.to_string()))
                }
            }
        }
        out
    }

    fn unsettle(&mut self, policy: &str, check: &'static str, why: Unproved) {
        if let Some(t) = self.tallies.get_mut(policy) {
            t.unsettled = true;
        }
        self.unsettled.push(Unsettled {
            policy: policy.to_string(),
            check,
            env: self.name.clone(),
            why,
        });
    }

    fn tally(&mut self, policy: &str) -> Option<&mut Tally> {
        self.tallies.get_mut(policy)
    }

    /// Whether the policy matches some request here (`None`: unsettled).
    async fn check_matches(&mut self, c: &Compiled, prover: &mut Prover) -> Option<bool> {
        match prover
            .ask(async |s| s.check_never_matches_opt(&c.policy).await)
            .await
        {
            Ok(never) => {
                if !never && let Some(t) = self.tally(&c.id) {
                    t.matches += 1;
                }
                Some(!never)
            }
            Err(why) => {
                self.unsettle(&c.id, "matches", why);
                None
            }
        }
    }

    /// Records the first request the policy errors on.
    async fn check_errors(&mut self, c: &Compiled, prover: &mut Prover) {
        let answer = prover
            .ask(async |s| {
                s.check_never_errors_with_counterexample_opt(&c.policy)
                    .await
            })
            .await;
        match answer {
            Ok(None) => {}
            Ok(Some(env)) => {
                let witness = Box::new(Witness::of(&env, &[(SET, self.bundle)]));
                let name = self.name.clone();
                if let Some(t) = self.tally(&c.id)
                    && t.error_witness.is_none()
                {
                    t.error_witness = Some((name, witness));
                }
            }
            Err(why) => self.unsettle(&c.id, "never errors", why),
        }
    }

    /// Whether the other permits allow every request this permit allows,
    /// and which single permits do.
    async fn check_covered(&mut self, c: &Compiled, others: &[&Compiled], prover: &mut Prover) {
        if !self.tally(&c.id).is_some_and(|t| t.covered) {
            return;
        }
        let permits: Vec<&Compiled> = others
            .iter()
            .copied()
            .filter(|o| o.effect == Effect::Permit)
            .collect();
        let covered = match self.implied_by_set(c, &permits, prover).await {
            Ok(covered) => covered,
            Err(why) => return self.unsettle(&c.id, "redundant", why),
        };
        let single = match covered {
            true => self.single_implied(c, &permits, prover).await,
            false => Ok(BTreeSet::new()),
        };
        let Some(t) = self.tally(&c.id) else { return };
        t.covered &= covered;
        if let Ok(single) = single {
            t.coverers = Some(match t.coverers.take() {
                Some(before) => before.intersection(&single).cloned().collect(),
                None => single,
            });
        }
    }

    /// Whether every request `c` matches is denied by the forbids, which
    /// single forbids do, and (once) a request showing it.
    async fn check_shadowed(&mut self, c: &Compiled, others: &[&Compiled], prover: &mut Prover) {
        if !self.tally(&c.id).is_some_and(|t| t.shadowed) {
            return;
        }
        let forbids: Vec<&Compiled> = others
            .iter()
            .copied()
            .filter(|o| o.effect == Effect::Forbid)
            .collect();
        let mut with_forbids = vec![c];
        with_forbids.extend(forbids.iter().copied());
        let shadowed = match self.compiled_set(&with_forbids) {
            Ok(set) => {
                prover
                    .ask(async |s| s.check_always_denies_opt(&set).await)
                    .await
            }
            Err(why) => Err(why),
        };
        let shadowed = match shadowed {
            Ok(s) => s,
            Err(why) => return self.unsettle(&c.id, "shadowed", why),
        };
        let single = match shadowed {
            true => self.single_implied(c, &forbids, prover).await,
            false => Ok(BTreeSet::new()),
        };
        let witness = match shadowed
            && self
                .tally(&c.id)
                .is_some_and(|t| t.shadow_witness.is_none())
        {
            true => self.matched_request(c, prover).await,
            false => None,
        };
        let name = self.name.clone();
        let Some(t) = self.tally(&c.id) else { return };
        t.shadowed &= shadowed;
        if let Ok(single) = single {
            t.shadowers = Some(match t.shadowers.take() {
                Some(before) => before.intersection(&single).cloned().collect(),
                None => single,
            });
        }
        if let Some(w) = witness {
            t.shadow_witness = Some((name, w));
        }
    }

    /// Whether `c` allows only what `set` allows (`set` empty: never).
    async fn implied_by_set(
        &mut self,
        c: &Compiled,
        set: &[&Compiled],
        prover: &mut Prover,
    ) -> Result<bool, Unproved> {
        if set.is_empty() {
            return Ok(false);
        }
        let alone = c.policy.clone().into_compiled_policyset();
        let others = self.compiled_set(set)?;
        prover
            .ask(async |s| s.check_implies_opt(&alone, &others).await)
            .await
    }

    /// `policies` compiled as one set for this environment.
    fn compiled_set(&self, policies: &[&Compiled]) -> Result<CompiledPolicySet, Unproved> {
        let mut set = PolicySet::new();
        for p in policies {
            set.add(p.source.clone())
                .map_err(|e| Unproved::Failed(e.to_string()))?;
        }
        CompiledPolicySet::compile(&set, self.env, &self.bundle.schema)
            .map_err(|e| Unproved::Failed(e.to_string()))
    }

    /// The policies of `candidates` each of which matches every request
    /// `c` matches.
    async fn single_implied(
        &mut self,
        c: &Compiled,
        candidates: &[&Compiled],
        prover: &mut Prover,
    ) -> Result<BTreeSet<String>, Unproved> {
        let mut out = BTreeSet::new();
        for other in candidates {
            let implies = prover
                .ask(async |s| s.check_matches_implies_opt(&c.policy, &other.policy).await)
                .await?;
            if implies {
                out.insert(other.id.clone());
            }
        }
        Ok(out)
    }

    /// A request `c` matches, decided again under the set.
    async fn matched_request(&mut self, c: &Compiled, prover: &mut Prover) -> Option<Box<Witness>> {
        let env = prover
            .ask(async |s| {
                s.check_never_matches_with_counterexample_opt(&c.policy)
                    .await
            })
            .await
            .ok()??;
        Some(Box::new(Witness::of(&env, &[(SET, self.bundle)])))
    }
}

/// The findings of the tallies, each with its disagreement checked.
fn findings(tallies: BTreeMap<String, Tally>) -> Vec<Finding> {
    let mut out = Vec::new();
    for (id, t) in tallies {
        let effect = match t.effect {
            Effect::Permit => "permit",
            Effect::Forbid => "forbid",
        };
        let finding =
            |kind: Problem, by: Option<BTreeSet<String>>, seen: Option<(EnvName, Box<Witness>)>| {
                let (env, witness) = seen.map_or((None, None), |(e, w)| (Some(e), Some(w)));
                let disagreement = witness.as_deref().and_then(|w| disagreement(kind, &id, w));
                Finding {
                    policy: id.clone(),
                    effect,
                    kind,
                    by: by.map(|b| b.into_iter().collect()).unwrap_or_default(),
                    env,
                    witness,
                    disagreement,
                }
            };
        if let Some(seen) = t.error_witness {
            out.push(finding(Problem::CanError, None, Some(seen)));
        }
        if t.unsettled {
            continue;
        }
        if t.matches == 0 {
            out.push(finding(Problem::Dead, None, None));
            continue;
        }
        if t.effect == Effect::Permit && t.shadowed {
            out.push(finding(Problem::Shadowed, t.shadowers, t.shadow_witness));
        } else if t.effect == Effect::Permit && t.covered {
            out.push(finding(Problem::Redundant, t.coverers, None));
        }
    }
    out
}

/// Why the authorizer's decision of a witness contradicts the finding.
fn disagreement(kind: Problem, id: &str, witness: &Witness) -> Option<String> {
    let decided = witness.decisions.first()?;
    match kind {
        Problem::CanError
            if !decided
                .errors
                .iter()
                .any(|e| e.contains(&format!("`{id}`"))) =>
        {
            Some(format!(
                "the solver claims `{id}` errors on this request, but the authorizer reports no error for it"
            ))
        }
        Problem::Shadowed if decided.allows => Some(format!(
            "the solver claims forbids deny every request `{id}` matches, but the authorizer allows this one"
        )),
        _ => None,
    }
}
