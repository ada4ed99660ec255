use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use orb_core::template::{EnvVar, ProviderApi, ResourceSpec, RestartPolicy, Template};
use rstest::rstest;
use serde_json::json;

use super::*;
use crate::config::K8sProviderConfig;

const REQUEST: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

fn template(api: ProviderApi) -> Template {
    Template {
        template_id: "worker".into(),
        provider_api: Some(api),
        container_image: Some("busybox:1.36".into()),
        command: Some(vec!["sh".into(), "-c".into(), "sleep 3600".into()]),
        args: Some(vec!["--verbose".into()]),
        namespace: Some("team-a".into()),
        resource_requests: Some(ResourceSpec {
            cpu: Some("500m".into()),
            memory: Some("256Mi".into()),
            ..ResourceSpec::default()
        }),
        resource_limits: Some(ResourceSpec {
            cpu: Some("1".into()),
            memory: Some("512Mi".into()),
            gpu_count: Some(1),
            ..ResourceSpec::default()
        }),
        node_selector: Some(BTreeMap::from([("pool".into(), "batch".into())])),
        tolerations: Some(vec![
            json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}),
        ]),
        service_account: Some("worker-sa".into()),
        runtime_class: Some("gvisor".into()),
        environment_variables: Some(vec![
            EnvVar {
                name: "MODE".into(),
                value: Some("grid".into()),
                value_from: None,
            },
            EnvVar {
                name: "NODE".into(),
                value: None,
                value_from: Some(json!({"fieldRef": {"fieldPath": "spec.nodeName"}})),
            },
        ]),
        image_pull_secrets: Some(vec!["team-registry".into()]),
        tags: BTreeMap::from([("team".into(), "hpc".into())]),
        labels: BTreeMap::from([
            ("app".into(), "grid".into()),
            ("orb.io/request-id".into(), "req-impostor".into()),
        ]),
        annotations: BTreeMap::from([("owner".into(), "hpc-team".into())]),
        ..Template::default()
    }
}

fn config() -> K8sProviderConfig {
    K8sProviderConfig {
        default_node_selector: Some(BTreeMap::from([
            ("workload".into(), "orb".into()),
            ("pool".into(), "general".into()),
        ])),
        default_tolerations: Some(vec![Toleration {
            key: Some("orb".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]),
        default_image_pull_secret: Some("orb-registry".into()),
        ..K8sProviderConfig::default()
    }
}

fn inputs<'a>(t: &'a Template, cfg: &'a K8sProviderConfig, count: u32) -> SpecInputs<'a> {
    SpecInputs {
        template: t,
        config: cfg,
        request_id: REQUEST,
        namespace: "team-a",
        count,
    }
}

#[test]
fn pods_snapshot() {
    let (t, cfg) = (template(ProviderApi::Pod), config());
    let pods = build_pods(&inputs(&t, &cfg, 2)).unwrap();
    insta::assert_json_snapshot!(pods);
}

#[test]
fn deployment_snapshot() {
    let (t, cfg) = (template(ProviderApi::Deployment), config());
    insta::assert_json_snapshot!(build_deployment(&inputs(&t, &cfg, 3)).unwrap());
}

#[test]
fn statefulset_and_service_snapshot() {
    let mut t = template(ProviderApi::StatefulSet);
    t.extra.insert(
        "volumeClaimTemplates".into(),
        json!([{"metadata": {"name": "scratch"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]),
    );
    let cfg = config();
    let BuiltWorkload::StatefulSet(set, service) =
        build_workload(&inputs(&t, &cfg, 3), ProviderApi::StatefulSet).unwrap()
    else {
        panic!("expected a StatefulSet");
    };
    insta::assert_json_snapshot!(json!({"statefulset": set, "service": service}));
}

#[test]
fn job_snapshot() {
    let (t, cfg) = (template(ProviderApi::Job), config());
    insta::assert_json_snapshot!(build_job(&inputs(&t, &cfg, 4)).unwrap());
}

#[test]
fn pod_names_follow_prefix_segment_and_sequence() {
    let (t, cfg) = (template(ProviderApi::Pod), config());
    let names: Vec<String> = build_pods(&inputs(&t, &cfg, 3))
        .unwrap()
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "orb-fe4cda5c019444bc981b-0000",
            "orb-fe4cda5c019444bc981b-0001",
            "orb-fe4cda5c019444bc981b-0002"
        ]
    );
}

#[test]
fn orb_labels_cannot_be_overridden_by_template_labels_or_tags() {
    let mut t = template(ProviderApi::Pod);
    t.tags.insert("orb.io/managed".into(), "false".into());
    t.labels
        .insert("symphony/open-resource-broker-reqid".into(), "x".into());
    let cfg = config();
    let pod = build_pods(&inputs(&t, &cfg, 1)).unwrap().remove(0);
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["orb.io/request-id"], REQUEST);
    assert_eq!(labels["orb.io/managed"], "true");
    assert_eq!(labels["symphony/open-resource-broker-reqid"], REQUEST);
    assert_eq!(labels["orb.io/machine-id"], "orb-fe4cda5c019444bc981b-0000");
    assert_eq!(labels["app"], "grid");
    assert_eq!(labels["team"], "hpc");
}

#[test]
fn template_values_win_over_provider_defaults() {
    let (t, cfg) = (template(ProviderApi::Pod), config());
    let spec = build_pods(&inputs(&t, &cfg, 1))
        .unwrap()
        .remove(0)
        .spec
        .unwrap();
    let selector = spec.node_selector.unwrap();
    assert_eq!(selector["pool"], "batch", "template value wins per key");
    assert_eq!(selector["workload"], "orb", "default merged in");
    let tolerations: Vec<_> = spec
        .tolerations
        .unwrap()
        .into_iter()
        .map(|t| t.key.unwrap())
        .collect();
    assert_eq!(
        tolerations,
        ["gpu", "orb"],
        "defaults appended after the template's"
    );
    let secrets: Vec<_> = spec
        .image_pull_secrets
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        secrets,
        ["team-registry"],
        "the default secret only when the template has none"
    );
}

#[test]
fn default_pull_secret_applies_when_the_template_has_none() {
    let mut t = template(ProviderApi::Pod);
    t.image_pull_secrets = None;
    let cfg = config();
    let spec = build_pods(&inputs(&t, &cfg, 1))
        .unwrap()
        .remove(0)
        .spec
        .unwrap();
    let secrets: Vec<_> = spec
        .image_pull_secrets
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(secrets, ["orb-registry"]);
}

#[rstest]
#[case::pod_default(ProviderApi::Pod, None, Ok("Never"))]
#[case::pod_template(ProviderApi::Pod, Some(RestartPolicy::OnFailure), Ok("OnFailure"))]
#[case::job_default(ProviderApi::Job, None, Ok("Never"))]
#[case::job_never(ProviderApi::Job, Some(RestartPolicy::Never), Ok("Never"))]
#[case::job_on_failure(
    ProviderApi::Job,
    Some(RestartPolicy::OnFailure),
    Err("Job pods must use \"Never\"")
)]
#[case::job_always(
    ProviderApi::Job,
    Some(RestartPolicy::Always),
    Err("Job pods must use \"Never\"")
)]
#[case::deployment_default(ProviderApi::Deployment, None, Ok("Always"))]
#[case::deployment_never(
    ProviderApi::Deployment,
    Some(RestartPolicy::Never),
    Err("Deployment pods must use \"Always\"")
)]
#[case::statefulset_on_failure(
    ProviderApi::StatefulSet,
    Some(RestartPolicy::OnFailure),
    Err("StatefulSet pods must use \"Always\"")
)]
fn restart_policy_rules(
    #[case] kind: ProviderApi,
    #[case] asked: Option<RestartPolicy>,
    #[case] expected: Result<&str, &str>,
) {
    let mut t = template(ProviderApi::Pod);
    t.restart_policy = asked;
    match (restart_policy_for(&t, kind), expected) {
        (Ok(policy), Ok(want)) => assert_eq!(policy, want),
        (Err(e), Err(needle)) => assert!(e.to_string().contains(needle), "{e}"),
        (got, want) => panic!("got {got:?}, wanted {want:?}"),
    }
}

#[test]
fn a_job_template_asking_for_on_failure_is_rejected_before_building() {
    let mut t = template(ProviderApi::Job);
    t.restart_policy = Some(RestartPolicy::OnFailure);
    let cfg = config();
    let err = build_job(&inputs(&t, &cfg, 2)).unwrap_err();
    assert!(matches!(err, SpecError::RestartPolicy { .. }), "{err}");
}

#[rstest]
#[case::no_image(|t: &mut Template| t.container_image = None, "has no container image")]
#[case::blank_image(|t: &mut Template| t.container_image = Some("  ".into()), "has no container image")]
#[case::bad_toleration(|t: &mut Template| t.tolerations = Some(vec![json!({"tolerationSeconds": "soon"})]), "tolerations[0] is not a valid")]
#[case::bad_label(|t: &mut Template| { t.labels.insert("bad key!".into(), "v".into()); }, "bad key!")]
#[case::override_changing_restart_policy(|t: &mut Template| t.pod_spec_override = Some(json!({"restartPolicy": "Always"})), "podSpecOverride")]
#[case::bad_volume(|t: &mut Template| t.volumes = Some(vec![json!("nope")]), "volumes[0]")]
fn bad_templates_are_refused_with_the_field(
    #[case] spoil: fn(&mut Template),
    #[case] needle: &str,
) {
    let mut t = template(ProviderApi::Pod);
    spoil(&mut t);
    let cfg = config();
    let err = build_pods(&inputs(&t, &cfg, 1)).unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
}

#[rstest]
#[case::completions_differ(Some(5), None, "completions=5")]
#[case::completions_equal_the_count(Some(3), None, "completions=3")]
#[case::parallelism(None, Some(1), "parallelism=1")]
fn a_job_is_sized_by_the_request_never_by_the_template(
    #[case] completions: Option<u32>,
    #[case] parallelism: Option<u32>,
    #[case] needle: &str,
) {
    let mut t = template(ProviderApi::Job);
    t.completions = completions;
    t.parallelism = parallelism;
    let cfg = config();
    let err = build_job(&inputs(&t, &cfg, 3)).unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
}

#[test]
fn statefulset_service_name_comes_from_the_template_or_the_set() {
    let mut t = template(ProviderApi::StatefulSet);
    let cfg = config();
    let set = build_statefulset(&inputs(&t, &cfg, 1)).unwrap();
    assert_eq!(
        set.spec.service_name.as_deref(),
        Some("orb-fe4cda5c019444bc981b")
    );
    t.service_name = Some("grid".into());
    let set = build_statefulset(&inputs(&t, &cfg, 1)).unwrap();
    assert_eq!(set.spec.service_name.as_deref(), Some("grid"));
    let service = build_headless_service(&inputs(&t, &cfg, 1), &set).unwrap();
    assert_eq!(service.metadata.name.as_deref(), Some("grid"));
    assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
}

#[test]
fn a_custom_label_prefix_names_every_orb_label() {
    let mut t = template(ProviderApi::Deployment);
    t.labels.retain(|k, _| !k.starts_with("orb.io/"));
    let cfg = K8sProviderConfig {
        label_prefix: "orb.example.com".into(),
        emit_legacy_labels: false,
        ..config()
    };
    let d = build_deployment(&inputs(&t, &cfg, 1)).unwrap();
    let selector = d.spec.selector.match_labels.unwrap();
    assert_eq!(selector["orb.example.com/request-id"], REQUEST);
    assert_eq!(selector["orb.example.com/provider-api"], "Deployment");
    let labels = d.spec.template.metadata.unwrap().labels.unwrap();
    assert!(
        labels.keys().all(|k| !k.starts_with("orb.io/")),
        "{labels:?}"
    );
    assert!(!labels.contains_key("symphony/open-resource-broker-reqid"));
}

#[test]
fn pod_spec_override_merges_onto_the_built_spec_and_keeps_orbs_container() {
    let mut t = template(ProviderApi::Deployment);
    t.pod_spec_override = Some(json!({
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["scheduler"]}],
        "containers": [{"name": "orb", "workingDir": "/scratch"}]
    }));
    let cfg = config();
    let spec = build_deployment(&inputs(&t, &cfg, 1))
        .unwrap()
        .spec
        .template
        .spec
        .unwrap();
    assert_eq!(spec.host_aliases.unwrap()[0].ip, "10.0.0.1");
    assert_eq!(spec.containers.len(), 1);
    assert_eq!(spec.containers[0].working_dir.as_deref(), Some("/scratch"));
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox:1.36"));
}

/// A hardening setting spelt wrongly (or in snake_case below the top level) would be dropped
/// by the Kubernetes type; the override is refused with the field's path instead.
#[rstest]
#[case::snake_case_nested(json!({"containers": [{"name": "orb", "security_context": {"readOnlyRootFilesystem": true}}]}),
    "podSpecOverride containers[0].security_context", "camelCase")]
#[case::misspelt_nested(json!({"securityContext": {"runAsNonRot": true}}),
    "podSpecOverride securityContext.runAsNonRot", "spelling")]
#[case::unknown_top_level(json!({"hostNetworking": true}), "podSpecOverride hostNetworking", "spelling")]
#[case::two_at_once(json!({"securityContext": {"run_as_non_root": true, "fs_group": 2000}}),
    "podSpecOverride securityContext.fs_group, securityContext.run_as_non_root", "are not fields")]
fn unknown_pod_spec_override_fields_are_refused_with_their_path(
    #[case] overlay: serde_json::Value,
    #[case] needle: &str,
    #[case] hint: &str,
) {
    let mut t = template(ProviderApi::Deployment);
    t.pod_spec_override = Some(overlay);
    let cfg = config();
    let err = build_deployment(&inputs(&t, &cfg, 1)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(needle) && text.contains(hint), "{text}");
}

#[test]
fn known_camel_case_override_fields_still_apply() {
    let mut t = template(ProviderApi::Pod);
    t.pod_spec_override = Some(json!({
        "security_context": {"runAsNonRoot": true},
        "containers": [{"name": "orb", "securityContext": {"readOnlyRootFilesystem": true}}]
    }));
    let cfg = config();
    let pod = &build_pods(&inputs(&t, &cfg, 1)).unwrap()[0];
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    assert_eq!(
        spec.containers[0]
            .security_context
            .as_ref()
            .unwrap()
            .read_only_root_filesystem,
        Some(true)
    );
}
