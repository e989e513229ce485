//! The upstream answer parsers: a Streamable HTTP JSON answer, an SSE
//! answer stream read chunk by chunk, and the legacy transport's
//! `endpoint` event.
//!
//! The first byte picks how the stream is cut into chunks; the rest is
//! the answer as the upstream sent it.
//!
//! Properties checked beyond "never panics":
//! - a JSON answer gives a `result` object, the upstream's own error
//!   (its code as sent), or an invalid-response error (-32203);
//! - the response read from an event stream does not depend on how the
//!   stream was cut into chunks, and is the one asked for (its id, with a
//!   `result` or an `error`);
//! - an `endpoint` the gateway accepts is on the stream's own origin;
//! - delivering any event's message to the waiting requests is harmless.
#![no_main]

use cedargate::upstream::client::{self, ClientError, codes};
use cedargate::upstream::sse;
use cedargate::upstream::wire::{Pending, event_end, event_message};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, answer)) = data.split_first() else {
        return;
    };
    json_answer(answer);
    for expect in [json!(1), json!("1")] {
        event_stream(answer, usize::from(cut % 16) + 1, &expect);
    }
    endpoint_events(answer);
});

fn json_answer(body: &[u8]) {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    match client::response_result(message.clone()) {
        Ok(result) => assert!(result.is_object()),
        Err(ClientError::Remote { code, .. }) => {
            assert_eq!(message["error"]["code"].as_i64(), Some(code));
        }
        Err(e) => assert_eq!(e.code(), codes::INVALID_RESPONSE, "{e:?}"),
    }
}

fn event_stream(stream: &[u8], chunk: usize, expect: &Value) {
    // Compared by value and error code (errors carry no equality).
    let seen = |a: Option<Result<Value, ClientError>>| a.map(|r| r.map_err(|e| e.code()));
    let whole = seen(client::sse_response(&mut stream.to_vec(), expect));
    let mut buffer = Vec::new();
    let mut chunked = None;
    for piece in stream.chunks(chunk) {
        buffer.extend_from_slice(piece);
        chunked = seen(client::sse_response(&mut buffer, expect));
        if chunked.is_some() {
            break;
        }
    }
    assert_eq!(whole, chunked);
    match whole {
        Some(Ok(m)) => {
            assert_eq!(m.get("id"), Some(expect));
            assert!(m.get("method").is_none());
            let _ = client::response_result(m);
        }
        Some(Err(code)) => assert_eq!(code, codes::INVALID_RESPONSE),
        None => {}
    }
}

fn endpoint_events(stream: &[u8]) {
    let Ok(base) = url::Url::parse("http://127.0.0.1:9/sse") else {
        return;
    };
    let pending = Pending::open();
    let mut buffer = stream.to_vec();
    while let Some(end) = event_end(&buffer) {
        let event: Vec<u8> = buffer.drain(..end).collect();
        if let Some(Ok(url)) = sse::endpoint(&event, &base) {
            assert_eq!(url.origin(), base.origin(), "{url}");
        }
        if let Some(message) = event_message(&event) {
            let _ = pending.deliver(message);
        }
    }
    pending.close(&ClientError::Invalid("end of input".into()));
}
