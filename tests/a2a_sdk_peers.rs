//! A2A peers built with the reference SDKs, installed from their registries
//! by `tests/peers/setup.sh`: `a2a-sdk` (Python) and `@a2a-js/sdk` (npm).
//! Each serves A2A 1.0 and 0.3 on one endpoint; each is registered twice,
//! once on the newest version its card declares (1.0) and once pinned to
//! 0.3, and every skill is called over both.
//!
//! If the install fails the tests fail under `CI=true`; elsewhere they say
//! why and pass without running (a machine without Python or Node).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::sdk_peer::{SdkPeer, installed};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

async fn call(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"arguments":args}});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Registers `peer` as `name` (optionally pinned) and checks the chosen version.
async fn register(g: &TestGateway, peer: &SdkPeer, name: &str, pin: Option<&str>) -> Value {
    let mut body = json!({"url": peer.base, "name": name});
    if let Some(v) = pin {
        body["protocolVersion"] = json!(v);
    }
    let (status, agent) = g
        .admin(Method::POST, "/admin/orgs/acme/a2a-agents", Some(body))
        .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["health"], "healthy", "{agent}");
    assert_eq!(agent["protocolVersion"], pin.unwrap_or("1.0"), "{agent}");
    agent
}

fn structured(body: &Value) -> &Value {
    assert!(body.get("error").is_none(), "{body}");
    &body["result"]["structuredContent"]
}

#[tokio::test]
async fn python_sdk_peer_over_1_0_and_0_3() {
    if installed().is_none() {
        return;
    }
    let peer = SdkPeer::python().await;
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let agent = register(&g, &peer, "Ticket Desk", None).await;
    assert_eq!(agent["slug"], "ticket_desk");
    assert_eq!(agent["skills"].as_array().unwrap().len(), 4);
    register(&g, &peer, "Ticket Desk Legacy", Some("0.3")).await;

    // The skill's inputSchema from the card is the tool's.
    let (_, list) = g
        .mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    let lookup = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "ticket_desk.lookup")
        .cloned()
        .unwrap();
    assert_eq!(lookup["inputSchema"]["required"], json!(["ticket"]));

    for slug in ["ticket_desk", "ticket_desk_legacy"] {
        // One data part: its object (protobuf turns 2 into 2.0).
        let body = call(
            &g,
            &t,
            &format!("{slug}.lookup"),
            json!({"ticket": "T-1", "count": 2}),
        )
        .await;
        let data = structured(&body);
        assert_eq!(data["ticket"], "T-1", "{slug}");
        assert_eq!(data["found"], true);
        assert_eq!(data["count"].as_f64(), Some(2.0));
        // One text part: its string.
        let body = call(
            &g,
            &t,
            &format!("{slug}.summarize"),
            json!({"text": "printer on fire"}),
        )
        .await;
        assert_eq!(
            body["result"]["content"][0]["text"], "summary: printer on fire",
            "{slug}: {body}"
        );
        // Several parts: the artifact with its parts.
        let body = call(&g, &t, &format!("{slug}.report"), json!({})).await;
        let parts = structured(&body)["parts"].as_array().unwrap().clone();
        assert_eq!(parts.len(), 2, "{slug}: {body}");
        // A failed task.
        let body = call(&g, &t, &format!("{slug}.explode"), json!({})).await;
        assert_eq!(body["error"]["code"], -32204, "{slug}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("exploded"),
            "{body}"
        );
        // Legacy alias, same handler.
        let body = call(
            &g,
            &t,
            &format!("a2a_{slug}_lookup"),
            json!({"ticket": "T-2"}),
        )
        .await;
        assert_eq!(structured(&body)["ticket"], "T-2");
    }
    let rpcs = peer.rpcs();
    assert_eq!(rpcs.len(), 10, "{rpcs:?}");
    assert_eq!(
        rpcs.iter()
            .filter(|(m, v)| m == "SendMessage" && v.as_deref() == Some("1.0"))
            .count(),
        5
    );
    assert_eq!(
        rpcs.iter()
            .filter(|(m, v)| m == "message/send" && v.is_none())
            .count(),
        5
    );
}

#[tokio::test]
async fn js_sdk_peer_over_1_0_and_0_3() {
    if installed().is_none() {
        return;
    }
    let peer = SdkPeer::js().await;
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let agent = register(&g, &peer, "Lingo", None).await;
    assert_eq!(agent["skills"].as_array().unwrap().len(), 3);
    register(&g, &peer, "Lingo Legacy", Some("0.3")).await;

    for slug in ["lingo", "lingo_legacy"] {
        // A Message with one data part.
        let body = call(
            &g,
            &t,
            &format!("{slug}.translate"),
            json!({"text": "hello", "lang": "de"}),
        )
        .await;
        assert_eq!(
            structured(&body)["translated"],
            "[de] hello",
            "{slug}: {body}"
        );
        // A Message with one text part.
        let body = call(&g, &t, &format!("{slug}.shout"), json!({"text": "quiet"})).await;
        assert_eq!(
            body["result"]["content"][0]["text"], "QUIET",
            "{slug}: {body}"
        );
        // A Task whose artifact has two data parts.
        let body = call(&g, &t, &format!("{slug}.plan"), json!({})).await;
        let parts = structured(&body)["parts"].as_array().unwrap().clone();
        assert_eq!(parts.len(), 2, "{slug}: {body}");
        // The skill schema is enforced before anything is sent.
        let body = call(&g, &t, &format!("{slug}.translate"), json!({"lang": "de"})).await;
        assert_eq!(body["error"]["code"], -32602, "{slug}: {body}");
        // Legacy alias.
        let body = call(&g, &t, &format!("a2a_{slug}_shout"), json!({"text": "x"})).await;
        assert_eq!(body["result"]["content"][0]["text"], "X");
    }
    let rpcs = peer.rpcs();
    assert_eq!(rpcs.len(), 8, "{rpcs:?}");
    assert_eq!(
        rpcs.iter()
            .filter(|(m, v)| m == "SendMessage" && v.as_deref() == Some("1.0"))
            .count(),
        4
    );
    assert_eq!(
        rpcs.iter()
            .filter(|(m, v)| m == "message/send" && v.is_none())
            .count(),
        4
    );
}
