//! The templates of one provider, read from its template file. The provider decides which
//! templates it refuses (a hook), so this module stays free of any one provider.

use std::path::{Path, PathBuf};

use orb_core::config::ProviderEntry;
use orb_core::template::Template;

use crate::BrokerError;
use orb_core::template::file::{parse_template_file, template_file_candidates};

/// Templates of one provider, as read from its template file.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub file: Option<PathBuf>,
    pub templates: Vec<Template>,
    /// Templates that could not be read, and spelling warnings; shown on stderr.
    pub warnings: Vec<String>,
    /// Templates refused at load (a provider override they may not set), with the reason.
    /// They are never listed, served or acquired.
    pub refused: Vec<RefusedTemplate>,
}

/// The catalog a long-running process serves from, replaced as a whole when its file changes
/// (readers keep the snapshot they took).
#[derive(Debug, Default)]
pub struct CatalogCell {
    current: std::sync::RwLock<std::sync::Arc<Catalog>>,
}

impl CatalogCell {
    pub fn new(catalog: Catalog) -> Self {
        Self {
            current: std::sync::RwLock::new(std::sync::Arc::new(catalog)),
        }
    }

    /// The catalog as it is now.
    pub fn current(&self) -> std::sync::Arc<Catalog> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Serves `catalog` from now on.
    pub fn replace(&self, catalog: Catalog) {
        let fresh = std::sync::Arc::new(catalog);
        match self.current.write() {
            Ok(mut guard) => *guard = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
    }
}

/// A template the loader refused, and why (template, key and who may set it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedTemplate {
    pub template_id: String,
    pub reason: String,
}

/// Why no catalog could be read. Every variant is the user's to fix (a file or its content).
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "no template file in {} (looked for {}); run `orb init` or `orb templates generate > {}`",
        dir.display(),
        candidates.join(", "),
        dir.join("templates.json").display()
    )]
    NoTemplateFile {
        dir: PathBuf,
        candidates: Vec<String>,
    },
    #[error("cannot read template file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a template file (the message names the file and the place).
    #[error("{0}")]
    Invalid(String),
}

impl Catalog {
    pub fn get(&self, template_id: &str) -> Option<&Template> {
        self.templates.iter().find(|t| t.template_id == template_id)
    }

    /// The warnings and the refusals, for stderr and the log.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.warnings.clone();
        notes.extend(self.refused.iter().map(|r| r.reason.clone()));
        notes
    }

    /// The template `template_id`, or why there is none: refused when the templates were
    /// loaded (the reason names the key), or not defined (the error lists the ids there are).
    /// Every door reports a missing template through this one error.
    pub fn lookup(&self, template_id: &str) -> Result<&Template, BrokerError> {
        if let Some(refused) = self.refusal(template_id) {
            return Err(BrokerError::RefusedTemplate(refused.reason.clone()));
        }
        self.get(template_id)
            .ok_or_else(|| BrokerError::UnknownTemplate {
                template_id: template_id.to_string(),
                available: self.ids(),
            })
    }

    /// Why `template_id` was refused at load, if it was.
    pub fn refusal(&self, template_id: &str) -> Option<&RefusedTemplate> {
        self.refused.iter().find(|r| r.template_id == template_id)
    }

    pub fn ids(&self) -> String {
        if self.templates.is_empty() {
            return "none".into();
        }
        self.templates
            .iter()
            .map(|t| t.template_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The provider's template file in `config_dir`: the first of the names it may have.
pub fn find_template_file(
    config_dir: &Path,
    provider: &ProviderEntry,
) -> Result<PathBuf, CatalogError> {
    let candidates = template_file_candidates(&provider.name, &provider.provider_type);
    candidates
        .iter()
        .map(|name| config_dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| CatalogError::NoTemplateFile {
            dir: config_dir.to_path_buf(),
            candidates: candidates.clone(),
        })
}

/// Reads the catalog at `path`; `refuse` says why the provider will not take a template
/// (`None`: taken). A template that cannot be read is a warning, not a failure of the file.
pub fn load_catalog_from(
    path: &Path,
    provider: &ProviderEntry,
    refuse: impl Fn(&Template) -> Option<String>,
) -> Result<Catalog, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let label = path.display().to_string();
    let parsed = parse_template_file(&label, &text, Some(&provider.template_defaults))
        .map_err(|e| CatalogError::Invalid(e.to_string()))?;
    let mut catalog = Catalog {
        file: Some(path.to_path_buf()),
        ..Default::default()
    };
    for entry in parsed.entries {
        match entry {
            Ok(normalized) => {
                let id = normalized.template.template_id.clone();
                catalog.warnings.extend(
                    normalized
                        .warnings
                        .into_iter()
                        .map(|w| format!("template {id:?}: {w}")),
                );
                match refuse(&normalized.template) {
                    Some(reason) => catalog.refused.push(RefusedTemplate {
                        template_id: id,
                        reason,
                    }),
                    None => catalog.templates.push(normalized.template),
                }
            }
            Err(e) => catalog.warnings.push(e.to_string()),
        }
    }
    Ok(catalog)
}
