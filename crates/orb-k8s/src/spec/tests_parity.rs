//! The native spec's built-in defaults build exactly what the typed builders build: the same
//! template, rendered both ways, gives the same bodies for every kind (seed 002: the default
//! template is the contract for what orb populates).

use orb_core::ProviderApi;
use orb_core::template::Template;
use rstest::rstest;
use serde_json::{Value, json};

use super::{FinalBodyRequest, final_workload};
use crate::config::K8sProviderConfig;
use crate::native_spec::NativeSpecSwitches;

const REQUEST: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

/// A template setting every field the builders read (an empty `native_spec`: defaults only).
fn template(api: ProviderApi, extra: Value) -> Template {
    let mut value = json!({
        "templateId": "parity",
        "providerApi": api.as_str(),
        "imageId": "busybox:1.36",
        "instanceTags": "team=hpc;tier=batch",
        "labels": {"app": "solver"},
        "annotations": {"example.com/owner": "hpc"},
        "command": ["sh", "-c"],
        "args": ["sleep 3600"],
        "env": [{"name": "MODE", "value": "batch"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resourceRequests": {"cpu": "500m", "memory": "1Gi", "ephemeral_storage": "1Gi"},
        "resourceLimits": {"cpu": "1", "memory": "1Gi", "gpu_count": 1, "gpu_type": "amd.com/gpu"},
        "nodeSelector": {"pool": "orb"},
        "tolerations": [{"key": "orb", "operator": "Exists", "effect": "NoSchedule"}],
        "imagePullSecret": ["regcred"],
        "runtimeClassName": "gvisor",
        "priorityClassName": "batch",
        "terminationGracePeriodSeconds": 30,
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
        "livenessProbe": {"exec": {"command": ["true"]}},
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
        "hostname": "solver",
        "subdomain": "grid",
        "native_spec": {}
    });
    if api == ProviderApi::Job {
        value["ttlSecondsAfterFinished"] = json!(600);
        value["activeDeadlineSeconds"] = json!(3600);
    }
    if let (Value::Object(base), Value::Object(more)) = (&mut value, extra) {
        base.extend(more);
    }
    orb_core::template::wire::template_from_value(&value, None, "test")
        .unwrap()
        .template
}

fn bodies(template: &Template, cfg: &K8sProviderConfig, native: bool) -> Vec<Value> {
    let request = FinalBodyRequest {
        template,
        config: cfg,
        request_id: REQUEST,
        namespace: "orb",
        count: 3,
        switches: NativeSpecSwitches {
            provider_enabled: native,
            application_enabled: true,
        },
        config_dir: None,
    };
    let kind = template.api();
    let built = final_workload(&request, kind).expect("both paths build");
    assert_eq!(
        built.path.as_str(),
        if native { "native_spec" } else { "typed" }
    );
    built.bodies()
}

#[rstest]
#[case::pod(ProviderApi::Pod, json!({}))]
#[case::deployment(ProviderApi::Deployment, json!({}))]
#[case::statefulset(ProviderApi::StatefulSet, json!({}))]
#[case::job(ProviderApi::Job, json!({}))]
#[case::machine_role_as_service_account(ProviderApi::Deployment, json!({"machine_role": "runner"}))]
#[case::explicit_service_account(ProviderApi::StatefulSet, json!({"serviceAccountName": "orb-runner", "machine_role": "ignored"}))]
#[case::statefulset_service_name(ProviderApi::StatefulSet, json!({"serviceName": "peers"}))]
#[case::pod_restart_policy(ProviderApi::Pod, json!({"restartPolicy": "OnFailure"}))]
fn the_native_defaults_build_what_the_typed_builders_build(
    #[case] api: ProviderApi,
    #[case] extra: Value,
) {
    let cfg = K8sProviderConfig {
        default_node_selector: Some([("zone".to_string(), "a".to_string())].into()),
        default_tolerations: Some(vec![serde_json::from_value(
            json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}),
        )
        .unwrap()]),
        default_image_pull_secret: Some("site-registry".into()),
        ..K8sProviderConfig::default()
    };
    let t = template(api, extra);
    assert_eq!(bodies(&t, &cfg, true), bodies(&t, &cfg, false));
}

#[test]
fn a_minimal_template_builds_the_same_way_too() {
    for api in ProviderApi::ALL {
        let t = Template {
            template_id: "min".into(),
            provider_api: Some(orb_core::template::ProviderApi::ALL[api as usize]),
            container_image: Some("busybox:1.36".into()),
            native_spec: Some(json!({})),
            ..Template::default()
        };
        let cfg = K8sProviderConfig::default();
        assert_eq!(bodies(&t, &cfg, true), bodies(&t, &cfg, false), "{api}");
    }
}
