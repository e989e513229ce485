//! The web console as a signed-in browser: sign-in, its session cookie
//! and CSRF token, form posts, and waiting for a replay to finish.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The value of the first `name="csrf"` field of a page.
pub fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..].split('"').next().unwrap().to_string()
}

pub fn cookie_named(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with(&format!("{name}=")))
}

/// A signed-in browser.
pub struct Console {
    pub base: String,
    pub http: reqwest::Client,
    pub cookie: String,
    pub csrf: String,
    pub set_cookie: String,
}

impl Console {
    pub async fn sign_in(base: &str, token: &str) -> Console {
        let http = client();
        let page = http
            .get(format!("{base}/console/login"))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let login_cookie = cookie_named(&page, "cg_console_login").unwrap();
        let pair = login_cookie.split(';').next().unwrap().to_string();
        let csrf = csrf_of(&page.text().await.unwrap());
        let resp = http
            .post(format!("{base}/console/login"))
            .header(COOKIE, &pair)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token), ("csrf", &csrf)]))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{token}");
        let set_cookie = cookie_named(&resp, "cg_console").expect("a session cookie");
        let cookie = set_cookie.split(';').next().unwrap().to_string();
        let mut c = Console {
            base: base.into(),
            http,
            cookie,
            csrf: String::new(),
            set_cookie,
        };
        let (status, html) = c.get("/console").await;
        assert_eq!(status, 200, "{html}");
        c.csrf = csrf_of(&html);
        c
    }

    /// Another handle on the same sign-in.
    pub fn clone_sign_in(&self) -> Console {
        Console {
            base: self.base.clone(),
            http: self.http.clone(),
            cookie: self.cookie.clone(),
            csrf: self.csrf.clone(),
            set_cookie: self.set_cookie.clone(),
        }
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .unwrap();
        (resp.status(), resp.text().await.unwrap())
    }

    /// POSTs `pairs` plus this sign-in's CSRF token.
    pub async fn post(&self, path: &str, pairs: &[(&str, &str)]) -> reqwest::Response {
        let mut all = pairs.to_vec();
        all.push(("csrf", &self.csrf));
        self.post_raw(path, &all).await
    }

    pub async fn post_raw(&self, path: &str, pairs: &[(&str, &str)]) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form(pairs))
            .send()
            .await
            .unwrap()
    }
}

/// Polls a replay's page until it is no longer running.
pub async fn finished(c: &Console, job: &str) -> String {
    for _ in 0..200 {
        let (status, html) = c.get(job).await;
        assert_eq!(status, 200, "{html}");
        if !html.contains("data-state=\"running\"") {
            return html;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replay did not finish");
}

pub fn window() -> (String, String) {
    let now = time::OffsetDateTime::now_utc();
    let fmt = |t: time::OffsetDateTime| cedargate::ids::rfc3339(t);
    (
        fmt(now - time::Duration::hours(1)),
        fmt(now + time::Duration::minutes(5)),
    )
}
