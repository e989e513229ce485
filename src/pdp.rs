//! cedargate as a policy decision point for other enforcement points: the
//! OpenID AuthZEN Authorization API 1.0 over *decision applications*, each
//! a policy set of its own on the gateway's policy lifecycle and trail.
//!
//! ## An application is a folder
//!
//! ```text
//! {pdp_dir}/<app>/                 pdp_dir: config key, default `pdp`
//!   schema.cedarschema             one namespace, its own (not `Gateway`)
//!   policies/*.cedar               every policy with a unique @id, optional @advice
//!   tests/*.json                   Cedar CLI `run-tests` format, run before every activation
//!   entities.json                  Cedar entity JSON (optional: absent, no stored data)
//! ```
//!
//! `<app>` is the folder's name: 1 to 64 of `[A-Za-z0-9_.-]`, not starting
//! with `.` (other folders are skipped with a warning). Each application
//! has a lifecycle of its own ([`lifecycle`]), the gateway's pipeline run
//! on its folder: the schema and every policy validated strictly by the
//! gateway's loader, the entity data type-checked against the schema, the
//! policy tests run (`cedar run-tests --schema schema.cedarschema
//! --policies policies/… --tests ./tests/x.json` agrees), and only then is
//! the set recorded (`policy_sets`, as the gateway's) and swapped in. A
//! failure keeps the application's last good set (none, if it never
//! loaded: its requests answer 503) and is reported in
//! `GET /admin/pdp/apps`. Entity data reloads through the same gate: a
//! changed `entities.json` is a new candidate like a changed policy.
//!
//! Applications are independent of the gateway's MCP policies and of each
//! other: they are loaded at start-up (a broken one never stops the
//! gateway from starting), on a change under its folder (file watch),
//! on SIGHUP (every application) and on `POST /admin/pdp/apps/reload` or
//! `POST /admin/pdp/apps/{app}/reload`; one application's failure never
//! touches another's set nor the gateway's, and a gateway reload never
//! touches an application. A removed folder removes its application. A
//! good set that could not be recorded (the database was down, as it may
//! be at start-up) is tried again every `database.heartbeat_secs`. A
//! candidate folder of an application can decide its live evaluations
//! beside the active set, deciding nothing ([`shadow`]: shadow mode, on
//! the gateway's shadow state).
//!
//! ## Where it answers
//!
//! Each application is a PDP of its own with base URL
//! `{public_url}/pdp/<app>`: `POST /pdp/<app>/access/v1/evaluation`,
//! `POST /pdp/<app>/access/v1/evaluations`,
//! `POST /pdp/<app>/access/v1/search/{subject,resource,action}` (rules in
//! [`search`]), and its metadata at
//! `GET /.well-known/authzen-configuration/pdp/<app>` (the well-known
//! string inserted after the host, as the specification derives it). The
//! application named by `pdp.default_app` also answers at the default
//! paths `/access/v1/…` and `/.well-known/authzen-configuration` (base URL
//! `{public_url}`). The metadata documents are public.
//!
//! ## Who may ask
//!
//! A key of the PDP role: `POST /admin/orgs/{org}/keys {"label", "pdpApps":
//! ["records"]}` (or `cedargate key create --pdp-app records`), sent as
//! `Authorization: Bearer rsk_live_…`. It asks the applications it names
//! and nothing else (another application: 403, whether it exists or not;
//! the MCP endpoints and `POST /api/sessions`: 403); a daemon key asks no
//! application. Wrong keys are throttled as everywhere
//! (`crate::guesses`), and a key's and its org's rate limits apply, one
//! token per evaluation.
//!
//! Or an access token from a configured identity provider, issued for the
//! application and granting the scope `authzen:<app>` (rules in
//! [`caller`]).
//!
//! ## Mapping and answers
//!
//! The mapping onto Cedar (`type`, `id`, `properties`, `action`, `context`)
//! is `crate::policy::application`'s, its rules in that module's doc: an
//! ill-typed request is a 400 naming the field, never a deny. A decision
//! answers `{"decision": bool, "context": {"decision_id", "policies",
//! "reason_user"?}}`: the id of its decision record, the determining
//! policies, and, when some determining policy has `@advice`, the advice
//! keyed by the HTTP status it stands for (`"403"` for a deny, `"200"` for
//! an allow), as the specification's example of `reason_user` does.
//!
//! ## Decisions where the specification is silent
//!
//! - **An evaluation of a batch that cannot be decided** (a member
//!   missing or of the wrong JSON type, or ill-typed for the schema) is an
//!   error of that evaluation alone, as the specification's
//!   evaluation-level errors are (and as the certification scenario's
//!   c-3-4-1 requires): it answers `{"decision": false, "context":
//!   {"error": {"status": 400, "message"}}}` in its place, the message
//!   naming the field (`evaluations[3].subject`), is not recorded (nothing
//!   was decided) and counts as a deny for the short-circuit semantics;
//!   the others are decided. A lone evaluation (`/evaluation`, or
//!   `/evaluations` without `evaluations`) that cannot be decided is a 400,
//!   never a deny, and a batch whose top level is ill-shaped or that
//!   exceeds a bound is refused whole. A decision never fails once its
//!   request is well-typed (a Cedar evaluation error on a `forbid` is a
//!   deny, recorded with the error).
//! - **`evaluations` absent or empty** is one evaluation of the top-level
//!   fields, answered as `/evaluation` answers it (`decision`, `context`)
//!   and also as a batch of one (`evaluations: [ … ]`), so a client
//!   reading either shape reads it.
//! - **Short-circuit semantics** (`deny_on_first_deny`,
//!   `permit_on_first_permit`) answer the evaluations decided, in order,
//!   up to the one that stopped the batch; the rest are neither decided nor
//!   recorded. An unknown `evaluations_semantic` is a 400.
//! - **Bounds** (`[pdp]`): the body (413), evaluations per request, one
//!   `properties` or `context` object, one `type`, `id` or `name` (400),
//!   and JSON nesting (`limits.max_json_depth`, 400), each checked before
//!   anything is decided.
//! - **Errors** are `{"error": {"code", "message"}}` like the operator
//!   API's (`error.rs`); `X-Request-ID` is echoed on every answer, errors
//!   included, and recorded with each decision (at most 256 bytes, else
//!   400).
//!
//! ## The trail
//!
//! Every evaluation is one decision record on the gateway's chain
//! ([`crate::audit::application`]): action `authzen:<app>:<action name>`,
//! principal and resource the Cedar uids, the context as decided, the
//! application's policy-set hash and entity-data snapshot, the determining
//! policies and errors, the caller's org; its notes name the application,
//! the key, the request id, the entities the request added and the members
//! left out. An answer is sent only after its records are committed.
//! `cedargate audit replay --app <app>` (and the console's replay and
//! what-if) decide them again under the set that made them or a candidate
//! of the application (`crate::replay`).

pub mod admin;
pub mod admission;
pub mod caller;
pub mod error;
pub mod evaluate;
pub mod input;
pub mod lifecycle;
pub mod metadata;
pub mod page_token;
pub mod routes;
pub mod search;
pub mod shadow;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwapOption;
use serde::Serialize;

use crate::lifecycle::Attempt;
use crate::lifecycle::shadow::Shadow;
use crate::metrics::Metrics;
use crate::policy::application::AppSet;
use crate::policy::application::candidate::CandidateSet;
use crate::store::Writer;

/// One application: its active set (the last good one) and its reloads.
#[derive(Debug)]
pub struct App {
    /// Its name.
    pub name: String,
    /// The set that decides (none until one loaded).
    active: ArcSwapOption<AppSet>,
    /// What its reloads have done.
    status: Mutex<AppStatus>,
    /// Its shadow candidate (rules in [`shadow`]).
    pub shadow: Shadow<CandidateSet>,
}

/// What an application's reloads have done so far.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The latest attempt.
    pub last_attempt: Option<Attempt>,
    /// The latest rejected attempt.
    pub last_error: Option<Attempt>,
}

impl App {
    fn new(name: &str, metrics: &Arc<Metrics>, writer: &Writer) -> App {
        App {
            name: name.to_string(),
            active: ArcSwapOption::empty(),
            status: Mutex::new(AppStatus::default()),
            shadow: Shadow::new(Arc::clone(metrics), writer.clone()),
        }
    }

    /// The set that decides now, if one ever loaded.
    pub fn active(&self) -> Option<Arc<AppSet>> {
        self.active.load_full()
    }

    /// A copy of the reload status.
    pub fn status(&self) -> AppStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Notes an attempt (a rejected one also as the last error).
    pub fn record(&self, attempt: &Attempt) {
        if let Ok(mut s) = self.status.lock() {
            if attempt.result == "rejected" {
                s.last_error = Some(attempt.clone());
            }
            s.last_attempt = Some(attempt.clone());
        }
    }

    /// Makes `set` the active one.
    pub fn activate(&self, set: AppSet) -> Arc<AppSet> {
        let set = Arc::new(set);
        self.active.store(Some(Arc::clone(&set)));
        set
    }
}

/// The decision applications of this instance.
#[derive(Debug)]
pub struct Pdp {
    /// The folder holding one folder per application.
    dir: PathBuf,
    /// Every application known, by name.
    apps: RwLock<BTreeMap<String, Arc<App>>>,
    /// One reload at a time (applications are reloaded one after another;
    /// each keeps its own set whatever the others' fate).
    pub(crate) reload_lock: tokio::sync::Mutex<()>,
    /// The gateway's metrics (decisions and shadow divergences are counted
    /// there).
    pub(crate) metrics: Arc<Metrics>,
    /// The trail's writer (shadow divergences are stored through it).
    writer: Writer,
}

impl Pdp {
    /// The applications under `dir` (none loaded yet), counted in
    /// `metrics`, their shadow divergences stored through `writer`.
    pub fn new(dir: &Path, metrics: Arc<Metrics>, writer: Writer) -> Pdp {
        Pdp {
            dir: dir.to_path_buf(),
            apps: RwLock::new(BTreeMap::new()),
            reload_lock: tokio::sync::Mutex::new(()),
            metrics,
            writer,
        }
    }

    /// The applications' folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An application by name.
    pub fn app(&self, name: &str) -> Option<Arc<App>> {
        self.apps.read().ok()?.get(name).cloned()
    }

    /// Every application, by name.
    pub fn apps(&self) -> Vec<Arc<App>> {
        self.apps
            .read()
            .map(|a| a.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The application `name`, made known if it was not.
    pub fn app_or_new(&self, name: &str) -> Option<Arc<App>> {
        let mut apps = self.apps.write().ok()?;
        Some(Arc::clone(apps.entry(name.to_string()).or_insert_with(
            || Arc::new(App::new(name, &self.metrics, &self.writer)),
        )))
    }

    /// Forgets the application `name` (its folder is gone).
    pub fn remove(&self, name: &str) -> Option<Arc<App>> {
        self.apps.write().ok()?.remove(name)
    }
}
