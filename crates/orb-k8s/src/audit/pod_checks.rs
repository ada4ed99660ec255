//! The checks behind the audit, each reading the fields the Kubernetes Pod Security Standards
//! read (k8s.io/pod-security-admission v0.37, `policy/check_*.go`) with the same allowed
//! values, plus seed 001's list and orb's own rules. Where orb differs it is stricter, never
//! laxer: no exemption for Windows pods or user-namespace pods (`hostUsers: false`).

use serde_json::Value;

use super::AuditPolicy;
use super::PodSecurityProfile;
use super::findings::{Collector, HighRiskField as F};

/// Capabilities a container may add under profile baseline (spelt exactly so, as the
/// apiserver compares them). Anything else (SYS_ADMIN, NET_RAW, ALL, cap_chown, …) is found.
pub const SAFE_ADDED_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls a pod may set: the Pod Security Standards' namespaced safe set of Kubernetes 1.37.
const SAFE_SYSCTLS: [&str; 14] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ping_group_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume types profile restricted allows. `csi` (inline CSI), which the standard allows, is
/// left out: an inline driver volume reaches whatever the driver reaches.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Volume types refused in every profile (besides hostPath): they reach the node (flexVolume
/// drivers run as root there), the network (nfs) or fetch code (gitRepo runs git on the node).
const NODE_OR_NETWORK_VOLUMES: [&str; 4] = ["gitRepo", "flexVolume", "csi", "nfs"];

const LEGACY_SECCOMP_POD: &str = "seccomp.security.alpha.kubernetes.io/pod";
const LEGACY_SECCOMP_CONTAINER: &str = "container.seccomp.security.alpha.kubernetes.io/";
const LEGACY_APPARMOR_CONTAINER: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The label names orb stamps under its `label_prefix`.
const ORB_LABEL_NAMES: [&str; 5] = [
    "managed",
    "request-id",
    "machine-id",
    "provider-api",
    "template-id",
];

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

fn is_zero(v: Option<&Value>) -> bool {
    v.and_then(Value::as_i64) == Some(0)
}

/// A `seccompProfile`/`appArmorProfile` that is set to anything but RuntimeDefault/Localhost.
fn bad_profile(v: Option<&Value>) -> bool {
    v.filter(|p| !p.is_null()).is_some_and(|p| {
        !matches!(
            p.get("type").and_then(Value::as_str),
            Some("RuntimeDefault" | "Localhost")
        )
    })
}

fn profile_type(v: &Value) -> &Value {
    v.get("type").unwrap_or(&Value::Null)
}

/// Fields pod and container securityContexts share.
fn check_security_context(found: &mut Collector, sc: &Value, path: &str, container: Option<&str>) {
    for key in ["runAsUser", "runAsGroup"] {
        if is_zero(sc.get(key)) {
            let field = if key == "runAsUser" {
                F::RunAsRoot
            } else {
                F::RootGroup
            };
            found.push(field, format!("{path}.{key}"), &sc[key], container);
        }
    }
    for (key, field) in [
        ("seccompProfile", F::SeccompUnconfined),
        ("appArmorProfile", F::AppArmorUnconfined),
    ] {
        if bad_profile(sc.get(key)) {
            found.push(
                field,
                format!("{path}.{key}.type"),
                profile_type(&sc[key]),
                container,
            );
        }
    }
    if let Some(se) = sc.get("seLinuxOptions").filter(|v| v.is_object()) {
        let bad_type =
            !SELINUX_TYPES.contains(&se.get("type").and_then(Value::as_str).unwrap_or(""));
        let set = |k: &str| {
            se.get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if bad_type || set("user") || set("role") {
            found.push(
                F::SeLinuxOptions,
                format!("{path}.seLinuxOptions"),
                se,
                container,
            );
        }
    }
    if is_true(sc.pointer("/windowsOptions/hostProcess")) {
        found.push(
            F::HostProcess,
            format!("{path}.windowsOptions.hostProcess"),
            &sc["windowsOptions"]["hostProcess"],
            container,
        );
    }
}

fn check_pod_security_context(found: &mut Collector, sc: &Value, path: &str) {
    check_security_context(found, sc, path, None);
    if is_zero(sc.get("fsGroup")) {
        found.push(
            F::RootGroup,
            format!("{path}.fsGroup"),
            &sc["fsGroup"],
            None,
        );
    }
    for (i, gid) in array(sc, "supplementalGroups").iter().enumerate() {
        if gid.as_i64() == Some(0) {
            found.push(
                F::RootGroup,
                format!("{path}.supplementalGroups[{i}]"),
                gid,
                None,
            );
        }
    }
    for (i, sysctl) in array(sc, "sysctls").iter().enumerate() {
        let name = sysctl.get("name").and_then(Value::as_str).unwrap_or("");
        if !SAFE_SYSCTLS.contains(&name) {
            found.push(
                F::UnsafeSysctl,
                format!("{path}.sysctls[{i}].name"),
                &sysctl["name"],
                None,
            );
        }
    }
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn check_volumes(found: &mut Collector, spec: &Value, path: &str, profile: PodSecurityProfile) {
    for (i, volume) in array(spec, "volumes").iter().enumerate() {
        let Some(fields) = volume.as_object() else {
            continue;
        };
        let vpath = format!("{path}.volumes[{i}]");
        for (source, value) in fields.iter().filter(|(k, v)| *k != "name" && !v.is_null()) {
            let refused = match profile {
                PodSecurityProfile::Baseline => NODE_OR_NETWORK_VOLUMES.contains(&source.as_str()),
                PodSecurityProfile::Restricted => !RESTRICTED_VOLUMES.contains(&source.as_str()),
            };
            if source == "hostPath" {
                found.push(F::HostPathVolume, format!("{vpath}.hostPath"), value, None);
            } else if refused {
                found.push(F::VolumeType, format!("{vpath}.{source}"), value, None);
            }
        }
        for (j, projection) in array(&volume["projected"], "sources").iter().enumerate() {
            let audience = projection.pointer("/serviceAccountToken/audience");
            if audience
                .and_then(Value::as_str)
                .is_some_and(|a| !a.is_empty())
            {
                found.push(
                    F::TokenAudience,
                    format!("{vpath}.projected.sources[{j}].serviceAccountToken.audience"),
                    audience.unwrap_or(&Value::Null),
                    None,
                );
            }
        }
    }
}

/// `host` of probes' and lifecycle hooks' httpGet/tcpSocket.
fn check_probe_hosts(found: &mut Collector, container: &Value, path: &str, name: Option<&str>) {
    let handlers = [
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle.postStart",
        "lifecycle.preStop",
    ];
    for handler in handlers {
        let pointer = format!("/{}", handler.replace('.', "/"));
        let Some(h) = container.pointer(&pointer) else {
            continue;
        };
        for action in ["httpGet", "tcpSocket"] {
            if let Some(host) = h.pointer(&format!("/{action}/host"))
                && host.as_str().is_some_and(|s| !s.is_empty())
            {
                found.push(
                    F::ProbeHost,
                    format!("{path}.{handler}.{action}.host"),
                    host,
                    name,
                );
            }
        }
    }
}

struct PodLevel {
    profile: PodSecurityProfile,
    run_as_non_root: bool,
    seccomp_set: bool,
}

fn check_container(found: &mut Collector, container: &Value, path: &str, pod: &PodLevel) {
    let name = container.get("name").and_then(Value::as_str);
    for (i, port) in array(container, "ports").iter().enumerate() {
        if port
            .get("hostPort")
            .and_then(Value::as_i64)
            .is_some_and(|p| p != 0)
        {
            found.push(
                F::HostPort,
                format!("{path}.ports[{i}].hostPort"),
                &port["hostPort"],
                name,
            );
        }
    }
    check_probe_hosts(found, container, path, name);
    let restricted = pod.profile == PodSecurityProfile::Restricted;
    let sc_path = format!("{path}.securityContext");
    let sc = container
        .get("securityContext")
        .filter(|v| v.is_object())
        .unwrap_or(&Value::Null);
    if is_true(sc.get("privileged")) {
        found.push(
            F::Privileged,
            format!("{sc_path}.privileged"),
            &sc["privileged"],
            name,
        );
    }
    let escalation = sc.get("allowPrivilegeEscalation").filter(|v| !v.is_null());
    let escalation_path = format!("{sc_path}.allowPrivilegeEscalation");
    match escalation {
        Some(v) if v.as_bool() != Some(false) => {
            found.push(F::AllowPrivilegeEscalation, escalation_path, v, name)
        }
        None if restricted => found.push_unset(F::AllowPrivilegeEscalation, escalation_path, name),
        _ => {}
    }
    if sc.is_object() {
        check_security_context(found, sc, &sc_path, name);
    }
    let allowed: &[&str] = if restricted {
        &["NET_BIND_SERVICE"]
    } else {
        &SAFE_ADDED_CAPABILITIES
    };
    let caps = sc.get("capabilities").unwrap_or(&Value::Null);
    for (i, cap) in array(caps, "add").iter().enumerate() {
        if !cap.as_str().is_some_and(|c| allowed.contains(&c)) {
            found.push(
                F::AddedCapability,
                format!("{sc_path}.capabilities.add[{i}]"),
                cap,
                name,
            );
        }
    }
    if restricted && !array(caps, "drop").iter().any(|c| c == "ALL") {
        found.push_unset(
            F::CapabilitiesNotDropped,
            format!("{sc_path}.capabilities.drop"),
            name,
        );
    }
    if let Some(mount) = sc.get("procMount").filter(|v| !v.is_null())
        && mount.as_str() != Some("Default")
    {
        found.push(
            F::ProcMountUnmasked,
            format!("{sc_path}.procMount"),
            mount,
            name,
        );
    }
    if restricted {
        let non_root_path = format!("{sc_path}.runAsNonRoot");
        match sc.get("runAsNonRoot").filter(|v| !v.is_null()) {
            Some(v) if v.as_bool() != Some(true) => {
                found.push(F::RunAsNonRootUnset, non_root_path, v, name)
            }
            None if !pod.run_as_non_root => {
                found.push_unset(F::RunAsNonRootUnset, non_root_path, name)
            }
            _ => {}
        }
        if sc.get("seccompProfile").filter(|v| !v.is_null()).is_none() && !pod.seccomp_set {
            found.push_unset(
                F::SeccompUnconfined,
                format!("{sc_path}.seccompProfile.type"),
                name,
            );
        }
    }
}

/// Every check of one pod spec at `path`.
pub(super) fn check_pod_spec(
    found: &mut Collector,
    spec: &Value,
    path: &str,
    profile: PodSecurityProfile,
) {
    for (key, field) in [
        ("hostNetwork", F::HostNetwork),
        ("hostPID", F::HostPid),
        ("hostIPC", F::HostIpc),
    ] {
        if is_true(spec.get(key)) {
            found.push(field, format!("{path}.{key}"), &spec[key], None);
        }
    }
    if spec
        .get("nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        found.push(
            F::NodeName,
            format!("{path}.nodeName"),
            &spec["nodeName"],
            None,
        );
    }
    let sc = spec
        .get("securityContext")
        .filter(|v| v.is_object())
        .unwrap_or(&Value::Null);
    let sc_path = format!("{path}.securityContext");
    if sc.is_object() {
        check_pod_security_context(found, sc, &sc_path);
    }
    let pod = PodLevel {
        profile,
        run_as_non_root: is_true(sc.get("runAsNonRoot")),
        seccomp_set: sc.get("seccompProfile").is_some_and(|p| !p.is_null()),
    };
    if profile == PodSecurityProfile::Restricted
        && let Some(v) = sc
            .get("runAsNonRoot")
            .filter(|v| v.as_bool() == Some(false))
    {
        found.push(
            F::RunAsNonRootUnset,
            format!("{sc_path}.runAsNonRoot"),
            v,
            None,
        );
    }
    check_volumes(found, spec, path, profile);
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, container) in array(spec, list).iter().enumerate() {
            check_container(found, container, &format!("{path}.{list}[{i}]"), &pod);
        }
    }
}

/// The legacy seccomp and AppArmor annotations of a pod's metadata.
pub(super) fn check_pod_annotations(found: &mut Collector, metadata: Option<&Value>, path: &str) {
    let Some(annotations) = metadata
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    else {
        return;
    };
    for (key, value) in annotations {
        let text = value.as_str().unwrap_or("");
        let field = if key == LEGACY_SECCOMP_POD || key.starts_with(LEGACY_SECCOMP_CONTAINER) {
            // Seed 001's rule: the standard no longer reads these, orb still refuses unconfined.
            if !text.eq_ignore_ascii_case("unconfined") {
                continue;
            }
            F::SeccompUnconfined
        } else if key.starts_with(LEGACY_APPARMOR_CONTAINER) {
            // The standard's rule: empty, runtime/default or localhost/<profile>.
            if text.is_empty() || text == "runtime/default" || text.starts_with("localhost/") {
                continue;
            }
            F::AppArmorUnconfined
        } else {
            continue;
        };
        let container = key
            .rsplit_once('/')
            .map(|(_, c)| c)
            .filter(|_| key != LEGACY_SECCOMP_POD);
        found.push(
            field,
            format!("{path}.annotations[{key:?}]"),
            value,
            container,
        );
    }
}

/// Metadata a body may not carry: finalizers and owner references (which would let a
/// template keep its objects alive or hand them to another owner) and another orb
/// instance's identity labels (which would make that instance adopt or release them).
pub(super) fn check_object_metadata(
    found: &mut Collector,
    metadata: Option<&Value>,
    path: &str,
    policy: &AuditPolicy,
) {
    let Some(metadata) = metadata else {
        return;
    };
    for (key, field) in [
        ("finalizers", F::Finalizers),
        ("ownerReferences", F::OwnerReferences),
    ] {
        if !array(metadata, key).is_empty() {
            found.push(field, format!("{path}.{key}"), &metadata[key], None);
        }
    }
    let Some(labels) = metadata.get("labels").and_then(Value::as_object) else {
        return;
    };
    for (key, value) in labels {
        let foreign = key.rsplit_once('/').is_some_and(|(prefix, name)| {
            prefix != policy.label_prefix && ORB_LABEL_NAMES.contains(&name)
        });
        if foreign {
            found.push(
                F::ForeignOrbLabel,
                format!("{path}.labels[{key:?}]"),
                value,
                None,
            );
        }
    }
}
