//! Where a value came from, and the errors and warnings that point back at that place.
//!
//! Every message names the field, its source (default, file path, env var, template id) and a
//! fix, so an operator can act on it without reading code.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

/// The source of one effective value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Origin {
    /// The seed's built-in default.
    Default,
    /// The provider block of a `config.json`.
    File { path: PathBuf },
    /// An `ORB_K8S_*` environment variable (the name as it was set).
    Env { var: String },
    /// A per-template override.
    Template { template_id: String },
}

impl Origin {
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::File { path: path.into() }
    }
    pub fn env(var: impl Into<String>) -> Self {
        Self::Env { var: var.into() }
    }
    pub fn template(template_id: impl Into<String>) -> Self {
        Self::Template {
            template_id: template_id.into(),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File { path } => write!(f, "file {}", path.display()),
            Self::Env { var } => write!(f, "env {var}"),
            Self::Template { template_id } => write!(f, "template {template_id}"),
        }
    }
}

/// A field path (e.g. `naming.prefix`) and where its value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldOrigin {
    pub field: String,
    pub origin: Origin,
}

impl fmt::Display for FieldOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (from {})", self.field, self.origin)
    }
}

fn join_fields(fields: &[FieldOrigin]) -> String {
    fields
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// One invalid value: which field(s), from where, what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The fields involved; more than one for cross-field rules such as naming budgets.
    pub fields: Vec<FieldOrigin>,
    pub problem: String,
    pub fix: String,
}

impl ConfigIssue {
    pub fn new(
        field: impl Into<String>,
        origin: Origin,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            fields: vec![FieldOrigin {
                field: field.into(),
                origin,
            }],
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}; fix: {}",
            join_fields(&self.fields),
            self.problem,
            self.fix
        )
    }
}

/// Every problem found while loading, not just the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.issues.len();
        write!(
            f,
            "invalid Kubernetes provider configuration ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for issue in &self.issues {
            write!(f, "\n  - {issue}")?;
        }
        Ok(())
    }
}

/// A legal but risky or ineffective combination. The caller must surface these loudly
/// (log at WARN and print in `orb config show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub fields: Vec<FieldOrigin>,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", join_fields(&self.fields), self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_display_names_field_source_problem_and_fix() {
        let issue = ConfigIssue::new(
            "label_prefix",
            Origin::env("ORB_K8S_LABEL_PREFIX"),
            "\"Orb.IO\" is not a valid RFC 1123 subdomain",
            "use lowercase letters",
        );
        assert_eq!(
            issue.to_string(),
            "label_prefix (from env ORB_K8S_LABEL_PREFIX): \"Orb.IO\" is not a valid RFC 1123 \
             subdomain; fix: use lowercase letters"
        );
    }

    #[test]
    fn errors_list_every_issue_with_a_count() {
        let errs = ConfigErrors {
            issues: vec![
                ConfigIssue::new("a", Origin::Default, "p1", "f1"),
                ConfigIssue::new("b", Origin::template("t1"), "p2", "f2"),
            ],
        };
        let text = errs.to_string();
        assert!(text.starts_with("invalid Kubernetes provider configuration (2 problems):"));
        assert!(text.contains("\n  - a (from default): p1; fix: f1"));
        assert!(text.contains("\n  - b (from template t1): p2; fix: f2"));
    }
}
