//! An answer sent before its request's body was read whole closes the
//! connection, and says so with `Connection: close`.
//!
//! Many answers come before the body is read, on purpose: a 401 for a
//! missing token at a person's project URL, a 429 for a throttled key, an
//! admin request with a wrong token. hyper keeps such a connection alive
//! only when the rest of the body already sits in its buffer; otherwise it
//! closes the socket right after the answer, without a word in the answer.
//! A client that reuses the connection at once (the official Python SDK
//! asks for the resource metadata right after its 401) then writes into a
//! closing socket and fails with "server disconnected without sending a
//! response". Saying `Connection: close` makes every client open a new
//! connection instead, and the gateway never reads a body it refused.
//! Answers to requests without a body, or whose body was read to its end,
//! keep their connection.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, Request as HttpRequest};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// Adds `Connection: close` to the answer of `req` when its body was not
/// read to the end.
pub async fn close_if_unread(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let body = Body::new(Watched {
        inner: body,
        finished: Arc::clone(&finished),
    });
    let mut resp = next.run(HttpRequest::from_parts(parts, body)).await;
    if !finished.load(Ordering::Acquire) {
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// A request body that notes when it was read to its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
