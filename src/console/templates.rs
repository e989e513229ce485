//! The console's templates (compiled into the binary: `cargo run` stays
//! the only step) and its two static assets. Rendering is `minijinja`
//! with HTML auto-escaping: every value a page shows is escaped; the
//! charts are drawn by the templates from numbers ([`super::chart`]).

use std::sync::LazyLock;

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use minijinja::Environment;
use serde::Serialize;

/// A page that could not be rendered (logged where it happened).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the page could not be rendered")]
pub struct RenderError;

/// Every template, by name.
const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("error.html", include_str!("templates/error.html")),
    ("login.html", include_str!("templates/login.html")),
    ("signed_in.html", include_str!("templates/signed_in.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("decision.html", include_str!("templates/decision.html")),
    ("replay.html", include_str!("templates/replay.html")),
    ("replay_job.html", include_str!("templates/replay_job.html")),
    ("whatif.html", include_str!("templates/whatif.html")),
    ("policies.html", include_str!("templates/policies.html")),
    ("peers.html", include_str!("templates/peers.html")),
];

static PAGES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in TEMPLATES {
        if let Err(e) = env.add_template(name, source) {
            tracing::error!(template = name, error = %e, "console template does not compile");
        }
    }
    env
});

/// Renders page `name` with `ctx`.
pub fn render<E: From<RenderError>>(name: &str, ctx: impl Serialize) -> Result<Html<String>, E> {
    let template = PAGES.get_template(name).map_err(|e| {
        tracing::error!(template = name, error = %e, "console template missing");
        E::from(RenderError)
    })?;
    template.render(ctx).map(Html).map_err(|e| {
        tracing::error!(template = name, error = %e, "console page does not render");
        E::from(RenderError)
    })
}

/// The error page (plain text when even it cannot be rendered).
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let ctx = minijinja::context! { status => status.as_u16(), reason => status.canonical_reason(), message };
    match render::<RenderError>("error.html", ctx) {
        Ok(html) => (status, html).into_response(),
        Err(_) => (status, message.to_string()).into_response(),
    }
}

/// `GET /console/assets/console.css`.
pub async fn stylesheet() -> impl IntoResponse {
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        include_str!("assets/console.css"),
    )
}

/// `GET /console/assets/console.js`: progressive enhancement only; every
/// page reads the same without it.
pub async fn script() -> impl IntoResponse {
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/javascript; charset=utf-8"),
        )],
        include_str!("assets/console.js"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_compiles() {
        for (name, _) in TEMPLATES {
            assert!(PAGES.get_template(name).is_ok(), "{name}");
        }
    }
}
