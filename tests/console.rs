//! The web console through the real server: who may see and do what (no
//! sign-in, auditor token, admin token) on every route, CSRF, the session
//! cookie's flags and lifetime, the trail page and its keyset paging, one
//! decision's page, replay (its bounds, its flips) and what-if, and the
//! console's changes recorded in the trail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::console::{Console, client, cookie_named, csrf_of, finished, form, window};
use common::{ADMIN_TOKEN, TestGateway};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION};
use serde_json::json;

const AUDITOR_TOKEN: &str = "test-auditor-token-0123456789abcdef01";

/// A forbid that denies one memory tool, with advice.
const FORBID: &str = r#"@id("no-remembering")
@advice("memory writes are frozen during the audit")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"af_memory_remember");
"#;

async fn start() -> TestGateway {
    start_with(|_| {}).await
}

async fn start_with(tweak: impl FnOnce(&mut cedargate::config::Config)) -> TestGateway {
    // The policies live in the gateway's own directory, so they outlive
    // it (reloads read them) and go with it.
    let dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(dir.path());
    std::fs::write(policies.join("audit.cedar"), FORBID).unwrap();
    TestGateway::start_in(dir, |c| {
        c.policies_dir = policies;
        c.auditor_token = Some(AUDITOR_TOKEN.into());
        tweak(c);
    })
    .await
}

/// Makes one allowed and one denied call; returns the denied decision's id.
async fn denied_call(g: &TestGateway) -> String {
    let t = g.tenant("acme").await;
    g.call_tool(
        &t,
        "af_memory_recall",
        json!({"query": "x", "workType": "chore"}),
    )
    .await;
    let body = g
        .call_tool(&t, "af_memory_remember", json!({"content": "x"}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn console_records(g: &TestGateway) -> Vec<String> {
    g.decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action.starts_with("console:"))
        .map(|d| d.record.action)
        .collect()
}

#[tokio::test]
async fn the_console_is_not_served_without_a_token() {
    let g = TestGateway::start_with(|c| c.admin_token = None).await;
    for path in ["/console", "/console/login", "/console/policies"] {
        let resp = client()
            .get(format!("{}{path}", g.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    let resp = client()
        .post(format!("{}/console/login", g.base))
        .body("token=x")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // The auditor token alone serves it.
    let g = TestGateway::start_with(|c| {
        c.admin_token = None;
        c.auditor_token = Some(AUDITOR_TOKEN.into());
    })
    .await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    assert_eq!(c.get("/console/policies").await.0, 200);
}

#[tokio::test]
async fn every_route_by_who_asks() {
    let g = start().await;
    let denied = denied_call(&g).await;
    let pages = [
        "/console".to_string(),
        format!("/console/decisions/{denied}"),
        "/console/replay".to_string(),
        format!("/console/replay?template={denied}"),
        "/console/policies".to_string(),
        "/console/peers".to_string(),
    ];
    let posts = [
        "/console/logout",
        "/console/replay",
        "/console/replay/0123/cancel",
        "/console/whatif",
        "/console/policies/reload",
        "/console/peers/acme/mcp/x/approve",
    ];
    // No sign-in: pages redirect to the form, posts are refused.
    let http = client();
    for p in &pages {
        let resp = http.get(format!("{}{p}", g.base)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{p}");
        assert_eq!(resp.headers()[LOCATION], "/console/login");
    }
    for p in posts {
        let resp = http.post(format!("{}{p}", g.base)).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{p}");
    }
    // A made-up cookie is no sign-in.
    let resp = http
        .get(format!("{}/console", g.base))
        .header(COOKIE, "cg_console=00112233")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);

    // Both tokens read every page.
    let auditor = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let admin = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    for c in [&auditor, &admin] {
        for p in &pages {
            let (status, html) = c.get(p).await;
            assert_eq!(status, 200, "{p}: {html}");
        }
    }
    // The auditor sees no reload button and may not reload or approve.
    let (_, html) = auditor.get("/console/policies").await;
    assert!(html.contains("signed in as auditor"));
    assert!(!html.contains("id=\"reload\""), "{html}");
    for p in [
        "/console/policies/reload",
        "/console/peers/acme/mcp/x/approve",
    ] {
        let resp = auditor.post(p, &[("tool", "echo")]).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{p}");
        assert!(resp.text().await.unwrap().contains("read-only"));
    }
    assert!(console_records(&g).await.is_empty());
    // The admin reloads; the reload is recorded in the trail.
    let (_, html) = admin.get("/console/policies").await;
    assert!(html.contains("id=\"reload\""));
    let resp = admin.post("/console/policies/reload", &[]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(console_records(&g).await, ["console:reload_policies"]);
    let notes = g
        .decisions()
        .await
        .into_iter()
        .find(|d| d.record.action == "console:reload_policies")
        .unwrap()
        .record
        .notes;
    let notes: serde_json::Value = serde_json::from_str(&notes).unwrap();
    assert_eq!(notes["operator"], json!({"token": "admin"}), "{notes}");
    let (_, html) = admin.get("/console/policies").await;
    assert!(html.contains("(console): unchanged"), "{html}");
    // An approval of a server that does not exist changes nothing.
    let resp = admin
        .post(
            "/console/peers/acme/mcp/nope/approve",
            &[("tool", "echo"), ("hash", "sha256:0")],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    // The operator record verifies and filters like any record.
    let (status, html) = admin.get("/console?action=console%3Areload_policies").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Gateway::Console::&quot;admin&quot;"),
        "{html}"
    );
    let report =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[tokio::test]
async fn forms_without_the_csrf_token_are_refused() {
    let g = start().await;
    let admin = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    for pairs in [vec![], vec![("csrf", "0000")]] {
        let resp = admin.post_raw("/console/policies/reload", &pairs).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert!(resp.text().await.unwrap().contains("CSRF"));
    }
    let resp = admin.post_raw("/console/logout", &[]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(console_records(&g).await.is_empty());
    // Another sign-in's token is not this one's.
    let other = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    assert_ne!(other.csrf, admin.csrf);
    let resp = admin
        .post_raw("/console/policies/reload", &[("csrf", &other.csrf)])
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    // The sign-in form needs its own cookie's token.
    let resp = client()
        .post(format!("{}/console/login", g.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form(&[("token", ADMIN_TOKEN), ("csrf", "abc")]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(cookie_named(&resp, "cg_console").is_none());
}

#[tokio::test]
async fn a_sign_in_form_post_is_refused_when_replayed() {
    let g = start().await;
    let http = client();
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let pair = cookie_named(&page, "cg_console_login").unwrap();
    let pair = pair.split(';').next().unwrap().to_string();
    let csrf = csrf_of(&page.text().await.unwrap());
    let post = || {
        http.post(format!("{}/console/login", g.base))
            .header(COOKIE, &pair)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(&[("token", ADMIN_TOKEN), ("csrf", &csrf)]))
            .send()
    };
    let first = post().await.unwrap();
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert!(cookie_named(&first, "cg_console").is_some());
    // The same post again (same cookie, same token): refused, no sign-in.
    let replayed = post().await.unwrap();
    assert_eq!(replayed.status(), StatusCode::FORBIDDEN);
    assert!(cookie_named(&replayed, "cg_console").is_none());
    assert!(replayed.text().await.unwrap().contains("already used"));
    // A failed sign-in spends its form too; its page carries a fresh one.
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let pair = cookie_named(&page, "cg_console_login").unwrap();
    let pair = pair.split(';').next().unwrap().to_string();
    let csrf = csrf_of(&page.text().await.unwrap());
    let wrong = || {
        http.post(format!("{}/console/login", g.base))
            .header(COOKIE, &pair)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(&[("token", "x"), ("csrf", &csrf)]))
            .send()
    };
    let failed = wrong().await.unwrap();
    assert_eq!(failed.status(), StatusCode::UNAUTHORIZED);
    let fresh = cookie_named(&failed, "cg_console_login").unwrap();
    assert!(!fresh.contains(&csrf), "{fresh}");
    assert_eq!(wrong().await.unwrap().status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn every_console_and_admin_answer_carries_the_security_headers() {
    let g = start().await;
    let http = client();
    let console_headers = [
        "content-security-policy",
        "x-frame-options",
        "cache-control",
        "referrer-policy",
        "x-content-type-options",
    ];
    let big = "x".repeat(600 * 1024);
    let admin = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    let console_answers = [
        (http.get(format!("{}/console/nope", g.base)), 404),
        (http.get(format!("{}/console/logout", g.base)), 405),
        (http.get(format!("{}/console", g.base)), 303),
        (http.get(format!("{}/console/login", g.base)), 200),
        (http.post(format!("{}/console/whatif", g.base)), 403),
        (
            http.post(format!("{}/console/login", g.base))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(format!("token={big}")),
            413,
        ),
        (
            http.post(format!("{}/console/whatif", g.base))
                .header(COOKIE, &admin.cookie)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(format!("csrf={}&policy_text={big}", admin.csrf)),
            400,
        ),
        (
            http.get(format!("{}/console/decisions/nope", g.base))
                .header(COOKIE, &admin.cookie),
            404,
        ),
        (
            http.get(format!("{}/console/assets/console.css", g.base)),
            200,
        ),
    ];
    for (req, status) in console_answers {
        let resp = req.send().await.unwrap();
        let url = resp.url().to_string();
        assert_eq!(resp.status().as_u16(), status, "{url}");
        for h in console_headers {
            assert!(resp.headers().contains_key(h), "{url}: {h}");
        }
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
        assert_eq!(resp.headers()["x-frame-options"], "DENY");
    }
    let admin_answers = [
        (http.get(format!("{}/admin/orgs", g.base)), 401),
        (
            http.get(format!("{}/admin/orgs", g.base))
                .bearer_auth(ADMIN_TOKEN),
            200,
        ),
        (
            http.get(format!("{}/admin/nope", g.base))
                .bearer_auth(ADMIN_TOKEN),
            404,
        ),
        (
            http.put(format!("{}/admin/orgs", g.base))
                .bearer_auth(ADMIN_TOKEN),
            405,
        ),
        (
            http.post(format!("{}/admin/orgs", g.base))
                .bearer_auth(ADMIN_TOKEN)
                .header("Content-Type", "application/json")
                .body("{"),
            400,
        ),
    ];
    for (req, status) in admin_answers {
        let resp = req.send().await.unwrap();
        let url = resp.url().to_string();
        assert_eq!(resp.status().as_u16(), status, "{url}");
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff", "{url}");
    }
}

#[tokio::test]
async fn the_session_cookie_is_locked_down_and_expires() {
    let g = start_with(|c| c.console.session_ttl_secs = 2).await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let flags = &c.set_cookie;
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=2"] {
        assert!(flags.contains(flag), "{flags}");
    }
    assert!(!flags.contains("Secure"), "http: {flags}");
    // A wrong token signs no one in.
    let http = client();
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let pair = cookie_named(&page, "cg_console_login").unwrap();
    let pair = pair.split(';').next().unwrap().to_string();
    let csrf = csrf_of(&page.text().await.unwrap());
    let resp = http
        .post(format!("{}/console/login", g.base))
        .header(COOKIE, &pair)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form(&[("token", "guess"), ("csrf", &csrf)]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(cookie_named(&resp, "cg_console").is_none());
    // The lifetime is crossed: the cookie no longer signs in.
    assert_eq!(c.get("/console").await.0, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(c.get("/console").await.0, StatusCode::SEE_OTHER);
    // Signing out ends a sign-in at once.
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let resp = c.post("/console/logout", &[]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert!(
        cookie_named(&resp, "cg_console")
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(c.get("/console").await.0, StatusCode::SEE_OTHER);

    // Behind https, the cookie is Secure.
    let g = start_with(|c| c.public_url = Some("https://gateway.example.com".into())).await;
    let c = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    assert!(c.set_cookie.contains("; Secure"), "{}", c.set_cookie);
}

#[tokio::test]
async fn the_trail_filters_and_pages_by_keyset() {
    let g = start().await;
    let denied = denied_call(&g).await;
    let t = g.tenant("globex").await;
    for _ in 0..60 {
        g.call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "y", "workType": "chore"}),
        )
        .await;
    }
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (_, html) = c.get("/console?decision=deny&org=acme").await;
    assert!(
        html.contains(&format!("/console/decisions/{denied}")),
        "{html}"
    );
    assert_eq!(html.matches("class=\"open-decision\"").count(), 1, "{html}");
    // The chart and the most denied tool count the denial.
    assert!(html.contains("id=\"deny-total\">1<"), "{html}");
    assert!(
        html.contains("Gateway::Tool::&quot;af_memory_remember&quot;</a> <span class=\"count\">1")
    );
    assert!(html.contains("<svg"));
    // 60 globex calls: a first page of 50, then the rest by keyset.
    let (_, first) = c.get("/console?org=globex&action=call_tool").await;
    assert_eq!(
        first.matches("class=\"open-decision\"").count(),
        50,
        "{first}"
    );
    let at = first.find("id=\"older\" href=\"").unwrap() + 17;
    let older = first[at..].split('"').next().unwrap().replace("&amp;", "&");
    assert!(older.contains("before="), "{older}");
    let (_, second) = c.get(&older).await;
    assert_eq!(second.matches("class=\"open-decision\"").count(), 10);
    assert!(!second.contains("id=\"older\""));
    // A filter that can never match is a clear error.
    let (status, html) = c.get("/console?decision=maybe").await;
    assert_eq!(status, 400);
    assert!(
        html.contains("`decision` must be `allow` or `deny`"),
        "{html}"
    );
    let (status, _) = c.get("/console?since=yesterday").await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn one_decision_shows_its_policy_and_chain_link() {
    let g = start().await;
    let denied = denied_call(&g).await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (status, html) = c.get(&format!("/console/decisions/{denied}")).await;
    assert_eq!(status, 200);
    assert!(html.contains("data-policy-id=\"no-remembering\""), "{html}");
    assert!(html.contains("memory writes are frozen during the audit"));
    assert!(html.contains("af_memory_remember"));
    assert!(
        html.contains("<span class=\"allow\">verifies</span>"),
        "{html}"
    );
    assert!(html.contains(&g.gw.pep.current().hash));
    assert!(html.contains("id=\"entities\""));
    // The decisions that let the call through, from its prelude.
    assert!(html.contains("id=\"prelude\""), "{html}");
    assert!(html.contains("data-prelude-action=\"access_session\""));
    assert!(html.contains("data-prelude-action=\"view_tool\""));
    let (status, _) = c.get("/console/decisions/no-such-id").await;
    assert_eq!(status, 404);
    // A tampered record shows a broken link.
    common::tamper_decisions(
        &g.database_url(),
        &format!("UPDATE decisions SET outcome = '{{}}' WHERE id = '{denied}'"),
    );
    let (_, html) = c.get(&format!("/console/decisions/{denied}")).await;
    assert!(
        html.contains("<span class=\"deny\">broken</span>"),
        "{html}"
    );
}

#[tokio::test]
async fn a_replay_of_a_candidate_shows_its_flips() {
    let g = start().await;
    let denied = denied_call(&g).await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (_, page) = c.get("/console/replay").await;
    // The textarea starts from the active set; drop the forbid.
    assert!(page.contains("no-remembering"));
    let candidate: String =
        g.gw.pep
            .current()
            .files
            .iter()
            .filter(|f| !f.path.ends_with("audit.cedar"))
            .map(|f| f.text.clone())
            .collect::<Vec<_>>()
            .join("\n");
    let (since, until) = window();
    let resp = c
        .post(
            "/console/replay",
            &[
                ("source", "text"),
                ("policy_text", &candidate),
                ("since", &since),
                ("until", &until),
            ],
        )
        .await;
    assert_eq!(
        resp.status(),
        StatusCode::SEE_OTHER,
        "{:?}",
        resp.text().await
    );
    let job = resp.headers()[LOCATION].to_str().unwrap().to_string();
    let html = finished(&c, &job).await;
    assert!(html.contains("data-state=\"done\""), "{html}");
    assert!(html.contains("id=\"flip-count\">1<"), "{html}");
    assert!(html.contains(&format!("href=\"/console/decisions/{denied}\"")));
    assert!(
        html.contains("<td>no-remembering</td><td>0</td><td>1</td>"),
        "{html}"
    );
    // The same replay through the CLI's code gives the same count.
    let schema = g.gw.pep.current().schema_text.clone();
    let report =
        g.gw.store
            .read(move |conn| {
                let filter = cedargate::store::audit_query::DecisionFilter {
                    since: Some(since.clone()),
                    until: Some(until.clone()),
                    ..Default::default()
                };
                let b = cedargate::policy::load::bundle_from_sources(
                    "s",
                    &schema,
                    vec![cedargate::policy::PolicyFile {
                        path: "c.cedar".into(),
                        text: candidate,
                    }],
                )
                .unwrap();
                Ok(cedargate::replay::replay(
                    conn,
                    &filter,
                    &cedargate::replay::Against::Candidate(std::sync::Arc::new(b)),
                )
                .unwrap())
            })
            .await
            .unwrap();
    assert_eq!(report.deny_to_allow, 1);
    // A candidate that does not load is a clear error, and no job runs.
    let (since, until) = window();
    let resp = c
        .post(
            "/console/replay",
            &[
                ("source", "text"),
                ("policy_text", "permit ("),
                ("since", &since),
                ("until", &until),
            ],
        )
        .await;
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("does not load"));
}

#[tokio::test]
async fn replay_bounds_are_enforced_before_anything_runs() {
    let g = start_with(|c| {
        c.console.replay_max_records = 3;
        c.console.replay_max_window_hours = 2;
    })
    .await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (since, until) = window();
    let post = |pairs: Vec<(&'static str, String)>| {
        let c = &c;
        async move {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let resp = c.post("/console/replay", &pairs).await;
            (resp.status(), resp.text().await.unwrap())
        }
    };
    let text = || {
        (
            "policy_text",
            "@id(\"all\")\npermit (principal, action, resource);".to_string(),
        )
    };
    // Within bounds: an empty window runs.
    let (status, _) = post(vec![
        ("source", "text".into()),
        text(),
        ("since", since.clone()),
        ("until", until.clone()),
    ])
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // No window, an inverted one, one too long.
    let (status, _) = post(vec![("source", "text".into()), text()]).await;
    assert_eq!(status, 400);
    let (status, _) = post(vec![
        ("source", "text".into()),
        text(),
        ("since", until.clone()),
        ("until", since.clone()),
    ])
    .await;
    assert_eq!(status, 400);
    let long_since =
        cedargate::ids::rfc3339(time::OffsetDateTime::now_utc() - time::Duration::hours(3));
    let (status, html) = post(vec![
        ("source", "text".into()),
        text(),
        ("since", long_since),
        ("until", until.clone()),
    ])
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html.contains("replay_max_window_hours"), "{html}");
    // More records in the window than the bound.
    let t = g.tenant("acme").await;
    for _ in 0..4 {
        g.call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "x", "workType": "chore"}),
        )
        .await;
    }
    let (status, html) = post(vec![
        ("source", "text".into()),
        text(),
        ("since", since.clone()),
        ("until", until.clone()),
    ])
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html.contains("replay_max_records"), "{html}");
    // Only directories under the candidates directory can be named.
    let (status, html) = post(vec![
        ("source", "dir".into()),
        ("candidate_dir", "../policies".into()),
        ("since", since),
        ("until", until),
    ])
    .await;
    assert_eq!(status, 400);
    assert!(html.contains("not a candidate directory"), "{html}");
}

#[tokio::test]
async fn a_replay_from_a_candidate_directory_and_a_what_if() {
    let g = start().await;
    let denied = denied_call(&g).await;
    // A candidate directory: the shipped set without the forbid.
    let dir = g.gw.config.data_dir.join("candidates/thaw");
    std::fs::create_dir_all(&dir).unwrap();
    for f in g.gw.pep.current().files.iter() {
        if !f.path.ends_with("audit.cedar") {
            let name = std::path::Path::new(&f.path).file_name().unwrap();
            std::fs::write(dir.join(name), &f.text).unwrap();
        }
    }
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (_, page) = c.get("/console/replay").await;
    assert!(page.contains("<option>thaw</option>"), "{page}");
    let (since, until) = window();
    let resp = c
        .post(
            "/console/replay",
            &[
                ("source", "dir"),
                ("candidate_dir", "thaw"),
                ("since", &since),
                ("until", &until),
            ],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let html = finished(&c, resp.headers()[LOCATION].to_str().unwrap()).await;
    assert!(html.contains("id=\"flip-count\">1<"), "{html}");

    // What-if: the denied request, against the live set, then the candidate.
    let records = g.decisions().await.len();
    let d = g
        .decisions()
        .await
        .into_iter()
        .find(|d| d.record.id == denied)
        .unwrap();
    let ask = |source: &'static str| {
        let (c, d) = (&c, &d);
        async move {
            let resp = c
                .post(
                    "/console/whatif",
                    &[
                        ("template", d.record.id.as_str()),
                        ("principal", d.record.principal.as_str()),
                        ("action", d.record.action.as_str()),
                        ("resource", d.record.resource.as_str()),
                        ("context", d.record.context.as_str()),
                        ("source", source),
                        ("candidate_dir", "thaw"),
                    ],
                )
                .await;
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap()
        }
    };
    let live = ask("live").await;
    assert!(live.contains("id=\"whatif-decision\">deny<"), "{live}");
    assert!(live.contains("data-policy-id=\"no-remembering\""));
    let candidate = ask("dir").await;
    assert!(
        candidate.contains("id=\"whatif-decision\">allow<"),
        "{candidate}"
    );
    // Nothing was recorded by either question.
    assert_eq!(g.decisions().await.len(), records);
}

#[tokio::test]
async fn a_replay_reports_progress_and_stops_when_cancelled() {
    use cedargate::replay::{Against, Control, ReplayError, replay_with};
    let g = start().await;
    denied_call(&g).await;
    let records = g.decisions().await.len() as u64;
    let against = Against::Candidate(g.gw.pep.current());
    let run = |cancel: bool| {
        let against = against.clone();
        let store = &g.gw.store;
        async move {
            let control = std::sync::Arc::new(Control::default());
            if cancel {
                control.cancel();
            }
            let c2 = std::sync::Arc::clone(&control);
            let result = store
                .read(move |c| Ok(replay_with(c, &Default::default(), &against, &c2)))
                .await
                .unwrap();
            (result, control.records_read())
        }
    };
    let (done, read) = run(false).await;
    assert_eq!(done.unwrap().records, records);
    assert_eq!(read, records);
    let (cancelled, read) = run(true).await;
    assert!(
        matches!(cancelled, Err(ReplayError::Cancelled(0))),
        "{cancelled:?}"
    );
    assert_eq!(read, 0);
    // Through the console: a cancel on a job is accepted and the job ends.
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (since, until) = window();
    let resp = c
        .post(
            "/console/replay",
            &[
                ("source", "text"),
                (
                    "policy_text",
                    "@id(\"all\")\npermit (principal, action, resource);",
                ),
                ("since", &since),
                ("until", &until),
            ],
        )
        .await;
    let job = resp.headers()[LOCATION].to_str().unwrap().to_string();
    let resp = c.post(&format!("{job}/cancel"), &[]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let html = finished(&c, &job).await;
    assert!(
        html.contains("data-state=\"cancelled\"") || html.contains("data-state=\"done\""),
        "{html}"
    );
}

#[tokio::test]
async fn an_auditor_cannot_cancel_an_admins_replay() {
    let g = start().await;
    denied_call(&g).await;
    let admin = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    let auditor = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (since, until) = window();
    let start = |c: &Console| {
        let (since, until) = (since.clone(), until.clone());
        let c = c.clone_sign_in();
        async move {
            let resp = c
                .post(
                    "/console/replay",
                    &[
                        ("source", "text"),
                        (
                            "policy_text",
                            "@id(\"all\")\npermit (principal, action, resource);",
                        ),
                        ("since", &since),
                        ("until", &until),
                    ],
                )
                .await;
            assert_eq!(resp.status(), StatusCode::SEE_OTHER);
            resp.headers()[LOCATION].to_str().unwrap().to_string()
        }
    };
    let job = start(&admin).await;
    let resp = auditor.post(&format!("{job}/cancel"), &[]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("admin started this replay")
    );
    // The replay ran on to its end; the auditor was never offered the button.
    let html = finished(&auditor, &job).await;
    assert!(html.contains("data-state=\"done\""), "{html}");
    assert!(!html.contains("id=\"cancel\""), "{html}");
    // An admin cancels anyone's replay; an auditor an auditor's.
    let job = start(&auditor).await;
    let resp = admin.post(&format!("{job}/cancel"), &[]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let job = start(&auditor).await;
    let resp = auditor.post(&format!("{job}/cancel"), &[]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
}

/// The SDK-built server of `tests/upstreams/changing_server.mjs` over
/// Streamable HTTP on a free port (its `mutate` tool changes `reword`).
async fn changing_upstream() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = common::setup::upstreams_dir().join("changing_server.mjs");
    let child = tokio::process::Command::new("node")
        .arg(script)
        .args(["http", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the changing server did not listen");
}

/// The `<section class="held" …>` of `tool` on the peers page, if shown.
fn held_section<'a>(html: &'a str, tool: &str) -> Option<&'a str> {
    let at = html.find(&format!("class=\"held\" data-tool=\"{tool}\""))?;
    let len = html[at..].find("</section>")?;
    Some(&html[at..at + len])
}

/// A real upstream changes a definition; the console shows it held with a
/// diff of the approved and the new definition; an auditor cannot approve
/// it; the admin approves it through the page's form (with its CSRF
/// token); the tool is offered again with its new definition, and the
/// approval is in the trail (the console's record and the approval event).
#[tokio::test]
async fn a_held_definition_is_approved_from_the_console() {
    if !common::setup::upstreams_installed() {
        return;
    }
    let (_upstream, url) = changing_upstream().await;
    let g = start_with(|c| c.upstream_refresh.interval_secs = 0).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            reqwest::Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "changing", "transport": "streamable-http", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let id = server["id"].as_str().unwrap().to_string();
    let body = g.call_tool(&t, "changing.mutate", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "mutated", "{body}");
    let refresh = format!("/admin/orgs/acme/mcp-servers/{id}/refresh");
    let (status, body) = g.admin(reqwest::Method::POST, &refresh, None).await;
    assert_eq!(status, 200, "{body}");
    let held = g.call_tool(&t, "changing.reword", json!({})).await;
    assert_eq!(held["error"]["code"], -32601, "{held}");

    // Both roles see the held tool and the diff; only the admin a form.
    let auditor = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let admin = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    let (status, html) = auditor.get("/console/peers").await;
    assert_eq!(status, 200);
    let section = held_section(&html, "reword").expect("the held tool is shown");
    let changed_line = |tag: &str, text: &str| {
        section.lines().any(|l| {
            l.contains(&format!("class=\"d{tag}\""))
                && l.contains(text)
                && l.contains("description")
        })
    };
    assert!(changed_line("del", "original tool"), "{section}");
    assert!(changed_line("add", "reworded tool"), "{section}");
    assert!(!section.contains("<form"), "{section}");
    let approve = format!("/console/peers/acme/mcp/{id}/approve");
    let resp = auditor.post(&approve, &[("tool", "reword")]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(console_records(&g).await.is_empty());

    let (_, html) = admin.get("/console/peers").await;
    let section = held_section(&html, "reword").expect("the held tool is shown");
    assert!(
        section.contains(&format!("action=\"{approve}\"")),
        "{section}"
    );
    let form_csrf = csrf_of(section);
    assert_eq!(form_csrf, admin.csrf);
    // Without the form's token nothing is approved.
    let resp = admin.post_raw(&approve, &[("tool", "reword")]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(!g.tool_names(&t).await.contains(&"changing.reword".into()));
    // The form carries the held hash it showed; another one approves
    // nothing (a refresh may hold a newer definition after the review).
    let at = section
        .find("name=\"hash\" value=\"")
        .expect("a hash field")
        + 19;
    let form_hash = section[at..].split('"').next().unwrap().to_string();
    assert_eq!(form_hash.len(), 64, "{section}");
    // A form without the hash names no definition: nothing is approved.
    let resp = admin
        .post_raw(&approve, &[("tool", "reword"), ("csrf", &form_csrf)])
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(!g.tool_names(&t).await.contains(&"changing.reword".into()));
    let stale = "0".repeat(64);
    let resp = admin
        .post_raw(
            &approve,
            &[("tool", "reword"), ("hash", &stale), ("csrf", &form_csrf)],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("review it again"));
    assert!(!g.tool_names(&t).await.contains(&"changing.reword".into()));
    let resp = admin
        .post_raw(
            &approve,
            &[
                ("tool", "reword"),
                ("hash", &form_hash),
                ("csrf", &form_csrf),
            ],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/console/peers");

    let (_, list) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let offered = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "changing.reword")
        .cloned()
        .expect("offered again");
    assert_eq!(offered["description"], "reworded tool");
    let body = g
        .call_tool(&t, "changing.reword", json!({"message": "back"}))
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"], "reword back",
        "{body}"
    );
    let (_, html) = admin.get("/console/peers").await;
    assert!(held_section(&html, "reword").is_none(), "still held");

    assert_eq!(console_records(&g).await, ["console:approve_tools"]);
    let approved: Vec<serde_json::Value> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "upstream_tool_approved")
        .map(|d| serde_json::from_str(&d.record.outcome).unwrap())
        .collect();
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["tool"], "reword");
    assert_eq!(approved[0]["trigger"], "console");
    // An approval of a tool that is no longer held changes nothing.
    let resp = admin.post(&approve, &[("tool", "reword")]).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(console_records(&g).await.len(), 1);
}

/// A decision whose recorded policy set was edited in the database (its
/// guard dropped first, as an administrator could) is not shown under the
/// forged text: the page says the set was altered.
#[tokio::test]
async fn a_decision_under_an_edited_policy_set_is_not_shown_under_the_forged_text() {
    let g = start().await;
    let denied = denied_call(&g).await;
    let recorded = g.gw.pep.current().hash.clone();
    // Another set becomes active, so the decision's set is a recorded one.
    let audit = g.gw.config.policies_dir.join("audit.cedar");
    std::fs::write(&audit, format!("{FORBID}\n// reviewed\n")).unwrap();
    let (status, body) = g
        .admin(reqwest::Method::POST, "/admin/policies/reload", None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(g.gw.pep.current().hash, recorded);
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let page = format!("/console/decisions/{denied}");
    let (_, html) = c.get(&page).await;
    assert!(html.contains("memory writes are frozen"), "{html}");

    let unguard = match g.gw.store.read(|c| Ok(c.backend())).await.unwrap() {
        cedargate::store::Backend::Sqlite => "DROP TRIGGER policy_sets_no_update;",
        cedargate::store::Backend::Postgres => {
            "ALTER TABLE policy_sets DISABLE TRIGGER policy_sets_no_update;"
        }
    };
    let forge = format!(
        "{unguard} UPDATE policy_sets SET files = replace(files, 'are frozen', 'are welcome') WHERE hash = '{recorded}';"
    );
    g.gw.store
        .read(move |c| c.execute_batch(&forge))
        .await
        .unwrap();
    let (status, html) = c.get(&page).await;
    assert_eq!(status, 200);
    assert!(!html.contains("are welcome"), "{html}");
    assert!(html.contains("was altered"), "{html}");
}

/// A 1.0 A2A peer with a skill that answers and one that fails (HTTP 500).
async fn a2a_peer() -> String {
    async fn rpc(body: String) -> axum::response::Response {
        use axum::response::IntoResponse;
        let req: serde_json::Value = serde_json::from_str(&body).unwrap();
        if req["params"]["metadata"]["skillId"] == "boom" {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "exploded").into_response();
        }
        axum::Json(json!({"jsonrpc": "2.0", "id": req["id"], "result":
            {"message": {"role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}}))
        .into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({
        "name": "Desk", "description": "Answers.", "version": "1.0.0",
        "supportedInterfaces": [
            {"url": format!("{base}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "skills": [{"id": "hi", "name": "Hi"}, {"id": "boom", "name": "Boom"}],
    });
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            axum::routing::get(move || async move { axum::Json(card) }),
        )
        .route("/rpc", axum::routing::post(rpc));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn the_remote_tools_page_shows_each_peers_load() {
    let g = start_with(|_| {}).await;
    let t = g.tenant("acme").await;
    let base = a2a_peer().await;
    let (status, agent) = g
        .admin(
            reqwest::Method::POST,
            "/admin/orgs/acme/a2a-agents",
            Some(json!({"url": base})),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let slug = agent["slug"].as_str().unwrap();
    for skill in ["hi", "hi", "boom"] {
        g.call_tool(&t, &format!("{slug}.{skill}"), json!({})).await;
    }
    g.gw.a2a.bus.drain().await;
    g.gw.store.writer().flush().await.unwrap();
    let auditor = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (status, html) = auditor.get("/console/peers").await;
    assert_eq!(status, 200);
    let row = html
        .lines()
        .find(|l| l.contains(&format!("data-peer=\"{slug}\"")))
        .unwrap_or_else(|| panic!("no row for {slug}: {html}"));
    // Completed / failed / denied / running, then the failure reported.
    assert!(
        row.contains("<td class=\"load\">2 / 1 / 0 / 0</td>"),
        "{row}"
    );
    assert!(row.contains("-32202"), "{row}");
}

/// The Policy set page shows the last proof of a reload: its outcome, the
/// environments that are not equivalent, and each counterexample with its
/// entities and both sets' decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_set_page_shows_the_last_proof() {
    let Some(solver) = common::setup::solver() else {
        return;
    };
    let g = start_with(|c| {
        c.lifecycle.watch = false;
        c.lifecycle.prove = cedargate::config::ProveMode::RefuseWidening;
        c.prove.solver = Some(solver);
    })
    .await;
    let auditor = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (_, html) = auditor.get("/console/policies").await;
    assert!(html.contains("No reload proved yet."), "{html}");
    std::fs::write(
        g.gw.config.policies_dir.join("deployers.cedar"),
        "@id(\"deployers-write-any-graph\")\npermit (principal in Gateway::Role::\"deployers\", action == Gateway::Action::\"write_node\", resource);\n",
    )
    .unwrap();
    let (status, body) = g
        .admin(reqwest::Method::POST, "/admin/policies/reload", None)
        .await;
    assert_eq!(status, 422, "{body}");
    let candidate = body["attempt"]["hash"].as_str().unwrap();
    let (_, html) = auditor.get("/console/policies").await;
    assert!(html.contains("id=\"proof-outcome\">widens<"), "{html}");
    assert!(html.contains(candidate), "{html}");
    assert!(
        html.contains("<td>write_node (Agent → Project)</td><td>more-permissive</td>"),
        "{html}"
    );
    assert!(
        html.contains("widening in write_node (Agent → Project)"),
        "{html}"
    );
    assert!(
        html.contains("allow by deployers-write-any-graph"),
        "{html}"
    );
    assert!(html.contains("Gateway::Role"), "{html}");
}
