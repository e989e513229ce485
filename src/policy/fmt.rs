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

/// Formats one file's text.
pub fn format_file(file: &PolicyFile) -> Result<Formatted, String> {
    let text = policies_str_to_pretty(&file.text, &config())
        .map_err(|e| format!("{}: cannot format: {e}", file.path))?;
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
        assert!(format_file(&bad).unwrap_err().starts_with("bad.cedar:"));
    }
}
