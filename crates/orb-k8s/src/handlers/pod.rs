//! Bare pods: N creates (at most 50 in flight), deletes by name. No controller is involved,
//! so releasing a pod is deleting it.

use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, ResourceExt};
use orb_core::ProviderApi;
use orb_core::provider::{AcquireOutcome, MachineFailure};

use super::{
    HandlerCx, MAX_IN_FLIGHT, ReleaseResult, Victims, WorkloadHandler, create_or_adopt,
    deleted_or_gone, wrong_body,
};
use crate::error::{K8sError, is_conflict};
use crate::fulfilment::ControllerState;
use crate::labels::LabelKeys;
use crate::machine_state::observe_pod;
use crate::provider_data::RequestRecord;
use crate::release_plan::plan_pod_release;
use crate::spec::BuiltWorkload;

pub struct PodHandler;

impl WorkloadHandler for PodHandler {
    fn kind(&self) -> ProviderApi {
        ProviderApi::Pod
    }

    fn create<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        built: BuiltWorkload,
        mut record: RequestRecord,
    ) -> BoxFuture<'a, Result<AcquireOutcome, K8sError>> {
        Box::pin(async move {
            let BuiltWorkload::Pods(pods) = built else {
                return Err(wrong_body(self.kind(), &built));
            };
            let api: Api<Pod> = Api::namespaced(cx.client.clone(), &record.namespace);
            let keys = LabelKeys::new(&record.label_prefix);
            let request_id = record.request_id.clone();
            let results: Vec<(String, Result<Pod, K8sError>)> = stream::iter(pods)
                .map(|pod| {
                    let (api, keys, request_id) = (&api, &keys, &request_id);
                    async move {
                        let name = pod.name_any();
                        (name, create_or_adopt(api, &pod, keys, request_id).await)
                    }
                })
                .buffer_unordered(MAX_IN_FLIGHT)
                .collect()
                .await;
            let mut created = Vec::new();
            let mut first_error = None;
            let mut cut_off = None;
            for (name, result) in results {
                let outcome = super::creation_outcome(&result);
                cx.metrics
                    .pod_creations
                    .get_or_create(&crate::metrics::CreationLabels { outcome })
                    .inc();
                match result {
                    Ok(pod) => created.push(pod),
                    // The cluster did not answer (or may have created it without saying so):
                    // not this pod's failure. The whole acquire is resumed later, and a
                    // create that did happen is adopted then.
                    Err(e) if e.is_transient() => {
                        cut_off.get_or_insert(e);
                    }
                    Err(e) => {
                        record.create_failures.insert(name.clone(), e.to_string());
                        record.failed_pod_names.push(name);
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = cut_off {
                return Err(e);
            }
            if created.is_empty() {
                return Err(match first_error {
                    Some(K8sError::Api {
                        operation,
                        code,
                        detail,
                    }) => K8sError::Api {
                        operation: format!("every pod create of {request_id} ({operation})"),
                        code,
                        detail,
                    },
                    Some(other) => other,
                    None => K8sError::Refused("no pod to create: the request count is 0".into()),
                });
            }
            created.sort_by_key(|p| p.name_any());
            record.failed_pod_names.sort();
            record.pod_names = created.iter().map(|p| p.name_any()).collect();
            let message = (!record.failed_pod_names.is_empty()).then(|| {
                format!(
                    "created {} of {} pods; failed: {}",
                    created.len(),
                    created.len() + record.failed_pod_names.len(),
                    record
                        .create_failures
                        .iter()
                        .map(|(n, r)| format!("{n}: {r}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            });
            Ok(AcquireOutcome {
                resource_ids: record.pod_names.clone(),
                machines: created
                    .iter()
                    .map(|p| observe_pod(p, ProviderApi::Pod, &p.name_any()))
                    .collect(),
                provider_data: record.to_value(),
                message,
            })
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        victims: Victims,
    ) -> BoxFuture<'a, Result<ReleaseResult, K8sError>> {
        Box::pin(async move {
            let names = plan_pod_release(&victims.names);
            if names.is_empty() {
                return Ok(ReleaseResult::default());
            }
            let api: Api<Pod> = Api::namespaced(cx.client.clone(), &record.namespace);
            let outcomes: Vec<(String, Result<(), kube::Error>)> = stream::iter(names)
                .map(|name| {
                    let api = &api;
                    // With the UID as precondition, a newer pod of the same name is never
                    // deleted in place of the one orb meant (a 409 then: ours is gone).
                    let params = DeleteParams {
                        preconditions: victims.uids.get(&name).map(|uid| Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    async move {
                        let result = match api.delete(&name, &params).await {
                            Err(e) if is_conflict(&e) => Ok(()),
                            other => deleted_or_gone(other),
                        };
                        (name, result)
                    }
                })
                .buffer_unordered(MAX_IN_FLIGHT)
                .collect()
                .await;
            let mut result = ReleaseResult::default();
            let mut cut_off = None;
            for (name, outcome) in outcomes {
                match outcome {
                    Ok(()) => result.released.push(name),
                    Err(e) => {
                        let error = K8sError::api(format!("deleting pod {name}"), e);
                        if error.is_transient() {
                            cut_off.get_or_insert(error);
                        } else {
                            result.failed.push(MachineFailure {
                                reason: error.to_string(),
                                machine_id: name,
                            });
                        }
                    }
                }
            }
            // The cluster did not answer for some: the whole release is reported cut off, so
            // the return retries it (a delete by name of a pod already gone is a 404, done).
            if let Some(error) = cut_off {
                return Err(error);
            }
            result.released.sort();
            Ok(result)
        })
    }

    fn controller_state<'a>(
        &'a self,
        _cx: &'a HandlerCx<'a>,
        _record: &'a RequestRecord,
        _requested: u32,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>> {
        Box::pin(async { Ok(None) })
    }
}
