//! One StatefulSet per request, with its headless Service created when missing. Release can
//! only take the highest ordinals (the set's ordering contract); failed ordinals above the
//! named ones go with them; any other non-tail release is refused before anything changes.

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use orb_core::ProviderApi;
use orb_core::provider::AcquireOutcome;

use super::{
    HandlerCx, ReleaseResult, SCALE_CONFLICT_ATTEMPTS, Victims, WorkloadHandler,
    cached_controller_state, controller_outcome, create_or_adopt, deleted_or_gone, patch_replicas,
    request_pods, wrong_body,
};
use crate::error::{K8sError, is_conflict};
use crate::fulfilment::{ControllerState, statefulset_state};
use crate::labels::LabelKeys;
use crate::machine_state::pod_machine_status;
use crate::provider_data::RequestRecord;
use crate::release_plan::{StatefulSetReleasePlan, plan_statefulset_release, statefulset_ordinal};
use crate::spec::BuiltWorkload;

pub struct StatefulSetHandler;

fn name_of(record: &RequestRecord) -> Result<&str, K8sError> {
    record.controller_of(ProviderApi::StatefulSet).ok_or_else(|| {
        K8sError::Refused(format!(
            "request {} has no StatefulSet recorded in its provider data; it was not created by the StatefulSet handler",
            record.request_id
        ))
    })
}

/// Creates the Service unless one of that name exists. Returns whether orb created it.
async fn ensure_service(api: &Api<Service>, service: &Service) -> Result<bool, K8sError> {
    let name = service.name_any();
    match api.get_opt(&name).await {
        Ok(Some(_)) => Ok(false),
        Ok(None) => match api.create(&PostParams::default(), service).await {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(K8sError::api(
                format!("creating headless Service {name}"),
                e,
            )),
        },
        Err(e) => Err(K8sError::api(format!("reading Service {name}"), e)),
    }
}

async fn delete_set(
    cx: &HandlerCx<'_>,
    record: &RequestRecord,
    name: &str,
) -> Result<(), K8sError> {
    let api: Api<StatefulSet> = Api::namespaced(cx.client.clone(), &record.namespace);
    deleted_or_gone(api.delete(name, &DeleteParams::background()).await)
        .map_err(|e| K8sError::api(format!("deleting StatefulSet {name}"), e))?;
    if let (true, Some(service)) = (record.service_created, record.service_name.as_deref()) {
        let services: Api<Service> = Api::namespaced(cx.client.clone(), &record.namespace);
        deleted_or_gone(services.delete(service, &DeleteParams::background()).await)
            .map_err(|e| K8sError::api(format!("deleting Service {service}"), e))?;
    }
    Ok(())
}

impl WorkloadHandler for StatefulSetHandler {
    fn kind(&self) -> ProviderApi {
        ProviderApi::StatefulSet
    }

    fn create<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        built: BuiltWorkload,
        mut record: RequestRecord,
    ) -> BoxFuture<'a, Result<AcquireOutcome, K8sError>> {
        Box::pin(async move {
            let BuiltWorkload::StatefulSet(set, service) = built else {
                return Err(wrong_body(self.kind(), &built));
            };
            let services: Api<Service> = Api::namespaced(cx.client.clone(), &record.namespace);
            record.service_created = ensure_service(&services, &service).await?;
            record.service_name = Some(service.name_any());
            let api: Api<StatefulSet> = Api::namespaced(cx.client.clone(), &record.namespace);
            let keys = LabelKeys::new(&record.label_prefix);
            let created = create_or_adopt(&api, &set, &keys, &record.request_id).await?;
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
        // Ordinals are the identity of a StatefulSet's hosts; the plan works on names.
        let full_return = victims.kept.as_ref().is_some_and(|k| k.is_empty());
        let kept = victims.kept.clone().unwrap_or_default();
        let victims = victims.names;
        Box::pin(async move {
            let name = name_of(record)?;
            let api: Api<StatefulSet> = Api::namespaced(cx.client.clone(), &record.namespace);
            cx.status_cache
                .invalidate("StatefulSet", &record.namespace, name);
            let failed: std::collections::BTreeSet<u32> =
                request_pods::<k8s_openapi::api::core::v1::Pod>(cx.client, record)
                    .await?
                    .iter()
                    .filter(|p| {
                        pod_machine_status(*p, ProviderApi::StatefulSet).0
                            == orb_core::machine::MachineStatus::Failed
                    })
                    .filter_map(|p| statefulset_ordinal(name, &p.name_any()))
                    .collect();
            for _ in 0..SCALE_CONFLICT_ATTEMPTS {
                let Some(current) = api
                    .get_opt(name)
                    .await
                    .map_err(|e| K8sError::api(format!("reading StatefulSet {name}"), e))?
                else {
                    return Ok(ReleaseResult {
                        released: victims,
                        message: Some(format!("StatefulSet {name} is already gone")),
                        ..ReleaseResult::default()
                    });
                };
                let replicas = current.spec.replicas.unwrap_or(1).max(0) as u32;
                // Nothing of the request kept: the whole set goes, whatever ordinals are
                // named (one may be between a loss and its recreation right now).
                let plan = if full_return {
                    StatefulSetReleasePlan::DeleteStatefulSet
                } else {
                    plan_statefulset_release(name, replicas, &victims, &failed)?
                };
                match plan {
                    StatefulSetReleasePlan::NothingToDo { already_gone } => {
                        return Ok(ReleaseResult {
                            released: already_gone,
                            ..ReleaseResult::default()
                        });
                    }
                    StatefulSetReleasePlan::DeleteStatefulSet => {
                        delete_set(cx, record, name).await?;
                        return Ok(ReleaseResult {
                            also_released: kept
                                .iter()
                                .filter(|k| !victims.contains(k))
                                .cloned()
                                .collect(),
                            released: victims,
                            message: Some(format!("deleted StatefulSet {name}")),
                            ..ReleaseResult::default()
                        });
                    }
                    StatefulSetReleasePlan::ScaleTo {
                        replicas: target,
                        taken_along,
                        ..
                    } => {
                        let version = current.resource_version().unwrap_or_default();
                        match patch_replicas(&api, name, &version, target).await {
                            Ok(()) => {
                                let message = if taken_along.is_empty() {
                                    format!("StatefulSet {name} scaled to {target}")
                                } else {
                                    format!(
                                        "StatefulSet {name} scaled to {target}; the failed pods \
                                         above them go too: {}",
                                        taken_along.join(", ")
                                    )
                                };
                                return Ok(ReleaseResult {
                                    released: victims,
                                    also_released: taken_along,
                                    message: Some(message),
                                    ..ReleaseResult::default()
                                });
                            }
                            Err(e) if is_conflict(&e) => continue,
                            Err(e) => {
                                return Err(K8sError::api(
                                    format!("scaling StatefulSet {name}"),
                                    e,
                                ));
                            }
                        }
                    }
                }
            }
            Err(K8sError::Refused(format!(
                "scaling StatefulSet {name} kept conflicting with other writers ({SCALE_CONFLICT_ATTEMPTS} attempts); retry the return"
            )))
        })
    }

    fn controller_state<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        requested: u32,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>> {
        Box::pin(cached_controller_state::<StatefulSet>(
            cx,
            record,
            requested,
            statefulset_state,
        ))
    }
}
