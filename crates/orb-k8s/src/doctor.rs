//! `orb doctor`: can this provider config work against this cluster? Checks connectivity, the
//! server version against `min_kubernetes_version`, the APIs the enabled features need, and
//! every RBAC permission they use (SelfSubjectAccessReview), each with the fix when it fails.
//!
//! Which permissions are needed is a pure function of the config ([`required_permissions`])
//! over orb's permission table (crate::rbac); the checks themselves only ask the apiserver.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::api::PostParams;
use kube::{Api, Client};
use serde::Serialize;

use crate::config::{K8sProviderConfig, KubernetesVersion, NamespaceScope};
use crate::daemon::nodes::NODE_EVENTS_NAMESPACE;
use crate::rbac::{Feature, GRANTS, Reach};

/// One verb on one resource, in one namespace (`None`: cluster-wide or cluster-scoped).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub verb: &'static str,
    pub namespace: Option<String>,
    /// The feature that needs it, for the report.
    pub needed_for: Feature,
}

/// Every permission of orb's table ([`GRANTS`]) that the config's features need, per managed
/// namespace (or cluster-wide for `["*"]`). The Lease is left out: leader election is a flag
/// of `orb serve`, which checks the Lease itself when it starts.
pub fn required_permissions(cfg: &K8sProviderConfig, scope: &NamespaceScope) -> Vec<Permission> {
    let managed: Vec<Option<String>> = match scope {
        NamespaceScope::Single(ns) => vec![Some(ns.clone())],
        NamespaceScope::Multi(list) => list.iter().cloned().map(Some).collect(),
        NamespaceScope::ClusterWide => vec![None],
    };
    let mut out = Vec::new();
    for grant in GRANTS {
        if grant.feature.enabled_in(cfg) != Some(true) {
            continue;
        }
        let namespaces = match grant.feature.reach() {
            Reach::Managed => managed.clone(),
            Reach::Cluster => vec![None],
            Reach::Namespace => vec![Some(NODE_EVENTS_NAMESPACE.to_string())],
        };
        for namespace in namespaces {
            for verb in grant.verbs {
                out.push(Permission {
                    group: grant.group,
                    resource: grant.resource,
                    subresource: grant.subresource,
                    verb,
                    namespace: namespace.clone(),
                    needed_for: grant.feature,
                });
            }
        }
    }
    out
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub check: String,
    pub ok: bool,
    pub detail: String,
    /// What to do when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl CheckResult {
    fn pass(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn fail(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Compares the server's version with `min_kubernetes_version` (pure).
pub fn check_version(server: &KubernetesVersion, minimum: &KubernetesVersion) -> CheckResult {
    if server >= minimum {
        CheckResult::pass("server version", format!("{server} (minimum {minimum})"))
    } else {
        CheckResult::fail(
            "server version",
            format!("{server} is older than min_kubernetes_version {minimum}"),
            format!(
                "upgrade the cluster to {minimum} or later, or lower min_kubernetes_version \
                 (provider config, or ORB_K8S_MIN_KUBERNETES_VERSION)"
            ),
        )
    }
}

/// The apiserver's version (from `gitVersion`, else `major`/`minor`) against
/// `min_kubernetes_version` (pure): `orb doctor`'s check, and `orb serve`'s at start and in
/// `/readyz`.
pub fn version_result(info: &Info, cfg: &K8sProviderConfig) -> CheckResult {
    let server = KubernetesVersion::parse(&info.git_version)
        .or_else(|_| KubernetesVersion::from_server_info(&info.major, &info.minor));
    match (server, cfg.min_server_version()) {
        (Ok(server), Ok(min)) => check_version(&server, &min),
        (Err(e), _) => CheckResult::fail(
            "server version",
            format!(
                "cannot read the server version {:?} ({:?}.{:?}): {e}",
                info.git_version, info.major, info.minor
            ),
            "check that the endpoint is a Kubernetes apiserver",
        ),
        (_, Err(e)) => CheckResult::fail(
            "server version",
            format!("min_kubernetes_version is not a version: {e}"),
            "set min_kubernetes_version to e.g. \"1.28\"",
        ),
    }
}

/// Runs every check against the cluster; never fails as a whole (a failure is a result).
pub async fn run_checks(
    client: &Client,
    cfg: &K8sProviderConfig,
    scope: &NamespaceScope,
) -> Vec<CheckResult> {
    let mut results = Vec::new();
    let info = match client.apiserver_version().await {
        Ok(info) => info,
        Err(e) => {
            results.push(CheckResult::fail(
                "connectivity",
                format!("the apiserver did not answer: {e}"),
                "check kubeconfig_path / context / in_cluster (orb config show --origin) and that the cluster is reachable",
            ));
            return results;
        }
    };
    results.push(CheckResult::pass(
        "connectivity",
        format!("apiserver {}", info.git_version),
    ));
    results.push(version_result(&info, cfg));
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for p in required_permissions(cfg, scope) {
        let where_ = p
            .namespace
            .as_deref()
            .map_or("cluster-wide".to_string(), |n| format!("in {n}"));
        let group = if p.group.is_empty() { "core" } else { p.group };
        let resource = match p.subresource {
            Some(sub) => format!("{}/{sub}", p.resource),
            None => p.resource.to_string(),
        };
        let name = format!("rbac: {} {group}/{resource} {where_}", p.verb);
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(p.group.to_string()),
                    resource: Some(p.resource.to_string()),
                    subresource: p.subresource.map(String::from),
                    verb: Some(p.verb.to_string()),
                    namespace: p.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        results.push(match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {
                CheckResult::pass(name, format!("allowed (needed for {})", p.needed_for.name()))
            }
            Ok(answer) => CheckResult::fail(
                name,
                format!(
                    "denied{} (needed for {})",
                    answer
                        .status
                        .and_then(|s| s.reason)
                        .filter(|r| !r.is_empty())
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default(),
                    p.needed_for.name()
                ),
                "grant it with the Role (or, for \"*\", the ClusterRole) in docs/rbac.yaml",
            ),
            Err(e) => CheckResult::fail(
                name,
                format!("could not ask the apiserver: {e}"),
                "allow create on authorization.k8s.io/selfsubjectaccessreviews (every authenticated user has it by default)",
            ),
        });
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: serde_json::Value) -> K8sProviderConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn every_always_on_row_of_the_table_is_checked_in_each_managed_namespace() {
        let c = cfg(serde_json::json!({}));
        let perms = required_permissions(&c, &NamespaceScope::Multi(vec!["a".into(), "b".into()]));
        for ns in ["a", "b"] {
            let asked: std::collections::BTreeSet<_> = perms
                .iter()
                .filter(|p| p.namespace.as_deref() == Some(ns))
                .map(|p| {
                    let resource = match p.subresource {
                        Some(sub) => format!("{}/{sub}", p.resource),
                        None => p.resource.to_string(),
                    };
                    (p.group.to_string(), resource, p.verb.to_string())
                })
                .collect();
            assert_eq!(asked, crate::rbac::managed_entries(), "in {ns}");
        }
        assert!(perms.iter().any(|p| p.resource == "pods"
            && p.subresource == Some("eviction")
            && p.verb == "create"));
        assert!(perms.iter().all(|p| p.namespace.is_some()));
    }

    #[test]
    fn cluster_wide_mode_asks_without_a_namespace() {
        let c = cfg(serde_json::json!({}));
        let perms = required_permissions(&c, &NamespaceScope::ClusterWide);
        assert!(perms.iter().all(|p| p.namespace.is_none()));
    }

    #[test]
    fn opt_in_features_add_their_permissions() {
        let c = cfg(
            serde_json::json!({"node_watch_enabled": true, "events_watch_enabled": true,
                                       "inbound_auth_enabled": true}),
        );
        let perms = required_permissions(&c, &NamespaceScope::Single("ns".into()));
        for (resource, feature) in [
            ("nodes", "node_watch_enabled"),
            ("events", "events_watch_enabled"),
            ("tokenreviews", "inbound_auth_enabled"),
        ] {
            assert!(
                perms
                    .iter()
                    .any(|p| p.resource == resource && p.needed_for.name() == feature),
                "{resource}"
            );
        }
        assert!(
            perms
                .iter()
                .filter(|p| p.needed_for == Feature::EventsWatch)
                .all(|p| p.group.is_empty() && p.namespace.as_deref() == Some("default")),
            "the events watcher reads core/v1 Events in default"
        );
        assert!(
            perms
                .iter()
                .filter(|p| p.resource == "nodes")
                .all(|p| p.namespace.is_none())
        );
    }

    #[test]
    fn version_check_says_how_to_fix_an_old_server() {
        let server = KubernetesVersion::parse("1.27").unwrap();
        let min = KubernetesVersion::parse("1.28").unwrap();
        let r = check_version(&server, &min);
        assert!(!r.ok);
        assert!(r.fix.unwrap().contains("1.28"));
        assert!(check_version(&min, &min).ok);
    }

    #[test]
    fn the_server_version_comes_from_git_version_else_major_minor() {
        let cfg = K8sProviderConfig::default();
        let info = |git: &str, major: &str, minor: &str| Info {
            git_version: git.into(),
            major: major.into(),
            minor: minor.into(),
            ..Default::default()
        };
        assert!(version_result(&info("v1.37.2", "1", "37"), &cfg).ok);
        assert!(version_result(&info("v1.37.0-rc.1+abc", "", ""), &cfg).ok);
        let old = version_result(&info("weird", "1", "27+"), &cfg);
        assert!(!old.ok);
        assert_eq!(old.detail, "1.27 is older than min_kubernetes_version 1.28");
        assert!(old.fix.unwrap().contains("ORB_K8S_MIN_KUBERNETES_VERSION"));
        assert!(!version_result(&info("", "", ""), &cfg).ok);
    }
}
