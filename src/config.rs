//! Gateway configuration: a TOML file (optional) with `CEDARGATE_*`
//! environment overrides on top. Every default is usable as is, so
//! `cedargate serve` with no file runs the embedded default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The whole configuration. Environment variables override the file:
/// `CEDARGATE_LISTEN`, `CEDARGATE_DATA_DIR`, `CEDARGATE_ADMIN_TOKEN`,
/// `CEDARGATE_LIMITS__MAX_BODY_BYTES` (nested keys joined by `__`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server binds.
    pub listen: SocketAddr,
    /// Base URL clients use to reach the gateway, for the `mcpUrl` of new
    /// sessions; defaults to `http://{listen}`.
    pub public_url: Option<String>,
    /// Directory holding the SQLite database (by default) and the demo
    /// credentials.
    pub data_dir: PathBuf,
    /// Which database holds the store.
    pub database: DatabaseConfig,
    /// Directory of `.cedar` policy files (read recursively is not done:
    /// only `*.cedar` directly inside).
    pub policies_dir: PathBuf,
    /// The Cedar schema policies are validated against.
    pub schema_file: PathBuf,
    /// Directory of decision applications served over the AuthZEN API, one
    /// folder each (`{pdp_dir}/<app>/`: `schema.cedarschema`,
    /// `policies/*.cedar`, `tests/`, `entities.json`); absent: none.
    pub pdp_dir: PathBuf,
    /// The AuthZEN decision point: its default application and bounds.
    pub pdp: PdpConfig,
    /// `human` (default) or `json` log lines.
    pub log_format: LogFormat,
    /// Bearer token for `/admin/*`. Without one the admin API is not served.
    /// At least 32 characters (checked at start, `auth::check_operator_tokens`).
    pub admin_token: Option<String>,
    /// Read-only token of the web console (`/console`): auditors read the
    /// trail and run replays and what-ifs, never change anything. Without
    /// it and without `admin_token` the console is not served. At least 32
    /// characters, and not the admin token.
    pub auditor_token: Option<String>,
    /// The web console's bounds (sign-in lifetime, replay limits).
    pub console: ConsoleConfig,
    /// Create (once) and print a demo tenant at start-up.
    pub demo_tenant: bool,
    /// Request limits.
    pub limits: Limits,
    /// DNS-rebinding protection, connection timeouts and caps, shutdown.
    pub http: HttpSecurity,
    /// The HTTP+SSE transport of protocol 2024-11-05.
    pub sse: SseConfig,
    /// Token buckets per key, per agent and per org, and the usage
    /// counters policies read as `context.usage`.
    pub rate_limits: RateLimitConfig,
    /// Throttling of wrong admin and auditor tokens and daemon keys.
    pub credential_guesses: CredentialGuessConfig,
    /// Seconds a cached key, session or entity slice may be served after a
    /// change made outside this process (admin API changes invalidate at once).
    pub cache_ttl_secs: u64,
    /// Async worker threads serving requests ([`Config::worker_threads`]);
    /// unset: one fewer than the machine's cores, at least one.
    pub worker_threads: Option<std::num::NonZeroUsize>,
    /// Policy lifecycle: reload on file changes, shadow mode, metrics.
    pub lifecycle: LifecycleConfig,
    /// Proofs about policy sets (`policy diff --prove`, `policy lint
    /// --prove`): the SMT solver and the time they may take.
    pub prove: ProveConfig,
    /// Remote A2A peers: timeouts, concurrency, refresh, size limits.
    pub a2a: A2aConfig,
    /// Background listing of registered upstream MCP servers.
    pub upstream_refresh: UpstreamRefreshConfig,
    /// What one upstream MCP server (and one org's servers) may declare.
    pub upstream_limits: UpstreamLimitsConfig,
    /// Knowledge-graph embeddings.
    pub graph: GraphConfig,
    /// The MCP endpoint's protocol 2026-07-28 settings.
    pub mcp: McpConfig,
    /// Retention of the decision trail (periodic archives; off by default).
    pub audit: AuditConfig,
    /// Signed checkpoints of the decision trail's head.
    pub checkpoints: CheckpointConfig,
    /// `[auth]`: access tokens of identity providers (OAuth 2.1 resource
    /// server); none configured by default.
    pub auth: crate::identity::AuthConfig,
    /// Upstream MCP servers run as child processes over stdio, each for
    /// one org (`[[upstreams]]`); the admin API never declares these.
    pub upstreams: Vec<DeclaredUpstream>,
    /// How long the A2A bridge's telemetry rows are kept.
    pub a2a_telemetry: A2aTelemetryConfig,
    /// `[telemetry]`: OTLP trace export (off unless a collector is named)
    /// and the console's link from a decision to its trace.
    pub telemetry: crate::telemetry::config::TelemetryConfig,
}

/// The A2A bridge's telemetry rows (`[a2a_telemetry]`): task instances,
/// hook events and cost events, one or more per bridged call, read per
/// peer by the console's Remote tools page and `/metrics`. Each instance
/// deletes, every `prune_interval_secs`, the rows older than
/// `retention_hours`, then the oldest beyond `max_rows` in each table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct A2aTelemetryConfig {
    /// Hours a row is kept (at least 1).
    pub retention_hours: u64,
    /// Most rows kept per table (at least 1).
    pub max_rows: u64,
    /// Seconds between two prunes (at least 1).
    pub prune_interval_secs: u64,
}

impl Default for A2aTelemetryConfig {
    fn default() -> Self {
        A2aTelemetryConfig {
            retention_hours: 7 * 24,
            max_rows: 100_000,
            prune_interval_secs: 300,
        }
    }
}

/// One `[[upstreams]]` entry: a stdio MCP server the gateway starts for an
/// org. See `src/upstream/README.md` (Transports, Declared servers). Its
/// `Debug` shows the names of `env`, never the values (they may be secrets).
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeclaredUpstream {
    /// The org whose sessions see its tools.
    pub org: String,
    /// Name; its slug is the Cedar `McpServer` id and the default prefix.
    pub name: String,
    /// The program (looked up on `PATH`).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment, on top of `PATH`, `HOME`, `LANG`, `LC_ALL`, `TZ`
    /// and `TMPDIR` (nothing else of the gateway's environment is passed).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Tool name prefix (default: the slug; `""`: the upstream's names).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Budget of one call, in milliseconds (default 30,000).
    #[serde(default, alias = "timeout_ms")]
    pub timeout_ms: Option<u64>,
    /// Whether tools first seen are offered at once (default true).
    #[serde(default, alias = "approve_new_tools")]
    pub approve_new_tools: Option<bool>,
}

/// Retention of the decision trail (`[audit]`). Off by default: an
/// operator chooses how long records stay in the database and where the
/// archives go. When on, each instance tries an archive every
/// `archive_interval_secs`; the `trail-archive` lease in the database lets
/// one instance at a time run it, so instances sharing a database may all
/// have it on (their `archive_dir` should then be shared storage, or each
/// keeps the archives it wrote). See `src/audit/README.md`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Days of records kept in the database; older ones are archived to
    /// `archive_dir` (verified, exported, pruned behind an anchor), exactly
    /// as `cedargate audit archive` does. 0: off.
    pub retention_days: u64,
    /// Directory the archive files are written to (required when
    /// `retention_days` is set; created if missing).
    pub archive_dir: Option<PathBuf>,
    /// `jsonl` (verifiable on its own) or `ocsf`.
    pub archive_format: crate::audit::export::Format,
    /// Seconds between two archive attempts (the first runs at start-up).
    pub archive_interval_secs: u64,
    /// A session's `tools/list` that repeats its last recorded listing
    /// exactly (same policies, entities and verdicts; no policy reads the
    /// time) is recorded at most once per this many seconds; 0 records
    /// every listing. See `src/audit/repeated_listing.rs`.
    pub listing_record_secs: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            retention_days: 0,
            archive_dir: None,
            archive_format: crate::audit::export::Format::Jsonl,
            archive_interval_secs: 3600,
            listing_record_secs: 60,
        }
    }
}

/// Signed checkpoints of the decision trail (`[checkpoints]`): the chain
/// head signed with an Ed25519 key kept outside the database. See
/// `src/audit/checkpoint.rs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// The signing key's file (mode 0600; `serve` creates it when absent).
    /// Unset: `{data_dir}/checkpoint.key`.
    pub key_file: Option<PathBuf>,
    /// The name (and checkpoint origin) given to a key `serve` creates; a
    /// key already made keeps its own. No spaces, no `+`.
    pub key_name: String,
    /// Seconds between two checkpoints; one is signed only when the head
    /// moved. Records after the newest checkpoint are not yet covered.
    pub interval_secs: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            key_file: None,
            key_name: "cedargate".into(),
            interval_secs: 60,
        }
    }
}

/// The web console (`[console]`). See `src/console/README.md`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Seconds a console sign-in lasts (then the token is asked again).
    pub session_ttl_secs: u64,
    /// Most records one console replay may cover; a wider window is
    /// refused before anything runs.
    pub replay_max_records: u64,
    /// Longest time window of one console replay, in hours.
    pub replay_max_window_hours: u64,
    /// Console replays running at once (gateway-wide).
    pub replay_jobs: usize,
    /// Directory whose subdirectories are the candidate policy sets the
    /// console offers (default `{data_dir}/candidates`).
    pub candidates_dir: Option<PathBuf>,
    /// Whether the admin and auditor tokens sign in to the console (the
    /// token form). `false`: the form is gone and a token sign-in is
    /// refused (403), so only `[console.oidc]` signs people in; the admin
    /// token still opens the admin API.
    pub shared_tokens: bool,
    /// Sign-in with an OpenID provider (`[console.oidc]`); off by default.
    pub oidc: Option<crate::console::oidc::config::OidcConfig>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            session_ttl_secs: 8 * 3600,
            replay_max_records: 1_000_000,
            replay_max_window_hours: 31 * 24,
            replay_jobs: 2,
            candidates_dir: None,
            shared_tokens: true,
            oidc: None,
        }
    }
}

/// Protocol 2026-07-28 on the MCP endpoint (`[mcp]`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Client capabilities (top-level keys of `clientCapabilities`, e.g.
    /// `elicitation`) each method requires; a 2026-07-28 request that does
    /// not declare them answers 400 with -32021. Empty by default: the
    /// gateway never asks a client for input, so no method needs one; an
    /// operator may still require, say, that tool calls come from clients
    /// able to ask their user (`{"tools/call" = ["elicitation"]}`).
    pub required_client_capabilities: std::collections::BTreeMap<String, Vec<String>>,
}

/// The store's database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://path` or `postgres://user@host:port/db[?schema=name]`.
    /// Unset: `sqlite://{data_dir}/cedargate.db`.
    pub url: Option<String>,
    /// PostgreSQL: pooled connections per instance (the writer has its own).
    pub pool_size: u32,
    /// PostgreSQL: how long a request waits for a pooled connection before
    /// it is answered "unavailable".
    pub acquire_timeout_ms: u64,
    /// Seconds between an instance's heartbeats in `gateway_instances`;
    /// each beat also counts the live instances that share the rate limits.
    pub heartbeat_secs: u64,
    /// SQLite: the bound of the write-ahead log, in bytes. It is the
    /// `journal_size_limit`, and a commit that leaves the `-wal` file
    /// larger is followed by a TRUNCATE checkpoint (also run at start-up,
    /// clean shutdown and after an archive). Default 64 MiB.
    pub wal_max_bytes: u64,
    /// SQLite: free bytes the data directory's filesystem must keep.
    /// Below it, requests that would write the decision trail fail closed
    /// (HTTP 507, nothing written) until space is back. 0 turns the guard
    /// off. Default 256 MiB. PostgreSQL: not checked (the database's disk
    /// is the server's; see `src/store/README.md`).
    pub min_free_bytes: u64,
    /// Milliseconds between two looks at the free space (`statvfs`).
    pub free_space_check_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            pool_size: 16,
            acquire_timeout_ms: 3000,
            heartbeat_secs: 5,
            wal_max_bytes: 64 * 1024 * 1024,
            min_free_bytes: 256 * 1024 * 1024,
            free_space_check_ms: 1000,
        }
    }
}

/// How the policy set is reloaded and observed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Reload when a file under `policies_dir` or the schema file changes
    /// (SIGHUP and `POST /admin/policies/reload` always work).
    pub watch: bool,
    /// Quiet period after a file change before reloading, so an editor's
    /// several writes become one reload.
    pub watch_debounce_ms: u64,
    /// A candidate policy directory evaluated beside the active set from
    /// start-up (shadow mode); it decides nothing, divergences are recorded.
    pub shadow_policies_dir: Option<PathBuf>,
    /// Serve Prometheus metrics on `GET /metrics`.
    pub metrics: bool,
    /// Whether a reload proves the candidate against the active set
    /// (`[prove]` names the solver and its limits).
    pub prove: ProveMode,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            watch: true,
            watch_debounce_ms: 250,
            shadow_policies_dir: None,
            metrics: true,
            prove: ProveMode::Off,
        }
    }
}

/// The AuthZEN Authorization API of the decision applications (`[pdp]`).
/// See `src/pdp.rs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PdpConfig {
    /// The application answered at `/access/v1/…` and described by
    /// `/.well-known/authzen-configuration`; unset: those paths answer
    /// 404 and every application is asked at `/pdp/<app>/access/v1/…`.
    pub default_app: Option<String>,
    /// Largest request body, in bytes (larger: HTTP 413).
    pub max_body_bytes: usize,
    /// Most evaluations in one `evaluations` request (more: HTTP 400,
    /// nothing decided). Each is a decision record.
    pub max_evaluations: usize,
    /// Largest `properties` or `context` object of one evaluation, in
    /// bytes of JSON (larger: HTTP 400): what the request adds to an
    /// entity is recorded with each of its decisions.
    pub max_object_bytes: usize,
    /// Longest `type`, `id` or action `name`, in bytes (longer: HTTP 400).
    pub max_name_bytes: usize,
    /// Results in one search page when the request gives no `page.limit`.
    pub search_page: usize,
    /// Largest `page.limit` of a search (more, or 0: HTTP 400).
    pub max_search_page: usize,
    /// Candidates one search page decides at most: a page that reaches it
    /// answers the results found so far with a `next_token` going on from
    /// there, so a search over many entities costs a bounded time per page.
    pub max_search_examined: usize,
    /// Milliseconds one search page may spend deciding candidates (then it
    /// answers as at `max_search_examined`).
    pub search_budget_ms: u64,
    /// Seconds a search's `next_token` stays valid (then: HTTP 400).
    pub page_token_ttl_secs: u64,
}

impl Default for PdpConfig {
    fn default() -> Self {
        PdpConfig {
            default_app: None,
            max_body_bytes: 1024 * 1024,
            max_evaluations: 1_000,
            max_object_bytes: 64 * 1024,
            max_name_bytes: 1024,
            search_page: 100,
            max_search_page: 1_000,
            max_search_examined: 10_000,
            search_budget_ms: 500,
            page_token_ttl_secs: 600,
        }
    }
}

/// What a reload does with a proof of its candidate against the active set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProveMode {
    /// No proof.
    #[default]
    Off,
    /// Activate the candidate, then prove it against the set it replaced
    /// and report the proof (`GET /admin/policies`, the console, the log).
    Report,
    /// Prove first; a candidate that allows a request the active set denies
    /// (or whose proof is not settled) is refused, the refusal recorded in
    /// the trail, until an admin accepts that exact candidate
    /// (`POST /admin/policies/accept`). Needs a solver at start-up.
    RefuseWidening,
}

/// The solver behind the policy proofs (`[prove]`) and their time limits.
/// Proofs never run on the request path: they are commands a security
/// team runs and a reload's gate (`[lifecycle] prove`), seconds rather
/// than microseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ProveConfig {
    /// The cvc5 (1.3 or newer) executable. Unset: `$CVC5`, else
    /// `target/solver/cvc5` beside the running binary's target directory,
    /// else `target/solver/cvc5` under the working directory (where
    /// `bash solver/build.sh` puts it). Never `cvc5` on `PATH`: Debian's is
    /// 1.0.3, too old for the encoding.
    pub solver: Option<PathBuf>,
    /// Time one solver query may take (a request environment needs two to
    /// four); past it the answer is "unknown", never "equivalent".
    pub query_timeout_ms: u64,
    /// Time a whole proof run may take; request environments not reached
    /// by then are reported "unknown".
    pub run_timeout_secs: u64,
}

impl Default for ProveConfig {
    fn default() -> Self {
        Self {
            solver: None,
            query_timeout_ms: 10_000,
            run_timeout_secs: 300,
        }
    }
}

/// Bridge and registry settings (`[a2a]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct A2aConfig {
    /// Wall-clock budget of one outbound call unless the org sets its own
    /// (`PUT /admin/orgs/{org}/a2a-settings {"timeoutMs"}`).
    pub default_timeout_ms: u64,
    /// Most concurrent outbound calls to one peer; more wait (within their
    /// timeout) for a free slot.
    pub max_concurrent_per_peer: usize,
    /// Seconds between background refreshes of every card (0: never).
    pub refresh_interval_secs: u64,
    /// Budget of one card fetch.
    pub card_timeout_ms: u64,
    /// Largest card accepted, in bytes.
    pub max_card_bytes: usize,
    /// Largest peer response accepted, in bytes.
    pub max_response_bytes: usize,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            default_timeout_ms: 30_000,
            max_concurrent_per_peer: 32,
            refresh_interval_secs: 300,
            card_timeout_ms: 5_000,
            max_card_bytes: 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Background listing of registered upstream MCP servers
/// (`[upstream_refresh]`): a changed tool definition is held without an
/// operator asking.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamRefreshConfig {
    /// Seconds between background listings of every registered server
    /// (0: never; `POST …/refresh` and `list_changed` still list).
    pub interval_secs: u64,
    /// After an upstream's `notifications/tools/list_changed`, how long
    /// further ones are gathered into the same listing.
    pub list_changed_debounce_ms: u64,
}

impl Default for UpstreamRefreshConfig {
    fn default() -> Self {
        UpstreamRefreshConfig {
            interval_secs: 300,
            list_changed_debounce_ms: 500,
        }
    }
}

/// What upstream MCP servers may declare (`[upstream_limits]`): a listing
/// over a bound is refused (nothing of it is stored; the server shows
/// `invalid` with the reason) and recorded in the trail. Every declared
/// definition is kept in memory per org, hashed, typed into the policy
/// schema and sent in `tools/list`, so its size is the gateway's cost.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamLimitsConfig {
    /// Tools one server may list (1,000: well above the largest real
    /// servers, a few hundred tools; 3,000 made each reload take 11 s).
    pub max_tools_per_server: usize,
    /// Bytes of one tool definition as listed (its JSON: name,
    /// description, `inputSchema`, annotations). 64 KiB holds any real
    /// schema with room; a bigger one is a description used as payload.
    pub max_definition_bytes: usize,
    /// Bytes of every definition of one org's servers together, held ones
    /// included (8 MiB: a thousand tools of about 8 KiB; an agent's
    /// `tools/list` carries the org's tools, so this bounds it).
    pub max_org_declared_bytes: usize,
}

impl Default for UpstreamLimitsConfig {
    fn default() -> Self {
        UpstreamLimitsConfig {
            max_tools_per_server: 1_000,
            max_definition_bytes: 64 * 1024,
            max_org_declared_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Where knowledge-graph embeddings come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GraphConfig {
    /// Full URL of an OpenAI-compatible embeddings endpoint (e.g.
    /// `https://api.openai.com/v1/embeddings`). Unset: the built-in local
    /// embedder, which needs no network.
    pub embedding_url: Option<String>,
    /// Model name sent to the endpoint.
    pub embedding_model: String,
    /// Bearer key for the endpoint (prefer `CEDARGATE_GRAPH__EMBEDDING_API_KEY`).
    pub embedding_api_key: Option<String>,
    /// Timeout of one embeddings request, in seconds.
    pub embedding_timeout_secs: u64,
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self {
            embedding_url: None,
            embedding_model: "text-embedding-3-small".into(),
            embedding_api_key: None,
            embedding_timeout_secs: 10,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines for a terminal.
    Human,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Bounds on what one HTTP request may carry (ARCHITECTURE.md, invariant
/// 4, "Bounded everything").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest request body, in bytes (larger: HTTP 413).
    pub max_body_bytes: usize,
    /// Most requests in one JSON-RPC batch.
    pub max_batch_len: usize,
    /// Deepest JSON nesting accepted in a body.
    pub max_json_depth: usize,
    /// Capacity of the durable write queue, in jobs (a request's writes
    /// are one job); callers wait when it is full.
    pub write_queue: usize,
    /// Records (rows to write: decision records, observations, graph
    /// rows) the queued jobs may hold at once; a caller waits until its
    /// job fits. A job larger than this waits for an empty queue and then
    /// passes alone. Default 32 768.
    pub write_queue_records: usize,
    /// Bytes (estimated in memory) the queued jobs may hold at once, with
    /// the same rule. Default 32 MiB: with the records bound, the queue
    /// holds tens of MB at most (a decision record is about 1 KB).
    pub write_queue_bytes: usize,
    /// Most writes committed in one SQLite transaction (group commit).
    pub group_commit_max: usize,
    /// Microseconds a durable group commit waits for more tool calls
    /// when at least `commit_siblings` are in flight (one sync and one
    /// write of the hot pages then serve all of them); 0 turns it off. A
    /// lone call never waits. Default 150; at most 10 000 (10 ms) is
    /// honoured.
    pub commit_delay_us: u64,
    /// Tool calls in flight before a commit waits for them. Default 4.
    pub commit_siblings: usize,
}

/// The HTTP server (`[http]`): which `Origin` and `Host` headers the MCP
/// endpoint accepts, and how long and how many connections it keeps.
///
/// Every bound has a default safe on a public port: a client that is slow
/// on purpose (slowloris) or silent holds a connection, a task and a file
/// descriptor, so none may hold them for long or in great number.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSecurity {
    /// Allowed `Origin` values (scheme://host, any port). A request without
    /// `Origin` (a non-browser client) is accepted. `*` allows any.
    pub allowed_origins: Vec<String>,
    /// Allowed `Host` header names (any port). `*` allows any.
    pub allowed_hosts: Vec<String>,
    /// Milliseconds a connection waiting for a request (just accepted, or
    /// after its previous response) has to deliver that request's complete
    /// headers; then it is closed without an answer (HTTP/1). Default
    /// 10 000: a real client sends its headers in one packet, so this only
    /// ever cuts off slow-header (slowloris) clients.
    pub header_read_timeout_ms: u64,
    /// Milliseconds a request body may take from the moment it is read;
    /// then the request is answered 408 and the connection closed. Default
    /// 30 000: a body is at most `limits.max_body_bytes` (1 MiB), which a
    /// slow link still sends well within it.
    pub body_read_timeout_ms: u64,
    /// Milliseconds a body may stall (no byte arriving) before it is
    /// complete; then it is answered 400 as incomplete, which is how a body
    /// shorter than its `Content-Length` is answered when its client then
    /// waits. Default 5 000: a live client never pauses that long inside
    /// one small JSON body.
    pub body_stall_timeout_ms: u64,
    /// Milliseconds a connection may stay silent in both directions before
    /// it is closed: at once between requests, after its response when one
    /// is being answered. Default 5 000, as in common servers' keep-alive:
    /// clients reconnect cheaply, and an idle connection holds a file
    /// descriptor. (On HTTP/1 the header timer also runs while a connection
    /// waits between requests, so the shorter of the two applies there.)
    pub idle_timeout_ms: u64,
    /// Set `TCP_NODELAY` on accepted connections (default true): answers
    /// are written whole, so Nagle's algorithm would only delay them.
    pub tcp_nodelay: bool,
    /// Most connections open at once. One over it is closed as soon as it
    /// is accepted, without an answer (refused rather than queued: a queue
    /// would hold the same file descriptors the cap protects). Default
    /// 1024: keep it under the process's open-file limit (`ulimit -n`)
    /// minus what the store needs.
    pub max_connections: usize,
    /// Most connections one client IP address may hold open at once; more
    /// are refused the same way. Default 256, so one client cannot take the
    /// whole of `max_connections`.
    pub max_connections_per_ip: usize,
    /// Seconds shutdown (SIGTERM, SIGINT) waits for in-flight requests
    /// after it stops accepting; then the remaining connections are closed,
    /// the trail is flushed and the process exits 0. Default 10: longer
    /// than a normal call, shorter than the usual 30 s before an
    /// orchestrator kills the process.
    pub shutdown_grace_secs: u64,
}

/// Streams of the HTTP+SSE transport (protocol 2024-11-05). An open stream
/// holds a connection and a task, so each key may hold only a few.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SseConfig {
    /// Seconds between keep-alive comments on an idle stream (they keep
    /// proxies from closing it and reveal a client that went away).
    pub keepalive_secs: u64,
    /// Most streams one key may hold open at once (more: HTTP 429).
    pub max_streams_per_key: usize,
    /// Most POSTed messages of one stream being answered at once; further
    /// POSTs wait for a slot before they are accepted.
    pub max_in_flight_per_stream: usize,
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            keepalive_secs: 15,
            max_streams_per_key: 8,
            max_in_flight_per_stream: 16,
        }
    }
}

/// One token bucket: `per_second` tokens flow in, at most `burst` are held.
/// A request spends one token per unit of work (see `src/rate_limits.rs`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    /// Tokens added per second (at least 1).
    pub per_second: u32,
    /// Most tokens held, so the largest burst (at least 1).
    pub burst: u32,
}

/// Per-tenant rate limits (`[rate_limits]`). A request costs its work: one
/// token per JSON-RPC element, and a `tools/list` one per visibility
/// decision it makes. Each org can override any bucket
/// (`PUT /admin/orgs/{org}/rate-limits`, `cedargate org rate-limits set`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Apply the buckets (the usage counters work either way).
    pub enabled: bool,
    /// The bucket of each API key.
    pub key: Bucket,
    /// The bucket of each agent (all its sessions and keys).
    pub agent: Bucket,
    /// The bucket of each org (all its agents and keys).
    pub org: Bucket,
    /// Seconds during which further refusals of one limited subject are
    /// not recorded again: the trail gets one record per subject and window.
    pub refusal_record_secs: u64,
    /// Most subjects whose recent calls are counted for `context.usage`
    /// (per instance; the least recently used are forgotten first).
    pub usage_max_entries: u64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            key: Bucket {
                per_second: 200,
                burst: 1000,
            },
            agent: Bucket {
                per_second: 200,
                burst: 1000,
            },
            org: Bucket {
                per_second: 1000,
                burst: 5000,
            },
            refusal_record_secs: 60,
            usage_max_entries: 100_000,
        }
    }
}

/// Throttling of wrong credentials (`[credential_guesses]`): a wrong
/// admin or auditor token (admin API, console sign-in) or daemon key (MCP
/// endpoints, `POST /api/sessions`) spends one token of its client
/// address's bucket and one of the bucket of all addresses together; a
/// correct one spends nothing. Operator tokens and daemon keys have
/// buckets of their own. See `src/guesses.rs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialGuessConfig {
    /// Throttle at all.
    pub enabled: bool,
    /// Wrong credentials one client address may present in a row.
    pub per_address_burst: u32,
    /// Wrong credentials per minute one client address regains.
    pub per_address_per_minute: u32,
    /// Wrong credentials all addresses together may present in a row.
    pub total_burst: u32,
    /// Wrong credentials per minute all addresses together regain.
    pub total_per_minute: u32,
    /// A throttled burst ends once none of its attempts was refused for
    /// this many seconds; each burst is recorded in the trail once.
    pub burst_quiet_secs: u64,
    /// An address that presented a correct credential within this many
    /// seconds is not refused by the total bound (its own bound holds).
    pub known_address_secs: u64,
}

impl Default for CredentialGuessConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            per_address_burst: 10,
            per_address_per_minute: 10,
            total_burst: 100,
            total_per_minute: 300,
            burst_quiet_secs: 60,
            known_address_secs: 24 * 3600,
        }
    }
}

impl std::fmt::Debug for DeclaredUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredUpstream")
            .field("org", &self.org)
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("prefix", &self.prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("approve_new_tools", &self.approve_new_tools)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            data_dir: PathBuf::from("data"),
            database: DatabaseConfig::default(),
            policies_dir: PathBuf::from("policies"),
            schema_file: PathBuf::from("schemas/gateway.cedarschema"),
            pdp_dir: PathBuf::from("pdp"),
            pdp: PdpConfig::default(),
            log_format: LogFormat::Human,
            admin_token: None,
            auditor_token: None,
            console: ConsoleConfig::default(),
            demo_tenant: true,
            limits: Limits::default(),
            http: HttpSecurity::default(),
            sse: SseConfig::default(),
            rate_limits: RateLimitConfig::default(),
            credential_guesses: CredentialGuessConfig::default(),
            cache_ttl_secs: 30,
            worker_threads: None,
            lifecycle: LifecycleConfig::default(),
            prove: ProveConfig::default(),
            a2a: A2aConfig::default(),
            upstream_refresh: UpstreamRefreshConfig::default(),
            upstream_limits: UpstreamLimitsConfig::default(),
            graph: GraphConfig::default(),
            mcp: McpConfig::default(),
            audit: AuditConfig::default(),
            checkpoints: CheckpointConfig::default(),
            auth: crate::identity::AuthConfig::default(),
            upstreams: Vec::new(),
            a2a_telemetry: A2aTelemetryConfig::default(),
            telemetry: crate::telemetry::config::TelemetryConfig::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            max_batch_len: 64,
            max_json_depth: 64,
            write_queue: 16 * 1024,
            write_queue_records: 32 * 1024,
            write_queue_bytes: 32 * 1024 * 1024,
            group_commit_max: 1024,
            commit_delay_us: 150,
            commit_siblings: 4,
        }
    }
}

impl Default for HttpSecurity {
    fn default() -> Self {
        Self {
            allowed_origins: vec![
                "http://localhost".into(),
                "http://127.0.0.1".into(),
                "http://[::1]".into(),
                "https://localhost".into(),
            ],
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            body_stall_timeout_ms: 5_000,
            idle_timeout_ms: 5_000,
            tcp_nodelay: true,
            max_connections: 1024,
            max_connections_per_ip: 256,
            shutdown_grace_secs: 10,
        }
    }
}

/// `CEDARGATE_*` variables that are not config keys: read by the command
/// line (`--config`) and the log filter, never by the config loader.
pub const NON_CONFIG_VARS: &[&str] = &["CEDARGATE_CONFIG", "CEDARGATE_LOG"];

/// The config keys set in the environment: `CEDARGATE_` then the key, nested
/// keys joined by `__`. The prefix is shared with [`NON_CONFIG_VARS`],
/// which are skipped; any other `CEDARGATE_*` variable must name a config
/// key, so a misspelt override is an error rather than silently ignored.
fn config_env() -> Env {
    Env::prefixed("CEDARGATE_")
        .filter(|key| {
            !NON_CONFIG_VARS
                .iter()
                .any(|var| var.strip_prefix("CEDARGATE_").is_some_and(|k| key == k))
        })
        .split("__")
}

impl Config {
    /// Loads defaults, then `file` (if given, it must exist; if not given,
    /// `cedargate.toml` is read when present), then `CEDARGATE_*` variables.
    pub fn load(file: Option<&Path>) -> Result<Self, Box<figment::Error>> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(Box::new(figment::Error::from(format!(
                        "config file `{}` does not exist",
                        path.display()
                    ))));
                }
                fig = fig.merge(Toml::file(path));
            }
            None => fig = fig.merge(Toml::file("cedargate.toml")),
        }
        fig = fig.merge(config_env());
        fig.extract().map_err(Box::new)
    }

    /// How many async workers serve requests: `worker_threads`, else one
    /// fewer than the cores this process may run on (at least one).
    ///
    /// The core left over is the store's: its writer thread runs every
    /// durable commit (the SQL, the WAL write, the sync) and its read
    /// threads every query, long ones (a console replay) included, so the
    /// workers only parse, decide, forward and answer. A worker per core
    /// made those threads share cores with the workers, and on two cores
    /// made a lone call hop between two workers that woke each other (two
    /// futex calls per call): one worker instead took 55 µs off a proxied
    /// call's p50 at concurrency 1 and about a tenth off its CPU at
    /// concurrency 16, at the same throughput (`benches/README.md`,
    /// `upstream`). Under one org's flood (`abuse`) another org's p99 was
    /// lower with one worker and its p50 higher: the flood's refusals wait
    /// for the one worker too. Set it higher where calls are CPU-heavy.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads.map_or_else(
            || {
                std::thread::available_parallelism()
                    .map_or(1, |n| n.get().saturating_sub(1))
                    .max(1)
            },
            std::num::NonZeroUsize::get,
        )
    }

    /// The store's URL: `database.url`, else the SQLite file in the data
    /// directory.
    pub fn database_url(&self) -> String {
        match &self.database.url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.data_dir.join("cedargate.db").display()),
        }
    }

    /// Queue, batch and pool bounds of the store.
    pub fn store_options(&self) -> crate::store::StoreOptions {
        crate::store::StoreOptions {
            write_queue: self.limits.write_queue,
            write_queue_records: self.limits.write_queue_records,
            write_queue_bytes: self.limits.write_queue_bytes,
            group_commit_max: self.limits.group_commit_max,
            commit_delay: std::time::Duration::from_micros(self.limits.commit_delay_us),
            commit_siblings: self.limits.commit_siblings,
            pool_size: self.database.pool_size,
            acquire_timeout: std::time::Duration::from_millis(self.database.acquire_timeout_ms),
            wal_max_bytes: self.database.wal_max_bytes,
            min_free_bytes: self.database.min_free_bytes,
        }
    }

    /// Base URL for `mcpUrl`s, without a trailing slash.
    pub fn base_url(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.listen),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::result_large_err,
    reason = "figment's Jail API fixes the error type"
)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_usable() {
        let c = Config::default();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.base_url(), "http://127.0.0.1:8080");
        assert!(c.admin_token.is_none());
    }

    #[test]
    fn worker_threads_leave_a_core_to_the_store_unless_set() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Config::default().worker_threads(), (cores - 1).max(1));
        figment::Jail::expect_with(|jail| {
            jail.create_file("gw.toml", "worker_threads = 3\n")?;
            let c = Config::load(Some(Path::new("gw.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.worker_threads(), 3);
            jail.set_env("CEDARGATE_WORKER_THREADS", "0");
            let err = Config::load(Some(Path::new("gw.toml"))).map(|_| ());
            let err = err.expect_err("no workers is refused").to_string();
            let named = err.to_lowercase().contains("worker_threads");
            assert!(named && err.contains("expected a nonzero"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn file_then_env_override() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "gw.toml",
                "listen = \"127.0.0.1:9000\"\n[limits]\nmax_batch_len = 8\n",
            )?;
            jail.set_env("CEDARGATE_LIMITS__MAX_BATCH_LEN", "5");
            jail.set_env("CEDARGATE_ADMIN_TOKEN", "s3cret");
            let c = Config::load(Some(Path::new("gw.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(c.listen.port(), 9000);
            assert_eq!(c.limits.max_batch_len, 5);
            assert_eq!(c.admin_token.as_deref(), Some("s3cret"));
            Ok(())
        });
    }

    #[test]
    fn example_config_spells_out_the_defaults() {
        // Inside a jail: it serializes with the tests that set `CEDARGATE_*`
        // variables, which `load` would otherwise pick up.
        figment::Jail::expect_with(|_jail| {
            let c = Config::load(Some(Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/cedargate.example.toml"
            ))))
            .map_err(|e| e.to_string())?;
            let d = Config::default();
            assert_eq!(
                serde_json::to_value(&c).unwrap(),
                serde_json::to_value(&d).unwrap()
            );
            Ok(())
        });
    }

    #[test]
    fn variables_that_are_not_config_keys_are_not_read_as_keys() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("CEDARGATE_LOG", "warn");
            jail.set_env("CEDARGATE_CONFIG", "elsewhere.toml");
            jail.set_env("CEDARGATE_LOG_FORMAT", "json");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(c.log_format, LogFormat::Json);
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_in_the_environment_are_rejected() {
        for (var, key) in [
            ("CEDARGATE_LISEN", "lisen"),
            ("CEDARGATE_LIMITS__MAX_BODYBYTES", "max_bodybytes"),
            ("CEDARGATE_LOG__LEVEL", "log"),
        ] {
            figment::Jail::expect_with(|jail| {
                jail.set_env(var, "1");
                let err = Config::load(None).map(|_| ()).unwrap_err().to_string();
                assert!(err.contains(key), "{var}: {err}");
                Ok(())
            });
        }
    }

    #[test]
    fn declared_upstreams_are_read_from_the_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "gw.toml",
                "[[upstreams]]\norg = \"acme\"\nname = \"files\"\ncommand = \"npx\"\nargs = [\"-y\", \"srv\"]\nenv = { TOKEN = \"t\" }\ntimeoutMs = 5000\napproveNewTools = false\n",
            )?;
            let c = Config::load(Some(Path::new("gw.toml"))).map_err(|e| e.to_string())?;
            let d = &c.upstreams[0];
            assert_eq!((d.org.as_str(), d.command.as_str()), ("acme", "npx"));
            assert_eq!(d.args, ["-y", "srv"]);
            assert_eq!(d.env.get("TOKEN").map(String::as_str), Some("t"));
            assert_eq!(
                (d.timeout_ms, d.approve_new_tools),
                (Some(5000), Some(false))
            );
            assert!(
                !format!("{c:?}").contains("\"t\""),
                "env values stay out of Debug"
            );
            jail.create_file(
                "bad.toml",
                "[[upstreams]]\norg = \"acme\"\nname = \"x\"\ncommand = \"npx\"\nurl = \"http://h\"\n",
            )?;
            assert!(Config::load(Some(Path::new("bad.toml"))).is_err());
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_rejected() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("gw.toml", "lisen = \"127.0.0.1:9000\"\n")?;
            assert!(Config::load(Some(Path::new("gw.toml"))).is_err());
            Ok(())
        });
    }
}
