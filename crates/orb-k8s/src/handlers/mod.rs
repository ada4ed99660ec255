//! The four handlers behind one trait. The provider picks one by the template's
//! `provider_api` at request time; each handler only creates its objects, releases named
//! machines by its pure plan ([`crate::release_plan`]) and reports its controller's state.
//! Everything shared (listing pods, translating them, deciding verdicts) lives outside them.

mod deployment;
mod job;
mod pod;
mod statefulset;
#[cfg(test)]
mod tests_calls;

pub(crate) use job::delete_job;

use std::fmt::Debug;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use orb_core::ProviderApi;
use orb_core::provider::{AcquireOutcome, MachineFailure};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{K8sError, is_conflict, is_not_found};
use crate::fulfilment::ControllerState;
use crate::labels::LabelKeys;
use crate::provider_data::RequestRecord;
use crate::spec::BuiltWorkload;
use crate::status_cache::ControllerStatusCache;

pub use deployment::DeploymentHandler;
pub(crate) use deployment::unmark as unmark_victims;
pub(crate) use deployment::{SeenPod, delete_passed_over};
pub use job::JobHandler;
pub use pod::PodHandler;
pub use statefulset::StatefulSetHandler;

/// At most this many create or delete calls in flight for one request.
pub const MAX_IN_FLIGHT: usize = 50;
/// Attempts of a read-modify-write of `spec.replicas` that lost a resourceVersion race.
pub const SCALE_CONFLICT_ATTEMPTS: usize = 5;

/// What a handler needs to talk to the cluster.
pub struct HandlerCx<'a> {
    pub client: &'a Client,
    pub status_cache: &'a ControllerStatusCache,
    pub metrics: &'a crate::metrics::K8sMetrics,
}

/// The `orb_k8s_pod_creations_total` outcome of one pod create.
pub(crate) fn creation_outcome(result: &Result<Pod, K8sError>) -> &'static str {
    match result {
        Ok(_) => "success",
        Err(K8sError::Refused(_)) => "conflict",
        Err(K8sError::Api {
            code: Some(409), ..
        }) => "conflict",
        Err(K8sError::Api {
            code: Some(403),
            detail,
            ..
        }) if detail.contains("exceeded quota") => "quota_exceeded",
        Err(K8sError::Api {
            code: Some(403), ..
        }) => "forbidden",
        Err(K8sError::Api {
            code: Some(400 | 422),
            ..
        }) => "invalid",
        Err(_) => "error",
    }
}

/// The machines to release: pod names, with the UID of the incarnation orb knows when it
/// knows one. A pod of that name with another UID is a different incarnation (the one orb
/// meant is already gone) and is left alone.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Victims {
    pub names: Vec<String>,
    pub uids: std::collections::BTreeMap<String, String>,
    /// The request's other machines orb keeps (stored, not gone, in no return); `None` when
    /// the caller does not know. A release that leaves none of them deletes the controller.
    pub kept: Option<Vec<String>>,
    /// The return releasing them, when a return does (a timed-out pod is released by a status
    /// read instead). A controller records it with the scale it took, so repeating the same
    /// release after an outage does not scale again.
    pub return_request_id: Option<String>,
}

impl Victims {
    pub fn named(names: Vec<String>) -> Self {
        Self {
            names,
            ..Default::default()
        }
    }

    /// False when orb knows this victim's UID and `pod` is another incarnation.
    pub fn is_same_incarnation(&self, pod: &Pod) -> bool {
        match (self.uids.get(&pod.name_any()), pod.metadata.uid.as_ref()) {
            (Some(known), Some(current)) => known == current,
            _ => true,
        }
    }
}

/// The outcome of releasing machines of one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReleaseResult {
    pub released: Vec<String>,
    pub failed: Vec<MachineFailure>,
    pub message: Option<String>,
    /// Machines that go too though nobody named them (a Job's other hosts, failed ordinals
    /// above a StatefulSet's tail).
    pub also_released: Vec<String>,
    /// Set when the release ended the acquire (the request can deliver nothing any more).
    pub ends_request: Option<String>,
}

/// One Kubernetes primitive's way of creating and releasing machines.
pub trait WorkloadHandler: Send + Sync {
    fn kind(&self) -> ProviderApi;

    /// Creates the built objects. `record` is the bookkeeping so far (namespace, ids); the
    /// outcome's `provider_data` is the completed record.
    fn create<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        built: BuiltWorkload,
        record: RequestRecord,
    ) -> BoxFuture<'a, Result<AcquireOutcome, K8sError>>;

    /// Releases the named machines (pod names) of the request `record` describes.
    fn release<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        victims: Victims,
    ) -> BoxFuture<'a, Result<ReleaseResult, K8sError>>;

    /// The controller's state (`None` for bare pods, or when the controller is gone);
    /// `requested` is the request's machine count (the state is cached per count).
    fn controller_state<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        requested: u32,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>>;
}

/// The handler for a kind.
pub fn handler_for(kind: ProviderApi) -> &'static dyn WorkloadHandler {
    match kind {
        ProviderApi::Pod => &PodHandler,
        ProviderApi::Deployment => &DeploymentHandler,
        ProviderApi::StatefulSet => &StatefulSetHandler,
        ProviderApi::Job => &JobHandler,
    }
}

/// Creates `object`; a 409 whose existing object carries this request's id label is the same
/// object from an earlier attempt and is adopted. Any other 409 is an error.
/// The refusal when a handler is handed a body of another kind (a dispatch bug, never input).
pub(crate) fn wrong_body(handler: ProviderApi, built: &BuiltWorkload) -> K8sError {
    K8sError::Refused(format!(
        "the {handler} handler was given a {} to create; this is an orb bug",
        built.kind()
    ))
}

/// What a controller-backed acquire reports: the one controller it created; its machines are
/// observed later through status, once the controller has made the pods.
pub(crate) fn controller_outcome(name: String, record: &RequestRecord) -> AcquireOutcome {
    AcquireOutcome {
        resource_ids: vec![name],
        machines: Vec::new(),
        provider_data: record.to_value(),
        message: None,
    }
}

pub(crate) async fn create_or_adopt<K>(
    api: &Api<K>,
    object: &K,
    keys: &LabelKeys,
    request_id: &str,
) -> Result<K, K8sError>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let name = object.name_any();
    match api.create(&PostParams::default(), object).await {
        Ok(created) => Ok(created),
        Err(e) if is_conflict(&e) => {
            let existing = api
                .get(&name)
                .await
                .map_err(|e| K8sError::api(format!("reading existing {kind} {name}"), e))?;
            let owner = existing.labels().get(&keys.request_id()).cloned();
            if owner.as_deref() == Some(request_id) {
                Ok(existing)
            } else {
                Err(K8sError::Refused(format!(
                    "{kind} {name} already exists and belongs to {}; delete it or change naming.prefix",
                    owner.map_or("no orb request".to_string(), |o| format!("request {o}"))
                )))
            }
        }
        Err(e) => Err(K8sError::api(format!("creating {kind} {name}"), e)),
    }
}

/// Live (not being deleted) pods of a request.
pub(crate) async fn request_pods<K>(
    client: &Client,
    record: &RequestRecord,
) -> Result<Vec<K>, K8sError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), &record.namespace);
    let selector = LabelKeys::new(&record.label_prefix).request_selector(&record.request_id);
    let pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| K8sError::api(format!("listing pods of {}", record.request_id), e))?;
    Ok(pods.items)
}

/// The request's pods as kept ([`crate::kept::Kept`]), read as protobuf when the apiserver
/// offers it: what every status read lists.
pub(crate) async fn request_kept_pods(
    client: &Client,
    record: &RequestRecord,
) -> Result<Vec<crate::kept::Kept>, K8sError> {
    let api = Api::namespaced(client.clone(), &record.namespace);
    let selector = LabelKeys::new(&record.label_prefix).request_selector(&record.request_id);
    crate::protobuf_list::list_kept(&api, &ListParams::default().labels(&selector))
        .await
        .map(|page| page.items)
        .map_err(|e| K8sError::api(format!("listing pods of {}", record.request_id), e))
}

/// Sets `spec.replicas` guarded by `resource_version` (a 409 means someone changed it first).
pub(crate) async fn patch_replicas<K>(
    api: &Api<K>,
    name: &str,
    resource_version: &str,
    replicas: u32,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let patch = json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"replicas": replicas},
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// What happened to one eviction.
#[derive(Debug)]
pub(crate) enum EvictionOutcome {
    /// Evicted (or, in a dry run, would be).
    Evicted,
    /// Not there, or another incarnation of that name: the one orb meant is gone.
    Gone,
    /// A PodDisruptionBudget allows no disruption now (HTTP 429).
    Blocked(String),
}

/// Evicts pod `name` through the Eviction API, which honours PodDisruptionBudgets; `uid`
/// makes sure only that incarnation goes. kube's `Api::evict` sends its delete options under
/// a key the apiserver does not read, so the preconditions would be lost: the body is built
/// here.
pub(crate) async fn evict_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    dry_run: bool,
) -> Result<EvictionOutcome, K8sError> {
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(uid) = uid {
        body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    let mut url = format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction");
    if dry_run {
        url.push_str("?dryRun=All");
    }
    let request = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .map_err(|e| K8sError::Client(format!("building the eviction of pod {name}: {e}")))?;
    match client
        .request::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>(request)
        .await
    {
        Ok(_) => Ok(EvictionOutcome::Evicted),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(EvictionOutcome::Gone),
        Err(kube::Error::Api(status)) if status.code == 429 => {
            Ok(EvictionOutcome::Blocked(status.message.clone()))
        }
        Err(e) => Err(K8sError::api(format!("evicting pod {name}"), e)),
    }
}

/// A 404 on delete means the object is already gone: success.
pub(crate) fn deleted_or_gone<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The controller's state through the TTL cache; `None` when the controller is gone.
pub(crate) async fn cached_controller_state<K>(
    cx: &HandlerCx<'_>,
    record: &RequestRecord,
    requested: u32,
    to_state: fn(&K) -> ControllerState,
) -> Result<Option<ControllerState>, K8sError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let Some(name) = record.controller_name() else {
        return Ok(None);
    };
    let kind = K::kind(&()).to_string();
    let now = std::time::Instant::now();
    if let Some(hit) = cx
        .status_cache
        .get(&kind, &record.namespace, name, requested, now)
    {
        return Ok(Some(hit));
    }
    let api: Api<K> = Api::namespaced(cx.client.clone(), &record.namespace);
    let fetched_at = std::time::Instant::now();
    match api.get_opt(name).await {
        Ok(Some(object)) => {
            let state = to_state(&object);
            cx.status_cache.put(
                &kind,
                &record.namespace,
                name,
                requested,
                state.clone(),
                fetched_at,
            );
            Ok(Some(state))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(K8sError::api(format!("reading {kind} {name}"), e)),
    }
}

/// Names of the pods (not being deleted) among `pods`.
pub(crate) fn live_pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn pod(uid: Option<&str>) -> Pod {
        let pod = crate::test_support::pod("p-0");
        match uid {
            Some(uid) => pod.uid(uid),
            None => pod,
        }
        .build()
    }

    #[rstest]
    #[case::unknown_uid(None, Some("u-2"), true)]
    #[case::same_uid(Some("u-1"), Some("u-1"), true)]
    #[case::newer_incarnation(Some("u-1"), Some("u-2"), false)]
    #[case::pod_without_uid(Some("u-1"), None, true)]
    fn only_the_remembered_incarnation_is_a_victim(
        #[case] known: Option<&str>,
        #[case] current: Option<&str>,
        #[case] same: bool,
    ) {
        let mut victims = Victims::named(vec!["p-0".into()]);
        if let Some(uid) = known {
            victims.uids.insert("p-0".into(), uid.into());
        }
        assert_eq!(victims.is_same_incarnation(&pod(current)), same);
    }

    fn api_error(code: u16, detail: &str) -> Result<Pod, K8sError> {
        Err(K8sError::Api {
            operation: "creating pod p".into(),
            code: Some(code),
            detail: detail.into(),
        })
    }

    #[rstest]
    #[case(Ok(Pod::default()), "success")]
    #[case(Err(K8sError::Refused("belongs to request req-x".into())), "conflict")]
    #[case(api_error(409, "already exists"), "conflict")]
    #[case(
        api_error(403, "pods \"p\" is forbidden: exceeded quota: q"),
        "quota_exceeded"
    )]
    #[case(api_error(403, "pods is forbidden: User cannot create"), "forbidden")]
    #[case(api_error(422, "spec.containers: Required value"), "invalid")]
    #[case(api_error(500, "etcdserver: timeout"), "error")]
    fn pod_creation_outcomes_are_a_closed_set(
        #[case] result: Result<Pod, K8sError>,
        #[case] outcome: &str,
    ) {
        assert_eq!(creation_outcome(&result), outcome);
    }
}
