//! A candidate set of a decision application deciding its live requests
//! beside the active set (shadow mode, `crate::pdp::shadow`).
//!
//! The candidate is a folder laid out as the application's
//! (`schema.cedarschema`, `policies/`), loaded and validated by the same
//! loader ([`super::load::load_app`]). It decides the live request exactly
//! as the active set decided it: the same principal, action, resource and
//! context, on the live entity data with what the request added. Its own
//! `entities.json`, if it has one, is checked against its schema at load
//! but not decided with: entity data changes are gated by the policy tests
//! of a reload, and shadow compares policies on the data the live
//! decisions use, as the gateway's shadow does.
//!
//! Under the active schema the live request and entities are decided as
//! they are; under another schema they are read again against the
//! candidate's (the live data once per version of it, the request as
//! replay reads a recorded one), and what does not fit is a deny naming
//! why.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::recorded::RecordedEvaluation;
use super::{AppSet, Prepared};
use crate::policy::{PolicyBundle, PolicyLoadError, Verdict};

/// The candidate on one version of the live data, or why it does not
/// load under the candidate's schema.
type OnData = Arc<Result<AppSet, String>>;

/// A candidate set of one application.
#[derive(Debug)]
pub struct CandidateSet {
    /// The candidate's policies and schema.
    pub bundle: Arc<PolicyBundle>,
    /// The application's name.
    name: String,
    /// The candidate on the live entity data of one version (its hash),
    /// when the candidate's schema is not the active one.
    on_live_data: Mutex<Option<(String, OnData)>>,
}

impl CandidateSet {
    /// Loads the candidate folder `dir` of the application `name`.
    pub fn load(name: &str, dir: &Path) -> Result<CandidateSet, PolicyLoadError> {
        let set = super::load::load_app(name, dir)?;
        Ok(CandidateSet {
            bundle: set.bundle,
            name: name.to_string(),
            on_live_data: Mutex::new(None),
        })
    }

    /// The candidate's verdict on a live request the active set `live`
    /// prepared (and decided).
    pub fn decide(&self, live: &AppSet, prepared: &Prepared<'_>) -> Verdict {
        if self.bundle.schema_hash == live.bundle.schema_hash {
            return self
                .bundle
                .decide_request(&prepared.request, &prepared.entities);
        }
        let set = self.on_data_of(live);
        let set = match set.as_ref() {
            Ok(set) => set,
            Err(e) => return Verdict::denied_with(e.clone()),
        };
        let principal = prepared.principal.text();
        let resource = prepared.resource.text();
        let recorded = RecordedEvaluation {
            principal: &principal,
            action: prepared.action.id(),
            resource: &resource,
            context: &prepared.context,
            added: &prepared.overlay,
        };
        set.decide_recorded(&recorded)
            .unwrap_or_else(|e| Verdict::denied_with(e.to_string()))
    }

    /// The candidate on `live`'s entity data, read once per version of it.
    fn on_data_of(&self, live: &AppSet) -> OnData {
        if let Ok(cached) = self.on_live_data.lock()
            && let Some((hash, set)) = cached.as_ref()
            && *hash == live.data.hash
        {
            return Arc::clone(set);
        }
        let set = Arc::new(
            super::load::with_data(
                &self.name,
                Arc::clone(&self.bundle),
                &live.data.json,
                &live.data.path,
            )
            .map_err(|e| format!("the live entity data does not fit the candidate's schema: {e}")),
        );
        if let Ok(mut cached) = self.on_live_data.lock() {
            *cached = Some((live.data.hash.clone(), Arc::clone(&set)));
        }
        set
    }
}
