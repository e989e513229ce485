//! Knowledge-graph figures on a generated project graph (default 100,000
//! nodes and 300,000 edges), through the real server over loopback:
//! `graph_query` (topK 10, depth 2), `graph_neighbors` (depth 2),
//! `graph_path` (maxDepth 6), Cedar `read_node` filtering of 1,000 nodes
//! in-process, and `graph_ingest` of 1,000 observations.
//!
//! `cargo bench --bench graph`; `GRAPH_NODES`, `GRAPH_EDGES`, `GRAPH_ITERS`
//! scale it. Every figure is printed as p50 / p99 (milliseconds).
//!
//! Without `--bench` (under `cargo test --all-targets`) it exits at once.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::RwLock;

use cedargate::audit::{NodeGuard, NodeRef, Scope};
use cedargate::gateway::{Gateway, SessionView};
use cedargate::graph::embed::LocalEmbedder;
use cedargate::graph::model::ProjectGraph;
use cedargate::graph::pipeline::node_text;
use cedargate::policy::{Kind, PolicyBundle, PreparedContext};
use cedargate::store::WriteOp;
use cedargate::store::graph::{EdgeRow, GraphWrite, NodeRow, Provenance};
use cedargate::store::observations::NewObservation;
use cedargate::tools::GuardFilter;
use serde_json::{Value, json};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num, server};

/// The bench tenant, with the knowledge graph on.
const TENANT: TenantSpec<'static> = TenantSpec {
    graph: true,
    ..TenantSpec::BENCH
};
const ORG: &str = TENANT.org;
const PROJECT: &str = TENANT.project;
const AGENT: &str = TENANT.agent;

const DOMAINS: [&str; 20] = [
    "Billing",
    "Auth",
    "Session",
    "Invoice",
    "Payment",
    "User",
    "Order",
    "Catalog",
    "Search",
    "Shipping",
    "Inventory",
    "Report",
    "Audit",
    "Notification",
    "Profile",
    "Pricing",
    "Ledger",
    "Import",
    "Export",
    "Webhook",
];
const KINDS: [(&str, &str); 10] = [
    ("Service", "Service"),
    ("Controller", "Controller"),
    ("Repository", "Repository"),
    ("Worker", "Worker"),
    ("Client", "Client"),
    ("Cache", "Cache"),
    ("Queue", "Queue"),
    ("Handler", "Handler"),
    ("Gateway", "Gateway"),
    ("DB", "Database"),
];
const RELATIONS: [&str; 8] = [
    "calls",
    "depends_on",
    "reads_from",
    "writes_to",
    "publishes_to",
    "consumes",
    "uses",
    "contains",
];
const QUERIES: [&str; 6] = [
    "How does authentication interact with the user service?",
    "which workers publish invoices to the billing queue",
    "payment gateway retries and ledger writes",
    "session cache invalidation",
    "search catalog repository reads",
    "webhook handler notification delivery",
];

/// A deterministic xorshift generator (no dependency, same graph each run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn name_of(i: usize) -> (String, &'static str) {
    let d = DOMAINS.get(i % DOMAINS.len()).copied().unwrap_or("Misc");
    let (k, t) = KINDS
        .get((i / DOMAINS.len()) % KINDS.len())
        .copied()
        .unwrap_or(("Service", "Service"));
    (format!("{d}{k}{i}"), t)
}

/// `graph_query`'s goal at this size: p50 15 ms up to 100,000 nodes,
/// 20 ms at 1,000,000.
fn query_goal(nodes: usize) -> &'static str {
    if nodes > 100_000 {
        "p50 <= 20 ms"
    } else {
        "p50 <= 15 ms"
    }
}

fn row(label: &str, goal: &str, v: Vec<Duration>) {
    let s = Stats::of(v, Rank::Nearest);
    let (p50, p99, n) = (s.p50 / 1e3, s.p99 / 1e3, s.n);
    println!("{label:<44} p50 {p50:>8.3} ms   p99 {p99:>8.3} ms   n={n:<5} goal: {goal}");
}

/// A `read_node` guard for the bench agent's session.
fn bench_guard<'a>(
    bundle: &'a cedargate::policy::PolicyBundle,
    slice: &'a cedargate::policy::entities::EntitySlice,
    context: &'a cedargate::policy::PreparedContext,
    session_id: &str,
    time: &str,
) -> NodeGuard<'a> {
    NodeGuard::new(
        bundle,
        slice,
        Kind::Agent.uid(AGENT),
        PROJECT,
        context,
        Scope {
            org_id: Some(ORG),
            session_id: Some(session_id),
        },
        time,
    )
}

/// Generates the graph rows: every node embedded by the local embedder,
/// edges between random endpoints.
fn generate(nodes: usize, edges: usize) -> (Vec<NodeRow>, Vec<EdgeRow>) {
    let prov = Provenance {
        observation_id: None,
        session_id: None,
        timestamp: "2026-05-30T14:22:00Z".into(),
    };
    let model = cedargate::graph::embed::LOCAL_MODEL.to_string();
    let node_rows: Vec<NodeRow> = (0..nodes)
        .map(|i| {
            let (name, t) = name_of(i);
            let domain = DOMAINS.get(i % DOMAINS.len()).copied().unwrap_or("Misc");
            let description = format!("{name} is a {t} of the {domain} domain");
            let v = LocalEmbedder::vector(&node_text(&name, t, &description));
            NodeRow {
                id: uuid::Uuid::now_v7().to_string(),
                key: cedargate::graph::resolution_key(&name),
                name,
                node_type: t.into(),
                description,
                provenance: prov.clone(),
                weight: 0.5,
                embedding: Some((model.clone(), v)),
            }
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen = std::collections::HashSet::new();
    let mut edge_rows = Vec::with_capacity(edges);
    while edge_rows.len() < edges {
        let (s, t) = (rng.below(nodes), rng.below(nodes));
        let r = rng.below(RELATIONS.len());
        if s == t || !seen.insert((s, t, r)) {
            continue;
        }
        let (Some(sn), Some(tn)) = (node_rows.get(s), node_rows.get(t)) else {
            continue;
        };
        edge_rows.push(EdgeRow {
            source_id: sn.id.clone(),
            target_id: tn.id.clone(),
            relationship: RELATIONS.get(r).copied().unwrap_or("uses").into(),
            provenance: prov.clone(),
            weight: 0.5,
        });
    }
    (node_rows, edge_rows)
}

struct Client {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Client {
    async fn call(&self, tool: &str, args: Value) -> Res<Value> {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":args}});
        let resp = self
            .http
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body)
            .send()
            .await?;
        let v: Value = resp.json().await?;
        if v.get("error").is_some() {
            return Err(format!("{tool} failed: {v}").into());
        }
        Ok(v["result"]["structuredContent"].clone())
    }

    async fn timed(&self, tool: &str, args: Value) -> Res<(Duration, Value)> {
        let t = Instant::now();
        let v = self.call(tool, args).await?;
        Ok((t.elapsed(), v))
    }
}

/// Realistic notes about generated components (half of them new ones).
fn notes(round: usize, n: usize, nodes: usize) -> Vec<String> {
    let mut rng = Rng(0x5151_0000 + round as u64);
    (0..n)
        .map(|i| {
            let (a, _) = name_of(rng.below(nodes));
            let (b, _) = name_of(rng.below(nodes));
            let fresh = format!("Round{round}Note{i}Service");
            match i % 4 {
                0 => format!("{a} calls {b} to load accounts, and {b} reads from PostgresDB."),
                1 => format!("The {fresh} depends on Redis; it was slow during the deploy."),
                2 => format!("{fresh} publishes to Kafka and {a} consumes from Kafka."),
                _ => {
                    format!("We migrated {b} from MySQL to PostgreSQL; {a} still writes to MySQL.")
                }
            }
        })
        .collect()
}

async fn run() -> Res<()> {
    let n_nodes: usize = env_num("GRAPH_NODES", 100_000);
    let n_edges: usize = env_num("GRAPH_EDGES", 300_000);
    let iters: usize = env_num("GRAPH_ITERS", 200);
    let dir = tempfile::tempdir()?;
    let server = server::start(dir.path().join("data"), |_| {}).await?;
    let gw = Arc::clone(&server.gw);
    let made = tenant::create(&gw, &TENANT).await?;
    let (secret, session_id) = (made.secret, made.session.id);
    println!(
        "graph bench: {n_nodes} nodes, {n_edges} edges, {iters} iterations per figure, {} cores",
        support::cores()
    );
    growth_curve(iters)?;
    let names = load_graph(&gw, n_nodes, n_edges).await?;

    let client = Client {
        http: reqwest::Client::new(),
        url: format!("{}/api/mcp/{session_id}", server.base()),
        key: secret.clone(),
    };
    let first = names.first().cloned().unwrap_or_default();
    let (cold, _) = client
        .timed("graph_neighbors", json!({"entity": first, "depth": 0}))
        .await?;
    println!(
        "first call (loads the in-memory view): {:.2} s",
        cold.as_secs_f64()
    );
    println!();

    let mut rng = Rng(42);
    over_http(&client, &names, &mut rng, iters).await?;
    // Cedar read_node filtering of 1,000 nodes, in-process.
    let reads = Reads::new(&gw, &secret, &session_id).await?;
    let record_bytes = filter_variants(&reads, iters)?;
    filter_breakdown(&reads, iters)?;
    in_process(&reads, &names, &mut rng, iters)?;
    println!("  batched record notes: {record_bytes} bytes for 1,000 decisions");
    ingest(&gw, &client, &session_id, names.len()).await?;

    match server.stop().await {
        support::server::Stopped::Cleanly => {}
        stopped => eprintln!("server stopped {stopped}"),
    }
    Ok(())
}

/// The growth curve, in-process (the graph work of each tool, without HTTP
/// nor Cedar): for each size of `GRAPH_CURVE` (default 10,000, 100,000 and
/// 1,000,000 nodes, three edges per node) the view's build time, the three
/// traversals, and the two seed searches of `graph_query` against their
/// exhaustive references in alternation (same answers asserted), with the
/// ratio of the medians.
fn growth_curve(iters: usize) -> Res<()> {
    let sizes: Vec<usize> = std::env::var("GRAPH_CURVE")
        .unwrap_or_else(|_| "10000,100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    if sizes.is_empty() {
        return Ok(());
    }
    println!("growth curve (in-process, no HTTP nor Cedar; p50 / p99 ms):");
    for n in sizes {
        let (nodes, edges) = generate(n, 3 * n);
        let t = Instant::now();
        let g = ProjectGraph::from_rows(cedargate::graph::embed::LOCAL_MODEL, nodes, edges);
        println!(
            "  {n} nodes, {} edges: view built in {:.2} s",
            g.edge_count(),
            t.elapsed().as_secs_f64()
        );
        curve_point(&g, iters)?;
    }
    println!();
    Ok(())
}

/// The figures of one size of the growth curve.
fn curve_point(g: &ProjectGraph, iters: usize) -> Res<()> {
    use cedargate::graph::model::AdmitAll;
    let model = g.model().to_string();
    let mut rng = Rng(7);
    let [
        mut query,
        mut vec_b,
        mut vec_x,
        mut kw_b,
        mut kw_x,
        mut nb,
        mut pa,
    ] = std::array::from_fn(|_| Vec::new());
    for i in 0..iters {
        let text = QUERIES.get(i % QUERIES.len()).copied().unwrap_or("auth");
        let t = Instant::now();
        let qv = LocalEmbedder::vector(text);
        let terms = cedargate::graph::tokens(text);
        let out = cedargate::graph::pipeline::search(
            g,
            &model,
            &qv,
            &terms,
            10,
            2,
            2000,
            100,
            &mut AdmitAll,
        );
        query.push(t.elapsed());
        std::hint::black_box(out);
        let t = Instant::now();
        let bounded = g.vector_search(&model, &qv, 30);
        vec_b.push(t.elapsed());
        let t = Instant::now();
        let exact = g.vector_search_exhaustive(&model, &qv, 30);
        vec_x.push(t.elapsed());
        if bounded != exact {
            return Err(format!("vector search differs from the exhaustive one: {text}").into());
        }
        let t = Instant::now();
        let bounded = g.keyword_search(&terms, 30);
        kw_b.push(t.elapsed());
        let t = Instant::now();
        let exact = g.keyword_search_exhaustive(&terms, 30);
        kw_x.push(t.elapsed());
        if bounded != exact {
            return Err(format!("keyword search differs from the exhaustive one: {text}").into());
        }
        let n = u32::try_from(g.node_count()).unwrap_or(u32::MAX).max(1);
        let (a, b) = (rng.below(n as usize) as u32, rng.below(n as usize) as u32);
        let t = Instant::now();
        std::hint::black_box(g.neighbors(a, 2, None, 1000, &mut AdmitAll));
        nb.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(g.path(a, b, 6, 20_000, &mut AdmitAll));
        pa.push(t.elapsed());
    }
    let stats = |v: Vec<Duration>| Stats::of(v, Rank::Nearest);
    let line = |label: &str, s: &Stats| {
        println!(
            "    {label:<40} p50 {:>8.3}   p99 {:>8.3}",
            s.p50 / 1e3,
            s.p99 / 1e3
        );
    };
    line("graph_query search (topK 10, depth 2)", &stats(query));
    let (vb, vx) = (stats(vec_b), stats(vec_x));
    line("  vector seeds, bounded (i8 scan)", &vb);
    line("  vector seeds, exhaustive f32 (before)", &vx);
    let (kb, kx) = (stats(kw_b), stats(kw_x));
    line("  keyword seeds, pruned", &kb);
    line("  keyword seeds, exhaustive (before)", &kx);
    println!(
        "    seeds speed-up (exhaustive / new, medians): vector {:.1}x, keyword {:.1}x",
        vx.p50 / vb.p50.max(1e-3),
        kx.p50 / kb.p50.max(1e-3)
    );
    line("graph_neighbors depth 2", &stats(nb));
    line("graph_path maxDepth 6", &stats(pa));
    Ok(())
}

/// Generates the project graph and stores it in one transaction; returns
/// the node names, in order.
async fn load_graph(gw: &Gateway, n_nodes: usize, n_edges: usize) -> Res<Vec<String>> {
    let t = Instant::now();
    let (node_rows, edge_rows) = generate(n_nodes, n_edges);
    println!(
        "generate + embed locally: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let names: Vec<String> = node_rows.iter().map(|n| n.name.clone()).collect();
    let t = Instant::now();
    gw.store
        .writer()
        .submit(vec![WriteOp::Graph(Box::new(GraphWrite::Ingest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            nodes: node_rows,
            edges: edge_rows,
            observations: Vec::new(),
        }))])
        .await?;
    println!(
        "store (one transaction): {:.2} s",
        t.elapsed().as_secs_f64()
    );

    Ok(names)
}

/// `graph_query`, `graph_neighbors` and `graph_path` over HTTP.
async fn over_http(client: &Client, names: &[String], rng: &mut Rng, iters: usize) -> Res<()> {
    // Warm-up.
    for _ in 0..20 {
        let e = names
            .get(rng.below(names.len()))
            .cloned()
            .unwrap_or_default();
        client
            .call("graph_neighbors", json!({"entity": e, "depth": 2}))
            .await?;
    }

    let mut q = Vec::new();
    let mut triplets = 0;
    for i in 0..iters {
        let query = QUERIES.get(i % QUERIES.len()).copied().unwrap_or("auth");
        let (d, v) = client
            .timed(
                "graph_query",
                json!({"query": query, "topK": 10, "neighborhoodDepth": 2}),
            )
            .await?;
        triplets += v["triplets"].as_array().map_or(0, Vec::len);
        q.push(d);
    }
    row(
        "graph_query topK 10 depth 2 (HTTP)",
        query_goal(names.len()),
        q,
    );
    println!("  mean triplets returned: {}", triplets / iters.max(1));

    let mut nb = Vec::new();
    let mut nodes_seen = 0;
    for _ in 0..iters {
        let e = names
            .get(rng.below(names.len()))
            .cloned()
            .unwrap_or_default();
        let (d, v) = client
            .timed("graph_neighbors", json!({"entity": e, "depth": 2}))
            .await?;
        nodes_seen += v["nodes"].as_array().map_or(0, Vec::len);
        nb.push(d);
    }
    row("graph_neighbors depth 2 (HTTP)", "p50 <= 2 ms", nb);
    println!("  mean nodes returned: {}", nodes_seen / iters.max(1));

    let mut pa = Vec::new();
    let mut found = 0;
    for _ in 0..iters {
        let a = names
            .get(rng.below(names.len()))
            .cloned()
            .unwrap_or_default();
        let b = names
            .get(rng.below(names.len()))
            .cloned()
            .unwrap_or_default();
        let (d, v) = client
            .timed(
                "graph_path",
                json!({"fromEntity": a, "toEntity": b, "maxDepth": 6}),
            )
            .await?;
        if !v["path"].is_null() {
            found += 1;
        }
        pa.push(d);
    }
    row("graph_path maxDepth 6 (HTTP)", "p50 <= 10 ms", pa);
    println!("  paths found: {found}/{iters}");

    Ok(())
}

/// What the in-process figures decide with: the bench agent's session as
/// the endpoint sees it, and a sample of 1,000 nodes of the graph.
struct Reads {
    session_id: String,
    bundle: Arc<PolicyBundle>,
    view: Arc<SessionView>,
    time: String,
    context: PreparedContext,
    graph: Arc<RwLock<ProjectGraph>>,
    /// (id, type, name) of every 7th node.
    sample: Vec<(String, String, String)>,
}

impl Reads {
    async fn new(gw: &Gateway, secret: &str, session_id: &str) -> Res<Reads> {
        let presented = cedargate::auth::parse_key(secret).ok_or("bad key")?;
        let key = gw.authenticate(&presented).await?;
        let bundle = gw.pep.current();
        let view = gw.session_view(session_id, &key, &bundle).await?;
        let time = cedargate::ids::now_rfc3339();
        let context = bundle.prepare_session_context(session_id, &time);
        let graph = gw.graphs.view(&gw.store, ORG, PROJECT).await?;
        let sample: Vec<(String, String, String)> = {
            let g = graph.read().map_err(|_| "poisoned")?;
            (0..1000u32)
                .filter_map(|i| g.node(i * 7))
                .map(|n| (n.id.clone(), n.node_type.clone(), n.name.clone()))
                .collect()
        };
        Ok(Reads {
            session_id: session_id.to_string(),
            bundle,
            view,
            time,
            context,
            graph,
            sample,
        })
    }
}

/// The `read_node` filter of the sample under three policy sets; returns
/// the size of the last batched record's notes.
fn filter_variants(r: &Reads, iters: usize) -> Res<usize> {
    let Reads {
        session_id,
        bundle,
        view,
        time,
        context,
        sample,
        ..
    } = r;
    let refs: Vec<NodeRef<'_>> = sample
        .iter()
        .map(|(id, t, n)| NodeRef {
            id,
            node_type: t,
            name: n,
        })
        .collect();
    // The shipped set reads nothing of a node, so the 1,000 nodes share one
    // decision; a forbid reading `resource.type` gives one decision per
    // node type (10 here); one reading `resource.name` (unique per node)
    // makes every node be decided alone.
    let variants = [
        ("shipped policies", None),
        (
            "+ forbid on resource.type",
            Some(
                "@id(\"bench-type\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource)\nwhen { resource.type == \"Secret\" };\n",
            ),
        ),
        (
            "+ forbid on resource.name",
            Some(
                "@id(\"bench-name\")\nforbid (principal, action == Gateway::Action::\"read_node\", resource)\nwhen { resource.name like \"*secret*\" };\n",
            ),
        ),
    ];
    let mut record_bytes = 0;
    for (label, extra) in variants {
        let variant = match extra {
            None => Arc::clone(bundle),
            Some(text) => {
                let mut files = bundle.files.clone();
                files.push(cedargate::policy::PolicyFile {
                    path: "policies/bench-extra.cedar".into(),
                    text: text.into(),
                });
                Arc::new(
                    cedargate::policy::load::bundle_from_sources(
                        &bundle.schema_path,
                        &bundle.schema_text,
                        files,
                    )
                    .map_err(|e| format!("bench policy: {e:?}"))?,
                )
            }
        };
        let mut filt = Vec::new();
        let mut decided = 0;
        for _ in 0..iters.min(100) {
            let t = Instant::now();
            let mut guard = bench_guard(&variant, &view.slice, context, session_id, time);
            let allowed = guard.decide(&refs).into_iter().filter(|a| *a).count();
            decided = guard.cedar_decisions();
            let rec = guard.record();
            filt.push(t.elapsed());
            if allowed != refs.len() {
                return Err("the bench policies must allow the project's nodes".into());
            }
            record_bytes = rec.map_or(0, |r| r.notes.len());
        }
        row(
            &format!("read_node filter of 1,000 nodes + record, {label}"),
            "<= 2 ms",
            filt,
        );
        println!("  Cedar decisions made: {decided}");
    }
    Ok(record_bytes)
}

/// Where the filter's time goes.
fn filter_breakdown(r: &Reads, iters: usize) -> Res<()> {
    let Reads {
        bundle,
        view,
        context,
        sample,
        ..
    } = r;
    // Where the time goes: building the 1,000 node entities, and the
    // decisions themselves (against a single view_tool decision on the
    // session slice as the per-decision baseline on this machine).
    let mut build = Vec::new();
    let mut decide = Vec::new();
    let project = Kind::Project.uid(PROJECT);
    let uids: Vec<cedargate::policy::Uid> = sample
        .iter()
        .map(|(id, _, _)| Kind::GraphNode.uid(id))
        .collect();
    for _ in 0..iters.min(50) {
        let t = Instant::now();
        let list: Vec<cedar_policy::Entity> = sample
            .iter()
            .zip(&uids)
            .filter_map(|((_, ty, name), uid)| {
                cedar_policy::Entity::new(
                    uid.clone().into(),
                    std::collections::HashMap::from([
                        (
                            "type".to_string(),
                            cedar_policy::RestrictedExpression::new_string(ty.clone()),
                        ),
                        (
                            "name".to_string(),
                            cedar_policy::RestrictedExpression::new_string(name.clone()),
                        ),
                    ]),
                    std::collections::HashSet::from([project.clone().into()]),
                )
                .ok()
            })
            .collect();
        let entities = view.slice.entities.clone().add_entities(list, None)?;
        build.push(t.elapsed());
        let t = Instant::now();
        let v = bundle.decide_many(
            &Kind::Agent.uid(AGENT),
            cedargate::policy::Action::ReadNode,
            &uids,
            context,
            &entities,
        );
        decide.push(t.elapsed());
        if v.iter().any(|x| !x.allowed) {
            return Err("unexpected deny".into());
        }
    }
    row("  of which: build 1,000 node entities", "-", build);
    row("  of which: 1,000 read_node decisions", "-", decide);
    let mut single = Vec::new();
    let tool = Kind::Tool.uid("graph_query");
    for _ in 0..2000 {
        let t = Instant::now();
        let v = bundle.decide(
            &Kind::Agent.uid(AGENT),
            cedargate::policy::Action::ViewTool,
            &tool,
            context,
            &view.slice.entities,
        );
        single.push(t.elapsed());
        if !v.allowed {
            return Err("unexpected deny".into());
        }
    }
    row("  baseline: one view_tool decision", "-", single);

    Ok(())
}

/// The HTTP reads again, in-process.
fn in_process(r: &Reads, names: &[String], rng: &mut Rng, iters: usize) -> Res<()> {
    let Reads {
        session_id,
        bundle,
        view,
        time,
        context,
        graph,
        ..
    } = r;
    // The same reads in-process (no HTTP, no durable commit): graph work
    // plus the Cedar read_node filter and its batched record.
    let new_guard = || bench_guard(bundle, &view.slice, context, session_id, time);
    let (mut iq, mut inb, mut ip) = (Vec::new(), Vec::new(), Vec::new());
    let mut decisions = [0usize; 3];
    let mut evaluations = [0usize; 3];
    {
        let g = graph.read().map_err(|_| "poisoned")?;
        for i in 0..iters {
            let query = QUERIES.get(i % QUERIES.len()).copied().unwrap_or("auth");
            let t = Instant::now();
            let qv = LocalEmbedder::vector(query);
            let terms = cedargate::graph::tokens(query);
            let mut f = GuardFilter::new(new_guard());
            let out = cedargate::graph::pipeline::search(
                &g,
                g.model(),
                &qv,
                &terms,
                10,
                2,
                2000,
                100,
                &mut f,
            );
            decisions[0] += f.decided();
            evaluations[0] += f.cedar_decisions();
            let _ = (out, f.record());
            iq.push(t.elapsed());

            let a = g.find(names.get(rng.below(names.len())).map_or("", String::as_str));
            let b = g.find(names.get(rng.below(names.len())).map_or("", String::as_str));
            let (Some(a), Some(b)) = (a, b) else {
                continue;
            };
            let t = Instant::now();
            let mut f = GuardFilter::new(new_guard());
            let out = g.neighbors(a, 2, None, 1000, &mut f);
            decisions[1] += f.decided();
            evaluations[1] += f.cedar_decisions();
            let _ = (out, f.record());
            inb.push(t.elapsed());

            let t = Instant::now();
            let mut f = GuardFilter::new(new_guard());
            let out = g.path(a, b, 6, 20_000, &mut f);
            decisions[2] += f.decided();
            evaluations[2] += f.cedar_decisions();
            let _ = (out, f.record());
            ip.push(t.elapsed());
        }
    }
    row(
        "in-process graph_query topK 10 depth 2",
        query_goal(names.len()),
        iq,
    );
    row("in-process graph_neighbors depth 2", "p50 <= 2 ms", inb);
    row("in-process graph_path maxDepth 6", "p50 <= 10 ms", ip);
    let n = iters.max(1);
    println!(
        "  mean read_node decisions per call: query {}, neighbors {}, path {}",
        decisions[0] / n,
        decisions[1] / n,
        decisions[2] / n
    );
    println!(
        "  mean Cedar evaluations per call: query {}, neighbors {}, path {}",
        evaluations[0] / n,
        evaluations[1] / n,
        evaluations[2] / n
    );

    Ok(())
}

/// `graph_ingest` of 1,000 observations (three rounds of fresh notes).
async fn ingest(gw: &Gateway, client: &Client, session_id: &str, n_names: usize) -> Res<()> {
    let mut ing = Vec::new();
    for round in 0..3 {
        let ops = notes(round, 1000, n_names)
            .into_iter()
            .map(|content| {
                WriteOp::Observation(Box::new(NewObservation {
                    id: uuid::Uuid::now_v7().to_string(),
                    org_id: ORG.into(),
                    project_id: PROJECT.into(),
                    session_id: session_id.to_string(),
                    agent_id: AGENT.into(),
                    content,
                    obs_type: Some("pattern".into()),
                    confidence: None,
                    created_at: cedargate::ids::now_rfc3339(),
                }))
            })
            .collect();
        gw.store.writer().submit(ops).await?;
        let (d, v) = client.timed("graph_ingest", json!({"limit": 1000})).await?;
        if round == 0 {
            println!("  ingest result: {v}");
        }
        ing.push(d);
    }
    row("graph_ingest of 1,000 observations (HTTP)", "<= 5 s", ing);

    Ok(())
}

fn main() -> Res<()> {
    if !support::bench_requested("graph") {
        return Ok(());
    }
    let rt = support::runtime("bench", 2)?;
    rt.block_on(run())
}
