//! The gateway's one rule beyond Cedar's semantics, in a diff: a `forbid`
//! that errors denies (Cedar skips it). A diff proves Cedar's decisions;
//! the gateway's differ only where a forbid errors, and there only by
//! denying. So a request the gateway's candidate allows and its live set
//! denies, that the proof did not see, needs a live `forbid` that errors on
//! it and is not in the candidate as it is (the same forbid would error,
//! and deny, there too). Such a forbid leaves the environment's widening
//! question open: it is reported unknown, never as settled.

use cedar_policy::{Effect, RequestEnv};
use cedar_policy_symcc::CompiledPolicy;

use super::PolicyBundle;
use super::prover::{Prover, Unproved};
use super::set_diff::form;

/// Why the proof of `env` cannot rule out a widening under the gateway's
/// rule: the live forbids the candidate changes or removes that can error
/// here (`None`: none can).
pub(crate) async fn unseen_widening(
    (live, candidate): (&PolicyBundle, &PolicyBundle),
    env: &RequestEnv,
    prover: &mut Prover,
) -> Option<Unproved> {
    let slice = live.slices.get(env.action()).unwrap_or(&live.policies);
    let mut erroring = Vec::new();
    for forbid in slice.policies().filter(|p| p.effect() == Effect::Forbid) {
        let kept = candidate
            .policies
            .policy(forbid.id())
            .is_some_and(|c| form(c) == form(forbid));
        if kept {
            continue;
        }
        let compiled = match CompiledPolicy::compile(forbid, env, &live.schema) {
            Ok(c) => c,
            Err(e) => {
                return Some(Unproved::Failed(format!(
                    "cannot compile `{}`: {e}",
                    forbid.id()
                )));
            }
        };
        match prover
            .ask(async |s| s.check_never_errors_opt(&compiled).await)
            .await
        {
            Ok(true) => {}
            Ok(false) => erroring.push(format!("`{}`", forbid.id())),
            Err(why) => return Some(why),
        }
    }
    (!erroring.is_empty()).then(|| Unproved::ErroringForbid(erroring.join(", ")))
}
