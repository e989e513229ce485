//! The demo tenant a newcomer gets on first start: org `demo`, project
//! `demo-project` (memory on), agent `demo-agent` (role `developers`), a
//! daemon key and one session. The credentials are printed with a ready
//! `curl` line and an `.mcp.json` snippet, and kept in
//! `<data_dir>/demo-tenant.json` (mode 0600) so later starts can print them
//! again; the database itself stores only the key's hash.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::gateway::Gateway;
use crate::operator::{self, CreateAgent, CreateOrg, CreateProject, Provision};
use crate::store::{StoreError, tenants};

/// Demo org id.
pub const DEMO_ORG: &str = "demo";
/// Demo project id.
pub const DEMO_PROJECT: &str = "demo-project";
/// Demo agent id.
pub const DEMO_AGENT: &str = "demo-agent";

/// What the demo tenant's user needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoCredentials {
    /// Session id.
    pub session_id: String,
    /// The daemon key.
    pub key: String,
}

fn credentials_path(data_dir: &Path) -> PathBuf {
    data_dir.join("demo-tenant.json")
}

/// Creates the demo tenant if the `demo` org does not exist yet, and returns
/// its credentials (from the file on later starts, when present).
pub async fn ensure(gw: &Gateway) -> Result<Option<DemoCredentials>, StoreError> {
    let path = credentials_path(&gw.config.data_dir);
    let exists = gw
        .store
        .read(|c| Ok(tenants::get_org(c, DEMO_ORG)?.is_some()))
        .await?;
    if exists {
        let saved = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        return Ok(saved);
    }
    let creds = gw
        .store
        .read(|c| {
            let made = operator::provision(
                c,
                Provision {
                    org: CreateOrg {
                        id: DEMO_ORG.into(),
                        name: "Demo".into(),
                        plan: Some("free".into()),
                        entitlements: None,
                    },
                    project: CreateProject {
                        id: DEMO_PROJECT.into(),
                        memory_enabled: true,
                        graph_enabled: false,
                    },
                    agent: CreateAgent {
                        id: DEMO_AGENT.into(),
                        name: "Demo agent".into(),
                        roles: vec!["developers".into()],
                    },
                    key_label: "demo daemon".into(),
                },
            )?;
            Ok(DemoCredentials {
                session_id: made.session.id,
                key: made.secret,
            })
        })
        .await?;
    if let Err(e) = write_private(
        &path,
        &serde_json::to_string_pretty(&creds).unwrap_or_default(),
    ) {
        tracing::warn!(error = %e, path = %path.display(), "cannot save demo credentials");
    }
    Ok(Some(creds))
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    // With a database server the data directory holds only this file.
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(text.as_bytes())
    }
    #[cfg(not(unix))]
    {
        std::fs::write(path, text)
    }
}

/// The banner printed at start-up.
pub fn banner(base_url: &str, creds: &DemoCredentials) -> String {
    let url = operator::mcp_url(base_url, &creds.session_id);
    let mcp_json = json!({
        "mcpServers": {
            "cedargate": {
                "type": "http",
                "url": url,
                "headers": { "Authorization": format!("Bearer {}", creds.key) }
            }
        }
    });
    let mcp_json = serde_json::to_string_pretty(&mcp_json).unwrap_or_default();
    format!(
        "\n\
         == cedargate demo tenant (org `{DEMO_ORG}`, project `{DEMO_PROJECT}`, agent `{DEMO_AGENT}`) ==\n\
         MCP URL:    {url}\n\
         Bearer key: {key}\n\
         \n\
         Try it:\n\
         curl -s {url} -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}}'\n\
         \n\
         .mcp.json (Claude Code and other MCP clients):\n\
         {mcp_json}\n",
        key = creds.key,
    )
}
