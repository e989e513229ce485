//! The command line: `serve`, the operator commands (same operations as
//! the admin API, applied to the database directly), `audit` and `policy`.
//! Flags are a stable contract.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::json;

pub mod checkpoints;
pub mod lifecycle;
pub mod log_lines;
pub mod log_trace_ids;
pub mod progress;
pub mod prove;
pub mod trail;
pub mod upstreams;

use crate::config::{Config, LogFormat};
use crate::operator::{self, CreateAgent, CreateKey, CreateOrg, CreateProject, OpenSession};
use crate::store::{Store, StoreError, decisions, tenants};
pub use lifecycle::{PolicyCmd, SchemaCmd};

/// cedargate: a policy-first MCP gateway for AI agents.
#[derive(Debug, Parser)]
#[command(name = "cedargate", version, about)]
pub struct Cli {
    /// Config file (TOML). Default: `cedargate.toml` when present.
    #[arg(long, global = true, env = "CEDARGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Manage orgs.
    #[command(subcommand)]
    Org(OrgCmd),
    /// Manage projects.
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Manage agents.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Manage daemon keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Manage sessions.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Manage an org's upstream MCP servers (through a running gateway's
    /// admin API).
    #[command(subcommand)]
    McpServer(upstreams::McpServerCmd),
    /// Read and verify the decision trail.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Work with the policy set.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Inspect the Cedar schema.
    #[command(subcommand)]
    Schema(SchemaCmd),
    /// Apply pending database migrations (serve also does at start-up)
    /// and list the applied versions.
    Migrate,
}

/// `serve` flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (overrides the config).
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
}

/// `org …`
#[derive(Debug, Subcommand)]
pub enum OrgCmd {
    /// Create an org.
    Create {
        /// Org id.
        #[arg(long)]
        id: String,
        /// Display name.
        #[arg(long)]
        name: String,
        /// Plan name.
        #[arg(long)]
        plan: Option<String>,
        /// Entitlement (repeatable), e.g. `kg_enabled`.
        #[arg(long = "entitlement")]
        entitlements: Vec<String>,
    },
    /// List orgs.
    List,
    /// Delete an org and everything in it (the decision trail is kept).
    Delete {
        /// Org id.
        id: String,
    },
    /// Show or override an org's rate limits.
    #[command(subcommand)]
    RateLimits(RateLimitsCmd),
}

/// `org rate-limits …`: the same operations as
/// `GET|PUT|DELETE /admin/orgs/{org}/rate-limits`. Running gateways apply
/// a change at once on PostgreSQL (it is announced), within
/// `cache_ttl_secs` on SQLite.
#[derive(Debug, Subcommand)]
pub enum RateLimitsCmd {
    /// Show the buckets in force and the override.
    Get {
        /// Org id.
        #[arg(long)]
        org: String,
    },
    /// Replace the org's override; buckets left out keep the config's.
    Set {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Per-key bucket as `PER_SECOND/BURST`, e.g. `50/100`.
        #[arg(long)]
        key: Option<String>,
        /// Per-agent bucket as `PER_SECOND/BURST`.
        #[arg(long)]
        agent: Option<String>,
        /// Whole-org bucket as `PER_SECOND/BURST`.
        #[arg(long = "org-bucket")]
        org_bucket: Option<String>,
    },
    /// Remove the override (back to the config's buckets).
    Clear {
        /// Org id.
        #[arg(long)]
        org: String,
    },
}

/// `project …`
#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project.
    Create {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Project id.
        #[arg(long)]
        id: String,
        /// Memory tools on.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        memory_enabled: bool,
        /// Graph tools on.
        #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
        graph_enabled: bool,
    },
    /// List projects of an org.
    List {
        /// Org id.
        #[arg(long)]
        org: String,
    },
    /// Delete a project.
    Delete {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Project id.
        id: String,
    },
}

/// `agent …`
#[derive(Debug, Subcommand)]
pub enum AgentCmd {
    /// Create an agent.
    Create {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Agent id.
        #[arg(long)]
        id: String,
        /// Display name.
        #[arg(long)]
        name: String,
        /// Role (repeatable).
        #[arg(long = "role")]
        roles: Vec<String>,
    },
    /// List agents of an org.
    List {
        /// Org id.
        #[arg(long)]
        org: String,
    },
    /// Delete an agent.
    Delete {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Agent id.
        id: String,
    },
}

/// `key …`
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Mint a daemon key (printed once).
    Create {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Label.
        #[arg(long)]
        label: String,
        /// A decision application the key may ask over the AuthZEN API
        /// (repeatable): a key of the PDP role, which opens no MCP session.
        #[arg(long = "pdp-app")]
        pdp_apps: Vec<String>,
    },
    /// List keys of an org (no secrets).
    List {
        /// Org id.
        #[arg(long)]
        org: String,
    },
    /// Revoke a key.
    Delete {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Key id.
        id: String,
    },
}

/// `session …`
#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Open a session (operator action; daemons use `POST /api/sessions`).
    Create {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Project id.
        #[arg(long)]
        project: String,
        /// Agent id.
        #[arg(long)]
        agent: String,
    },
    /// List sessions of an org.
    List {
        /// Org id.
        #[arg(long)]
        org: String,
    },
}

/// `audit …`
#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Print the most recent decisions.
    Tail {
        /// How many.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Print the decisions matching filters (a trace's with `--trace ID`),
    /// oldest first.
    Query(lifecycle::QueryArgs),
    /// Verify the hash chain (all of it, or a range); exits 1 on any problem.
    Verify(lifecycle::VerifyArgs),
    /// Re-evaluate recorded decisions under a candidate policy set.
    Replay(lifecycle::ReplayArgs),
    /// Export decisions as JSON lines or OCSF events.
    Export(lifecycle::ExportArgs),
    /// Verify, export and prune the records older than a time, keeping an
    /// anchor the remaining chain verifies from.
    Archive(trail::ArchiveArgs),
    /// Write the trail's signed checkpoints to a file an auditor keeps.
    Checkpoints(checkpoints::CheckpointsArgs),
    /// Print the public key that verifies the trail's checkpoints.
    Key,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(config.log_format);
    match cli.command {
        Command::Serve(args) => {
            if let Some(listen) = args.listen {
                config.listen = listen;
            }
            serve(config)
        }
        Command::Policy(cmd) => lifecycle::policy(&config, &cmd),
        Command::Schema(cmd) => lifecycle::schema(&config, &cmd),
        Command::Audit(AuditCmd::Replay(args)) => lifecycle::replay(&config, &args),
        Command::Audit(AuditCmd::Query(args)) => lifecycle::query(&config, &args),
        Command::Audit(AuditCmd::Export(args)) => lifecycle::export(&config, &args),
        Command::Audit(AuditCmd::Verify(args)) => checkpoints::verify(&config, &args),
        Command::Audit(AuditCmd::Checkpoints(args)) => checkpoints::export(&config, &args),
        Command::Audit(AuditCmd::Key) => checkpoints::key(&config),
        Command::Audit(AuditCmd::Archive(args)) => trail::archive(&config, &args),
        Command::McpServer(cmd) => upstreams::run(&config, cmd),
        other => match operate(&config, other) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CEDARGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // Human lines escape what their fields carry (`log_lines.rs`); JSON
    // lines carry the request's trace ids on top (`log_trace_ids.rs`).
    let _ = match format {
        LogFormat::Json => builder
            .with_writer(std::io::stderr)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(log_trace_ids::TracedJson(
                tracing_subscriber::fmt::format().json(),
            ))
            .finish()
            .with(log_trace_ids::TraceIdLayer)
            .try_init()
            .is_ok(),
        LogFormat::Human => builder.with_writer(log_lines::OneLine).try_init().is_ok(),
    };
}

fn serve(config: Config) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let mut config = config;
        let listen = config.listen;
        let demo = config.demo_tenant;
        let signals = match crate::server::ShutdownSignals::install() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        // Bind first so a port of 0 resolves before URLs are printed.
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {listen}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let bound = listener.local_addr().unwrap_or(listen);
        config.listen = bound;
        let gw = match crate::server::prepare(config).await {
            Ok(gw) => gw,
            Err(e) => {
                eprintln!("error: refusing to start\n{e}");
                return ExitCode::FAILURE;
            }
        };
        say(&console_line(&gw.config));
        if demo {
            match crate::demo::ensure(&gw).await {
                Ok(Some(creds)) => say(&crate::demo::banner(&gw.config.base_url(), &creds)),
                Ok(None) => say(&format!(
                    "demo tenant exists; its credentials file `{}` is gone (mint a key with `cedargate key create --org demo --label me`)",
                    gw.config.data_dir.join("demo-tenant.json").display()
                )),
                Err(e) => tracing::warn!(error = %e, "cannot create the demo tenant"),
            }
        }
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        tracing::info!(listen = %bound, workers, "cedargate listening");
        match crate::server::run(listener, gw, signals.wait()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// The start-up banner's console line: its URL, or how to enable it.
fn console_line(config: &Config) -> String {
    if crate::console::enabled(config) {
        format!("Console URL: {}{}", config.base_url(), crate::console::PATH)
    } else {
        "Console: off (set CEDARGATE_ADMIN_TOKEN or CEDARGATE_AUDITOR_TOKEN, or [console.oidc], to serve it at /console)"
            .into()
    }
}

/// Prints to stdout, ignoring a closed pipe (a server must not die because
/// whoever started it stopped reading).
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn print(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn operate(config: &Config, command: Command) -> Result<ExitCode, StoreError> {
    let store = Store::open_ready(&config.database_url(), &config.store_options())?;
    match command {
        Command::Org(OrgCmd::Create {
            id,
            name,
            plan,
            entitlements,
        }) => {
            let entitlements = Some(entitlements);
            print(&store.read_blocking(|c| {
                operator::create_org(
                    c,
                    CreateOrg {
                        id,
                        name,
                        plan,
                        entitlements,
                    },
                )
            })?);
        }
        Command::Org(OrgCmd::List) => print(&store.read_blocking(tenants::list_orgs)?),
        Command::Org(OrgCmd::Delete { id }) => {
            store.read_blocking(|c| tenants::delete_org(c, &id))?
        }
        Command::Org(OrgCmd::RateLimits(cmd)) => print(&rate_limits(config, &store, cmd)?),
        Command::Project(ProjectCmd::Create {
            org,
            id,
            memory_enabled,
            graph_enabled,
        }) => print(&store.read_blocking(|c| {
            operator::create_project(
                c,
                &org,
                CreateProject {
                    id,
                    memory_enabled,
                    graph_enabled,
                },
            )
        })?),
        Command::Project(ProjectCmd::List { org }) => {
            print(&store.read_blocking(|c| tenants::list_projects(c, &org))?)
        }
        Command::Project(ProjectCmd::Delete { org, id }) => {
            store.read_blocking(|c| tenants::delete_project(c, &org, &id))?
        }
        Command::Agent(AgentCmd::Create {
            org,
            id,
            name,
            roles,
        }) => {
            print(&store.read_blocking(|c| {
                operator::create_agent(c, &org, CreateAgent { id, name, roles })
            })?)
        }
        Command::Agent(AgentCmd::List { org }) => {
            print(&store.read_blocking(|c| tenants::list_agents(c, &org))?)
        }
        Command::Agent(AgentCmd::Delete { org, id }) => {
            store.read_blocking(|c| tenants::delete_agent(c, &org, &id))?
        }
        Command::Key(KeyCmd::Create {
            org,
            label,
            pdp_apps,
        }) => {
            let (key, secret) = store
                .read_blocking(|c| operator::create_key(c, &org, CreateKey { label, pdp_apps }))?;
            let mut shown =
                json!({ "id": key.id, "orgId": key.org_id, "label": key.label, "key": secret });
            if !key.pdp_apps.is_empty() {
                shown["pdpApps"] = json!(key.pdp_apps);
            }
            print(&shown);
        }
        Command::Key(KeyCmd::List { org }) => {
            print(&store.read_blocking(|c| tenants::list_keys(c, &org))?)
        }
        Command::Key(KeyCmd::Delete { org, id }) => {
            store.read_blocking(|c| tenants::delete_key(c, &org, &id))?
        }
        Command::Session(SessionCmd::Create {
            org,
            project,
            agent,
        }) => {
            let s = store.read_blocking(|c| {
                operator::open_session(
                    c,
                    &org,
                    OpenSession {
                        project_id: project,
                        agent_id: agent,
                    },
                    None,
                )
            })?;
            print(
                &json!({ "sessionId": s.id, "mcpUrl": operator::mcp_url(&config.base_url(), &s.id) }),
            );
        }
        Command::Session(SessionCmd::List { org }) => {
            print(&store.read_blocking(|c| tenants::list_sessions(c, &org))?)
        }
        Command::Audit(AuditCmd::Tail { lines, json }) => {
            for d in store.read_blocking(|c| decisions::tail(c, lines))? {
                if json {
                    println!("{}", serde_json::to_string(&d).unwrap_or_default());
                } else {
                    println!("{}", crate::audit::format_line(&d));
                }
            }
        }
        Command::Migrate => {
            println!("database: {}", store.location().display());
            for (version, applied_at) in store.read_blocking(crate::store::applied_migrations)? {
                println!("  migration {version:>4}  applied {applied_at}");
            }
        }
        Command::Serve(_)
        | Command::Policy(_)
        | Command::Schema(_)
        | Command::McpServer(_)
        | Command::Audit(
            AuditCmd::Verify(_)
            | AuditCmd::Query(_)
            | AuditCmd::Replay(_)
            | AuditCmd::Export(_)
            | AuditCmd::Archive(_)
            | AuditCmd::Checkpoints(_)
            | AuditCmd::Key,
        ) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `org rate-limits get|set|clear`: what the operator API answers.
fn rate_limits(
    config: &Config,
    store: &Store,
    cmd: RateLimitsCmd,
) -> Result<serde_json::Value, StoreError> {
    use crate::rate_limits::{Override, describe};
    use crate::store::rate_limits as rows;
    let (org, override_) = match cmd {
        RateLimitsCmd::Get { org } => {
            let o = store.read_blocking(|c| {
                tenants::require_org(c, &org)?;
                rows::get(c, &org)
            })?;
            let o = o.and_then(|t| serde_json::from_str::<Override>(&t).ok());
            return Ok(describe(&org, &config.rate_limits, o));
        }
        RateLimitsCmd::Set {
            org,
            key,
            agent,
            org_bucket,
        } => {
            let o = Override {
                key: key.as_deref().map(parse_rate).transpose()?,
                agent: agent.as_deref().map(parse_rate).transpose()?,
                org: org_bucket.as_deref().map(parse_rate).transpose()?,
            };
            o.validate()
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            let text = serde_json::to_string(&o).map_err(|e| StoreError::Invalid(e.to_string()))?;
            store.read_blocking(|c| {
                tenants::require_org(c, &org)?;
                rows::set(c, &org, &text)
            })?;
            (org, Some(o))
        }
        RateLimitsCmd::Clear { org } => {
            store.read_blocking(|c| {
                tenants::require_org(c, &org)?;
                rows::clear(c, &org)
            })?;
            (org, None)
        }
    };
    announce_org_change(store, &org);
    Ok(describe(&org, &config.rate_limits, override_))
}

/// `PER_SECOND/BURST`.
fn parse_rate(text: &str) -> Result<crate::rate_limits::Rate, StoreError> {
    let bad = || StoreError::Invalid(format!("`{text}`: expected PER_SECOND/BURST, e.g. 50/100"));
    let (per_second, burst) = text.split_once('/').ok_or_else(bad)?;
    Ok(crate::rate_limits::Rate {
        per_second: per_second.trim().parse().map_err(|_| bad())?,
        burst: burst.trim().parse().map_err(|_| bad())?,
    })
}

/// Tells running gateways on a PostgreSQL database that `org` changed
/// (best effort: they catch up within `cache_ttl_secs` anyway).
fn announce_org_change(store: &Store, org: &str) {
    use crate::store::notify::{self, Change};
    if let crate::store::Location::Postgres(target) = store.location() {
        let channel = notify::channel(&target.schema);
        let change = Change::Org(org.to_string());
        if let Err(e) = store.read_blocking(|c| notify::publish(c, &channel, &change)) {
            eprintln!("warning: running gateways were not told: {e}");
        }
    }
}
