//! Recall sees every remembered observation at once, although SQLite adds
//! an observation to its full-text index only after the remember was
//! answered (`src/store/writer.rs`, "Observations wait for the text
//! index"), and opening the store indexes what a crash left waiting. Both
//! backends unless noted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use common::pg::backend_is_postgres;
use common::{Tenant, TestGateway};
use serde_json::{Value, json};

/// The text of a recall's answer for `query`.
async fn recall(g: &TestGateway, t: &Tenant, query: &str) -> String {
    let body: Value = g
        .call_tool(
            t,
            "af_memory_recall",
            json!({"query": query, "workType": "feature"}),
        )
        .await;
    assert_eq!(body["result"]["isError"], false, "{body}");
    body["result"].to_string()
}

#[tokio::test]
async fn a_recall_right_after_a_remember_finds_it() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    for i in 0..40 {
        let word = format!("kestrel{i}x");
        remember(&g, &t, &format!("the {word} nests on the roof")).await;
        let found = recall(&g, &t, &word).await;
        assert!(found.contains(&word), "round {i}: {found}");
    }
}

#[tokio::test]
async fn observations_left_out_of_the_index_are_indexed_when_the_store_opens() {
    let Some((g, mut t)) = sqlite_gateway().await else {
        return;
    };
    // What a crash between a remember's commit and its indexing leaves:
    // a stored row the index does not hold (written behind the writer's
    // back, so it never learns of it).
    let (org, project) = (t.org.clone(), t.project.clone());
    g.gw.store
        .read(move |c| {
            c.execute(
                "INSERT INTO observations (id, org_id, project_id, session_id, agent_id, content, created_at)
                 VALUES ('crash-1', ?1, ?2, 's', 'a', 'the osprey dives at dawn', '2026-11-27T00:00:00Z')",
                cedargate::params![org, project],
            )
        })
        .await
        .unwrap();
    assert!(!recall(&g, &t, "osprey").await.contains("osprey dives"));
    let dir = g.stop().await.into_dir();
    let g = TestGateway::start_in(dir, |_| {}).await;
    t.mcp_url = format!("{}/api/mcp/{}", g.base, t.session_id);
    let found = recall(&g, &t, "osprey").await;
    assert!(found.contains("osprey dives"), "{found}");
}

#[tokio::test]
async fn a_search_after_the_wait_sees_every_committed_observation() {
    use cedargate::store::WriteOp;
    use cedargate::store::observations::{self, NewObservation};
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let store = &g.gw.store;
    for i in 0..50 {
        let word = format!("plover{i}x");
        let o = NewObservation {
            id: format!("obs-{i}"),
            org_id: t.org.clone(),
            project_id: t.project.clone(),
            session_id: t.session_id.clone(),
            agent_id: t.agent.clone(),
            content: format!("a {word} on the shore"),
            obs_type: None,
            confidence: None,
            created_at: "2026-11-27T00:00:00Z".into(),
        };
        store
            .writer()
            .submit(vec![WriteOp::Observation(Box::new(o))])
            .await
            .unwrap();
        store.text_indexed().await;
        let (org, project, q) = (t.org.clone(), t.project.clone(), word.clone());
        let hits = store
            .read(move |c| observations::search(c, &org, &project, &q, 5))
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "round {i}: {word} not found");
    }
}

/// A gateway and a tenant on SQLite; `None` on PostgreSQL, which indexes
/// an observation in its own statement (nothing waits there).
async fn sqlite_gateway() -> Option<(TestGateway, Tenant)> {
    if backend_is_postgres() {
        return None;
    }
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    Some((g, t))
}

/// The text index's mark: the newest observation seq it holds.
async fn indexed_upto(g: &TestGateway) -> i64 {
    g.gw.store
        .read(|c| {
            c.query_row(
                "SELECT seq FROM observations_fts_upto WHERE id = 1",
                cedargate::params![],
                |r| r.get(0),
            )
        })
        .await
        .unwrap()
}

async fn remember(g: &TestGateway, t: &Tenant, text: &str) {
    let body = g
        .call_tool(t, "af_memory_remember", json!({ "content": text }))
        .await;
    assert_eq!(body["result"]["isError"], false, "{body}");
}

#[tokio::test]
async fn remembers_are_indexed_unasked_once_sixty_four_wait() {
    let Some((g, t)) = sqlite_gateway().await else {
        return;
    };
    for i in 0..63 {
        remember(&g, &t, &format!("note {i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(indexed_upto(&g).await, 0, "63 wait: no indexing yet");
    remember(&g, &t, "note 63").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while indexed_upto(&g).await < 64 {
        assert!(Instant::now() < deadline, "64 waited and were not indexed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_recall_waits_one_second_at_most_for_a_failing_index() {
    let Some((g, t)) = sqlite_gateway().await else {
        return;
    };
    remember(&g, &t, "the heron stands in the reeds").await;
    assert!(recall(&g, &t, "heron").await.contains("heron stands"));
    // Indexing now fails (its mark cannot move), the search still works.
    g.gw.store
        .read(|c| {
            c.execute_batch(
                "CREATE TRIGGER upto_broken BEFORE UPDATE ON observations_fts_upto
                 BEGIN SELECT RAISE(ABORT, 'broken'); END;",
            )
        })
        .await
        .unwrap();
    remember(&g, &t, "the egret stands in the reeds").await;
    let started = Instant::now();
    let found = tokio::time::timeout(Duration::from_secs(10), recall(&g, &t, "stands reeds"))
        .await
        .expect("the wait is bounded");
    let waited = started.elapsed();
    assert!(found.contains("heron stands"), "{found}");
    assert!(!found.contains("egret"), "not indexed: {found}");
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Mended, the next recall indexes what waits and finds it.
    g.gw.store
        .read(|c| c.execute_batch("DROP TRIGGER upto_broken;"))
        .await
        .unwrap();
    let found = recall(&g, &t, "egret").await;
    assert!(found.contains("egret stands"), "{found}");
}

#[tokio::test]
async fn a_recall_never_waits_on_its_thread_for_another_processs_write_lock() {
    let Some((g, t)) = sqlite_gateway().await else {
        return;
    };
    // One runtime thread serves the gateway and this test: a request that
    // blocked it would stall every other one.
    remember(&g, &t, "the avocet sweeps the mud").await;
    // Another writer of the database (the CLI archiving, say) holds its
    // write lock for 3 s. Reads go on; indexing and commits cannot.
    let path = g.gw.config.data_dir.join("cedargate.db");
    let (locked, lock_held) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        conn.execute_batch("COMMIT").unwrap();
    });
    lock_held.recv().unwrap();
    // A recall, and a health check 200 ms later, timed from before the
    // recall starts: a blocked thread would hold the timer and the check
    // back too. (`recall` checks that the recall answered without error.)
    let started = Instant::now();
    let health = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let health = g.http.get(format!("{}/healthz", g.base)).send().await;
        (health.unwrap(), started.elapsed())
    };
    let (_, (health, waited)) = tokio::join!(recall(&g, &t, "avocet"), health);
    assert!(health.status().is_success());
    assert!(
        waited < Duration::from_secs(1),
        "the server stalled {waited:?}"
    );
    holder.join().unwrap();
    let found = recall(&g, &t, "avocet").await;
    assert!(found.contains("avocet sweeps"), "{found}");
}
