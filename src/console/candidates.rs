//! Candidate policy sets for replay and what-if: text pasted in the
//! console (one file, validated against the active set's effective schema,
//! exactly as a file of the policy directory would be), or a subdirectory
//! of `console.candidates_dir` on the server (loaded like
//! `cedargate audit replay --policies DIR`). Only those subdirectories can
//! be named, never an arbitrary path. A what-if may also ask a policy set
//! the trail recorded, by its hash (`source=recorded`): a proof's refused
//! candidate is recorded there, so an auditor can ask it a counterexample.
//!
//! A form that names a decision application (`application`) asks for a
//! candidate of that application instead: `live` is its active set, pasted
//! text is validated against its active schema, and a directory is loaded
//! as one of its folders (`schema.cedarschema`, `policies/`), like
//! `cedargate audit replay --app APP --policies DIR`.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::error::ConsoleError;
use crate::gateway::Gateway;
use crate::policy::application::AppSet;
use crate::policy::{PolicyBundle, PolicyFile};

/// The name a pasted candidate is validated under.
pub const PASTED_FILE: &str = "console-candidate.cedar";

/// Which set a form asks for.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CandidateForm {
    /// `live`, `text`, `dir` or `recorded`.
    #[serde(default)]
    pub source: String,
    /// The hash of a policy set the trail recorded (`source=recorded`).
    #[serde(default)]
    pub policy_hash: String,
    /// The pasted policies (`source=text`).
    #[serde(default)]
    pub policy_text: String,
    /// A subdirectory of the candidates directory (`source=dir`).
    #[serde(default)]
    pub candidate_dir: String,
    /// A decision application whose candidate this is (empty: the
    /// gateway's set).
    #[serde(default)]
    pub application: String,
}

impl CandidateForm {
    /// The decision application the form names, if any.
    pub fn application(&self) -> Option<&str> {
        Some(self.application.trim()).filter(|a| !a.is_empty())
    }
}

/// The directory whose subdirectories are the offered candidates.
pub fn root(gw: &Gateway) -> PathBuf {
    gw.config
        .console
        .candidates_dir
        .clone()
        .unwrap_or_else(|| gw.config.data_dir.join("candidates"))
}

/// The offered candidate directories, by name.
pub fn offered(gw: &Gateway) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root(gw))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| crate::ids::validate_id("candidate", n).is_ok() && !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// The live set's files as one text, each after a `// file:` line: what
/// the candidate textarea starts from.
pub fn live_text(bundle: &PolicyBundle) -> String {
    bundle
        .files
        .iter()
        .map(|f| format!("// file: {}\n{}\n", f.path, f.text.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The active set of the decision application `name`.
pub fn app_set(gw: &Gateway, name: &str) -> Result<Arc<AppSet>, ConsoleError> {
    gw.pdp.app(name).and_then(|a| a.active()).ok_or_else(|| {
        ConsoleError::BadRequest(format!(
            "`{name}` is not a decision application with an active set"
        ))
    })
}

/// A subdirectory of the candidates directory the form names, refused
/// when it is not one.
fn offered_dir(gw: &Gateway, form: &CandidateForm) -> Result<(PathBuf, String), ConsoleError> {
    let name = form.candidate_dir.trim().to_string();
    if !offered(gw).contains(&name) {
        return Err(ConsoleError::BadRequest(format!(
            "`{name}` is not a candidate directory (subdirectories of `{}`)",
            root(gw).display()
        )));
    }
    Ok((root(gw).join(&name), name))
}

/// What the form names, and how to describe it.
pub async fn load(
    gw: &Arc<Gateway>,
    form: &CandidateForm,
) -> Result<(Arc<PolicyBundle>, String), ConsoleError> {
    if let Some(app) = form.application() {
        return load_app(gw, app, form).await;
    }
    match form.source.as_str() {
        "live" => Ok((gw.pep.current(), "the active set".into())),
        "text" => {
            let live = gw.pep.current();
            let files = vec![PolicyFile {
                path: PASTED_FILE.into(),
                text: form.policy_text.clone(),
            }];
            let bundle = tokio::task::spawn_blocking(move || {
                crate::policy::load::bundle_from_sources(
                    &live.schema_path,
                    &live.schema_text,
                    files,
                )
            })
            .await
            .map_err(|_| ConsoleError::Render)?;
            loaded(bundle, "pasted text".into())
        }
        "dir" => {
            let (dir, name) = offered_dir(gw, form)?;
            let gw2 = Arc::clone(gw);
            let bundle = tokio::task::spawn_blocking(move || {
                crate::policy::load::load_bundle_with_tools(
                    &gw2.config.schema_file,
                    &dir,
                    &gw2.lifecycle.tools(),
                )
            })
            .await
            .map_err(|_| ConsoleError::Render)?;
            loaded(bundle, format!("directory {name}"))
        }
        "recorded" => recorded(gw, form.policy_hash.trim()).await,
        other => Err(ConsoleError::BadRequest(format!(
            "`source` must be `live`, `text`, `dir` or `recorded`, not `{other}`"
        ))),
    }
}

/// The policy set the trail recorded under `hash`, exactly as it loaded.
async fn recorded(gw: &Gateway, hash: &str) -> Result<(Arc<PolicyBundle>, String), ConsoleError> {
    if gw.pep.current().hash == hash {
        return Ok((gw.pep.current(), "the active set".into()));
    }
    let h = hash.to_string();
    let bundle = gw
        .store
        .read(move |c| crate::replay::recorded_bundle(c, &h))
        .await?
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    Ok((Arc::new(bundle), "a policy set the trail recorded".into()))
}

/// A candidate of the decision application `app` (rules in the module
/// doc).
async fn load_app(
    gw: &Arc<Gateway>,
    app: &str,
    form: &CandidateForm,
) -> Result<(Arc<PolicyBundle>, String), ConsoleError> {
    let active = app_set(gw, app)?;
    match form.source.as_str() {
        "live" => Ok((
            Arc::clone(&active.bundle),
            format!("the active set of application {app}"),
        )),
        "text" => {
            let files = vec![PolicyFile {
                path: PASTED_FILE.into(),
                text: form.policy_text.clone(),
            }];
            let bundle = tokio::task::spawn_blocking(move || {
                let b = &active.bundle;
                crate::policy::load::bundle_from_sources(&b.schema_path, &b.schema_text, files)
            })
            .await
            .map_err(|_| ConsoleError::Render)?;
            loaded(bundle, format!("application {app}: pasted text"))
        }
        "dir" => {
            let (dir, name) = offered_dir(gw, form)?;
            let app2 = app.to_string();
            let set = tokio::task::spawn_blocking(move || {
                crate::policy::application::load::load_app(&app2, &dir)
            })
            .await
            .map_err(|_| ConsoleError::Render)?;
            set.map(|s| (s.bundle, format!("application {app}: directory {name}")))
                .map_err(refused)
        }
        other => Err(ConsoleError::BadRequest(format!(
            "`source` must be `live`, `text` or `dir`, not `{other}`"
        ))),
    }
}

fn loaded(
    bundle: Result<PolicyBundle, crate::policy::PolicyLoadError>,
    label: String,
) -> Result<(Arc<PolicyBundle>, String), ConsoleError> {
    bundle.map(|b| (Arc::new(b), label)).map_err(refused)
}

fn refused(e: crate::policy::PolicyLoadError) -> ConsoleError {
    ConsoleError::BadRequest(format!("the candidate set does not load:\n{}", e.render()))
}
