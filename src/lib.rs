//! cedargate: a policy-first gateway for AI agents.
//!
//! Agents speak MCP (JSON-RPC 2.0 over Streamable HTTP) to a per-session
//! endpoint; every request passes a Cedar policy enforcement point, and every
//! Cedar decision lands in a hash-chained decision trail. See `ARCHITECTURE.md`
//! for the code map and the invariants each module keeps.

pub mod a2a;
pub mod admin;
pub mod audit;
pub mod auth;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod console;
pub mod daemon;
pub mod demo;
pub mod discovery;
pub mod error;
pub mod gateway;
pub mod graph;
pub mod guesses;
pub mod identity;
pub mod ids;
pub mod lifecycle;
pub mod mcp;
pub mod metrics;
pub mod operator;
pub mod pdp;
pub mod policy;
pub mod rate_limits;
pub mod replay;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod upstream;

/// mimalloc instead of the system allocator: decision replay and the
/// request path allocate and free many small objects (Cedar expressions,
/// JSON values), and glibc malloc/free led the replay profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
