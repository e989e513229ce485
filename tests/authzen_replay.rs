//! Replaying the decisions of the decision applications, through the real
//! server and the real binary: `cedargate audit replay --recorded` decides
//! every application record again under the set that made it (evaluations
//! with what their requests added, search pages result by result),
//! `--app APP --policies DIR` under a candidate folder of one application
//! (`--fail-on-flip` for CI), and the console's replay and what-if ask an
//! application's candidate about its own decisions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::TestGateway;
use common::cli::{run, stderr, stdout, write_config};
use common::console::{Console, finished, window};
use common::pdp::{Apps, copy_tree, fixture_dir};
use reqwest::StatusCode;
use reqwest::header::LOCATION;
use serde_json::{Value, json};

const AUDITOR_TOKEN: &str = "test-auditor-token-0123456789abcdef01";
const BASE: &str = "/pdp/records/access/v1";

/// The records fixture's policies without the one that lets admins write
/// archived records.
fn strict_policies() -> String {
    let text =
        std::fs::read_to_string(fixture_dir("records").join("policies/records.cedar")).unwrap();
    let start = text.find("@id(\"admins-write-archived-records\")").unwrap();
    let end = start + text[start..].find("};").unwrap() + 2;
    format!("{}{}", &text[..start], &text[end..])
}

/// A copy of the records application under `dir/name`, its policies
/// `policies` when given.
fn app_folder(dir: &Path, name: &str, policies: Option<&str>) -> PathBuf {
    let folder = dir.join(name);
    copy_tree(&fixture_dir("records"), &folder);
    if let Some(text) = policies {
        std::fs::write(folder.join("policies/records.cedar"), text).unwrap();
    }
    folder
}

fn user(id: &str) -> Value {
    json!({"type": "user", "id": id})
}

fn record(id: &str) -> Value {
    json!({"type": "record", "id": id})
}

/// Decisions of every kind on `records` (evaluations, one adding an
/// entity, a batch, two search pages) and one on `other`; the ids of the
/// evaluations of carol and of the search pages.
async fn traffic(g: &TestGateway) -> Value {
    let key = g.pdp_key("acme", &["records", "other"]).await;
    let carol = json!({"type": "user", "id": "carol", "properties": {"role": "admin"}});
    let ask =
        |s: Value, a: &str, r: Value| json!({"subject": s, "action": {"name": a}, "resource": r});
    let mut ids = json!({});
    for (name, body, expected) in [
        (
            "alice-read",
            ask(user("alice"), "read", record("record-1")),
            true,
        ),
        ("carol-write", ask(carol, "write", record("record-2")), true),
        (
            "alice-write",
            ask(user("alice"), "write", record("record-2")),
            false,
        ),
    ] {
        let (status, answer) = g.pdp(&format!("{BASE}/evaluation"), &key, body).await;
        assert_eq!(
            (status, answer["decision"].as_bool()),
            (200, Some(expected)),
            "{answer}"
        );
        ids[name] = answer["context"]["decision_id"].clone();
    }
    let batch = json!({"subject": user("bob"), "resource": record("record-2"),
        "evaluations": [{"action": {"name": "read"}}, {"action": {"name": "write"}}]});
    let (status, answer) = g.pdp(&format!("{BASE}/evaluations"), &key, batch).await;
    assert_eq!(status, 200, "{answer}");
    let searches = [
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "write"}, "resource": record("record-2")}),
            json!([{"type": "user", "id": "bob"}]),
        ),
        (
            "action",
            json!({"subject": user("bob"), "resource": record("record-2")}),
            json!([{"name": "read"}, {"name": "write"}]),
        ),
    ];
    for (kind, body, results) in searches {
        let (status, answer) = g.pdp(&format!("{BASE}/search/{kind}"), &key, body).await;
        assert_eq!((status, &answer["results"]), (200, &results), "{answer}");
        ids[kind] = answer["context"]["decision_id"].clone();
    }
    let (status, answer) = g
        .pdp(
            "/pdp/other/access/v1/evaluation",
            &key,
            ask(user("bob"), "read", record("record-1")),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    ids
}

fn replay_json(cfg: &Path, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["audit", "replay", "--format", "json"];
    all.extend_from_slice(args);
    let o = run(cfg, &all);
    let report = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    (o.status.code(), report)
}

/// The flips of a report as `(action, principal, resource)`.
fn flips(report: &Value) -> Vec<(String, String, String)> {
    let mut all: Vec<_> = report["flips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap().to_string();
            (text("action"), text("principal"), text("resource"))
        })
        .collect();
    all.sort();
    all
}

#[tokio::test]
async fn audit_replay_decides_application_records_under_their_sets_and_candidates() {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| c.pdp_dir = dir).await;
    traffic(&g).await;
    let records = g.decisions().await.len() as u64;
    let data = g.stop().await.into_dir();
    let cfg = write_config(data.path(), &common::repo().join("policies"));

    // Under the sets that made them: every record, exactly.
    let (code, r) = replay_json(&cfg, &["--recorded", "--fail-on-flip"]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(
        (r["records"].as_u64(), r["identical"].as_u64()),
        (Some(records), Some(records)),
        "{r}"
    );
    assert_eq!(r["unreplayable"], json!([]));
    // 3 evaluations, a batch of 2, 1 + 2 search results, 1 on `other`.
    assert_eq!(r["decisions"], 9, "{r}");
    // Carol's, alice's, the batch's and the subject search's.
    assert_eq!(r["perAction"]["authzen:records:write"]["records"], 4, "{r}");
    assert_eq!(r["perAction"]["authzen:records:*"]["records"], 1, "{r}");
    assert!(r["perAction"]["authzen:other:read"].is_object(), "{r}");

    // A candidate of `records` that no longer lets admins write archived
    // records: carol's (whose role her request added), bob's in the batch
    // and bob as each search's result flip; `other` is not read.
    let candidates = tempfile::tempdir().unwrap();
    let strict = app_folder(candidates.path(), "strict", Some(&strict_policies()));
    let args = [
        "--app",
        "records",
        "--policies",
        strict.to_str().unwrap(),
        "--fail-on-flip",
    ];
    let (code, r) = replay_json(&cfg, &args);
    assert_eq!(code, Some(1), "--fail-on-flip fails on a flip: {r}");
    let (carol, bob) = (r#"Records::user::"carol""#, r#"Records::user::"bob""#);
    let archived = r#"Records::record::"record-2""#;
    let write = "authzen:records:write".to_string();
    assert_eq!(
        flips(&r),
        vec![
            (write.clone(), bob.into(), archived.into()),
            (write.clone(), bob.into(), archived.into()),
            (write.clone(), bob.into(), archived.into()),
            (write.clone(), carol.into(), archived.into()),
        ],
        "{r}"
    );
    assert_eq!(
        (r["allowToDeny"].as_u64(), r["denyToAllow"].as_u64()),
        (Some(4), Some(0))
    );
    let carols = r["flips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["principal"] == carol)
        .unwrap();
    assert_eq!(
        carols["oldReasons"],
        json!(["admins-write-archived-records"])
    );
    assert_eq!(carols["newReasons"], json!([]), "nothing permits it now");
    assert!(
        r["perAction"]
            .as_object()
            .unwrap()
            .keys()
            .all(|a| a.starts_with("authzen:records:")),
        "only the application's records: {r}"
    );
    assert_eq!(r["unreplayable"], json!([]));

    // The application's own set as a candidate: nothing flips.
    let same = app_folder(candidates.path(), "same", None);
    let args = [
        "--app",
        "records",
        "--policies",
        same.to_str().unwrap(),
        "--fail-on-flip",
    ];
    let (code, r) = replay_json(&cfg, &args);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["records"], r["identical"], "{r}");

    // Under the recorded sets, one application's records only.
    let (code, r) = replay_json(&cfg, &["--recorded", "--app", "other"]);
    assert_eq!((code, r["records"].as_u64()), (Some(0), Some(1)), "{r}");
    // A candidate that is no application folder, a name that is no
    // application's: refused before anything is read.
    let o = run(
        &cfg,
        &[
            "audit",
            "replay",
            "--app",
            "records",
            "--policies",
            candidates.path().to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("schema.cedarschema"), "{}", stderr(&o));
    let o = run(&cfg, &["audit", "replay", "--recorded", "--app", "../x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The console's replay and what-if take a candidate of an application
/// (pasted, or a folder among the candidate directories) and ask it about
/// that application's decisions only.
#[tokio::test]
async fn the_console_replays_and_asks_what_if_of_an_application() {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.auditor_token = Some(AUDITOR_TOKEN.into());
    })
    .await;
    let ids = traffic(&g).await;
    app_folder(
        &g.gw.config.data_dir.join("candidates"),
        "strict",
        Some(&strict_policies()),
    );
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;

    let (status, page) = c.get("/console/replay?application=records").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<strong data-application=\"records\">"),
        "{page}"
    );
    assert!(
        page.contains("admins-write-archived-records"),
        "the application's own policies: {page}"
    );
    let (since, until) = window();
    let strict = strict_policies();
    for candidate in [
        vec![("source", "dir"), ("candidate_dir", "strict")],
        vec![("source", "text"), ("policy_text", strict.as_str())],
    ] {
        let mut form = vec![
            ("application", "records"),
            ("since", since.as_str()),
            ("until", until.as_str()),
        ];
        form.extend(candidate);
        let resp = c.post("/console/replay", &form).await;
        assert_eq!(
            resp.status(),
            StatusCode::SEE_OTHER,
            "{}",
            resp.text().await.unwrap()
        );
        let html = finished(&c, resp.headers()[LOCATION].to_str().unwrap()).await;
        assert!(html.contains("id=\"flip-count\">4<"), "{html}");
        assert!(html.contains("application records"), "{html}");
    }

    // What-if from carol's decision: the application's active set, then
    // the candidate; the principal changed to alice, without the role.
    let carol = ids["carol-write"].as_str().unwrap();
    let (_, page) = c.get(&format!("/console/replay?template={carol}")).await;
    assert!(page.contains("application records"), "{page}");
    assert!(page.contains("archived-records-are-read-only"), "{page}");
    let records = g.decisions().await.len();
    let ask = |source: &'static str, principal: &'static str| {
        let c = &c;
        async move {
            let resp = c
                .post(
                    "/console/whatif",
                    &[
                        ("template", carol),
                        ("principal", principal),
                        ("action", "authzen:records:write"),
                        ("resource", r#"Records::record::"record-2""#),
                        ("context", "{}"),
                        ("source", source),
                        ("candidate_dir", "strict"),
                    ],
                )
                .await;
            let status = resp.status();
            let html = resp.text().await.unwrap();
            assert_eq!(status, 200, "{html}");
            html
        }
    };
    let live = ask("live", r#"Records::user::"carol""#).await;
    assert!(live.contains("id=\"whatif-decision\">allow<"), "{live}");
    assert!(
        live.contains("data-policy-id=\"admins-write-archived-records\""),
        "{live}"
    );
    let candidate = ask("dir", r#"Records::user::"carol""#).await;
    assert!(
        candidate.contains("id=\"whatif-decision\">deny<"),
        "{candidate}"
    );
    let alice = ask("live", r#"Records::user::"alice""#).await;
    assert!(alice.contains("id=\"whatif-decision\">deny<"), "{alice}");
    assert!(
        alice.contains("data-policy-id=\"archived-records-are-read-only\""),
        "{alice}"
    );
    // An action the application does not declare is a clear 400.
    let resp = c
        .post(
            "/console/whatif",
            &[
                ("template", carol),
                ("principal", r#"Records::user::"carol""#),
                ("action", "fly"),
                ("resource", r#"Records::record::"record-2""#),
                ("context", "{}"),
                ("source", "live"),
            ],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("`fly`"));
    assert_eq!(
        g.decisions().await.len(),
        records,
        "questions are not recorded"
    );
}
