//! The render → merge → stamp pipeline on every kind.

use std::collections::BTreeMap;

use rstest::rstest;
use serde_json::{Value, json};

use super::*;
use crate::config::K8sProviderConfig;

const REQUEST_ID: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

fn name_for(api: ProviderApi) -> &'static str {
    match api {
        ProviderApi::Pod => "orb-fe4cda5c019444bc981b-0000",
        _ => "orb-fe4cda5c019444bc981b",
    }
}

/// A template using every typed field the default templates read.
fn rich_template(api: ProviderApi) -> Template {
    let value = json!({
        "templateId": "rich",
        "providerApi": api.as_str(),
        "imageId": "busybox:1.36",
        "instanceTags": "team=hpc;tier=batch",
        "labels": {"app": "solver"},
        "annotations": {"example.com/owner": "hpc"},
        "command": ["sh", "-c"],
        "args": ["sleep 3600"],
        "environment_variables": {"MODE": "batch"},
        "resource_requests": {"cpu": "500m", "memory": "1Gi"},
        "resource_limits": {"cpu": "1", "memory": "1Gi", "gpu_count": 1},
        "node_selector": {"pool": "orb"},
        "tolerations": [{"key": "orb", "operator": "Exists", "effect": "NoSchedule"}],
        "service_account": "orb-runner",
        "image_pull_secrets": ["regcred"],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "volume_mounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "termination_grace_period_seconds": 30,
        "ttl_seconds_after_finished": 600,
        "native_spec": {}
    });
    orb_core::template::wire::template_from_value(&value, None, "test")
        .unwrap()
        .template
}

fn plain_template(native_spec: Value) -> Template {
    Template {
        template_id: "t".into(),
        container_image: Some("busybox:1.36".into()),
        native_spec: Some(native_spec),
        ..Default::default()
    }
}

fn input<'a>(
    template: &'a Template,
    cfg: &'a K8sProviderConfig,
    api: ProviderApi,
    config_dir: Option<&'a Path>,
) -> NativeSpecInput<'a> {
    NativeSpecInput {
        template,
        config: cfg,
        request_id: REQUEST_ID,
        name: name_for(api),
        namespace: "orb",
        count: 3,
        config_dir,
    }
}

fn render(template: &Template, api: ProviderApi) -> Result<Value, NativeSpecError> {
    let cfg = K8sProviderConfig::default();
    render_native_body(api, &input(template, &cfg, api, None))
}

#[rstest]
#[case::pod(ProviderApi::Pod)]
#[case::deployment(ProviderApi::Deployment)]
#[case::statefulset(ProviderApi::StatefulSet)]
#[case::job(ProviderApi::Job)]
fn default_bodies_for_a_rich_template(#[case] api: ProviderApi) {
    let body = render(&rich_template(api), api).unwrap();
    insta::assert_json_snapshot!(format!("default_body_{}", spec_dir_name(api)), body);
}

#[rstest]
#[case::pod(ProviderApi::Pod)]
#[case::deployment(ProviderApi::Deployment)]
#[case::statefulset(ProviderApi::StatefulSet)]
#[case::job(ProviderApi::Job)]
fn minimal_template_renders_valid_bodies(#[case] api: ProviderApi) {
    let template = Template {
        template_id: "min".into(),
        native_spec: Some(json!({})),
        ..Default::default()
    };
    let body = render(&template, api).unwrap();
    let (api_version, kind) = api_version_and_kind(api);
    assert_eq!(
        (body["apiVersion"].as_str(), body["kind"].as_str()),
        (Some(api_version), Some(kind))
    );
    // Without an image the default container has none; the operator's spec must provide it.
    let pod_spec = if api == ProviderApi::Pod {
        &body["spec"]
    } else {
        &body["spec"]["template"]["spec"]
    };
    assert_eq!(pod_spec["containers"][0], json!({"name": "orb"}));
}

#[rstest]
#[case::pod(ProviderApi::Pod)]
#[case::deployment(ProviderApi::Deployment)]
#[case::statefulset(ProviderApi::StatefulSet)]
#[case::job(ProviderApi::Job)]
fn the_operator_cannot_remove_or_fake_orbs_identity(#[case] api: ProviderApi) {
    let forged = json!({"orb.io/request-id": "req-someone-else", "orb.io/managed": null,
                        "orb.io/machine-id": "stolen", "symphony/open-resource-broker-reqid": "x",
                        "team": "hpc"});
    // (A Job's parallelism is refused rather than overwritten: see the invariants test.)
    let template = plain_template(json!({
        "metadata": {"name": "mine", "generateName": "mine-", "namespace": "kube-system", "labels": forged},
        "spec": {
            "replicas": 99,
            "selector": {"matchLabels": {"app": "everything"}}, "manualSelector": true,
            "template": {"metadata": {"labels": forged}}
        }
    }));
    let body = render(&template, api).unwrap();
    let meta = &body["metadata"];
    assert_eq!(meta["name"], name_for(api));
    assert_eq!(meta["namespace"], "orb");
    assert!(meta.get("generateName").is_none());
    let check = |labels: &Value, machine_id: Option<&str>| {
        assert_eq!(labels["orb.io/request-id"], REQUEST_ID, "{labels}");
        assert_eq!(labels["orb.io/managed"], "true", "{labels}");
        assert_eq!(
            labels["symphony/open-resource-broker-reqid"], REQUEST_ID,
            "{labels}"
        );
        assert_eq!(labels["team"], "hpc", "{labels}");
        assert_eq!(
            labels.get("orb.io/machine-id").and_then(Value::as_str),
            machine_id,
            "{labels}"
        );
    };
    match api {
        ProviderApi::Pod => check(&meta["labels"], Some(name_for(api))),
        _ => {
            check(&meta["labels"], None);
            check(&body["spec"]["template"]["metadata"]["labels"], None);
        }
    }
    match api {
        ProviderApi::Deployment | ProviderApi::StatefulSet => {
            assert_eq!(body["spec"]["replicas"], 3);
            assert_eq!(
                body["spec"]["selector"],
                json!({"matchLabels": {"orb.io/request-id": REQUEST_ID, "orb.io/provider-api": api.as_str()}})
            );
        }
        ProviderApi::Job => {
            assert_eq!(body["spec"]["parallelism"], 3);
            assert!(body["spec"].get("selector").is_none());
            assert!(body["spec"].get("manualSelector").is_none());
        }
        ProviderApi::Pod => {}
    }
}

#[test]
fn custom_label_prefix_and_no_legacy_label() {
    let template = plain_template(json!({}));
    let cfg = K8sProviderConfig {
        label_prefix: "orb.example.com".into(),
        emit_legacy_labels: false,
        ..K8sProviderConfig::default()
    };
    let body = render_native_body(
        ProviderApi::Deployment,
        &input(&template, &cfg, ProviderApi::Deployment, None),
    )
    .unwrap();
    let labels: BTreeMap<String, String> =
        serde_json::from_value(body["metadata"]["labels"].clone()).unwrap();
    assert!(
        labels.keys().all(|k| k.starts_with("orb.example.com/")),
        "{labels:?}"
    );
    assert_eq!(
        body["spec"]["selector"]["matchLabels"]["orb.example.com/request-id"],
        REQUEST_ID
    );
}

#[test]
fn operator_lists_replace_defaults_and_null_removes_a_default_but_not_the_restart_policy() {
    let template = plain_template(json!({
        "spec": {
            "restartPolicy": null,
            "containers": [{"name": "app", "image": "{{ image }}", "args": ["--replicas", "{{ replicas | string }}"]}]
        }
    }));
    let body = render(&template, ProviderApi::Pod).unwrap();
    assert_eq!(
        body["spec"],
        json!({"containers": [{"name": "app", "image": "busybox:1.36", "args": ["--replicas", "3"]}],
               "restartPolicy": "Never"})
    );
}

/// Seed 000's Job invariants and every kind's restart policy hold after the merge: a native
/// spec that changes one is refused with the field's path.
#[rstest]
#[case::job_parallelism(ProviderApi::Job, json!({"spec": {"parallelism": 10}}), "spec.parallelism", "10")]
#[case::job_completions(ProviderApi::Job, json!({"spec": {"completions": 1}}), "spec.completions", "1")]
#[case::job_backoff(ProviderApi::Job, json!({"spec": {"backoffLimit": 6}}), "spec.backoffLimit", "6")]
#[case::job_restart(ProviderApi::Job, json!({"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}),
    "spec.template.spec.restartPolicy", "\"OnFailure\"")]
#[case::pod_restart(ProviderApi::Pod, json!({"spec": {"restartPolicy": "Always"}}), "spec.restartPolicy", "\"Always\"")]
#[case::deployment_restart(ProviderApi::Deployment, json!({"spec": {"template": {"spec": {"restartPolicy": "Never"}}}}),
    "spec.template.spec.restartPolicy", "\"Never\"")]
fn an_overlay_that_breaks_a_typed_invariant_is_refused(
    #[case] api: ProviderApi,
    #[case] spec: Value,
    #[case] path: &str,
    #[case] found: &str,
) {
    let err = render(&plain_template(spec), api).unwrap_err();
    assert!(
        matches!(&err, NativeSpecError::Invariant(b) if b.path == path && b.found == found),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("remove {path} from the native spec")),
        "{err}"
    );
}

#[rstest]
#[case::same_values(json!({"spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0,
    "template": {"spec": {"restartPolicy": "Never"}}}}))]
#[case::removed_values(json!({"spec": {"parallelism": null, "completions": null, "backoffLimit": null,
    "template": {"spec": {"restartPolicy": null}}}}))]
fn a_job_body_restating_or_dropping_the_invariants_gets_orbs_values(#[case] spec: Value) {
    let body = render(&plain_template(spec), ProviderApi::Job).unwrap();
    assert_eq!(body["spec"]["parallelism"], 3);
    assert_eq!(body["spec"]["completions"], 3);
    assert_eq!(body["spec"]["backoffLimit"], 0);
    assert_eq!(body["spec"]["template"]["spec"]["restartPolicy"], "Never");
}

#[rstest]
#[case::kind(json!({"kind": "DaemonSet"}), "kind")]
#[case::api_version(json!({"apiVersion": "extensions/v1beta1"}), "apiVersion")]
fn a_body_of_another_kind_is_refused(#[case] spec: Value, #[case] field: &str) {
    let err = render(&plain_template(spec), ProviderApi::Deployment).unwrap_err();
    assert!(
        matches!(&err, NativeSpecError::WrongKind { field: f, .. } if f == field),
        "{err}"
    );
    assert!(
        err.to_string().contains("provider_api Deployment creates"),
        "{err}"
    );
}

#[test]
fn matching_kind_and_api_version_are_accepted() {
    let body = render(
        &plain_template(json!({"apiVersion": "batch/v1", "kind": "Job"})),
        ProviderApi::Job,
    )
    .unwrap();
    assert_eq!(body["kind"], "Job");
}

#[test]
fn metadata_that_is_not_an_object_is_refused() {
    let err = render(
        &plain_template(json!({"metadata": ["x"]})),
        ProviderApi::Pod,
    )
    .unwrap_err();
    assert!(
        matches!(err, NativeSpecError::WrongShape { ref path, found: "a list", .. } if path == "metadata"),
        "{err}"
    );
}

#[test]
fn undefined_variable_inline_names_template_origin_path_and_line() {
    let err = render(
        &plain_template(json!({"spec": {"hostname": "{{ nmae }}"}})),
        ProviderApi::Pod,
    )
    .unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn default_override_from_the_config_dir_is_used_and_its_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let pod_dir = dir.path().join("specs/pod");
    std::fs::create_dir_all(&pod_dir).unwrap();
    let file = pod_dir.join("default.json");
    std::fs::write(&file, "{\n  \"metadata\": {\"annotations\": {\"site\": \"{{ namespace }}-a\"}},\n  \"spec\": {\"containers\": [{\"name\": \"orb\", \"image\": {{ image | tojson }}}]}\n}\n").unwrap();
    let template = plain_template(json!({}));
    let cfg = K8sProviderConfig::default();
    let body = render_native_body(
        ProviderApi::Pod,
        &input(&template, &cfg, ProviderApi::Pod, Some(dir.path())),
    )
    .unwrap();
    assert_eq!(body["metadata"]["annotations"]["site"], "orb-a");
    assert_eq!(body["spec"]["containers"][0]["image"], "busybox:1.36");
    assert_eq!(body["metadata"]["labels"]["orb.io/managed"], "true");

    std::fs::write(
        &file,
        "{\n  \"spec\": {\n    \"hostname\": {{ host | tojson }}\n  }\n}\n",
    )
    .unwrap();
    let err = render_native_body(
        ProviderApi::Pod,
        &input(&template, &cfg, ProviderApi::Pod, Some(dir.path())),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(text.contains("line 3"), "{text}");
    assert!(text.contains("\"t\""), "{text}");

    std::fs::write(
        &file,
        "{\n  \"spec\": {\n    \"hostname\": {{ name }}\n  }\n}\n",
    )
    .unwrap();
    let err = render_native_body(
        ProviderApi::Pod,
        &input(&template, &cfg, ProviderApi::Pod, Some(dir.path())),
    )
    .unwrap_err();
    assert!(
        matches!(err, NativeSpecError::Parse { line: Some(3), .. }),
        "{err}"
    );
}

#[test]
fn native_spec_path_file_is_rendered_merged_and_stamped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("native")).unwrap();
    std::fs::write(
        dir.path().join("native/solver.yaml"),
        "spec:\n  template:\n    spec:\n      hostAliases:\n{% for host in ['db', 'cache'] %}\
         \n        - ip: 10.0.0.{{ loop.index }}\n          hostnames: [{{ host }}]\n{% endfor %}\n",
    )
    .unwrap();
    let template = Template {
        template_id: "solver".into(),
        container_image: Some("busybox:1.36".into()),
        native_spec_path: Some("native/solver.yaml".into()),
        ..Default::default()
    };
    let cfg = K8sProviderConfig::default();
    let body = render_native_body(
        ProviderApi::StatefulSet,
        &input(&template, &cfg, ProviderApi::StatefulSet, Some(dir.path())),
    )
    .unwrap();
    assert_eq!(
        body["spec"]["template"]["spec"]["hostAliases"],
        json!([{"ip": "10.0.0.1", "hostnames": ["db"]}, {"ip": "10.0.0.2", "hostnames": ["cache"]}])
    );
    assert_eq!(body["spec"]["serviceName"], "orb-fe4cda5c019444bc981b");
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1.36"
    );
}

#[rstest]
#[case::pod(ProviderApi::Pod, "spec.containers[0].securityContext.privileged")]
#[case::deployment(
    ProviderApi::Deployment,
    "spec.template.spec.containers[0].securityContext.privileged"
)]
#[case::statefulset(
    ProviderApi::StatefulSet,
    "spec.template.spec.containers[0].securityContext.privileged"
)]
#[case::job(
    ProviderApi::Job,
    "spec.template.spec.containers[0].securityContext.privileged"
)]
fn a_privileged_native_spec_is_rejected_by_the_audit(#[case] api: ProviderApi, #[case] path: &str) {
    let container = json!({"containers": [{"name": "orb", "image": "busybox:1.36", "securityContext": {"privileged": true}}]});
    let spec = if api == ProviderApi::Pod {
        json!({"spec": container})
    } else {
        json!({"spec": {"template": {"spec": container}}})
    };
    let body = render(&plain_template(spec), api).unwrap();
    let err =
        crate::audit::enforce_audit_policy(crate::audit::AuditMode::Reject, &body).unwrap_err();
    assert_eq!(err.findings.len(), 1);
    assert_eq!(err.findings[0].path, path);
}

#[rstest]
#[case::always(orb_core::template::RestartPolicy::Always, "\"Always\"")]
#[case::on_failure(orb_core::template::RestartPolicy::OnFailure, "\"OnFailure\"")]
fn a_job_template_restart_policy_other_than_never_is_refused(
    #[case] policy: orb_core::template::RestartPolicy,
    #[case] shown: &str,
) {
    let mut template = plain_template(json!({}));
    template.restart_policy = Some(policy);
    let err = render(&template, ProviderApi::Job).unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "restartPolicy {shown}, but Job pods must use \"Never\""
        )),
        "{err}"
    );
}

#[test]
fn template_ids_that_are_not_label_values_are_refused() {
    let mut template = plain_template(json!({}));
    template.template_id = "has space".into();
    let err = render(&template, ProviderApi::Pod).unwrap_err();
    assert!(matches!(err, NativeSpecError::Label { .. }), "{err}");
}

#[test]
fn template_labels_that_kubernetes_would_refuse_are_refused_first() {
    let mut template = plain_template(json!({}));
    template.labels.insert("team".into(), "has space".into());
    let err = render(&template, ProviderApi::Deployment).unwrap_err();
    assert!(err.to_string().contains("has space"), "{err}");
}

#[test]
fn sources_load_once_and_render_per_pod() {
    let template = plain_template(json!({"spec": {"hostname": "{{ name }}"}}));
    let cfg = K8sProviderConfig::default();
    let base = input(&template, &cfg, ProviderApi::Pod, None);
    let sources = load_native_sources(ProviderApi::Pod, &base).unwrap();
    for seq in ["0000", "0001"] {
        let name = format!("orb-fe4cda5c019444bc981b-{seq}");
        let body = render_native_body_from(
            ProviderApi::Pod,
            &NativeSpecInput {
                name: &name,
                ..base
            },
            &sources,
        )
        .unwrap();
        assert_eq!(body["spec"]["hostname"], name.as_str());
        assert_eq!(
            body["metadata"]["labels"]["orb.io/machine-id"],
            name.as_str()
        );
    }
}

/// A spec file written for the reference broker, with its variable names, renders as is.
#[test]
fn specs_written_for_the_reference_broker_render_with_its_variables() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("reference.yaml"),
        "spec:\n  containers:\n    - name: orb\n      image: {{ image }}\n\
         {% if has_resource_requests %}      resources:\n        requests: {{ resource_requests | tojson }}\n\
         {% if has_resource_limits %}        limits: {{ resource_limits | tojson }}\n{% endif %}{% endif %}\
         {% if has_image_pull_secret %}  imagePullSecrets: [{name: {{ image_pull_secret }}}]\n{% endif %}\
         {% if has_node_selector %}  nodeSelector: {{ node_selector | tojson }}\n{% endif %}\
         {% if not has_runtime_class %}  hostname: {{ package_name }}-{{ resource_name }}\n{% endif %}",
    )
    .unwrap();
    let mut template = rich_template(ProviderApi::Pod);
    template.native_spec = None;
    template.native_spec_path = Some("reference.yaml".into());
    let cfg = K8sProviderConfig::default();
    let body = render_native_body(
        ProviderApi::Pod,
        &input(&template, &cfg, ProviderApi::Pod, Some(dir.path())),
    )
    .unwrap();
    let spec = &body["spec"];
    assert_eq!(
        spec["containers"][0]["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1Gi"},
               "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}})
    );
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(spec["nodeSelector"], json!({"pool": "orb"}));
    assert_eq!(spec["hostname"], "orb-orb-fe4cda5c019444bc981b-0000");
}

#[test]
fn every_has_flag_follows_its_value() {
    let template = plain_template(json!({}));
    let cfg = K8sProviderConfig::default();
    let input = input(&template, &cfg, ProviderApi::Pod, None);
    let identity = workload_identity(ProviderApi::Pod, &input).unwrap();
    let context = build_context(&input, &identity).unwrap();
    for name in context::HAS_FLAGS {
        let flag = &context[format!("has_{name}")];
        assert!(flag.is_boolean(), "has_{name} missing");
        let expected = *name == "image";
        assert_eq!(flag, &json!(expected), "has_{name}");
    }
}

/// A runaway template is refused with the template, where it ran away, the limit and the
/// setting (and variable) that raises it; the time limit holds even with fuel to spare.
#[rstest]
#[case::fuel(
    K8sProviderConfig::default(),
    "inline native_spec at spec.x",
    "it used up its fuel of 1000000 (native_spec_render_fuel)"
)]
#[case::time(
    K8sProviderConfig { native_spec_render_fuel: 3_000_000, native_spec_render_timeout_ms: 10, ..K8sProviderConfig::default() },
    "the native spec",
    "it did not finish within 10 ms (native_spec_render_timeout_ms)"
)]
fn a_runaway_template_is_refused_naming_the_limit(
    #[case] cfg: K8sProviderConfig,
    #[case] origin: &str,
    #[case] what: &str,
) {
    let t = plain_template(json!({"spec": {"x":
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"}}));
    let started = std::time::Instant::now();
    let err = render_native_body(ProviderApi::Pod, &input(&t, &cfg, ProviderApi::Pod, None))
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let setting = what.rsplit_once('(').unwrap().1.trim_end_matches(')');
    let expected = format!(
        "template \"t\": rendering {origin} was stopped: {what}; make the template do less \
         work (fewer or smaller loops, shorter strings) or raise {setting} in the provider \
         config (env ORB_K8S_{})",
        setting.to_ascii_uppercase()
    );
    assert_eq!(err, expected);
}
