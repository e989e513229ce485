//! The MCP endpoint `/api/mcp/{sessionId}`: Streamable HTTP (JSON or
//! SSE-framed answers) and the HTTP+SSE transport of protocol 2024-11-05.
//!
//! A legacy request (Streamable HTTP, HTTP+SSE) goes down, one file per
//! job: `router` → `admission` (origin/host 403, protocol header 400, body
//! limits 413/400, JSON-RPC framing) → `call::resolve`, the prelude's
//! three steps (`prepare`: key 401, session 404, tenant isolation 403;
//! `spend`: rate limits 429; `admit`: Cedar `access_session` 403) →
//! `dispatch` → one method family per file (`initialize`, `tools_list`,
//! `tools_call`, `entries` for resources and prompts) → the tool adapters
//! (`crate::tools`). `error` maps every failure to its JSON-RPC code and
//! HTTP status in one place. `streams` and `terminated` are the
//! transports' state the gateway holds.
//!
//! A POST speaking protocol 2026-07-28 (`era`) is served statelessly by
//! `modern`, which calls the same prelude steps itself with header–body
//! validation (`headers`) between `spend` and `admit`, so it runs before
//! any Cedar decision of the session; its own `dispatch` then answers
//! `server/discover` (`discover`), `tools/list`, `tools/call`, resources
//! and prompts with the same handlers; `subscriptions/listen` (`listen`)
//! runs `prepare` and `admit` again at each re-check.
//!
//! **Architecture Invariant:** every transport passes the same admission,
//! the same prelude steps and the same method handlers, so the PEP and the
//! decision trail cannot differ between them; a `tools/call` answer is
//! sent only after its decision records (and any write) are durably
//! committed.

pub mod admission;
pub mod call;
pub mod cost;
pub mod credential;
pub mod discover;
pub mod dispatch;
pub mod entries;
pub mod era;
pub mod error;
pub mod framing;
pub mod headers;
pub mod initialize;
pub mod jsonrpc;
pub mod listen;
pub mod modern;
pub mod people;
pub mod protocol;
pub mod public_url;
pub mod relay;
pub mod resource_metadata;
pub mod router;
pub mod sse;
pub mod step_up;
pub mod streamable;
pub mod streams;
pub mod terminated;
pub mod tool_classes;
pub mod tools_call;
pub mod tools_list;
