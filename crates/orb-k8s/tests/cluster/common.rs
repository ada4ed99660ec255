//! Shared steps of the cluster tests: a provider confined to the test's own namespace,
//! templates, and bounded waits on provider status and on pods.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_fixture::identity::{BrokerIdentity, Managed, OPT_IN_FEATURES};
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use orb_core::ids::RequestId;
use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::{
    AcquireInput, AcquireOutcome, MachineRef, Provider, ReleaseInput, ReleaseOutcome, StatusInput,
    StatusReport,
};
use orb_core::request::RequestType;
use orb_core::template::{ProviderApi, Template};
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, FileLayer};
use serde_json::{Value, json};

pub const WAIT: Duration = Duration::from_secs(60);

/// (name, uid, resourceVersion) of every pod, sorted: two views agree when these do.
pub type Snapshot = Vec<(String, String, String)>;

/// The [`Snapshot`] of the pods not being deleted.
pub fn snapshot(pods: &[Pod]) -> Snapshot {
    let mut out: Snapshot = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                p.name_any(),
                p.uid().unwrap_or_default(),
                p.resource_version().unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

pub struct Harness {
    pub cluster: TestCluster,
    pub ns: TestNamespace,
    pub provider: K8sProvider,
}

/// A provider whose namespace is a fresh test namespace; `settings` are extra provider
/// config keys (as in config.json). The provider runs as the shipped identity (docs/rbac.yaml's
/// rules for the namespaces and features `settings` name); `cluster` stays admin, for what the
/// test arranges itself.
pub async fn harness(prefix: &str, settings: Value) -> Harness {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace(prefix).await;
    let identity = broker_identity(&cluster, &ns, &settings).await;
    let provider = provider_for(&identity.as_cluster(), ns.name(), settings);
    Harness {
        cluster,
        ns,
        provider,
    }
}

/// ServiceAccount `orb-broker` of `ns` with the rules docs/rbac.yaml gives the namespaces
/// (`namespaces`, else `ns`) and opt-in features that `settings` switch on.
pub async fn broker_identity(
    cluster: &TestCluster,
    ns: &TestNamespace,
    settings: &Value,
) -> BrokerIdentity {
    let managed = match settings["namespaces"].as_array() {
        Some(list) if list.iter().any(|n| n == "*") => Managed::ClusterWide,
        Some(list) => Managed::Namespaces(
            list.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect(),
        ),
        None => Managed::Namespaces(vec![ns.name().to_string()]),
    };
    let features: Vec<&str> = OPT_IN_FEATURES
        .into_iter()
        .filter(|f| settings[*f] == json!(true))
        .collect();
    cluster.broker_identity_for(ns, managed, &features).await
}

pub fn provider_for(cluster: &TestCluster, namespace: &str, settings: Value) -> K8sProvider {
    let mut block = serde_json::Map::new();
    block.insert("namespace".into(), json!(namespace));
    if let Value::Object(extra) = settings {
        block.extend(extra);
    }
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "test-config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    );
    let resolved = layers.resolve(None).expect("test provider config is valid");
    K8sProvider::with_client(cluster.client.clone(), resolved, "default")
}

pub fn template(id: &str, api: Option<ProviderApi>) -> Template {
    Template {
        template_id: id.into(),
        provider_api: api,
        container_image: Some("busybox:1.36".into()),
        command: Some(vec!["sh".into(), "-c".into(), "sleep 3600".into()]),
        ..Template::default()
    }
}

pub async fn acquire(h: &Harness, template: &Template, count: u32) -> (RequestId, AcquireOutcome) {
    let request_id = RequestId::new_acquire();
    let outcome = h
        .provider
        .acquire(AcquireInput {
            request_id: request_id.clone(),
            template: template.clone(),
            count,
        })
        .await
        .unwrap_or_else(|e| panic!("acquire of {} x{count} failed: {e}", template.template_id));
    (request_id, outcome)
}

pub fn status_input(
    request_id: &RequestId,
    template: &Template,
    count: u32,
    outcome: &AcquireOutcome,
) -> StatusInput {
    StatusInput {
        request_id: request_id.clone(),
        request_type: RequestType::Acquire,
        requested_count: count,
        provider_api: Some(template.api()),
        provider_data: std::sync::Arc::new(outcome.provider_data.clone()),
        template: Some(template.clone()),
        machines: Default::default(),
    }
}

fn verdict_name(v: &Verdict) -> &'static str {
    match v {
        Verdict::InProgress => "in_progress",
        Verdict::Underway => "underway",
        Verdict::Fulfilled => "fulfilled",
        Verdict::Partial { .. } => "partial",
        Verdict::Failed { .. } => "failed",
    }
}

/// Polls the provider's status until the verdict is `want` ("fulfilled", "failed", …).
pub async fn wait_verdict(h: &Harness, input: &StatusInput, want: &str) -> StatusReport {
    wait_for(
        &format!("verdict {want} for {}", input.request_id),
        WAIT,
        || async {
            match h.provider.status(input.clone()).await {
                Ok(report) if verdict_name(&report.verdict) == want => Check::Done(report),
                Ok(report) => Check::NotYet(format!(
                    "{:?}: {}",
                    report.verdict,
                    report.message.unwrap_or_default()
                )),
                Err(e) => Check::NotYet(format!("error: {e}")),
            }
        },
    )
    .await
}

pub fn machine_ref(
    request_id: &RequestId,
    machine_id: &str,
    outcome: &AcquireOutcome,
    api: &str,
) -> MachineRef {
    MachineRef {
        machine_id: machine_id.into(),
        name: machine_id.into(),
        request_id: request_id.clone(),
        template_id: "t".into(),
        provider_api: Some(api.parse().expect("a provider API")),
        resource_id: None,
        uid: None,
        status: MachineStatus::Running,
        request_provider_data: std::sync::Arc::new(outcome.provider_data.clone()),
    }
}

pub async fn release(
    h: &Harness,
    request_id: &RequestId,
    outcome: &AcquireOutcome,
    api: &str,
    victims: &[&str],
) -> Result<ReleaseOutcome, orb_core::provider::ProviderError> {
    release_keeping(h, request_id, outcome, api, victims, None).await
}

/// A release that says, as the broker does, which other machines of the request orb keeps
/// (stored, in no return); `None` leaves it unknown to the provider.
pub async fn release_keeping(
    h: &Harness,
    request_id: &RequestId,
    outcome: &AcquireOutcome,
    api: &str,
    victims: &[&str],
    kept: Option<&[String]>,
) -> Result<ReleaseOutcome, orb_core::provider::ProviderError> {
    h.provider
        .release(ReleaseInput {
            return_request_id: RequestId::new_return(),
            machines: victims
                .iter()
                .map(|v| machine_ref(request_id, v, outcome, api))
                .collect(),
            templates: Default::default(),
            others: kept
                .map(|k| [(request_id.to_string(), k.to_vec())].into())
                .unwrap_or_default(),
        })
        .await
}

/// Names of the request's pods that are not being deleted, sorted.
pub async fn live_pods(h: &Harness, request_id: &RequestId) -> Vec<String> {
    let api: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(&format!("orb.io/request-id={request_id}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

/// Waits until the request's live pods are exactly `want`.
pub async fn wait_live_pods(h: &Harness, request_id: &RequestId, want: &[String]) {
    let mut want = want.to_vec();
    want.sort();
    wait_for(&format!("live pods {want:?}"), WAIT, || async {
        let live = live_pods(h, request_id).await;
        if live == want {
            Check::Done(())
        } else {
            Check::NotYet(format!("{live:?}"))
        }
    })
    .await
}

/// Machine ids of a status report with the given status.
pub fn ids_with(report: &StatusReport, status: MachineStatus) -> Vec<String> {
    let mut ids: Vec<String> = report
        .machines
        .iter()
        .filter(|m| m.status == status)
        .map(|m| m.machine_id.clone())
        .collect();
    ids.sort();
    ids
}
