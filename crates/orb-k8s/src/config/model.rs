//! The typed provider configuration (seed 001, `K8sProviderConfig`) with the seed's defaults.
//!
//! The JSON shape is flat, exactly as operators write it in `config.json`; only `naming` is
//! nested. Fields are ordered and commented by the seed's groups.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Toleration;
use serde::{Deserialize, Serialize};

use super::version::KubernetesVersion;

/// Every field of the Kubernetes provider configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct K8sProviderConfig {
    // --- Authentication and cluster targeting
    /// Explicit kubeconfig file; unset falls back to `KUBECONFIG`, then `~/.kube/config`.
    pub kubeconfig_path: Option<PathBuf>,
    /// kubeconfig context to activate; unset uses the file's current context.
    pub context: Option<String>,
    /// Force in-cluster (`true`) or kubeconfig (`false`) auth; unset auto-detects.
    pub in_cluster: Option<bool>,

    // --- Namespacing
    /// Single-namespace target; unset = service-account namespace in-cluster, else `default`.
    pub namespace: Option<String>,
    /// Managed namespaces; `["*"]` means cluster-wide.
    pub namespaces: Option<Vec<String>>,

    // --- Labels
    pub label_prefix: String,
    pub emit_legacy_labels: bool,

    // --- Pod defaults
    pub default_node_selector: Option<BTreeMap<String, String>>,
    pub default_tolerations: Option<Vec<Toleration>>,
    pub default_image_pull_secret: Option<String>,

    // --- Timing
    pub pod_timeout_seconds: u64,
    pub delete_timed_out_pods: bool,
    pub stale_cache_timeout_seconds: u64,

    // --- Watch and reconciliation
    pub watch_enabled: bool,
    pub min_kubernetes_version: String,
    pub auto_cleanup_orphans: bool,
    pub orphan_gc_enabled: bool,
    pub orphan_gc_interval_seconds: u64,
    pub orphan_min_age_seconds: u64,
    pub periodic_resync_interval_seconds: u64,

    // --- Security audit
    pub audit_high_risk_pod_fields: bool,
    pub reject_high_risk_pod_fields: bool,
    /// Pod Security Standards profile the audit enforces: `baseline` or `restricted`.
    pub pod_security_profile: String,

    // --- Opt-in features
    pub node_watch_enabled: bool,
    pub events_watch_enabled: bool,
    pub inbound_auth_enabled: bool,

    // --- Controller status cache
    pub controller_status_cache_ttl_seconds: f64,

    // --- Resilience
    pub circuit_breaker_failure_threshold: u32,
    pub circuit_breaker_reset_timeout: u64,
    pub max_retries: u32,
    pub retry_base_delay: f64,
    pub retry_max_delay: f64,

    // --- Observability
    pub metrics_enabled: bool,

    // --- Native spec escape hatch
    pub native_spec_enabled: bool,
    /// minijinja fuel of one rendering (about one per instruction and per 64 bytes made).
    pub native_spec_render_fuel: u64,
    /// Largest text one rendering may produce, in bytes.
    pub native_spec_render_max_bytes: u64,
    /// Wall-clock limit of rendering one object, in milliseconds.
    pub native_spec_render_timeout_ms: u64,

    // --- Resource naming
    pub naming: NamingConfig,
}

/// `naming.*`: how generated resource names are built and how long each kind may be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamingConfig {
    pub prefix: String,
    pub uuid_chars: u32,
    pub max_pod_name_len: u32,
    pub max_deployment_name_len: u32,
    pub max_statefulset_name_len: u32,
    pub max_job_name_len: u32,
}

impl Default for NamingConfig {
    fn default() -> Self {
        Self {
            prefix: "orb".to_string(),
            uuid_chars: 20,
            max_pod_name_len: 63,
            max_deployment_name_len: 47,
            max_statefulset_name_len: 57,
            max_job_name_len: 50,
        }
    }
}

impl Default for K8sProviderConfig {
    fn default() -> Self {
        Self {
            kubeconfig_path: None,
            context: None,
            in_cluster: None,
            namespace: None,
            namespaces: None,
            label_prefix: "orb.io".to_string(),
            emit_legacy_labels: true,
            default_node_selector: None,
            default_tolerations: None,
            default_image_pull_secret: None,
            pod_timeout_seconds: 300,
            delete_timed_out_pods: true,
            stale_cache_timeout_seconds: 600,
            watch_enabled: true,
            min_kubernetes_version: "1.28".to_string(),
            auto_cleanup_orphans: false,
            orphan_gc_enabled: false,
            orphan_gc_interval_seconds: 300,
            orphan_min_age_seconds: 300,
            periodic_resync_interval_seconds: 0,
            audit_high_risk_pod_fields: true,
            reject_high_risk_pod_fields: true,
            pod_security_profile: "baseline".to_string(),
            node_watch_enabled: false,
            events_watch_enabled: false,
            inbound_auth_enabled: false,
            controller_status_cache_ttl_seconds: 5.0,
            circuit_breaker_failure_threshold: 5,
            circuit_breaker_reset_timeout: 60,
            max_retries: 3,
            retry_base_delay: 1.0,
            retry_max_delay: 30.0,
            metrics_enabled: true,
            native_spec_enabled: false,
            native_spec_render_fuel: 1_000_000,
            native_spec_render_max_bytes: 1_048_576,
            native_spec_render_timeout_ms: 2_000,
            naming: NamingConfig::default(),
        }
    }
}

/// Which namespaces the provider manages, derived from `namespace` / `namespaces`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceScope {
    /// One namespace, one namespaced watch (the `namespace` field or its auto-detected value).
    Single(String),
    /// An explicit list: one namespaced watch per entry.
    Multi(Vec<String>),
    /// `["*"]`: one cluster-scoped watch; needs a ClusterRole.
    ClusterWide,
}

/// Why a template or request may not create objects in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceRefusal {
    #[error(
        "namespace {namespace:?} is not a valid namespace name: it {problems}; use a DNS-1123 \
         label (lowercase letters, digits and '-', at most 63 characters)"
    )]
    InvalidName { namespace: String, problems: String },
    #[error(
        "namespace {namespace:?} is not managed by this provider (managed: {managed}); set the \
         template's namespace to one of them, or add it to namespaces (ORB_K8S_NAMESPACES)"
    )]
    NotManaged { namespace: String, managed: String },
}

impl NamespaceScope {
    /// Whether a template or request may target `namespace`. A single-namespace provider lets
    /// a template name another namespace (seed 000: the template's `namespace` overrides the
    /// provider's); an explicit list is a hard boundary; cluster-wide allows any.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Single(_) | Self::ClusterWide => true,
            Self::Multi(list) => list.iter().any(|n| n == namespace),
        }
    }

    /// [`Self::allows`] plus the name check, as an error to return before anything is created.
    pub fn check_target(&self, namespace: &str) -> Result<(), NamespaceRefusal> {
        let problems = crate::validation::dns1123_label_problems(namespace);
        if !problems.is_empty() {
            return Err(NamespaceRefusal::InvalidName {
                namespace: namespace.to_string(),
                problems: problems.join(" and "),
            });
        }
        match self {
            Self::Multi(list) if !self.allows(namespace) => Err(NamespaceRefusal::NotManaged {
                namespace: namespace.to_string(),
                managed: list.join(", "),
            }),
            _ => Ok(()),
        }
    }
}

/// Marker value of `namespaces` that selects a cluster-wide watch.
pub const ALL_NAMESPACES: &str = "*";

impl K8sProviderConfig {
    /// The namespace a template without its own `namespace` lands in. `detected` is the
    /// auto-detected value (service-account namespace in-cluster, else `default`; see
    /// [`super::auth::resolve_default_namespace`]).
    pub fn default_namespace(&self, detected: &str) -> String {
        // `namespaces` wins: a `namespace` outside an explicit list is ignored (with a
        // warning at load, see the config rules).
        let listed = |ns: &String| match self.namespaces.as_deref() {
            Some(list) if !list.is_empty() && list[0] != ALL_NAMESPACES => list.contains(ns),
            _ => true,
        };
        if let Some(ns) = self.namespace.as_ref().filter(|ns| listed(ns)) {
            return ns.clone();
        }
        match self.namespaces.as_deref() {
            Some([first, ..]) if first != ALL_NAMESPACES => first.clone(),
            _ => detected.to_string(),
        }
    }

    /// The watch scope. `detected` as for [`Self::default_namespace`].
    pub fn namespace_scope(&self, detected: &str) -> NamespaceScope {
        match self.namespaces.as_deref() {
            Some([only]) if only == ALL_NAMESPACES => NamespaceScope::ClusterWide,
            Some(list) if !list.is_empty() => NamespaceScope::Multi(list.to_vec()),
            _ => NamespaceScope::Single(self.default_namespace(detected)),
        }
    }

    pub fn pod_timeout(&self) -> Duration {
        Duration::from_secs(self.pod_timeout_seconds)
    }

    pub fn stale_cache_timeout(&self) -> Duration {
        Duration::from_secs(self.stale_cache_timeout_seconds)
    }

    pub fn orphan_gc_interval(&self) -> Duration {
        Duration::from_secs(self.orphan_gc_interval_seconds)
    }

    pub fn orphan_min_age(&self) -> Duration {
        Duration::from_secs(self.orphan_min_age_seconds)
    }

    /// `None` when the periodic resync backstop is disabled (interval 0).
    pub fn periodic_resync_interval(&self) -> Option<Duration> {
        (self.periodic_resync_interval_seconds > 0)
            .then(|| Duration::from_secs(self.periodic_resync_interval_seconds))
    }

    /// `None` when controller status caching is disabled (TTL 0).
    pub fn controller_status_cache_ttl(&self) -> Option<Duration> {
        (self.controller_status_cache_ttl_seconds > 0.0)
            .then(|| Duration::from_secs_f64(self.controller_status_cache_ttl_seconds))
    }

    pub fn circuit_breaker_reset(&self) -> Duration {
        Duration::from_secs(self.circuit_breaker_reset_timeout)
    }

    pub fn retry_base(&self) -> Duration {
        Duration::from_secs_f64(self.retry_base_delay)
    }

    pub fn retry_cap(&self) -> Duration {
        Duration::from_secs_f64(self.retry_max_delay)
    }

    /// The parsed minimum server version. Validation at load guarantees this succeeds for a
    /// config obtained from [`super::resolve_config`].
    pub fn min_server_version(&self) -> Result<KubernetesVersion, super::version::VersionError> {
        KubernetesVersion::parse(&self.min_kubernetes_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn with_namespaces(namespace: Option<&str>, namespaces: Option<&[&str]>) -> K8sProviderConfig {
        K8sProviderConfig {
            namespace: namespace.map(str::to_string),
            namespaces: namespaces.map(|l| l.iter().map(|s| s.to_string()).collect()),
            ..K8sProviderConfig::default()
        }
    }

    #[rstest]
    #[case::unset(None, None, NamespaceScope::Single("detected".into()))]
    #[case::single(Some("orb"), None, NamespaceScope::Single("orb".into()))]
    #[case::multi(None, Some(&["a", "b"][..]), NamespaceScope::Multi(vec!["a".into(), "b".into()]))]
    #[case::cluster_wide(None, Some(&["*"][..]), NamespaceScope::ClusterWide)]
    fn namespace_scope_follows_the_three_modes(
        #[case] namespace: Option<&str>,
        #[case] namespaces: Option<&[&str]>,
        #[case] expected: NamespaceScope,
    ) {
        let cfg = with_namespaces(namespace, namespaces);
        assert_eq!(cfg.namespace_scope("detected"), expected);
    }

    #[rstest]
    #[case::explicit_namespace_wins(Some("orb"), Some(&["a", "orb"][..]), "orb")]
    #[case::namespaces_win_over_an_unlisted_namespace(Some("orb"), Some(&["team-a", "team-b"][..]), "team-a")]
    #[case::cluster_wide_uses_the_namespace(Some("orb"), Some(&["*"][..]), "orb")]
    #[case::first_of_the_list(None, Some(&["a", "b"][..]), "a")]
    #[case::cluster_wide_uses_detected(None, Some(&["*"][..]), "detected")]
    #[case::nothing_set_uses_detected(None, None, "detected")]
    fn default_namespace_for_templates_without_one(
        #[case] namespace: Option<&str>,
        #[case] namespaces: Option<&[&str]>,
        #[case] expected: &str,
    ) {
        let cfg = with_namespaces(namespace, namespaces);
        assert_eq!(cfg.default_namespace("detected"), expected);
    }

    #[test]
    fn multi_namespace_scope_refuses_namespaces_outside_the_list() {
        let scope = with_namespaces(None, Some(&["a", "b"])).namespace_scope("default");
        assert!(scope.allows("a"));
        assert!(!scope.allows("default"));
        assert_eq!(
            scope.check_target("default").unwrap_err().to_string(),
            "namespace \"default\" is not managed by this provider (managed: a, b); set the \
             template's namespace to one of them, or add it to namespaces (ORB_K8S_NAMESPACES)"
        );
        assert_eq!(scope.check_target("b"), Ok(()));
    }

    #[rstest]
    #[case::single(NamespaceScope::Single("orb".into()))]
    #[case::cluster_wide(NamespaceScope::ClusterWide)]
    fn single_and_cluster_wide_scopes_accept_template_namespaces(#[case] scope: NamespaceScope) {
        assert_eq!(scope.check_target("team-x"), Ok(()));
    }

    #[test]
    fn a_target_namespace_must_be_a_dns_label_in_every_mode() {
        let err = NamespaceScope::ClusterWide
            .check_target("production.jobs")
            .unwrap_err();
        assert!(matches!(err, NamespaceRefusal::InvalidName { .. }), "{err}");
    }

    #[test]
    fn zero_disables_resync_and_status_cache() {
        let cfg = K8sProviderConfig {
            controller_status_cache_ttl_seconds: 0.0,
            ..K8sProviderConfig::default()
        };
        assert_eq!(cfg.periodic_resync_interval(), None);
        assert_eq!(cfg.controller_status_cache_ttl(), None);
        assert_eq!(
            K8sProviderConfig::default().controller_status_cache_ttl(),
            Some(Duration::from_secs(5))
        );
    }
}
