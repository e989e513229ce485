//! Decision replay: re-evaluate recorded decisions exactly (their recorded
//! principal, action, resource, context and entity snapshot) under a
//! candidate policy set, or under the set that made each of them, and
//! report every flip with the old and new deciding policies, plus totals
//! per action and per policy.
//!
//! A batched `view_tool` record (one `tools/list`) holds one decision per
//! tool: each is replayed alone against its recorded verdict, counted as a
//! decision, and a flip names the tool as its resource; the record counts
//! once in `records` and is identical when all its tools are.
//!
//! Records of operator actions taken in the web console
//! (`console:*` actions) are not Cedar decisions: replay skips them. The
//! decisions of the AuthZEN decision applications (`authzen:<app>:*`
//! actions) were made by their applications' sets, never the gateway's:
//! replayed under the recorded sets, each is decided again under the
//! application set that made it; under a candidate of the gateway's set
//! they are left out; under a candidate of one application
//! ([`Against::Application`]) only that application's records are read
//! (rules in `replay/application.rs`).
//!
//! [`replay_with`] reports progress and can be cancelled between pages
//! (the web console's replays); [`replay`] runs to the end.
//!
//! Fast by construction: parsed policy sets and entity snapshots are cached
//! by hash (a trail holds few distinct ones), records are read in pages,
//! and each page is evaluated in parallel (rayon) while the next one is
//! read and resolved (`rayon::join`; tallies stay in chain order). A
//! verdict that cannot differ is reused per snapshot
//! (`policy::replay_verdicts`), and a record's prelude decisions share one
//! parsed context (`policy::recorded::SharedContext`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::store::Conn;
use rayon::prelude::*;
use serde::Serialize;

use crate::audit::NodeBatchError;
use crate::audit::prelude::{self, PreludeError};
use crate::audit::tool_list::{self, ToolListError};
use crate::policy::application::AppSet;
use crate::policy::application::recorded::RecordedError;
use crate::policy::recorded::{
    RecordedEntities, RecordedRequest, RecordedRequestError, SharedContext, SnapshotError,
};
use crate::policy::{PolicyBundle, PolicyFile, PolicyLoadError, Uid, UidError, Verdict};
use crate::store::StoreError;
use crate::store::audit_query::{self, DecisionFilter};
use crate::store::decisions::StoredDecision;

mod application;

pub use application::of_action as application_of;

/// Records read and evaluated per batch: small enough that a page's rows
/// are reused memory rather than fresh pages from the kernel (16,384 spent
/// a tenth of the replay zeroing new pages), large enough to keep both
/// cores busy while the next page is read.
const PAGE: usize = 2_048;

/// Which policies to replay under.
#[derive(Debug, Clone)]
pub enum Against {
    /// One candidate set for every record.
    Candidate(Arc<PolicyBundle>),
    /// Each record under the set that made it (from `policy_sets`), the
    /// decision applications' records included.
    Recorded,
    /// A candidate set of the decision application `name`, for its
    /// records only (each on the entity data it was decided on).
    Application {
        /// The application.
        name: String,
        /// Its candidate set (policies and schema).
        bundle: Arc<PolicyBundle>,
    },
}

impl Against {
    /// The candidate's hash (none for the recorded sets).
    pub fn candidate_hash(&self) -> Option<String> {
        match self {
            Against::Candidate(b) | Against::Application { bundle: b, .. } => Some(b.hash.clone()),
            Against::Recorded => None,
        }
    }
}

/// One decision whose verdict changed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flip {
    /// Chain position.
    pub seq: i64,
    /// Decision id.
    pub id: String,
    /// When it was made.
    pub time: String,
    /// Org.
    pub org_id: Option<String>,
    /// Action.
    pub action: String,
    /// Principal.
    pub principal: String,
    /// Resource.
    pub resource: String,
    /// `allow_to_deny` or `deny_to_allow`.
    pub flip: String,
    /// Recorded decision.
    pub old_decision: String,
    /// Replayed decision.
    pub new_decision: String,
    /// Recorded determining policies.
    pub old_reasons: Vec<String>,
    /// Replayed determining policies.
    pub new_reasons: Vec<String>,
    /// Replayed errors.
    pub new_errors: Vec<String>,
}

/// Totals of one action (flips and changed reasons count decisions).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionTotals {
    /// Records replayed.
    pub records: u64,
    /// Allow → deny.
    pub allow_to_deny: u64,
    /// Deny → allow.
    pub deny_to_allow: u64,
    /// Same decision, other deciding policies or errors.
    pub changed_reasons: u64,
}

/// Totals of one policy id.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTotals {
    /// Records it determined as recorded.
    pub determined_before: u64,
    /// Records it determines on replay.
    pub determined_after: u64,
    /// Flips it took part in (on either side).
    pub flips: u64,
}

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// Hash of the candidate set (absent when replaying under the recorded sets).
    pub candidate_hash: Option<String>,
    /// Records replayed.
    pub records: u64,
    /// Decisions replayed: one per record, but one per tool of a batched
    /// `view_tool` record (a `tools/list`).
    pub decisions: u64,
    /// Records whose decisions all match (decision, deciding policies and
    /// errors).
    pub identical: u64,
    /// Decisions allow → deny.
    pub allow_to_deny: u64,
    /// Decisions deny → allow.
    pub deny_to_allow: u64,
    /// Decisions with the same outcome but other deciding policies or errors.
    pub changed_reasons: u64,
    /// Every flip, in chain order (a listed tool's flip names the tool).
    pub flips: Vec<Flip>,
    /// Per action.
    pub per_action: BTreeMap<String, ActionTotals>,
    /// Per policy id.
    pub per_policy: BTreeMap<String, PolicyTotals>,
    /// Records that could not be replayed (and why).
    pub unreplayable: Vec<String>,
    /// Trail events met (held or approved upstream definitions): they
    /// record no Cedar decision, so nothing is replayed for them.
    pub events: u64,
    /// Wall time.
    pub seconds: f64,
}

impl ReplayReport {
    /// Flips in total.
    pub fn flip_count(&self) -> u64 {
        self.allow_to_deny + self.deny_to_allow
    }

    /// Records per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Why a replay could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A filter is invalid.
    #[error("{0}")]
    Filter(String),
    /// [`Control::cancel`] was called.
    #[error("the replay was cancelled after {0} record(s)")]
    Cancelled(u64),
}

/// Progress and cancellation of a running replay, shared with whoever
/// watches it.
#[derive(Debug, Default)]
pub struct Control {
    cancelled: AtomicBool,
    read: AtomicU64,
}

impl Control {
    /// Asks the replay to stop before its next page.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`Control::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Records read so far.
    pub fn records_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

/// Why one record could not be replayed (listed in the report's
/// `unreplayable`). Cloneable, with shared sources, because the failure
/// to load a policy set or snapshot is cached and given to every record
/// that needs it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreplayable {
    /// The policy set that made the record does not load.
    #[error(transparent)]
    PolicySet(Arc<RecordedSetError>),
    /// The record's entity snapshot is not stored.
    #[error("entity snapshot does not load: entity snapshot `{0}` is missing")]
    SnapshotMissing(String),
    /// The entity snapshot does not load under the deciding schema.
    #[error("entity snapshot does not load: {0}")]
    Snapshot(Arc<SnapshotError>),
    /// A recorded uid does not parse.
    #[error("recorded uid `{text}` does not parse: {source}")]
    Uid {
        /// The recorded text.
        text: String,
        /// The parse error.
        source: UidError,
    },
    /// The action or context column cannot be used.
    #[error(transparent)]
    Request(Arc<RecordedRequestError>),
    /// A batched `read_node` record does not replay.
    #[error(transparent)]
    Batch(Arc<NodeBatchError>),
    /// A batched `view_tool` record (a `tools/list`) does not replay.
    #[error(transparent)]
    ToolList(Arc<ToolListError>),
    /// The prelude decisions a record holds cannot be read.
    #[error("prelude: {0}")]
    Prelude(Arc<PreludeError>),
    /// A decision application's entity snapshot does not load under the
    /// deciding set.
    #[error("the application's entity snapshot does not load: {0}")]
    AppData(Arc<PolicyLoadError>),
    /// A decision application's record cannot be decided again.
    #[error(transparent)]
    AppRequest(RecordedError),
}

/// Why a recorded policy set cannot be loaded again.
#[derive(Debug, thiserror::Error)]
pub enum RecordedSetError {
    /// No set with this hash is recorded.
    #[error("policy set `{0}` is not recorded")]
    NotRecorded(String),
    /// The recorded files are not readable JSON.
    #[error("policy set `{hash}` is unreadable: {source}")]
    Unreadable {
        /// The set's hash.
        hash: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The recorded texts do not hash to the set's name: they were edited
    /// after it was recorded (`audit verify` reports it too).
    #[error(
        "policy set `{hash}` was altered: its stored text hashes to `{recomputed}`, so it is not the set that decided"
    )]
    Altered {
        /// The set's hash (what the records name).
        hash: String,
        /// What the stored texts hash to.
        recomputed: String,
    },
    /// The recorded sources no longer validate.
    #[error("policy set `{hash}` no longer loads: {source}")]
    NoLongerLoads {
        /// The set's hash.
        hash: String,
        /// The load error.
        source: PolicyLoadError,
    },
}

/// The bundle and entities a record replays with, or why it cannot.
type Resolved = Result<(Arc<PolicyBundle>, Arc<RecordedEntities>, Uid, Uid), Unreplayable>;

/// Parsed bundles and entity snapshots, by hash (looked up several times
/// per record: foldhash, not SipHash).
#[derive(Default)]
struct Caches {
    bundles: Fast<Result<Arc<PolicyBundle>, Unreplayable>>,
    /// Decision applications' sets on their recorded data: by policy-set
    /// hash, then snapshot hash.
    apps: Fast<Fast<Result<Arc<AppSet>, Unreplayable>>>,
    /// By schema hash, then snapshot hash (looked up by `&str`: no key is
    /// copied per record).
    entities: Fast<Fast<Result<Arc<RecordedEntities>, Unreplayable>>>,
    uids: Fast<Result<Uid, Unreplayable>>,
}

/// A map by text with a fast hasher.
type Fast<V> = HashMap<String, V, foldhash::fast::RandomState>;

impl Caches {
    /// What `row` replays with: its bundle, then its entity snapshot, then
    /// its uids (the first that fails is the reason). Only the store
    /// failing stops the replay.
    fn resolve(
        &mut self,
        conn: &mut Conn,
        against: &Against,
        row: &StoredDecision,
    ) -> Result<Resolved, StoreError> {
        let bundle = match against {
            Against::Candidate(b) | Against::Application { bundle: b, .. } => Arc::clone(b),
            Against::Recorded => match self.bundle(conn, &row.record.policy_hash)? {
                Ok(b) => b,
                Err(e) => return Ok(Err(e)),
            },
        };
        let entities = match self.snapshot(conn, &bundle, &row.record.entities_hash)? {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        // Entity uids repeat across a trail: parse each once.
        Ok(self.uid(&row.record.principal).and_then(|principal| {
            let resource = self.uid(&row.record.resource)?;
            Ok((bundle, entities, principal, resource))
        }))
    }

    /// The recorded policy set `hash`, loaded once.
    fn bundle(
        &mut self,
        conn: &mut Conn,
        hash: &str,
    ) -> Result<Result<Arc<PolicyBundle>, Unreplayable>, StoreError> {
        if let Some(b) = self.bundles.get(hash) {
            return Ok(b.clone());
        }
        let b = recorded_bundle(conn, hash)?
            .map(Arc::new)
            .map_err(|e| Unreplayable::PolicySet(Arc::new(e)));
        self.bundles.insert(hash.to_string(), b.clone());
        Ok(b)
    }

    /// The entity snapshot `hash`, parsed once per schema.
    fn snapshot(
        &mut self,
        conn: &mut Conn,
        bundle: &PolicyBundle,
        hash: &str,
    ) -> Result<Result<Arc<RecordedEntities>, Unreplayable>, StoreError> {
        if let Some(e) = self
            .entities
            .get(&bundle.schema_hash)
            .and_then(|of_schema| of_schema.get(hash))
        {
            return Ok(e.clone());
        }
        let parsed = match crate::store::decisions::entity_snapshot(conn, hash)? {
            None => Err(Unreplayable::SnapshotMissing(hash.to_string())),
            Some(text) => bundle
                .parse_recorded_entities(&text)
                .map(Arc::new)
                .map_err(|e| Unreplayable::Snapshot(Arc::new(e))),
        };
        self.entities
            .entry(bundle.schema_hash.clone())
            .or_default()
            .insert(hash.to_string(), parsed.clone());
        Ok(parsed)
    }

    /// A recorded uid, parsed once (bounded: a trail has few distinct ones,
    /// and the cache is dropped when it grows past [`UID_CACHE_MAX`]).
    fn uid(&mut self, text: &str) -> Result<Uid, Unreplayable> {
        if let Some(u) = self.uids.get(text) {
            return u.clone();
        }
        if self.uids.len() >= UID_CACHE_MAX {
            self.uids.clear();
        }
        let parsed = text.parse::<Uid>().map_err(|source| Unreplayable::Uid {
            text: text.to_string(),
            source,
        });
        self.uids.insert(text.to_string(), parsed.clone());
        parsed
    }
}

/// Most parsed uids kept at once.
const UID_CACHE_MAX: usize = 100_000;

/// A bundle from a recorded policy set, exactly as it was loaded; refused
/// when its stored texts no longer hash to `hash` (edited after recording).
pub fn recorded_bundle(
    conn: &mut Conn,
    hash: &str,
) -> Result<Result<PolicyBundle, RecordedSetError>, StoreError> {
    let Some((schema_path, schema_text, files)) = audit_query::policy_set(conn, hash)? else {
        return Ok(Err(RecordedSetError::NotRecorded(hash.to_string())));
    };
    let files: Vec<PolicyFile> = match serde_json::from_str(&files) {
        Ok(f) => f,
        Err(source) => {
            return Ok(Err(RecordedSetError::Unreadable {
                hash: hash.to_string(),
                source,
            }));
        }
    };
    let bundle = match crate::policy::load::bundle_from_sources(&schema_path, &schema_text, files) {
        Ok(b) => b,
        Err(source) => {
            return Ok(Err(RecordedSetError::NoLongerLoads {
                hash: hash.to_string(),
                source,
            }));
        }
    };
    if bundle.hash != hash {
        return Ok(Err(RecordedSetError::Altered {
            hash: hash.to_string(),
            recomputed: bundle.hash,
        }));
    }
    Ok(Ok(bundle))
}

/// Replays every record matching `filter`.
pub fn replay(
    conn: &mut Conn,
    filter: &DecisionFilter,
    against: &Against,
) -> Result<ReplayReport, ReplayError> {
    replay_with(conn, filter, against, &Control::default())
}

/// [`replay`], counting the records read in `control` and stopping with
/// [`ReplayError::Cancelled`] before the next page once it is cancelled.
pub fn replay_with(
    conn: &mut Conn,
    filter: &DecisionFilter,
    against: &Against,
    control: &Control,
) -> Result<ReplayReport, ReplayError> {
    let started = Instant::now();
    let mut report = ReplayReport {
        candidate_hash: against.candidate_hash(),
        ..ReplayReport::default()
    };
    let mut caches = Caches::default();
    let (filter, only) = widened(&application::narrowed(filter, against));
    let filter = &filter;
    let only = only.as_deref();
    let mut page = read_page(conn, filter, only, None, against, &mut caches, control)?;
    while let Some(current) = page {
        // The next page is read and resolved while this one is evaluated;
        // pages are still counted in chain order.
        let (replayed, next) = rayon::join(
            || evaluate(&current),
            || {
                read_page(
                    conn,
                    filter,
                    only,
                    current.last_seq,
                    against,
                    &mut caches,
                    control,
                )
            },
        );
        for (row, decisions) in current.rows.iter().zip(replayed) {
            match decisions {
                None => report.events += 1,
                Some(d) => tally(
                    &mut report,
                    row,
                    d.map(|d| of_action(d, &row.record.action, only)),
                ),
            }
        }
        page = next?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A filter on an action a prelude can hold (`access_session`,
/// `view_tool`) must also find the records holding such a prelude: the
/// action is then dropped from the query and returned, to select the
/// records and count only that action's decisions
/// ([`crate::audit::prelude`]).
fn widened(filter: &DecisionFilter) -> (DecisionFilter, Option<String>) {
    match &filter.action {
        Some(action) if prelude::may_hold(action) => (
            DecisionFilter {
                action: None,
                ..filter.clone()
            },
            Some(action.clone()),
        ),
        _ => (filter.clone(), None),
    }
}

/// Whether `row` holds a decision of `action` (its own or a prelude's).
fn holds_action(row: &StoredDecision, action: &str) -> bool {
    row.record.action == action
        || prelude::preludes(&row.record).is_ok_and(|ps| ps.iter().any(|p| p.action == action))
}

/// The decisions of `only`'s action (all of them without one); a
/// record's own decisions have its action `own`.
fn of_action(decisions: Vec<Replayed>, own: &str, only: Option<&str>) -> Vec<Replayed> {
    let Some(action) = only else {
        return decisions;
    };
    decisions
        .into_iter()
        .filter(|d| d.prelude.as_ref().map_or(own, |(a, _)| a.as_str()) == action)
        .collect()
}

/// What one record of a page replays with.
enum Target {
    /// A trail event: nothing to replay.
    Event,
    /// A decision of the gateway's set.
    Gateway(Resolved),
    /// A decision of a decision application.
    Application(Result<Arc<AppSet>, Unreplayable>),
}

/// One page of the trail with what each record replays with.
struct Page {
    rows: Vec<StoredDecision>,
    resolved: Vec<Target>,
    /// Cursor after this page.
    last_seq: Option<i64>,
}

/// Reads the page after `cursor` and resolves its bundles and snapshots
/// (sequential: one connection); `None` after the last page.
fn read_page(
    conn: &mut Conn,
    filter: &DecisionFilter,
    only: Option<&str>,
    cursor: Option<i64>,
    against: &Against,
    caches: &mut Caches,
    control: &Control,
) -> Result<Option<Page>, ReplayError> {
    if control.is_cancelled() {
        return Err(ReplayError::Cancelled(control.records_read()));
    }
    let mut rows = audit_query::replay_page(conn, filter, cursor, PAGE)?;
    let Some(last) = rows.last() else {
        return Ok(None);
    };
    let last_seq = Some(last.seq);
    control.read.fetch_add(rows.len() as u64, Ordering::Relaxed);
    rows.retain(|r| {
        let action = &r.record.action;
        !action.starts_with(crate::store::decisions::OPERATOR_ACTION_PREFIX)
            && application::replays(against, action)
            && only.is_none_or(|action| holds_action(r, action))
    });
    let mut resolved = Vec::with_capacity(rows.len());
    for row in &rows {
        resolved.push(if crate::audit::events::is_event(&row.record) {
            Target::Event
        } else if let Some(app) = application::of_action(&row.record.action) {
            Target::Application(caches.resolve_app(conn, against, app, row)?)
        } else {
            Target::Gateway(caches.resolve(conn, against, row)?)
        });
    }
    Ok(Some(Page {
        rows,
        resolved,
        last_seq,
    }))
}

/// Decides every record of a page again, on the rayon pool, in order
/// (`None` for a trail event).
fn evaluate(page: &Page) -> Vec<Option<Result<Vec<Replayed>, Unreplayable>>> {
    page.rows
        .par_iter()
        .zip(&page.resolved)
        .map(|(row, target)| match target {
            Target::Event => None,
            Target::Gateway(r) => Some(replay_one(row, r)),
            Target::Application(set) => Some(application::replay_record(row, set)),
        })
        .collect()
}

/// A verdict as the trail holds it.
#[derive(Debug, Clone)]
struct Recorded {
    allowed: bool,
    reasons: Vec<String>,
    errors: Vec<String>,
}

impl Recorded {
    /// The record's own columns.
    fn of(r: &crate::store::decisions::NewDecision) -> Recorded {
        Recorded {
            allowed: r.decision == "allow",
            reasons: json_list(&r.reasons),
            errors: json_list(&r.errors),
        }
    }
}

/// Whether two lists hold the same items, in whatever order (equal lists,
/// nearly every record, cost no copy).
fn same_set(a: &[String], b: &[String]) -> bool {
    if a == b {
        return true;
    }
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// A recorded JSON list of strings (most are empty: no parse then).
fn json_list(text: &str) -> Vec<String> {
    if text == "[]" {
        return Vec::new();
    }
    serde_json::from_str(text).unwrap_or_default()
}

/// Adds one to the totals of `key` (the key is copied only when new).
fn bump<T: Default>(map: &mut BTreeMap<String, T>, key: &str, count: impl FnOnce(&mut T)) {
    if !map.contains_key(key) {
        map.insert(key.to_string(), T::default());
    }
    if let Some(t) = map.get_mut(key) {
        count(t);
    }
}

/// One decision of a record, decided again.
#[derive(Debug)]
struct Replayed {
    /// The decision's own action and principal when they are not the
    /// record's: a prelude of the record ([`crate::audit::prelude`]), a
    /// result of a search page.
    prelude: Option<(String, String)>,
    /// The decision's own resource when the record holds several (a
    /// listed tool, a prelude); otherwise the record's.
    resource: Option<String>,
    recorded: Recorded,
    now: Verdict,
}

/// Decides the decisions of one resolved record again.
fn replay_one(row: &StoredDecision, resolved: &Resolved) -> Result<Vec<Replayed>, Unreplayable> {
    let mut all = replay_preludes(row, resolved)?;
    all.extend(replay_own(row, resolved)?);
    Ok(all)
}

/// Decides again, each alone, the prelude decisions a record holds.
fn replay_preludes(
    row: &StoredDecision,
    resolved: &Resolved,
) -> Result<Vec<Replayed>, Unreplayable> {
    let (bundle, entities, principal, resource) = resolved.as_ref().map_err(Clone::clone)?;
    let r = &row.record;
    let preludes = prelude::preludes(r).map_err(|e| Unreplayable::Prelude(Arc::new(e)))?;
    // A prelude has one context for all its decisions: parsed once.
    let Some(first) = preludes.first() else {
        return Ok(Vec::new());
    };
    let context =
        SharedContext::parse(&first.context).map_err(|e| Unreplayable::Request(Arc::new(e)))?;
    // Most preludes name the record's own principal or resource.
    let uid = |text: &str, known: &Uid, of_record: &str| {
        if text == of_record {
            Ok(known.clone())
        } else {
            text.parse::<Uid>().map_err(|source| Unreplayable::Uid {
                text: text.to_string(),
                source,
            })
        }
    };
    let mut out = Vec::with_capacity(preludes.len());
    for p in preludes {
        let p_principal = uid(&p.principal, principal, &r.principal)?;
        let p_resource = uid(&p.resource, resource, &r.resource)?;
        let now = context
            .decide(bundle, (p_principal, &p.action, p_resource), entities)
            .map_err(|e| Unreplayable::Request(Arc::new(e)))?;
        out.push(Replayed {
            now,
            resource: Some(p.resource),
            prelude: Some((p.action, p.principal)),
            recorded: Recorded {
                allowed: p.allowed,
                reasons: p.reasons,
                errors: p.errors,
            },
        });
    }
    Ok(out)
}

/// Decides again the decisions of the record's own columns.
fn replay_own(row: &StoredDecision, resolved: &Resolved) -> Result<Vec<Replayed>, Unreplayable> {
    let (bundle, entities, principal, resource) = resolved.as_ref().map_err(Clone::clone)?;
    let r = &row.record;
    if tool_list::is_tool_list(r) {
        let tools = tool_list::replay_tool_list(bundle, r, principal, entities)
            .map_err(|e| Unreplayable::ToolList(Arc::new(e)))?;
        return Ok(tools
            .into_iter()
            .map(|t| Replayed {
                prelude: None,
                resource: Some(t.resource.to_string()),
                recorded: Recorded {
                    allowed: t.recorded.allowed,
                    reasons: t.recorded.reasons,
                    errors: t.recorded.errors,
                },
                now: t.now,
            })
            .collect());
    }
    let now = if r.action == "read_node" && r.notes.contains("\"readNodeBatch\"") {
        replay_batch(bundle, r, entities.text()).map_err(|e| Unreplayable::Batch(Arc::new(e)))?
    } else {
        let req =
            RecordedRequest::with_uids(principal.clone(), &r.action, resource.clone(), &r.context)
                .map_err(|e| Unreplayable::Request(Arc::new(e)))?;
        bundle.decide_recorded_reusing(&req, entities)
    };
    Ok(vec![Replayed {
        prelude: None,
        resource: None,
        recorded: Recorded::of(r),
        now,
    }])
}

/// A batched `read_node` record (one Cedar decision per node) replayed as
/// the record states it: allowed when every node is, with the union of the
/// nodes' deciding policies and errors.
fn replay_batch(
    bundle: &PolicyBundle,
    record: &crate::store::decisions::NewDecision,
    slice: &str,
) -> Result<Verdict, NodeBatchError> {
    let nodes = crate::audit::replay_node_batch(bundle, record, slice)?;
    let mut reasons: Vec<String> = nodes.iter().flat_map(|n| n.reasons.clone()).collect();
    reasons.sort();
    reasons.dedup();
    let mut errors: Vec<String> = nodes.iter().flat_map(|n| n.errors.clone()).collect();
    errors.sort();
    errors.dedup();
    Ok(Verdict {
        allowed: nodes.iter().all(|n| n.decision == "allow"),
        reasons,
        errors,
        advice: Vec::new(),
    })
}

/// Counts one record: identical when every decision it holds is.
fn tally(
    report: &mut ReplayReport,
    row: &StoredDecision,
    replayed: Result<Vec<Replayed>, Unreplayable>,
) {
    let decisions = match replayed {
        Ok(d) => d,
        Err(e) => {
            report.unreplayable.push(format!(
                "seq {} (decision `{}`): {e}",
                row.seq, row.record.id
            ));
            return;
        }
    };
    report.records += 1;
    bump(&mut report.per_action, &row.record.action, |t| {
        t.records += 1
    });
    let mut identical = true;
    for d in decisions {
        identical &= tally_decision(report, row, d);
    }
    if identical {
        report.identical += 1;
    }
}

/// Counts one decision; whether it is identical to what was recorded.
fn tally_decision(report: &mut ReplayReport, row: &StoredDecision, d: Replayed) -> bool {
    let r = &row.record;
    report.decisions += 1;
    let Replayed {
        prelude,
        resource,
        recorded: old,
        now: verdict,
    } = d;
    let (action, principal) = match &prelude {
        Some((action, principal)) => (action.as_str(), principal.as_str()),
        None => (r.action.as_str(), r.principal.as_str()),
    };
    for id in &old.reasons {
        bump(&mut report.per_policy, id, |t| t.determined_before += 1);
    }
    for id in &verdict.reasons {
        bump(&mut report.per_policy, id, |t| t.determined_after += 1);
    }
    // `tally` made the record's action's entry; a prelude's is made here.
    if prelude.is_some() {
        bump(&mut report.per_action, action, |_| {});
    }
    let mut spare = ActionTotals::default();
    let totals = report.per_action.get_mut(action).unwrap_or(&mut spare);
    if old.allowed == verdict.allowed {
        // As sets: records written before reasons were sorted keep
        // Cedar's order, which varies from run to run.
        if same_set(&old.reasons, &verdict.reasons) && same_set(&old.errors, &verdict.errors) {
            return true;
        }
        report.changed_reasons += 1;
        totals.changed_reasons += 1;
        return false;
    }
    let flip = if old.allowed {
        report.allow_to_deny += 1;
        totals.allow_to_deny += 1;
        "allow_to_deny"
    } else {
        report.deny_to_allow += 1;
        totals.deny_to_allow += 1;
        "deny_to_allow"
    };
    let mut involved: Vec<&String> = old.reasons.iter().chain(&verdict.reasons).collect();
    involved.sort();
    involved.dedup();
    for id in involved {
        report.per_policy.entry(id.clone()).or_default().flips += 1;
    }
    report.flips.push(Flip {
        seq: row.seq,
        id: r.id.clone(),
        time: r.time.clone(),
        org_id: r.org_id.clone(),
        action: action.to_string(),
        principal: principal.to_string(),
        resource: resource.unwrap_or_else(|| r.resource.clone()),
        flip: flip.into(),
        old_decision: if old.allowed { "allow" } else { "deny" }.into(),
        new_decision: if verdict.allowed { "allow" } else { "deny" }.into(),
        old_reasons: old.reasons,
        new_reasons: verdict.reasons,
        new_errors: verdict.errors,
    });
    false
}

/// The report as a human-readable table.
pub fn render_table(r: &ReplayReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replayed {} record(s) holding {} decision(s) under {} in {:.3}s ({:.0} records/s)",
        r.records,
        r.decisions,
        r.candidate_hash
            .as_deref()
            .map(|h| format!("candidate {h}"))
            .unwrap_or_else(|| "the recorded policy sets".into()),
        r.seconds,
        r.rate()
    );
    let _ = writeln!(
        out,
        "identical {}  allow→deny {}  deny→allow {}  same decision, other reasons {}  unreplayable {}",
        r.identical,
        r.allow_to_deny,
        r.deny_to_allow,
        r.changed_reasons,
        r.unreplayable.len()
    );
    if r.events > 0 {
        let _ = writeln!(out, "trail events (no decision to replay): {}", r.events);
    }
    if !r.flips.is_empty() {
        let _ = writeln!(out, "\nflips:");
        let _ = writeln!(
            out,
            "{:>8}  {:<24}  {:<14}  {:<13}  {:<40}  {:<40}  old reasons → new reasons",
            "seq", "time", "action", "flip", "principal", "resource"
        );
        for f in &r.flips {
            let _ = writeln!(
                out,
                "{:>8}  {:<24}  {:<14}  {:<13}  {:<40}  {:<40}  [{}] → [{}]",
                f.seq,
                f.time,
                f.action,
                f.flip,
                f.principal,
                f.resource,
                f.old_reasons.join(", "),
                f.new_reasons.join(", ")
            );
        }
    }
    let _ = writeln!(out, "\nper action:");
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>11} {:>11} {:>14}",
        "action", "records", "allow→deny", "deny→allow", "other reasons"
    );
    for (a, t) in &r.per_action {
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>11} {:>11} {:>14}",
            a, t.records, t.allow_to_deny, t.deny_to_allow, t.changed_reasons
        );
    }
    let _ = writeln!(out, "\nper policy:");
    let _ = writeln!(
        out,
        "{:<48} {:>10} {:>10} {:>7}",
        "policy", "before", "after", "flips"
    );
    for (p, t) in &r.per_policy {
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>7}",
            p, t.determined_before, t.determined_after, t.flips
        );
    }
    for u in &r.unreplayable {
        let _ = writeln!(out, "unreplayable: {u}");
    }
    out
}
