//! One tenant to drive: an org with a project, an agent, a key and a
//! session, made in one transaction by `operator::provision` (what the
//! demo tenant uses), straight through the store.
//!
//! Every field is spelled out: ids and roles reach the entity slice and the
//! policies, so each bench keeps the tenant its figures were taken with.

use cedargate::gateway::Gateway;
use cedargate::operator::{self, CreateAgent, CreateOrg, CreateProject, Provision, Provisioned};
use cedargate::store::{Store, StoreError};

/// What to create.
#[derive(Debug, Clone, Copy)]
pub struct TenantSpec<'a> {
    pub org: &'a str,
    pub org_name: &'a str,
    pub project: &'a str,
    pub memory: bool,
    pub graph: bool,
    pub agent: &'a str,
    pub agent_name: &'a str,
    pub roles: &'a [&'a str],
    pub key_label: &'a str,
}

impl TenantSpec<'static> {
    /// The `gateway` bench's tenant; the others start from it.
    pub const BENCH: TenantSpec<'static> = TenantSpec {
        org: "bench",
        org_name: "Bench",
        project: "bench-proj",
        memory: true,
        graph: false,
        agent: "bench-agent",
        agent_name: "Bench agent",
        roles: &["developers"],
        key_label: "daemon",
    };
}

impl TenantSpec<'_> {
    fn provision(&self) -> Provision {
        Provision {
            org: CreateOrg {
                id: self.org.into(),
                name: self.org_name.into(),
                plan: None,
                entitlements: None,
            },
            project: CreateProject {
                id: self.project.into(),
                memory_enabled: self.memory,
                graph_enabled: self.graph,
            },
            agent: CreateAgent {
                id: self.agent.into(),
                name: self.agent_name.into(),
                roles: self.roles.iter().map(|r| r.to_string()).collect(),
            },
            key_label: self.key_label.into(),
        }
    }
}

/// Creates `spec` in the gateway's store.
pub async fn create(gw: &Gateway, spec: &TenantSpec<'_>) -> Result<Provisioned, StoreError> {
    let provision = spec.provision();
    gw.store
        .read(move |c| operator::provision(c, provision))
        .await
}

/// Creates `spec` in `store` from a thread outside any runtime.
pub fn create_blocking(store: &Store, spec: &TenantSpec<'_>) -> Result<Provisioned, StoreError> {
    store.read_blocking(|c| operator::provision(c, spec.provision()))
}
