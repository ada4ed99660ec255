//! The exact apiserver calls the handlers make, pinned with [`ApiRecorder`]: the provider's
//! real acquire and release paths run against a client whose every request is recorded and
//! answered from a scripted table. The replies are the minimum the code needs; they are not
//! Kubernetes. What the cluster does with these calls (the ReplicaSet removing exactly the
//! marked pods, and so on) is tested on the real control plane in the cluster tests
//! (`-p orb-k8s --test cluster`, `-p kube-fixture --test cluster_smoke`).

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireInput, MachineRef, Provider, ReleaseInput};
use orb_core::{ProviderApi, RequestId, Template};
use serde_json::{Value, json};

use crate::K8sProvider;
use crate::config::{ConfigLayers, FileLayer};
use crate::labels::LabelKeys;
use crate::provider_data::{ControllerRef, RequestRecord};
use crate::release_plan::{POD_DELETION_COST, VICTIM_DELETION_COST};
use crate::test_support::{ApiRecorder, RecordedCall, pod};

const REQ: &str = "req-11111111-1111-4111-8111-111111111111";
const RET: &str = "ret-22222222-2222-4222-8222-222222222222";
/// The name stem orb gives the request's objects (see `naming`): a Deployment is named
/// by it, bare pods by it and a sequence number.
const STEM: &str = "orb-11111111111141118111";
const DEPLOYMENT: &str = STEM;
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/batch/deployments";
const PODS: &str = "/api/v1/namespaces/batch/pods";

/// The provider as `orb` builds it, with namespace `batch`, around the recorder's client.
fn provider(recorder: &ApiRecorder) -> K8sProvider {
    let Value::Object(block) = json!({"namespace": "batch"}) else {
        unreachable!()
    };
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    );
    K8sProvider::with_client(recorder.client(), layers.resolve(None).unwrap(), "batch")
}

fn template(api: ProviderApi) -> Template {
    Template {
        template_id: "worker".into(),
        provider_api: Some(api),
        container_image: Some("busybox:1.36".into()),
        ..Template::default()
    }
}

fn deployment(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": "batch", "resourceVersion": "7",
                     "labels": {"orb.io/managed": "true", "orb.io/request-id": REQ}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"orb.io/request-id": REQ}},
                 "template": {}},
    })
}

/// A Running, Ready pod of the request, as the Deployment's ReplicaSet made it.
fn replica(name: &str) -> Value {
    let keys = LabelKeys::new("orb.io");
    let pod = pod(name)
        .namespace("batch")
        .uid(&format!("uid-{name}"))
        .label(&keys.managed(), "true")
        .label(&keys.request_id(), REQ)
        .running_on("kwok-node-0")
        .build();
    serde_json::to_value(pod).unwrap()
}

fn deployment_record() -> RequestRecord {
    RequestRecord {
        request_id: REQ.into(),
        namespace: "batch".into(),
        kind: ProviderApi::Deployment,
        label_prefix: "orb.io".into(),
        controller: Some(ControllerRef {
            kind: ProviderApi::Deployment,
            name: DEPLOYMENT.into(),
        }),
        replicas: Some(4),
        ..RequestRecord::default()
    }
}

fn machine_ref(name: &str, record: &RequestRecord) -> MachineRef {
    MachineRef {
        machine_id: name.into(),
        name: name.into(),
        request_id: RequestId::parse(REQ).unwrap(),
        template_id: "worker".into(),
        provider_api: Some(ProviderApi::Deployment),
        resource_id: Some(DEPLOYMENT.into()),
        uid: Some(format!("uid-{name}")),
        status: MachineStatus::Running,
        request_provider_data: Arc::new(record.to_value()),
    }
}

fn list_of_this_request() -> String {
    format!("{PODS}?&labelSelector=orb.io%2Fmanaged%3Dtrue%2Corb.io%2Frequest-id%3D{REQ}")
}

const A: &str = "orb-11111111111141118111-6f9c8-a";
const B: &str = "orb-11111111111141118111-6f9c8-b";
const C: &str = "orb-11111111111141118111-6f9c8-c";
const D: &str = "orb-11111111111141118111-6f9c8-d";

/// A recorder for a Deployment of four replicas whose pods are `pods`: it answers the
/// Deployment's GET and PATCH, the LIST of its pods, pod PATCHes (marks) and evictions.
fn deployment_recorder(pods: Vec<Value>) -> ApiRecorder {
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"},
                      "items": pods});
    let deployment_path = format!("{DEPLOYMENTS}/{DEPLOYMENT}");
    ApiRecorder::new()
        .reply(Method::GET, &deployment_path, 200, deployment(4))
        .reply(Method::PATCH, &deployment_path, 200, deployment(2))
        .reply(Method::GET, &format!("{PODS}?"), 200, list)
        .reply(
            Method::PATCH,
            &format!("{PODS}/"),
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
        )
        .reply(
            Method::POST,
            &format!("{PODS}/"),
            201,
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success",
                   "code": 201}),
        )
}

/// The return `RET` of A and B, while orb keeps C and D of the request.
async fn return_a_and_b(recorder: &ApiRecorder) -> orb_core::provider::ReleaseOutcome {
    let record = deployment_record();
    provider(recorder)
        .release(ReleaseInput {
            return_request_id: RequestId::parse(RET).unwrap(),
            machines: vec![machine_ref(A, &record), machine_ref(B, &record)],
            templates: BTreeMap::new(),
            others: BTreeMap::from([(REQ.to_string(), vec![C.into(), D.into()])]),
        })
        .await
        .unwrap()
}

/// Calls that go out concurrently, as (line, body) sorted by line: their order between
/// themselves is not the contract.
fn concurrent(calls: &[RecordedCall]) -> Vec<(String, Option<Value>)> {
    let mut group: Vec<_> = calls.iter().map(|c| (c.line(), c.body.clone())).collect();
    group.sort_by(|a, b| a.0.cmp(&b.0));
    group
}

fn marks_of_a_and_b() -> Vec<(String, Option<Value>)> {
    let mark = json!({"metadata": {"annotations": {POD_DELETION_COST: VICTIM_DELETION_COST}}});
    vec![
        (format!("PATCH {PODS}/{A}?"), Some(mark.clone())),
        (format!("PATCH {PODS}/{B}?"), Some(mark)),
    ]
}

/// The scale-down by two, guarded by the resourceVersion just read and recording `RET`.
fn scale_to_two() -> Option<Value> {
    Some(json!({
        "metadata": {"resourceVersion": "7",
                     "annotations": {"orb.io/scaled-for-returns": RET}},
        "spec": {"replicas": 2},
    }))
}

fn eviction(name: &str) -> Option<Value> {
    Some(json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "batch"},
        "deleteOptions": {"preconditions": {"uid": format!("uid-{name}")}},
    }))
}

/// Returning two of a Deployment's four Running pods marks exactly those two with the victim
/// deletion cost, and only then lowers replicas by two, guarded by the resourceVersion it
/// just read and recording the return: no other call comes in between.
#[tokio::test]
async fn a_deployment_release_marks_the_victims_before_it_scales_down() {
    let recorder = deployment_recorder([A, B, C, D].map(replica).to_vec());
    let outcome = return_a_and_b(&recorder).await;
    assert_eq!(outcome.released, [A, B]);
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);

    let calls = recorder.calls();
    let lines = recorder.lines();
    assert_eq!(calls.len(), 6, "{lines:#?}");
    assert_eq!(
        [&lines[..2], &lines[4..]].concat(),
        [
            // Is the Deployment still there?
            format!("GET {DEPLOYMENTS}/{DEPLOYMENT}"),
            // Its live pods, to plan which pods the ReplicaSet would take.
            format!("GET {}", list_of_this_request()),
            // (calls 2 and 3: the two marks), then the read-modify-write of replicas.
            format!("GET {DEPLOYMENTS}/{DEPLOYMENT}"),
            format!("PATCH {DEPLOYMENTS}/{DEPLOYMENT}?"),
        ],
        "{lines:#?}"
    );
    assert_eq!(concurrent(&calls[2..4]), marks_of_a_and_b(), "{lines:#?}");
    assert_eq!(calls[5].body, scale_to_two());
}

/// When a Pending pod would go first (the ReplicaSet ranks it before any deletion cost), the
/// victims are evicted instead: every eviction is dry-run first, one victim after the other
/// (a PodDisruptionBudget that says no refuses the return before anything changes), then the
/// real evictions go out. No scale-down comes before them, which would let the ReplicaSet
/// remove the Pending pod; after them orb only looks for replacements to take back, and with
/// none appearing (this scripted list never changes) it writes nothing more.
#[tokio::test]
async fn a_deployment_release_outranked_by_a_pending_pod_dry_runs_then_evicts_and_never_scales() {
    let pending = serde_json::to_value(
        pod(C)
            .namespace("batch")
            .uid(&format!("uid-{C}"))
            .label("orb.io/managed", "true")
            .label("orb.io/request-id", REQ)
            .phase("Pending")
            .build(),
    )
    .unwrap();
    let recorder = deployment_recorder(vec![replica(A), replica(B), pending, replica(D)]);
    let outcome = return_a_and_b(&recorder).await;
    assert_eq!(outcome.released, [A, B]);
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);

    let calls = recorder.calls();
    let lines = recorder.lines();
    assert_eq!(
        lines[..4],
        [
            format!("GET {DEPLOYMENTS}/{DEPLOYMENT}"),
            format!("GET {}", list_of_this_request()),
            format!("POST {PODS}/{A}/eviction?dryRun=All"),
            format!("POST {PODS}/{B}/eviction?dryRun=All"),
        ],
        "{lines:#?}"
    );
    assert_eq!(
        (&calls[2].body, &calls[3].body),
        (&eviction(A), &eviction(B))
    );
    assert_eq!(
        concurrent(&calls[4..6]),
        [
            (format!("POST {PODS}/{A}/eviction"), eviction(A)),
            (format!("POST {PODS}/{B}/eviction"), eviction(B)),
        ],
        "{lines:#?}"
    );
    assert!(
        lines[6..]
            .iter()
            .all(|l| *l == format!("GET {}", list_of_this_request())),
        "{lines:#?}"
    );
}

/// A Pod acquire of three is three creates in the request's namespace, one per named pod,
/// each carrying the request's labels, and nothing else: no read before, none after.
#[tokio::test]
async fn a_pod_acquire_of_three_is_three_creates_and_nothing_else() {
    let recorder = ApiRecorder::new().echo(Method::POST, &format!("{PODS}?"), 201);
    let outcome = provider(&recorder)
        .acquire(AcquireInput {
            request_id: RequestId::parse(REQ).unwrap(),
            template: template(ProviderApi::Pod),
            count: 3,
        })
        .await
        .unwrap();
    let expected: Vec<String> = (0..3).map(|i| format!("{STEM}-{i:04}")).collect();
    assert_eq!(outcome.resource_ids, expected);

    let calls = recorder.calls();
    assert_eq!(
        recorder.lines(),
        vec![format!("POST {PODS}?"); 3],
        "{calls:#?}"
    );
    let mut created: Vec<&str> = calls
        .iter()
        .map(|c| {
            c.body.as_ref().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
        })
        .collect();
    created.sort_unstable();
    assert_eq!(created, expected);
    for call in &calls {
        let body = call.body.as_ref().unwrap();
        assert_eq!(body["kind"], "Pod");
        assert_eq!(body["metadata"]["namespace"], "batch");
        assert_eq!(body["metadata"]["labels"]["orb.io/request-id"], REQ);
        assert_eq!(body["metadata"]["labels"]["orb.io/managed"], "true");
    }
}

/// A Deployment acquire whose create answers 409 (an earlier attempt created it) reads the
/// existing Deployment and adopts it because it carries this request's id: POST, then GET of
/// that name, nothing else.
#[tokio::test]
async fn a_deployment_acquire_retried_after_its_create_adopts_the_existing_deployment() {
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "reason": "AlreadyExists", "code": 409,
                          "message": format!("deployments.apps \"{DEPLOYMENT}\" already exists")});
    let recorder = ApiRecorder::new()
        .reply(Method::POST, &format!("{DEPLOYMENTS}?"), 409, conflict)
        .reply(
            Method::GET,
            &format!("{DEPLOYMENTS}/{DEPLOYMENT}"),
            200,
            deployment(3),
        );
    let outcome = provider(&recorder)
        .acquire(AcquireInput {
            request_id: RequestId::parse(REQ).unwrap(),
            template: template(ProviderApi::Deployment),
            count: 3,
        })
        .await
        .unwrap();
    assert_eq!(outcome.resource_ids, [DEPLOYMENT]);

    let calls = recorder.calls();
    assert_eq!(
        recorder.lines(),
        [
            format!("POST {DEPLOYMENTS}?"),
            format!("GET {DEPLOYMENTS}/{DEPLOYMENT}"),
        ],
        "{calls:#?}"
    );
    let sent = calls[0].body.as_ref().unwrap();
    assert_eq!(sent["kind"], "Deployment");
    assert_eq!(sent["metadata"]["name"], DEPLOYMENT);
    assert_eq!(sent["spec"]["replicas"], 3);
}

/// A call the recorder has no reply for is answered 404 with a Status naming it, so the code
/// under test sees a clear error and the call is still recorded.
#[tokio::test]
async fn an_unscripted_call_is_a_404_naming_the_call() {
    let recorder = ApiRecorder::new();
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(recorder.client(), "batch");
    let err = api.get("p-0").await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 404);
    assert!(
        status.message.contains(&format!("GET {PODS}/p-0")),
        "{}",
        status.message
    );
    assert_eq!(recorder.lines(), [format!("GET {PODS}/p-0")]);
}
