//! `cedargate mcp-server …`: the upstream MCP server registry from the
//! command line, the same operations as `/admin/orgs/{org}/mcp-servers`.
//!
//! Unlike the tenant commands, which write the database directly, these
//! are a client of a running gateway's admin API (`--gateway`, default the
//! config's `public_url`, else its listen address; the admin token from
//! `CEDARGATE_ADMIN_TOKEN` or the config). Why: registering, refreshing
//! and approving talk to the upstream (initialize, list, pin), check names
//! against every tool of the org, and must reach every instance's caches
//! at once; the admin API is the one place that does all of it, so the
//! command line cannot drift from it. Answers are printed as the API gives
//! them (JSON); an API error is printed to stderr and exits 1.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::config::Config;

/// `mcp-server …`
#[derive(Debug, Subcommand)]
pub enum McpServerCmd {
    /// Register an upstream MCP server for an org (Streamable HTTP or
    /// HTTP+SSE; stdio servers are declared in the config file only).
    Add {
        /// Org id.
        #[arg(long)]
        org: String,
        /// Name (its slug is the Cedar `McpServer` id and the default prefix).
        #[arg(long)]
        name: String,
        /// The MCP endpoint, the SSE stream URL, or a base URL whose
        /// `/.well-known/mcp.json` names the endpoint.
        #[arg(long)]
        url: String,
        /// `streamable-http` or `sse`.
        #[arg(long, default_value = "streamable-http")]
        transport: String,
        /// Environment variable holding the upstream's bearer token.
        #[arg(long, conflicts_with = "secret_file")]
        secret_env: Option<String>,
        /// Absolute path of a file holding the upstream's bearer token.
        #[arg(long)]
        secret_file: Option<String>,
        /// Budget of one call, in milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Tool name prefix (default: the slug; "" for the upstream's names).
        #[arg(long)]
        prefix: Option<String>,
        /// Hold the first listing's tools too until approved (tools first
        /// seen after it are held by default).
        #[arg(long, conflicts_with = "approve_new_tools")]
        hold_new_tools: bool,
        /// Offer tools first seen after the first listing at once, without
        /// an approval.
        #[arg(long)]
        approve_new_tools: bool,
        #[command(flatten)]
        to: Gateway,
    },
    /// List an org's upstream servers with health and tool counts.
    List {
        /// Org id.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        to: Gateway,
    },
    /// Show one server with its pinned tool definitions.
    Show(ServerRef),
    /// Remove a server.
    Remove(ServerRef),
    /// List the server's tools again (changed definitions are held).
    Refresh(ServerRef),
    /// Approve held definitions: each `--tool` with the `--hash` of its
    /// held definition (as `show` gives it), in pairs; a name alone
    /// approves nothing.
    Approve {
        #[command(flatten)]
        server: ServerRef,
        /// A tool to approve (the upstream's or the gateway's name); repeatable.
        #[arg(long = "tool")]
        tools: Vec<String>,
        /// The held hash of the `--tool` at the same position; repeatable.
        #[arg(long = "hash")]
        hashes: Vec<String>,
    },
}

/// One server of one org.
#[derive(Debug, Args)]
pub struct ServerRef {
    /// Org id.
    #[arg(long)]
    pub org: String,
    /// Server id (from `list`).
    #[arg(long)]
    pub id: String,
    #[command(flatten)]
    pub to: Gateway,
}

/// Which gateway to ask.
#[derive(Debug, Args)]
pub struct Gateway {
    /// Base URL of a running gateway (default: `public_url`, else the
    /// listen address of the config).
    #[arg(long)]
    pub gateway: Option<String>,
}

/// Runs the command against the gateway's admin API.
pub fn run(config: &Config, cmd: McpServerCmd) -> ExitCode {
    let Some(token) = config.admin_token.clone() else {
        eprintln!(
            "error: no admin token: set CEDARGATE_ADMIN_TOKEN (or `admin_token` in the config)"
        );
        return ExitCode::from(2);
    };
    let (method, base, path, body) = request(config, cmd);
    let url = format!("{}/admin{path}", base.trim_end_matches('/'));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(send(method, &url, &token, body)) {
        Ok((status, answer)) if status.is_success() => {
            if !answer.is_null() {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&answer).unwrap_or_default()
                );
            }
            ExitCode::SUCCESS
        }
        Ok((status, answer)) => {
            let message = answer["error"]["message"]
                .as_str()
                .map_or_else(|| answer.to_string(), str::to_string);
            eprintln!("error: {status}: {message}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: cannot reach the gateway at {base}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The API request a command is: method, gateway, path and body.
fn request(config: &Config, cmd: McpServerCmd) -> (reqwest::Method, String, String, Option<Value>) {
    use reqwest::Method;
    let base = |to: Gateway| to.gateway.unwrap_or_else(|| config.base_url());
    let one = |s: &ServerRef| format!("/orgs/{}/mcp-servers/{}", s.org, s.id);
    match cmd {
        McpServerCmd::Add {
            org,
            name,
            url,
            transport,
            secret_env,
            secret_file,
            timeout_ms,
            prefix,
            hold_new_tools,
            approve_new_tools,
            to,
        } => {
            let mut body = json!({ "name": name, "transport": transport, "url": url });
            if let Some(env) = secret_env {
                body["auth"] = json!({ "type": "bearer", "secretEnv": env });
            } else if let Some(file) = secret_file {
                body["auth"] = json!({ "type": "bearer", "secretFile": file });
            }
            if let Some(ms) = timeout_ms {
                body["timeoutMs"] = ms.into();
            }
            if let Some(p) = prefix {
                body["prefix"] = p.into();
            }
            if hold_new_tools {
                body["approveNewTools"] = false.into();
            } else if approve_new_tools {
                body["approveNewTools"] = true.into();
            }
            let path = format!("/orgs/{org}/mcp-servers");
            (Method::POST, base(to), path, Some(body))
        }
        McpServerCmd::List { org, to } => (
            Method::GET,
            base(to),
            format!("/orgs/{org}/mcp-servers"),
            None,
        ),
        McpServerCmd::Show(s) => (Method::GET, base_of(config, &s), one(&s), None),
        McpServerCmd::Remove(s) => (Method::DELETE, base_of(config, &s), one(&s), None),
        McpServerCmd::Refresh(s) => {
            let path = format!("{}/refresh", one(&s));
            (Method::POST, base_of(config, &s), path, Some(json!({})))
        }
        McpServerCmd::Approve {
            server,
            tools,
            hashes,
        } => {
            // Paired by position; a count that differs is sent as it is
            // and the API names the tool without a hash.
            let held: serde_json::Map<String, Value> = tools
                .iter()
                .zip(&hashes)
                .map(|(t, h)| (t.clone(), h.clone().into()))
                .collect();
            let body = json!({ "tools": tools, "heldHashes": held });
            let path = format!("{}/approve", one(&server));
            (Method::POST, base_of(config, &server), path, Some(body))
        }
    }
}

fn base_of(config: &Config, s: &ServerRef) -> String {
    s.to.gateway.clone().unwrap_or_else(|| config.base_url())
}

/// Sends one admin request; returns the status and the JSON answer (null
/// when empty).
async fn send(
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<Value>,
) -> Result<(reqwest::StatusCode, Value), reqwest::Error> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(660))
        .build()?;
    let mut req = client.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    let answer = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Ok((status, answer))
}
