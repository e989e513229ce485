//! `GET /console/`: the decisions of the last hour. A chart of allows and
//! denies per minute, the most denied tools and principals, and the trail
//! table filtered by org, session, principal, action, resource, decision
//! and time, newest first, paged by keyset (`before` = the last seq shown),
//! never by OFFSET, so page 1,000 costs what page 1 does.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Html;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::auth::Viewer;
use super::error::ConsoleError;
use super::filters::FilterForm;
use crate::gateway::Gateway;
use crate::store::audit_query::{self, Order};
use crate::store::decisions::StoredDecision;
use crate::store::trail_stats::{self, Ranked};

/// Rows per page of the table.
pub const PAGE_ROWS: usize = 50;
/// Entries of each "most denied" list.
const TOP: usize = 10;

/// The page's query: the filter plus the keyset cursor.
#[derive(Debug, Default, Deserialize)]
pub struct OverviewQuery {
    #[serde(flatten)]
    filter: FilterForm,
    /// Show records with a seq below this one.
    #[serde(default)]
    before: String,
}

/// One table row.
#[derive(Debug, Serialize)]
struct Row {
    seq: i64,
    id: String,
    time: String,
    org: Option<String>,
    session: Option<String>,
    principal: String,
    action: String,
    resource: String,
    decision: String,
    reasons: Vec<String>,
}

impl From<StoredDecision> for Row {
    fn from(d: StoredDecision) -> Row {
        let r = d.record;
        Row {
            seq: d.seq,
            reasons: serde_json::from_str(&r.reasons).unwrap_or_default(),
            id: r.id,
            time: r.time,
            org: r.org_id,
            session: r.session_id,
            principal: r.principal,
            action: r.action,
            resource: r.resource,
            decision: r.decision,
        }
    }
}

/// The hour ending now: its bounds and its minutes (`YYYY-MM-DDTHH:MM`).
fn last_hour() -> (String, String, Vec<String>) {
    let now = OffsetDateTime::now_utc();
    let end = now
        .replace_second(0)
        .unwrap_or(now)
        .replace_nanosecond(0)
        .unwrap_or(now)
        + time::Duration::minutes(1);
    let start = end - time::Duration::hours(1);
    let slots = (0..60)
        .map(|m| crate::ids::rfc3339(start + time::Duration::minutes(m))[..16].to_string())
        .collect();
    (crate::ids::rfc3339(start), crate::ids::rfc3339(end), slots)
}

/// `GET /console/`.
pub async fn page(
    State(gw): State<Arc<Gateway>>,
    viewer: Viewer,
    query: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Html<String>, ConsoleError> {
    let Query(q) = query.map_err(|e| ConsoleError::BadRequest(e.body_text()))?;
    let filter = q.filter.to_filter()?;
    let before = match q.before.trim() {
        "" => None,
        b => Some(b.parse::<i64>().map_err(|_| {
            ConsoleError::BadRequest(format!("`before` must be a record seq, not `{b}`"))
        })?),
    };
    let (since, until, slots) = last_hour();
    // Records the writer still holds would be missing from the page.
    gw.store.writer().flush().await?;
    let (rows, minutes, tools, principals, orgs) = gw
        .store
        .read(move |c| {
            let rows = audit_query::page_filtered(c, &filter, before, Order::Desc, PAGE_ROWS + 1)?;
            let minutes = trail_stats::per_minute(c, &since, &until)?;
            let tools = trail_stats::most_denied(c, Ranked::Tool, &since, &until, TOP)?;
            let principals = trail_stats::most_denied(c, Ranked::Principal, &since, &until, TOP)?;
            let orgs = crate::store::tenants::list_orgs(c)?;
            Ok((rows, minutes, tools, principals, orgs))
        })
        .await?;
    let more = rows.len() > PAGE_ROWS;
    let rows: Vec<Row> = rows.into_iter().take(PAGE_ROWS).map(Row::from).collect();
    let next = more.then(|| rows.last().map(|r| r.seq)).flatten();
    let chart = super::chart::per_minute(&slots, &minutes);
    let org_ids: Vec<String> = orgs.into_iter().map(|o| o.id).collect();
    let applications: Vec<String> = gw.pdp.apps().iter().map(|a| a.name.clone()).collect();
    super::templates::render(
        "overview.html",
        minijinja::context! {
            viewer => viewer_ctx(&viewer),
            filter => q.filter,
            actions => action_names(),
            orgs => org_ids,
            applications,
            rows,
            next,
            paged => before.is_some(),
            chart,
            tools,
            principals,
        },
    )
}

/// What every page shows about the viewer.
pub fn viewer_ctx(viewer: &Viewer) -> minijinja::Value {
    minijinja::context! {
        role => viewer.role,
        csrf => viewer.csrf,
        admin => viewer.is_admin(),
        person => viewer.person.as_deref(),
    }
}

/// The actions a filter may name: Cedar's, then the console's own.
fn action_names() -> Vec<String> {
    crate::policy::Action::ALL
        .iter()
        .map(|a| a.name().to_string())
        .chain(
            ["reload_policies", "approve_tools"]
                .iter()
                .map(|v| format!("{}{v}", crate::store::decisions::OPERATOR_ACTION_PREFIX)),
        )
        .collect()
}
