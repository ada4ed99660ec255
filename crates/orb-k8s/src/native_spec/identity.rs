//! Stamping orb's identity onto a merged native body. This runs last, so nothing the operator
//! writes can remove or fake it: apiVersion/kind, name and namespace, orb's labels (reserved
//! keys the operator set are dropped first), the controller selector and the replica count.
//!
//! Before stamping, the typed builders' invariants are checked on the merged body: the pods'
//! `restartPolicy`, and for a Job `parallelism = completions = count` and `backoffLimit 0`.
//! A body (operator spec or default override) that sets one of them to anything else is
//! refused with the field's path; one that leaves it out gets the typed value.

use std::collections::BTreeMap;

use orb_core::ProviderApi;
use serde_json::{Map, Value, json};

use super::NativeSpecError;
use super::context::WorkloadIdentity;
use super::source::kind_name;

/// `(apiVersion, kind)` orb creates for each API.
pub fn api_version_and_kind(api: ProviderApi) -> (&'static str, &'static str) {
    match api {
        ProviderApi::Pod => ("v1", "Pod"),
        ProviderApi::Deployment => ("apps/v1", "Deployment"),
        ProviderApi::StatefulSet => ("apps/v1", "StatefulSet"),
        ProviderApi::Job => ("batch/v1", "Job"),
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
    api: ProviderApi,
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

/// Why a body must keep a field at orb's value.
const RESTART_WHY: &str = "the handlers rely on it (a bare Pod restarts only as its template \
     says, a Job's pods never restart because orb owns retries, controllers always restart)";
const JOB_SIZE_WHY: &str = "a Job request makes exactly one pod per requested machine";
const BACKOFF_WHY: &str = "orb owns retries at the request level; the Job controller must not \
     restart failed pods";

fn check_field(
    parent: &Map<String, Value>,
    key: &str,
    path: &str,
    expected: &Value,
    why: &'static str,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(found) if found == expected => Ok(()),
        Some(found) => Err(NativeSpecError::Invariant(Box::new(
            super::InvariantBreach {
                template_id: template_id.to_string(),
                api: identity.api,
                path: path.to_string(),
                found: found.to_string(),
                expected: expected.to_string(),
                why,
            },
        ))),
    }
}

/// Refuses a merged body that changes one of the typed builders' invariants (see the module
/// docs). Shapes are not checked here: [`stamp_identity`] reports a wrong shape.
pub fn check_invariants(
    body: &Value,
    identity: &WorkloadIdentity,
    template_id: &str,
) -> Result<(), NativeSpecError> {
    let (spec_path, pod_spec) = match identity.api {
        ProviderApi::Pod => ("spec", body.get("spec")),
        _ => ("spec.template.spec", body.pointer("/spec/template/spec")),
    };
    if let Some(Value::Object(pod_spec)) = pod_spec {
        check_field(
            pod_spec,
            "restartPolicy",
            &format!("{spec_path}.restartPolicy"),
            &json!(identity.restart_policy),
            RESTART_WHY,
            identity,
            template_id,
        )?;
    }
    if identity.api == ProviderApi::Job
        && let Some(Value::Object(spec)) = body.get("spec")
    {
        for key in ["parallelism", "completions"] {
            check_field(
                spec,
                key,
                &format!("spec.{key}"),
                &json!(identity.replicas),
                JOB_SIZE_WHY,
                identity,
                template_id,
            )?;
        }
        check_field(
            spec,
            "backoffLimit",
            "spec.backoffLimit",
            &json!(0),
            BACKOFF_WHY,
            identity,
            template_id,
        )?;
    }
    Ok(())
}

/// Stamps `identity` onto `body` (the merged default + operator object), after
/// [`check_invariants`].
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
    if api == ProviderApi::Pod {
        let spec = object_at(root, "spec", "spec", template_id)?;
        spec.insert("restartPolicy".into(), json!(identity.restart_policy));
        return Ok(());
    }

    let spec = object_at(root, "spec", "spec", template_id)?;
    match api {
        ProviderApi::Deployment | ProviderApi::StatefulSet => {
            spec.insert("replicas".into(), json!(identity.replicas));
            if let Some(selector) = &identity.selector {
                spec.insert("selector".into(), json!({ "matchLabels": selector }));
            }
        }
        ProviderApi::Job => {
            spec.insert("parallelism".into(), json!(identity.replicas));
            spec.insert("completions".into(), json!(identity.replicas));
            spec.insert("backoffLimit".into(), json!(0));
            // The apiserver then generates a selector unique to this Job; an operator's
            // selector could adopt pods that are not this request's.
            spec.remove("selector");
            spec.remove("manualSelector");
        }
        ProviderApi::Pod => {}
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
    )?;
    let pod_spec = object_at(pod_template, "spec", "spec.template.spec", template_id)?;
    pod_spec.insert("restartPolicy".into(), json!(identity.restart_policy));
    Ok(())
}
