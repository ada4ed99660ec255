//! One Job per request. A Job is run-to-completion: it cannot give back single hosts, so a
//! release deletes the Job (and, through background propagation, its pods) whatever ids are
//! named; the ids are logged for audit. Every other host of the Job goes with it, and the
//! acquire ends: a returned Job delivers nothing more.

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use orb_core::ProviderApi;
use orb_core::provider::AcquireOutcome;

use super::{
    HandlerCx, ReleaseResult, Victims, WorkloadHandler, cached_controller_state,
    controller_outcome, create_or_adopt, deleted_or_gone, live_pod_names, request_pods, wrong_body,
};
use crate::error::K8sError;
use crate::fulfilment::{ControllerState, job_state};
use crate::labels::LabelKeys;
use crate::provider_data::RequestRecord;
use crate::spec::BuiltWorkload;

pub struct JobHandler;

/// Deletes Job `name` with its pods (background propagation); a Job already gone is fine.
pub(crate) async fn delete_job(
    cx: &HandlerCx<'_>,
    namespace: &str,
    name: &str,
) -> Result<(), K8sError> {
    let api: Api<Job> = Api::namespaced(cx.client.clone(), namespace);
    cx.status_cache.invalidate("Job", namespace, name);
    deleted_or_gone(api.delete(name, &DeleteParams::background()).await)
        .map_err(|e| K8sError::api(format!("deleting Job {name}"), e))
}

impl WorkloadHandler for JobHandler {
    fn kind(&self) -> ProviderApi {
        ProviderApi::Job
    }

    fn create<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        built: BuiltWorkload,
        mut record: RequestRecord,
    ) -> BoxFuture<'a, Result<AcquireOutcome, K8sError>> {
        Box::pin(async move {
            let BuiltWorkload::Job(job) = built else {
                return Err(wrong_body(self.kind(), &built));
            };
            let api: Api<Job> = Api::namespaced(cx.client.clone(), &record.namespace);
            let keys = LabelKeys::new(&record.label_prefix);
            let created = create_or_adopt(&api, &job, &keys, &record.request_id).await?;
            let name = created.name_any();
            record.set_controller(name.clone());
            record.parallelism = created
                .spec
                .as_ref()
                .and_then(|s| s.parallelism)
                .map(|p| p.max(0) as u32);
            Ok(controller_outcome(name, &record))
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        victims: Victims,
    ) -> BoxFuture<'a, Result<ReleaseResult, K8sError>> {
        let kept = victims.kept.clone();
        let victims = victims.names;
        Box::pin(async move {
            let name = record.controller_of(ProviderApi::Job).ok_or_else(|| {
                K8sError::Refused(format!(
                    "request {} has no Job recorded in its provider data; it was not created by the Job handler",
                    record.request_id
                ))
            })?;
            tracing::info!(
                job = name,
                namespace = %record.namespace,
                requested_ids = ?victims,
                "releasing a Job deletes the whole Job, whatever machine ids were named"
            );
            let others = match kept {
                Some(kept) => kept,
                None => live_pod_names(
                    &request_pods::<k8s_openapi::api::core::v1::Pod>(cx.client, record).await?,
                ),
            };
            delete_job(cx, &record.namespace, name).await?;
            Ok(ReleaseResult {
                also_released: others
                    .into_iter()
                    .filter(|o| !victims.contains(o))
                    .collect(),
                released: victims,
                message: Some(format!("deleted Job {name} with all its pods")),
                ends_request: Some(format!(
                    "the Job {name} was returned: deleting it removed every host of the request"
                )),
                ..ReleaseResult::default()
            })
        })
    }

    fn controller_state<'a>(
        &'a self,
        cx: &'a HandlerCx<'a>,
        record: &'a RequestRecord,
        requested: u32,
    ) -> BoxFuture<'a, Result<Option<ControllerState>, K8sError>> {
        Box::pin(cached_controller_state::<Job>(
            cx, record, requested, job_state,
        ))
    }
}
