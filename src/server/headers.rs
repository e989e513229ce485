//! Security headers set on every answer, whatever produced it (a handler,
//! an extractor's rejection, a body limit or timeout, the router's own 404
//! and 405): `X-Content-Type-Options: nosniff` on every answer of the
//! gateway, and the console's headers ([`crate::console::SECURITY_HEADERS`])
//! on every answer under `/console`, its error pages included. One layer
//! around the whole router sees them all, where a layer on the console's
//! routes would miss the paths no route matches.

use axum::extract::Request;
use axum::http::header::X_CONTENT_TYPE_OPTIONS;
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// Adds the headers to the answer of `req`.
pub async fn secure(req: Request, next: Next) -> Response {
    let console = under_console(req.uri().path());
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if console {
        console_headers(headers);
    }
    resp
}

/// Whether `path` is the console's.
fn under_console(path: &str) -> bool {
    path.strip_prefix(crate::console::PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The console's headers; a handler's own `Cache-Control` is kept.
fn console_headers(headers: &mut HeaderMap) {
    for (name, value) in crate::console::SECURITY_HEADERS {
        if name == axum::http::header::CACHE_CONTROL && headers.contains_key(&name) {
            continue;
        }
        headers.insert(name, HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_paths_get_the_console_headers() {
        for path in ["/console", "/console/", "/console/nope", "/console/login"] {
            assert!(under_console(path), "{path}");
        }
        for path in ["/consoles", "/admin/console", "/", "/api/mcp/x"] {
            assert!(!under_console(path), "{path}");
        }
    }
}
