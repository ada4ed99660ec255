//! The one place that turns a config `providers[]` entry into a [`Provider`].
//!
//! To plug a provider in, add a match arm for its `type` that parses `entry.config` and
//! returns `Arc::new(TheProvider::new(..)?)`. Everything else in the CLI talks to
//! `Arc<dyn Provider>` only.

use std::path::PathBuf;
use std::sync::Arc;

use orb_core::config::ProviderEntry;
use orb_core::provider::{Provider, ProviderError};

/// What a provider may need besides its own config block.
#[derive(Debug, Clone)]
pub struct ProviderContext {
    pub config_dir: PathBuf,
    pub work_dir: PathBuf,
}

/// Provider types the config may name, for messages and `orb init`.
pub const KUBERNETES_TYPES: &[&str] = &["k8s", "kubernetes"];

pub fn build_provider(
    entry: &ProviderEntry,
    _context: &ProviderContext,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let kind = entry.provider_type.trim().to_ascii_lowercase();
    if KUBERNETES_TYPES.contains(&kind.as_str()) {
        return Err(ProviderError::Misconfigured(format!(
            "provider type '{}' is not available in this build yet (provider {:?})",
            entry.provider_type, entry.name
        )));
    }
    Err(ProviderError::Misconfigured(format!(
        "provider {:?} has type {:?}, which orb does not know; use \"k8s\" (or \"kubernetes\")",
        entry.name, entry.provider_type
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn entry(kind: &str) -> ProviderEntry {
        ProviderEntry {
            name: "p".into(),
            provider_type: kind.into(),
            enabled: true,
            default: false,
            config: serde_json::Value::Null,
            template_defaults: Default::default(),
        }
    }

    fn context() -> ProviderContext {
        ProviderContext {
            config_dir: "/c".into(),
            work_dir: "/w".into(),
        }
    }

    #[rstest]
    #[case(
        "kubernetes",
        "provider type 'kubernetes' is not available in this build yet"
    )]
    #[case("k8s", "provider type 'k8s' is not available in this build yet")]
    #[case("aws", "which orb does not know")]
    fn every_type_is_answered_clearly(#[case] kind: &str, #[case] needle: &str) {
        let err = build_provider(&entry(kind), &context()).err().unwrap();
        assert!(err.to_string().contains(needle), "{err}");
    }
}
