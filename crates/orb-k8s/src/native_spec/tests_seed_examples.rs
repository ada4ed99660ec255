//! The two examples of seed 002, loaded exactly as an operator writes them, rendered and
//! merged: the snapshots show the operator's fields and orb's identity side by side.

use serde_json::{Value, json};

use super::*;
use crate::config::K8sProviderConfig;

const REQUEST_ID: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

fn seed_template(value: Value) -> Template {
    orb_core::template::wire::template_from_value(&value, None, "seed 002")
        .unwrap()
        .template
}

fn full_pod_override() -> Template {
    seed_template(json!({
        "template_id": "ml-worker",
        "provider_type": "k8s",
        "provider_api": "Pod",
        "image_id": "registry.example.com/ml-worker:1",
        "namespace": "orb-ml",
        "max_instances": 16,
        "native_spec": {
            "spec": {
                "initContainers": [{
                    "name": "warm-cache",
                    "image": "registry.example.com/cache-warmer:1",
                    "command": ["sh", "-c", "/usr/local/bin/warm"]
                }],
                "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "topologySpreadConstraints": [{
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule"
                }]
            }
        }
    }))
}

fn partial_deployment_override() -> Template {
    seed_template(json!({
        "template_id": "long-running-service",
        "provider_type": "k8s",
        "provider_api": "Deployment",
        "image_id": "registry.example.com/svc:42",
        "namespace": "orb",
        "max_instances": 8,
        "native_spec": {
            "spec": {
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "0"}
                }
            }
        }
    }))
}

fn render(template: &Template, api: ProviderApi, name: &str, count: u32) -> Value {
    let cfg = K8sProviderConfig::default();
    let input = NativeSpecInput {
        template,
        config: &cfg,
        request_id: REQUEST_ID,
        name,
        namespace: template.namespace.as_deref().unwrap_or("default"),
        count,
        config_dir: None,
    };
    render_native_body(api, &input).unwrap()
}

#[test]
fn seed_full_pod_override() {
    let template = full_pod_override();
    let body = render(
        &template,
        ProviderApi::Pod,
        "orb-fe4cda5c019444bc981b-0000",
        1,
    );
    // The operator's fields…
    assert_eq!(body["spec"]["initContainers"][0]["name"], "warm-cache");
    assert_eq!(
        body["spec"]["securityContext"],
        json!({"runAsUser": 1000, "fsGroup": 2000})
    );
    assert_eq!(body["spec"]["topologySpreadConstraints"][0]["maxSkew"], 1);
    // …the defaults they did not touch…
    assert_eq!(
        body["spec"]["containers"][0]["image"],
        "registry.example.com/ml-worker:1"
    );
    assert_eq!(body["spec"]["restartPolicy"], "Never");
    // …and orb's identity.
    let labels = &body["metadata"]["labels"];
    assert_eq!(labels["orb.io/managed"], "true");
    assert_eq!(labels["orb.io/request-id"], REQUEST_ID);
    assert_eq!(labels["orb.io/machine-id"], "orb-fe4cda5c019444bc981b-0000");
    assert_eq!(body["metadata"]["namespace"], "orb-ml");
    // The seed's securityContext is not high-risk: the default audit lets it through.
    assert_eq!(
        crate::audit::enforce_audit_policy(crate::audit::AuditMode::Reject, &body),
        Ok(vec![])
    );
    insta::assert_json_snapshot!(body);
}

#[test]
fn seed_partial_deployment_override() {
    let template = partial_deployment_override();
    let body = render(
        &template,
        ProviderApi::Deployment,
        "orb-fe4cda5c019444bc981b",
        8,
    );
    // The seed writes maxUnavailable as the string "0", which the apiserver accepts only as a
    // percentage; orb sends the number it spells (checked with a server-side dry run).
    assert_eq!(
        body["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}})
    );
    assert_eq!(body["spec"]["replicas"], 8);
    assert_eq!(
        body["spec"]["selector"],
        json!({"matchLabels": {"orb.io/provider-api": "Deployment", "orb.io/request-id": REQUEST_ID}})
    );
    let pod_labels = &body["spec"]["template"]["metadata"]["labels"];
    assert_eq!(pod_labels["orb.io/request-id"], REQUEST_ID);
    assert_eq!(pod_labels["orb.io/managed"], "true");
    assert!(pod_labels.get("orb.io/machine-id").is_none());
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/svc:42"
    );
    assert_eq!(
        crate::audit::enforce_audit_policy(crate::audit::AuditMode::Reject, &body),
        Ok(vec![])
    );
    insta::assert_json_snapshot!(body);
}
