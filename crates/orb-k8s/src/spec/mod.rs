//! Spec builders: a template, the effective provider config and a request become the typed
//! Kubernetes objects one handler creates. Pure: nothing here talks to the apiserver, so every
//! rule (defaults, labels, restart policy, naming) is tested on the built objects.
//!
//! The shared pod template ([`build_pod_template`]) is the one place template fields become a
//! pod; the four kinds only wrap it ([`workloads`]).

pub mod final_body;
mod pod_fields;
pub mod workloads;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_parity;
#[cfg(test)]
mod tests_profile;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use orb_core::ProviderApi;
use orb_core::template::{RestartPolicy, Template};

use crate::config::{K8sProviderConfig, PodPlacement, apply_pod_defaults};
use crate::labels::{
    LabelError, OrbLabelValues, merge_labels, orb_labels, validate_template_labels,
};
use crate::naming::NamingError;

pub use final_body::{BodyPath, FinalBodyError, FinalBodyRequest, FinalWorkload, final_workload};
pub use workloads::{
    BuiltWorkload, build_deployment, build_headless_service, build_job, build_pods,
    build_statefulset, build_workload,
};

/// Name of the one container orb puts in every pod.
pub const CONTAINER_NAME: &str = "orb";

/// Everything a builder needs about one request.
#[derive(Debug, Clone, Copy)]
pub struct SpecInputs<'a> {
    pub template: &'a Template,
    /// The effective config for this template (provider config with the template's overrides).
    pub config: &'a K8sProviderConfig,
    pub request_id: &'a str,
    /// Target namespace, already checked against the provider's namespace scope.
    pub namespace: &'a str,
    /// Machines requested (pods for Pod, replicas, or Job completions).
    pub count: u32,
}

/// Why a template cannot become a Kubernetes object. Nothing is created when this happens.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "template {template_id:?} has no container image; set imageId (container_image) to an \
         image such as busybox:1.36"
    )]
    MissingImage { template_id: String },
    #[error(
        "template {template_id:?} asks for restartPolicy {asked:?}, but {kind} pods must use \
         {required:?}; {fix}"
    )]
    RestartPolicy {
        template_id: String,
        kind: ProviderApi,
        asked: String,
        required: &'static str,
        fix: &'static str,
    },
    #[error("template {template_id:?}: {field} is not a valid Kubernetes value: {error}; {fix}")]
    InvalidField {
        template_id: String,
        field: String,
        error: String,
        fix: String,
    },
    #[error("template {template_id:?}: {error}")]
    Label {
        template_id: String,
        error: LabelError,
    },
    #[error(transparent)]
    Naming(#[from] NamingError),
    #[error(transparent)]
    Native(#[from] crate::native_spec::NativeSpecError),
    #[error("a {kind} request of {count} machines cannot be built: {why}")]
    Count {
        kind: ProviderApi,
        count: u32,
        why: &'static str,
    },
    #[error(
        "template {template_id:?} sets {field}={value}, but a Job request makes exactly one \
         pod per requested machine ({count} here); remove {field} from the template"
    )]
    JobShape {
        template_id: String,
        field: &'static str,
        value: u32,
        count: u32,
    },
}

/// Most bare pods one request may create: each is its own object and create call.
pub const MAX_PODS_PER_REQUEST: u32 = 100_000;

/// Refuses counts no body can be built for, before anything is built: zero, more bare pods
/// than [`MAX_PODS_PER_REQUEST`], or more replicas than a controller's int32 field holds.
pub fn check_count(kind: ProviderApi, count: u32) -> Result<(), SpecError> {
    let why = match kind {
        _ if count == 0 => "ask for at least one machine",
        ProviderApi::Pod if count > MAX_PODS_PER_REQUEST => {
            "one Pod request creates at most 100000 bare pods; split it, or use a Deployment"
        }
        _ if i32::try_from(count).is_err() => {
            "replicas is a 32-bit field, so at most 2147483647 machines fit one request"
        }
        _ => return Ok(()),
    };
    Err(SpecError::Count { kind, count, why })
}

/// The restart policy a kind's pods get, or a refusal naming what to change.
pub fn restart_policy_for(
    template: &Template,
    kind: ProviderApi,
) -> Result<&'static str, SpecError> {
    let asked = template.restart_policy;
    let name = |p: RestartPolicy| match p {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never => "Never",
    };
    let refuse = |required: &'static str, fix: &'static str| {
        Err(SpecError::RestartPolicy {
            template_id: template.template_id.clone(),
            kind,
            asked: asked.map(name).unwrap_or_default().to_string(),
            required,
            fix,
        })
    };
    match (kind, asked) {
        (ProviderApi::Pod, None) => Ok("Never"),
        (ProviderApi::Pod, Some(p)) => Ok(name(p)),
        (ProviderApi::Job, None | Some(RestartPolicy::Never)) => Ok("Never"),
        (ProviderApi::Job, Some(_)) => refuse(
            "Never",
            "orb owns retries (backoffLimit 0), so remove restartPolicy or set it to Never",
        ),
        (
            ProviderApi::Deployment | ProviderApi::StatefulSet,
            None | Some(RestartPolicy::Always),
        ) => Ok("Always"),
        (ProviderApi::Deployment | ProviderApi::StatefulSet, Some(_)) => refuse(
            "Always",
            "controllers always restart their pods; remove restartPolicy, or use providerApi Pod or Job",
        ),
    }
}

/// orb's labels merged over the template's `instanceTags` and `labels` (orb's keys win).
pub fn object_labels(
    inputs: &SpecInputs<'_>,
    kind: ProviderApi,
    machine_id: Option<&str>,
) -> Result<BTreeMap<String, String>, SpecError> {
    let template = inputs.template;
    let label_error = |error| SpecError::Label {
        template_id: template.template_id.clone(),
        error,
    };
    let mut wanted = template.tags.clone();
    wanted.extend(template.labels.clone());
    if let Some(error) = validate_template_labels(&wanted).into_iter().next() {
        return Err(label_error(error));
    }
    let orb = orb_labels(
        &inputs.config.label_prefix,
        inputs.config.emit_legacy_labels,
        &OrbLabelValues {
            request_id: inputs.request_id,
            machine_id,
            provider_api: kind,
            template_id: Some(&template.template_id),
        },
    )
    .map_err(label_error)?;
    Ok(merge_labels(&inputs.config.label_prefix, &wanted, &orb).labels)
}

/// The pod template every kind shares: one `orb` container, the template's pod fields with
/// provider defaults applied, and `labels` (already merged) on its metadata. A template's
/// `native_spec`/`native_spec_path` is not read here: [`final_workload`] decides whether the
/// native path builds the request instead, and says so when a switch leaves it ignored.
pub fn build_pod_template(
    inputs: &SpecInputs<'_>,
    kind: ProviderApi,
    labels: BTreeMap<String, String>,
) -> Result<PodTemplateSpec, SpecError> {
    let template = inputs.template;
    let container = pod_fields::container(template)?;
    let placement = apply_pod_defaults(
        inputs.config,
        &PodPlacement {
            node_selector: template.node_selector.clone(),
            tolerations: pod_fields::tolerations(template)?,
            image_pull_secrets: template.image_pull_secrets.clone(),
        },
    );
    let spec = PodSpec {
        containers: vec![container],
        restart_policy: Some(restart_policy_for(template, kind)?.to_string()),
        node_selector: placement.node_selector.clone().filter(|m| !m.is_empty()),
        tolerations: placement.tolerations.clone().filter(|t| !t.is_empty()),
        image_pull_secrets: placement.image_pull_secret_refs().filter(|s| !s.is_empty()),
        service_account_name: template
            .service_account
            .clone()
            .or_else(|| template.machine_role.clone()),
        runtime_class_name: template.runtime_class.clone(),
        priority_class_name: template.priority_class_name.clone(),
        termination_grace_period_seconds: template.termination_grace_period_seconds,
        volumes: pod_fields::parse_list(template, "volumes", template.volumes.as_ref())?,
        security_context: pod_fields::parse_one(
            template,
            "securityContext",
            template.security_context.as_ref(),
        )?,
        ..PodSpec::default()
    };
    let spec = match &template.pod_spec_override {
        None | Some(serde_json::Value::Null) => spec,
        Some(overlay) => override_pod_spec(template, kind, spec, overlay)?,
    };
    let annotations = (!template.annotations.is_empty()).then(|| template.annotations.clone());
    Ok(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations,
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    })
}

/// `pod_spec_override` deep-merged onto the built pod spec (containers merge by name, so
/// orb's container stays; `restartPolicy` cannot change).
fn override_pod_spec(
    template: &Template,
    kind: ProviderApi,
    spec: PodSpec,
    overlay: &serde_json::Value,
) -> Result<PodSpec, SpecError> {
    let invalid = |error: String| SpecError::InvalidField {
        template_id: template.template_id.clone(),
        field: "podSpecOverride".into(),
        error,
        fix: "write it as a partial Kubernetes pod spec (camelCase keys)".into(),
    };
    let built = serde_json::to_value(&spec).map_err(|e| invalid(e.to_string()))?;
    let merged = crate::native_spec::apply_pod_spec_override(kind, &built, overlay)
        .map_err(|e| invalid(e.to_string()))?;
    let spec: PodSpec =
        serde_json::from_value(merged.clone()).map_err(|e| invalid(e.to_string()))?;
    // The Kubernetes type drops fields it does not know; a misspelt or snake_case hardening
    // setting would vanish without a word, so any such field refuses the template.
    let kept = serde_json::to_value(&spec).map_err(|e| invalid(e.to_string()))?;
    let mut unknown = Vec::new();
    final_body::unknown_fields(&merged, &kept, "", &mut unknown);
    if !unknown.is_empty() {
        let snake = unknown.iter().any(|path| {
            path.rsplit('.')
                .next()
                .is_some_and(|leaf| leaf.contains('_'))
        });
        return Err(SpecError::InvalidField {
            template_id: template.template_id.clone(),
            field: format!("podSpecOverride {}", unknown.join(", ")),
            error: format!(
                "{} not {} of a Kubernetes pod spec and would be dropped",
                if unknown.len() == 1 { "is" } else { "are" },
                if unknown.len() == 1 {
                    "a field"
                } else {
                    "fields"
                }
            ),
            fix: if snake {
                "write nested fields in camelCase as the Kubernetes API does (only top-level \
                 keys are converted from snake_case), and check the spelling"
                    .into()
            } else {
                "check the spelling against the Kubernetes PodSpec reference, or remove it".into()
            },
        });
    }
    Ok(spec)
}
