//! The SMT solver behind the policy proofs: where it is, whether it runs,
//! and a fresh symbolic compiler talking to it.
//!
//! `cedar-policy-symcc` writes SMT-LIB to a cvc5 process and reads its
//! answers; it needs cvc5 1.3 (`solver/README.md` builds 1.3.1 from the
//! PyPI wheel into `target/solver/cvc5`). Where it is looked for, in order:
//!
//! 1. `[prove] solver` of the config (an error when it is not there);
//! 2. `$CVC5`, the variable symcc itself reads (the same);
//! 3. `target/solver/cvc5` beside the running binary's target directory
//!    (`target/debug/cedargate` → `target/solver/cvc5`), so a build of the
//!    repository finds its solver from any working directory;
//! 4. `target/solver/cvc5` under the working directory.
//!
//! Never `cvc5` on `PATH`: Debian's is 1.0.3, whose answers to symcc's
//! encoding cannot be trusted; a solver older than 1.3 is refused by
//! [`find`]. Without a solver nothing else changes: proofs are commands
//! (and, later, a reload's optional gate), never on the request path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cedar_policy_symcc::CedarSymCompiler;
use cedar_policy_symcc::solver::LocalSolver;

/// How long `--version` may take before a solver is declared not working.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The oldest cvc5 (major, minor) symcc 0.8's encoding is written for.
const OLDEST: (u32, u32) = (1, 3);

/// The compiler the proofs ask: symcc over one cvc5 process.
pub(crate) type Compiler = CedarSymCompiler<LocalSolver>;

/// Where a solver path came from (said in messages, so an operator knows
/// which setting to change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `[prove] solver` of the config.
    Config,
    /// The `CVC5` environment variable.
    EnvVar,
    /// `target/solver/cvc5` beside the running binary.
    BesideBinary,
    /// `target/solver/cvc5` under the working directory.
    WorkingDir,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Config => "[prove] solver",
            Origin::EnvVar => "$CVC5",
            Origin::BesideBinary => "beside the binary",
            Origin::WorkingDir => "under the working directory",
        })
    }
}

/// Why there is no usable solver.
#[derive(Debug, thiserror::Error)]
pub enum SolverError {
    /// Nothing configured and nothing where a build puts it.
    #[error(
        "no SMT solver: run `bash solver/build.sh` (builds `target/solver/cvc5`), or set `CVC5` or `[prove] solver` (looked in {})",
        looked_in(.looked)
    )]
    NotFound {
        /// The default places looked in.
        looked: Vec<PathBuf>,
    },
    /// A configured path names no file.
    #[error("the solver `{}` ({origin}) does not exist", .path.display())]
    Missing {
        /// The configured path.
        path: PathBuf,
        /// Which setting named it.
        origin: Origin,
    },
    /// The solver could not be started or did not answer.
    #[error("the solver `{}` ({origin}) does not run: {why}", .path.display())]
    DoesNotRun {
        /// Its path.
        path: PathBuf,
        /// Which setting named it.
        origin: Origin,
        /// What went wrong.
        why: String,
    },
    /// The solver is older than symcc's encoding needs.
    #[error("the solver `{}` ({origin}) is cvc5 {version}; the proofs need cvc5 1.3 or newer (`bash solver/build.sh` builds 1.3.1)", .path.display())]
    TooOld {
        /// Its path.
        path: PathBuf,
        /// Which setting named it.
        origin: Origin,
        /// The version it reported.
        version: String,
    },
}

fn looked_in(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("`{}`", p.display()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A solver that answered `--version` with a usable version.
#[derive(Debug, Clone)]
pub struct Solver {
    /// The executable.
    pub path: PathBuf,
    /// Which setting (or default place) it came from.
    pub origin: Origin,
    /// The version it reported, e.g. `1.3.1`.
    pub version: String,
    /// Time one query may take (`--tlimit-per`).
    pub query_timeout: Duration,
}

/// Finds the solver ([`locate`]), runs `--version` and checks the version.
pub async fn find(
    configured: Option<&Path>,
    query_timeout: Duration,
) -> Result<Solver, SolverError> {
    let (path, origin) = locate(configured, std::env::var_os("CVC5").map(PathBuf::from))?;
    let version = probe(&path, origin).await?;
    if parse_version(&version).is_none_or(|v| v < OLDEST) {
        return Err(SolverError::TooOld {
            path,
            origin,
            version,
        });
    }
    Ok(Solver {
        path,
        origin,
        version,
        query_timeout,
    })
}

/// The solver's path: the configured one, `$CVC5`, or the first default
/// place holding a file.
fn locate(
    configured: Option<&Path>,
    env_var: Option<PathBuf>,
) -> Result<(PathBuf, Origin), SolverError> {
    let explicit = configured
        .map(|p| (p.to_path_buf(), Origin::Config))
        .or_else(|| {
            env_var
                .filter(|p| !p.as_os_str().is_empty())
                .map(|p| (p, Origin::EnvVar))
        });
    if let Some((path, origin)) = explicit {
        return match path.is_file() {
            true => Ok((path, origin)),
            false => Err(SolverError::Missing { path, origin }),
        };
    }
    let defaults = default_places();
    defaults
        .iter()
        .find(|(p, _)| p.is_file())
        .cloned()
        .ok_or_else(|| SolverError::NotFound {
            looked: defaults.into_iter().map(|(p, _)| p).collect(),
        })
}

/// `target/solver/cvc5` beside the running binary's target directory, then
/// under the working directory.
fn default_places() -> Vec<(PathBuf, Origin)> {
    let relative = Path::new("target").join("solver").join("cvc5");
    let mut places = Vec::new();
    let beside = std::env::current_exe().ok().and_then(|exe| {
        // `<target>/<profile>/cedargate` → `<target>/solver/cvc5`
        let target = exe.parent()?.parent()?;
        Some(target.join("solver").join("cvc5"))
    });
    if let Some(path) = beside {
        places.push((path, Origin::BesideBinary));
    }
    places.push((relative, Origin::WorkingDir));
    places
}

/// Runs `path --version` and returns the version it names.
async fn probe(path: &Path, origin: Origin) -> Result<String, SolverError> {
    let does_not_run = |why: String| SolverError::DoesNotRun {
        path: path.to_path_buf(),
        origin,
        why,
    };
    let run = tokio::process::Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Err(_) => return Err(does_not_run("`--version` did not answer within 5 s".into())),
        Ok(Err(e)) => return Err(does_not_run(e.to_string())),
        Ok(Ok(o)) => o,
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let first = text.lines().next().unwrap_or_default();
    match (output.status.success(), version_in(first)) {
        (true, Some(v)) => Ok(v.to_string()),
        _ => Err(does_not_run(format!(
            "`--version` answered `{}` ({})",
            first.trim(),
            output.status
        ))),
    }
}

/// The version in a `This is cvc5 version 1.3.1 …` line.
fn version_in(line: &str) -> Option<&str> {
    let rest = line.split("cvc5 version ").nth(1)?;
    let version = rest.split_whitespace().next()?;
    parse_version(version).map(|_| version)
}

/// `(major, minor)` of `1.3.1`.
fn parse_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, minor))
}

impl Solver {
    /// A new solver process and a symbolic compiler on it. `-q` keeps
    /// warnings off stderr, which symcc never reads (a full pipe would
    /// stall the process); `--tlimit-per` bounds each query, and a query
    /// past it answers `unknown`.
    pub(crate) fn compiler(&self) -> Result<Compiler, SolverError> {
        let tlimit = format!("--tlimit-per={}", self.query_timeout.as_millis().max(1));
        let solver = LocalSolver::from_command(
            tokio::process::Command::new(&self.path)
                .args(["--lang", "smt", "-q"])
                .arg(tlimit)
                .kill_on_drop(true),
        )
        .map_err(|e| self.does_not_run(e.to_string()))?;
        CedarSymCompiler::new(solver).map_err(|e| self.does_not_run(e.to_string()))
    }

    fn does_not_run(&self, why: String) -> SolverError {
        SolverError::DoesNotRun {
            path: self.path.clone(),
            origin: self.origin,
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_banner() {
        let line = "This is cvc5 version 1.3.1 (cvc5-driver, C API front end)";
        assert_eq!(version_in(line), Some("1.3.1"));
        assert_eq!(
            version_in("This is cvc5 version 1.0.3 [git tag 1.0.3]"),
            Some("1.0.3")
        );
        assert_eq!(version_in("z3 4.8"), None);
        assert_eq!(parse_version("1.3.1"), Some((1, 3)));
        assert_eq!(parse_version("1.10-dev"), Some((1, 10)));
        assert!(parse_version("1.0.3").is_some_and(|v| v < OLDEST));
    }

    #[test]
    fn an_explicit_path_wins_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cvc5");
        std::fs::write(&file, "").unwrap();
        let missing = dir.path().join("nope");
        let located = locate(Some(&file), Some(missing.clone()));
        assert!(matches!(located, Ok((p, Origin::Config)) if p == file));
        let located = locate(None, Some(file.clone()));
        assert!(matches!(located, Ok((p, Origin::EnvVar)) if p == file));
        let located = locate(Some(&missing), Some(file));
        assert!(matches!(
            located,
            Err(SolverError::Missing {
                origin: Origin::Config,
                ..
            })
        ));
    }
}
