//! The standard context every native-spec source is rendered against (documented in
//! docs/native-spec.md). Every variable is always present (`none` when the template leaves
//! it unset), so strict undefined-variable checking only catches real typos.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use orb_core::ProviderApi;
use orb_core::template::{ResourceSpec, Template};
use serde_json::{Map, Value, json};

use super::{NativeSpecError, NativeSpecInput};
use crate::config::{PodPlacement, apply_pod_defaults};
use crate::labels::{
    LabelKeys, OrbLabelValues, merge_labels, orb_labels, validate_template_labels,
};

/// Name of orb's container in the default templates (and of the typed builder's).
pub const ORB_CONTAINER_NAME: &str = "orb";
/// Used for `gpu_count` when the template names no `gpu_type`.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// orb's own labels for the object and, for controllers, its pod template and selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadIdentity {
    pub api: ProviderApi,
    pub name: String,
    pub namespace: String,
    /// orb's labels on the object (for a Pod including `<prefix>/machine-id`).
    pub object_labels: BTreeMap<String, String>,
    /// orb's labels on the pods a controller creates (no machine id).
    pub pod_labels: BTreeMap<String, String>,
    /// `spec.selector.matchLabels` of a Deployment or StatefulSet.
    pub selector: Option<BTreeMap<String, String>>,
    /// Deployment/StatefulSet `replicas`, Job `parallelism` and `completions` (always the
    /// requested count); unused for a Pod.
    pub replicas: u32,
    /// The pods' `restartPolicy`, exactly as the typed builder sets it.
    pub restart_policy: &'static str,
    /// Label keys no template may set (see [`LabelKeys::reserved`]).
    pub reserved_label_keys: Vec<String>,
    /// A StatefulSet's `volumeClaimTemplates` from the template's typed field, kept when the
    /// native body sets none (its pods' volumeMounts name them).
    pub volume_claim_templates: Option<Value>,
    /// The pods' ServiceAccount, as the typed builder sets it: the template's
    /// `service_account`, else its `machine_role`.
    pub service_account: Option<String>,
}

pub fn workload_identity(
    api: ProviderApi,
    input: &NativeSpecInput<'_>,
) -> Result<WorkloadIdentity, NativeSpecError> {
    let cfg = input.config;
    let template_id = input.template.template_id.as_str();
    let values = |machine_id| OrbLabelValues {
        request_id: input.request_id,
        machine_id,
        provider_api: api,
        template_id: Some(template_id),
    };
    let label_error = |source| NativeSpecError::Label {
        template_id: template_id.to_string(),
        source: Box::new(source),
    };
    let machine_id = (api == ProviderApi::Pod).then_some(input.name);
    let object_labels = orb_labels(
        &cfg.label_prefix,
        cfg.emit_legacy_labels,
        &values(machine_id),
    )
    .map_err(label_error)?;
    let pod_labels = orb_labels(&cfg.label_prefix, cfg.emit_legacy_labels, &values(None))
        .map_err(label_error)?;
    let keys = LabelKeys::new(&cfg.label_prefix);
    let selector = matches!(api, ProviderApi::Deployment | ProviderApi::StatefulSet)
        .then(|| keys.controller_selector(input.request_id, api));
    Ok(WorkloadIdentity {
        api,
        name: input.name.to_string(),
        namespace: input.namespace.to_string(),
        object_labels,
        pod_labels,
        selector,
        // Seed 000: a Job runs parallelism = completions = the requested count, never the
        // template's numbers (orb-core refuses templates that set them).
        replicas: input.count,
        restart_policy: restart_policy(api, input.template)?,
        reserved_label_keys: keys.reserved().to_vec(),
        volume_claim_templates: (api == ProviderApi::StatefulSet)
            .then(|| crate::spec::workloads::template_volume_claim_templates(input.template))
            .flatten()
            .cloned(),
        service_account: input
            .template
            .service_account
            .clone()
            .or_else(|| input.template.machine_role.clone()),
    })
}

fn resource_map(spec: Option<&ResourceSpec>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(spec) = spec else { return out };
    for (key, value) in [
        ("cpu", &spec.cpu),
        ("memory", &spec.memory),
        ("ephemeral-storage", &spec.ephemeral_storage),
    ] {
        if let Some(v) = value {
            out.insert(key.to_string(), json!(v));
        }
    }
    if let Some(count) = spec.gpu_count {
        let name = spec.gpu_type.as_deref().unwrap_or(DEFAULT_GPU_RESOURCE);
        out.insert(name.to_string(), json!(count.to_string()));
    }
    out
}

fn resources(template: &Template) -> Value {
    let mut out = Map::new();
    for (key, spec) in [
        ("requests", template.resource_requests.as_ref()),
        ("limits", template.resource_limits.as_ref()),
    ] {
        let map = resource_map(spec);
        if !map.is_empty() {
            out.insert(key.to_string(), Value::Object(map));
        }
    }
    Value::Object(out)
}

/// The typed builder's restart policy (the same function), so both paths agree: a Pod the
/// template's (Never by default), a Job Never, a controller Always.
fn restart_policy(api: ProviderApi, template: &Template) -> Result<&'static str, NativeSpecError> {
    crate::spec::restart_policy_for(template, api).map_err(|e| {
        NativeSpecError::InvalidTemplateField {
            template_id: template.template_id.clone(),
            field: "restart_policy",
            message: e.to_string(),
        }
    })
}

fn placement(input: &NativeSpecInput<'_>) -> Result<PodPlacement, NativeSpecError> {
    let template = input.template;
    let tolerations = template
        .tolerations
        .clone()
        .map(|list| serde_json::from_value::<Vec<Toleration>>(Value::Array(list)))
        .transpose()
        .map_err(|e| NativeSpecError::InvalidTemplateField {
            template_id: template.template_id.clone(),
            field: "tolerations",
            message: format!(
                "{e}; write Kubernetes tolerations such as {{\"key\": \"k\", \"operator\": \
                 \"Exists\", \"effect\": \"NoSchedule\"}}"
            ),
        })?;
    Ok(apply_pod_defaults(
        input.config,
        &PodPlacement {
            node_selector: template.node_selector.clone(),
            tolerations,
            image_pull_secrets: template.image_pull_secrets.clone(),
        },
    ))
}

fn to_json<T: serde::Serialize>(value: T) -> Value {
    // Serializing plain data (maps, strings, k8s-openapi types) into a Value cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Builds the context for one object. `identity` gives the names and labels orb stamps.
pub fn build_context(
    input: &NativeSpecInput<'_>,
    identity: &WorkloadIdentity,
) -> Result<Value, NativeSpecError> {
    let t = input.template;
    let api = identity.api;
    let mut template_labels = t.tags.clone();
    template_labels.extend(t.labels.clone());
    if let Some(error) = validate_template_labels(&template_labels)
        .into_iter()
        .next()
    {
        return Err(NativeSpecError::Label {
            template_id: t.template_id.clone(),
            source: Box::new(error),
        });
    }
    let labels = merge_labels(
        &input.config.label_prefix,
        &template_labels,
        &identity.object_labels,
    )
    .labels;
    let pod_labels = merge_labels(
        &input.config.label_prefix,
        &template_labels,
        &identity.pod_labels,
    )
    .labels;
    let placement = placement(input)?;
    let job_size = (api == ProviderApi::Job).then_some(identity.replicas);
    let service_name = match api {
        ProviderApi::StatefulSet => Some(t.service_name.clone().unwrap_or(identity.name.clone())),
        _ => t.service_name.clone(),
    };
    let service_account = identity.service_account.clone();
    let pull_secret_refs = placement.image_pull_secret_refs();
    let first_pull_secret = placement
        .image_pull_secrets
        .as_ref()
        .and_then(|names| names.first().cloned());
    let mut entries: Vec<(&str, Value)> = vec![
        ("name", json!(identity.name)),
        ("resource_name", json!(identity.name)),
        ("namespace", json!(identity.namespace)),
        ("request_id", json!(input.request_id)),
        ("template_id", json!(t.template_id)),
        ("provider_api", json!(api.as_str())),
        ("api", json!(super::defaults::spec_dir_name(api))),
        ("replicas", json!(identity.replicas)),
        ("requested_count", json!(input.count)),
        (
            "machine_id",
            json!((api == ProviderApi::Pod).then_some(&identity.name)),
        ),
        ("label_prefix", json!(input.config.label_prefix)),
        ("labels", json!(labels)),
        ("pod_labels", json!(pod_labels)),
        ("selector", json!(identity.selector)),
        ("annotations", json!(t.annotations)),
        ("image", json!(t.container_image)),
        ("container_name", json!(ORB_CONTAINER_NAME)),
        ("command", json!(t.command)),
        ("args", json!(t.args)),
        ("env", json!(t.environment_variables)),
        ("resources", json!(resources(t))),
        // The reference broker's names for the same data, so its specs render unchanged.
        (
            "resource_requests",
            json!(resource_map(t.resource_requests.as_ref())),
        ),
        (
            "resource_limits",
            json!(resource_map(t.resource_limits.as_ref())),
        ),
        ("image_pull_secret", json!(first_pull_secret)),
        ("volume_mounts", json!(t.volume_mounts)),
        ("volumes", json!(t.volumes)),
        ("readiness_probe", json!(t.readiness_probe)),
        ("liveness_probe", json!(t.liveness_probe)),
        ("node_selector", json!(placement.node_selector)),
        ("tolerations", json!(to_json(&placement.tolerations))),
        ("image_pull_secrets", json!(to_json(pull_secret_refs))),
        ("service_account", json!(service_account)),
        ("runtime_class", json!(t.runtime_class)),
        ("priority_class_name", json!(t.priority_class_name)),
        (
            "termination_grace_period_seconds",
            json!(t.termination_grace_period_seconds),
        ),
        ("security_context", json!(t.security_context)),
        ("hostname", json!(t.hostname)),
        ("subdomain", json!(t.subdomain)),
        ("restart_policy", json!(identity.restart_policy)),
        ("service_name", json!(service_name)),
        ("completions", json!(job_size)),
        ("parallelism", json!(job_size)),
        (
            "ttl_seconds_after_finished",
            json!(t.ttl_seconds_after_finished),
        ),
        ("active_deadline_seconds", json!(t.active_deadline_seconds)),
        ("template", json!(to_json(t))),
        ("orb_version", json!(env!("CARGO_PKG_VERSION"))),
        ("package_name", json!("orb")),
        ("package_version", json!(env!("CARGO_PKG_VERSION"))),
    ];
    // `has_<name>` for every optional value, as the reference broker's templates test them:
    // true when the value is set and not empty.
    let flags: Vec<(String, Value)> = entries
        .iter()
        .filter(|(name, _)| HAS_FLAGS.contains(name))
        .map(|(name, value)| (format!("has_{name}"), json!(is_set(value))))
        .collect();
    let mut context: Map<String, Value> =
        entries.drain(..).map(|(k, v)| (k.to_string(), v)).collect();
    context.extend(flags);
    Ok(Value::Object(context))
}

/// The optional context values that get a `has_<name>` flag.
pub const HAS_FLAGS: &[&str] = &[
    "annotations",
    "image",
    "command",
    "args",
    "env",
    "resources",
    "resource_requests",
    "resource_limits",
    "volume_mounts",
    "volumes",
    "readiness_probe",
    "liveness_probe",
    "node_selector",
    "tolerations",
    "image_pull_secret",
    "image_pull_secrets",
    "service_account",
    "runtime_class",
    "priority_class_name",
    "termination_grace_period_seconds",
    "security_context",
    "hostname",
    "subdomain",
    "ttl_seconds_after_finished",
    "active_deadline_seconds",
];

fn is_set(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(fields) => !fields.is_empty(),
        Value::Bool(_) | Value::Number(_) => true,
    }
}
