//! One Deployment per request. Selective release marks the victims with a low
//! pod-deletion-cost and lowers replicas, so the ReplicaSet removes exactly them. When the
//! ReplicaSet would remove other pods first (Pending or not Ready ones, which it ranks before
//! any cost), the victims are evicted instead and replicas left alone: any scale-down then
//! lets the ReplicaSet choose, and it chooses the unnamed pod (the Eviction API honours
//! PodDisruptionBudgets). The replacement it makes for an evicted victim is no host anyone was
//! told of; it goes with the Deployment when the last host of the request is returned
//! (docs/handlers.md). A victim the ReplicaSet passed over on a scale-down (its view lagged
//! the marks) is deleted by the return's status read once the ReplicaSet has settled.

use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use orb_core::ProviderApi;
use orb_core::provider::{AcquireOutcome, MachineFailure};
use serde_json::json;

use super::{
    HandlerCx, MAX_IN_FLIGHT, ReleaseResult, SCALE_CONFLICT_ATTEMPTS, Victims, WorkloadHandler,
    cached_controller_state, controller_outcome, create_or_adopt, deleted_or_gone, request_pods,
    wrong_body,
};
use crate::error::{K8sError, is_conflict, is_not_found};
use crate::fulfilment::{ControllerState, deployment_state};
use crate::labels::LabelKeys;
use crate::provider_data::RequestRecord;
use crate::release_plan::{
    DeploymentReleasePlan, POD_DELETION_COST, PodRank, ScaleDecision, VICTIM_DELETION_COST,
    decide_scale_after_marking, plan_deployment_release,
};
use crate::spec::BuiltWorkload;

mod evict;

use evict::{evict_victims, scale_away_replacements};

pub struct DeploymentHandler;

fn name_of(record: &RequestRecord) -> Result<&str, K8sError> {
    record.controller_of(ProviderApi::Deployment).ok_or_else(|| {
        K8sError::Refused(format!(
            "request {} has no Deployment recorded in its provider data; it was not created by the Deployment handler",
            record.request_id
        ))
    })
}

/// Marks each victim; returns the marked names, the ones already gone (404) and the failures.
async fn mark_victims(
    api: &Api<Pod>,
    victims: &[String],
) -> (Vec<String>, Vec<String>, Vec<MachineFailure>) {
    let patch = json!({"metadata": {"annotations": {POD_DELETION_COST: VICTIM_DELETION_COST}}});
    let outcomes = patch_each(api, victims, &patch).await;
    let mut marked = Vec::new();
    let mut gone = Vec::new();
    let mut failed = Vec::new();
    for (name, outcome) in outcomes {
        match outcome {
            Ok(_) => marked.push(name),
            Err(e) if is_not_found(&e) => gone.push(name),
            Err(e) => failed.push(MachineFailure {
                reason: K8sError::api(format!("marking pod {name} with {POD_DELETION_COST}"), e)
                    .to_string(),
                machine_id: name,
            }),
        }
    }
    marked.sort();
    gone.sort();
    (marked, gone, failed)
}

/// Takes the victim mark off `names` (a release that will not happen must not leave a pod
/// first in line for the next scale-down). Best effort: a pod that is gone needs nothing.
pub(crate) async fn unmark(api: &Api<Pod>, names: &[String]) -> Vec<MachineFailure> {
    let patch = json!({"metadata": {"annotations": {POD_DELETION_COST: null}}});
    patch_each(api, names, &patch)
        .await
        .into_iter()
        .filter_map(|(name, outcome)| match outcome {
            Err(e) if !is_not_found(&e) => Some(MachineFailure {
                reason: K8sError::api(format!("clearing the mark on pod {name}"), e).to_string(),
                machine_id: name,
            }),
            _ => None,
        })
        .collect()
}

async fn patch_each(
    api: &Api<Pod>,
    names: &[String],
    patch: &serde_json::Value,
) -> Vec<(String, Result<Pod, kube::Error>)> {
    stream::iter(names.iter().cloned())
        .map(|name| async move {
            let result = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await;
            (name, result)
        })
        .buffer_unordered(MAX_IN_FLIGHT)
        .collect()
        .await
}

/// Whether the Deployment's ReplicaSet has done what the Deployment asks: the controller saw
/// the latest spec and the live pods number `spec.replicas` (terminating pods are not
/// counted). A pod a return marked that still stands then was passed over, and no controller
/// will remove it.
pub(crate) fn scaled_as_asked(d: &Deployment) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    let seen = status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    seen && status.replicas.unwrap_or(0) == d.spec.replicas.unwrap_or(1)
}

/// A pod as a read saw it: deleting it with these preconditions fails (409) when it changed
/// since, so a stale view (a watch cache behind the apiserver) cannot delete on old facts.
pub(crate) struct SeenPod {
    name: String,
    uid: Option<String>,
    resource_version: Option<String>,
}

impl SeenPod {
    pub(crate) fn of(pod: &impl crate::pod_read::PodRead) -> Self {
        Self {
            name: pod.name().to_string(),
            uid: pod.uid().map(String::from),
            resource_version: pod.meta().resource_version.clone(),
        }
    }
}

/// Finishes a return whose scale-down removed other pods than the marked ones. The ReplicaSet
/// ranks pods by the deletion cost it has seen, and its view can lag the marks orb wrote just
/// before lowering `replicas`; it then removes unnamed pods and keeps named ones. Once it has
/// settled at the lower count, each named pod still standing as `pods` saw it is deleted: the
/// ReplicaSet replaces it, so the count stays what the return made it and the named hosts go
/// as asked. Only after the Deployment records that return `return_id` lowered it: before
/// (a scale-down that did not get through), deleting would only bring replacements. Returns
/// the pods deleted; none while the ReplicaSet is still on its way, when the Deployment is
/// gone, or when a pod changed since it was seen (the next read looks again).
pub(crate) async fn delete_passed_over(
    client: &kube::Client,
    record: &RequestRecord,
    return_id: &str,
    pods: &[SeenPod],
) -> Result<Vec<String>, K8sError> {
    let name = name_of(record)?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &record.namespace);
    let deployment = api
        .get_opt(name)
        .await
        .map_err(|e| K8sError::api(format!("reading Deployment {name}"), e))?;
    let key = format!("{}/{SCALED_FOR_RETURNS}", record.label_prefix);
    let lowered = |d: &Deployment| {
        scaled_for(d.annotations().get(&key).map(String::as_str))
            .iter()
            .any(|id| id == return_id)
    };
    if !deployment
        .as_ref()
        .is_some_and(|d| lowered(d) && scaled_as_asked(d))
    {
        return Ok(Vec::new());
    }
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &record.namespace);
    let mut deleted = Vec::new();
    for pod in pods {
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: pod.uid.clone(),
                resource_version: pod.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match pods_api.delete(&pod.name, &params).await {
            Ok(_) => deleted.push(pod.name.clone()),
            Err(e) if is_conflict(&e) || is_not_found(&e) => {}
            Err(e) => {
                return Err(K8sError::api(
                    format!(
                        "deleting pod {}, which Deployment {name} kept though a return named it",
                        pod.name
                    ),
                    e,
                ));
            }
        }
    }
    if !deleted.is_empty() {
        tracing::warn!(
            deployment = name,
            namespace = %record.namespace,
            deleted = ?deleted,
            "the ReplicaSet scaled down other pods than the ones the return marked (its view \
             lagged the marks); deleted the named pods it kept, which it replaces"
        );
    }
    Ok(deleted)
}

/// Annotation (under the label prefix) on a Deployment listing the returns whose scale-down
/// it has taken, newest last: a release repeated after an outage or a crash finds its own id
/// there and does not lower replicas a second time.
const SCALED_FOR_RETURNS: &str = "scaled-for-returns";
/// How many return ids the annotation keeps; a return is retried only until its deadline, so
/// only the latest few can ever come back.
const SCALED_FOR_KEPT: usize = 32;

/// A scale that must happen at most once: `id` is recorded under `key` with it.
struct ScaleOnce {
    key: String,
    id: String,
}

impl ScaleOnce {
    fn new(record: &RequestRecord, victims: &Victims, step: &str) -> Option<Self> {
        victims.return_request_id.as_ref().map(|ret| Self {
            key: format!("{}/{SCALED_FOR_RETURNS}", record.label_prefix),
            id: format!("{ret}{step}"),
        })
    }
}

/// The ids in a `scaled-for-returns` annotation.
fn scaled_for(annotation: Option<&str>) -> Vec<String> {
    annotation
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(String::from)
        .collect()
}

/// The annotation after recording `id`: appended, the oldest dropped beyond the limit.
fn scaled_for_with(mut ids: Vec<String>, id: &str) -> String {
    ids.retain(|i| i != id);
    ids.push(id.to_string());
    let drop = ids.len().saturating_sub(SCALED_FOR_KEPT);
    ids.drain(..drop);
    ids.join(",")
}

/// Moves `spec.replicas` by `delta`, re-reading and retrying when another writer got there
/// first. With `once`, the scale and its id are written in one patch, and a Deployment that
/// already carries the id is left as it is. Returns the new value.
async fn change_replicas(
    api: &Api<Deployment>,
    name: &str,
    delta: i64,
    once: Option<&ScaleOnce>,
) -> Result<u32, K8sError> {
    let mut last_error = None;
    for _ in 0..SCALE_CONFLICT_ATTEMPTS {
        let current = api
            .get(name)
            .await
            .map_err(|e| K8sError::api(format!("reading Deployment {name}"), e))?;
        let replicas = i64::from(current.spec.replicas.unwrap_or(1));
        let done = once.map(|o| {
            let ids = scaled_for(current.annotations().get(&o.key).map(String::as_str));
            (ids.contains(&o.id), ids)
        });
        if let Some((true, _)) = done {
            tracing::info!(
                deployment = name,
                replicas,
                "this return already scaled the Deployment; not scaling again"
            );
            return Ok(replicas.max(0) as u32);
        }
        let target = (replicas + delta).max(0) as u32;
        let version = current.resource_version().unwrap_or_default();
        let mut patch = json!({
            "metadata": {"resourceVersion": version},
            "spec": {"replicas": target},
        });
        if let (Some(o), Some((_, ids))) = (once, done) {
            patch["metadata"]["annotations"] =
                json!({ o.key.clone(): scaled_for_with(ids, &o.id) });
        }
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(target),
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
    fn kind(&self) -> ProviderApi {
        ProviderApi::Deployment
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
            record.set_controller(name.clone());
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
            let pods = request_pods::<Pod>(cx.client, record).await?;
            // A victim whose pod already ended (phase Failed or Succeeded) is no longer one of
            // the ReplicaSet's pods: it has been replaced, and scaling down would remove a
            // healthy one. Its leftover object is deleted; the count stays.
            let victim_names: std::collections::HashSet<&str> =
                victims.names.iter().map(String::as_str).collect();
            let ended: Vec<&Pod> = pods
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| victim_names.contains(n))
                        && victims.is_same_incarnation(p)
                        && p.metadata.deletion_timestamp.is_none()
                        && PodRank::of(p).is_none()
                })
                .collect();
            let mut failed_deletes = Vec::new();
            for pod in &ended {
                let pod_name = pod.name_any();
                let params =
                    DeleteParams {
                        preconditions: pod.metadata.uid.clone().map(|uid| {
                            kube::api::Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }
                        }),
                        ..DeleteParams::default()
                    };
                if let Err(e) = deleted_or_gone(pods_api.delete(&pod_name, &params).await)
                    && !is_conflict(&e)
                {
                    failed_deletes.push(MachineFailure {
                        reason: K8sError::api(format!("deleting the ended pod {pod_name}"), e)
                            .to_string(),
                        machine_id: pod_name,
                    });
                }
            }
            let ranks: Vec<PodRank> = pods
                .iter()
                .filter(|p| victims.is_same_incarnation(p))
                .filter_map(PodRank::of)
                .collect();
            cx.status_cache
                .invalidate("Deployment", &record.namespace, name);
            let plan =
                plan_deployment_release(name, &ranks, victims.kept.as_deref(), &victims.names);
            let result: Result<ReleaseResult, K8sError> = match plan {
                DeploymentReleasePlan::NothingToDo { already_gone } => Ok(ReleaseResult {
                    released: already_gone,
                    ..ReleaseResult::default()
                }),
                DeploymentReleasePlan::DeleteDeployment => {
                    deleted_or_gone(api.delete(name, &DeleteParams::background()).await)
                        .map_err(|e| K8sError::api(format!("deleting Deployment {name}"), e))?;
                    let named: std::collections::HashSet<&str> =
                        victims.names.iter().map(String::as_str).collect();
                    Ok(ReleaseResult {
                        also_released: victims
                            .kept
                            .clone()
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|k| !named.contains(k.as_str()))
                            .collect(),
                        released: victims.names,
                        message: Some(format!("deleted Deployment {name}")),
                        ..ReleaseResult::default()
                    })
                }
                DeploymentReleasePlan::Evict {
                    victims: present,
                    already_gone,
                    instead,
                } => {
                    let seen: std::collections::HashSet<String> =
                        pods.iter().map(|p| p.name_any()).collect();
                    let (evicted, gone, failed) =
                        evict_victims(cx, record, name, &victims, present).await?;
                    let scaled_away =
                        scale_away_replacements(cx, record, name, &victims, &seen, evicted.len())
                            .await?;
                    tracing::info!(
                        deployment = name,
                        namespace = %record.namespace,
                        evicted = ?evicted,
                        outranked_by = ?instead,
                        replacements_scaled_away = ?scaled_away,
                        "evicted the returned pods: the ReplicaSet ranks Pending or not-Ready \
                         pods before any deletion cost, so a scale-down alone would have \
                         removed those; replacements are scaled away only where that is safe"
                    );
                    let mut released = evicted;
                    released.extend(gone);
                    released.extend(already_gone);
                    Ok(ReleaseResult {
                        released,
                        failed,
                        message: Some(format!(
                            "the returned pods of Deployment {name} were evicted (a scale-down \
                             would have removed {} instead); {} of their replacements scaled \
                             away, the others go with the Deployment when its last host is \
                             returned",
                            instead.join(", "),
                            scaled_away.len()
                        )),
                        ..ReleaseResult::default()
                    })
                }
                DeploymentReleasePlan::ScaleDown {
                    victims: present,
                    already_gone,
                } => {
                    let (marked, gone, failed) = mark_victims(&pods_api, &present).await;
                    match decide_scale_after_marking(marked.len(), failed.len()) {
                        ScaleDecision::Abort {
                            failed: n,
                            attempted,
                        } if attempted > 0 => {
                            let left = unmark(&pods_api, &marked).await;
                            Err(K8sError::Refused(format!(
                                "Deployment {name} was not scaled: {n} of {attempted} victims could not be marked \
                                 for deletion (first: {}); scaling now would remove pods nobody named. {}Retry the return",
                                failed.first().map(|f| f.reason.as_str()).unwrap_or("?"),
                                if left.is_empty() {
                                    String::new()
                                } else {
                                    format!(
                                        "The marks on {} could not be cleared either. ",
                                        left.len()
                                    )
                                }
                            )))
                        }
                        ScaleDecision::Abort { .. } => {
                            // Every victim vanished while being marked: nothing to scale.
                            let mut released = gone;
                            released.extend(already_gone);
                            Ok(ReleaseResult {
                                released,
                                ..ReleaseResult::default()
                            })
                        }
                        ScaleDecision::LowerBy(by) => {
                            let once = ScaleOnce::new(record, &victims, "");
                            let replicas =
                                change_replicas(&api, name, -i64::from(by), once.as_ref()).await?;
                            let mut released = marked;
                            released.extend(gone);
                            released.extend(already_gone);
                            Ok(ReleaseResult {
                                released,
                                failed,
                                message: Some(format!(
                                    "Deployment {name} scaled to {replicas}; the marked pods go first"
                                )),
                                ..ReleaseResult::default()
                            })
                        }
                    }
                }
            };
            result.map(|mut r| {
                let refused: Vec<&str> = failed_deletes
                    .iter()
                    .map(|f| f.machine_id.as_str())
                    .collect();
                r.released.retain(|m| !refused.contains(&m.as_str()));
                r.failed.extend(failed_deletes);
                r
            })
        })
    }

    fn controller_state<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        requested: u32,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>> {
        Box::pin(cached_controller_state::<Deployment>(
            cx,
            record,
            requested,
            deployment_state,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::none(None, vec![])]
    #[case::empty(Some(""), vec![])]
    #[case::two(Some("ret-a, ret-b,"), vec!["ret-a", "ret-b"])]
    fn the_returns_a_deployment_scaled_for_are_read_from_its_annotation(
        #[case] annotation: Option<&str>,
        #[case] expected: Vec<&str>,
    ) {
        assert_eq!(scaled_for(annotation), expected);
    }

    fn deployment(generation: i64, spec: i32, status: Option<(i64, i32)>) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": generation},
            "spec": {"replicas": spec, "selector": {}, "template": {}},
            "status": status.map(|(observed, replicas)| json!({
                "observedGeneration": observed,
                "replicas": replicas,
            })),
        }))
        .unwrap()
    }

    #[rstest]
    #[case::settled_at_the_lower_count(deployment(3, 2, Some((3, 2))), true)]
    #[case::pods_not_removed_yet(deployment(3, 2, Some((3, 4))), false)]
    #[case::new_spec_not_seen_yet(deployment(3, 2, Some((2, 2))), false)]
    #[case::no_status_yet(deployment(1, 2, None), false)]
    fn a_named_pod_is_passed_over_only_once_the_replicaset_has_settled(
        #[case] d: Deployment,
        #[case] settled: bool,
    ) {
        assert_eq!(scaled_as_asked(&d), settled);
    }

    #[test]
    fn recording_a_return_appends_it_once_and_keeps_the_latest() {
        assert_eq!(scaled_for_with(vec!["a".into()], "b"), "a,b");
        assert_eq!(scaled_for_with(vec!["a".into(), "b".into()], "a"), "b,a");
        let many: Vec<String> = (0..SCALED_FOR_KEPT).map(|i| format!("r{i}")).collect();
        let kept = scaled_for(Some(&scaled_for_with(many, "new")));
        assert_eq!(kept.len(), SCALED_FOR_KEPT);
        assert_eq!(kept.first().map(String::as_str), Some("r1"));
        assert_eq!(kept.last().map(String::as_str), Some("new"));
    }
}
