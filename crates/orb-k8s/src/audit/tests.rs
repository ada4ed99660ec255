use rstest::rstest;
use serde_json::{Value, json};

use super::*;

const KINDS: [&str; 4] = ["Pod", "Deployment", "StatefulSet", "Job"];

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
fn each_high_risk_field_is_found_in_each_kind(
    #[case] patch: Value,
    #[case] field: HighRiskField,
    #[case] relative_path: &str,
    #[case] value: &str,
) {
    for kind in KINDS {
        let found = audit_workload_body(&body(kind, &patch, &json!({})));
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
        let found = audit_workload_body(&body(kind, &json!({}), &json!({ key: "unconfined" })));
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
#[case::baseline_capabilities(with_container_sc(json!({"capabilities": {"add": ["NET_BIND_SERVICE", "cap_chown"], "drop": ["ALL"]}})))]
#[case::non_root(json!({"securityContext": {"runAsUser": 1000, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}}))]
#[case::host_port_zero(json!({"containers": [{"name": "orb", "ports": [{"containerPort": 80, "hostPort": 0}]}]}))]
#[case::default_proc_mount(with_container_sc(json!({"procMount": "Default", "privileged": false})))]
#[case::other_volumes(json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "configMap": {"name": "c"}}]}))]
fn safe_specs_have_no_findings(#[case] patch: Value) {
    for kind in KINDS {
        assert_eq!(
            audit_workload_body(&body(kind, &patch, &json!({"a": "unconfined"}))),
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
    assert_eq!(AuditMode::from_config(&cfg), mode);
}

#[test]
fn a_cronjob_like_body_is_audited_too() {
    let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostNetwork": true, "containers": []}}}}}});
    let found = audit_workload_body(&cron);
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
        let mut fields: Vec<HighRiskField> = audit_workload_body(&body(kind, &patch, &json!({})))
            .iter()
            .map(|f| f.field)
            .collect();
        fields.sort();
        fields.dedup();
        assert_eq!(fields, HighRiskField::ALL.to_vec(), "{kind}");
    }
}
