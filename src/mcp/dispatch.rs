//! Answers the JSON-RPC messages of one request body, in order: each
//! request goes to its method's handler; notifications and client
//! responses get nothing; invalid elements of a batch get -32600.

use serde_json::Value;

use super::call::Call;
use super::error::McpError;
use super::jsonrpc::{Answer, Message, Reply};
use super::{initialize, tools_call, tools_list};

/// Answers `messages`, then queues the request's remaining deferred
/// records.
pub async fn answer(call: &Call, messages: Vec<Message>) -> Vec<Answer> {
    let mut responses = Vec::new();
    for message in messages {
        match message {
            Message::Request { id, method, params } => {
                let outcome = dispatch(call, &method, params).await;
                responses.push(Answer::of(id, outcome.map_err(|e| e.rpc())));
            }
            Message::Invalid { id, reason } => {
                let error = McpError::InvalidRequest {
                    id: id.clone(),
                    reason,
                };
                responses.push(Answer::of(id, Err(error.rpc())));
            }
            Message::Notification { .. } | Message::ClientResponse => {}
        }
    }
    call.flush_deferred().await;
    responses
}

/// One request, by method.
pub async fn dispatch(call: &Call, method: &str, params: Value) -> Result<Reply, McpError> {
    match method {
        "initialize" => Ok(Reply::Json(initialize::initialize(call, &params))),
        "ping" => Ok(Reply::Json(initialize::ping())),
        "tools/list" => Ok(Reply::Text(tools_list::tools_list(call))),
        "tools/call" => tools_call::tools_call(call, params).await.map(Reply::Json),
        _ => Err(McpError::MethodNotFound(method.to_string())),
    }
}
