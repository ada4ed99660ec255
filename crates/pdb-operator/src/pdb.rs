//! The shape of a managed PodDisruptionBudget (note §8) and the checks that keep us away from
//! PDBs we do not own (note §9): "own" means label managed-by=pdb-operator AND a controller
//! ownerReference whose uid is the workload's.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};

use crate::budget::BudgetRule;
use crate::enforcement::{EffectiveConfig, EventNote};
use crate::names::{keys, reasons};
use crate::resolve::WorkloadMeta;
use crate::windows::{Window, WindowState, window_state};

/// The workload that will own the PDB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// `<workload>-pdb`.
pub fn pdb_name(workload: &str) -> String {
    format!("{workload}-pdb")
}

/// Windows that apply to a workload: the annotation window and the winning policy's windows.
/// A malformed annotation window is ignored with an `InvalidConfiguration` warning.
pub fn collect_windows(
    meta: &WorkloadMeta,
    config: &EffectiveConfig,
    events: &mut Vec<EventNote>,
) -> Vec<Window> {
    let mut out = Vec::new();
    if let Some(raw) = meta.annotation(keys::MAINTENANCE_WINDOW) {
        match Window::from_annotation(raw) {
            Ok(w) => out.push(w),
            Err(e) => events.push(EventNote::warning(
                reasons::INVALID_CONFIGURATION,
                format!("Invalid configuration: {e}"),
            )),
        }
    }
    // Policy windows were validated before the policy could win; skip any that still fail.
    out.extend(
        config
            .policy_windows
            .iter()
            .filter_map(|w| Window::from_policy(w).ok()),
    );
    out
}

/// Builds the PDB to server-side apply. `budget` is the final (clamped or group) budget;
/// while `window.open` it is replaced by minAvailable 0 and the maintenance annotations.
pub fn build_pdb(
    owner: &Owner,
    meta: &WorkloadMeta,
    config: &EffectiveConfig,
    budget: BudgetRule,
    selector: LabelSelector,
    window: &WindowState,
) -> PodDisruptionBudget {
    let mut labels = BTreeMap::from([
        (
            keys::MANAGED_BY.to_string(),
            keys::OPERATOR_NAME.to_string(),
        ),
        (
            keys::AVAILABILITY_CLASS.to_string(),
            config.class.as_str().to_string(),
        ),
        (
            keys::WORKLOAD_FUNCTION.to_string(),
            config.function.as_str().to_string(),
        ),
    ]);
    if let Some(n) = meta.annotation(keys::WORKLOAD_NAME) {
        labels.insert(keys::WORKLOAD.to_string(), n.to_string());
    }
    let mut annotations = BTreeMap::from([
        (
            keys::CREATED_BY.to_string(),
            keys::OPERATOR_NAME.to_string(),
        ),
        (
            keys::AVAILABILITY_CLASS.to_string(),
            config.class.as_str().to_string(),
        ),
        (
            keys::DESCRIPTION.to_string(),
            config.class.description().to_string(),
        ),
    ]);
    if let Some(p) = &config.policy {
        annotations.insert(keys::POLICY_SOURCE.to_string(), p.name.clone());
        annotations.insert(
            keys::ENFORCEMENT_MODE.to_string(),
            p.enforcement.as_str().to_string(),
        );
    }
    let (min_available, max_unavailable) = if window.open {
        annotations.insert(keys::MAINTENANCE_MODE.to_string(), "true".to_string());
        if let Some(since) = window.open_since {
            annotations.insert(keys::MAINTENANCE_START.to_string(), rfc3339(since));
        }
        (Some(IntOrString::Int(0)), None)
    } else {
        match budget {
            BudgetRule::MinAvailable(v) => (Some(v.to_int_or_string()), None),
            BudgetRule::MaxUnavailable(v) => (None, Some(v.to_int_or_string())),
        }
    };
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(pdb_name(&meta.name)),
            namespace: Some(meta.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: owner.api_version.clone(),
                kind: owner.kind.clone(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available,
            max_unavailable,
            selector: Some(selector),
            unhealthy_pod_eviction_policy: config
                .unhealthy_pod_eviction_policy
                .map(|p| p.as_str().to_string()),
        }),
        status: None,
    }
}

/// Window state for a workload's windows at `now` (closed when there are none).
pub fn evaluate_windows(windows: &[Window], now: Timestamp) -> WindowState {
    window_state(windows, now)
}

/// RFC 3339 in UTC with second precision.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Whether `pdb` is managed by us for the workload with `owner_uid`.
pub fn is_owned_by(pdb: &PodDisruptionBudget, owner_uid: &str) -> bool {
    labelled_ours(pdb) && controllers(pdb).any(|o| o.uid == owner_uid)
}

/// Whether `pdb` carries the label managed-by=pdb-operator.
fn labelled_ours(pdb: &PodDisruptionBudget) -> bool {
    pdb.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::MANAGED_BY))
        .is_some_and(|v| v == keys::OPERATOR_NAME)
}

/// The owner references of `pdb` that are its controller.
fn controllers(pdb: &PodDisruptionBudget) -> impl Iterator<Item = &OwnerReference> {
    pdb.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
}

/// Whether a PDB's selector covers a pod with `labels` (a missing selector covers nothing, an
/// empty one covers every pod, as in policy/v1).
pub fn pdb_selects(pdb: &PodDisruptionBudget, labels: &BTreeMap<String, String>) -> bool {
    pdb_selector(pdb).is_some_and(|s| s.matches(labels))
}

/// A PDB's selector, parsed (`None`: missing or invalid, it selects no pod).
pub fn pdb_selector(pdb: &PodDisruptionBudget) -> Option<Selector> {
    let sel = pdb.spec.as_ref().and_then(|s| s.selector.clone())?;
    Selector::try_from(sel).ok()
}

/// Whether `pdb` is one the operator wrote (label and `created-by` annotation) that no workload
/// controls any more: its workload was deleted with `propagationPolicy: Orphan`, so the garbage
/// collector stripped the owner reference instead of deleting the PDB (issue #52).
pub fn is_orphaned(pdb: &PodDisruptionBudget) -> bool {
    let created_by_us = pdb
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::CREATED_BY))
        .is_some_and(|v| v == keys::OPERATOR_NAME);
    labelled_ours(pdb)
        && created_by_us
        && controllers(pdb).next().is_none()
        && pdb.metadata.deletion_timestamp.is_none()
}

/// Whether `pdb` is the operator's PDB of a Workload gang over the pods of LeaderWorkerSet
/// `lws` (its selector requires `leaderworkerset.sigs.k8s.io/name=<lws>`). Such pods belong to
/// the LeaderWorkerSet path once the LeaderWorkerSet exists: its controller deletes this PDB
/// before writing its own, so the two never select a pod at the same moment (issue #52).
pub fn is_gang_pdb_over_leader_worker_set(pdb: &PodDisruptionBudget, lws: &str) -> bool {
    let requires_lws = pdb
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|m| m.get(keys::LWS_NAME))
        .is_some_and(|v| v == lws);
    labelled_ours(pdb) && requires_lws && controllers(pdb).any(|o| o.kind == "Workload")
}

/// Whether `pdb` is one of the operator's (any owner): labelled managed-by=pdb-operator and
/// controlled by a workload.
fn is_operators(pdb: &PodDisruptionBudget) -> bool {
    labelled_ours(pdb) && controllers(pdb).next().is_some()
}

/// Between two of the operator's PDBs over the same pods, whether `mine` is the one to keep:
/// the older one (creation time, then name). Both controllers reach the same answer, so a race
/// of two creates ends with one PDB and nothing is taken over once it protects pods.
pub fn outranks(mine: &PodDisruptionBudget, other: &PodDisruptionBudget) -> bool {
    let rank = |p: &PodDisruptionBudget| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.clone(),
        )
    };
    rank(mine) < rank(other)
}

/// Why a workload keeps no PDB of its own: the event to post, and the other PDB in force over
/// its pods, if one is (a PDB merely holding the name may select none of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PdbConflict {
    pub note: EventNote,
    pub in_force: Option<String>,
}

/// A reason for the workload to have no PDB (and to delete the one it owns): its name is held
/// by someone else, or another PDB selects the workload's pods and takes precedence (two PDBs
/// over one pod make every eviction of it fail with 500). A PDB the operator does not manage
/// always takes precedence; one of the operator's only when [`outranks`] says so, or when the
/// workload has none yet (the operator never creates a PDB over pods another one protects).
/// `pod_labels` are the labels of the workload's pods (template labels, or every member's);
/// `existing` holds the workload's own PDB too, if it has one.
pub fn find_pdb_conflict(
    owner_uid: &str,
    desired_name: &str,
    pod_labels: &[BTreeMap<String, String>],
    existing: &[PodDisruptionBudget],
) -> Option<PdbConflict> {
    let mine = existing
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(desired_name) && is_owned_by(p, owner_uid));
    for pdb in existing.iter().filter(|p| !is_owned_by(p, owner_uid)) {
        let name = pdb.metadata.name.as_deref().unwrap_or("");
        if name == desired_name {
            let note = EventNote::warning(
                reasons::PDB_CONFLICT,
                format!(
                    "PodDisruptionBudget {name} exists and is not owned by this workload; it is left untouched and no second PDB is written (retrying in 30s)"
                ),
            );
            let in_force = pod_labels
                .iter()
                .any(|l| pdb_selects(pdb, l))
                .then(|| name.to_string());
            return Some(PdbConflict { note, in_force });
        }
        if !pod_labels.iter().any(|l| pdb_selects(pdb, l)) {
            continue;
        }
        let whose = if !is_operators(pdb) {
            "not managed by pdb-operator"
        } else if mine.is_some_and(|m| outranks(m, pdb)) {
            continue;
        } else {
            "the operator's older PDB of another workload"
        };
        let done = match mine {
            Some(_) => format!("{desired_name} is deleted"),
            None => "none is written".to_string(),
        };
        let note = EventNote::warning(
            reasons::PDB_CONFLICT,
            format!(
                "PodDisruptionBudget {name} ({whose}) selects this workload's pods; two PDBs over one pod make every eviction fail, so {done} until {name} no longer selects them"
            ),
        );
        return Some(PdbConflict {
            note,
            in_force: Some(name.to_string()),
        });
    }
    None
}

/// Finalizers left by the reference operator that we strip; `None` when there is nothing to do,
/// else the list to write back (order of the others kept).
pub fn without_legacy_finalizers(finalizers: &[String]) -> Option<Vec<String>> {
    let legacy = [
        keys::LEGACY_WORKLOAD_FINALIZER,
        keys::LEGACY_POLICY_FINALIZER,
    ];
    let kept: Vec<String> = finalizers
        .iter()
        .filter(|f| !legacy.contains(&f.as_str()))
        .cloned()
        .collect();
    (kept.len() != finalizers.len()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pdb(
        name: &str,
        managed: bool,
        owner_uid: Option<&str>,
        selector: Option<LabelSelector>,
    ) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: managed.then(|| labels(&[(keys::MANAGED_BY, keys::OPERATOR_NAME)])),
                owner_references: owner_uid.map(|uid| {
                    vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: "a".into(),
                        uid: uid.into(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn app(v: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(labels(&[("app", v)])),
            match_expressions: None,
        })
    }

    #[test]
    fn a_gangs_pdb_over_a_leader_worker_sets_pods_is_recognised() {
        let gang = |selector: &[(&str, &str)], kind: &str| {
            let mut p = pdb(
                "mesh-pdb",
                true,
                Some("u1"),
                Some(LabelSelector {
                    match_labels: Some(labels(selector)),
                    match_expressions: None,
                }),
            );
            p.metadata.owner_references.as_mut().unwrap()[0].kind = kind.into();
            p
        };
        let over_late = [("app", "mesh"), (keys::LWS_NAME, "late")];
        assert!(is_gang_pdb_over_leader_worker_set(
            &gang(&over_late, "Workload"),
            "late"
        ));
        assert!(!is_gang_pdb_over_leader_worker_set(
            &gang(&over_late, "Workload"),
            "other"
        ));
        assert!(!is_gang_pdb_over_leader_worker_set(
            &gang(&[("app", "mesh")], "Workload"),
            "late"
        ));
        assert!(
            !is_gang_pdb_over_leader_worker_set(&gang(&over_late, "Deployment"), "late"),
            "only a Workload's PDB gives way"
        );
    }

    // Issue #52: only a PDB we wrote (label and created-by) with no controller owner left.
    #[test]
    fn an_orphaned_pdb_is_ours_and_controlled_by_no_workload() {
        let ours = |owner: Option<&str>| {
            let mut p = pdb("a-pdb", true, owner, app("a"));
            p.metadata.annotations = Some(labels(&[(keys::CREATED_BY, keys::OPERATOR_NAME)]));
            p
        };
        assert!(is_orphaned(&ours(None)));
        assert!(!is_orphaned(&ours(Some("u1"))), "still owned");
        assert!(
            !is_orphaned(&pdb("a-pdb", true, None, app("a"))),
            "labelled ours but not created by us: a user's PDB"
        );
        let mut going = ours(None);
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        assert!(!is_orphaned(&going), "already being deleted");
    }

    #[test]
    fn ownership_needs_label_and_controller_uid() {
        assert!(is_owned_by(&pdb("a-pdb", true, Some("u1"), app("a")), "u1"));
        assert!(
            !is_owned_by(&pdb("a-pdb", false, Some("u1"), app("a")), "u1"),
            "no managed-by label"
        );
        assert!(
            !is_owned_by(&pdb("a-pdb", true, Some("u2"), app("a")), "u1"),
            "another owner"
        );
        assert!(
            !is_owned_by(&pdb("a-pdb", true, None, app("a")), "u1"),
            "unowned"
        );
    }

    #[test]
    fn selector_semantics_follow_policy_v1() {
        let pod = labels(&[("app", "a")]);
        assert!(pdb_selects(&pdb("x", false, None, app("a")), &pod));
        assert!(!pdb_selects(&pdb("x", false, None, app("b")), &pod));
        assert!(
            !pdb_selects(&pdb("x", false, None, None), &pod),
            "a missing selector covers nothing"
        );
        assert!(
            pdb_selects(&pdb("x", false, None, Some(LabelSelector::default())), &pod),
            "empty covers all"
        );
        let expr = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
        };
        assert!(pdb_selects(&pdb("x", false, None, Some(expr)), &pod));
    }

    #[test]
    fn users_pdb_over_the_same_pods_is_a_conflict() {
        // Scenario 32: team-pdb (unowned) selects app=a → no a-pdb, PDBConflict.
        let existing = [pdb("team-pdb", false, None, app("a"))];
        let c = find_pdb_conflict("u1", "a-pdb", &[labels(&[("app", "a")])], &existing).unwrap();
        assert_eq!(c.note.reason, reasons::PDB_CONFLICT);
        assert!(c.note.message.contains("team-pdb"));
        assert_eq!(c.in_force.as_deref(), Some("team-pdb"));
        // Once it is gone there is no conflict.
        assert_eq!(
            find_pdb_conflict("u1", "a-pdb", &[labels(&[("app", "a")])], &[]),
            None
        );
    }

    #[test]
    fn name_held_by_another_owner_is_a_conflict() {
        // Scenario 33 / 44: web-pdb owned by a different workload uid, selecting other pods.
        let existing = [pdb(
            "web-pdb",
            true,
            Some("statefulset-uid"),
            app("web-sts"),
        )];
        let c = find_pdb_conflict(
            "deployment-uid",
            "web-pdb",
            &[labels(&[("app", "web")])],
            &existing,
        )
        .unwrap();
        assert!(
            c.note.message.contains("not owned by this workload"),
            "{}",
            c.note.message
        );
        assert_eq!(c.in_force, None, "it selects none of the workload's pods");
    }

    #[test]
    fn our_own_pdb_is_not_a_conflict() {
        let existing = [
            pdb("a-pdb", true, Some("u1"), app("a")),
            pdb("b-pdb", false, None, app("b")),
        ];
        assert_eq!(
            find_pdb_conflict("u1", "a-pdb", &[labels(&[("app", "a")])], &existing),
            None
        );
    }

    /// `pdb` created at second `at` of the epoch.
    fn created(mut p: PodDisruptionBudget, at: i64) -> PodDisruptionBudget {
        p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::from_second(at).unwrap(),
        ));
        p
    }

    #[test]
    fn who_keeps_the_pdb_when_two_select_the_same_pods() {
        let mine = |at| created(pdb("a-pdb", true, Some("u1"), app("a")), at);
        let user = |at| created(pdb("team-pdb", false, None, app("a")), at);
        let ours_of = |name: &str, at| created(pdb(name, true, Some("u2"), app("a")), at);
        // (case, PDBs in the namespace, expected: None = keep or create, Some(text in the note))
        let rows: Vec<(&str, Vec<PodDisruptionBudget>, Option<&str>)> = vec![
            ("alone", vec![], None),
            ("alone with its own", vec![mine(10)], None),
            (
                "other pods only",
                vec![mine(10), created(pdb("b-pdb", false, None, app("b")), 5)],
                None,
            ),
            ("user PDB first", vec![user(5)], Some("none is written")),
            (
                "user PDB after ours: we yield",
                vec![mine(10), user(20)],
                Some("a-pdb is deleted"),
            ),
            (
                "user PDB before ours",
                vec![mine(10), user(5)],
                Some("not managed by pdb-operator"),
            ),
            (
                "operator's PDB first",
                vec![ours_of("w-pdb", 5)],
                Some("none is written"),
            ),
            ("ours is older", vec![mine(10), ours_of("w-pdb", 20)], None),
            (
                "ours is younger",
                vec![mine(20), ours_of("w-pdb", 10)],
                Some("a-pdb is deleted"),
            ),
            (
                "same second, smaller name wins",
                vec![mine(10), ours_of("b-pdb", 10)],
                None,
            ),
            (
                "same second, larger name loses",
                vec![mine(10), ours_of("0-pdb", 10)],
                Some("older PDB"),
            ),
            (
                "name held by another owner",
                vec![created(pdb("a-pdb", true, Some("u2"), app("x")), 1)],
                Some("not owned by this workload"),
            ),
        ];
        for (case, existing, expected) in rows {
            let got = find_pdb_conflict("u1", "a-pdb", &[labels(&[("app", "a")])], &existing);
            match (expected, got) {
                (None, None) => {}
                (Some(text), Some(PdbConflict { note, .. })) => {
                    assert_eq!(note.reason, reasons::PDB_CONFLICT, "{case}");
                    assert!(note.message.contains(text), "{case}: {}", note.message);
                }
                (expected, got) => panic!("{case}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn legacy_finalizers_are_stripped() {
        let f = vec![
            "keep.me/x".to_string(),
            keys::LEGACY_WORKLOAD_FINALIZER.to_string(),
        ];
        assert_eq!(
            without_legacy_finalizers(&f),
            Some(vec!["keep.me/x".to_string()])
        );
        assert_eq!(without_legacy_finalizers(&["keep.me/x".to_string()]), None);
    }
}
