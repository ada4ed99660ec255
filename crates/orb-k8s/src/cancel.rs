//! Cancel (delete everything labelled with the request id, whatever its kind) and reclaims
//! (hosts the cluster removed or is removing on its own).

use std::collections::BTreeMap;
use std::fmt::Debug;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, Resource, ResourceExt};
use orb_core::machine::MachineStatus;
use orb_core::provider::{CancelInput, CancelOutcome, MachineFailure, ReclaimNotice, ReclaimQuery};
use serde::de::DeserializeOwned;

use crate::error::{K8sError, is_not_found};
use crate::labels::LabelKeys;
use crate::pod_read::PodRead;
use crate::provider::K8sProvider;
use crate::provider_data::RequestRecord;

/// Seconds Kubernetes gives a pod to stop when the spec names none.
const DEFAULT_TERMINATION_GRACE_SECS: u64 = 30;

async fn delete_labelled<K>(
    client: &Client,
    namespace: &str,
    selector: &str,
    outcome: &mut CancelOutcome,
) -> Result<(), K8sError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let kind = K::kind(&()).to_string();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let found = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| K8sError::api(format!("listing {kind}s labelled {selector}"), e))?;
    for object in found.items {
        let name = object.name_any();
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => outcome.deleted.push(name),
            Err(e) if is_not_found(&e) => outcome.already_gone.push(name),
            Err(e) => outcome.failed.push(MachineFailure {
                reason: K8sError::api(format!("deleting {kind} {name}"), e).to_string(),
                machine_id: name,
            }),
        }
    }
    Ok(())
}

impl K8sProvider {
    pub(crate) async fn cancel_inner(&self, input: CancelInput) -> Result<CancelOutcome, K8sError> {
        // Bookkeeping that cannot be read is reported rather than guessed around: the
        // defaults below could name the wrong namespace or label prefix.
        let record = RequestRecord::from_stored(input.request_id.as_str(), &input.provider_data)?;
        // Without bookkeeping, the namespace an acquire of a template without its own
        // namespace would have used: the configured one, else the detected one (the
        // service-account namespace in-cluster), never a hard-coded `default`.
        let namespace = record
            .as_ref()
            .map(|r| r.namespace.clone())
            .unwrap_or_else(|| self.config().default_namespace(self.detected_namespace()));
        let prefix = record
            .as_ref()
            .map(|r| r.label_prefix.clone())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| self.config().label_prefix.clone());
        let selector = LabelKeys::new(&prefix).request_selector(input.request_id.as_str());
        let client = self.client().await?;
        let mut outcome = CancelOutcome::default();
        // Controllers first, so none of them recreates a pod deleted below.
        delete_labelled::<Deployment>(client, &namespace, &selector, &mut outcome).await?;
        delete_labelled::<StatefulSet>(client, &namespace, &selector, &mut outcome).await?;
        delete_labelled::<Job>(client, &namespace, &selector, &mut outcome).await?;
        delete_labelled::<Pod>(client, &namespace, &selector, &mut outcome).await?;
        delete_labelled::<Service>(client, &namespace, &selector, &mut outcome).await?;
        if !outcome.deleted.is_empty() {
            tracing::info!(
                request_id = %input.request_id,
                namespace = %namespace,
                objects = ?outcome.deleted,
                "deleted the objects of a cancelled request"
            );
        }
        Ok(outcome)
    }

    pub(crate) async fn reclaims_inner(
        &self,
        input: ReclaimQuery,
    ) -> Result<Vec<ReclaimNotice>, K8sError> {
        let client = self.client().await?;
        let mut by_request: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for m in input.machines.iter().filter(|m| m.status.is_live()) {
            by_request
                .entry(m.request_id.to_string())
                .or_default()
                .push(m);
        }
        let now = Timestamp::now();
        let mut notices = Vec::new();
        for (request_id, refs) in &by_request {
            // One request's unreadable bookkeeping must not hide the others' reclaims.
            let record =
                match RequestRecord::from_stored(request_id, &refs[0].request_provider_data) {
                    Ok(Some(record)) => record,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(request_id = %request_id, "reclaim check skipped: {e}");
                        continue;
                    }
                };
            let expected =
                orb_core::sorted::SortedNames::new(refs.iter().map(|m| m.machine_id.as_str()));
            let pods = self.live_pods(client, &record, &expected, None).await?;
            // By name, once: a scan per machine is quadratic in one request of thousands.
            let by_name: std::collections::HashMap<&str, _> = pods
                .iter()
                .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
                .collect();
            let kind = record.kind;
            for m in refs {
                let pod = by_name
                    .get(m.machine_id.as_str())
                    .copied()
                    .filter(|p| m.uid.is_none() || p.metadata.uid == m.uid);
                let notice = |grace: u64, reason: String| ReclaimNotice {
                    machine_id: m.machine_id.clone(),
                    name: m.name.clone(),
                    grace_period_secs: grace,
                    reason,
                };
                let Some(pod) = pod else {
                    notices.push(notice(0, "the pod was deleted outside orb".into()));
                    continue;
                };
                if let Some(deleting) = &pod.metadata.deletion_timestamp {
                    let grace = pod
                        .metadata
                        .deletion_grace_period_seconds
                        .unwrap_or(0)
                        .max(0) as u64;
                    let deadline = deleting.0 + jiff::SignedDuration::from_secs(grace as i64);
                    let left = deadline.duration_since(now).as_secs().max(0) as u64;
                    notices.push(notice(left, "the pod is being deleted".into()));
                    continue;
                }
                // A host that failed or exited is as good as taken: HostFactory should give it
                // back (a return then removes its pod, which still holds its place).
                let (status, why) = crate::machine_state::pod_machine_status(pod.as_ref(), kind);
                if matches!(status, MachineStatus::Failed | MachineStatus::Stopped) {
                    notices.push(notice(
                        0,
                        format!("the machine is {status}: {}", why.unwrap_or_default()),
                    ));
                    continue;
                }
                let disruption = pod
                    .conditions()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True");
                let grace = pod
                    .termination_grace_period_seconds()
                    .map(|g| g.max(0) as u64)
                    .unwrap_or(DEFAULT_TERMINATION_GRACE_SECS);
                if let Some(c) = disruption {
                    let reason = format!(
                        "{}: {}",
                        c.reason.unwrap_or("DisruptionTarget"),
                        c.message.unwrap_or("the cluster is removing this pod")
                    );
                    notices.push(notice(grace, reason));
                } else if let Some(node) = self.node_disruption(pod.as_ref()) {
                    // Karpenter announced it will take the node (events watcher of `orb serve`).
                    notices.push(notice(grace, node.describe()));
                }
            }
        }
        Ok(notices)
    }
}
