//! The four kinds around the shared pod template: N bare Pods, one Deployment, one
//! StatefulSet with its headless Service, or one Job.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use orb_core::ProviderApi;
use orb_core::template::Template;
use serde_json::Value;

use super::{SpecError, SpecInputs, build_pod_template, object_labels, pod_fields};
use crate::labels::LabelKeys;
use crate::naming::{ControllerKind, controller_name, pod_names};

/// The objects one acquire creates, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub enum BuiltWorkload {
    Pods(Vec<Pod>),
    Deployment(Box<Deployment>),
    /// The set, and the headless Service that gives its pods DNS names.
    StatefulSet(Box<StatefulSet>, Box<Service>),
    Job(Box<Job>),
}

impl BuiltWorkload {
    pub fn kind(&self) -> ProviderApi {
        match self {
            Self::Pods(_) => ProviderApi::Pod,
            Self::Deployment(_) => ProviderApi::Deployment,
            Self::StatefulSet(..) => ProviderApi::StatefulSet,
            Self::Job(_) => ProviderApi::Job,
        }
    }
}

/// Builds the objects for `kind` (the template's `provider_api`).
pub fn build_workload(
    inputs: &SpecInputs<'_>,
    kind: ProviderApi,
) -> Result<BuiltWorkload, SpecError> {
    Ok(match kind {
        ProviderApi::Pod => BuiltWorkload::Pods(build_pods(inputs)?),
        ProviderApi::Deployment => BuiltWorkload::Deployment(Box::new(build_deployment(inputs)?)),
        ProviderApi::StatefulSet => {
            let set = build_statefulset(inputs)?;
            let service = build_headless_service(inputs, &set)?;
            BuiltWorkload::StatefulSet(Box::new(set), Box::new(service))
        }
        ProviderApi::Job => BuiltWorkload::Job(Box::new(build_job(inputs)?)),
    })
}

fn meta(inputs: &SpecInputs<'_>, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(inputs.namespace.to_string()),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

fn replicas(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// `count` bare pods `<prefix>-<uuid_segment>-<seq:04d>`, each labelled with its machine id.
pub fn build_pods(inputs: &SpecInputs<'_>) -> Result<Vec<Pod>, SpecError> {
    let names = pod_names(&inputs.config.naming, inputs.request_id, inputs.count)?;
    names
        .iter()
        .map(|name| {
            let labels = object_labels(inputs, ProviderApi::Pod, Some(name))?;
            let template = build_pod_template(inputs, ProviderApi::Pod, labels.clone())?;
            let pod_meta = template.metadata.unwrap_or_default();
            Ok(Pod {
                metadata: ObjectMeta {
                    annotations: pod_meta.annotations,
                    ..meta(inputs, name, labels)
                },
                spec: template.spec.map(|mut spec| {
                    spec.hostname = inputs.template.hostname.clone();
                    spec.subdomain = inputs.template.subdomain.clone();
                    spec
                }),
                status: None,
            })
        })
        .collect()
}

fn selector(inputs: &SpecInputs<'_>, kind: ProviderApi) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            LabelKeys::new(&inputs.config.label_prefix)
                .controller_selector(inputs.request_id, kind),
        ),
        ..LabelSelector::default()
    }
}

/// One Deployment with `replicas = count`.
pub fn build_deployment(inputs: &SpecInputs<'_>) -> Result<Deployment, SpecError> {
    let kind = ProviderApi::Deployment;
    let name = controller_name(
        &inputs.config.naming,
        ControllerKind::Deployment,
        inputs.request_id,
    )?;
    let labels = object_labels(inputs, kind, None)?;
    Ok(Deployment {
        metadata: meta(inputs, &name, labels.clone()),
        spec: DeploymentSpec {
            replicas: Some(replicas(inputs.count)),
            selector: selector(inputs, kind),
            template: build_pod_template(inputs, kind, labels)?,
            ..DeploymentSpec::default()
        },
        status: None,
    })
}

/// The template's `volumeClaimTemplates` (or `volume_claim_templates`) as written: the typed
/// StatefulSet parses them, a native one keeps them unless its own spec sets the field.
pub fn template_volume_claim_templates(template: &Template) -> Option<&Value> {
    let extra = &template.extra;
    extra
        .get("volumeClaimTemplates")
        .or_else(|| extra.get("volume_claim_templates"))
        .filter(|v| !v.is_null())
}

fn volume_claim_templates(
    inputs: &SpecInputs<'_>,
) -> Result<Option<Vec<PersistentVolumeClaim>>, SpecError> {
    match template_volume_claim_templates(inputs.template) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => {
            pod_fields::parse_list(inputs.template, "volumeClaimTemplates", Some(items))
        }
        Some(other) => Err(SpecError::InvalidField {
            template_id: inputs.template.template_id.clone(),
            field: "volumeClaimTemplates".into(),
            error: format!("expected a list of PersistentVolumeClaim objects, got {other}"),
            fix: "write it as a JSON list, as in a StatefulSet manifest".into(),
        }),
    }
}

/// The name of the governing Service: the template's `serviceName`, else the set's own name.
pub fn statefulset_service_name(inputs: &SpecInputs<'_>, set_name: &str) -> String {
    inputs
        .template
        .service_name
        .clone()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| set_name.to_string())
}

/// One StatefulSet with `replicas = count`. Pods start in parallel (a grid host does not wait
/// for its neighbours); scale-down still removes the highest ordinals first.
pub fn build_statefulset(inputs: &SpecInputs<'_>) -> Result<StatefulSet, SpecError> {
    let kind = ProviderApi::StatefulSet;
    let name = controller_name(
        &inputs.config.naming,
        ControllerKind::StatefulSet,
        inputs.request_id,
    )?;
    let labels = object_labels(inputs, kind, None)?;
    Ok(StatefulSet {
        metadata: meta(inputs, &name, labels.clone()),
        spec: StatefulSetSpec {
            replicas: Some(replicas(inputs.count)),
            selector: selector(inputs, kind),
            service_name: Some(statefulset_service_name(inputs, &name)),
            pod_management_policy: Some("Parallel".into()),
            template: build_pod_template(inputs, kind, labels)?,
            volume_claim_templates: volume_claim_templates(inputs)?,
            ..StatefulSetSpec::default()
        },
        status: None,
    })
}

/// The headless Service a StatefulSet's `serviceName` points at (created when missing).
pub fn build_headless_service(
    inputs: &SpecInputs<'_>,
    set: &StatefulSet,
) -> Result<Service, SpecError> {
    let kind = ProviderApi::StatefulSet;
    let service_name = set.spec.service_name.clone().unwrap_or_default();
    let labels = object_labels(inputs, kind, None)?;
    Ok(Service {
        metadata: meta(inputs, &service_name, labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: selector(inputs, kind).match_labels,
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// One Job: `parallelism = completions = count`, `backoffLimit = 0`, pods `restartPolicy:
/// Never`. orb decides about retries at the request level, never the Job controller.
pub fn build_job(inputs: &SpecInputs<'_>) -> Result<Job, SpecError> {
    let kind = ProviderApi::Job;
    let template = inputs.template;
    for (field, value) in [
        ("completions", template.completions),
        ("parallelism", template.parallelism),
    ] {
        // orb-core's template check refuses these fields up front; this guards any caller
        // that skipped it, so no Job is ever sized by the template.
        if let Some(value) = value {
            return Err(SpecError::JobShape {
                template_id: template.template_id.clone(),
                field,
                value,
                count: inputs.count,
            });
        }
    }
    let name = controller_name(
        &inputs.config.naming,
        ControllerKind::Job,
        inputs.request_id,
    )?;
    let labels = object_labels(inputs, kind, None)?;
    Ok(Job {
        metadata: meta(inputs, &name, labels.clone()),
        spec: Some(JobSpec {
            parallelism: Some(replicas(inputs.count)),
            completions: Some(replicas(inputs.count)),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: template
                .ttl_seconds_after_finished
                .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
            active_deadline_seconds: template.active_deadline_seconds,
            template: build_pod_template(inputs, kind, labels)?,
            ..JobSpec::default()
        }),
        status: None,
    })
}
