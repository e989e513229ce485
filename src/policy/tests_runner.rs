//! Policy tests in the Cedar CLI's `run-tests` format, so the same files
//! run under `cedar run-tests --schema … --policies … --tests …` and under
//! any other Cedar implementation.
//!
//! A test file is a JSON array of cases:
//! `{"name"?, "request": {"principal", "action", "resource", "context"},
//!   "entities": [ … ] | "relative/path.json", "decision": "allow"|"deny",
//!   "reason": [policy ids, a subset of the actual reasons], "num_errors": n}`.
//! As in the Cedar CLI, the verdict is Cedar's own (an erroring `forbid`
//! is skipped there; the gateway additionally denies on it, which a test
//! sees as `num_errors`).

use std::path::{Path, PathBuf};

use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicyId, Request};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::PolicyBundle;

/// Test files live here, relative to the policy directory.
pub const TESTS_DIR: &str = "tests";

/// One test's result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestOutcome {
    /// The test file.
    pub file: String,
    /// The case's name (or `#index`).
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed.
    pub message: Option<String>,
    /// The actual decision (`allow`/`deny`), when it ran.
    pub decision: Option<String>,
    /// The actual determining policy ids.
    pub reasons: Vec<String>,
    /// The actual number of evaluation errors.
    pub num_errors: usize,
}

/// All results of a run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestReport {
    /// Every case, in file order.
    pub outcomes: Vec<TestOutcome>,
}

impl TestReport {
    /// How many passed.
    pub fn passed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.passed).count()
    }

    /// How many failed.
    pub fn failed(&self) -> usize {
        self.outcomes.len() - self.passed()
    }

    /// Failures, one line each.
    pub fn failures(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|o| !o.passed)
            .map(|o| {
                format!(
                    "{} :: {}: {}",
                    o.file,
                    o.name,
                    o.message.as_deref().unwrap_or("failed")
                )
            })
            .collect()
    }
}

#[derive(Debug, Deserialize)]
struct RequestJson {
    principal: String,
    action: String,
    resource: String,
    #[serde(default)]
    context: Value,
}

#[derive(Debug, Deserialize)]
struct CaseJson {
    request: RequestJson,
    entities: Value,
    decision: String,
    #[serde(default)]
    reason: Vec<String>,
    #[serde(default)]
    num_errors: usize,
}

/// The tests directory exists but cannot be listed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read `{}`: {source}", dir.display())]
pub struct TestFilesError {
    /// The tests directory.
    pub dir: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

/// The `*.json` test files under `policies_dir/tests`, sorted (none when
/// the directory does not exist).
pub fn test_files(policies_dir: &Path) -> Result<Vec<PathBuf>, TestFilesError> {
    let dir = policies_dir.join(TESTS_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|source| TestFilesError {
            dir: dir.clone(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Runs every test file under `policies_dir/tests` against `bundle`.
pub fn run_dir(bundle: &PolicyBundle, policies_dir: &Path) -> Result<TestReport, TestFilesError> {
    let mut report = TestReport::default();
    for file in test_files(policies_dir)? {
        run_file(bundle, &file, &mut report);
    }
    Ok(report)
}

/// Runs one test file; a file that cannot be read or parsed is one failure.
pub fn run_file(bundle: &PolicyBundle, file: &Path, report: &mut TestReport) {
    let name = file.display().to_string();
    let fail = |report: &mut TestReport, case: String, message: String| {
        report.outcomes.push(TestOutcome {
            file: name.clone(),
            name: case,
            passed: false,
            message: Some(message),
            decision: None,
            reasons: Vec::new(),
            num_errors: 0,
        })
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return fail(report, "(file)".into(), format!("cannot read: {e}")),
    };
    let cases: Vec<Value> = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            return fail(
                report,
                "(file)".into(),
                format!("not a JSON array of tests: {e}"),
            );
        }
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    for (index, raw) in cases.into_iter().enumerate() {
        let label = raw
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{index}"));
        match run_case(bundle, dir, raw) {
            Ok(mut outcome) => {
                outcome.file = name.clone();
                outcome.name = label;
                report.outcomes.push(outcome);
            }
            Err(e) => fail(report, label, e.to_string()),
        }
    }
}

/// Why one test case could not run (reported as its failure message, in
/// the Cedar CLI's wording where it has one).
#[derive(Debug, thiserror::Error)]
enum CaseError {
    /// The case is not a test object.
    #[error("malformed test case: {0}")]
    Malformed(#[source] serde_json::Error),
    /// `decision` is neither `allow` nor `deny`.
    #[error("`decision` must be `allow` or `deny`, not `{0}`")]
    Decision(String),
    /// A request uid does not parse.
    #[error("failed to parse {field} `{text}`: {source}")]
    Uid {
        /// `principal`, `action` or `resource`.
        field: &'static str,
        /// The text given.
        text: String,
        /// Cedar's reason.
        source: Box<cedar_policy::ParseErrors>,
    },
    /// The context does not fit the action's context type.
    #[error("failed to parse context: {0}")]
    Context(#[source] Box<cedar_policy::ContextJsonError>),
    /// The request does not conform to the schema.
    #[error("failed to create request: {0}")]
    Request(#[source] Box<cedar_policy::RequestValidationError>),
    /// The entities file cannot be read.
    #[error("cannot read entities `{}`: {source}", path.display())]
    ReadEntities {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The entities file is not JSON.
    #[error("entities `{}` are not JSON: {source}", path.display())]
    EntitiesJson {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// Cedar refuses the entities under the schema.
    #[error("failed to parse entities: {0}")]
    Entities(#[source] Box<cedar_policy::entities_errors::EntitiesError>),
}

fn run_case(bundle: &PolicyBundle, dir: &Path, raw: Value) -> Result<TestOutcome, CaseError> {
    let case: CaseJson = serde_json::from_value(raw).map_err(CaseError::Malformed)?;
    let expected = match case.decision.as_str() {
        "allow" => Decision::Allow,
        "deny" => Decision::Deny,
        other => return Err(CaseError::Decision(other.to_string())),
    };
    let uid = |field: &'static str, text: &str| -> Result<EntityUid, CaseError> {
        text.parse().map_err(|source| CaseError::Uid {
            field,
            text: text.to_string(),
            source: Box::new(source),
        })
    };
    let principal = uid("principal", &case.request.principal)?;
    let action = uid("action", &case.request.action)?;
    let resource = uid("resource", &case.request.resource)?;
    let context_json = if case.request.context.is_null() {
        Value::Object(Default::default())
    } else {
        case.request.context
    };
    let context = Context::from_json_value(context_json, Some((&bundle.schema, &action)))
        .map_err(|e| CaseError::Context(Box::new(e)))?;
    let request = Request::new(principal, action, resource, context, Some(&bundle.schema))
        .map_err(|e| CaseError::Request(Box::new(e)))?;
    let entities_json = match &case.entities {
        Value::String(rel) => {
            let path = dir.join(rel);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(source) => return Err(CaseError::ReadEntities { path, source }),
            };
            match serde_json::from_str(&text) {
                Ok(json) => json,
                Err(source) => return Err(CaseError::EntitiesJson { path, source }),
            }
        }
        other => other.clone(),
    };
    let entities = Entities::from_json_value(entities_json, Some(&bundle.schema))
        .map_err(|e| CaseError::Entities(Box::new(e)))?;
    let response = Authorizer::new().is_authorized(&request, &bundle.policies, &entities);
    let reasons: Vec<String> = response
        .diagnostics()
        .reason()
        .map(PolicyId::to_string)
        .collect();
    let num_errors = response.diagnostics().errors().count();
    let mut problems = Vec::new();
    if response.decision() != expected {
        problems.push(format!(
            "expected {}, got {}",
            case.decision,
            decision_name(response.decision())
        ));
    } else {
        let missing: Vec<String> = case
            .reason
            .iter()
            .filter(|r| !reasons.contains(r))
            .map(|r| format!("`{r}`"))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("missing reason(s): {}", missing.join(", ")));
        }
        if num_errors != case.num_errors {
            let errors: Vec<String> = response
                .diagnostics()
                .errors()
                .map(ToString::to_string)
                .collect();
            problems.push(format!(
                "expected {} error(s), got {num_errors}{}",
                case.num_errors,
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join(", "))
                }
            ));
        }
    }
    Ok(TestOutcome {
        file: String::new(),
        name: String::new(),
        passed: problems.is_empty(),
        message: (!problems.is_empty()).then(|| problems.join("; ")),
        decision: Some(decision_name(response.decision()).into()),
        reasons,
        num_errors,
    })
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// The shipped policies pass their own tests, with the built-in tools
    /// typed as at start-up.
    #[test]
    fn the_shipped_policy_tests_pass() {
        let catalog = crate::tools::catalog::Catalog::builtin().unwrap();
        let (_, report) = crate::lifecycle::load_candidate(
            &root().join("schemas/gateway.cedarschema"),
            &root().join("policies"),
            &crate::lifecycle::tool_schemas(&catalog),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.failed(), 0, "{:?}", report.failures());
        let people = report
            .outcomes
            .iter()
            .filter(|o| o.name.contains("person"))
            .count();
        assert!(people >= 15, "the cases for people ran: {people}");
    }

    /// Rules on a person's groups, tags and token scopes, decided with the
    /// shipped set (`tests/fixtures/people`).
    #[test]
    fn group_tag_and_scope_rules_decide_as_written() {
        let schema = std::fs::read_to_string(root().join("schemas/gateway.cedarschema")).unwrap();
        let mut files = super::super::load::read_policy_files(&root().join("policies")).unwrap();
        let fixture = root().join("tests/fixtures/people");
        files.extend(super::super::load::read_policy_files(&fixture).unwrap());
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let bundle = super::super::load::bundle_from_sources("gateway.cedarschema", &schema, files)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let mut report = TestReport::default();
        run_file(&bundle, &fixture.join("people.json"), &mut report);
        assert_eq!(report.outcomes.len(), 7);
        assert_eq!(report.failed(), 0, "{:?}", report.failures());
        let denied: Vec<&str> = report
            .outcomes
            .iter()
            .filter(|o| o.decision.as_deref() == Some("deny"))
            .flat_map(|o| o.reasons.iter().map(String::as_str))
            .collect();
        assert_eq!(
            denied,
            [
                "destructive-upstream-tools-for-sre-only",
                "file-reads-for-finance-only",
                "memory-writes-need-the-write-scope"
            ]
        );
    }
}
