//! The base URL clients use to reach the gateway: `public_url` when set
//! (behind a proxy the scheme and host come from it), else the `Host` the
//! client used when it is an allowed one, else the listen address. The
//! discovery document, the protected-resource metadata and the audience a
//! token must name all use it.

use axum::http::{HeaderMap, header};

use crate::gateway::Gateway;

/// The base URL to advertise: the configured public URL, else the `Host`
/// the client used when it is an allowed one, else the listen address.
pub fn base_url(gw: &Gateway, headers: &HeaderMap) -> String {
    if gw.config.public_url.is_some() {
        return gw.config.base_url();
    }
    let allowed = &gw.config.http.allowed_hosts;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            let name = host_name(h);
            allowed
                .iter()
                .any(|a| a == "*" || a.eq_ignore_ascii_case(name))
        });
    match host {
        Some(h) => format!("http://{h}"),
        None => gw.config.base_url(),
    }
}

/// `host:port` → `host` (IPv6 in brackets kept with brackets).
pub fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').and_then(|i| host.get(..=i)).unwrap_or(host);
    }
    host.split(':').next().unwrap_or(host)
}
