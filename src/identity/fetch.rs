//! Requests to identity providers: discovery documents, key sets and
//! introspection, each bounded in time (`auth.fetch_timeout_ms`) and size
//! (`auth.max_fetch_bytes`). A provider's answers are hostile input like any
//! other: an oversized or malformed document is an error, never a panic.
//!
//! Discovery tries OpenID Connect's `/.well-known/openid-configuration`,
//! then RFC 8414's `/.well-known/oauth-authorization-server` (path
//! inserted for an issuer with a path), and refuses a document whose
//! `issuer` is not the configured one (mix-up defense). A document found is
//! kept for the process's life: its endpoints do not move under a running
//! provider, and the key set has its own lifetime.
//!
//! Traces: each request is an HTTP client span (`GET` or `POST`, with
//! `http.request.method`, `url.full` without its query, `server.*`,
//! `http.response.status_code`; a 4xx/5xx, a failure or an unusable
//! answer sets `error.type`) in the trace of the work that made it, and
//! carries that span's `traceparent`. Work outside any request (a
//! background token refresh) makes no span.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{CACHE_CONTROL, HeaderMap};
use serde_json::Value;

use crate::telemetry::{ClientFacts, ClientSpan};

/// Why a provider request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Connection, timeout or TLS failure.
    #[error("request to `{url}` failed: {reason}")]
    Transport { url: String, reason: String },
    /// A status other than 200.
    #[error("`{url}` answered HTTP {status}")]
    Status { url: String, status: u16 },
    /// More than `auth.max_fetch_bytes`.
    #[error("`{url}` answered more than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Not a JSON object, or missing what it must hold.
    #[error("`{url}` answered an unusable document: {reason}")]
    Invalid { url: String, reason: String },
}

/// An authorization server's metadata (the parts the gateway uses).
#[derive(Debug, Clone)]
pub struct ProviderMetadata {
    url: String,
    doc: Value,
}

impl ProviderMetadata {
    /// A string endpoint of the document.
    pub fn endpoint(&self, name: &str) -> Option<String> {
        self.doc.get(name)?.as_str().map(str::to_string)
    }

    /// Whether a boolean of the document is `true` (absent: false).
    pub fn flag(&self, name: &str) -> bool {
        self.doc.get(name).and_then(Value::as_bool) == Some(true)
    }

    /// The key set's URL (required).
    pub fn jwks_uri(&self) -> Result<String, FetchError> {
        self.endpoint("jwks_uri")
            .ok_or_else(|| FetchError::Invalid {
                url: self.url.clone(),
                reason: "no `jwks_uri`".into(),
            })
    }
}

/// The HTTP client of every provider request, and the discovered metadata.
#[derive(Debug)]
pub struct Fetcher {
    http: reqwest::Client,
    max_bytes: usize,
    metadata: Mutex<HashMap<String, Arc<ProviderMetadata>>>,
}

impl Fetcher {
    /// A fetcher bounded by `timeout` and `max_bytes`.
    pub fn new(timeout: Duration, max_bytes: usize) -> Result<Fetcher, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()?;
        Ok(Fetcher {
            http,
            max_bytes,
            metadata: Mutex::new(HashMap::new()),
        })
    }

    /// The issuer's metadata, discovered once.
    pub async fn metadata(&self, issuer: &str) -> Result<Arc<ProviderMetadata>, FetchError> {
        if let Some(found) = self
            .metadata
            .lock()
            .ok()
            .and_then(|m| m.get(issuer).cloned())
        {
            return Ok(found);
        }
        let mut last = None;
        for url in discovery_urls(issuer) {
            match self.get_json(&url).await {
                Ok((doc, _)) => {
                    let found = Arc::new(checked_metadata(issuer, url, doc)?);
                    if let Ok(mut m) = self.metadata.lock() {
                        m.insert(issuer.to_string(), found.clone());
                    }
                    return Ok(found);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| FetchError::Invalid {
            url: issuer.to_string(),
            reason: "not an http(s) issuer".into(),
        }))
    }

    /// GETs a JSON object, with the `max-age` its `Cache-Control` gives.
    pub async fn get_json(&self, url: &str) -> Result<(Value, Option<Duration>), FetchError> {
        let span = traced("GET", url);
        let resp = send(span.as_ref(), url, self.http.get(url)).await?;
        let max_age = max_age(resp.headers());
        let body = self.json_body(url, resp).await;
        Ok((finished(span.as_ref(), body)?, max_age))
    }

    /// GETs a JSON object with a bearer token (an OpenID userinfo request).
    pub async fn get_json_bearer(&self, url: &str, token: &str) -> Result<Value, FetchError> {
        let span = traced("GET", url);
        let resp = send(span.as_ref(), url, self.http.get(url).bearer_auth(token)).await?;
        let body = self.json_body(url, resp).await;
        finished(span.as_ref(), body)
    }

    /// POSTs a form with HTTP basic client authentication; the JSON answer.
    pub async fn post_form(
        &self,
        url: &str,
        client: (&str, Option<&str>),
        form: &[(&str, &str)],
    ) -> Result<Value, FetchError> {
        let span = traced("POST", url);
        let resp = self.send_form(span.as_ref(), url, client, form).await?;
        let body = self.json_body(url, resp).await;
        finished(span.as_ref(), body)
    }

    /// POSTs a form like [`Fetcher::post_form`]; the status and the JSON
    /// object answered with it, whatever the status (an OAuth endpoint
    /// explains a refusal in a JSON body, RFC 6749 §5.2). A refusal whose
    /// body is not such an object is [`FetchError::Status`].
    pub async fn post_form_answer(
        &self,
        url: &str,
        client: (&str, Option<&str>),
        form: &[(&str, &str)],
    ) -> Result<(u16, Value), FetchError> {
        let span = traced("POST", url);
        let resp = self.send_form(span.as_ref(), url, client, form).await?;
        let status = resp.status().as_u16();
        let doc = self.json_object(url, resp).await;
        // A refusal's span is already typed by its status code.
        let doc = if status == 200 {
            finished(span.as_ref(), doc)
        } else {
            doc
        };
        match doc {
            Ok(doc) => Ok((status, doc)),
            // A refusal without a usable body is told by its status.
            Err(FetchError::Invalid { .. } | FetchError::TooLarge { .. }) if status != 200 => {
                Err(FetchError::Status {
                    url: url.to_string(),
                    status,
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn send_form(
        &self,
        span: Option<&ClientSpan>,
        url: &str,
        client: (&str, Option<&str>),
        form: &[(&str, &str)],
    ) -> Result<reqwest::Response, FetchError> {
        let request = self
            .http
            .post(url)
            .basic_auth(client.0, client.1)
            .form(form);
        send(span, url, request).await
    }

    /// The body of a 200 answer as a JSON object, read within the bound.
    async fn json_body(&self, url: &str, resp: reqwest::Response) -> Result<Value, FetchError> {
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(FetchError::Status {
                url: url.to_string(),
                status,
            });
        }
        self.json_object(url, resp).await
    }

    /// The body as a JSON object, read within the bound.
    async fn json_object(
        &self,
        url: &str,
        mut resp: reqwest::Response,
    ) -> Result<Value, FetchError> {
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| transport(url, &e))? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(FetchError::TooLarge {
                    url: url.to_string(),
                    limit: self.max_bytes,
                });
            }
            body.extend_from_slice(&chunk);
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(doc @ Value::Object(_)) => Ok(doc),
            Ok(_) => Err(invalid(url, "not a JSON object")),
            Err(e) => Err(invalid(url, &e.to_string())),
        }
    }
}

/// The client span of a provider request, when the work it serves is
/// traced (a request's, or a person URL's authentication).
fn traced(method: &'static str, url: &str) -> Option<ClientSpan> {
    crate::telemetry::client_span(&ClientFacts::Http { method, url })
}

/// Sends `request`, carrying the span's trace context, and notes the
/// answer's status (or the failure) on the span.
async fn send(
    span: Option<&ClientSpan>,
    url: &str,
    mut request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, FetchError> {
    if let Some((traceparent, tracestate)) = span.and_then(ClientSpan::trace_headers) {
        request = request.header("traceparent", traceparent);
        if let Some(state) = tracestate {
            request = request.header("tracestate", state);
        }
    }
    let sent = request.send().await;
    if let Some(span) = span {
        match &sent {
            Ok(resp) => span.http_status(resp.status().as_u16()),
            Err(e) if e.is_timeout() => span.failed("timeout", &e.to_string()),
            Err(e) => span.failed("transport", &e.to_string()),
        }
    }
    sent.map_err(|e| transport(url, &e))
}

/// `body`, with an unusable or oversized one noted on the span.
fn finished<T>(span: Option<&ClientSpan>, body: Result<T, FetchError>) -> Result<T, FetchError> {
    if let (Some(span), Err(e)) = (span, &body) {
        let kind = match e {
            FetchError::TooLarge { .. } => Some("too_large"),
            FetchError::Invalid { .. } => Some("invalid_document"),
            FetchError::Transport { .. } => Some("transport"),
            // Already typed by its status code.
            FetchError::Status { .. } => None,
        };
        if let Some(kind) = kind {
            span.failed(kind, &e.to_string());
        }
    }
    body
}

/// Where an issuer's metadata may be: OpenID Connect's location, then RFC
/// 8414's (path inserted after the well-known prefix).
fn discovery_urls(issuer: &str) -> Vec<String> {
    let Ok(url) = reqwest::Url::parse(issuer) else {
        return Vec::new();
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Vec::new();
    }
    let trimmed = issuer.trim_end_matches('/');
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    vec![
        format!("{trimmed}/.well-known/openid-configuration"),
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
    ]
}

/// The document, when it names `issuer` exactly.
fn checked_metadata(issuer: &str, url: String, doc: Value) -> Result<ProviderMetadata, FetchError> {
    let named = doc.get("issuer").and_then(Value::as_str);
    if named != Some(issuer) {
        let reason = format!(
            "its `issuer` is {} and not the configured `{issuer}`",
            named.map_or("missing".to_string(), |n| format!(
                "`{}`",
                n.chars().take(200).collect::<String>()
            ))
        );
        return Err(FetchError::Invalid { url, reason });
    }
    Ok(ProviderMetadata { url, doc })
}

/// `max-age` of a `Cache-Control` header.
fn max_age(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(CACHE_CONTROL)?.to_str().ok()?;
    value.split(',').find_map(|directive| {
        let (name, secs) = directive.trim().split_once('=')?;
        name.eq_ignore_ascii_case("max-age")
            .then(|| secs.trim().parse().ok().map(Duration::from_secs))?
    })
}

fn transport(url: &str, e: &reqwest::Error) -> FetchError {
    FetchError::Transport {
        url: url.to_string(),
        reason: e.to_string(),
    }
}

fn invalid(url: &str, reason: &str) -> FetchError {
    FetchError::Invalid {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_tries_openid_then_rfc8414_with_the_path_inserted() {
        assert_eq!(
            discovery_urls("https://idp.example.com/tenant/v2/"),
            vec![
                "https://idp.example.com/tenant/v2/.well-known/openid-configuration",
                "https://idp.example.com/.well-known/oauth-authorization-server/tenant/v2",
            ]
        );
        assert!(discovery_urls("file:///etc/passwd").is_empty());
    }

    #[test]
    fn a_document_for_another_issuer_is_refused() {
        let doc = serde_json::json!({"issuer": "https://evil.example", "jwks_uri": "x"});
        let err = checked_metadata("https://idp.example", "u".into(), doc).unwrap_err();
        assert!(err.to_string().contains("https://evil.example"), "{err}");
    }

    #[test]
    fn max_age_is_read_from_cache_control() {
        let mut h = HeaderMap::new();
        h.insert(
            CACHE_CONTROL,
            "public, max-age=300, must-revalidate".parse().unwrap(),
        );
        assert_eq!(max_age(&h), Some(Duration::from_secs(300)));
        h.insert(CACHE_CONTROL, "no-store".parse().unwrap());
        assert_eq!(max_age(&h), None);
    }
}
