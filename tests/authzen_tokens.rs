//! Access tokens from the configured identity providers as callers of the
//! decision applications, against a real OpenID provider
//! (`tests/oidc/provider.mjs`): a token issued for an application's PDP
//! identifier and granting `authzen:<app>` asks it (evaluations and
//! searches, recorded with the token's issuer, subject and client); a token
//! for another audience, without the scope, or of no org is refused; keys
//! keep working beside tokens.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use common::oidc::{self, OidcProvider};
use common::pdp::Apps;
use serde_json::{Value, json};

fn ask() -> Value {
    json!({"subject": {"type": "user", "id": "alice"}, "action": {"name": "read"},
           "resource": {"type": "record", "id": "record-1"}})
}

async fn gateway(idp: &OidcProvider, org: Option<&str>) -> (TestGateway, Apps) {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let mut issuer = oidc::acme_issuer(idp);
    issuer.org = org.map(str::to_string);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(move |c| {
        c.pdp_dir = dir;
        c.pdp.default_app = Some("records".into());
        c.auth.issuers = vec![issuer];
    })
    .await;
    (g, apps)
}

/// POSTs `body` to `path` with `Bearer token`: status and answer.
async fn asked(g: &TestGateway, path: &str, token: &str, body: Value) -> (u16, Value) {
    let (status, _, answer) = g.pdp_raw(path, Some(token), &[], body.to_string()).await;
    (status, answer)
}

#[tokio::test]
async fn a_token_granting_the_application_s_scope_asks_it() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (g, _apps) = gateway(&idp, Some("acme")).await;
    let records = format!("{}/pdp/records", g.base);
    let token = idp
        .client_credentials("authzen:records", &records)
        .await
        .access_token;
    let (status, answer) = asked(&g, "/pdp/records/access/v1/evaluation", &token, ask()).await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
    let search = json!({"subject": {"type": "user"}, "action": {"name": "read"},
                        "resource": {"type": "record", "id": "record-1"}});
    let (status, found) = asked(&g, "/pdp/records/access/v1/search/subject", &token, search).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["results"].as_array().unwrap().len(), 2, "{found}");

    // Both records name the token's holder, in the issuer's org; never the token.
    let records_made = g.decisions().await;
    assert_eq!(records_made.len(), 2);
    for d in &records_made {
        let notes: Value = serde_json::from_str(&d.record.notes).unwrap();
        let who = &notes["authzen"]["token"];
        assert_eq!(who["issuer"], json!(idp.issuer), "{notes}");
        assert_eq!(who["subject"], "cg-service", "{notes}");
        assert_eq!(who["client"], "cg-service", "{notes}");
        assert!(who["jti"].is_string(), "{notes}");
        assert!(notes["authzen"].get("key").is_none(), "{notes}");
        assert!(!d.record.notes.contains(&token) && !d.record.context.contains(&token));
        assert_eq!(d.record.org_id.as_deref(), Some("acme"));
    }

    // Issued for `records`: not a token for `other`, whatever its scope.
    let (status, answer) = asked(&g, "/pdp/other/access/v1/evaluation", &token, ask()).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("aud"));
    // Issued for `other`, without `authzen:other`: refused by its scope.
    let other = format!("{}/pdp/other", g.base);
    let wrong_scope = idp
        .client_credentials("authzen:records mcp:tools", &other)
        .await
        .access_token;
    let (status, answer) = asked(&g, "/pdp/other/access/v1/evaluation", &wrong_scope, ask()).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`authzen:other`"),
        "{answer}"
    );
    // A token for the gateway's resource (`[auth].resource`, by default
    // `public_url`) is good at every path, its scope still deciding.
    let for_base = idp
        .client_credentials("authzen:records", &g.base)
        .await
        .access_token;
    for path in ["/access/v1/evaluation", "/pdp/records/access/v1/evaluation"] {
        let (status, answer) = asked(&g, path, &for_base, ask()).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    let (status, _) = asked(&g, "/pdp/other/access/v1/evaluation", &for_base, ask()).await;
    assert_eq!(status, 403);
    // Not a token at all; a key of the PDP role beside tokens.
    let (status, _) = asked(
        &g,
        "/pdp/records/access/v1/evaluation",
        "not-a-token",
        ask(),
    )
    .await;
    assert_eq!(status, 401);
    let key = g.pdp_key("acme", &["records"]).await;
    let (status, answer) = g
        .pdp("/pdp/records/access/v1/evaluation", &key, ask())
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        g.decisions().await.len(),
        5,
        "refused requests record nothing"
    );
}

#[tokio::test]
async fn a_token_of_no_org_is_refused() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (g, _apps) = gateway(&idp, None).await;
    let records = format!("{}/pdp/records", g.base);
    let token = idp
        .client_credentials("authzen:records", &records)
        .await
        .access_token;
    let (status, answer) = asked(&g, "/pdp/records/access/v1/evaluation", &token, ask()).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("organization"),
        "{answer}"
    );
    assert!(g.decisions().await.is_empty());
}
