//! Kubernetes provider configuration (seed 001): every field with its default, three sources
//! applied in the documented order (file < `ORB_K8S_*` env < template overrides), the origin of
//! every value, validation that reports every problem with its source and fix, auth decisions
//! and the `orb config show` renderer.
//!
//! Typical use:
//! ```ignore
//! let file = config::read_provider_block(&config_json, "k8s")?;
//! let layers = config::ConfigLayers::new(file, std::env::vars());
//! let resolved = layers.resolve(None)?;            // provider-wide
//! let per_template = resolved.for_template(&overrides)?;
//! let client = config::build_kube_client(&resolved.config).await?;
//! ```

pub mod auth;
mod coerce;
pub mod file;
pub mod issues;
mod layers;
pub mod model;
pub mod pod_defaults;
pub mod render;
mod resolve;
mod rules;
pub mod schema;
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
pub use layers::{FileLayer, TemplateOverrides};
pub use model::{ALL_NAMESPACES, K8sProviderConfig, NamespaceScope, NamingConfig};
pub use pod_defaults::{PodPlacement, apply_pod_defaults};
pub use render::{OutputFormat, render_effective};
pub use resolve::{ConfigLayers, ResolvedConfig, resolve_config};
pub use version::{KubernetesVersion, VersionError};
