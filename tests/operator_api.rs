//! The operator API (`/admin/*`), the daemon session API
//! (`POST /api/sessions`) and the health endpoints, through the real server.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::{ADMIN_TOKEN, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test]
async fn admin_api_is_absent_without_a_token_and_guarded_with_one() {
    let g = TestGateway::start_with(|c| c.admin_token = None).await;
    let resp = g
        .http
        .get(format!("{}/admin/orgs", g.base))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    let g = TestGateway::start().await;
    let cases = [(None, 401), (Some("wrong"), 401), (Some(ADMIN_TOKEN), 200)];
    for (token, want) in cases {
        let mut req = g.http.get(format!("{}/admin/orgs", g.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{token:?}");
        if want == 401 {
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthorized");
        }
    }
}

#[tokio::test]
async fn tenant_lifecycle_through_the_admin_api() {
    let g = TestGateway::start().await;
    let (s, org) = g
        .admin(
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"acme","name":"Acme","plan":"team","entitlements":["kg_enabled"]})),
        )
        .await;
    assert_eq!(s, 201, "{org}");
    assert_eq!(org["entitlements"], json!(["kg_enabled"]));
    let (s, p) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/projects",
            Some(json!({"id":"web","memoryEnabled":true,"graphEnabled":false})),
        )
        .await;
    assert_eq!((s, p["memoryEnabled"].clone()), (201, json!(true)), "{p}");
    let (s, a) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/agents",
            Some(json!({"id":"claude","name":"Claude","roles":["deployers"]})),
        )
        .await;
    assert_eq!((s, a["roles"].clone()), (201, json!(["deployers"])), "{a}");
    let (s, k) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/keys",
            Some(json!({"label":"ci daemon"})),
        )
        .await;
    assert_eq!(s, 201);
    let key = k["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("rsk_live_"), "{key}");

    // Lists never show the secret; the database holds only its hash.
    let (s, keys) = g.admin(Method::GET, "/admin/orgs/acme/keys", None).await;
    assert_eq!(s, 200);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);
    assert!(
        !keys.to_string().contains(&key[20..]),
        "secret leaked in list"
    );
    let secret = key.rsplit('_').next().unwrap().to_string();
    let stored: Vec<u8> =
        g.gw.store
            .read(|c| {
                c.query_row(
                    "SELECT secret_hash FROM api_keys",
                    cedargate::params![],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap();
    assert_ne!(stored, secret.as_bytes());
    assert_eq!(stored.len(), 32);

    for (path, field, len) in [
        ("/admin/orgs", "orgs", 1),
        ("/admin/orgs/acme/projects", "projects", 1),
        ("/admin/orgs/acme/agents", "agents", 1),
    ] {
        let (s, body) = g.admin(Method::GET, path, None).await;
        assert_eq!(
            (s, body[field].as_array().map(Vec::len)),
            (200, Some(len)),
            "{path}"
        );
    }

    // The daemon opens a session with its own key and uses it.
    let resp = g
        .http
        .post(format!("{}/api/sessions", g.base))
        .bearer_auth(&key)
        .json(&json!({"projectId":"web","agentId":"claude"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let session: Value = resp.json().await.unwrap();
    let url = session["mcpUrl"].as_str().unwrap().to_string();
    assert_eq!(
        url,
        format!(
            "{}/api/mcp/{}",
            g.base,
            session["sessionId"].as_str().unwrap()
        )
    );
    let (s, body) = g
        .mcp_raw(
            &url,
            Some(&key),
            &[],
            json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).to_string(),
        )
        .await;
    assert_eq!(s, 200);
    // Two memory tools plus the five graph tools: the org's `kg_enabled`
    // entitlement turns the graph on for a project with memory.
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 7);
    let records = g.decisions().await;
    assert!(records.iter().any(|d| d.record.action == "create_session"
        && d.record.decision == "allow"
        && d.record.resource == "Gateway::Project::\"web\""));

    // Deleting the org removes everything under it; the key stops working.
    let (s, _) = g.admin(Method::DELETE, "/admin/orgs/acme", None).await;
    assert_eq!(s, 204);
    let (s, _) = g
        .mcp_raw(
            &url,
            Some(&key),
            &[],
            json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string(),
        )
        .await;
    assert_eq!(s, 401);
    let (s, body) = g
        .admin(Method::GET, "/admin/orgs/acme/projects", None)
        .await;
    assert_eq!(
        (s, body["error"]["code"].clone()),
        (404, json!("not_found"))
    );
}

#[tokio::test]
async fn admin_input_errors_are_clear_and_change_nothing() {
    let g = TestGateway::start().await;
    let (s, _) = g
        .admin(
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"acme","name":"Acme"})),
        )
        .await;
    assert_eq!(s, 201);
    let cases: Vec<(Method, &str, Option<Value>, u16, &str)> = vec![
        (
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"acme","name":"Again"})),
            409,
            "conflict",
        ),
        (
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"bad id","name":"x"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"x"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"x","name":"x","color":"red"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs",
            Some(json!({"id":"x","name":""})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs/nope/projects",
            Some(json!({"id":"p"})),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/admin/orgs/acme/projects",
            Some(json!({"id":"p","memoryEnabled":"yes"})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs/acme/agents",
            Some(json!({"id":"a","name":"A","roles":["no spaces"]})),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/admin/orgs/nope/keys",
            Some(json!({"label":"x"})),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/admin/orgs/acme/keys",
            Some(json!({})),
            400,
            "bad_request",
        ),
        (
            Method::DELETE,
            "/admin/orgs/acme/keys/0000",
            None,
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/admin/orgs/acme/agents/ghost",
            None,
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/admin/orgs/acme/projects/ghost",
            None,
            404,
            "not_found",
        ),
        (Method::DELETE, "/admin/orgs/ghost", None, 404, "not_found"),
        (
            Method::GET,
            "/admin/decisions/00000000-0000-0000-0000-000000000000",
            None,
            404,
            "not_found",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let (s, resp) = g.admin(method.clone(), path, body.clone()).await;
        assert_eq!(
            (s, resp["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {path} {body:?} -> {resp}"
        );
        assert!(
            resp["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (_, orgs) = g.admin(Method::GET, "/admin/orgs", None).await;
    assert_eq!(orgs["orgs"].as_array().unwrap().len(), 1);
    assert_eq!(orgs["orgs"][0]["name"], "Acme");
    let (_, projects) = g
        .admin(Method::GET, "/admin/orgs/acme/projects", None)
        .await;
    assert_eq!(projects["projects"], json!([]));
}

#[tokio::test]
async fn session_api_errors() {
    let g = TestGateway::start().await;
    let a = g.tenant("acme").await;
    let b = g.tenant("globex").await;
    let cases: Vec<(Option<&str>, Value, u16)> = vec![
        (
            None,
            json!({"projectId": a.project, "agentId": a.agent}),
            401,
        ),
        (
            Some("rsk_live_nope"),
            json!({"projectId": a.project, "agentId": a.agent}),
            401,
        ),
        (
            Some(&a.key),
            json!({"projectId": "ghost", "agentId": a.agent}),
            404,
        ),
        (
            Some(&a.key),
            json!({"projectId": a.project, "agentId": "ghost"}),
            404,
        ),
        // Another org's project or agent does not exist from this key's view.
        (
            Some(&a.key),
            json!({"projectId": b.project, "agentId": a.agent}),
            404,
        ),
        (
            Some(&a.key),
            json!({"projectId": a.project, "agentId": b.agent}),
            404,
        ),
        (Some(&a.key), json!({"projectId": a.project}), 400),
        (
            Some(&a.key),
            json!({"projectId": a.project, "agentId": a.agent}),
            201,
        ),
    ];
    for (key, body, want) in cases {
        let mut req = g.http.post(format!("{}/api/sessions", g.base)).json(&body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{key:?} {body}");
    }
}

#[tokio::test]
async fn create_session_is_decided_by_cedar() {
    let g = TestGateway::start_with_policy("no-new-sessions.cedar", "@id(\"no-new-sessions\")\nforbid (principal, action == Gateway::Action::\"create_session\", resource);\n").await;
    let a = g.tenant("acme").await;
    let resp = g
        .http
        .post(format!("{}/api/sessions", g.base))
        .bearer_auth(&a.key)
        .json(&json!({"projectId": a.project, "agentId": a.agent}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    let records = g.decisions().await;
    assert!(records.iter().any(
        |d| d.record.action == "create_session" && d.record.reasons.contains("no-new-sessions")
    ));
    let sessions = g.count("sessions").await;
    assert_eq!(sessions, 1, "only the harness's own session exists");
}

/// A key of the PDP role names the decision applications it may ask; it
/// opens no MCP session and uses none (403), and nothing is recorded.
#[tokio::test]
async fn keys_of_the_pdp_role_open_no_session() {
    let g = TestGateway::start().await;
    let a = g.tenant("acme").await;
    let (s, bad) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/keys",
            Some(json!({"label": "pep", "pdpApps": ["../etc"]})),
        )
        .await;
    assert_eq!(s, 400, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`../etc`")
    );
    let (s, created) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/keys",
            Some(json!({"label": "pep", "pdpApps": ["records", "billing", "records"]})),
        )
        .await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["pdpApps"], json!(["billing", "records"]));
    let pep = created["key"].as_str().unwrap().to_string();
    let (_, keys) = g.admin(Method::GET, "/admin/orgs/acme/keys", None).await;
    let listed: Vec<&Value> = keys["keys"].as_array().unwrap().iter().collect();
    assert!(
        listed[0].get("pdpApps").is_none(),
        "a daemon key lists none"
    );
    assert_eq!(listed[1]["pdpApps"], json!(["billing", "records"]));

    let before = g.decisions().await.len();
    let (status, answer) = g
        .mcp_raw(
            &a.mcp_url,
            Some(&pep),
            &[],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    let resp = g
        .http
        .post(format!("{}/api/sessions", g.base))
        .bearer_auth(&pep)
        .json(&json!({"projectId": a.project, "agentId": a.agent}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("decision-point key")
    );
    assert_eq!(
        g.decisions().await.len(),
        before,
        "nothing decided, nothing recorded"
    );
    let (status, _) = g
        .mcp(
            &a,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(status, 200, "the org's daemon key is untouched");
}

#[tokio::test]
async fn health_and_readiness() {
    let g = TestGateway::start().await;
    let resp = g
        .http
        .get(format!("{}/healthz", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = g
        .http
        .get(format!("{}/readyz", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["policyHash"], g.gw.pep.current().hash);
    let (s, p) = g.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(s, 200);
    assert_eq!(p["hash"], g.gw.pep.current().hash);
    assert!(
        p["policyIds"]
            .as_array()
            .unwrap()
            .contains(&json!("only-the-session-agent-acts"))
    );
}
