//! Kubernetes provider configuration (seed 001): every field with its default, three sources
//! applied in the documented order (file < `ORB_K8S_*` env < template overrides, a closed list
//! of per-template keys), the origin of
//! every value, validation that reports every problem with its source and fix, auth decisions
//! and the `orb config show` renderer.
//!
//! Typical use (compiled, not run):
//! ```no_run
//! # async fn demo(overrides: orb_k8s::config::TemplateOverrides) -> Result<(), Box<dyn std::error::Error>> {
//! use orb_k8s::config::{self, ConfigLayers, OutputFormat};
//! let file = config::read_provider_block("/etc/orb/config.json".as_ref(), "k8s")?;
//! let layers = ConfigLayers::from_process_env(file); // or ConfigLayers::new(file, a_map)
//! let resolved = layers.resolve(None)?; // provider-wide; every problem at once
//! for warning in &resolved.warnings {
//!     eprintln!("WARNING: {warning}");
//! }
//! let per_template = resolved.for_template(&overrides)?;
//! print!("{}", config::render_effective(&per_template, OutputFormat::Table, true));
//! let client = config::build_kube_client(&resolved.config).await?;
//! # let _ = client;
//! # Ok(())
//! # }
//! ```

pub mod auth;
mod coerce;
pub mod file;
pub mod issues;
pub mod json_schema;
mod layers;
pub mod model;
pub mod pod_defaults;
pub mod render;
mod resolve;
mod rules;
pub mod schema;
pub mod template_keys;
pub mod version;

#[cfg(test)]
mod tests_precedence;
#[cfg(test)]
mod tests_seed;
#[cfg(test)]
mod tests_validation;

pub use auth::{
    AuthEnvironment, AuthError, AuthPlan, KubeconfigSource, build_kube_client,
    build_kube_client_with, kube_config_for, plan_auth, resolve_default_namespace,
};
pub use file::{ConfigFileError, layer_from_config_value, provider_block, read_provider_block};
pub use issues::{ConfigErrors, ConfigIssue, ConfigWarning, FieldOrigin, Origin};
pub use json_schema::provider_settings_schema;
pub use layers::{FileLayer, TemplateOverrides};
pub use model::{
    ALL_NAMESPACES, K8sProviderConfig, NamespaceRefusal, NamespaceScope, NamingConfig,
};
pub use pod_defaults::{PodPlacement, apply_pod_defaults};
pub use render::{OutputFormat, render_effective};
pub use resolve::{ConfigLayers, ResolvedConfig, resolve_config};
pub use template_keys::{PER_TEMPLATE_KEYS, PerTemplateKey, template_override_problems};
pub use version::{KubernetesVersion, VersionError};
