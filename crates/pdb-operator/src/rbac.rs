//! Every permission the operator asks the apiserver for, as one table: each API group,
//! resource (`resource/subresource` as RBAC names it) and verb, with the calls that use it.
//! deploy/rbac.yaml and the Helm chart's ClusterRole and leader-election Role are tested equal
//! to it (tests/deploy_manifests.rs), and the cluster test `live_rbac` runs the operator under
//! them. A new API call starts here. `explain` and `plan` run as the user, not under these.

use std::collections::BTreeSet;

/// `verbs` on each of `resources` in `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// The calls that use it.
    pub why: &'static str,
}

const fn grant(
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    why: &'static str,
) -> Grant {
    Grant {
        group,
        resources,
        verbs,
        why,
    }
}

/// The operator's ClusterRole: its controllers in every namespace of the scope.
pub const CLUSTER_GRANTS: &[Grant] = &[
    grant(
        "",
        &["pods"],
        &["list", "watch"],
        "the Workload controller's pod cache; a LeaderWorkerSet lists its pods' labels",
    ),
    grant(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
        "events on workloads and policies (a repeat patches its series)",
    ),
    grant(
        "apps",
        &["deployments", "statefulsets"],
        &["list", "watch", "patch"],
        "the controllers' watches; patch strips the reference operator's legacy finalizer",
    ),
    grant(
        "apps",
        &["deployments/finalizers", "statefulsets/finalizers"],
        &["update"],
        "a PDB's owner reference with blockOwnerDeletion",
    ),
    grant(
        "leaderworkerset.x-k8s.io",
        &["leaderworkersets"],
        &["get", "list", "watch", "patch"],
        "the LeaderWorkerSet controller; get: whether a gang pod's LeaderWorkerSet exists",
    ),
    grant(
        "leaderworkerset.x-k8s.io",
        &["leaderworkersets/finalizers"],
        &["update"],
        "a PDB's owner reference with blockOwnerDeletion",
    ),
    grant(
        "scheduling.k8s.io",
        &["workloads"],
        &["list", "watch", "patch"],
        "the Workload controller; patch strips the legacy finalizer",
    ),
    grant(
        "scheduling.k8s.io",
        &["podgroups"],
        &["list", "watch"],
        "the Workload controller's PodGroup cache",
    ),
    grant(
        "scheduling.k8s.io",
        &["workloads/finalizers"],
        &["update"],
        "a PDB's owner reference with blockOwnerDeletion",
    ),
    grant(
        "policy",
        &["poddisruptionbudgets"],
        &["list", "watch", "create", "patch", "delete"],
        "the shared PDB watch; server-side apply (create when new); deletes of its own PDBs",
    ),
    grant(
        "availability.pdboperator.io",
        &["pdbpolicies", "clusterpdbpolicies"],
        &["list", "watch"],
        "the policy watches",
    ),
    grant(
        "availability.pdboperator.io",
        &["pdbpolicies/status", "clusterpdbpolicies/status"],
        &["patch"],
        "policy status by server-side apply",
    ),
];

/// The leader-election Role, in the namespace of the Lease.
pub const LEASE_GRANTS: &[Grant] = &[grant(
    "coordination.k8s.io",
    &["leases"],
    &["get", "create", "patch"],
    "the Lease: read, created once, then renewed and taken over by patch",
)];

/// (API group, resource, verb): the unit RBAC grants.
pub type RuleEntry = (String, String, String);

/// Every entry of `grants`.
pub fn entries(grants: &[Grant]) -> BTreeSet<RuleEntry> {
    grants
        .iter()
        .flat_map(|g| {
            g.resources.iter().flat_map(move |r| {
                g.verbs
                    .iter()
                    .map(move |v| (g.group.to_string(), r.to_string(), v.to_string()))
            })
        })
        .collect()
}
