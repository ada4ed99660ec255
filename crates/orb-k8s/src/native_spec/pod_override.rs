//! `pod_spec_override`: a partial pod spec deep-merged onto the pod spec the typed builder
//! produced. Containers, init/ephemeral containers, volumes, env, ports and mounts merge by
//! their key, so overriding one field of orb's container keeps the container (see
//! [`super::merge::list_merge_key`]); other lists are replaced. `restartPolicy` cannot be
//! changed: it is a guard-rail the handlers rely on.

use orb_core::ProviderApi;
use serde_json::{Map, Value};

use super::merge::{ListMerge, deep_merge};
use super::source::kind_name;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodSpecOverrideError {
    #[error(
        "pod_spec_override must be an object holding pod spec fields (e.g. {{\"hostAliases\": \
         [...]}}), got {found}"
    )]
    NotAnObject { found: &'static str },
    #[error(
        "pod_spec_override may not change restartPolicy of a {api} from {built} to {requested}; \
         remove restartPolicy from pod_spec_override{hint}"
    )]
    RestartPolicyChange {
        api: ProviderApi,
        built: String,
        requested: String,
        hint: &'static str,
    },
    #[error(
        "pod_spec_override sets both {snake} and {camel}; keep only {camel} (Kubernetes field \
         names are camelCase)"
    )]
    DuplicateField { snake: String, camel: String },
}

/// `restart_policy` → `restartPolicy`. Pod spec field names never contain '_', so a
/// snake_case top-level key can only mean the camelCase field (the reference accepted both).
fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn camel_case_top_level(
    overlay: Map<String, Value>,
) -> Result<Map<String, Value>, PodSpecOverrideError> {
    let mut out = Map::new();
    for (key, value) in overlay {
        let camel = camel_case(&key);
        if out.contains_key(&camel) {
            // Map keys are unique, so a collision means both spellings were written.
            let snake = if camel == key { snake_of(&camel) } else { key };
            return Err(PodSpecOverrideError::DuplicateField { snake, camel });
        }
        out.insert(camel, value);
    }
    Ok(out)
}

fn snake_of(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn restart_policy(spec: &Value) -> Option<&Value> {
    spec.get("restartPolicy").filter(|v| !v.is_null())
}

/// Applies `override_spec` onto `pod_spec` (the typed builder's `spec`, or a controller's
/// `spec.template.spec`) for a workload of kind `api`.
pub fn apply_pod_spec_override(
    api: ProviderApi,
    pod_spec: &Value,
    override_spec: &Value,
) -> Result<Value, PodSpecOverrideError> {
    let Value::Object(overlay) = override_spec else {
        return Err(PodSpecOverrideError::NotAnObject {
            found: kind_name(override_spec),
        });
    };
    let overlay = camel_case_top_level(overlay.clone())?;
    let built = restart_policy(pod_spec).cloned();
    if let Some(requested) = overlay.get("restartPolicy")
        && Some(requested) != built.as_ref()
    {
        let hint = match api {
            ProviderApi::Pod => {
                "; a bare Pod's restart policy comes from the template's restart_policy \
                 (Never by default)"
            }
            ProviderApi::Job => {
                "; a Job's restart policy comes from the template's restart_policy (Never or \
                 OnFailure)"
            }
            ProviderApi::Deployment | ProviderApi::StatefulSet => {
                "; Kubernetes only allows Always for a controller's pods"
            }
        };
        return Err(PodSpecOverrideError::RestartPolicyChange {
            api,
            built: built.map_or_else(|| "unset".to_string(), |v| v.to_string()),
            requested: requested.to_string(),
            hint,
        });
    }
    let mut merged = pod_spec.clone();
    deep_merge(&mut merged, Value::Object(overlay), ListMerge::ByKey);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn built(restart: &str) -> Value {
        json!({
            "restartPolicy": restart,
            "containers": [{"name": "orb", "image": "busybox:1.36", "resources": {}}],
            "nodeSelector": {"pool": "orb"}
        })
    }

    #[test]
    fn partial_override_keeps_orbs_container_and_adds_fields() {
        let out = apply_pod_spec_override(
            ProviderApi::Pod,
            &built("Never"),
            &json!({
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
                "containers": [{"name": "orb", "securityContext": {"runAsNonRoot": true}}],
                "nodeSelector": {"zone": "a"}
            }),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({
                "restartPolicy": "Never",
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
                "containers": [{"name": "orb", "image": "busybox:1.36", "resources": {},
                                "securityContext": {"runAsNonRoot": true}}],
                "nodeSelector": {"pool": "orb", "zone": "a"}
            })
        );
    }

    #[test]
    fn snake_case_top_level_keys_are_accepted() {
        let out = apply_pod_spec_override(
            ProviderApi::Pod,
            &built("Never"),
            &json!({"service_account_name": "runner", "node_selector": {"zone": "a"}}),
        )
        .unwrap();
        assert_eq!(out["serviceAccountName"], "runner");
        assert_eq!(out["nodeSelector"], json!({"pool": "orb", "zone": "a"}));
    }

    #[rstest]
    #[case::pod(ProviderApi::Pod, "Never", json!({"restartPolicy": "Always"}))]
    #[case::pod_snake_case(ProviderApi::Pod, "Never", json!({"restart_policy": "OnFailure"}))]
    #[case::job(ProviderApi::Job, "Never", json!({"restartPolicy": "OnFailure"}))]
    #[case::deployment(ProviderApi::Deployment, "Always", json!({"restartPolicy": "Never"}))]
    fn restart_policy_cannot_change(
        #[case] api: ProviderApi,
        #[case] restart: &str,
        #[case] override_spec: Value,
    ) {
        let err = apply_pod_spec_override(api, &built(restart), &override_spec).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, PodSpecOverrideError::RestartPolicyChange { .. }),
            "{text}"
        );
        assert!(
            text.contains(&format!("of a {api} from \"{restart}\"")),
            "{text}"
        );
        assert!(
            text.contains("remove restartPolicy from pod_spec_override"),
            "{text}"
        );
    }

    #[rstest]
    #[case::pod(ProviderApi::Pod, "Never")]
    #[case::job(ProviderApi::Job, "OnFailure")]
    fn restating_the_same_restart_policy_is_fine(#[case] api: ProviderApi, #[case] restart: &str) {
        let out = apply_pod_spec_override(api, &built(restart), &json!({"restartPolicy": restart}))
            .unwrap();
        assert_eq!(out["restartPolicy"], restart);
    }

    #[rstest]
    #[case::list(json!([1]), "a list")]
    #[case::string(json!("x"), "a string")]
    fn override_must_be_an_object(#[case] override_spec: Value, #[case] found: &str) {
        let err =
            apply_pod_spec_override(ProviderApi::Pod, &built("Never"), &override_spec).unwrap_err();
        assert!(err.to_string().contains(&format!("got {found}")), "{err}");
        assert!(matches!(err, PodSpecOverrideError::NotAnObject { .. }));
    }

    #[test]
    fn both_spellings_of_a_field_are_refused() {
        let err = apply_pod_spec_override(
            ProviderApi::Pod,
            &built("Never"),
            &json!({"nodeName": "n", "node_name": "m"}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PodSpecOverrideError::DuplicateField {
                snake: "node_name".into(),
                camel: "nodeName".into()
            }
        );
    }
}
