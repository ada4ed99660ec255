//! Template fields turned into typed pod and container parts. Free-form template values
//! (tolerations, volumes, probes, security context) are parsed into their Kubernetes types
//! here, so a mistake is reported with the field name before anything reaches the apiserver.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, Probe, ResourceRequirements, Toleration, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use orb_core::template::{ResourceSpec, Template};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CONTAINER_NAME, SpecError};

/// Extended resource used for `gpu_count` when the template names no `gpu_type`.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

fn invalid(template: &Template, field: &str, error: impl ToString, fix: &str) -> SpecError {
    SpecError::InvalidField {
        template_id: template.template_id.clone(),
        field: field.to_string(),
        error: error.to_string(),
        fix: fix.to_string(),
    }
}

/// Parses one optional free-form value into its Kubernetes type.
pub(super) fn parse_one<T: DeserializeOwned>(
    template: &Template,
    field: &str,
    value: Option<&Value>,
) -> Result<Option<T>, SpecError> {
    value
        .map(|v| {
            serde_json::from_value(v.clone()).map_err(|e| {
                invalid(
                    template,
                    field,
                    e,
                    "write it as the Kubernetes API documents it (camelCase keys)",
                )
            })
        })
        .transpose()
}

/// Parses a list of free-form values, naming the index of a bad entry.
pub(super) fn parse_list<T: DeserializeOwned>(
    template: &Template,
    field: &str,
    values: Option<&Vec<Value>>,
) -> Result<Option<Vec<T>>, SpecError> {
    let Some(values) = values else {
        return Ok(None);
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v.clone()).map_err(|e| {
                invalid(
                    template,
                    &format!("{field}[{i}]"),
                    e,
                    "write it as the Kubernetes API documents it (camelCase keys)",
                )
            })
        })
        .collect::<Result<Vec<T>, _>>()
        .map(Some)
}

pub(super) fn tolerations(template: &Template) -> Result<Option<Vec<Toleration>>, SpecError> {
    parse_list(template, "tolerations", template.tolerations.as_ref())
}

/// `cpu`, `memory`, `ephemeral-storage` and the GPU count under its extended resource name.
pub fn resource_quantities(spec: &ResourceSpec) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    let text = [
        ("cpu", &spec.cpu),
        ("memory", &spec.memory),
        ("ephemeral-storage", &spec.ephemeral_storage),
    ];
    for (name, value) in text {
        if let Some(value) = value {
            out.insert(name.to_string(), Quantity(value.clone()));
        }
    }
    if let Some(count) = spec.gpu_count {
        let resource = spec.gpu_type.as_deref().unwrap_or(DEFAULT_GPU_RESOURCE);
        out.insert(resource.to_string(), Quantity(count.to_string()));
    }
    out
}

fn resources(template: &Template) -> Option<ResourceRequirements> {
    let requests = template
        .resource_requests
        .as_ref()
        .map(resource_quantities)
        .filter(|m| !m.is_empty());
    let limits = template
        .resource_limits
        .as_ref()
        .map(resource_quantities)
        .filter(|m| !m.is_empty());
    (requests.is_some() || limits.is_some()).then(|| ResourceRequirements {
        requests,
        limits,
        ..ResourceRequirements::default()
    })
}

fn env(template: &Template) -> Result<Option<Vec<EnvVar>>, SpecError> {
    let Some(vars) = &template.environment_variables else {
        return Ok(None);
    };
    vars.iter()
        .map(|var| {
            let value_from: Option<EnvVarSource> = parse_one(
                template,
                &format!("environment_variables.{}.valueFrom", var.name),
                var.value_from.as_ref(),
            )?;
            Ok(EnvVar {
                name: var.name.clone(),
                value: var.value.clone(),
                value_from,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|v| (!v.is_empty()).then_some(v))
}

/// The single `orb` container.
pub(super) fn container(template: &Template) -> Result<Container, SpecError> {
    let image = template
        .container_image
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .ok_or_else(|| SpecError::MissingImage {
            template_id: template.template_id.clone(),
        })?;
    let volume_mounts: Option<Vec<VolumeMount>> =
        parse_list(template, "volumeMounts", template.volume_mounts.as_ref())?;
    let readiness_probe: Option<Probe> = parse_one(
        template,
        "readinessProbe",
        template.readiness_probe.as_ref(),
    )?;
    let liveness_probe: Option<Probe> =
        parse_one(template, "livenessProbe", template.liveness_probe.as_ref())?;
    Ok(Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(image.to_string()),
        command: template.command.clone(),
        args: template.args.clone(),
        env: env(template)?,
        resources: resources(template),
        volume_mounts,
        readiness_probe,
        liveness_probe,
        ..Container::default()
    })
}
