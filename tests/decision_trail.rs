//! The decision trail and the policy set behind it: one record per Cedar
//! decision, fail-closed evaluation, tamper detection, and the operator's
//! loop of "add a forbid, restart, see the call denied and recorded".

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use cedargate::store::decisions;
use common::{TestGateway, copy_policies, repo};
use serde_json::{Value, json};

#[tokio::test]
async fn every_request_is_one_record_holding_its_decisions() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let before = g.decisions().await.len();
    // tools/list: one view_tool record holding the verdicts of both tools,
    // with the request's access_session in its prelude.
    g.mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    // tools/call: the call_tool record, with access_session and view_tool
    // in its prelude.
    g.call_tool(
        &t,
        "af_memory_remember",
        json!({"content": "one record per request"}),
    )
    .await;
    let records = g.decisions().await;
    let new: Vec<_> = records[before..]
        .iter()
        .map(|d| (d.record.action.as_str(), d.record.decision.as_str()))
        .collect();
    assert_eq!(new, vec![("view_tool", "allow"), ("call_tool", "allow")]);
    let prelude = |d: &decisions::StoredDecision| -> Vec<(String, String, String)> {
        cedargate::audit::prelude::preludes(&d.record)
            .unwrap()
            .into_iter()
            .map(|p| (p.action, p.principal, p.resource))
            .collect()
    };
    let key = format!("Gateway::ApiKey::\"{}\"", t.key_id);
    let session = format!("Gateway::Session::\"{}\"", t.session_id);
    let agent = "Gateway::Agent::\"acme-agent\"".to_string();
    assert_eq!(
        prelude(&records[before]),
        vec![("access_session".into(), key.clone(), session.clone())]
    );
    assert_eq!(
        prelude(&records[before + 1]),
        vec![
            ("access_session".into(), key, session),
            (
                "view_tool".into(),
                agent,
                "Gateway::Tool::\"af_memory_remember\"".into()
            ),
        ]
    );
    // Each prelude decision is re-run alone by replay.
    let report = g.replay_recorded().await;
    assert_eq!(report.unreplayable, Vec::<String>::new());
    assert_eq!(report.identical, report.records);
    assert_eq!(report.per_action["access_session"].records, 0);
    assert!(report.decisions >= report.records + 3);
    // Filtering replay on a prelude's action finds the records holding it
    // and counts only that action's decisions.
    let filter = cedargate::store::audit_query::DecisionFilter {
        action: Some("access_session".into()),
        session: Some(t.session_id.clone()),
        ..Default::default()
    };
    let only =
        g.gw.store
            .read(move |c| {
                Ok(
                    cedargate::replay::replay(c, &filter, &cedargate::replay::Against::Recorded)
                        .unwrap(),
                )
            })
            .await
            .unwrap();
    assert_eq!((only.records, only.decisions), (2, 2), "{only:?}");
    assert_eq!(only.identical, 2);
    let call = records.last().unwrap();
    assert_eq!(call.record.principal, "Gateway::Agent::\"acme-agent\"");
    assert_eq!(
        call.record.resource,
        "Gateway::Tool::\"af_memory_remember\""
    );
    assert_eq!(call.record.org_id.as_deref(), Some("acme"));
    assert_eq!(
        call.record.session_id.as_deref(),
        Some(t.session_id.as_str())
    );
    assert_eq!(call.record.policy_hash, g.gw.pep.current().hash);
    let outcome: Value = serde_json::from_str(&call.record.outcome).unwrap();
    assert_eq!(outcome["status"], "completed");
    // The context and entity data it used are recorded, so it can be re-run.
    let context: Value = serde_json::from_str(&call.record.context).unwrap();
    assert_eq!(context["session"]["__entity"]["id"], t.session_id);
    let entities = g.entity_snapshot(&call.record.entities_hash).await;
    assert!(entities.contains("\"acme-agent\""));
}

#[tokio::test]
async fn recorded_decisions_replay_to_the_same_verdict() {
    let g = TestGateway::start_with_policy("deny.cedar", "@id(\"no-remember\")\nforbid (principal, action in Gateway::Action::\"call_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n").await;
    let t = g.tenant("acme").await;
    g.mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    g.call_tool(&t, "af_memory_remember", json!({"content": "denied"}))
        .await;
    g.call_tool(
        &t,
        "af_memory_recall",
        json!({"query": "x", "workType": "chore"}),
    )
    .await;
    let bundle = g.gw.pep.current();
    let records = g.decisions().await;
    assert!(records.iter().any(|d| d.record.decision == "deny"));
    for d in records {
        let entities = g.entity_snapshot(&d.record.entities_hash).await;
        if cedargate::audit::tool_list::is_tool_list(&d.record) {
            // A tools/list record: each tool re-decided alone gives its
            // recorded verdict.
            let entities = bundle.parse_recorded_entities(&entities).unwrap();
            let principal = d.record.principal.parse().unwrap();
            let tools = cedargate::audit::tool_list::replay_tool_list(
                &bundle, &d.record, &principal, &entities,
            )
            .unwrap();
            assert_eq!(tools.len(), 2);
            for t in tools {
                assert_eq!(t.now.allowed, t.recorded.allowed, "{}", t.resource);
                assert_eq!(t.now.reasons, t.recorded.reasons, "{}", t.resource);
            }
            continue;
        }
        let entities = bundle
            .parse_entities(&serde_json::from_str(&entities).unwrap())
            .unwrap();
        let request = cedargate::policy::recorded::RecordedRequest::parse(
            &d.record.principal,
            &d.record.action,
            &d.record.resource,
            &d.record.context,
        )
        .unwrap();
        let verdict = bundle.decide_recorded(&request, &entities);
        assert_eq!(
            if verdict.allowed { "allow" } else { "deny" },
            d.record.decision,
            "seq {}",
            d.seq
        );
        assert_eq!(
            Value::from(verdict.reasons).to_string(),
            d.record.reasons,
            "seq {}",
            d.seq
        );
    }
}

#[tokio::test]
async fn an_erroring_forbid_denies() {
    // Cedar skips a policy whose evaluation errors; the gateway must not
    // let that turn a forbid into an allow. Integer overflow passes strict
    // validation and errors at evaluation time.
    let g = TestGateway::start_with_policy("overflow.cedar", "@id(\"overflowing-forbid\")\nforbid (principal, action in Gateway::Action::\"call_tool\", resource)\nwhen { 9223372036854775807 + 1 > 0 };\n").await;
    let t = g.tenant("acme").await;
    let body = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "x", "workType": "chore"}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    let records = g.decisions().await;
    let call = records
        .iter()
        .rev()
        .find(|d| d.record.action == "call_tool")
        .unwrap();
    assert_eq!(call.record.decision, "deny");
    assert!(
        call.record.errors.contains("overflowing-forbid"),
        "{}",
        call.record.errors
    );
}

#[tokio::test]
async fn add_a_forbid_restart_and_see_it_decide() {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    let p = policies.clone();
    let g = TestGateway::start_in(dir, move |c| c.policies_dir = p).await;
    let mut t = g.tenant("acme").await;
    let ok = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "before the change"}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");
    let first_hash = g.gw.pep.current().hash.clone();
    let dir = g.stop().await.into_dir();

    std::fs::write(
        policies.join("incident.cedar"),
        "@id(\"incident-freeze\")\n@advice(\"writes are frozen during incident 42\")\nforbid (principal, action in Gateway::Action::\"call_tool\", resource)\nwhen { !resource.readOnly };\n",
    )
    .unwrap();
    let p = policies.clone();
    let g = TestGateway::start_in(dir, move |c| c.policies_dir = p).await;
    assert_ne!(g.gw.pep.current().hash, first_hash);
    t.mcp_url = format!("{}/api/mcp/{}", g.base, t.session_id);
    let denied = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "after the change"}),
        )
        .await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert_eq!(
        denied["error"]["data"]["reasons"],
        json!(["incident-freeze"])
    );
    // Read-only tools still work.
    let ok = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "before change", "workType": "chore"}),
        )
        .await;
    assert!(
        ok["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("before the change")
    );
    let id = denied["error"]["data"]["decisionId"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, record) = g
        .admin(
            reqwest::Method::GET,
            &format!("/admin/decisions/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(record["decision"], "deny");
    assert_eq!(record["reasons"], "[\"incident-freeze\"]");
    // Both policy sets are kept for replay, and the chain spans the restart.
    let sets = g.count("policy_sets").await;
    assert_eq!(sets, 2);
    g.gw.store.writer().flush().await.unwrap();
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[tokio::test]
async fn an_invalid_policy_set_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(
        policies.join("typo.cedar"),
        "@id(\"typo\")\npermit (principal, action == Gateway::Action::\"call_tool\", resource)\nwhen { resource.rsik };\n",
    )
    .unwrap();
    let config = cedargate::config::Config {
        data_dir: dir.path().join("data"),
        policies_dir: policies,
        schema_file: repo().join("schemas/gateway.cedarschema"),
        ..cedargate::config::Config::default()
    };
    let err = cedargate::server::prepare(config)
        .await
        .map(|_| ())
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("typo.cedar:3:"), "{text}");
    assert!(text.contains("rsik"), "{text}");
}

#[tokio::test]
async fn verify_detects_edited_and_deleted_records() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    // Nine calls, one record each (access_session and view_tool in its
    // prelude).
    for i in 0..9 {
        g.call_tool(
            &t,
            "af_memory_remember",
            json!({"content": format!("note {i}")}),
        )
        .await;
    }
    g.gw.store.writer().flush().await.unwrap();
    let clean = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(clean.problems.is_empty(), "{:?}", clean.problems);
    assert_eq!(clean.checked, 9);

    // The table refuses edits outright…
    let refused =
        g.gw.store
            .read(|c| {
                c.execute(
                    "UPDATE decisions SET decision = 'allow' WHERE seq = 2",
                    cedargate::params![],
                )
            })
            .await;
    assert!(refused.is_err());
    // …so an attacker drops the guard first. Verification still catches it.
    g.gw.store
        .read(|c| {
            let guards = common::drop_trail_guards(c.backend());
            // A prelude decision is part of the record's hashed text.
            c.execute_batch(&format!(
                "{guards} UPDATE decisions SET reasons = '[\"forged\"]' WHERE seq = 5;
                 UPDATE decisions SET notes = replace(notes, '\"allow\"', '\"deny\"') WHERE seq = 3;"
            ))?;
            Ok(())
        })
        .await
        .unwrap();
    let edited = g.gw.store.read(decisions::verify).await.unwrap();
    assert_eq!(edited.problems.len(), 2, "{:?}", edited.problems);
    assert!(
        edited.problems[0].starts_with("seq 3") && edited.problems[1].starts_with("seq 5"),
        "{:?}",
        edited.problems
    );

    g.gw.store
        .read(|c| c.execute_batch("DELETE FROM decisions WHERE seq = 7;"))
        .await
        .unwrap();
    let deleted = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(
        deleted.problems.iter().any(|p| p.contains("missing")),
        "{:?}",
        deleted.problems
    );
}

#[tokio::test]
async fn a_denied_session_access_is_refused_and_recorded_first() {
    let g = TestGateway::start_with_policy(
        "lockdown.cedar",
        "@id(\"session-lockdown\")\n@advice(\"sessions are locked during the audit\")\nforbid (principal, action == Gateway::Action::\"access_session\", resource);\n",
    )
    .await;
    let t = g.tenant("acme").await;
    let (status, body) = g
        .mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], -32003);
    assert_eq!(
        body["error"]["data"]["advice"],
        json!(["sessions are locked during the audit"])
    );
    let id = body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap()
        .to_string();
    // Durable before the answer: read it without flushing the writer.
    let stored =
        g.gw.store
            .read(move |c| decisions::get(c, &id))
            .await
            .unwrap()
            .expect("recorded before the 403");
    assert_eq!(stored.record.action, "access_session");
    assert_eq!(stored.record.decision, "deny");
    assert_eq!(stored.record.reasons, "[\"session-lockdown\"]");
    // Nothing past the refused access was decided.
    assert!(
        g.decisions()
            .await
            .iter()
            .all(|d| d.record.action == "access_session")
    );
}

/// Replay reuses a verdict only where deciding again cannot differ (see
/// `src/policy/replay_verdicts.rs`): each request below is decided with
/// the memo, in this order, and must match deciding it alone. The pairs
/// differ only in what a policy reads (the time, the arguments, the
/// session) or in what makes the request invalid (an unparsable time,
/// arguments that do not fit): a memo keyed too loosely would return the
/// first one's verdict for the second.
#[test]
fn reused_replay_verdicts_match_deciding_each_record_alone() {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    // access_session reads the time, the typed recall its arguments.
    std::fs::write(
        policies.join("reads.cedar"),
        "@id(\"no-sessions-after-june\")\nforbid (principal, action == Gateway::Action::\"access_session\", resource)\nwhen { context.time >= datetime(\"2026-06-01\") };\n\n@id(\"no-chores\")\nforbid (principal, action == Gateway::Action::\"af_memory_recall\", resource)\nwhen { context.args has workType && context.args.workType == \"chore\" };\n",
    )
    .unwrap();
    let catalog = cedargate::tools::Catalog::builtin().unwrap();
    let (bundle, _) = cedargate::lifecycle::load_candidate(
        &repo().join("schemas/gateway.cedarschema"),
        &policies,
        &cedargate::lifecycle::tool_schemas(&catalog),
    )
    .unwrap();
    let entities = bundle
        .parse_recorded_entities(&session_slice_json(&bundle, &catalog))
        .unwrap();

    let context = |session: &str, time: &str, args: Option<Value>| {
        let mut c = json!({
            "session": {"__entity": {"type": "Gateway::Session", "id": session}},
            "time": {"__extn": {"fn": "datetime", "arg": time}},
        });
        if let Some(a) = args {
            c["args"] = a;
        }
        c.to_string()
    };
    let (may, july) = ("2026-05-01T08:00:00.000Z", "2026-07-01T08:00:00.000Z");
    let (key, agent) = (r#"Gateway::ApiKey::"k-1""#, r#"Gateway::Agent::"claude""#);
    let (session, remember, recall) = (
        r#"Gateway::Session::"s-1""#,
        r#"Gateway::Tool::"af_memory_remember""#,
        r#"Gateway::Tool::"af_memory_recall""#,
    );
    let note = json!({"content": "deploys on tuesday", "type": "decision"});
    let feature = json!({"query": "deploys", "workType": "feature"});
    let chore = json!({"query": "deploys", "workType": "chore"});
    // (principal, action, resource, context, allowed, without errors)
    let requests = [
        // Reused: the same session, principal, action and resource.
        (
            agent,
            "view_tool",
            remember,
            context("s-1", may, None),
            true,
            true,
        ),
        (
            agent,
            "view_tool",
            remember,
            context("s-1", july, None),
            true,
            true,
        ),
        // An unparsable time denies with its error, whatever is remembered.
        (
            agent,
            "view_tool",
            remember,
            context("s-1", "not a time", None),
            false,
            false,
        ),
        // Another session (one the snapshot lacks) is decided again.
        (
            agent,
            "view_tool",
            remember,
            context("s-2", may, None),
            false,
            false,
        ),
        // A policy reads the time: never reused.
        (
            key,
            "access_session",
            session,
            context("s-1", may, None),
            true,
            true,
        ),
        (
            key,
            "access_session",
            session,
            context("s-1", july, None),
            false,
            true,
        ),
        // Typed calls: reused while the arguments fit the typed action.
        (
            agent,
            "call_tool",
            remember,
            context("s-1", may, Some(note.clone())),
            true,
            true,
        ),
        (
            agent,
            "call_tool",
            remember,
            context("s-1", july, Some(note)),
            true,
            true,
        ),
        (
            agent,
            "call_tool",
            remember,
            context("s-1", may, Some(json!({"content": 5}))),
            false,
            false,
        ),
        (
            agent,
            "call_tool",
            remember,
            context("s-1", "2026-13-45", Some(json!({"content": "x"}))),
            false,
            false,
        ),
        // A policy reads the arguments: never reused.
        (
            agent,
            "call_tool",
            recall,
            context("s-1", may, Some(feature)),
            true,
            true,
        ),
        (
            agent,
            "call_tool",
            recall,
            context("s-1", may, Some(chore)),
            false,
            true,
        ),
    ];
    // A record's prelude decisions share one parsed context: each context
    // text below is parsed once and shared by every request that has it.
    let mut shared = std::collections::HashMap::new();
    for (principal, action, resource, ctx, allowed, clean) in &requests {
        let request =
            cedargate::policy::recorded::RecordedRequest::parse(principal, action, resource, ctx)
                .unwrap();
        let reusing = bundle.decide_recorded_reusing(&request, &entities);
        let alone = bundle.decide_recorded(&request, entities.entities());
        let what = format!("{action} {resource} {ctx}");
        assert_eq!(
            (reusing.allowed, &reusing.reasons, &reusing.errors),
            (alone.allowed, &alone.reasons, &alone.errors),
            "{what}"
        );
        let context = shared
            .entry(ctx.clone())
            .or_insert_with(|| cedargate::policy::recorded::SharedContext::parse(ctx).unwrap());
        let sharing = context
            .decide(
                &bundle,
                (request.principal.clone(), action, request.resource.clone()),
                &entities,
            )
            .unwrap();
        assert_eq!(
            (sharing.allowed, &sharing.reasons, &sharing.errors),
            (alone.allowed, &alone.reasons, &alone.errors),
            "{what}, its context shared"
        );
        // The pairs do differ when decided alone, so a loose key would show.
        assert_eq!(
            (alone.allowed, alone.errors.is_empty()),
            (*allowed, *clean),
            "{what}: {:?}",
            alone.errors
        );
    }
    // The memo was used: view_tool and the typed call_tool of the
    // remember tool.
    assert_eq!(entities.remembered(), 2);
}

/// The entity slice of session `s-1` of agent `claude` (org `acme`, its
/// project with memory enabled) with the two memory tools.
fn session_slice_json(
    bundle: &cedargate::policy::PolicyBundle,
    catalog: &cedargate::tools::Catalog,
) -> String {
    use cedargate::policy::entities::{
        AgentFacts, KeyFacts, OrgFacts, ProjectFacts, SessionFacts, session_slice,
    };
    let (entitlements, roles) = (Vec::new(), Vec::new());
    let facts = SessionFacts {
        session_id: "s-1",
        org: OrgFacts {
            id: "acme",
            plan: "team",
            entitlements: &entitlements,
        },
        project: ProjectFacts {
            org_id: "acme",
            id: "web",
            memory_enabled: true,
            graph_enabled: false,
        },
        agent: AgentFacts {
            org_id: "acme",
            id: "claude",
            name: "Claude",
            roles: &roles,
        },
        key: KeyFacts {
            org_id: "acme",
            id: "k-1",
            label: "daemon",
        },
    };
    let tools: Vec<_> = catalog
        .all()
        .iter()
        .filter(|t| t.name == "af_memory_remember" || t.name == "af_memory_recall")
        .map(|t| t.entity())
        .collect();
    assert_eq!(tools.len(), 2);
    session_slice(bundle, &facts, &tools)
        .unwrap()
        .json
        .to_string()
}

/// Within one session, a typed tool call's verdict is remembered only
/// while no policy of its action reads `context.args`: a forbid on the
/// arguments decides every call by its own arguments, in any order, and
/// a tool whose policies read only the session keeps its verdict while
/// each call still records its own arguments.
#[tokio::test]
async fn a_policy_on_the_arguments_decides_every_call_of_a_session() {
    let g = TestGateway::start_with_policy(
        "args.cedar",
        "@id(\"no-secrets-in-memory\")\nforbid (principal, action == Gateway::Action::\"af_memory_remember\", resource)\nwhen { context.args.content like \"*password*\" };\n",
    )
    .await;
    let t = g.tenant("acme").await;
    let remember = |content: &'static str| json!({ "content": content });
    for (content, allowed) in [
        ("deploys on tuesday", true),
        ("the password is hunter2", false),
        ("rollbacks on friday", true),
        ("password reset flow", false),
        ("password again", false),
        ("all clear", true),
    ] {
        let body = g
            .call_tool(&t, "af_memory_remember", remember(content))
            .await;
        if allowed {
            assert_eq!(body["result"]["isError"], false, "{content}: {body}");
        } else {
            assert_eq!(body["error"]["code"], -32003, "{content}: {body}");
        }
    }
    assert_eq!(g.count("observations").await, 3);
    // The recall's policies read only the session: the same verdict each
    // time, every record with its own arguments.
    for query in ["deploys", "rollbacks", "clear"] {
        let body = g
            .call_tool(
                &t,
                "af_memory_recall",
                json!({"query": query, "workType": "chore"}),
            )
            .await;
        assert_eq!(body["result"]["isError"], false, "{query}: {body}");
    }
    let recalls: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| {
            d.record.resource.contains("af_memory_recall") && d.record.action == "call_tool"
        })
        .collect();
    assert_eq!(recalls.len(), 3);
    for (d, query) in recalls.iter().zip(["deploys", "rollbacks", "clear"]) {
        assert_eq!(d.record.decision, "allow");
        let context: Value = serde_json::from_str(&d.record.context).unwrap();
        assert_eq!(context["args"]["query"], query, "{}", d.record.context);
    }
}
