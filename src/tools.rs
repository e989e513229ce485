//! Tools behind the gateway, each a [`ToolAdapter`]: the built-in memory
//! and graph tools here, remote A2A skills in `crate::a2a::tool`. A tool's
//! [`ToolSpec`] says what it is (name, `inputSchema`, Cedar entity and
//! action); the adapter says how it runs. The catalog says which built-in
//! tools a session gets.
//!
//! **Architecture Invariant:** nothing here answers HTTP or JSON-RPC, and
//! nothing here decides a call: the `tools/call` pipeline decides, then
//! runs the adapter. Graph reads filter what they return through the
//! `read_node` guard the pipeline hands them.

pub mod adapter;
pub mod catalog;
pub mod graph;
pub mod memory;
pub mod node_filter;
pub mod spec;

pub use adapter::{
    AfterCommit, Executed, Failed, Failure, Invocation, Relay, ToolAdapter, ToolCall, ToolError,
    ToolFuture, ToolOutput, text_result,
};
pub use catalog::Catalog;
pub use node_filter::GuardFilter;
pub use spec::{ArgumentError, InvalidSchema, ToolClass, ToolSpec, list_result};
