//! One Deployment per request. Selective release marks the victims with a low
//! pod-deletion-cost and lowers replicas, so the ReplicaSet removes exactly them; its pods are
//! never deleted directly.

use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use orb_core::provider::{AcquireOutcome, MachineFailure};
use serde_json::json;

use super::{
    HandlerCx, MAX_IN_FLIGHT, ReleaseResult, SCALE_CONFLICT_ATTEMPTS, Victims, WorkloadHandler,
    cached_controller_state, controller_outcome, create_or_adopt, deleted_or_gone, live_pod_names,
    patch_replicas, request_pods, wrong_body,
};
use crate::error::{K8sError, is_conflict};
use crate::fulfilment::{ControllerState, deployment_state};
use crate::labels::LabelKeys;
use crate::naming::ResourceKind;
use crate::provider_data::RequestRecord;
use crate::release_plan::{
    DeploymentReleasePlan, POD_DELETION_COST, ScaleDecision, VICTIM_DELETION_COST,
    decide_scale_after_marking, plan_deployment_release,
};
use crate::spec::BuiltWorkload;

pub struct DeploymentHandler;

fn name_of(record: &RequestRecord) -> Result<&str, K8sError> {
    record.deployment_name.as_deref().ok_or_else(|| {
        K8sError::Refused(format!(
            "request {} has no deployment_name in its provider data; it was not created by the Deployment handler",
            record.request_id
        ))
    })
}

/// Marks each victim; returns the marked names and the failures.
async fn mark_victims(api: &Api<Pod>, victims: &[String]) -> (Vec<String>, Vec<MachineFailure>) {
    let patch = json!({"metadata": {"annotations": {POD_DELETION_COST: VICTIM_DELETION_COST}}});
    let outcomes: Vec<(String, Result<Pod, kube::Error>)> = stream::iter(victims.iter().cloned())
        .map(|name| {
            let (api, patch) = (api, &patch);
            async move {
                let result = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
                (name, result)
            }
        })
        .buffer_unordered(MAX_IN_FLIGHT)
        .collect()
        .await;
    let mut marked = Vec::new();
    let mut failed = Vec::new();
    for (name, outcome) in outcomes {
        match outcome {
            Ok(_) => marked.push(name),
            Err(e) => failed.push(MachineFailure {
                reason: K8sError::api(format!("marking pod {name} with {POD_DELETION_COST}"), e)
                    .to_string(),
                machine_id: name,
            }),
        }
    }
    marked.sort();
    (marked, failed)
}

/// Lowers `spec.replicas` by `by`, re-reading and retrying when another writer got there first.
async fn lower_replicas(api: &Api<Deployment>, name: &str, by: u32) -> Result<u32, K8sError> {
    let mut last_error = None;
    for _ in 0..SCALE_CONFLICT_ATTEMPTS {
        let current = api
            .get(name)
            .await
            .map_err(|e| K8sError::api(format!("reading Deployment {name}"), e))?;
        let replicas = current.spec.replicas.unwrap_or(1).max(0) as u32;
        let target = replicas.saturating_sub(by);
        let version = current.resource_version().unwrap_or_default();
        match patch_replicas(api, name, &version, target).await {
            Ok(()) => return Ok(target),
            Err(e) if is_conflict(&e) => last_error = Some(e),
            Err(e) => return Err(K8sError::api(format!("scaling Deployment {name}"), e)),
        }
    }
    Err(K8sError::Refused(format!(
        "scaling Deployment {name} kept conflicting with other writers ({SCALE_CONFLICT_ATTEMPTS} attempts, last: {}); retry the return",
        last_error.map(|e| e.to_string()).unwrap_or_default()
    )))
}

impl WorkloadHandler for DeploymentHandler {
    fn kind(&self) -> ResourceKind {
        ResourceKind::Deployment
    }

    fn create<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        built: BuiltWorkload,
        mut record: RequestRecord,
    ) -> BoxFuture<'a, Result<AcquireOutcome, K8sError>> {
        Box::pin(async move {
            let BuiltWorkload::Deployment(deployment) = built else {
                return Err(wrong_body(self.kind(), &built));
            };
            let api: Api<Deployment> = Api::namespaced(cx.client.clone(), &record.namespace);
            let keys = LabelKeys::new(&record.label_prefix);
            let created = create_or_adopt(&api, &deployment, &keys, &record.request_id).await?;
            let name = created.name_any();
            record.deployment_name = Some(name.clone());
            record.replicas = created.spec.replicas.map(|r| r.max(0) as u32);
            Ok(controller_outcome(name, &record))
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        victims: Victims,
    ) -> BoxFuture<'a, Result<ReleaseResult, K8sError>> {
        Box::pin(async move {
            let name = name_of(record)?;
            let api: Api<Deployment> = Api::namespaced(cx.client.clone(), &record.namespace);
            let pods_api: Api<Pod> = Api::namespaced(cx.client.clone(), &record.namespace);
            match api.get_opt(name).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Ok(ReleaseResult {
                        released: victims.names,
                        message: Some(format!("Deployment {name} is already gone")),
                        ..ReleaseResult::default()
                    });
                }
                Err(e) => return Err(K8sError::api(format!("reading Deployment {name}"), e)),
            }
            // Only this Deployment's live pods, and only the incarnations orb was asked about.
            let pods = request_pods(cx.client, record).await?;
            let current: Vec<_> = pods
                .into_iter()
                .filter(|p| victims.is_same_incarnation(p))
                .collect();
            let live = live_pod_names(&current);
            cx.status_cache
                .invalidate("Deployment", &record.namespace, name);
            match plan_deployment_release(name, &live, &victims.names) {
                DeploymentReleasePlan::NothingToDo { already_gone } => Ok(ReleaseResult {
                    released: already_gone,
                    ..ReleaseResult::default()
                }),
                DeploymentReleasePlan::DeleteDeployment => {
                    deleted_or_gone(api.delete(name, &DeleteParams::background()).await)
                        .map_err(|e| K8sError::api(format!("deleting Deployment {name}"), e))?;
                    Ok(ReleaseResult {
                        released: victims.names,
                        message: Some(format!("deleted Deployment {name}")),
                        ..ReleaseResult::default()
                    })
                }
                DeploymentReleasePlan::ScaleDown {
                    victims: present,
                    already_gone,
                } => {
                    let (marked, failed) = mark_victims(&pods_api, &present).await;
                    match decide_scale_after_marking(marked.len(), failed.len()) {
                        ScaleDecision::Abort {
                            failed: n,
                            attempted,
                        } => Err(K8sError::Refused(format!(
                            "Deployment {name} was not scaled: {n} of {attempted} victims could not be marked \
                             for deletion (first: {}); scaling now would remove pods nobody named. Retry the return",
                            failed.first().map(|f| f.reason.as_str()).unwrap_or("?")
                        ))),
                        ScaleDecision::LowerBy(by) => {
                            let replicas = lower_replicas(&api, name, by).await?;
                            let mut released = marked;
                            released.extend(already_gone);
                            Ok(ReleaseResult {
                                released,
                                failed,
                                message: Some(format!(
                                    "Deployment {name} scaled to {replicas}; the marked pods go first"
                                )),
                            })
                        }
                    }
                }
            }
        })
    }

    fn controller_state<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>> {
        Box::pin(cached_controller_state::<Deployment>(
            cx,
            record,
            deployment_state,
        ))
    }
}
