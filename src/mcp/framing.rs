//! How a POST's 200 answer is framed: JSON, or one SSE `message` event for
//! clients that accept only `text/event-stream`. Shared by both eras of the
//! Streamable HTTP endpoint.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A 200 answer: JSON, or one SSE `message` event for clients that accept
/// only `text/event-stream`.
pub fn framed(headers: &HeaderMap, body: String) -> Response {
    if sse_only(headers) {
        let mut resp =
            (StatusCode::OK, format!("event: message\ndata: {body}\n\n")).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        resp
    } else {
        let mut resp = (StatusCode::OK, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// Whether the client accepts only SSE (no `application/json`, no wildcard).
fn sse_only(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let media = range
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            match media.as_str() {
                "text/event-stream" => sse = true,
                "application/json" | "application/*" | "*/*" => json = true,
                _ => {}
            }
        }
    }
    sse && !json
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(header::ACCEPT, v);
        }
        h
    }

    #[test]
    fn sse_only_when_json_is_not_acceptable() {
        let cases = [
            ("text/event-stream", true),
            ("TEXT/EVENT-STREAM; q=1", true),
            ("application/json, text/event-stream", false),
            ("text/event-stream, */*;q=0.1", false),
            ("application/json", false),
            ("*/*", false),
            ("text/html", false),
        ];
        for (value, want) in cases {
            assert_eq!(sse_only(&accept(value)), want, "{value}");
        }
        assert!(!sse_only(&HeaderMap::new()));
    }
}
