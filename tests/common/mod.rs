//! Test harness: a real gateway on `127.0.0.1:0` with its own data
//! directory, plus helpers to create tenants and speak MCP to it.

#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod cli;
pub mod clients;
pub mod console;
pub mod modern;
pub mod oidc;
pub mod pdp;
pub mod pg;
pub mod sdk_peer;
pub mod setup;
pub mod skip;
pub mod sse;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cedargate::config::Config;
use cedargate::gateway::Gateway;
use cedargate::operator::{self, CreateAgent, CreateKey, CreateOrg, CreateProject, OpenSession};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// Admin token every test gateway uses.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef0123";

/// The repository root (policies/ and schemas/ live there).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running gateway.
pub struct TestGateway {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The shared state (for direct store access in assertions).
    pub gw: Arc<Gateway>,
    /// Its data directory (deleted on drop).
    pub dir: tempfile::TempDir,
    /// HTTP client.
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
    /// Policy directories made for this gateway (kept alive with it).
    policy_dirs: Vec<tempfile::TempDir>,
}

/// A tenant with one session.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub org: String,
    pub project: String,
    pub agent: String,
    pub key: String,
    pub key_id: String,
    pub session_id: String,
    pub mcp_url: String,
}

/// The database a test data directory uses: `None` for the default (SQLite
/// inside it) or, when the suite runs on PostgreSQL
/// (`CG_TEST_BACKEND=postgres`), a fresh schema on the shared server.
/// The URL is remembered in `dir/database-url`, so a gateway restarted over
/// the same directory finds the same database.
pub fn database_url_for(dir: &Path) -> Option<String> {
    if !pg::backend_is_postgres() {
        return None;
    }
    let marker = dir.join("database-url");
    if let Ok(url) = std::fs::read_to_string(&marker) {
        return Some(url);
    }
    let url = pg::fresh_schema_url(&pg::shared_url());
    std::fs::write(&marker, &url).unwrap();
    Some(url)
}

/// Drops the PostgreSQL schema a data directory was given, if any.
pub fn drop_database_of(dir: &Path) {
    if let Ok(url) = std::fs::read_to_string(dir.join("database-url")) {
        pg::drop_schema(&url);
    }
}

/// SQL that takes the trail's append-only triggers out of the way, as an
/// attacker with database access would, on `backend`.
pub fn drop_trail_guards(backend: cedargate::store::Backend) -> &'static str {
    match backend {
        // `decisions` is a view of the indexed and the recent table
        // (migration 14): the tamperer removes every guard and lets an
        // update through the view reach whichever table holds the record.
        cedargate::store::Backend::Sqlite => {
            "DROP TRIGGER decisions_no_update; DROP TRIGGER decisions_prune;
             DROP TRIGGER decisions_indexed_no_update; DROP TRIGGER decisions_indexed_no_delete;
             DROP TRIGGER decisions_recent_no_update; DROP TRIGGER decisions_recent_no_delete;
             CREATE TRIGGER decisions_tamper_update INSTEAD OF UPDATE ON decisions BEGIN
                 UPDATE decisions_indexed SET decision = new.decision, reasons = new.reasons,
                     notes = new.notes, outcome = new.outcome, context = new.context
                  WHERE seq = old.seq;
                 UPDATE decisions_recent SET decision = new.decision, reasons = new.reasons,
                     notes = new.notes, outcome = new.outcome, context = new.context
                  WHERE seq = old.seq;
             END;
             CREATE TRIGGER decisions_tamper_delete INSTEAD OF DELETE ON decisions BEGIN
                 DELETE FROM decisions_indexed WHERE seq = old.seq;
                 DELETE FROM decisions_recent WHERE seq = old.seq;
             END;"
        }
        cedargate::store::Backend::Postgres => {
            "ALTER TABLE decisions DISABLE TRIGGER decisions_no_update;
             ALTER TABLE decisions DISABLE TRIGGER decisions_no_delete;"
        }
    }
}

/// Runs SQL that bypasses the trail's append-only guard (tamper tests):
/// `update` runs with the `decisions` triggers out of the way, on whichever
/// backend `url` names.
pub fn tamper_decisions(url: &str, update: &str) {
    use cedargate::store::{Store, StoreOptions};
    let url = url.to_string();
    let update = update.to_string();
    std::thread::spawn(move || {
        let store = Store::open_ready(&url, &StoreOptions::default()).unwrap();
        store
            .read_blocking(|c| {
                let sql = format!("{} {update}", drop_trail_guards(c.backend()));
                c.execute_batch(&sql)
            })
            .unwrap();
    })
    .join()
    .unwrap();
}

/// Copies the shipped policies into a fresh directory tests may edit.
pub fn copy_policies(dest: &Path) -> PathBuf {
    let dir = dest.join("policies");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(repo().join("policies")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "cedar") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

impl TestGateway {
    /// A gateway on the shipped policies.
    pub async fn start() -> TestGateway {
        Self::start_with(|_| {}).await
    }

    /// A gateway whose config `tweak` may change (its data dir is fresh).
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestGateway {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, tweak).await
    }

    /// A gateway over an existing data directory (restarts).
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config)) -> TestGateway {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let database = database_url_for(dir.path());
        let mut config = Config {
            listen: addr,
            public_url: Some(format!("http://{addr}")),
            data_dir: dir.path().join("data"),
            policies_dir: repo().join("policies"),
            schema_file: repo().join("schemas/gateway.cedarschema"),
            admin_token: Some(ADMIN_TOKEN.into()),
            demo_tenant: false,
            ..Config::default()
        };
        config.database.url = database;
        tweak(&mut config);
        let gw = cedargate::server::prepare(config)
            .await
            .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
        let (tx, rx) = oneshot::channel::<()>();
        let served = Arc::clone(&gw);
        let handle = tokio::spawn(async move {
            cedargate::server::run(listener, served, async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        TestGateway {
            base: format!("http://{addr}"),
            gw,
            dir,
            http: client(),
            shutdown: Some(tx),
            handle: Some(handle),
            policy_dirs: Vec::new(),
        }
    }

    /// A gateway on the shipped policies plus one extra policy file.
    pub async fn start_with_policy(file: &str, text: &str) -> TestGateway {
        let policy_dir = tempfile::tempdir().unwrap();
        let policies = copy_policies(policy_dir.path());
        std::fs::write(policies.join(file), text).unwrap();
        let mut g = Self::start_with(|c| c.policies_dir = policies).await;
        g.policy_dirs.push(policy_dir);
        g
    }

    /// The entity slice JSON a decision recorded, by its hash.
    pub async fn entity_snapshot(&self, hash: &str) -> String {
        let hash = hash.to_string();
        self.gw
            .store
            .read(move |c| cedargate::store::decisions::entity_snapshot(c, &hash))
            .await
            .unwrap()
            .expect("snapshot stored for every decision")
    }

    /// Rows in a table.
    pub async fn count(&self, table: &'static str) -> i64 {
        self.gw
            .store
            .read(move |c| {
                c.query_row(
                    &format!("SELECT COUNT(*) FROM {table}"),
                    cedargate::params![],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap()
    }

    /// The store's URL.
    pub fn database_url(&self) -> String {
        self.gw.config.database_url()
    }

    /// Stops the server (drains, flushes) and hands back the data dir.
    pub async fn stop(mut self) -> StoppedDir {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        StoppedDir(Some(std::mem::replace(&mut self.dir, dir)))
    }

    /// Creates org `org` with project `proj`, agent `agent` (roles), a key
    /// and a session, directly through the operator layer.
    pub async fn tenant_with(&self, org: &str, memory: bool, roles: &[&str]) -> Tenant {
        self.tenant_full(org, memory, false, &[], roles).await
    }

    /// Like [`TestGateway::tenant_with`], also choosing the project's graph
    /// flag and, when the org is new, its entitlements.
    pub async fn tenant_full(
        &self,
        org: &str,
        memory: bool,
        graph: bool,
        entitlements: &[&str],
        roles: &[&str],
    ) -> Tenant {
        let (org_s, roles_v) = (
            org.to_string(),
            roles.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        );
        let ents: Vec<String> = entitlements.iter().map(|e| e.to_string()).collect();
        let base = self.base.clone();
        self.gw
            .store
            .read(move |c| {
                let org = org_s;
                if cedargate::store::tenants::get_org(c, &org)?.is_none() {
                    operator::create_org(
                        c,
                        CreateOrg {
                            id: org.clone(),
                            name: format!("Org {org}"),
                            plan: None,
                            entitlements: Some(ents),
                        },
                    )?;
                }
                let project = format!("{org}-proj");
                operator::create_project(
                    c,
                    &org,
                    CreateProject {
                        id: project.clone(),
                        memory_enabled: memory,
                        graph_enabled: graph,
                    },
                )?;
                let agent = format!("{org}-agent");
                operator::create_agent(
                    c,
                    &org,
                    CreateAgent {
                        id: agent.clone(),
                        name: "Agent".into(),
                        roles: roles_v,
                    },
                )?;
                let (key, secret) = operator::create_key(
                    c,
                    &org,
                    CreateKey {
                        label: "daemon".into(),
                        pdp_apps: Vec::new(),
                    },
                )?;
                let s = operator::open_session(
                    c,
                    &org,
                    OpenSession {
                        project_id: project.clone(),
                        agent_id: agent.clone(),
                    },
                    Some(&key.id),
                )?;
                Ok(Tenant {
                    mcp_url: operator::mcp_url(&base, &s.id),
                    org,
                    project,
                    agent,
                    key: secret,
                    key_id: key.id,
                    session_id: s.id,
                })
            })
            .await
            .unwrap()
    }

    /// A tenant with memory on and role `developers`.
    pub async fn tenant(&self, org: &str) -> Tenant {
        self.tenant_with(org, true, &["developers"]).await
    }

    /// POSTs `body` to the tenant's MCP URL with its key.
    pub async fn mcp(&self, t: &Tenant, body: Value) -> (u16, Value) {
        self.mcp_raw(&t.mcp_url, Some(&t.key), &[], body.to_string())
            .await
    }

    /// POSTs raw text with optional key and extra headers; returns status
    /// and the JSON body (`Null` when empty).
    pub async fn mcp_raw(
        &self,
        url: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: String,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            req = req.header("authorization", format!("Bearer {k}"));
        }
        for (h, v) in headers {
            req = req.header(*h, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    /// Calls a tool and returns the JSON-RPC response.
    pub async fn call_tool(&self, t: &Tenant, name: &str, args: Value) -> Value {
        let (status, body) = self
            .mcp(t, json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"arguments":args}}))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The first column of every row of `sql`, as text.
    pub async fn texts(&self, sql: &'static str) -> Vec<String> {
        self.gw
            .store
            .read(move |c| c.query_map(sql, cedargate::params![], |r| r.get(0)))
            .await
            .unwrap()
    }

    /// The names `tools/list` shows the tenant.
    pub async fn tool_names(&self, t: &Tenant) -> Vec<String> {
        let (status, body) = self
            .mcp(t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
            .await;
        assert_eq!(status, 200, "{body}");
        body["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// `GET /metrics` as text.
    pub async fn metrics_text(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Admin API request.
    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            },
        )
    }

    /// Every decision record, oldest first (after a flush).
    /// Replays the whole trail under the sets that recorded it.
    pub async fn replay_recorded(&self) -> cedargate::replay::ReplayReport {
        self.gw
            .store
            .read(|c| {
                Ok(cedargate::replay::replay(
                    c,
                    &Default::default(),
                    &cedargate::replay::Against::Recorded,
                )
                .unwrap())
            })
            .await
            .unwrap()
    }

    pub async fn decisions(&self) -> Vec<cedargate::store::decisions::StoredDecision> {
        self.gw.store.writer().flush().await.unwrap();
        self.gw
            .store
            .read(|c| cedargate::store::decisions::tail(c, 1_000_000))
            .await
            .unwrap()
    }
}

/// The data directory of a stopped gateway. Dropped as is, it drops the
/// PostgreSQL schema too; [`StoppedDir::into_dir`] keeps both for a restart.
pub struct StoppedDir(Option<tempfile::TempDir>);

impl StoppedDir {
    /// Keeps the directory (and its database) for another gateway.
    pub fn into_dir(mut self) -> tempfile::TempDir {
        self.0.take().unwrap()
    }
}

impl Drop for StoppedDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            drop_database_of(dir.path());
        }
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        // Only the gateway still owning its directory (not stopped for a
        // restart) drops its PostgreSQL schema.
        drop_database_of(self.dir.path());
    }
}

/// The tools of a batched `view_tool` record (one per `tools/list`), each
/// with its decision (`allow` or `deny`); empty for any other record.
pub fn listed_verdicts(record: &cedargate::store::decisions::NewDecision) -> Vec<(String, String)> {
    let notes: Value = serde_json::from_str(&record.notes).unwrap_or(Value::Null);
    let list = &notes["toolList"];
    let Some(tools) = list["tools"].as_array() else {
        return Vec::new();
    };
    tools
        .iter()
        .map(|entry| {
            let verdict = entry[1].as_u64().unwrap_or(u64::MAX) as usize;
            let decision = list["verdicts"][verdict]["decision"].as_str().unwrap_or("");
            (
                entry[0].as_str().unwrap_or("").to_string(),
                decision.to_string(),
            )
        })
        .collect()
}

/// How many Cedar decisions a batched `view_tool` record stands for: one
/// per tool, except one per equivalence class of a peer's tools.
pub fn listed_decisions(record: &cedargate::store::decisions::NewDecision) -> usize {
    let notes: Value = serde_json::from_str(&record.notes).unwrap_or(Value::Null);
    let list = &notes["toolList"];
    let tools = list["tools"].as_array().map_or(0, Vec::len);
    let classes = list["classes"].as_array().cloned().unwrap_or_default();
    let classed: u64 = classes.iter().filter_map(|c| c["tools"].as_u64()).sum();
    tools - classed as usize + classes.len()
}

/// One decision of the trail as an auditor reads it: a record's own, or
/// one of the prelude decisions it holds (`audit::prelude`).
#[derive(Debug, Clone)]
pub struct Flat {
    /// The record holding it.
    pub seq: i64,
    pub action: String,
    pub decision: String,
    pub principal: String,
    pub resource: String,
    /// The context it was decided with.
    pub context: String,
    /// Its determining policies, as a JSON array text.
    pub reasons: String,
    /// The record's notes (a prelude's are its record's).
    pub notes: String,
}

/// Every decision `records` hold, in order: each record's prelude
/// decisions, then its own.
pub fn flat(records: &[cedargate::store::decisions::StoredDecision]) -> Vec<Flat> {
    let mut out = Vec::new();
    for d in records {
        for p in cedargate::audit::prelude::preludes(&d.record).unwrap() {
            out.push(Flat {
                seq: d.seq,
                action: p.action,
                decision: if p.allowed { "allow" } else { "deny" }.into(),
                principal: p.principal,
                resource: p.resource,
                context: p.context,
                reasons: Value::from(p.reasons).to_string(),
                notes: d.record.notes.clone(),
            });
        }
        out.push(Flat {
            seq: d.seq,
            action: d.record.action.clone(),
            decision: d.record.decision.clone(),
            principal: d.record.principal.clone(),
            resource: d.record.resource.clone(),
            context: d.record.context.clone(),
            reasons: d.record.reasons.clone(),
            notes: d.record.notes.clone(),
        });
    }
    out
}

/// A record's notes without the prelude it holds: what the step that made
/// it noted (`null` when that was nothing).
pub fn own_notes(record: &cedargate::store::decisions::NewDecision) -> Value {
    let mut notes: Value = serde_json::from_str(&record.notes).unwrap_or(Value::Null);
    if let Some(map) = notes.as_object_mut() {
        map.remove("prelude");
        if map.is_empty() {
            return Value::Null;
        }
    }
    notes
}

/// The tests' HTTP client. It drops a connection idle for 2 s, before the
/// gateway closes one idle for `http.idle_timeout_ms` (5 s by default): a
/// request sent on a pooled connection just as the server closes it fails
/// with `IncompleteMessage`, which a test waiting out a hang hit.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .unwrap()
}
