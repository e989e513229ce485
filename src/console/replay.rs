//! `/console/replay`: replay a time window of the trail under a candidate
//! set, on the same code as `cedargate audit replay`
//! ([`crate::replay::replay_with`]), in the background, with progress and
//! a cancel button; then the flips grouped by action, tool and deciding
//! policy, each opening its decision. Bounds, checked before anything
//! runs: a window no longer than `console.replay_max_window_hours`,
//! holding at most `console.replay_max_records` records, and at most
//! `console.replay_jobs` replays at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::ConsoleState;
use super::auth::{Posted, Viewer};
use super::candidates::{self, CandidateForm};
use super::error::ConsoleError;
use super::jobs::{Job, JobSpec, JobState};
use super::overview::viewer_ctx;
use crate::gateway::Gateway;
use crate::replay::{Against, ReplayError, ReplayReport};
use crate::store::audit_query::{self, DecisionFilter};

/// Flips listed on a job's page (the counts cover them all).
const FLIPS_SHOWN: usize = 500;

/// `GET /console/replay` query.
#[derive(Debug, Default, Deserialize)]
pub struct FormQuery {
    /// A decision to prefill the what-if form with.
    #[serde(default)]
    template: String,
    /// A decision application whose candidates the forms take (its
    /// decisions only); the template's application when it has one.
    #[serde(default)]
    application: String,
    /// A counterexample of the last proof (its index on the Policy set
    /// page) to prefill the what-if form with, against the proof's
    /// candidate.
    #[serde(default)]
    counterexample: Option<usize>,
}

/// `datetime-local` text of a time.
fn local(t: OffsetDateTime) -> String {
    crate::ids::rfc3339(t)[..16].to_string()
}

/// `GET /console/replay`.
pub async fn form(
    State(gw): State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
    Query(q): Query<FormQuery>,
) -> Result<Html<String>, ConsoleError> {
    let now = OffsetDateTime::now_utc();
    let template = super::whatif::template(&gw, q.template.trim()).await?;
    let counterexample = q
        .counterexample
        .map(|i| counterexample(&gw, i))
        .transpose()?;
    let application = template
        .as_ref()
        .and_then(|t| t.application.clone())
        .or_else(|| Some(q.application.trim().to_string()).filter(|a| !a.is_empty()));
    let live_text = match &application {
        Some(app) => candidates::live_text(&candidates::app_set(&gw, app)?.bundle),
        None => candidates::live_text(&gw.pep.current()),
    };
    let applications: Vec<String> = gw.pdp.apps().iter().map(|a| a.name.clone()).collect();
    let jobs: Vec<_> = console
        .jobs
        .recent()
        .iter()
        .map(|j| minijinja::context! { id => j.id, started_at => j.started_at, spec => j.spec, state => state_name(&j.state()) })
        .collect();
    let c = &gw.config.console;
    super::templates::render(
        "replay.html",
        minijinja::context! {
            viewer => viewer_ctx(&viewer),
            since => local(now - time::Duration::hours(1)),
            until => local(now + time::Duration::minutes(1)),
            live_text,
            application,
            applications,
            dirs => candidates::offered(&gw),
            root => candidates::root(&gw).display().to_string(),
            max_records => c.replay_max_records,
            max_hours => c.replay_max_window_hours,
            template,
            counterexample,
            jobs,
        },
    )
}

/// The last proof's counterexample `index` as the what-if form takes it
/// (the request in Cedar's terms, its entities, the proof's candidate).
fn counterexample(gw: &Gateway, index: usize) -> Result<minijinja::Value, ConsoleError> {
    let proof = gw.lifecycle.last_proof();
    let c = proof
        .as_deref()
        .and_then(|p| p.counterexamples.get(index).map(|c| (p, c)));
    let Some((proof, c)) = c else {
        return Err(ConsoleError::NotFound(format!(
            "the last proof has no counterexample {index}"
        )));
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    Ok(minijinja::context! {
        index,
        env => c.env,
        direction => c.direction,
        principal => c.witness.principal,
        action => c.witness.action,
        resource => c.witness.resource,
        context => pretty(&c.witness.context),
        entities => pretty(&c.witness.entities),
        candidate_hash => proof.candidate_hash,
        live_hash => proof.live_hash,
    })
}

fn state_name(s: &JobState) -> &'static str {
    match s {
        JobState::Running => "running",
        JobState::Done(_) => "done",
        JobState::Failed(_) => "failed",
        JobState::Cancelled(_) => "cancelled",
    }
}

/// `POST /console/replay` form.
#[derive(Debug, Deserialize)]
pub struct StartForm {
    #[serde(flatten)]
    candidate: CandidateForm,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    org: String,
}

/// The window, checked against `replay_max_window_hours`.
fn window(gw: &Gateway, form: &StartForm) -> Result<(String, String), ConsoleError> {
    let since = super::filters::time("since", &form.since)?;
    let until = super::filters::time("until", &form.until)?;
    let (Some(since), Some(until)) = (since, until) else {
        return Err(ConsoleError::BadRequest(
            "a replay needs a window: both `since` and `until`".into(),
        ));
    };
    let parse =
        |t: &str| crate::ids::parse_rfc3339(t).map_err(|e| ConsoleError::BadRequest(e.to_string()));
    let span = parse(&until)? - parse(&since)?;
    if span <= time::Duration::ZERO {
        return Err(ConsoleError::BadRequest(
            "`until` must be after `since`".into(),
        ));
    }
    let max = gw.config.console.replay_max_window_hours;
    if span > time::Duration::hours(i64::try_from(max).unwrap_or(i64::MAX)) {
        return Err(ConsoleError::TooMuch(format!(
            "the window is longer than {max} hour(s) (console.replay_max_window_hours): narrow it"
        )));
    }
    Ok((since, until))
}

/// `POST /console/replay`: checks the bounds, loads the candidate, starts
/// the job and shows its page.
pub async fn start(
    State(gw): State<Arc<Gateway>>,
    Extension(console): Extension<Arc<ConsoleState>>,
    posted: Posted<StartForm>,
) -> Result<Response, ConsoleError> {
    let started_by = posted.viewer.role;
    let form = posted.form;
    let (since, until) = window(&gw, &form)?;
    if form.candidate.source == "live" {
        return Err(ConsoleError::BadRequest(
            "replay compares the trail with a candidate: paste one or pick a directory".into(),
        ));
    }
    let (bundle, against) = candidates::load(&gw, &form.candidate).await?;
    let application = form.candidate.application().map(str::to_string);
    let filter = DecisionFilter {
        application: application.clone(),
        org: Some(form.org.trim().to_string()).filter(|o| !o.is_empty()),
        since: Some(since.clone()),
        until: Some(until.clone()),
        ..DecisionFilter::default()
    };
    gw.store.writer().flush().await?;
    let total = records_in(&gw, &since, &until).await?;
    let spec = JobSpec {
        against,
        candidate_hash: bundle.hash.clone(),
        since,
        until,
        org: filter.org.clone(),
        total,
    };
    let job = console.jobs.admit(Job::new(spec, started_by)?)?;
    let against = match application {
        Some(name) => Against::Application { name, bundle },
        None => Against::Candidate(bundle),
    };
    run(Arc::clone(&gw), Arc::clone(&job), filter, against);
    Ok((
        StatusCode::SEE_OTHER,
        [(LOCATION, format!("{}/replay/{}", super::PATH, job.id))],
    )
        .into_response())
}

/// The records in the window (from the chain's seq range: an upper
/// bound, found in two index probes), refused above the bound.
async fn records_in(gw: &Gateway, since: &str, until: &str) -> Result<u64, ConsoleError> {
    let (s, u) = (since.to_string(), until.to_string());
    let range = gw
        .store
        .read(move |c| audit_query::seq_range(c, Some(&s), Some(&u)))
        .await?;
    let total = range.map_or(0, |(from, to)| u64::try_from(to - from + 1).unwrap_or(0));
    let max = gw.config.console.replay_max_records;
    if total > max {
        return Err(ConsoleError::TooMuch(format!(
            "the window holds {total} records, more than {max} (console.replay_max_records): narrow it"
        )));
    }
    Ok(total)
}

/// Runs `job` as one store read, off the async workers (on SQLite it
/// holds one read thread, and so one read connection, while it runs).
fn run(gw: Arc<Gateway>, job: Arc<Job>, filter: DecisionFilter, against: Against) {
    tokio::spawn(async move {
        let control = Arc::clone(&job.control);
        let result = gw
            .store
            .read(move |c| Ok(crate::replay::replay_with(c, &filter, &against, &control)))
            .await;
        job.finish(match result {
            Ok(Ok(report)) => JobState::Done(Arc::new(report)),
            Ok(Err(ReplayError::Cancelled(n))) => JobState::Cancelled(n),
            Ok(Err(e)) => JobState::Failed(e.to_string()),
            Err(e) => {
                tracing::error!(error = %e, "console replay failed");
                JobState::Failed("the store failed".into())
            }
        });
    });
}

/// Flips counted by one key.
#[derive(Debug, Serialize)]
struct Group {
    key: String,
    allow_to_deny: u64,
    deny_to_allow: u64,
}

fn group_by<'a>(
    report: &'a ReplayReport,
    keys: impl Fn(&'a crate::replay::Flip) -> Vec<&'a str>,
) -> Vec<Group> {
    let mut groups: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for f in &report.flips {
        for k in keys(f) {
            let g = groups.entry(k).or_default();
            if f.flip == "allow_to_deny" {
                g.0 += 1;
            } else {
                g.1 += 1;
            }
        }
    }
    let mut out: Vec<Group> = groups
        .into_iter()
        .map(|(key, (a, d))| Group {
            key: key.to_string(),
            allow_to_deny: a,
            deny_to_allow: d,
        })
        .collect();
    out.sort_by(|a, b| {
        (b.allow_to_deny + b.deny_to_allow).cmp(&(a.allow_to_deny + a.deny_to_allow))
    });
    out
}

/// The deciding policies of a flip, on either side (`(none)` for a
/// default deny).
fn deciding(f: &crate::replay::Flip) -> Vec<&str> {
    let mut ids: Vec<&str> = f
        .old_reasons
        .iter()
        .chain(&f.new_reasons)
        .map(String::as_str)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        ids.push("(none: default deny)");
    }
    ids
}

/// `GET /console/replay/{job}`: progress while it runs (the page reloads
/// itself every second, no script needed), the flips once done.
pub async fn status(
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let job = console.jobs.get(&id).ok_or_else(|| {
        ConsoleError::NotFound("no such replay (finished ones are kept for a while)".into())
    })?;
    let state = job.state();
    let read = job.control.records_read();
    let percent = (read * 100)
        .checked_div(job.spec.total)
        .unwrap_or(100)
        .min(100);
    let (report, error, cancelled) = match &state {
        JobState::Done(r) => (Some(Arc::clone(r)), None, None),
        JobState::Failed(e) => (None, Some(e.clone()), None),
        JobState::Cancelled(n) => (None, None, Some(*n)),
        JobState::Running => (None, None, None),
    };
    let groups = report.as_ref().map(|r| {
        minijinja::context! {
            by_action => group_by(r, |f| vec![f.action.as_str()]),
            by_tool => group_by(r, |f| vec![f.resource.as_str()]),
            by_policy => group_by(r, deciding),
        }
    });
    let flips = report.as_ref().map(|r| {
        r.flips
            .iter()
            .take(FLIPS_SHOWN)
            .cloned()
            .collect::<Vec<_>>()
    });
    super::templates::render(
        "replay_job.html",
        minijinja::context! {
            viewer => viewer_ctx(&viewer),
            job => minijinja::context! { id => job.id, started_at => job.started_at, spec => job.spec },
            may_cancel => job.may_cancel(viewer.role),
            state => state_name(&state),
            read,
            percent,
            report => report.as_deref(),
            flip_count => report.as_ref().map(|r| r.flip_count()),
            groups,
            flips,
            flips_shown => FLIPS_SHOWN,
            error,
            cancelled,
        },
    )
}

/// `POST /console/replay/{job}/cancel`: an auditor cannot cancel an
/// admin's replay (403, the replay runs on).
pub async fn cancel(
    Extension(console): Extension<Arc<ConsoleState>>,
    Path(id): Path<String>,
    posted: Posted<super::auth::Empty>,
) -> Result<Response, ConsoleError> {
    let job = console
        .jobs
        .get(&id)
        .ok_or_else(|| ConsoleError::NotFound("no such replay".into()))?;
    if !job.may_cancel(posted.viewer.role) {
        return Err(ConsoleError::Forbidden(
            "an admin started this replay: the auditor token cannot cancel it".into(),
        ));
    }
    job.control.cancel();
    Ok((
        StatusCode::SEE_OTHER,
        [(LOCATION, format!("{}/replay/{}", super::PATH, job.id))],
    )
        .into_response())
}
