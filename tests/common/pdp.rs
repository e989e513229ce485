//! Decision applications on a test gateway: a folder of applications made
//! from the shipped example applications (`examples/pdp/`), keys of the PDP role, and
//! requests to the AuthZEN endpoints.

use std::path::{Path, PathBuf};

use cedargate::operator::{self, CreateKey, CreateOrg};
use serde_json::Value;

use super::TestGateway;

/// A folder of applications, each a copy of a fixture.
pub struct Apps {
    /// The folder (`pdp_dir`).
    pub dir: PathBuf,
    _keep: tempfile::TempDir,
}

impl Apps {
    /// A folder holding, for each `(name, fixture)`, a copy of the fixture
    /// application as the application `name`.
    pub fn copied(apps: &[(&str, &str)]) -> Apps {
        let keep = tempfile::tempdir().unwrap();
        let dir = keep.path().join("pdp");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, fixture) in apps {
            copy_tree(&fixture_dir(fixture), &dir.join(name));
        }
        Apps { dir, _keep: keep }
    }

    /// An application's folder.
    pub fn app(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A fixture application's folder.
pub fn fixture_dir(name: &str) -> PathBuf {
    super::repo().join("examples/pdp").join(name)
}

/// Copies a folder and everything inside it.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

impl TestGateway {
    /// A key of the PDP role of org `org` (made if new) for `apps`.
    pub async fn pdp_key(&self, org: &str, apps: &[&str]) -> String {
        let org = org.to_string();
        let apps: Vec<String> = apps.iter().map(|a| a.to_string()).collect();
        self.gw
            .store
            .read(move |c| {
                if cedargate::store::tenants::get_org(c, &org)?.is_none() {
                    operator::create_org(
                        c,
                        CreateOrg {
                            id: org.clone(),
                            name: format!("Org {org}"),
                            plan: None,
                            entitlements: None,
                        },
                    )?;
                }
                let (_, secret) = operator::create_key(
                    c,
                    &org,
                    CreateKey {
                        label: "pep".into(),
                        pdp_apps: apps,
                    },
                )?;
                Ok(secret)
            })
            .await
            .unwrap()
    }

    /// POSTs `body` (text) to `path` with `key` and extra headers: status,
    /// the answer's headers and its JSON (`Null` when empty).
    pub async fn pdp_raw(
        &self,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut req = self.http.post(format!("{}{path}", self.base)).body(body);
        if !headers
            .iter()
            .any(|(h, _)| h.eq_ignore_ascii_case("content-type"))
        {
            req = req.header("content-type", "application/json");
        }
        if let Some(k) = key {
            req = req.header("authorization", format!("Bearer {k}"));
        }
        for (h, v) in headers {
            req = req.header(*h, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, headers, json)
    }

    /// POSTs JSON to `path` with `key`: status and answer.
    pub async fn pdp(&self, path: &str, key: &str, body: Value) -> (u16, Value) {
        let (status, _, json) = self.pdp_raw(path, Some(key), &[], body.to_string()).await;
        (status, json)
    }

    /// GETs `path` (no credential): status and answer.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}
