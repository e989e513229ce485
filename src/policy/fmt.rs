//! `cedargate policy fmt`: the official Cedar formatter over every policy
//! file, so formatting matches what `cedar format` produces.

use cedar_policy_formatter::{Config, policies_str_to_pretty};

use super::PolicyFile;

/// The formatter settings (Cedar's defaults).
fn config() -> Config {
    Config {
        line_width: 80,
        indent_width: 2,
    }
}

/// One file's formatting result.
#[derive(Debug, Clone)]
pub struct Formatted {
    /// The file.
    pub path: String,
    /// The formatted text.
    pub text: String,
    /// Whether it differs from the file on disk.
    pub changed: bool,
}

/// A policy file the Cedar formatter cannot format (it does not parse).
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot format: {report}")]
pub struct FormatError {
    /// The file.
    pub path: String,
    /// The formatter's report (its top-level message is shown).
    pub report: miette::Report,
}

/// Formats one file's text.
pub fn format_file(file: &PolicyFile) -> Result<Formatted, FormatError> {
    let text = policies_str_to_pretty(&file.text, &config()).map_err(|report| FormatError {
        path: file.path.clone(),
        report,
    })?;
    Ok(Formatted {
        changed: text != file.text,
        path: file.path.clone(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_reports_changes() {
        let f = PolicyFile {
            path: "p.cedar".into(),
            text: "@id(\"a\") permit(principal,action,resource);".into(),
        };
        let out = format_file(&f).unwrap();
        assert!(out.changed);
        let again = format_file(&PolicyFile {
            path: "p.cedar".into(),
            text: out.text.clone(),
        })
        .unwrap();
        assert!(!again.changed, "formatting is idempotent");
        let bad = PolicyFile {
            path: "bad.cedar".into(),
            text: "permit(".into(),
        };
        assert!(
            format_file(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("bad.cedar:")
        );
    }
}
