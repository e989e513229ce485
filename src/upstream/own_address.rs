//! Whether an upstream URL reaches the gateway itself.
//!
//! A gateway registered as its own upstream lists its own tools under a
//! prefix, calls itself for each of them (every call twice the work, and
//! with a credential that reaches an org's session, tools of that session
//! under another name), and a refresh of it lists what the previous one
//! added. Registration (and the descriptor's endpoint) is refused when the
//! URL names any of the gateway's own listen addresses:
//!
//! - the origin of its `public_url` (scheme, host, port), when set;
//! - the listen port on a host that is, or resolves to, a loopback address
//!   (`localhost`, `*.localhost`, `127.0.0.0/8`, `::1`), an unspecified
//!   one (`0.0.0.0`, `::`), the bound address itself, or, when the gateway
//!   listens on every interface, any address of this machine (an address
//!   a socket can be bound to here is one of its own).
//!
//! Not caught: the gateway behind a proxy or a forwarded port under
//! another origin; such a loop is bounded by the upstream timeout and the
//! caps like any slow upstream.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How long a host name is looked up for (the registration's listing
/// would resolve it again anyway).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Why `url` is the gateway itself, if it is.
pub async fn reason(
    url: &reqwest::Url,
    listen: SocketAddr,
    public_url: Option<&str>,
) -> Option<String> {
    if let Some(public) = public_url.and_then(|p| reqwest::Url::parse(p).ok())
        && public.origin() == url.origin()
    {
        return Some(format!(
            "`{}` is this gateway's own public URL",
            url.origin().ascii_serialization()
        ));
    }
    let port = url.port_or_known_default()?;
    if port != listen.port() {
        return None;
    }
    let host = url.host_str()?;
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Some(own_port(host, port));
    }
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<IpAddr> = match literal.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let lookup = tokio::net::lookup_host((host, port));
            match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                // A name that does not resolve here is not reached from here.
                _ => Vec::new(),
            }
        }
    };
    addrs
        .iter()
        .any(|ip| is_own(*ip, listen.ip()))
        .then(|| own_port(host, port))
}

fn own_port(host: &str, port: u16) -> String {
    format!("`{host}:{port}` is this gateway's own listen address")
}

/// Whether `ip` is an address of this gateway listening on `listen`.
fn is_own(ip: IpAddr, listen: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() || ip == listen {
        return true;
    }
    listen.is_unspecified() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(u: &str) -> reqwest::Url {
        reqwest::Url::parse(u).unwrap_or_else(|_| unreachable!("test URL"))
    }

    #[tokio::test]
    async fn every_own_address_is_recognized() {
        let listen: SocketAddr = "127.0.0.1:4100".parse().unwrap_or_else(|_| unreachable!());
        let public = Some("https://gw.example.com");
        for own in [
            "http://127.0.0.1:4100/mcp",
            "http://127.1.2.3:4100/",
            "http://localhost:4100/api/mcp/x",
            "http://LOCALHOST.:4100/",
            "http://app.localhost:4100/",
            "http://[::1]:4100/",
            "http://[::ffff:127.0.0.1]:4100/",
            "http://0.0.0.0:4100/",
            "https://gw.example.com/api/mcp/s",
            "https://gw.example.com:443/",
        ] {
            assert!(reason(&url(own), listen, public).await.is_some(), "{own}");
        }
        for other in [
            "http://127.0.0.1:4101/mcp",
            "http://localhost:80/",
            "http://gw.example.com/",
            "https://gw.example.com:8443/",
            "http://192.0.2.1:4100/",
        ] {
            assert!(
                reason(&url(other), listen, public).await.is_none(),
                "{other}"
            );
        }
        let everywhere: SocketAddr = "0.0.0.0:4100".parse().unwrap_or_else(|_| unreachable!());
        assert!(
            reason(&url("http://192.0.2.1:4100/"), everywhere, None)
                .await
                .is_none()
        );
    }
}
