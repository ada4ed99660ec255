//! Every permission orb asks the apiserver for, as one table: per feature, each API group,
//! resource (with its subresource) and verb. docs/rbac.yaml and the Helm chart's roles are
//! tested equal to it, and `orb doctor` checks exactly its rows for the features a config
//! enables. A new API call starts here.

use serde::Serialize;

use crate::config::K8sProviderConfig;

/// The part of orb that needs a permission, which decides when and where it is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Feature {
    /// The four handlers: acquire, status, release, cancel; orphan GC lists and deletes too.
    Handlers,
    /// `orb serve`'s pod watch cache.
    WatchCache,
    /// `orb serve`'s machine pod view (the console's drawer): the pod and its events.
    MachinePod,
    /// `node_watch_enabled`.
    NodeWatch,
    /// `events_watch_enabled`: Karpenter's node events, read in `default`.
    EventsWatch,
    /// `inbound_auth_enabled`: `orb serve` checks Bearer tokens with the TokenReview API.
    InboundAuth,
    /// `orb serve --leader-elect`: the Lease in the provider's default namespace.
    LeaderElection,
}

/// Where a feature's permissions apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Each managed namespace (the ClusterRole for `namespaces: ["*"]`).
    Managed,
    /// Cluster-scoped resources: only a ClusterRole grants them.
    Cluster,
    /// One namespace whatever orb manages (node events, the Lease).
    Namespace,
}

impl Feature {
    /// The switch that turns the feature on (docs/rbac.yaml's commented blocks carry it);
    /// `None`: always on.
    pub const fn switch(self) -> Option<&'static str> {
        match self {
            Feature::Handlers | Feature::WatchCache | Feature::MachinePod => None,
            Feature::NodeWatch => Some("node_watch_enabled"),
            Feature::EventsWatch => Some("events_watch_enabled"),
            Feature::InboundAuth => Some("inbound_auth_enabled"),
            Feature::LeaderElection => Some("leader_election"),
        }
    }

    /// How doctor's report names it: the switch, or what needs it.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::Handlers => "the handlers",
            Feature::WatchCache => "orb serve's watch cache",
            Feature::MachinePod => "orb serve's machine pod view",
            _ => match self.switch() {
                Some(switch) => switch,
                None => "orb",
            },
        }
    }

    pub const fn reach(self) -> Reach {
        match self {
            Feature::Handlers | Feature::WatchCache | Feature::MachinePod => Reach::Managed,
            Feature::NodeWatch | Feature::InboundAuth => Reach::Cluster,
            Feature::EventsWatch | Feature::LeaderElection => Reach::Namespace,
        }
    }

    /// Whether the provider config turns the feature on; `None` when the config cannot tell
    /// (leader election is a flag of `orb serve`).
    pub fn enabled_in(self, cfg: &K8sProviderConfig) -> Option<bool> {
        match self {
            Feature::Handlers | Feature::WatchCache | Feature::MachinePod => Some(true),
            Feature::NodeWatch => Some(cfg.node_watch_enabled),
            Feature::EventsWatch => Some(cfg.events_watch_enabled),
            Feature::InboundAuth => Some(cfg.inbound_auth_enabled),
            Feature::LeaderElection => None,
        }
    }
}

/// One row: `verbs` on `group`/`resource` (`resource/subresource` to RBAC) for `feature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub feature: Feature,
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub verbs: &'static [&'static str],
    /// The calls that use it, for docs and doctor's report.
    pub why: &'static str,
}

const fn grant(
    feature: Feature,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Grant {
    Grant {
        feature,
        group,
        resource,
        subresource: None,
        verbs,
        why,
    }
}

use Feature::*;

/// Everything orb calls. Read from the code (and proven by the cluster tests, which run as
/// these rules): handlers/, cancel.rs, dry_run.rs, pod_read.rs,
/// daemon/ (pod_cache, reconcile, nodes, leader), pod_description.rs and `orb serve`'s
/// token_review.rs.
pub const GRANTS: &[Grant] = &[
    grant(
        Handlers,
        "",
        "pods",
        &["create", "get", "list", "patch", "delete"],
        "Pod handler creates; status reads; the Deployment release marks victims with pod-deletion-cost; Pod release, cancel, timeouts and orphan GC delete",
    ),
    Grant {
        subresource: Some("eviction"),
        ..grant(
            Handlers,
            "",
            "pods",
            &["create"],
            "the Deployment release evicts the returned pods (a dry run first) when the ReplicaSet would remove a Pending or not-Ready sibling",
        )
    },
    grant(
        Handlers,
        "",
        "services",
        &["create", "get", "list", "delete"],
        "the headless Service of a StatefulSet; cancel lists and deletes it",
    ),
    grant(
        Handlers,
        "apps",
        "deployments",
        &["create", "get", "list", "patch", "delete"],
        "scale down with a resourceVersion precondition; orphan GC lists",
    ),
    grant(
        Handlers,
        "apps",
        "statefulsets",
        &["create", "get", "list", "patch", "delete"],
        "scale to the surviving tail; orphan GC lists",
    ),
    grant(
        Handlers,
        "batch",
        "jobs",
        &["create", "get", "list", "delete"],
        "Job handler; orphan GC lists",
    ),
    grant(
        WatchCache,
        "",
        "pods",
        &["list", "watch"],
        "orb serve's pod watch cache",
    ),
    grant(
        MachinePod,
        "",
        "events",
        &["list"],
        "orb serve's machine pod view lists the pod's events",
    ),
    grant(
        NodeWatch,
        "",
        "nodes",
        &["list", "watch"],
        "instance type, zone and capacity of each machine's node",
    ),
    grant(
        EventsWatch,
        "",
        "events",
        &["list", "watch"],
        "Karpenter node disruption events",
    ),
    grant(
        InboundAuth,
        "authentication.k8s.io",
        "tokenreviews",
        &["create"],
        "checks inbound Bearer tokens",
    ),
    grant(
        LeaderElection,
        "coordination.k8s.io",
        "leases",
        &["get", "create", "patch"],
        "the Lease orb-serve-<provider name>: read, created once, then renewed by patch",
    ),
];

/// (API group, RBAC resource name, verb): the unit RBAC grants, as a Role rule lists it.
pub type RuleEntry = (String, String, String);

impl Grant {
    /// The resource as RBAC names it: `pods/eviction` for a subresource.
    pub fn rbac_resource(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_string(),
        }
    }

    pub fn entries(&self) -> impl Iterator<Item = RuleEntry> + '_ {
        self.verbs
            .iter()
            .map(|v| (self.group.to_string(), self.rbac_resource(), v.to_string()))
    }
}

/// Every entry the features `wanted` need, merged.
pub fn entries_of(wanted: impl Fn(Feature) -> bool) -> std::collections::BTreeSet<RuleEntry> {
    GRANTS
        .iter()
        .filter(|g| wanted(g.feature))
        .flat_map(Grant::entries)
        .collect()
}

/// The managed-namespace rules: docs/rbac.yaml's Role (and ClusterRole for `["*"]`).
pub fn managed_entries() -> std::collections::BTreeSet<RuleEntry> {
    entries_of(|f| f.reach() == Reach::Managed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_fixture::identity::{OPT_IN_FEATURES, documented, grants};

    #[test]
    fn docs_rbac_yaml_role_and_cluster_role_are_the_tables_managed_rules() {
        let docs = documented();
        assert_eq!(grants(&docs.role), managed_entries(), "docs/rbac.yaml Role");
        assert_eq!(
            grants(&docs.cluster_role),
            managed_entries(),
            "docs/rbac.yaml ClusterRole"
        );
    }

    #[test]
    fn docs_rbac_yaml_opt_in_blocks_are_the_tables_feature_rules() {
        let docs = documented();
        for key in OPT_IN_FEATURES {
            assert_eq!(
                grants(&docs.opt_in[key]),
                entries_of(|f| f.switch() == Some(key)),
                "docs/rbac.yaml's commented rules for {key}"
            );
        }
        let switches: Vec<&str> = GRANTS.iter().filter_map(|g| g.feature.switch()).collect();
        assert!(
            switches.iter().all(|s| OPT_IN_FEATURES.contains(s)),
            "every opt-in feature of the table has a block in docs/rbac.yaml: {switches:?}"
        );
    }
}
