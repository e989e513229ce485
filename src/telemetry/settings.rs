//! What export runs with: `[telemetry]` first, then the OpenTelemetry
//! SDK's standard environment variables for what it leaves unset, then the
//! SDK's defaults. Resolved once, at start-up, by a pure function of the
//! config and an environment lookup (so tests need no process
//! environment).
//!
//! Variables read: `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER` (`otlp` or
//! `none`), `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `…_PROTOCOL`
//! (`http/protobuf` or `grpc`), `…_HEADERS`, `…_TIMEOUT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`
//! and `OTEL_TRACES_SAMPLER_ARG` (every sampler is parent-based here: a
//! caller's sampled flag is followed; `always_off` is a ratio of 0), and
//! `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//! `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_EXPORT_TIMEOUT`. A value the
//! gateway cannot use (a malformed URL, `http/json`, a ratio outside 0..1)
//! refuses start-up, naming it: an operator who asked for traces learns at
//! once that none would come.

use std::time::Duration;

use super::config::{Protocol, TelemetryConfig};

/// The most spans a queue may be configured to hold.
const MAX_QUEUE_CAP: usize = 1 << 16;

/// Export settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The URL spans are sent to (for `http/protobuf`, ending in `/v1/traces`).
    pub endpoint: String,
    /// The transport.
    pub protocol: Protocol,
    /// Headers of every export request.
    pub headers: Vec<(String, String)>,
    /// Share of new traces recorded.
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// Further resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// Spans waiting for export, at most.
    pub max_queue: usize,
    /// Spans per export request, at most.
    pub max_batch: usize,
    /// Time between exports.
    pub delay: Duration,
    /// Time one export may take.
    pub timeout: Duration,
}

/// A telemetry setting the gateway cannot use.
#[derive(Debug, thiserror::Error)]
#[error("telemetry setting `{name}` = `{value}`: {reason}")]
pub struct SettingsError {
    /// The config key or environment variable.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Why it cannot be used.
    pub reason: &'static str,
}

fn bad(name: &str, value: &str, reason: &'static str) -> SettingsError {
    SettingsError {
        name: name.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// The settings export runs with, or `None` when export is off (see the
/// module doc for the order of sources).
pub fn resolve(
    config: &TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, SettingsError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if config.enabled == Some(false) || var("OTEL_SDK_DISABLED").is_some_and(|v| is_true(&v)) {
        return Ok(None);
    }
    match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => return Err(bad("OTEL_TRACES_EXPORTER", other, "only `otlp` or `none`")),
    }
    let protocol = protocol(config, &var)?;
    let Some(endpoint) = endpoint(config, protocol, &var)? else {
        return Ok(None);
    };
    Ok(Some(Settings {
        endpoint,
        protocol,
        headers: headers(config, &var)?,
        sampling_ratio: sampling_ratio(config, &var)?,
        service_name: config
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "cedargate".into()),
        resource: var("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| pairs("OTEL_RESOURCE_ATTRIBUTES", &v))
            .transpose()?
            .unwrap_or_default(),
        max_queue: count(
            config.max_queue_spans,
            "OTEL_BSP_MAX_QUEUE_SIZE",
            2048,
            &var,
        )?,
        max_batch: count(
            config.max_batch_spans,
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            512,
            &var,
        )?,
        delay: millis(
            config.export_delay_ms,
            &["OTEL_BSP_SCHEDULE_DELAY"],
            5000,
            &var,
        )?,
        timeout: millis(
            config.export_timeout_ms,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
                "OTEL_BSP_EXPORT_TIMEOUT",
            ],
            10_000,
            &var,
        )?,
    }))
}

fn is_true(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

/// The first of `names` the environment sets, with its name.
fn first(names: &[&str], var: &impl Fn(&str) -> Option<String>) -> Option<(String, String)> {
    names
        .iter()
        .find_map(|n| var(n).map(|v| (n.to_string(), v)))
}

fn protocol(
    config: &TelemetryConfig,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Protocol, SettingsError> {
    if let Some(p) = config.protocol {
        return Ok(p);
    }
    let names = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ];
    match first(&names, var) {
        None => Ok(Protocol::HttpProtobuf),
        Some((_, v)) if v.trim() == "http/protobuf" => Ok(Protocol::HttpProtobuf),
        Some((_, v)) if v.trim() == "grpc" => Ok(Protocol::Grpc),
        Some((name, v)) => Err(bad(&name, &v, "only `http/protobuf` or `grpc`")),
    }
}

/// The full URL spans go to, or `None` when nothing names a collector.
fn endpoint(
    config: &TelemetryConfig,
    protocol: Protocol,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, SettingsError> {
    let (name, url, full) = if let Some(url) = config.endpoint.as_deref().filter(|u| !u.is_empty())
    {
        ("telemetry.endpoint".to_string(), url.to_string(), false)
    } else if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_string(), url, true)
    } else if let Some(url) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), url, false)
    } else {
        return Ok(None);
    };
    let url = url.trim().to_string();
    let parsed = reqwest::Url::parse(&url).map_err(|_| bad(&name, &url, "not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad(&name, &url, "needs an http:// or https:// URL"));
    }
    if protocol == Protocol::Grpc || full || url.ends_with("/v1/traces") {
        return Ok(Some(url));
    }
    Ok(Some(format!("{}/v1/traces", url.trim_end_matches('/'))))
}

/// The environment's headers, then the config's (which win on a name).
fn headers(
    config: &TelemetryConfig,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, SettingsError> {
    let names = [
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ];
    let mut all = match first(&names, var) {
        Some((name, v)) => pairs(&name, &v)?,
        None => Vec::new(),
    };
    for (k, v) in &config.headers {
        all.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
        all.push((k.clone(), v.clone()));
    }
    for (k, v) in &all {
        let name_ok = axum::http::HeaderName::from_bytes(k.as_bytes()).is_ok();
        if !name_ok || axum::http::HeaderValue::from_str(v).is_err() {
            return Err(bad("telemetry.headers", k, "not a valid HTTP header"));
        }
    }
    Ok(all)
}

/// `k1=v1,k2=v2` (W3C Baggage form, values percent-decoded).
fn pairs(name: &str, text: &str) -> Result<Vec<(String, String)>, SettingsError> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(name, text, "needs `key=value` pairs"))?;
            let v = percent_decode(v.trim()).ok_or_else(|| bad(name, text, "bad %-escape"))?;
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn sampling_ratio(
    config: &TelemetryConfig,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<f64, SettingsError> {
    let (name, ratio) = if let Some(r) = config.sampling_ratio {
        ("telemetry.sampling_ratio".to_string(), r)
    } else {
        match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            None | Some("always_on" | "parentbased_always_on") => return Ok(1.0),
            Some("always_off" | "parentbased_always_off") => return Ok(0.0),
            Some("traceidratio" | "parentbased_traceidratio") => {
                let Some(arg) = var("OTEL_TRACES_SAMPLER_ARG") else {
                    return Ok(1.0);
                };
                let r = arg
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| bad("OTEL_TRACES_SAMPLER_ARG", &arg, "not a number"))?;
                ("OTEL_TRACES_SAMPLER_ARG".to_string(), r)
            }
            Some(other) => {
                return Err(bad(
                    "OTEL_TRACES_SAMPLER",
                    other,
                    "not a sampler the gateway has",
                ));
            }
        }
    };
    if !(0.0..=1.0).contains(&ratio) {
        return Err(bad(&name, &ratio.to_string(), "must be from 0 to 1"));
    }
    Ok(ratio)
}

fn count(
    configured: Option<usize>,
    env_name: &str,
    default: usize,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<usize, SettingsError> {
    let n = match (configured, var(env_name)) {
        (Some(n), _) => n,
        (None, Some(v)) => v
            .trim()
            .parse()
            .map_err(|_| bad(env_name, &v, "not a count"))?,
        (None, None) => default,
    };
    Ok(n.clamp(1, MAX_QUEUE_CAP))
}

fn millis(
    configured: Option<u64>,
    env_names: &[&str],
    default: u64,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Duration, SettingsError> {
    let ms = match (configured, first(env_names, var)) {
        (Some(ms), _) => ms,
        (None, Some((name, v))) => v
            .trim()
            .parse()
            .map_err(|_| bad(&name, &v, "not a number of milliseconds"))?,
        (None, None) => default,
    };
    Ok(Duration::from_millis(ms.max(1)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use std::collections::HashMap;

    use super::*;

    fn with_env(config: &TelemetryConfig, env: &[(&str, &str)]) -> Option<Settings> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(config, |k| env.get(k).cloned()).unwrap()
    }

    #[test]
    fn off_without_an_endpoint_and_when_disabled() {
        let none = TelemetryConfig::default();
        assert_eq!(with_env(&none, &[]), None);
        let named = TelemetryConfig {
            endpoint: Some("http://c:4318".into()),
            ..TelemetryConfig::default()
        };
        assert!(with_env(&named, &[]).is_some());
        assert_eq!(with_env(&named, &[("OTEL_SDK_DISABLED", "true")]), None);
        assert_eq!(with_env(&named, &[("OTEL_TRACES_EXPORTER", "none")]), None);
        let off = TelemetryConfig {
            enabled: Some(false),
            ..named
        };
        assert_eq!(with_env(&off, &[]), None);
    }

    #[test]
    fn config_wins_over_the_environment_which_fills_the_rest() {
        let config = TelemetryConfig {
            endpoint: Some("http://collector:4318/".into()),
            headers: [("x-key".to_string(), "mine".to_string())].into(),
            ..TelemetryConfig::default()
        };
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=theirs,x-team=a%20b"),
            ("OTEL_SERVICE_NAME", "gw-east"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
        ];
        let s = with_env(&config, &env).unwrap();
        assert_eq!(s.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(
            s.headers,
            [
                ("x-team".to_string(), "a b".to_string()),
                ("x-key".to_string(), "mine".to_string())
            ]
        );
        assert_eq!(s.service_name, "gw-east");
        assert!((s.sampling_ratio - 0.25).abs() < f64::EPSILON);
        assert_eq!(s.max_queue, 100);
        assert_eq!(s.delay, Duration::from_millis(5000));
    }

    #[test]
    fn the_environment_alone_turns_export_on() {
        let s = with_env(
            &TelemetryConfig::default(),
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom")],
        )
        .unwrap();
        assert_eq!(s.endpoint, "http://c:4318/custom");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        let g = with_env(
            &TelemetryConfig::default(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
        .unwrap();
        assert_eq!(g.endpoint, "http://c:4317");
        assert_eq!(g.protocol, Protocol::Grpc);
    }

    #[test]
    fn unusable_values_are_refused_by_name() {
        let named = TelemetryConfig {
            endpoint: Some("http://c:4318".into()),
            ..TelemetryConfig::default()
        };
        for (env, name) in [
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (("OTEL_TRACES_SAMPLER_ARG", "2"), "OTEL_TRACES_SAMPLER_ARG"),
            (("OTEL_TRACES_EXPORTER", "zipkin"), "OTEL_TRACES_EXPORTER"),
        ] {
            let mut vars = vec![env];
            if env.0 == "OTEL_TRACES_SAMPLER_ARG" {
                vars.push(("OTEL_TRACES_SAMPLER", "traceidratio"));
            }
            let vars: HashMap<&str, &str> = vars.into_iter().collect();
            let err = resolve(&named, |k| vars.get(k).map(|v| v.to_string())).unwrap_err();
            assert_eq!(err.name, name, "{err}");
        }
        let bad_url = TelemetryConfig {
            endpoint: Some("collector:4318".into()),
            ..TelemetryConfig::default()
        };
        assert!(resolve(&bad_url, |_| None).is_err());
        let bad_ratio = TelemetryConfig {
            sampling_ratio: Some(1.5),
            ..named
        };
        assert!(resolve(&bad_ratio, |_| None).is_err());
    }
}
