use rstest::rstest;
use serde_json::{Value, json};

use super::*;

const KINDS: [&str; 4] = ["Pod", "Deployment", "StatefulSet", "Job"];

/// The default policy's findings (profile baseline, label prefix `orb.io`).
fn audit(body: &Value) -> Vec<AuditFinding> {
    audit_workload_body(body, &AuditMode::Reject.into())
}

fn safe_container() -> Value {
    json!({"name": "orb", "image": "busybox:1.36", "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": false}})
}

/// A body of `kind` whose pod spec is a safe one with `patch` merged in, and whose pod
/// metadata carries `annotations`.
fn body(kind: &str, patch: &Value, annotations: &Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [safe_container()]});
    crate::native_spec::deep_merge(
        &mut spec,
        patch.clone(),
        crate::native_spec::ListMerge::Replace,
    );
    let metadata = json!({"name": "x", "annotations": annotations});
    match kind {
        "Pod" => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
        _ => json!({
            "apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "x"},
            "spec": {"replicas": 2, "template": {"metadata": metadata, "spec": spec}}
        }),
    }
}

fn pod_path(kind: &str) -> &'static str {
    if kind == "Pod" {
        "spec"
    } else {
        "spec.template.spec"
    }
}

fn pod_metadata_path(kind: &str) -> &'static str {
    if kind == "Pod" {
        "metadata"
    } else {
        "spec.template.metadata"
    }
}

fn with_container_sc(sc: Value) -> Value {
    json!({"containers": [{"name": "orb", "image": "busybox:1.36", "securityContext": sc}]})
}

#[rstest]
#[case::host_network(json!({"hostNetwork": true}), HighRiskField::HostNetwork, "hostNetwork", "true")]
#[case::host_pid(json!({"hostPID": true}), HighRiskField::HostPid, "hostPID", "true")]
#[case::host_ipc(json!({"hostIPC": true}), HighRiskField::HostIpc, "hostIPC", "true")]
#[case::host_path(json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}]}),
    HighRiskField::HostPathVolume, "volumes[1].hostPath", r#"{"path":"/"}"#)]
#[case::host_port(json!({"containers": [{"name": "orb", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
    HighRiskField::HostPort, "containers[0].ports[0].hostPort", "8080")]
#[case::privileged(with_container_sc(json!({"privileged": true})),
    HighRiskField::Privileged, "containers[0].securityContext.privileged", "true")]
#[case::privilege_escalation(with_container_sc(json!({"allowPrivilegeEscalation": true})),
    HighRiskField::AllowPrivilegeEscalation, "containers[0].securityContext.allowPrivilegeEscalation", "true")]
#[case::container_root(with_container_sc(json!({"runAsUser": 0})),
    HighRiskField::RunAsRoot, "containers[0].securityContext.runAsUser", "0")]
#[case::pod_root(json!({"securityContext": {"runAsUser": 0}}),
    HighRiskField::RunAsRoot, "securityContext.runAsUser", "0")]
#[case::sys_admin(with_container_sc(json!({"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}})),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[1]", "\"SYS_ADMIN\"")]
#[case::net_admin(with_container_sc(json!({"capabilities": {"add": ["NET_ADMIN"]}})),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[0]", "\"NET_ADMIN\"")]
#[case::net_raw_with_prefix(with_container_sc(json!({"capabilities": {"add": ["CAP_NET_RAW"]}})),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[0]", "\"CAP_NET_RAW\"")]
#[case::all_caps(with_container_sc(json!({"capabilities": {"add": ["all"]}})),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[0]", "\"all\"")]
#[case::proc_mount(with_container_sc(json!({"procMount": "Unmasked"})),
    HighRiskField::ProcMountUnmasked, "containers[0].securityContext.procMount", "\"Unmasked\"")]
#[case::container_seccomp(with_container_sc(json!({"seccompProfile": {"type": "Unconfined"}})),
    HighRiskField::SeccompUnconfined, "containers[0].securityContext.seccompProfile.type", "\"Unconfined\"")]
#[case::pod_seccomp(json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
    HighRiskField::SeccompUnconfined, "securityContext.seccompProfile.type", "\"Unconfined\"")]
#[case::container_apparmor(with_container_sc(json!({"appArmorProfile": {"type": "Unconfined"}})),
    HighRiskField::AppArmorUnconfined, "containers[0].securityContext.appArmorProfile.type", "\"Unconfined\"")]
#[case::pod_apparmor(json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
    HighRiskField::AppArmorUnconfined, "securityContext.appArmorProfile.type", "\"Unconfined\"")]
#[case::init_container(json!({"initContainers": [{"name": "init", "securityContext": {"privileged": true}}]}),
    HighRiskField::Privileged, "initContainers[0].securityContext.privileged", "true")]
#[case::ephemeral_container(json!({"ephemeralContainers": [{"name": "debug", "securityContext": {"runAsUser": 0}}]}),
    HighRiskField::RunAsRoot, "ephemeralContainers[0].securityContext.runAsUser", "0")]
#[case::capability_not_spelt_as_the_apiserver_does(with_container_sc(json!({"capabilities": {"add": ["cap_chown"]}})),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[0]", "\"cap_chown\"")]
#[case::pod_host_process(json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}),
    HighRiskField::HostProcess, "securityContext.windowsOptions.hostProcess", "true")]
#[case::container_host_process(with_container_sc(json!({"windowsOptions": {"hostProcess": true}})),
    HighRiskField::HostProcess, "containers[0].securityContext.windowsOptions.hostProcess", "true")]
#[case::pod_selinux_type(json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
    HighRiskField::SeLinuxOptions, "securityContext.seLinuxOptions", r#"{"type":"spc_t"}"#)]
#[case::container_selinux_user(with_container_sc(json!({"seLinuxOptions": {"user": "system_u"}})),
    HighRiskField::SeLinuxOptions, "containers[0].securityContext.seLinuxOptions", r#"{"user":"system_u"}"#)]
#[case::unsafe_sysctl(json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}]}}),
    HighRiskField::UnsafeSysctl, "securityContext.sysctls[1].name", "\"kernel.msgmax\"")]
#[case::probe_host(json!({"containers": [{"name": "orb", "livenessProbe": {"httpGet": {"port": 80, "host": "10.0.0.1"}}}]}),
    HighRiskField::ProbeHost, "containers[0].livenessProbe.httpGet.host", "\"10.0.0.1\"")]
#[case::lifecycle_host(json!({"containers": [{"name": "orb", "lifecycle": {"preStop": {"tcpSocket": {"port": 80, "host": "metadata"}}}}]}),
    HighRiskField::ProbeHost, "containers[0].lifecycle.preStop.tcpSocket.host", "\"metadata\"")]
#[case::proc_mount_other(with_container_sc(json!({"procMount": "Something"})),
    HighRiskField::ProcMountUnmasked, "containers[0].securityContext.procMount", "\"Something\"")]
#[case::node_name(json!({"nodeName": "node-1"}), HighRiskField::NodeName, "nodeName", "\"node-1\"")]
#[case::token_audience(json!({"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}]}),
    HighRiskField::TokenAudience, "volumes[0].projected.sources[0].serviceAccountToken.audience", "\"vault\"")]
#[case::git_repo(json!({"volumes": [{"name": "g", "gitRepo": {"repository": "https://x"}}]}),
    HighRiskField::VolumeType, "volumes[0].gitRepo", r#"{"repository":"https://x"}"#)]
#[case::nfs(json!({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}),
    HighRiskField::VolumeType, "volumes[0].nfs", r#"{"path":"/","server":"s"}"#)]
#[case::inline_csi(json!({"volumes": [{"name": "c", "csi": {"driver": "d"}}]}),
    HighRiskField::VolumeType, "volumes[0].csi", r#"{"driver":"d"}"#)]
#[case::flex(json!({"volumes": [{"name": "f", "flexVolume": {"driver": "d"}}]}),
    HighRiskField::VolumeType, "volumes[0].flexVolume", r#"{"driver":"d"}"#)]
#[case::pod_run_as_group_0(json!({"securityContext": {"runAsGroup": 0}}),
    HighRiskField::RootGroup, "securityContext.runAsGroup", "0")]
#[case::container_run_as_group_0(with_container_sc(json!({"runAsGroup": 0})),
    HighRiskField::RootGroup, "containers[0].securityContext.runAsGroup", "0")]
#[case::fs_group_0(json!({"securityContext": {"fsGroup": 0}}),
    HighRiskField::RootGroup, "securityContext.fsGroup", "0")]
#[case::supplemental_group_0(json!({"securityContext": {"supplementalGroups": [5, 0]}}),
    HighRiskField::RootGroup, "securityContext.supplementalGroups[1]", "0")]
fn each_high_risk_field_is_found_in_each_kind(
    #[case] patch: Value,
    #[case] field: HighRiskField,
    #[case] relative_path: &str,
    #[case] value: &str,
) {
    for kind in KINDS {
        let found = audit(&body(kind, &patch, &json!({})));
        let expected_path = format!("{}.{relative_path}", pod_path(kind));
        assert_eq!(found.len(), 1, "{kind}: {found:?}");
        assert_eq!(found[0].field, field, "{kind}");
        assert_eq!(found[0].path, expected_path, "{kind}");
        assert_eq!(found[0].value, value, "{kind}");

        let err =
            enforce_audit_policy(AuditMode::Reject, &body(kind, &patch, &json!({}))).unwrap_err();
        assert_eq!(err.kind, kind);
        assert!(err.to_string().contains(&expected_path), "{err}");
        assert!(err.to_string().contains(field.fix()), "{err}");
    }
}

#[rstest]
#[case::legacy_seccomp_pod(
    "seccomp.security.alpha.kubernetes.io/pod",
    HighRiskField::SeccompUnconfined
)]
#[case::legacy_seccomp_container(
    "container.seccomp.security.alpha.kubernetes.io/orb",
    HighRiskField::SeccompUnconfined
)]
#[case::legacy_apparmor(
    "container.apparmor.security.beta.kubernetes.io/orb",
    HighRiskField::AppArmorUnconfined
)]
fn legacy_unconfined_annotations_are_found_in_each_kind(
    #[case] key: &str,
    #[case] field: HighRiskField,
) {
    for kind in KINDS {
        let found = audit(&body(kind, &json!({}), &json!({ key: "unconfined" })));
        assert_eq!(found.len(), 1, "{kind}: {found:?}");
        assert_eq!(found[0].field, field);
        assert_eq!(
            found[0].path,
            format!("{}.annotations[{key:?}]", pod_metadata_path(kind))
        );
    }
}

#[rstest]
#[case::safe_defaults(json!({}))]
#[case::false_flags(json!({"hostNetwork": false, "hostPID": false, "hostIPC": false}))]
#[case::baseline_capabilities(with_container_sc(json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]}})))]
#[case::non_root(json!({"securityContext": {"runAsUser": 1000, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}}))]
#[case::host_port_zero(json!({"containers": [{"name": "orb", "ports": [{"containerPort": 80, "hostPort": 0}]}]}))]
#[case::default_proc_mount(with_container_sc(json!({"procMount": "Default", "privileged": false})))]
#[case::other_volumes(json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "configMap": {"name": "c"}}]}))]
#[case::safe_sysctls_and_selinux(json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_notsent_lowat", "value": "1"}],
    "seLinuxOptions": {"type": "container_t", "level": "s0:c1"}, "runAsGroup": 1000, "fsGroup": 1000, "supplementalGroups": [1000]}}))]
#[case::apiserver_token(json!({"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}))]
#[case::probe_without_host(json!({"containers": [{"name": "orb", "readinessProbe": {"httpGet": {"port": 80}}}]}))]
fn safe_specs_have_no_findings(#[case] patch: Value) {
    for kind in KINDS {
        assert_eq!(
            audit(&body(kind, &patch, &json!({"a": "unconfined"}))),
            vec![],
            "{kind}"
        );
    }
}

#[test]
fn reject_lists_every_finding() {
    let patch = json!({
        "hostNetwork": true,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "orb", "securityContext": {"privileged": true, "runAsUser": 0}}]
    });
    let err = enforce_audit_policy(AuditMode::Reject, &body("Deployment", &patch, &json!({})))
        .unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn warn_mode_returns_the_findings_and_off_mode_is_silent() {
    let risky = body(
        "Job",
        &json!({"hostPID": true, "hostIPC": true}),
        &json!({}),
    );
    let warnings = enforce_audit_policy(AuditMode::Warn, &risky).unwrap();
    assert_eq!(
        warnings.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        ["spec.template.spec.hostPID", "spec.template.spec.hostIPC"]
    );
    assert_eq!(enforce_audit_policy(AuditMode::Off, &risky), Ok(vec![]));
    let safe = body("Job", &json!({}), &json!({}));
    assert_eq!(enforce_audit_policy(AuditMode::Reject, &safe), Ok(vec![]));
}

#[rstest]
#[case::defaults(true, true, AuditMode::Reject)]
#[case::warn_only(true, false, AuditMode::Warn)]
#[case::audit_off(false, true, AuditMode::Off)]
#[case::both_off(false, false, AuditMode::Off)]
fn mode_follows_the_two_settings(
    #[case] audit: bool,
    #[case] reject: bool,
    #[case] mode: AuditMode,
) {
    let cfg = K8sProviderConfig {
        audit_high_risk_pod_fields: audit,
        reject_high_risk_pod_fields: reject,
        ..K8sProviderConfig::default()
    };
    assert_eq!(AuditMode::from_config(&cfg).mode, mode);
}

#[test]
fn a_cronjob_like_body_is_audited_too() {
    let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostNetwork": true, "containers": []}}}}}});
    let found = audit(&cron);
    assert_eq!(
        found[0].path,
        "spec.jobTemplate.spec.template.spec.hostNetwork"
    );
}

#[test]
fn one_body_with_every_high_risk_field_yields_every_finding_kind() {
    let patch = json!({
        "hostNetwork": true, "hostPID": true, "hostIPC": true,
        "securityContext": {"runAsUser": 0},
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "orb", "ports": [{"containerPort": 1, "hostPort": 1}],
            "securityContext": {"privileged": true, "allowPrivilegeEscalation": true,
                "capabilities": {"add": ["SYS_ADMIN"]}, "procMount": "Unmasked",
                "seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"}}}]
    });
    for kind in KINDS {
        let mut fields: Vec<HighRiskField> = audit(&body(kind, &patch, &json!({})))
            .iter()
            .map(|f| f.field)
            .collect();
        fields.sort();
        fields.dedup();
        assert_eq!(fields, HighRiskField::ALL.to_vec(), "{kind}");
    }
}

#[rstest]
#[case::finalizers(json!({"finalizers": ["example.com/never"]}), HighRiskField::Finalizers, "finalizers")]
#[case::owner_references(json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]}),
    HighRiskField::OwnerReferences, "ownerReferences")]
#[case::another_orbs_label(json!({"labels": {"orb.io/team": "a", "other-orb.io/request-id": "req-1"}}),
    HighRiskField::ForeignOrbLabel, "labels[\"other-orb.io/request-id\"]")]
fn metadata_rules_hold_for_the_object_and_the_pod_template(
    #[case] metadata: Value,
    #[case] field: HighRiskField,
    #[case] relative_path: &str,
) {
    for kind in KINDS {
        let mut object = body(kind, &json!({}), &json!({}));
        crate::native_spec::deep_merge(
            &mut object["metadata"],
            metadata.clone(),
            crate::native_spec::ListMerge::Replace,
        );
        let found = audit(&object);
        assert_eq!(found.len(), 1, "{kind}: {found:?}");
        assert_eq!(found[0].field, field);
        assert_eq!(found[0].path, format!("metadata.{relative_path}"));
        if kind != "Pod" {
            let mut object = body(kind, &json!({}), &json!({}));
            crate::native_spec::deep_merge(
                &mut object["spec"]["template"]["metadata"],
                metadata.clone(),
                crate::native_spec::ListMerge::Replace,
            );
            let found = audit(&object);
            assert_eq!(
                found[0].path,
                format!("spec.template.metadata.{relative_path}")
            );
        }
    }
}

#[test]
fn the_label_prefix_is_the_operators() {
    let object = json!({"kind": "Pod", "metadata": {"labels": {"orb.io/request-id": "r"}}, "spec": {"containers": []}});
    let other = AuditPolicy {
        label_prefix: "batch.example.com".into(),
        ..AuditMode::Reject.into()
    };
    assert_eq!(audit(&object), vec![]);
    assert_eq!(
        audit_workload_body(&object, &other)[0].field,
        HighRiskField::ForeignOrbLabel
    );
}

fn restricted() -> AuditPolicy {
    AuditPolicy {
        profile: PodSecurityProfile::Restricted,
        ..AuditMode::Reject.into()
    }
}

/// A pod spec profile restricted accepts.
fn restricted_patch() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "orb", "image": "busybox:1.36", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]
    })
}

#[test]
fn profile_restricted_accepts_a_restricted_pod_and_baseline_accepts_it_too() {
    for kind in KINDS {
        let object = body(kind, &restricted_patch(), &json!({}));
        assert_eq!(
            audit_workload_body(&object, &restricted()),
            vec![],
            "{kind}"
        );
        assert_eq!(audit(&object), vec![], "{kind}");
    }
}

#[rstest]
#[case::escalation_unset(json!({"containers": [{"name": "orb", "securityContext": {"capabilities": {"drop": ["ALL"]}}}]}),
    HighRiskField::AllowPrivilegeEscalation, "containers[0].securityContext.allowPrivilegeEscalation", "(not set)")]
#[case::drop_all_missing(json!({"containers": [{"name": "orb", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["NET_RAW"]}}}]}),
    HighRiskField::CapabilitiesNotDropped, "containers[0].securityContext.capabilities.drop", "(not set)")]
#[case::baseline_capability(json!({"containers": [{"name": "orb", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}]}),
    HighRiskField::AddedCapability, "containers[0].securityContext.capabilities.add[0]", "\"CHOWN\"")]
#[case::run_as_non_root_unset(json!({"securityContext": {"runAsNonRoot": null}}),
    HighRiskField::RunAsNonRootUnset, "containers[0].securityContext.runAsNonRoot", "(not set)")]
#[case::pod_run_as_non_root_false(json!({"securityContext": {"runAsNonRoot": false},
    "containers": [{"name": "orb", "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
    HighRiskField::RunAsNonRootUnset, "securityContext.runAsNonRoot", "false")]
#[case::seccomp_unset(json!({"securityContext": {"seccompProfile": null}}),
    HighRiskField::SeccompUnconfined, "containers[0].securityContext.seccompProfile.type", "(not set)")]
#[case::volume_outside_the_list(json!({"volumes": [{"name": "r", "rbd": {"image": "i", "monitors": ["m"]}}]}),
    HighRiskField::VolumeType, "volumes[0].rbd", r#"{"image":"i","monitors":["m"]}"#)]
fn profile_restricted_finds_what_baseline_lets_through(
    #[case] patch: Value,
    #[case] field: HighRiskField,
    #[case] relative_path: &str,
    #[case] value: &str,
) {
    for kind in KINDS {
        let mut spec = restricted_patch();
        crate::native_spec::deep_merge(
            &mut spec,
            patch.clone(),
            crate::native_spec::ListMerge::Replace,
        );
        let object = body(kind, &spec, &json!({}));
        let found = audit_workload_body(&object, &restricted());
        assert_eq!(found.len(), 1, "{kind}: {found:?}");
        assert_eq!(found[0].field, field, "{kind}");
        assert_eq!(found[0].path, format!("{}.{relative_path}", pod_path(kind)));
        assert_eq!(found[0].value, value);
        assert!(
            field == HighRiskField::AddedCapability || audit(&object).is_empty(),
            "{kind}"
        );
    }
}

#[test]
fn the_profile_setting_is_read_and_an_unknown_name_is_refused_with_the_fix() {
    let cfg = K8sProviderConfig {
        pod_security_profile: "restricted".into(),
        ..K8sProviderConfig::default()
    };
    assert_eq!(
        AuditPolicy::from_config(&cfg).profile,
        PodSecurityProfile::Restricted
    );
    assert_eq!(
        AuditPolicy::from_config(&K8sProviderConfig::default()).profile,
        PodSecurityProfile::Baseline
    );
    let err = "privileged".parse::<PodSecurityProfile>().unwrap_err();
    assert!(err.contains("reject_high_risk_pod_fields=false"), "{err}");
}

#[test]
fn an_unknown_profile_is_a_configuration_error_naming_the_field_and_the_fix() {
    use crate::config::{ConfigLayers, FileLayer};
    let block = json!({"pod_security_profile": "privileged"});
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "config.json".into(),
            block: block.as_object().cloned().unwrap_or_default(),
        }),
        Vec::<(String, String)>::new(),
    );
    let err = layers.resolve(None).unwrap_err().to_string();
    assert!(err.contains("pod_security_profile"), "{err}");
    assert!(err.contains("\"restricted\""), "{err}");
}
