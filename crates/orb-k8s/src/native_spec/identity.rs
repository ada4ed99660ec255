//! Stamping orb's identity onto a merged native body. This runs last, so nothing the operator
//! writes can remove or fake it: apiVersion/kind, name and namespace, orb's labels (reserved
//! keys the operator set are dropped first), the controller selector and the replica count.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::NativeSpecError;
use super::context::WorkloadIdentity;
use super::source::kind_name;
use crate::naming::ResourceKind;

/// `(apiVersion, kind)` orb creates for each API.
pub fn api_version_and_kind(api: ResourceKind) -> (&'static str, &'static str) {
    match api {
        ResourceKind::Pod => ("v1", "Pod"),
        ResourceKind::Deployment => ("apps/v1", "Deployment"),
        ResourceKind::StatefulSet => ("apps/v1", "StatefulSet"),
        ResourceKind::Job => ("batch/v1", "Job"),
    }
}

fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
    template_id: &str,
) -> Result<&'a mut Map<String, Value>, NativeSpecError> {
    let slot = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    let found = kind_name(slot);
    slot.as_object_mut()
        .ok_or_else(|| NativeSpecError::WrongShape {
            template_id: template_id.to_string(),
            path: path.to_string(),
            found,
        })
}

fn stamp_labels(
    metadata: &mut Map<String, Value>,
    path: &str,
    orb: &BTreeMap<String, String>,
    reserved: &[String],
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let labels = object_at(metadata, "labels", path, template_id)?;
    labels.retain(|key, _| !reserved.contains(key));
    for (key, value) in orb {
        labels.insert(key.clone(), json!(value));
    }
    Ok(())
}

fn check_type_field(
    body: &Map<String, Value>,
    field: &str,
    expected: &str,
    api: ResourceKind,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(found)) if found == expected => Ok(()),
        Some(found) => Err(NativeSpecError::WrongKind {
            template_id: template_id.to_string(),
            api,
            field: field.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        }),
    }
}

/// Stamps `identity` onto `body` (the merged default + operator object).
pub fn stamp_identity(
    body: &mut Value,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let api = identity.api;
    let (api_version, kind) = api_version_and_kind(api);
    let found = kind_name(body);
    let root = body
        .as_object_mut()
        .ok_or_else(|| NativeSpecError::WrongShape {
            template_id: template_id.to_string(),
            path: "(the body)".into(),
            found,
        })?;
    check_type_field(root, "apiVersion", api_version, api, template_id)?;
    check_type_field(root, "kind", kind, api, template_id)?;
    root.insert("apiVersion".into(), json!(api_version));
    root.insert("kind".into(), json!(kind));

    let reserved = &identity.reserved_label_keys;
    let metadata = object_at(root, "metadata", "metadata", template_id)?;
    metadata.insert("name".into(), json!(identity.name));
    metadata.remove("generateName");
    metadata.insert("namespace".into(), json!(identity.namespace));
    stamp_labels(
        metadata,
        "metadata.labels",
        &identity.object_labels,
        reserved,
        template_id,
    )?;
    if api == ResourceKind::Pod {
        return Ok(());
    }

    let spec = object_at(root, "spec", "spec", template_id)?;
    match api {
        ResourceKind::Deployment | ResourceKind::StatefulSet => {
            spec.insert("replicas".into(), json!(identity.replicas));
            if let Some(selector) = &identity.selector {
                spec.insert("selector".into(), json!({ "matchLabels": selector }));
            }
        }
        ResourceKind::Job => {
            spec.insert("parallelism".into(), json!(identity.replicas));
            // The apiserver then generates a selector unique to this Job; an operator's
            // selector could adopt pods that are not this request's.
            spec.remove("selector");
            spec.remove("manualSelector");
        }
        ResourceKind::Pod => {}
    }
    let pod_template = object_at(spec, "template", "spec.template", template_id)?;
    let pod_metadata = object_at(
        pod_template,
        "metadata",
        "spec.template.metadata",
        template_id,
    )?;
    stamp_labels(
        pod_metadata,
        "spec.template.metadata.labels",
        &identity.pod_labels,
        reserved,
        template_id,
    )
}
