//! Loading one decision application from its folder: the schema (one
//! namespace, [`super::vocabulary`]), every `policies/*.cedar` file
//! (parsed per file, `@id` required and unique, strictly validated: the
//! same loader as the gateway's own set), and `entities.json` parsed and
//! type-checked against the schema. The policy tests are run by the
//! lifecycle that activates the set (`crate::pdp::lifecycle`), as for the
//! gateway's set.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use cedar_policy::{Entities, SchemaFragment};
use sha2::{Digest, Sha256};

use super::super::load::{bundle_from_sources, read_policy_files};
use super::super::{PolicyBundle, PolicyLoadError, SourceDiagnostic};
use super::vocabulary::Vocabulary;
use super::{AppData, AppSet, ENTITIES_FILE, POLICIES_DIR, SCHEMA_FILE};

/// Loads the application `name` from `dir`: schema, policies, entity data.
pub fn load_app(name: &str, dir: &Path) -> Result<AppSet, PolicyLoadError> {
    let schema_path = dir.join(SCHEMA_FILE);
    let schema_file = schema_path.display().to_string();
    let schema_text = std::fs::read_to_string(&schema_path)
        .map_err(|e| PolicyLoadError::single(&schema_file, format!("cannot read schema: {e}")))?;
    let vocabulary = vocabulary(&schema_file, &schema_text)?;
    let files = read_policy_files(&dir.join(POLICIES_DIR))?;
    let bundle = bundle_from_sources(&schema_file, &schema_text, files)?;
    let entities_path = dir.join(ENTITIES_FILE);
    let text = entities_text(&entities_path)?;
    let data = entity_data(&entities_path.display().to_string(), text, &bundle.schema)?;
    Ok(AppSet {
        name: name.to_string(),
        bundle: Arc::new(bundle),
        vocabulary,
        data,
    })
}

/// The application `name` as a set decided with `bundle` on the entity
/// data `entities` (a recorded snapshot, say): what replay and the
/// what-if decide recorded requests under. `origin` names the data in
/// errors.
pub fn with_data(
    name: &str,
    bundle: Arc<PolicyBundle>,
    entities: &str,
    origin: &str,
) -> Result<AppSet, PolicyLoadError> {
    let vocabulary = vocabulary(&bundle.schema_path, &bundle.schema_text)?;
    let data = entity_data(origin, entities.to_string(), &bundle.schema)?;
    Ok(AppSet {
        name: name.to_string(),
        bundle,
        vocabulary,
        data,
    })
}

/// The names the schema declares; a schema that does not parse is left to
/// the policy loader, which locates its errors.
fn vocabulary(schema_file: &str, schema_text: &str) -> Result<Vocabulary, PolicyLoadError> {
    let Ok((fragment, _)) = SchemaFragment::from_cedarschema_str(schema_text) else {
        return Ok(Vocabulary::default());
    };
    let json = fragment.to_json_value().map_err(|e| {
        PolicyLoadError::single(schema_file, format!("cannot read the schema: {e}"))
    })?;
    Vocabulary::of(&json).map_err(|e| PolicyLoadError::single(schema_file, e.to_string()))
}

/// The text of `entities.json` (absent: no entities).
fn entities_text(path: &Path) -> Result<String, PolicyLoadError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok("[]".to_string()),
        Err(e) => Err(PolicyLoadError::single(
            &path.display().to_string(),
            format!("cannot read entity data: {e}"),
        )),
    }
}

/// Entity data (the text of `file`), parsed against the schema, kept with
/// its text and the hash decisions record it under.
fn entity_data(
    file: &str,
    text: String,
    schema: &cedar_policy::Schema,
) -> Result<AppData, PolicyLoadError> {
    let file = file.to_string();
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| PolicyLoadError {
        diagnostics: vec![SourceDiagnostic {
            file: file.clone(),
            line: e.line(),
            column: e.column(),
            rendered: format!("error: {file}:{}:{}: {e}", e.line(), e.column()),
            message: format!("entity data is not JSON: {e}"),
        }],
    })?;
    let count = json.as_array().map_or(0, Vec::len);
    let entities = Entities::from_json_value(json, Some(schema)).map_err(|e| {
        PolicyLoadError::single(&file, format!("entity data does not fit the schema: {e}"))
    })?;
    let mut by_type: HashMap<String, Vec<String>> = HashMap::new();
    for entity in entities.iter() {
        let uid = entity.uid();
        by_type
            .entry(uid.type_name().to_string())
            .or_default()
            .push(uid.id().unescaped().to_string());
    }
    for ids in by_type.values_mut() {
        ids.sort_unstable();
    }
    Ok(AppData {
        count,
        by_type,
        entities,
        hash: hex::encode(Sha256::digest(text.as_bytes())),
        json: Arc::from(text),
        path: file,
    })
}
