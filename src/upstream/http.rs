//! The HTTP client behind every message the gateway POSTs to an upstream.
//!
//! A POST to an upstream that no proxy intercepts goes straight through
//! hyper-util's pooled client (kept-alive connections, at most
//! `max_idle` idle ones per host, TLS by the platform's library as
//! reqwest does it). reqwest wraps that same client in layers this path
//! never uses (redirects are off for upstreams, a POST is never retried)
//! that still cost on every request: its request builder, its redirect
//! layer parsing the URL again, its retry layer cloning the headers, and
//! the futures of each layer moved by value. In a profile of proxied
//! calls (callgrind, 500 calls) reqwest's own part was about two fifths of
//! the upstream client's instructions.
//!
//! An upstream the environment routes through a proxy (`HTTP_PROXY`,
//! `HTTPS_PROXY`, `ALL_PROXY`, minus `NO_PROXY`, read once at start as
//! reqwest reads them) is still POSTed to through reqwest, which speaks to
//! proxies. The answer comes back as a `reqwest::Response` either way, so
//! reading it (the size bound, event streams) has one implementation.
//! Everything else (the descriptor, event-stream GETs) stays on reqwest.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, Request, Uri};
use bytes::Bytes;
use http_body_util::Full;
use hyper_tls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::wire::{ClientError, transport};

/// Outbound HTTP for upstreams: the direct POST client and reqwest.
#[derive(Clone)]
pub struct Http {
    reqwest: reqwest::Client,
    direct: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    proxies: Arc<Matcher>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http").finish_non_exhaustive()
    }
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// reqwest's client.
    #[error("{0}")]
    Reqwest(#[from] reqwest::Error),
    /// The platform's TLS library.
    #[error("{0}")]
    Tls(#[from] native_tls::Error),
}

impl Http {
    /// Both clients: at most `max_idle` idle connections per host, TCP
    /// connects bounded by `connect_timeout`, no redirects followed.
    pub fn new(max_idle: usize, connect_timeout: Duration) -> Result<Http, HttpError> {
        let reqwest = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(max_idle)
            .connect_timeout(connect_timeout)
            .build()?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false); // `https` URLs go through TLS below
        tcp.set_nodelay(true); // as reqwest: a message is one small write
        tcp.set_connect_timeout(Some(connect_timeout));
        let tls = native_tls::TlsConnector::new()?;
        let direct = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle)
            .pool_timer(TokioTimer::new())
            .build(HttpsConnector::from((tcp, tls.into())));
        Ok(Http {
            reqwest,
            direct,
            proxies: Arc::new(Matcher::from_system()),
        })
    }

    /// reqwest's client, for what is not a POST to an upstream.
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.reqwest
    }

    /// POSTs `body` with `headers` to `url`.
    pub async fn post(
        &self,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, ClientError> {
        let uri: Uri = url.as_str().parse().map_err(|e| transport(&e))?;
        if self.proxies.intercept(&uri).is_some() {
            return self
                .reqwest
                .post(url.clone())
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| transport(&e));
        }
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = axum::http::Method::POST;
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        let resp = self.direct.request(req).await.map_err(|e| transport(&e))?;
        let (parts, body) = resp.into_parts();
        Ok(axum::http::Response::from_parts(parts, reqwest::Body::wrap(body)).into())
    }
}
