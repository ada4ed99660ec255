use super::*;
use orb_core::ids::RequestId;
use orb_core::machine::MachineStatus;
use orb_core::test_support;
use rstest::rstest;

const REQ: &str = "req-11111111-1111-4111-8111-111111111111";

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + s).unwrap()
}

fn mk_object(kind: ProviderApi, name: &str, request: Option<&str>) -> ManagedObject {
    ManagedObject {
        kind,
        namespace: "batch".into(),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        request_id: request.map(str::to_string),
        created: Some(t(0)),
        deleting: false,
        controlled: false,
    }
}

fn mk_request(status: RequestStatus) -> Request {
    test_support::request(RequestType::Acquire)
        .id(REQ)
        .count(2)
        .created(t(0))
        .status(status)
        .build()
}

fn mk_machine(request: &Request, name: &str, status: MachineStatus, returned: bool) -> Machine {
    let mut m = test_support::machine(name)
        .request_id(request.request_id.clone())
        .status(status)
        .created(t(0))
        .updated(t(0));
    if returned {
        m = m.returned_by(RequestId::new_return());
    }
    m.build()
}

fn stored(status: RequestStatus, machines: &[(&str, MachineStatus, bool)]) -> StoredRequest {
    let request = mk_request(status);
    let machines = machines
        .iter()
        .map(|(n, s, r)| mk_machine(&request, n, *s, *r))
        .collect();
    StoredRequest { request, machines }
}

#[test]
fn an_object_without_a_request_id_is_an_orphan() {
    let o = mk_object(ProviderApi::Pod, "p", None);
    assert_eq!(
        classify(&o, None),
        Classification::Orphan(OrphanReason::MissingRequestId)
    );
}

#[rstest]
#[case::pod(ProviderApi::Pod)]
#[case::deployment(ProviderApi::Deployment)]
#[case::statefulset(ProviderApi::StatefulSet)]
#[case::job(ProviderApi::Job)]
fn an_object_of_an_unknown_request_is_an_orphan(#[case] kind: ProviderApi) {
    let o = mk_object(kind, "x", Some(REQ));
    assert_eq!(
        classify(&o, None),
        Classification::Orphan(OrphanReason::UnknownRequest {
            request_id: REQ.into()
        })
    );
}

#[rstest]
#[case::in_progress(RequestStatus::InProgress)]
#[case::pending(RequestStatus::Pending)]
#[case::partial_pending(RequestStatus::PartialPending)]
fn objects_of_an_unfinished_request_are_adopted(#[case] status: RequestStatus) {
    let s = stored(status, &[]);
    for kind in ProviderApi::ALL {
        let o = mk_object(kind, "x", Some(REQ));
        assert_eq!(
            classify(&o, Some(&s)),
            Classification::Adopted {
                request_id: REQ.into()
            }
        );
    }
}

#[rstest]
// A complete request's pods are the scheduler's hosts until it returns them.
#[case::complete_running(RequestStatus::Complete, MachineStatus::Running, false, false)]
#[case::complete_exited_not_returned(
    RequestStatus::Complete,
    MachineStatus::Terminated,
    false,
    false
)]
#[case::complete_returned(RequestStatus::Complete, MachineStatus::Running, true, true)]
#[case::partial_returned(RequestStatus::Partial, MachineStatus::Returned, false, true)]
// A failed, cancelled or timed-out request owns only machines that are still live.
#[case::failed_with_live_machine(RequestStatus::Failed, MachineStatus::Pending, false, false)]
#[case::failed_machine_gone(RequestStatus::Failed, MachineStatus::Terminated, false, true)]
#[case::cancelled(RequestStatus::Cancelled, MachineStatus::Terminated, false, true)]
// A failed machine still owns its pod: orb reports it, and a return or cancel removes it.
#[case::timeout_failed_machine(RequestStatus::Timeout, MachineStatus::Failed, false, false)]
#[case::timeout_machine_gone(RequestStatus::Timeout, MachineStatus::Terminated, false, true)]
fn a_bare_pod_of_a_finished_request_is_an_orphan_once_its_machine_is_done(
    #[case] status: RequestStatus,
    #[case] machine: MachineStatus,
    #[case] returned: bool,
    #[case] orphan: bool,
) {
    let s = stored(status, &[("p-0", machine, returned)]);
    let got = classify(&mk_object(ProviderApi::Pod, "p-0", Some(REQ)), Some(&s));
    assert_eq!(
        matches!(
            got,
            Classification::Orphan(OrphanReason::FinishedRequest { .. })
        ),
        orphan,
        "{got:?}"
    );
}

#[test]
fn a_pod_no_machine_stands_for_is_an_orphan_of_a_finished_request() {
    let s = stored(RequestStatus::Failed, &[]);
    let got = classify(&mk_object(ProviderApi::Pod, "p-7", Some(REQ)), Some(&s));
    assert_eq!(
        got,
        Classification::Orphan(OrphanReason::FinishedRequest {
            request_id: REQ.into(),
            status: RequestStatus::Failed
        })
    );
}

#[test]
fn a_controller_lives_while_any_machine_of_its_request_does() {
    let s = stored(
        RequestStatus::Complete,
        &[
            ("d-a", MachineStatus::Running, true),
            ("d-b", MachineStatus::Running, false),
        ],
    );
    let d = mk_object(ProviderApi::Deployment, "d", Some(REQ));
    assert!(matches!(
        classify(&d, Some(&s)),
        Classification::Adopted { .. }
    ));
    let all_returned = stored(
        RequestStatus::Complete,
        &[
            ("d-a", MachineStatus::Terminated, true),
            ("d-b", MachineStatus::Returned, true),
        ],
    );
    assert!(matches!(
        classify(&d, Some(&all_returned)),
        Classification::Orphan(OrphanReason::FinishedRequest { .. })
    ));
}

#[test]
fn a_return_request_id_on_an_object_is_no_acquire() {
    let mut s = stored(RequestStatus::InProgress, &[]);
    s.request.request_type = RequestType::Return;
    assert!(matches!(
        classify(&mk_object(ProviderApi::Pod, "p", Some(REQ)), Some(&s)),
        Classification::Orphan(OrphanReason::UnknownRequest { .. })
    ));
}

#[rstest]
#[case::controlled_pod(true, false)]
#[case::being_deleted(false, true)]
fn controlled_and_deleting_objects_are_never_judged(
    #[case] controlled: bool,
    #[case] deleting: bool,
) {
    let mut o = mk_object(ProviderApi::Pod, "p", None);
    o.controlled = controlled;
    o.deleting = deleting;
    assert_eq!(classify(&o, None), Classification::Skipped);
}

#[test]
fn the_gc_plan_leaves_young_orphans_and_counts_by_kind() {
    let mut young = mk_object(ProviderApi::Job, "young", None);
    young.created = Some(t(250));
    let mut unknown_age = mk_object(ProviderApi::Pod, "no-age", None);
    unknown_age.created = None;
    let objects = vec![
        mk_object(ProviderApi::Pod, "old", None),
        young,
        unknown_age,
        mk_object(ProviderApi::Deployment, "mine", Some(REQ)),
    ];
    let requests = BTreeMap::from([(REQ.to_string(), stored(RequestStatus::InProgress, &[]))]);
    let plan = plan_gc(&objects, &requests, t(300), Duration::from_secs(100));
    assert_eq!(
        plan.orphans
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["old"]
    );
    assert_eq!(
        plan.young
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["young", "no-age"]
    );
    assert_eq!(plan.seen[&ProviderApi::Pod], 2);
    assert_eq!(plan.adopted[&ProviderApi::Deployment], 1);
    assert_eq!(plan.orphans[0].age_seconds, Some(300));
}

#[test]
fn the_report_summary_names_counts_and_orphans() {
    let mut report =
        ReconcileReport::for_scope(&NamespaceScope::Multi(vec!["a".into(), "b".into()]));
    let objects = vec![
        mk_object(ProviderApi::Pod, "lost", None),
        mk_object(ProviderApi::Pod, "kept", Some(REQ)),
    ];
    let requests = BTreeMap::from([(REQ.to_string(), stored(RequestStatus::InProgress, &[]))]);
    report.record_plan(&plan_gc(&objects, &requests, t(10), Duration::ZERO));
    let line = report.summary();
    assert!(
        line.contains("reconciled a,b")
            && line.contains("2 managed objects seen, 1 adopted, 1 orphans"),
        "{line}"
    );
    assert!(
        line.contains("Pod batch/lost: it has no request-id label"),
        "{line}"
    );
}

#[test]
fn a_gc_pass_over_a_finished_request_keeps_exactly_the_pods_of_machines_still_held() {
    // 2,000 bare pods of a fulfilled request: the even machines are still held, the odd ones
    // were returned. Each pod is judged by its own machine, and a Deployment of the request is
    // kept while any machine is held.
    let machines: Vec<(String, MachineStatus, bool)> = (0..2000)
        .map(|i| (format!("p-{i}"), MachineStatus::Running, i % 2 == 1))
        .collect();
    let borrowed: Vec<(&str, MachineStatus, bool)> = machines
        .iter()
        .map(|(n, s, r)| (n.as_str(), *s, *r))
        .collect();
    let requests = BTreeMap::from([(REQ.to_string(), stored(RequestStatus::Complete, &borrowed))]);
    let mut objects: Vec<ManagedObject> = (0..2000)
        .map(|i| mk_object(ProviderApi::Pod, &format!("p-{i}"), Some(REQ)))
        .collect();
    objects.push(mk_object(ProviderApi::Pod, "p-unknown", Some(REQ)));
    objects.push(mk_object(ProviderApi::Deployment, "d", Some(REQ)));
    let plan = plan_gc(&objects, &requests, t(300), Duration::ZERO);
    assert_eq!(plan.adopted[&ProviderApi::Pod], 1000);
    assert_eq!(plan.adopted[&ProviderApi::Deployment], 1);
    let orphans: BTreeSet<&str> = plan.orphans.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(orphans.len(), 1001);
    assert!(orphans.contains("p-1") && orphans.contains("p-1999") && orphans.contains("p-unknown"));
    assert!(!orphans.contains("p-0") && !orphans.contains("p-1998"));
}

/// A metadata LIST page as the apiserver sends it (`PartialObjectMetadataList`), managedFields
/// and all: decoded to what reconciliation reads, with the continue token of the next page.
#[test]
fn a_metadata_page_decodes_to_managed_objects_without_its_managed_fields() {
    let page = crate::protobuf_list::json_metadata_page(&serde_json::to_vec(&serde_json::json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "812", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
        "items": [
            {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {
                    "name": "orb-1-0", "namespace": "batch", "uid": "u-0", "resourceVersion": "800",
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "deletionTimestamp": "2026-01-01T00:00:05Z",
                    "labels": {"orb.io/managed": "true", "orb.io/request-id": REQ},
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs", "controller": true}
                    ],
                    "managedFields": [{"manager": "kwok", "operation": "Update", "apiVersion": "v1",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}}}],
                },
            },
            {"metadata": {"name": "orb-2-0", "namespace": "batch", "labels": {"orb.io/request-id": ""}}},
        ],
    })).unwrap())
    .unwrap();
    assert_eq!(
        page.continue_token.as_deref(),
        Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ")
    );
    let keys = LabelKeys::new("orb.io");
    assert!(page.items.iter().all(|m| m.managed_fields.is_none()));
    let objects: Vec<ManagedObject> = page
        .items
        .into_iter()
        .map(|meta| to_object(ProviderApi::Pod, meta, &keys))
        .collect();
    assert_eq!(
        objects,
        [
            ManagedObject {
                kind: ProviderApi::Pod,
                namespace: "batch".into(),
                name: "orb-1-0".into(),
                uid: Some("u-0".into()),
                request_id: Some(REQ.into()),
                created: Some(t(0)),
                deleting: true,
                controlled: true,
            },
            ManagedObject {
                kind: ProviderApi::Pod,
                namespace: "batch".into(),
                name: "orb-2-0".into(),
                uid: None,
                request_id: None,
                created: None,
                deleting: false,
                controlled: false,
            },
        ]
    );
}

/// The apiserver writes an empty list's items as `null`.
#[test]
fn an_empty_metadata_page_has_no_items_and_no_next_page() {
    let page = crate::protobuf_list::json_metadata_page(
        br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},"items":null}"#,
    )
    .unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.continue_token, None);
}
