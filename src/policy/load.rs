//! Loading a policy bundle from disk: read the schema and every `*.cedar`
//! file, parse each file on its own (so errors keep their file name), re-key
//! policies by `@id`, validate strictly, and hash what was loaded.
//!
//! Errors render like a compiler's: `file:line:col: message` plus a
//! source excerpt. Cedar's own errors carry their source text but not the
//! file name, so [`InFile`] wraps them with a [`miette::NamedSource`].

use std::fmt;
use std::path::Path;

use cedar_policy::{PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme, NamedSource};
use sha2::{Digest, Sha256};

use super::schema_gen::{self, ToolSchema};
use super::{PolicyBundle, PolicyFile};

/// One problem found while loading, located in a file.
#[derive(Debug, Clone)]
pub struct SourceDiagnostic {
    /// The file the problem is in.
    pub file: String,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// One-line message.
    pub message: String,
    /// The compiler-style rendering with a source excerpt.
    pub rendered: String,
}

impl fmt::Display for SourceDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// A policy set that could not be loaded; it never becomes active.
#[derive(Debug, thiserror::Error)]
#[error("policy set rejected: {}", summary(.diagnostics))]
pub struct PolicyLoadError {
    /// Every problem found, in file order.
    pub diagnostics: Vec<SourceDiagnostic>,
}

fn summary(d: &[SourceDiagnostic]) -> String {
    d.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl PolicyLoadError {
    /// One problem in `file` that has no location inside it.
    pub fn single(file: &str, message: String) -> Self {
        PolicyLoadError {
            diagnostics: vec![SourceDiagnostic {
                file: file.to_string(),
                line: 0,
                column: 0,
                rendered: format!("error: {file}: {message}"),
                message,
            }],
        }
    }

    /// All diagnostics rendered for a terminal.
    pub fn render(&self) -> String {
        self.diagnostics
            .iter()
            .map(|d| d.rendered.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A Cedar diagnostic shown against a named file.
#[derive(Debug)]
struct InFile<'a> {
    src: NamedSource<String>,
    inner: &'a dyn Diagnostic,
}

impl fmt::Display for InFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.inner, f)
    }
}

impl std::error::Error for InFile<'_> {}

impl Diagnostic for InFile<'_> {
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.src)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.inner.labels()
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.inner.help()
    }
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.inner.code()
    }
}

/// Locates and renders one Cedar diagnostic within `text` of `file`.
fn diagnose(file: &str, text: &str, err: &dyn Diagnostic) -> SourceDiagnostic {
    let offset = err.labels().and_then(|mut l| l.next()).map(|l| l.offset());
    let (line, column) = match offset {
        Some(off) => line_col(text, off),
        None => (0, 0),
    };
    let wrapped = InFile {
        src: NamedSource::new(file, text.to_string()),
        inner: err,
    };
    let mut rendered = String::new();
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor());
    if handler.render_report(&mut rendered, &wrapped).is_err() {
        rendered = err.to_string();
    }
    let mut message = err.to_string();
    if let Some(help) = err.help() {
        message = format!("{message} (help: {help})");
    }
    SourceDiagnostic {
        file: file.to_string(),
        line,
        column,
        rendered: format!("error: {file}:{line}:{column}: {err}\n{rendered}"),
        message,
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

/// Loads, parses and strictly validates the schema and the `*.cedar` files
/// directly inside `policies_dir`.
pub fn load_bundle(
    schema_path: &Path,
    policies_dir: &Path,
) -> Result<PolicyBundle, PolicyLoadError> {
    let schema_file = schema_path.display().to_string();
    let schema_text = std::fs::read_to_string(schema_path)
        .map_err(|e| PolicyLoadError::single(&schema_file, format!("cannot read schema: {e}")))?;
    let mut files = read_policy_files(policies_dir)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    bundle_from_sources(&schema_file, &schema_text, files)
}

/// The effective schema: the schema file plus one typed action per tool
/// that can be typed (see [`schema_gen`]). Errors in the schema file are
/// reported against it.
pub fn effective_schema(
    schema_file: &str,
    schema_text: &str,
    tools: &[ToolSchema],
) -> Result<(String, schema_gen::Generated), PolicyLoadError> {
    let (fragment, _) =
        cedar_policy::SchemaFragment::from_cedarschema_str(schema_text).map_err(|e| {
            PolicyLoadError {
                diagnostics: vec![diagnose(schema_file, schema_text, &e)],
            }
        })?;
    let base_json = fragment.to_json_value().map_err(|e| {
        PolicyLoadError::single(schema_file, format!("cannot read the schema: {e}"))
    })?;
    let base = super::group_shapes::SchemaBase::of(&base_json);
    let generated = schema_gen::generate(tools, &base);
    if generated.text.is_empty() {
        return Ok((schema_text.to_string(), generated));
    }
    // One text may declare a namespace only once: merge the generated
    // actions into the schema file's namespace and print the result.
    let merged = merge_actions(base_json, &generated.text).map_err(|e| {
        PolicyLoadError::single(
            schema_file,
            format!("cannot merge the generated tool actions: {e}"),
        )
    })?;
    Ok((
        format!(
            "// Effective schema: `{schema_file}` plus one typed action per tool (generated).\n{merged}"
        ),
        generated,
    ))
}

/// Why the generated tool actions could not be merged into the schema
/// (displays as Cedar's own message).
#[derive(Debug, thiserror::Error)]
enum MergeError {
    /// The generated text does not parse.
    #[error(transparent)]
    Parse(Box<cedar_policy::CedarSchemaError>),
    /// A fragment cannot be converted to or from its JSON form.
    #[error(transparent)]
    Json(Box<cedar_policy::SchemaError>),
    /// The merged fragment cannot be printed.
    #[error(transparent)]
    Print(Box<cedar_policy::ToCedarSchemaError>),
}

impl From<cedar_policy::SchemaError> for MergeError {
    fn from(e: cedar_policy::SchemaError) -> Self {
        MergeError::Json(Box::new(e))
    }
}

fn merge_actions(mut base: serde_json::Value, generated: &str) -> Result<String, MergeError> {
    let (extra, _) = cedar_policy::SchemaFragment::from_cedarschema_str(generated)
        .map_err(|e| MergeError::Parse(Box::new(e)))?;
    let extra = extra.to_json_value()?;
    if let (Some(base_ns), Some(extra_ns)) = (base.as_object_mut(), extra.as_object()) {
        for (ns, body) in extra_ns {
            let target = base_ns
                .entry(ns.clone())
                .or_insert_with(|| serde_json::json!({ "entityTypes": {}, "actions": {} }));
            if let (Some(actions), Some(new)) = (
                target.as_object_mut().and_then(|t| {
                    t.entry("actions")
                        .or_insert_with(|| serde_json::json!({}))
                        .as_object_mut()
                }),
                body.get("actions").and_then(|a| a.as_object()),
            ) {
                for (id, a) in new {
                    actions.insert(id.clone(), a.clone());
                }
            }
        }
    }
    let merged = cedar_policy::SchemaFragment::from_json_value(base)?;
    merged
        .to_cedarschema()
        .map_err(|e| MergeError::Print(Box::new(e)))
}

/// Loads a bundle whose schema is the effective schema for `tools`.
pub fn load_bundle_with_tools(
    schema_path: &Path,
    policies_dir: &Path,
    tools: &[ToolSchema],
) -> Result<PolicyBundle, PolicyLoadError> {
    let schema_file = schema_path.display().to_string();
    let schema_text = std::fs::read_to_string(schema_path)
        .map_err(|e| PolicyLoadError::single(&schema_file, format!("cannot read schema: {e}")))?;
    let (effective, _) = effective_schema(&schema_file, &schema_text, tools)?;
    let mut files = read_policy_files(policies_dir)?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    bundle_from_sources(&schema_file, &effective, files)
}

/// The `*.cedar` files directly inside `dir`, sorted by path.
pub fn read_policy_files(dir: &Path) -> Result<Vec<PolicyFile>, PolicyLoadError> {
    let dir_name = dir.display().to_string();
    let entries = std::fs::read_dir(dir).map_err(|e| {
        PolicyLoadError::single(&dir_name, format!("cannot read policy directory: {e}"))
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| PolicyLoadError::single(&dir_name, e.to_string()))?;
        let path = entry.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "cedar") {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| {
                PolicyLoadError::single(&name, format!("cannot read policy file: {e}"))
            })?;
            files.push(PolicyFile { path: name, text });
        }
    }
    if files.is_empty() {
        return Err(PolicyLoadError::single(
            &dir_name,
            "no `*.cedar` files: an empty policy set would deny everything".into(),
        ));
    }
    Ok(files)
}

/// Builds a bundle from sources already in memory (files sorted by path).
pub fn bundle_from_sources(
    schema_file: &str,
    schema_text: &str,
    files: Vec<PolicyFile>,
) -> Result<PolicyBundle, PolicyLoadError> {
    let (schema, mut warnings) = parse_schema(schema_file, schema_text)?;
    let (pset, origin) = parse_policies(&files)?;
    let typed = schema_gen::typed_tools(schema_text);
    let mut diagnostics = group_scoped_policies(&pset, &typed, &origin, &files);
    diagnostics.extend(scope_annotation_errors(&pset, &origin, &files));
    warnings.extend(validate_strictly(
        &schema,
        &pset,
        &origin,
        &files,
        diagnostics,
    )?);
    let sources = Sources {
        schema_file,
        schema_text,
        files,
        origin,
    };
    Ok(assemble(sources, schema, pset, typed, warnings))
}

/// Policy id → index of the file that defines it, for locating errors.
type Origin = std::collections::HashMap<String, usize>;

/// What a bundle is built from, once its policies parsed.
struct Sources<'a> {
    schema_file: &'a str,
    schema_text: &'a str,
    files: Vec<PolicyFile>,
    origin: Origin,
}

/// The schema, and its warnings as `file: warning` lines.
fn parse_schema(
    schema_file: &str,
    schema_text: &str,
) -> Result<(Schema, Vec<String>), PolicyLoadError> {
    let (schema, schema_warnings) =
        Schema::from_cedarschema_str(schema_text).map_err(|e| PolicyLoadError {
            diagnostics: vec![diagnose(schema_file, schema_text, &e)],
        })?;
    let warnings = schema_warnings
        .map(|w| format!("{schema_file}: {w}"))
        .collect();
    Ok((schema, warnings))
}

/// Every file's policies in one set, each under its `@id`, with the file
/// it came from; every parse error, template, missing or duplicate id of
/// every file is reported at once.
fn parse_policies(files: &[PolicyFile]) -> Result<(PolicySet, Origin), PolicyLoadError> {
    let mut diagnostics = Vec::new();
    let mut pset = PolicySet::new();
    let mut origin = Origin::new();
    for (index, file) in files.iter().enumerate() {
        let parsed: PolicySet = match file.text.parse() {
            Ok(p) => p,
            Err(e) => {
                let e: cedar_policy::ParseErrors = e;
                diagnostics.extend(e.iter().map(|one| diagnose(&file.path, &file.text, one)));
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            let message = "templates are not supported in policy files".to_string();
            diagnostics.push(in_file(&file.path, message));
        }
        for policy in parsed.policies() {
            let Some(id) = policy.annotation("id") else {
                // Display keeps the policy's original text: find it to locate it.
                let at = position(file, policy.to_string().trim());
                let message = "policy has no `@id(\"…\")` annotation; every policy needs a stable id so decisions can name it".to_string();
                diagnostics.push(located(&file.path, at, message));
                continue;
            };
            if let Some(first) = origin.get(id) {
                let message = format!(
                    "duplicate policy id `{id}` (first defined in `{}`)",
                    files.get(*first).map(|f| f.path.as_str()).unwrap_or("?")
                );
                diagnostics.push(in_file(&file.path, message));
                continue;
            }
            origin.insert(id.to_string(), index);
            if let Err(e) = pset.add(policy.new_id(PolicyId::new(id))) {
                diagnostics.push(in_file(&file.path, e.to_string()));
            }
        }
    }
    if !diagnostics.is_empty() {
        return Err(PolicyLoadError { diagnostics });
    }
    Ok((pset, origin))
}

/// A policy scoped to `action == call_tool` (or `a2a_invoke`) would
/// silently stop matching the tools decided under their own typed action:
/// each is refused rather than let a forbid fall away.
fn group_scoped_policies(
    pset: &PolicySet,
    typed: &std::collections::HashMap<String, schema_gen::TypedTool>,
    origin: &Origin,
    files: &[PolicyFile],
) -> Vec<SourceDiagnostic> {
    let mut diagnostics = Vec::new();
    for policy in pset.policies() {
        let cedar_policy::ActionConstraint::Eq(uid) = policy.action_constraint() else {
            continue;
        };
        let group = uid.id().unescaped();
        let mut members: Vec<&str> = typed
            .iter()
            .filter(|(_, t)| t.group.name() == group && uid.type_name().basename() == "Action")
            .map(|(name, _)| name.as_str())
            .collect();
        if members.is_empty() {
            continue;
        }
        members.sort_unstable();
        let id = policy.id().to_string();
        let Some(file) = origin.get(&id).and_then(|i| files.get(*i)) else {
            continue;
        };
        let message = format!(
            "policy `{id}` is scoped to `action == {uid}`, which does not match the tools decided under their own typed action ({}); write `action in {uid}` to cover every tool, or `action == Gateway::Action::\"<tool>\"` for one",
            members.join(", ")
        );
        diagnostics.push(located(
            &file.path,
            position(file, &format!("\"{id}\"")),
            message,
        ));
    }
    diagnostics
}

/// Cedar's strict validation: its errors join `diagnostics` (any of them
/// refuses the set); its warnings are returned, located in their files.
fn validate_strictly(
    schema: &Schema,
    pset: &PolicySet,
    origin: &Origin,
    files: &[PolicyFile],
    mut diagnostics: Vec<SourceDiagnostic>,
) -> Result<Vec<String>, PolicyLoadError> {
    let file_of = |id: &PolicyId| {
        origin
            .get(AsRef::<str>::as_ref(id))
            .and_then(|i| files.get(*i))
    };
    let result = Validator::new(schema.clone()).validate(pset, ValidationMode::Strict);
    for e in result.validation_errors() {
        diagnostics.push(match file_of(e.policy_id()) {
            Some(f) => diagnose(&f.path, &f.text, e),
            None => in_file("<policies>", e.to_string()),
        });
    }
    if !diagnostics.is_empty() {
        return Err(PolicyLoadError { diagnostics });
    }
    Ok(result
        .validation_warnings()
        .map(|w| match file_of(w.policy_id()) {
            Some(f) => diagnose(&f.path, &f.text, w).to_string(),
            None => w.to_string(),
        })
        .collect())
}

/// The bundle of a validated set: its hashes, and what the request path
/// reads of the policies computed once (advice, dropped typed actions,
/// per-action slices and what they read).
fn assemble(
    sources: Sources<'_>,
    schema: Schema,
    pset: PolicySet,
    typed: std::collections::HashMap<String, schema_gen::TypedTool>,
    mut warnings: Vec<String>,
) -> PolicyBundle {
    let Sources {
        schema_file,
        schema_text,
        files,
        origin,
    } = sources;
    let schema_hash = hex::encode(Sha256::digest(schema_text.as_bytes()));
    let hash = super::set_hash::bundle_hash(
        schema_text,
        files.iter().map(|f| (f.path.as_str(), f.text.as_str())),
    );
    let mut policy_ids: Vec<String> = origin.into_keys().collect();
    policy_ids.sort();
    let advice = pset
        .policies()
        .filter_map(|p| {
            p.annotation("advice")
                .map(|a| (p.id().clone(), a.to_string()))
        })
        .collect();
    let (dropped, dropped_warnings) = super::dropped::DroppedGuard::of(schema_text, &pset);
    warnings.extend(dropped_warnings);
    let slices = super::action_slices::ActionSlices::build(&schema, &pset);
    // Only policies that can apply to `read_node` can tell nodes apart.
    let node_reads = super::node_reads::NodeDependence::of(
        slices
            .get(&super::Action::ReadNode.uid().0)
            .unwrap_or(&pset),
        schema_text,
    );
    let session_determined = super::session_verdicts::SessionDetermined::of(&slices);
    let usage_reads = super::usage_reads::UsageReaders::of(&slices, &pset);
    let required_scopes = super::step_up::RequiredScopes::of(&slices, &pset);
    PolicyBundle {
        usage_reads,
        required_scopes,
        slices,
        node_reads,
        session_determined,
        typed,
        dropped,
        hooks: std::sync::Arc::default(),
        advice,
        schema,
        policies: pset,
        hash,
        schema_hash,
        schema_text: schema_text.to_string(),
        schema_path: schema_file.to_string(),
        files,
        policy_ids,
        loaded_at: crate::ids::now_rfc3339(),
        warnings,
    }
}

/// The 1-based (line, column) of `needle`'s first occurrence in `file`,
/// `(0, 0)` when it is not found.
fn position(file: &PolicyFile, needle: &str) -> (usize, usize) {
    file.text
        .find(needle)
        .map(|off| line_col(&file.text, off))
        .unwrap_or((0, 0))
}

/// An error in `file` as a whole.
fn in_file(file: &str, message: String) -> SourceDiagnostic {
    SourceDiagnostic {
        file: file.to_string(),
        line: 0,
        column: 0,
        rendered: format!("error: {file}: {message}"),
        message,
    }
}

/// An error at `(line, column)` of `file` (`(0, 0)` when its text was not
/// found).
fn located(file: &str, (line, column): (usize, usize), message: String) -> SourceDiagnostic {
    SourceDiagnostic {
        file: file.to_string(),
        line,
        column,
        rendered: format!("error: {file}:{line}:{column}: {message}"),
        message,
    }
}

/// A diagnostic for each `@requires_scope` whose value is not a list of
/// scope tokens (`step_up::parse`), located at the policy's `@id`.
fn scope_annotation_errors(
    pset: &PolicySet,
    origin: &Origin,
    files: &[PolicyFile],
) -> Vec<SourceDiagnostic> {
    let mut diagnostics = Vec::new();
    for policy in pset.policies() {
        let Some(value) = policy.annotation(super::step_up::ANNOTATION) else {
            continue;
        };
        let Err(why) = super::step_up::parse(value) else {
            continue;
        };
        let id = policy.id().to_string();
        let Some(file) = origin.get(&id).and_then(|i| files.get(*i)) else {
            continue;
        };
        let message = format!("policy `{id}`: `@requires_scope` {why}");
        diagnostics.push(located(
            &file.path,
            position(file, &format!("\"{id}\"")),
            message,
        ));
    }
    diagnostics
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn file(path: &str, text: &str) -> Vec<PolicyFile> {
        vec![PolicyFile {
            path: path.into(),
            text: text.into(),
        }]
    }

    /// The vocabulary is a contract: policies written for keys and agents
    /// before people could sign in still validate now that `User` is a
    /// principal of every action (reading `principal.org`, `.label` and
    /// `.name`), typed tool actions included.
    #[test]
    fn policies_written_before_people_still_validate() {
        let tools = [schema_gen::ToolSchema {
            name: "notes.write".into(),
            group: crate::policy::Action::CallTool,
            input_schema: serde_json::json!({"type":"object","required":["content"],"properties":{"content":{"type":"string"}}}),
            dropped: None,
        }];
        let (effective, _) = effective_schema("s", SCHEMA, &tools).unwrap();
        let policies = r#"
            @id("k1") permit (principal, action == Gateway::Action::"access_session", resource)
            when { principal.org == resource.org && principal.label like "ci-*" && principal in Gateway::Org::"acme" };
            @id("k2") permit (principal, action == Gateway::Action::"create_session", resource)
            when { resource in principal.org && context.agent.name == "claude" && principal.label != "" && context.time > datetime("2020-01-01") };
            @id("a1") permit (principal in Gateway::Role::"deployers", action in [Gateway::Action::"view_tool", Gateway::Action::"call_tool", Gateway::Action::"a2a_invoke"], resource)
            when { principal.name == "claude" && principal == context.session.agent && context.session.org.plan == "team" };
            @id("a2") forbid (principal, action == Gateway::Action::"read_node", resource)
            when { resource.type == "Secret" && principal.name like "bot-*" };
            @id("a3") forbid (principal, action == Gateway::Action::"notes.write", resource)
            when { context.args.content like "*secret*" && principal.name == "x" };
            @id("a4") permit (principal is Gateway::Agent, action in [Gateway::Action::"read_resource", Gateway::Action::"get_prompt", Gateway::Action::"write_node"], resource)
            when { principal.name == "x" && context.session.agent.name == "x" };
            @id("a5") forbid (principal, action in [Gateway::Action::"call_tool"], resource)
            when { context has usage && context.usage.callsLastMinute > 5 };
        "#;
        let bundle = bundle_from_sources("s", &effective, file("old.cedar", policies))
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert_eq!(bundle.policy_ids.len(), 7);
        assert!(bundle.warnings.is_empty(), "{:?}", bundle.warnings);
    }

    #[test]
    fn shipped_policies_validate() {
        let bundle = load_bundle(
            Path::new("schemas/gateway.cedarschema"),
            Path::new("policies"),
        );
        let bundle = match bundle {
            Ok(b) => b,
            Err(e) => panic!("{}", e.render()),
        };
        assert!(
            bundle
                .policy_ids
                .contains(&"only-the-session-agent-acts".to_string())
        );
        assert_eq!(bundle.hash.len(), 64);
    }

    /// Only policies that can apply to `read_node` decide whether graph
    /// nodes share verdicts.
    #[test]
    fn node_reads_come_from_the_read_node_slice() {
        let load = |text: &str| {
            bundle_from_sources(
                "schemas/gateway.cedarschema",
                SCHEMA,
                file("policies/p.cedar", text),
            )
            .unwrap_or_else(|e| panic!("{}", e.render()))
        };
        let other_action = load(
            "@id(\"a\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource)\nwhen { (if resource == Gateway::Tool::\"t\" then principal else principal).name == \"y\" };\n@id(\"b\")\nforbid (principal, action == Gateway::Action::\"write_node\", resource)\nwhen { Gateway::GraphNode::\"n\" in resource };\n",
        );
        let all = super::super::node_reads::NodeDependence::of(
            &other_action.policies,
            &other_action.schema_text,
        );
        assert!(
            all.name && all.uid,
            "the whole set does read nodes: {all:?}"
        );
        assert_eq!(
            other_action.node_reads,
            super::super::node_reads::NodeDependence::default()
        );
        let any_action = load(
            "@id(\"a\")\nforbid (principal, action, resource is Gateway::GraphNode)\nwhen { resource.name == \"y\" };\n",
        );
        assert!(any_action.node_reads.name && !any_action.node_reads.uid);
    }

    /// The shipped set reads `context` only through `context.session`, so
    /// a session decides each of these once per policy set; a policy on the
    /// time takes its own action (only) out.
    #[test]
    fn session_determined_actions_come_from_each_action_slice() {
        let shipped = load_bundle(
            Path::new("schemas/gateway.cedarschema"),
            Path::new("policies"),
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        for action in [
            super::super::Action::AccessSession,
            super::super::Action::ViewTool,
            super::super::Action::CallTool,
            super::super::Action::A2aInvoke,
            super::super::Action::ReadNode,
        ] {
            assert!(
                shipped.session_determined.contains(&action.uid()),
                "{}",
                action.name()
            );
        }
        let timed = bundle_from_sources(
            "schemas/gateway.cedarschema",
            SCHEMA,
            file(
                "policies/p.cedar",
                "@id(\"a\")\npermit (principal, action, resource);\n@id(\"b\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource)\nwhen { context.time < datetime(\"2026-01-01\") };\n",
            ),
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(
            !timed
                .session_determined
                .contains(&super::super::Action::ViewTool.uid())
        );
        assert!(
            timed
                .session_determined
                .contains(&super::super::Action::AccessSession.uid())
        );
    }

    #[test]
    fn syntax_error_names_file_line_and_column() {
        let err = bundle_from_sources(
            "schemas/gateway.cedarschema",
            SCHEMA,
            file(
                "policies/broken.cedar",
                "@id(\"x\")\npermit(principal, action, resource)\nwhen { principal.nope == };\n",
            ),
        )
        .map(|_| ())
        .expect_err("must fail");
        let d = &err.diagnostics[0];
        assert_eq!(d.file, "policies/broken.cedar");
        assert_eq!(d.line, 3);
        assert!(
            d.rendered.contains("policies/broken.cedar:3:"),
            "{}",
            d.rendered
        );
    }

    #[test]
    fn schema_violation_names_file_line_and_column() {
        let err = bundle_from_sources(
            "schemas/gateway.cedarschema",
            SCHEMA,
            file(
                "policies/typo.cedar",
                "@id(\"typo\")\npermit(principal, action == Gateway::Action::\"call_tool\", resource)\n  when { resource.rsik };\n",
            ),
        )
        .map(|_| ())
        .expect_err("must fail");
        let d = &err.diagnostics[0];
        assert_eq!((d.file.as_str(), d.line), ("policies/typo.cedar", 3));
        assert!(d.message.contains("rsik"), "{}", d.message);
    }

    #[test]
    fn missing_and_duplicate_ids_are_rejected() {
        let err = bundle_from_sources(
            "s",
            SCHEMA,
            file("p.cedar", "permit(principal, action, resource);\n"),
        )
        .map(|_| ())
        .expect_err("no id");
        assert!(err.diagnostics[0].message.contains("@id"));
        let err = bundle_from_sources(
            "s",
            SCHEMA,
            file("p.cedar", "@id(\"a\") permit(principal, action, resource);\n@id(\"a\") forbid(principal, action, resource);\n"),
        )
        .map(|_| ())
        .expect_err("dup");
        assert!(
            err.diagnostics[0]
                .message
                .contains("duplicate policy id `a`")
        );
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
