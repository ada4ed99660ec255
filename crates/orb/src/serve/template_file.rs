//! The template file `orb serve` follows: every call that reads templates (the REST template
//! routes, a REST acquire, each HostFactory call) first checks the file's size and mtime, and
//! on a change reloads it into the broker's catalog. REST and the HostFactory route therefore
//! always answer from the same catalog, and an edit takes effect on the next call, as it does
//! for the scripts run directly. No file at all is an empty catalog (the reference broker's
//! clients list templates before they create the first one); template writes through the API
//! replace the file atomically and make the next call reload it.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use orb_broker::Broker;
use orb_broker::catalog::{Catalog, CatalogError};
use orb_core::config::ProviderEntry;

use crate::context;
use crate::failure::Failure;

/// Where the template file of the served provider is looked up on each call.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    pub config_dir: PathBuf,
    pub entry: ProviderEntry,
}

/// What identifies one version of the file: which file it is (none yet), its size and mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    path: Option<PathBuf>,
    len: u64,
    modified: Option<SystemTime>,
}

/// What the last load of the file said, for the calls until it changes.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Warnings and refusals of the templates, or why the file could not be read.
    pub warnings: Vec<String>,
    /// Why the file could not be read; the catalog is then empty.
    pub failure: Option<Failure>,
    /// Why there is no file at all (the catalog is empty): for HostFactory, whose
    /// getAvailableTemplates fails then as the script run directly does.
    pub missing: Option<Failure>,
}

/// The followed file and what its last load said.
#[derive(Debug, Default)]
pub struct TemplateFile {
    last: Mutex<Option<(Option<Stamp>, Loaded)>>,
}

fn stamp_of(source: &TemplateSource) -> Result<(Stamp, Option<Failure>), Failure> {
    let path = match orb_broker::catalog::find_template_file(&source.config_dir, &source.entry) {
        Ok(path) => path,
        Err(missing @ CatalogError::NoTemplateFile { .. }) => {
            let stamp = Stamp {
                path: None,
                len: 0,
                modified: None,
            };
            return Ok((stamp, Some(Failure::from(missing))));
        }
        Err(other) => return Err(other.into()),
    };
    let meta = std::fs::metadata(&path)
        .map_err(|e| Failure::invalid(format!("cannot read {}: {e}", path.display())))?;
    let stamp = Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        path: Some(path),
    };
    Ok((stamp, None))
}

/// The file a template write replaces: the one the server follows, or when there is none
/// yet `<provider name>_templates.json` in the config directory (the first name looked for).
pub fn file_to_write(source: &TemplateSource) -> PathBuf {
    orb_broker::catalog::find_template_file(&source.config_dir, &source.entry).unwrap_or_else(
        |_| {
            source
                .config_dir
                .join(format!("{}_templates.json", source.entry.name))
        },
    )
}

impl TemplateFile {
    /// Brings `broker`'s catalog up to date with the file (reloading only when it changed)
    /// and says what its load said.
    pub fn sync(&self, source: &TemplateSource, broker: &Broker) -> Loaded {
        let stamp = stamp_of(source);
        let mut last = match self.last.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let (Ok((now, _)), Some((Some(seen), loaded))) = (&stamp, last.as_ref())
            && now == seen
        {
            return loaded.clone();
        }
        let loaded_from = stamp.clone().and_then(|(s, missing)| match &s.path {
            Some(path) => context::load_catalog_from(path, &source.entry).map(|c| (c, None)),
            None => Ok((Catalog::default(), missing)),
        });
        let (catalog, loaded) = match loaded_from {
            Ok((catalog, missing)) => {
                let warnings = catalog.notes();
                (
                    catalog,
                    Loaded {
                        warnings,
                        failure: None,
                        missing,
                    },
                )
            }
            Err(failure) => (
                Catalog::default(),
                Loaded {
                    warnings: vec![failure.message.clone()],
                    failure: Some(failure),
                    missing: None,
                },
            ),
        };
        broker.catalog.replace(catalog);
        *last = Some((stamp.ok().map(|(s, _)| s), loaded.clone()));
        loaded
    }

    /// Makes the next [`Self::sync`] reload the file whatever its stamp says (after a write
    /// that may keep its size within one mtime tick).
    pub fn forget(&self) {
        let mut last = match self.last.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        *last = None;
    }
}
