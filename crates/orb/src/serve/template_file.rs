//! The template file `orb serve` follows: every call that reads templates (the REST template
//! routes, a REST acquire, each HostFactory call) first checks the file's size and mtime, and
//! on a change reloads it into the broker's catalog. REST and the HostFactory route therefore
//! always answer from the same catalog, and an edit takes effect on the next call, as it does
//! for the scripts run directly.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use orb_broker::Broker;
use orb_broker::catalog::Catalog;
use orb_core::config::ProviderEntry;

use crate::context;
use crate::failure::Failure;

/// Where the template file of the served provider is looked up on each call.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    pub config_dir: PathBuf,
    pub entry: ProviderEntry,
}

/// What identifies one version of the file: which file it is, its size and its mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
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
}

/// The followed file and what its last load said.
#[derive(Debug, Default)]
pub struct TemplateFile {
    last: Mutex<Option<(Option<Stamp>, Loaded)>>,
}

fn stamp_of(source: &TemplateSource) -> Result<Stamp, Failure> {
    let path = context::find_template_file(&source.config_dir, &source.entry)?;
    let meta = std::fs::metadata(&path)
        .map_err(|e| Failure::invalid(format!("cannot read {}: {e}", path.display())))?;
    Ok(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        path,
    })
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
        if let (Ok(now), Some((Some(seen), loaded))) = (&stamp, last.as_ref())
            && now == seen
        {
            return loaded.clone();
        }
        let (catalog, loaded) = match stamp
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|s| context::load_catalog_from(&s.path, &source.entry))
        {
            Ok(catalog) => {
                let warnings = catalog.notes();
                (
                    catalog,
                    Loaded {
                        warnings,
                        failure: None,
                    },
                )
            }
            Err(failure) => (
                Catalog::default(),
                Loaded {
                    warnings: vec![failure.message.clone()],
                    failure: Some(failure),
                },
            ),
        };
        broker.catalog.replace(catalog);
        *last = Some((stamp.ok(), loaded.clone()));
        loaded
    }
}
