//! Knowledge-graph tools through the real server: the per-project gate,
//! each tool on a graph built by `graph_ingest` from engineering notes,
//! Cedar `read_node` filtering (including paths), `write_node` denials that
//! change nothing, feedback weights, idempotent ingest and bad inputs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use cedargate::operator::{self, CreateAgent, OpenSession};
use common::{Tenant, TestGateway};
use serde_json::{Value, json};

const GRAPH_TOOLS: [&str; 5] = [
    "graph_query",
    "graph_neighbors",
    "graph_path",
    "graph_ingest",
    "graph_improve",
];

/// Engineering notes as agents write them.
const NOTES: [&str; 5] = [
    "AuthService calls UserRepository to load accounts, and UserRepository reads from PostgresDB.",
    "The auth-service depends on Redis for session tokens.",
    "SessionController calls AuthService on every login request.",
    "We migrated from MySQL to PostgreSQL last quarter; the billing-worker still writes to MySQL.",
    "The billing-worker publishes to Kafka and InvoiceService consumes from Kafka.",
];

/// Creates org `org` (with `entitlements`) and a project with the given
/// flags, an agent, a key and a session.
async fn graph_tenant(
    g: &TestGateway,
    org: &str,
    memory: bool,
    graph: bool,
    entitlements: &[&str],
) -> Tenant {
    g.tenant_full(org, memory, graph, entitlements, &["developers"])
        .await
}

/// A second agent with its own session in the same project.
async fn colleague(g: &TestGateway, t: &Tenant, agent: &str) -> Tenant {
    let (t2, agent) = (t.clone(), agent.to_string());
    let base = g.base.clone();
    g.gw.store
        .read(move |c| {
            operator::create_agent(
                c,
                &t2.org,
                CreateAgent {
                    id: agent.clone(),
                    name: "Reader".into(),
                    roles: vec![],
                },
            )?;
            let s = operator::open_session(
                c,
                &t2.org,
                OpenSession {
                    project_id: t2.project.clone(),
                    agent_id: agent.clone(),
                },
                Some(&t2.key_id),
            )?;
            Ok(Tenant {
                mcp_url: operator::mcp_url(&base, &s.id),
                agent,
                session_id: s.id,
                ..t2
            })
        })
        .await
        .unwrap()
}

/// The JSON result of a successful tool call (from its text part).
fn result(body: &Value) -> Value {
    assert!(body.get("error").is_none(), "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    serde_json::from_str(body["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// Calls a tool as a 2025-06-18 client and returns `structuredContent`.
async fn call(g: &TestGateway, t: &Tenant, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":args}});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "{tool}: {body}");
    let structured = body["result"]["structuredContent"].clone();
    // The text part carries the same JSON for older clients.
    let text: Value = serde_json::from_str(body["result"]["content"][0]["text"].as_str().unwrap())
        .unwrap_or(Value::Null);
    if tool.starts_with("graph_") && tool != "graph_path" {
        assert_eq!(text, structured);
    }
    structured
}

/// `graph_path`'s answer: the path, or `null`.
async fn path(g: &TestGateway, t: &Tenant, args: Value) -> Value {
    let out = call(g, t, "graph_path", args).await;
    out["path"].clone()
}

async fn listed(g: &TestGateway, t: &Tenant) -> Vec<String> {
    let (_, body) = g
        .mcp(t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

async fn remember_notes(g: &TestGateway, t: &Tenant) -> Vec<String> {
    let mut ids = Vec::new();
    for note in NOTES {
        let out = call(g, t, "af_memory_remember", json!({ "content": note })).await;
        ids.push(out["id"].as_str().unwrap().to_string());
    }
    ids
}

/// A graph built from [`NOTES`].
async fn ingested(g: &TestGateway, org: &str) -> (Tenant, Vec<String>, Value) {
    let t = graph_tenant(g, org, true, true, &[]).await;
    let ids = remember_notes(g, &t).await;
    let out = call(g, &t, "graph_ingest", json!({ "limit": 20 })).await;
    (t, ids, out)
}

/// Every graph row and the observations' processed flags, as text.
async fn dump(g: &TestGateway) -> String {
    g.gw.store
        .read(|c| {
            let mut out = String::new();
            for sql in [
                "SELECT * FROM graph_nodes ORDER BY seq",
                "SELECT * FROM graph_edges ORDER BY seq",
                "SELECT id, processed FROM observations ORDER BY seq",
            ] {
                for row in c.query(sql, cedargate::params![])? {
                    let line: Vec<String> =
                        row.into_values().iter().map(|v| format!("{v:?}")).collect();
                    out.push_str(&line.join("|"));
                    out.push('\n');
                }
                out.push_str("--\n");
            }
            Ok(out)
        })
        .await
        .unwrap()
}

/// `graph_neighbors` of `entity` with the default options.
async fn neighbors(g: &TestGateway, t: &Tenant, entity: &str) -> Value {
    call(g, t, "graph_neighbors", json!({ "entity": entity })).await
}

fn names(nodes: &Value) -> Vec<String> {
    let mut v: Vec<String> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn node_id(nodes: &Value, name: &str) -> String {
    nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node `{name}` in {nodes}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn gate_matrix() {
    let g = TestGateway::start().await;
    // (memory, graph flag, kg_enabled entitlement) → graph tools on?
    let cases = [
        ("m0g1", false, true, false, false),
        ("m0k1", false, false, true, false),
        ("m1g0", true, false, false, false),
        ("m1g1", true, true, false, true),
        ("m1k1", true, false, true, true),
    ];
    for (org, memory, graph, kg, on) in cases {
        let ents: &[&str] = if kg { &["kg_enabled"] } else { &[] };
        let t = graph_tenant(&g, org, memory, graph, ents).await;
        let tools = listed(&g, &t).await;
        for tool in GRAPH_TOOLS {
            assert_eq!(
                tools.contains(&tool.to_string()),
                on,
                "{org}: {tool} in {tools:?}"
            );
        }
        let body = g
            .call_tool(&t, "graph_query", json!({"query": "auth"}))
            .await;
        let out = result(&body);
        if on {
            assert!(out["triplets"].is_array(), "{org}: {out}");
        } else {
            assert_eq!(out, json!({"disabled": true}), "{org}");
            // The same for every graph tool, whatever the arguments.
            for tool in GRAPH_TOOLS {
                let out = call(&g, &t, tool, json!({})).await;
                assert_eq!(out, json!({"disabled": true}), "{org}: {tool}");
            }
        }
    }
}

#[tokio::test]
async fn recall_merges_graph_triplets_only_when_the_gate_is_on() {
    let g = TestGateway::start().await;
    let (t, _, _) = ingested(&g, "acme").await;
    let args = json!({"query": "AuthService UserRepository", "workType": "bug_fix"});
    let out = g.call_tool(&t, "af_memory_recall", args.clone()).await;
    let text = out["result"]["content"][0]["text"].as_str().unwrap();
    let triplet_line = "- AuthService calls UserRepository";
    assert!(text.lines().any(|l| l == triplet_line), "{text}");

    // Graph off for the project: recall answers observations only.
    g.gw.store
        .read(|c| {
            c.execute(
                "UPDATE projects SET graph_enabled = 0",
                cedargate::params![],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    g.gw.invalidate_caches();
    let out = g.call_tool(&t, "af_memory_recall", args).await;
    let text = out["result"]["content"][0]["text"].as_str().unwrap();
    assert!(!text.lines().any(|l| l == triplet_line), "{text}");
    assert!(
        text.contains("AuthService calls UserRepository to load"),
        "{text}"
    );
}

#[tokio::test]
async fn ingest_builds_a_resolved_graph_once() {
    let g = TestGateway::start().await;
    let (t, obs, out) = ingested(&g, "acme").await;
    // Entities: AuthService, UserRepository, PostgresDB (= PostgreSQL),
    // Redis, SessionController, MySQL, billing-worker, Kafka, InvoiceService.
    assert_eq!(
        out,
        json!({"processed": 5, "totalNodesCreated": 9, "totalEdgesCreated": 8, "mergedCount": 4})
    );
    assert_eq!(g.count("graph_nodes").await, 9);
    assert_eq!(g.count("graph_edges").await, 8);

    // Idempotent: nothing left to process, nothing changes.
    let before = dump(&g).await;
    let again = call(&g, &t, "graph_ingest", json!({})).await;
    assert_eq!(
        again,
        json!({"processed": 0, "totalNodesCreated": 0, "totalEdgesCreated": 0, "mergedCount": 0})
    );
    assert_eq!(dump(&g).await, before);

    // A new note is processed alone and resolves to existing nodes.
    call(
        &g,
        &t,
        "af_memory_remember",
        json!({"content": "SessionController uses Redis for rate limits."}),
    )
    .await;
    let more = call(&g, &t, "graph_ingest", json!({"limit": 1000})).await;
    assert_eq!(
        more,
        json!({"processed": 1, "totalNodesCreated": 0, "totalEdgesCreated": 1, "mergedCount": 2})
    );

    // Provenance points at the observation and its session.
    let n = neighbors(&g, &t, "Redis").await;
    let edge = n["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["relationshipName"] == "depends_on")
        .unwrap();
    assert_eq!(edge["provenance"]["observationId"], obs[1]);
    assert_eq!(edge["provenance"]["sessionId"], t.session_id);

    // Call and write decisions are recorded for the ingest.
    let records = g.decisions().await;
    let writes: Vec<_> = records
        .iter()
        .filter(|d| d.record.action == "write_node")
        .collect();
    assert_eq!(writes.len(), 3);
    assert!(writes.iter().all(|d| d.record.decision == "allow"
        && d.record.resource == format!("Gateway::Project::\"{}\"", t.project)));
}

#[tokio::test]
async fn neighbors_and_paths_on_an_ingested_graph() {
    let g = TestGateway::start().await;
    let (t, _, _) = ingested(&g, "acme").await;

    // Any spelling finds the node.
    let n = neighbors(&g, &t, "auth-service").await;
    assert_eq!(
        names(&n["nodes"]),
        vec![
            "AuthService",
            "Redis",
            "SessionController",
            "UserRepository"
        ]
    );
    assert_eq!(n["edges"].as_array().unwrap().len(), 3);
    let auth = node_id(&n["nodes"], "AuthService");
    let node = n["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "AuthService")
        .unwrap();
    assert_eq!(node["type"], "Service");
    assert!(node["provenance"]["observationId"].is_string());
    for e in n["edges"].as_array().unwrap() {
        assert!(e["sourceId"].is_string() && e["targetId"].is_string());
    }

    // By UUID, with a relationship filter and more depth.
    let n = call(
        &g,
        &t,
        "graph_neighbors",
        json!({"entity": auth, "depth": 2, "relationshipFilter": "calls"}),
    )
    .await;
    assert_eq!(
        names(&n["nodes"]),
        vec!["AuthService", "SessionController", "UserRepository"]
    );
    assert!(
        n["edges"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["relationshipName"] == "calls")
    );

    // Depth 0 is the node alone.
    let n = call(
        &g,
        &t,
        "graph_neighbors",
        json!({"entity": "Redis", "depth": 0}),
    )
    .await;
    assert_eq!(names(&n["nodes"]), vec!["Redis"]);

    // Shortest path, edges in order.
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "SessionController", "toEntity": "PostgreSQL"}),
    )
    .await;
    let hops: Vec<&str> = p["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        hops,
        vec![
            "SessionController",
            "AuthService",
            "UserRepository",
            "PostgresDB"
        ]
    );
    assert_eq!(p["length"], 3);
    let rels: Vec<&str> = p["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["relationshipName"].as_str().unwrap())
        .collect();
    assert_eq!(rels, vec!["calls", "calls", "reads_from"]);

    // Too short a budget, or no connection: null.
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "SessionController", "toEntity": "PostgresDB", "maxDepth": 2}),
    )
    .await;
    assert_eq!(p, Value::Null);
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "Redis", "toEntity": "Kafka", "maxDepth": 12}),
    )
    .await;
    assert_ne!(p, Value::Null, "Redis … MySQL … billing-worker … Kafka");
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "Redis", "toEntity": "NoSuchThing"}),
    )
    .await;
    assert_eq!(p, Value::Null);
}

#[tokio::test]
async fn query_ranks_triplets_and_feedback_moves_them() {
    let g = TestGateway::start().await;
    let (t, obs, _) = ingested(&g, "acme").await;
    let q = json!({"query": "How does authentication interact with the user repository?", "topK": 3, "neighborhoodDepth": 1});
    let out = call(&g, &t, "graph_query", q.clone()).await;
    let triplets = out["triplets"].as_array().unwrap();
    assert!(!triplets.is_empty());
    let top = &triplets[0];
    assert_eq!(
        (
            top["sourceEntity"].as_str().unwrap(),
            top["relationship"].as_str().unwrap(),
            top["targetEntity"].as_str().unwrap()
        ),
        ("AuthService", "calls", "UserRepository"),
        "{out}"
    );
    assert_eq!(top["provenance"]["observationId"], obs[0]);
    assert_eq!(top["provenance"]["sessionId"], t.session_id);
    assert!(top["provenance"]["timestamp"].is_string());
    let scores: Vec<f64> = triplets
        .iter()
        .map(|t| t["relevanceScore"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    // Accepted feedback on the top triplet raises its score.
    let edge = json!({"sourceId": top["sourceId"], "targetId": top["targetId"], "relationshipName": "calls"});
    let improved = call(
        &g,
        &t,
        "graph_improve",
        json!({"sessionId": t.session_id, "outcome": "accepted",
               "usedNodeIds": [top["sourceId"], top["targetId"], "not-a-node"],
               "usedEdgeKeys": [edge]}),
    )
    .await;
    assert_eq!(improved["nodeUpdates"], 2);
    assert_eq!(improved["edgeUpdates"], 1);
    assert_eq!(improved["tripletEmbeddings"], 0);
    assert!(improved["durationMs"].is_u64());
    let after = call(&g, &t, "graph_query", q.clone()).await;
    let top_after = &after["triplets"][0];
    assert_eq!(top_after["sourceEntity"], "AuthService");
    assert!(
        top_after["relevanceScore"].as_f64().unwrap() > top["relevanceScore"].as_f64().unwrap(),
        "{top} -> {top_after}"
    );

    // Rejecting it three times pushes it below another triplet.
    for _ in 0..3 {
        call(
            &g,
            &t,
            "graph_improve",
            json!({"outcome": "rejected", "usedNodeIds": [top["sourceId"], top["targetId"]], "usedEdgeKeys": [edge]}),
        )
        .await;
    }
    let later = call(&g, &t, "graph_query", q).await;
    let first = &later["triplets"][0];
    assert!(
        !(first["sourceEntity"] == "AuthService" && first["targetEntity"] == "UserRepository"),
        "{later}"
    );
}

#[tokio::test]
async fn feedback_weights_follow_the_ema() {
    let g = TestGateway::start().await;
    let (t, _, _) = ingested(&g, "acme").await;
    let n = neighbors(&g, &t, "Redis").await;
    let redis = node_id(&n["nodes"], "Redis");
    let auth = node_id(&n["nodes"], "AuthService");
    let edge = json!({"sourceId": auth, "targetId": redis, "relationshipName": "depends_on"});
    let weight = |g: &TestGateway| {
        let redis = redis.clone();
        let gw = g.gw.clone();
        async move {
            gw.store
                .read(move |c| {
                    let n: f64 = c.query_row(
                        "SELECT feedback_weight FROM graph_nodes WHERE id = ?1",
                        cedargate::params![&redis],
                        |r| r.get(0),
                    )?;
                    let e: f64 = c.query_row(
                        "SELECT feedback_weight FROM graph_edges WHERE target_id = ?1",
                        cedargate::params![&redis],
                        |r| r.get(0),
                    )?;
                    Ok((n, e))
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(weight(&g).await, (0.5, 0.5));
    // α = 0.3: 0.5 → 0.65 (accepted) → 0.605 (rework) → 0.4235 (rejected).
    for (outcome, expected) in [("accepted", 0.65), ("rework", 0.605), ("rejected", 0.4235)] {
        let out = call(
            &g,
            &t,
            "graph_improve",
            json!({"outcome": outcome, "usedNodeIds": [redis, redis], "usedEdgeKeys": [edge]}),
        )
        .await;
        assert_eq!(
            (out["nodeUpdates"].clone(), out["edgeUpdates"].clone()),
            (json!(1), json!(1))
        );
        let (n, e) = weight(&g).await;
        assert!((n - expected).abs() < 1e-9, "{outcome}: {n}");
        assert!((e - expected).abs() < 1e-9, "{outcome}: {e}");
    }
    // The in-memory view follows the store.
    let n = call(
        &g,
        &t,
        "graph_neighbors",
        json!({"entity": "Redis", "depth": 0}),
    )
    .await;
    assert!((n["nodes"][0]["feedbackWeight"].as_f64().unwrap() - 0.4235).abs() < 1e-9);
}

#[tokio::test]
async fn a_read_node_forbid_hides_nodes_edges_and_paths() {
    let g = TestGateway::start_with_policy(
        "no-databases.cedar",
        "@id(\"no-database-nodes\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource)\nwhen { resource.type == \"Database\" };\n",
    )
    .await;
    let (t, _, _) = ingested(&g, "acme").await;

    let n = neighbors(&g, &t, "UserRepository").await;
    assert_eq!(names(&n["nodes"]), vec!["AuthService", "UserRepository"]);
    assert_eq!(n["edges"].as_array().unwrap().len(), 1);
    // A hidden node answers like an unknown one.
    let n = neighbors(&g, &t, "PostgresDB").await;
    assert_eq!(n, json!({"nodes": [], "edges": []}));

    let out = call(
        &g,
        &t,
        "graph_query",
        json!({"query": "postgres mysql database storage", "topK": 10}),
    )
    .await;
    for tr in out["triplets"].as_array().unwrap() {
        for end in ["sourceEntity", "targetEntity"] {
            assert!(
                !["PostgresDB", "MySQL"].contains(&tr[end].as_str().unwrap()),
                "{tr}"
            );
        }
    }

    // Every path from UserRepository to billing-worker goes through a
    // database node: none is returned, not even with a gap.
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "UserRepository", "toEntity": "billing-worker", "maxDepth": 12}),
    )
    .await;
    assert_eq!(p, Value::Null);
    let p = path(
        &g,
        &t,
        json!({"fromEntity": "SessionController", "toEntity": "PostgresDB"}),
    )
    .await;
    assert_eq!(p, Value::Null);

    // The per-node decisions are recorded in batches and replay exactly.
    let denied = denied_and_replayed(&g).await;
    assert_eq!(
        denied.keys().cloned().collect::<Vec<_>>(),
        vec!["MySQL".to_string(), "PostgresDB".to_string()]
    );
    for reasons in denied.values() {
        assert_eq!(reasons, &json!(["no-database-nodes"]));
    }
}

/// The nodes batched `read_node` records of the active set denied (name →
/// the deny's reasons), after checking that every node of every batch
/// replays to its recorded verdict.
async fn denied_and_replayed(g: &TestGateway) -> std::collections::BTreeMap<String, Value> {
    let bundle = g.gw.pep.current();
    let mut denied = std::collections::BTreeMap::new();
    let mut batches = 0;
    for d in g.decisions().await {
        if d.record.action != "read_node" || d.record.policy_hash != bundle.hash {
            continue;
        }
        batches += 1;
        let notes: Value = serde_json::from_str(&d.record.notes).unwrap();
        let verdicts = notes["readNodeBatch"]["verdicts"].as_array().unwrap();
        for n in notes["readNodeBatch"]["nodes"].as_array().unwrap() {
            let v = &verdicts[n[3].as_u64().unwrap() as usize];
            if v["decision"] == "deny" {
                denied.insert(n[2].as_str().unwrap().to_string(), v["reasons"].clone());
            }
        }
        let snapshot = g.entity_snapshot(&d.record.entities_hash).await;
        let replayed = cedargate::audit::replay_node_batch(&bundle, &d.record, &snapshot).unwrap();
        assert!(!replayed.is_empty());
        for r in replayed {
            assert_eq!(r.recorded, r.decision, "{}", r.id);
        }
    }
    assert!(batches > 0, "no batched read_node record");
    denied
}

/// Nodes of one type share a decision only while no policy tells them
/// apart: a forbid on one name, then on one node's uid, hides exactly that
/// node and leaves the other node of its type readable.
#[tokio::test]
async fn a_forbid_on_one_name_or_one_uid_hides_only_that_node() {
    let g = TestGateway::start_with_policy(
        "no-mysql.cedar",
        "@id(\"no-mysql\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource)\nwhen { resource.name == \"MySQL\" };\n",
    )
    .await;
    let (t, _, _) = ingested(&g, "acme").await;
    let n = neighbors(&g, &t, "billing-worker").await;
    let seen = names(&n["nodes"]);
    assert!(!seen.contains(&"MySQL".to_string()), "{seen:?}");
    assert!(seen.contains(&"Kafka".to_string()), "{seen:?}");
    let n = neighbors(&g, &t, "UserRepository").await;
    let postgres = node_id(&n["nodes"], "PostgresDB");
    assert_eq!(
        denied_and_replayed(&g)
            .await
            .into_keys()
            .collect::<Vec<_>>(),
        vec!["MySQL".to_string()]
    );

    // Now single out PostgresDB by its uid (MySQL readable again).
    let dir = g.gw.config.policies_dir.clone();
    std::fs::remove_file(dir.join("no-mysql.cedar")).unwrap();
    std::fs::write(
        dir.join("no-postgres.cedar"),
        format!(
            "@id(\"no-postgres\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource == Gateway::GraphNode::\"{postgres}\");\n"
        ),
    )
    .unwrap();
    let (status, body) = g
        .admin(reqwest::Method::POST, "/admin/policies/reload", None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(g.gw.pep.current().node_reads.uid);
    let n = neighbors(&g, &t, "UserRepository").await;
    assert_eq!(names(&n["nodes"]), vec!["AuthService", "UserRepository"]);
    let n = neighbors(&g, &t, "billing-worker").await;
    assert!(names(&n["nodes"]).contains(&"MySQL".to_string()));
    assert_eq!(
        denied_and_replayed(&g)
            .await
            .into_keys()
            .collect::<Vec<_>>(),
        vec!["PostgresDB".to_string()]
    );
}

#[tokio::test]
async fn a_write_node_deny_changes_nothing() {
    let g = TestGateway::start_with_policy(
        "readers.cedar",
        "@id(\"readers-do-not-write\")\n@advice(\"reader agents may not change the graph\")\nforbid (principal == Gateway::Agent::\"reader\", action == Gateway::Action::\"write_node\", resource);\n",
    )
    .await;
    let (writer, _, _) = ingested(&g, "acme").await;
    let reader = colleague(&g, &writer, "reader").await;
    // An unprocessed observation the denied ingest must leave alone.
    call(
        &g,
        &writer,
        "af_memory_remember",
        json!({"content": "PaymentService calls Stripe."}),
    )
    .await;
    let n = call(&g, &reader, "graph_neighbors", json!({"entity": "Redis"})).await;
    let redis = node_id(&n["nodes"], "Redis");

    let before = dump(&g).await;
    let body = g
        .call_tool(&reader, "graph_ingest", json!({"limit": 5}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(
        body["error"]["data"]["advice"],
        json!(["reader agents may not change the graph"])
    );
    let body = g
        .call_tool(
            &reader,
            "graph_improve",
            json!({"outcome": "rejected", "usedNodeIds": [redis]}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    let decision_id = body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(dump(&g).await, before);

    // The denial is on record; reads still work and see the old state.
    let records = g.decisions().await;
    let denied = records.iter().find(|d| d.record.id == decision_id).unwrap();
    assert_eq!(denied.record.action, "write_node");
    assert_eq!(denied.record.decision, "deny");
    assert_eq!(denied.record.reasons, "[\"readers-do-not-write\"]");
    let n = call(
        &g,
        &reader,
        "graph_neighbors",
        json!({"entity": "Redis", "depth": 0}),
    )
    .await;
    assert_eq!(n["nodes"][0]["feedbackWeight"], 0.5);

    // The writer still can: the pending note is processed now.
    let out = call(&g, &writer, "graph_ingest", json!({})).await;
    assert_eq!(out["processed"], 1);
}

#[tokio::test]
async fn bad_inputs_are_rejected_or_empty() {
    let g = TestGateway::start().await;
    let (t, _, _) = ingested(&g, "acme").await;
    let invalid = [
        ("graph_neighbors", json!({"entity": "Redis", "depth": -1})),
        (
            "graph_neighbors",
            json!({"entity": "Redis", "depth": 1000000}),
        ),
        ("graph_neighbors", json!({"entity": ""})),
        (
            "graph_neighbors",
            json!({"entity": "Redis", "relationshipFilter": ""}),
        ),
        ("graph_neighbors", json!({})),
        ("graph_path", json!({"fromEntity": "Redis"})),
        (
            "graph_path",
            json!({"fromEntity": "Redis", "toEntity": "Kafka", "maxDepth": -3}),
        ),
        ("graph_query", json!({"query": "x", "topK": 0})),
        ("graph_query", json!({"query": "x", "topK": 1e12})),
        (
            "graph_query",
            json!({"query": "x", "neighborhoodDepth": "two"}),
        ),
        ("graph_query", json!({})),
        ("graph_ingest", json!({"limit": 100000000})),
        ("graph_ingest", json!({"limit": 0})),
        ("graph_improve", json!({"outcome": "great"})),
        (
            "graph_improve",
            json!({"outcome": "accepted", "usedNodeIds": "x"}),
        ),
        (
            "graph_improve",
            json!({"outcome": "accepted", "usedEdgeKeys": [{"sourceId": "a"}]}),
        ),
    ];
    let before = dump(&g).await;
    for (tool, args) in invalid {
        let body = g.call_tool(&t, tool, args.clone()).await;
        assert_eq!(body["error"]["code"], -32602, "{tool} {args}: {body}");
        assert!(body["error"]["data"]["field"].is_string(), "{body}");
    }
    assert_eq!(dump(&g).await, before);

    // Well-formed but pointing at nothing: empty answers.
    let n = call(
        &g,
        &t,
        "graph_neighbors",
        json!({"entity": "NoSuchService", "depth": 5}),
    )
    .await;
    assert_eq!(n, json!({"nodes": [], "edges": []}));
    let n = call(
        &g,
        &t,
        "graph_neighbors",
        json!({"entity": "Redis", "relationshipFilter": "nope"}),
    )
    .await;
    assert_eq!(names(&n["nodes"]), vec!["Redis"]);
    let q = call(
        &g,
        &t,
        "graph_query",
        json!({"query": "?!", "topK": 100, "neighborhoodDepth": 4}),
    )
    .await;
    assert_eq!(q, json!({"triplets": []}));
    let i = call(
        &g,
        &t,
        "graph_improve",
        json!({"outcome": "accepted", "usedNodeIds": ["nope"], "usedEdgeKeys": [{"sourceId": "a", "targetId": "b", "relationshipName": "c"}]}),
    )
    .await;
    assert_eq!(
        (i["nodeUpdates"].clone(), i["edgeUpdates"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(dump(&g).await, before);

    // A caller-supplied context never changes the project used.
    let other = graph_tenant(&g, "other", true, true, &[]).await;
    let n = call(
        &g,
        &other,
        "graph_neighbors",
        json!({"entity": "Redis", "context": {"orgId": "acme", "projectId": "acme-proj", "agentId": "acme-agent"}}),
    )
    .await;
    assert_eq!(n, json!({"nodes": [], "edges": []}));
}

/// What the embeddings endpoint received.
#[derive(Default)]
struct EmbeddingsSeen {
    inputs: Vec<String>,
    fail: bool,
}

/// An OpenAI-compatible `/v1/embeddings` endpoint on loopback that checks
/// the request shape and answers deterministic vectors (the local feature
/// hashing of each input, so rankings stay meaningful).
async fn embeddings_endpoint() -> (String, Arc<Mutex<EmbeddingsSeen>>) {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    let seen = Arc::new(Mutex::new(EmbeddingsSeen::default()));
    let state = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/v1/embeddings",
        axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let state = Arc::clone(&state);
            async move {
                let mut s = state.lock().unwrap();
                if s.fail {
                    return (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response();
                }
                assert_eq!(headers.get("authorization").unwrap(), "Bearer test-key");
                assert_eq!(body["model"], "test-embed");
                let inputs: Vec<String> = body["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, t)| {
                        json!({"object": "embedding", "index": i,
                               "embedding": cedargate::graph::embed::LocalEmbedder::vector(t)})
                    })
                    .collect();
                s.inputs.extend(inputs);
                axum::Json(json!({"object": "list", "data": data, "model": "test-embed"}))
                    .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/v1/embeddings"), seen)
}

use std::sync::{Arc, Mutex};

#[tokio::test]
async fn an_openai_compatible_embeddings_endpoint_is_used_when_configured() {
    let (url, seen) = embeddings_endpoint().await;
    let g = TestGateway::start_with(|c| {
        c.graph.embedding_url = Some(url);
        c.graph.embedding_model = "test-embed".into();
        c.graph.embedding_api_key = Some("test-key".into());
    })
    .await;
    let t = graph_tenant(&g, "acme", true, true, &[]).await;
    remember_notes(&g, &t).await;

    // The endpoint failing: the ingest fails and changes nothing.
    seen.lock().unwrap().fail = true;
    let before = dump(&g).await;
    let body = g.call_tool(&t, "graph_ingest", json!({})).await;
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(dump(&g).await, before);
    seen.lock().unwrap().fail = false;

    let out = call(&g, &t, "graph_ingest", json!({})).await;
    assert_eq!(out["totalNodesCreated"], 9);
    let inputs = seen.lock().unwrap().inputs.clone();
    assert_eq!(inputs.len(), 9);
    assert!(
        inputs.iter().any(|i| i.starts_with("AuthService Service ")),
        "{inputs:?}"
    );
    let models: Vec<String> =
        g.gw.store
            .read(|c| {
                c.query_map(
                    "SELECT DISTINCT embed_model FROM graph_nodes",
                    cedargate::params![],
                    |r| r.get::<String>(0),
                )
            })
            .await
            .unwrap();
    assert_eq!(models, vec!["http:test-embed".to_string()]);

    // Queries are embedded by the endpoint too, and rank as before.
    let q = call(
        &g,
        &t,
        "graph_query",
        json!({"query": "AuthService user repository", "topK": 3, "neighborhoodDepth": 1}),
    )
    .await;
    assert_eq!(q["triplets"][0]["sourceEntity"], "AuthService", "{q}");
    assert!(
        seen.lock()
            .unwrap()
            .inputs
            .iter()
            .any(|i| i == "AuthService user repository")
    );

    // Feedback re-embeds the touched triplet.
    let top = &q["triplets"][0];
    let improved = call(
        &g,
        &t,
        "graph_improve",
        json!({"outcome": "accepted", "usedEdgeKeys": [{"sourceId": top["sourceId"], "targetId": top["targetId"], "relationshipName": top["relationship"]}]}),
    )
    .await;
    assert_eq!(improved["tripletEmbeddings"], 1);
    assert_eq!(
        seen.lock().unwrap().inputs.last().map(String::as_str),
        Some("AuthService calls UserRepository")
    );
    let stored: i64 = g
        .gw
        .store
        .read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM graph_edges WHERE embedding IS NOT NULL AND embed_model = 'http:test-embed'",
                cedargate::params![],
                |r| r.get(0),
            )
        })
        .await
        .unwrap();
    assert_eq!(stored, 1);
}

#[tokio::test]
async fn a_bad_embeddings_url_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = cedargate::config::Config {
        data_dir: dir.path().join("data"),
        policies_dir: common::repo().join("policies"),
        schema_file: common::repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        graph: cedargate::config::GraphConfig {
            embedding_url: Some("ftp://example.invalid/embeddings".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = cedargate::server::prepare(config).await.unwrap_err();
    assert!(err.to_string().contains("embedding_url"), "{err}");
}

/// Shadow mode sees every node's own request: a candidate forbidding one
/// node by name diverges on exactly that node, while the live set (which
/// reads nothing of a node and so shares one decision) shows it.
#[tokio::test]
async fn shadow_mode_decides_each_node_under_the_candidate() {
    let g = TestGateway::start().await;
    let (t, _, _) = ingested(&g, "acme").await;
    let holder = tempfile::tempdir().unwrap();
    let candidate = common::copy_policies(holder.path());
    std::fs::write(
        candidate.join("no-mysql.cedar"),
        "@id(\"no-mysql\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource)\nwhen { resource.name == \"MySQL\" };\n",
    )
    .unwrap();
    let (status, body) = g
        .admin(
            reqwest::Method::PUT,
            "/admin/shadow",
            Some(json!({ "policiesDir": candidate })),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let n = neighbors(&g, &t, "billing-worker").await;
    let mysql = node_id(&n["nodes"], "MySQL");
    assert!(names(&n["nodes"]).len() > 2, "{n}");

    let (status, body) = g.admin(reqwest::Method::GET, "/admin/shadow", None).await;
    assert_eq!(status, 200, "{body}");
    let c = &body["candidate"];
    assert_eq!(c["divergences"], 1, "{body}");
    assert_eq!(c["allowToDeny"], 1, "{body}");
    let d = &body["divergences"][0];
    assert_eq!(d["action"], "read_node");
    assert_eq!(d["resource"], format!("Gateway::GraphNode::\"{mysql}\""));
    assert_eq!(d["candidateReasons"], json!(["no-mysql"]));
}
