//! Prometheus metrics, served as OpenMetrics text on `GET /metrics`:
//! decisions by action and outcome, decision latency, policy reloads by
//! result, the active policy set, shadow-mode divergences, the free space
//! of the trail's disk and its guard, trail archives by result, what the
//! durable write queue holds (records and bytes, now and at most), the
//! `tools/list` answers that repeated a recorded listing, and per
//! upstream MCP server its requests by outcome, their latency and its
//! health (labelled `upstream="<org>/<slug>"`, bounded by the registry),
//! and per A2A peer the bridged calls its telemetry rows hold
//! (`peer="<org>/<slug>"`, read from the store at each scrape), and the
//! spans of trace export (`[telemetry]`): exported, and dropped by reason
//! (`queue_full`, `export_failed`), and the AuthZEN decisions and search
//! pages of each decision application (`application="<app>"`, bounded by
//! its folders), counted once recorded.
//!
//! **Architecture Invariant:** metrics only count; nothing reads them back
//! to decide anything.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `upstream` (`<org>/<slug>`), `outcome` (`ok`, `tool_error`, or the
/// failure class: `timeout`, `transport`, `invalid-response`,
/// `upstream-error`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamCallLabels {
    pub upstream: String,
    pub method: String,
    pub outcome: String,
}

/// `upstream` (`<org>/<slug>`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    pub upstream: String,
}

/// The per-upstream families; the upstream runtime holds a clone (the
/// families share their series) and counts every request it sends.
#[derive(Debug, Clone)]
pub struct UpstreamMetrics {
    /// Requests sent upstream (`tools/call`, `resources/read`, …) by outcome.
    pub requests: Family<UpstreamCallLabels, Counter>,
    /// Time from the request's slot to its answer.
    pub seconds: Family<UpstreamLabel, Histogram>,
    /// 1 while the registry says healthy, 0 otherwise (set at each scrape).
    pub healthy: Family<UpstreamLabel, Gauge>,
}

impl UpstreamMetrics {
    /// Counts one request to `upstream` and its duration.
    pub fn request(&self, upstream: &str, method: &str, outcome: &str, seconds: f64) {
        self.requests
            .get_or_create(&UpstreamCallLabels {
                upstream: upstream.to_string(),
                method: method.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.seconds
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_string(),
            })
            .observe(seconds);
    }

    /// Sets every registered upstream's health (`(upstream, healthy)`),
    /// forgetting the ones no longer registered.
    pub fn health(&self, upstreams: &[(String, bool)]) {
        self.healthy.clear();
        for (upstream, healthy) in upstreams {
            self.healthy
                .get_or_create(&UpstreamLabel {
                    upstream: upstream.clone(),
                })
                .set(i64::from(*healthy));
        }
    }
}

fn upstream_histogram() -> Histogram {
    // 100 µs … ~52 s.
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

/// `action`, `outcome` (`allow` / `deny`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// Action name.
    pub action: String,
    /// `allow` or `deny`.
    pub outcome: String,
}

/// `application`, `outcome` (`allow` / `deny`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplicationLabels {
    /// The decision application.
    pub application: String,
    /// `allow` or `deny`.
    pub outcome: String,
}

/// `application`, `kind` (`subject`, `resource`, `action`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SearchLabels {
    /// The decision application.
    pub application: String,
    /// What was searched.
    pub kind: String,
}

/// `action`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    /// Action name.
    pub action: String,
}

/// `result` (`applied`, `unchanged`, `rejected`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Reload result.
    pub result: String,
}

/// `hash`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HashLabel {
    /// Policy-set hash.
    pub hash: String,
}

/// `action`, `flip` (`allow_to_deny` / `deny_to_allow`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlipLabels {
    /// Action name.
    pub action: String,
    /// Direction of the flip.
    pub flip: String,
}

/// `unit` (`records` / `bytes`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// What is measured.
    pub unit: String,
}

/// `reason` a span was not exported: `queue_full`, `export_failed`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabel {
    pub reason: String,
}

/// The counts of trace export; the exporter holds a clone (the series are
/// shared).
#[derive(Debug, Clone, Default)]
pub struct TraceMetrics {
    /// Spans a collector accepted.
    pub exported_spans: Counter,
    /// Spans dropped, by reason.
    pub dropped_spans: Family<DropLabel, Counter>,
}

impl TraceMetrics {
    /// Counts `n` spans exported.
    pub fn exported(&self, n: usize) {
        self.exported_spans.inc_by(n as u64);
    }

    /// Counts `n` spans dropped for `reason`.
    pub fn dropped(&self, reason: &str, n: usize) {
        self.dropped_spans
            .get_or_create(&DropLabel {
                reason: reason.to_string(),
            })
            .inc_by(n as u64);
    }
}

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Decisions made.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Time spent deciding (Cedar evaluation plus request building).
    pub decision_seconds: Family<ActionLabel, Histogram>,
    /// Reload attempts.
    pub reloads: Family<ResultLabel, Counter>,
    /// 1 for the active policy set's hash.
    pub policy_info: Family<HashLabel, Gauge>,
    /// Unix time the active set was loaded.
    pub policy_loaded: Gauge,
    /// Decisions also evaluated by a shadow candidate.
    pub shadow_decisions: Counter,
    /// Shadow decisions that differed from the live one.
    pub shadow_divergences: Family<FlipLabels, Counter>,
    /// Divergences that could not be queued for storage.
    pub shadow_dropped: Counter,
    /// Free bytes on the trail's filesystem (SQLite), at the guard's last
    /// look; 0 when none is watched (PostgreSQL).
    pub disk_free: Gauge,
    /// The guard's minimum (`database.min_free_bytes`; 0: off).
    pub disk_min_free: Gauge,
    /// 1 while the guard refuses trail writes.
    pub disk_guard_tripped: Gauge,
    /// Retention archives by result (`archived`, `nothing`, `failed`).
    pub archives: Family<ResultLabel, Counter>,
    /// `tools/list` answers not recorded again: each repeated its
    /// session's last recorded listing (`audit.listing_record_secs`).
    pub listings_repeated: Counter,
    /// Write queue: records and bytes held now, at most since start, and
    /// the bounds (`limits.write_queue_records|bytes`), set at each scrape.
    write_queue: [Family<QueueLabel, Gauge>; 3],
    /// SQLite reads waiting for a read thread now and at most since start,
    /// set at each scrape.
    read_queue: [Gauge; 2],
    /// Per upstream MCP server (cloned into the upstream runtime).
    pub upstreams: UpstreamMetrics,
    /// Trace export (cloned into the exporter).
    pub traces: TraceMetrics,
    /// Recorded AuthZEN decisions, per decision application and outcome.
    pub application_decisions: Family<ApplicationLabels, Counter>,
    /// Recorded AuthZEN search pages, per decision application and kind.
    pub application_searches: Family<SearchLabels, Counter>,
    /// Per A2A peer, set at each scrape.
    peers: PeerMetrics,
    active_hash: Mutex<Option<String>>,
    /// The decision metrics' series, one entry per action seen: counting a
    /// decision then finds them without building, hashing and dropping
    /// three label strings (every request makes several decisions).
    decision_series: std::sync::RwLock<Vec<DecisionSeries>>,
}

/// One action's decision series (each shares its value with the family's).
#[derive(Debug)]
struct DecisionSeries {
    action: &'static str,
    allow: Counter,
    deny: Counter,
    seconds: Histogram,
}

fn latency_histogram() -> Histogram {
    // 1 µs … ~0.5 s.
    Histogram::new(exponential_buckets(1e-6, 2.0, 20))
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cedargate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Cedar decisions by action and outcome",
            decisions.clone(),
        );
        let decision_seconds = Family::<ActionLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "decision_duration_seconds",
            "Time to build and evaluate one Cedar request",
            decision_seconds.clone(),
        );
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "policy_reloads",
            "Policy reload attempts by result (applied, unchanged, rejected)",
            reloads.clone(),
        );
        let policy_info = Family::<HashLabel, Gauge>::default();
        registry.register(
            "policy_set_info",
            "The active policy set (value 1, labelled by its hash)",
            policy_info.clone(),
        );
        let policy_loaded = Gauge::default();
        registry.register(
            "policy_set_loaded_timestamp_seconds",
            "When the active policy set was loaded (Unix time)",
            policy_loaded.clone(),
        );
        let shadow_decisions = Counter::default();
        registry.register(
            "shadow_decisions",
            "Decisions also evaluated by the shadow candidate set",
            shadow_decisions.clone(),
        );
        let shadow_divergences = Family::<FlipLabels, Counter>::default();
        registry.register(
            "shadow_divergences",
            "Shadow decisions that differed from the live decision",
            shadow_divergences.clone(),
        );
        let shadow_dropped = Counter::default();
        registry.register(
            "shadow_divergences_dropped",
            "Shadow divergences counted but not stored (write queue full)",
            shadow_dropped.clone(),
        );
        let (disk_free, disk_min_free, disk_guard_tripped) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "trail_disk_free_bytes",
            "Free bytes on the filesystem of the SQLite database at the last look",
            disk_free.clone(),
        );
        registry.register(
            "trail_disk_min_free_bytes",
            "Free bytes the disk guard requires (0: off)",
            disk_min_free.clone(),
        );
        registry.register(
            "trail_disk_guard_tripped",
            "1 while requests that would write the trail are refused for lack of disk space",
            disk_guard_tripped.clone(),
        );
        let archives = Family::<ResultLabel, Counter>::default();
        registry.register(
            "trail_archives",
            "Retention archives run by this instance, by result (archived, nothing, failed)",
            archives.clone(),
        );
        let listings_repeated = Counter::default();
        registry.register(
            "listings_repeated",
            "tools/list answers not recorded again: each repeated its session's last recorded listing",
            listings_repeated.clone(),
        );
        let write_queue = Family::<QueueLabel, Gauge>::default();
        registry.register(
            "write_queue_queued",
            "Records and bytes held by the durable write queue (queued or being committed)",
            write_queue.clone(),
        );
        let write_queue_peak = Family::<QueueLabel, Gauge>::default();
        registry.register(
            "write_queue_peak",
            "Most records and bytes the durable write queue held at once since start",
            write_queue_peak.clone(),
        );
        let write_queue_limit = Family::<QueueLabel, Gauge>::default();
        registry.register(
            "write_queue_limit",
            "Bounds of the durable write queue (a single larger job passes alone)",
            write_queue_limit.clone(),
        );
        let read_queue = [Gauge::default(), Gauge::default()];
        registry.register(
            "read_queue_waiting",
            "SQLite reads waiting for one of the read threads (0 on PostgreSQL)",
            read_queue[0].clone(),
        );
        registry.register(
            "read_queue_peak",
            "Most SQLite reads waiting for a read thread at once since start",
            read_queue[1].clone(),
        );
        let upstreams = UpstreamMetrics {
            requests: Family::default(),
            seconds: Family::new_with_constructor(upstream_histogram as fn() -> Histogram),
            healthy: Family::default(),
        };
        registry.register(
            "upstream_requests",
            "Requests sent to upstream MCP servers, by upstream, method and outcome",
            upstreams.requests.clone(),
        );
        registry.register(
            "upstream_request_duration_seconds",
            "Time an upstream MCP server took to answer a request (slot wait included)",
            upstreams.seconds.clone(),
        );
        registry.register(
            "upstream_healthy",
            "1 while the registry says the upstream MCP server is healthy, else 0",
            upstreams.healthy.clone(),
        );
        let peers = PeerMetrics::registered(&mut registry);
        let traces = TraceMetrics::default();
        registry.register(
            "trace_spans_exported",
            "Spans a trace collector accepted",
            traces.exported_spans.clone(),
        );
        registry.register(
            "trace_spans_dropped",
            "Spans not exported: the export queue was full, or their export failed or timed out",
            traces.dropped_spans.clone(),
        );
        let application_decisions = Family::<ApplicationLabels, Counter>::default();
        registry.register(
            "application_decisions",
            "AuthZEN decisions of the decision applications, recorded, by application and outcome",
            application_decisions.clone(),
        );
        let application_searches = Family::<SearchLabels, Counter>::default();
        registry.register(
            "application_searches",
            "AuthZEN search pages of the decision applications, recorded, by application and kind",
            application_searches.clone(),
        );
        Metrics {
            registry,
            application_decisions,
            application_searches,
            upstreams,
            traces,
            peers,
            disk_free,
            disk_min_free,
            disk_guard_tripped,
            archives,
            listings_repeated,
            write_queue: [write_queue, write_queue_peak, write_queue_limit],
            read_queue,
            decisions,
            decision_seconds,
            reloads,
            policy_info,
            policy_loaded,
            shadow_decisions,
            shadow_divergences,
            shadow_dropped,
            active_hash: Mutex::new(None),
            decision_series: std::sync::RwLock::new(Vec::new()),
        }
    }

    /// Counts one decision.
    pub fn decision(&self, action: &'static str, allowed: bool, seconds: f64) {
        let count = |series: &DecisionSeries| {
            if allowed { &series.allow } else { &series.deny }.inc();
            series.seconds.observe(seconds);
        };
        if let Ok(all) = self.decision_series.read()
            && let Some(series) = all.iter().find(|s| s.action == action)
        {
            return count(series);
        }
        let series = self.new_decision_series(action);
        count(&series);
        if let Ok(mut all) = self.decision_series.write()
            && !all.iter().any(|s| s.action == action)
        {
            all.push(series);
        }
    }

    fn new_decision_series(&self, action: &'static str) -> DecisionSeries {
        let counter = |outcome: &str| {
            self.decisions
                .get_or_create(&DecisionLabels {
                    action: action.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone()
        };
        DecisionSeries {
            action,
            allow: counter("allow"),
            deny: counter("deny"),
            seconds: self
                .decision_seconds
                .get_or_create(&ActionLabel {
                    action: action.to_string(),
                })
                .clone(),
        }
    }

    /// Counts the recorded decisions of one AuthZEN request of
    /// `application`: `allowed` allows and `denied` denies.
    pub fn application_decisions(&self, application: &str, allowed: u64, denied: u64) {
        for (outcome, n) in [("allow", allowed), ("deny", denied)] {
            if n > 0 {
                self.application_decisions
                    .get_or_create(&ApplicationLabels {
                        application: application.to_string(),
                        outcome: outcome.to_string(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts one recorded search page of `application`.
    pub fn application_search(&self, application: &str, kind: &str) {
        self.application_searches
            .get_or_create(&SearchLabels {
                application: application.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts one reload attempt.
    pub fn reload(&self, result: &str) {
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// Marks `hash` as the active set.
    pub fn active_set(&self, hash: &str, loaded_unix: i64) {
        if let Ok(mut active) = self.active_hash.lock() {
            if let Some(old) = active.take() {
                self.policy_info.remove(&HashLabel { hash: old });
            }
            *active = Some(hash.to_string());
        }
        self.policy_info
            .get_or_create(&HashLabel {
                hash: hash.to_string(),
            })
            .set(1);
        self.policy_loaded.set(loaded_unix);
    }

    /// Shows the disk guard's last look.
    pub fn disk_space(&self, status: crate::store::space::SpaceStatus) {
        let clamp = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        // Unwatched (PostgreSQL): no figure rather than a made-up one.
        self.disk_free.set(if status.watched {
            clamp(status.free_bytes)
        } else {
            0
        });
        self.disk_min_free.set(clamp(status.min_free_bytes));
        self.disk_guard_tripped.set(i64::from(status.tripped));
    }

    /// Counts one retention archive.
    pub fn archive(&self, result: &str) {
        self.archives
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// Sets the write queue gauges (before a scrape).
    pub fn write_queue(&self, levels: &crate::store::writer::budget::QueueLevels) {
        let [now, peak, limit] = &self.write_queue;
        let set = |family: &Family<QueueLabel, Gauge>, records: u64, bytes: u64| {
            for (unit, value) in [("records", records), ("bytes", bytes)] {
                family
                    .get_or_create(&QueueLabel { unit: unit.into() })
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
            }
        };
        set(now, levels.records, levels.bytes);
        set(peak, levels.peak_records, levels.peak_bytes);
        set(limit, levels.max_records, levels.max_bytes);
    }

    /// Sets the read queue gauges (before a scrape).
    pub fn read_queue(&self, levels: crate::store::ReadQueueLevels) {
        let [waiting, peak] = &self.read_queue;
        waiting.set(i64::try_from(levels.waiting).unwrap_or(i64::MAX));
        peak.set(i64::try_from(levels.peak).unwrap_or(i64::MAX));
    }

    /// Sets each registered A2A peer's load from its telemetry rows (peers
    /// gone since the last scrape disappear).
    pub fn a2a_peers(&self, load: &[crate::store::a2a_hooks::PeerLoad]) {
        self.peers.set(load);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `peer` (`<org>/<slug>`) and `status` (`running`, `completed`, `failed`,
/// `denied`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerStatusLabels {
    pub peer: String,
    pub status: String,
}

/// `peer` (`<org>/<slug>`) and `direction` (`sent`, `received`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerBytesLabels {
    pub peer: String,
    pub direction: String,
}

/// `peer` (`<org>/<slug>`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    pub peer: String,
}

/// The A2A peers' load over the telemetry rows kept (`[a2a_telemetry]`).
#[derive(Debug)]
struct PeerMetrics {
    calls: Family<PeerStatusLabels, Gauge>,
    bytes: Family<PeerBytesLabels, Gauge>,
    mean_seconds: Family<PeerLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl PeerMetrics {
    fn registered(registry: &mut Registry) -> PeerMetrics {
        let peers = PeerMetrics {
            calls: Family::default(),
            bytes: Family::default(),
            mean_seconds: Family::default(),
        };
        registry.register(
            "a2a_peer_calls",
            "Bridged calls to an A2A peer in the telemetry kept, by status",
            peers.calls.clone(),
        );
        registry.register(
            "a2a_peer_bytes",
            "Bytes the bridged calls to an A2A peer sent and received, in the telemetry kept",
            peers.bytes.clone(),
        );
        registry.register(
            "a2a_peer_mean_duration_seconds",
            "Mean duration of the finished bridged calls to an A2A peer, in the telemetry kept",
            peers.mean_seconds.clone(),
        );
        peers
    }

    fn set(&self, load: &[crate::store::a2a_hooks::PeerLoad]) {
        self.calls.clear();
        self.bytes.clear();
        self.mean_seconds.clear();
        for p in load {
            let peer = format!("{}/{}", p.org_id, p.peer);
            for (status, n) in [
                ("running", p.running),
                ("completed", p.completed),
                ("failed", p.failed),
                ("denied", p.denied),
            ] {
                let labels = PeerStatusLabels {
                    peer: peer.clone(),
                    status: status.into(),
                };
                self.calls.get_or_create(&labels).set(n);
            }
            for (direction, n) in [("sent", p.request_bytes), ("received", p.response_bytes)] {
                let labels = PeerBytesLabels {
                    peer: peer.clone(),
                    direction: direction.into(),
                };
                self.bytes.get_or_create(&labels).set(n);
            }
            let labels = PeerLabel { peer };
            self.mean_seconds
                .get_or_create(&labels)
                .set(p.mean_ms / 1000.0);
        }
    }
}
