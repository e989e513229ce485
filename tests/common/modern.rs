//! Requests as a 2026-07-28 client sends them: the body with its `_meta`,
//! the headers mirrored from it, and the answer read whole.

use serde_json::{Value, json};

use super::{Tenant, TestGateway};

/// The revision.
pub const V: &str = "2026-07-28";

/// A 2026-07-28 request body: `params` with the required `_meta` added.
pub fn request(id: i64, method: &str, mut params: Value) -> Value {
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!(V);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "test", "version": "1"});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The headers a conforming client sends for `body`.
pub fn standard_headers(body: &Value) -> Vec<(String, String)> {
    let method = body["method"].as_str().unwrap();
    let mut h = vec![
        ("mcp-protocol-version".to_string(), V.to_string()),
        ("mcp-method".to_string(), method.to_string()),
    ];
    if let Some(name) = body["params"]["name"].as_str() {
        h.push(("mcp-name".to_string(), name.to_string()));
    }
    h
}

pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

/// The POST of `body` with `headers` and the tenant's key, not yet sent.
pub fn posting(
    g: &TestGateway,
    t: &Tenant,
    headers: &[(String, String)],
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut req = g
        .http
        .post(&t.mcp_url)
        .bearer_auth(&t.key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    req
}

/// POSTs `body` with `headers` (and the tenant's key).
pub async fn post(
    g: &TestGateway,
    t: &Tenant,
    headers: &[(String, String)],
    body: &Value,
) -> Answer {
    let resp = posting(g, t, headers, body).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// POSTs `body` as a conforming 2026-07-28 client would.
pub async fn modern(g: &TestGateway, t: &Tenant, body: &Value) -> Answer {
    post(g, t, &standard_headers(body), body).await
}

/// Opens `subscriptions/listen` (request id `id`) following
/// `notifications` (e.g. `{"promptsListChanged": true}`), and reads its
/// acknowledgement, which it answers with the stream.
pub async fn listen(
    g: &TestGateway,
    t: &Tenant,
    id: i64,
    notifications: Value,
) -> (Value, super::sse::Events) {
    let body = request(
        id,
        "subscriptions/listen",
        json!({ "notifications": notifications }),
    );
    let resp = posting(g, t, &standard_headers(&body), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut events = super::sse::Events {
        resp,
        buf: String::new(),
    };
    let ack = events.next().await.unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    (ack, events)
}
