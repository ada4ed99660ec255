//! Finding high-risk pod fields in a workload body. Every pod spec in the body is inspected:
//! `spec` of a Pod, `spec.template.spec` of a Deployment, StatefulSet or Job (and
//! `spec.jobTemplate.spec.template.spec`, should a CronJob body ever pass through), at pod
//! level and in every container, init container and ephemeral container.

use serde_json::Value;

/// Capabilities a container may add without a finding: the Pod Security Standards
/// "baseline" list. Anything else (SYS_ADMIN, NET_ADMIN, NET_RAW, ALL, …) is high-risk.
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

const LEGACY_SECCOMP_POD: &str = "seccomp.security.alpha.kubernetes.io/pod";
const LEGACY_SECCOMP_CONTAINER: &str = "container.seccomp.security.alpha.kubernetes.io/";
const LEGACY_APPARMOR_CONTAINER: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The kinds of high-risk field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HighRiskField {
    HostNetwork,
    HostPid,
    HostIpc,
    HostPathVolume,
    HostPort,
    Privileged,
    AllowPrivilegeEscalation,
    RunAsRoot,
    AddedCapability,
    ProcMountUnmasked,
    SeccompUnconfined,
    AppArmorUnconfined,
}

impl HighRiskField {
    pub const ALL: [HighRiskField; 12] = [
        Self::HostNetwork,
        Self::HostPid,
        Self::HostIpc,
        Self::HostPathVolume,
        Self::HostPort,
        Self::Privileged,
        Self::AllowPrivilegeEscalation,
        Self::RunAsRoot,
        Self::AddedCapability,
        Self::ProcMountUnmasked,
        Self::SeccompUnconfined,
        Self::AppArmorUnconfined,
    ];

    /// Why the field is dangerous, in a few words.
    pub fn risk(self) -> &'static str {
        match self {
            Self::HostNetwork => "shares the node's network namespace",
            Self::HostPid => "sees and can signal every process on the node",
            Self::HostIpc => "shares the node's IPC namespace",
            Self::HostPathVolume => "mounts a directory of the node's filesystem",
            Self::HostPort => "binds a port on the node's address",
            Self::Privileged => "runs with full access to the node's devices and kernel",
            Self::AllowPrivilegeEscalation => "lets processes gain more privileges (setuid)",
            Self::RunAsRoot => "runs as root (uid 0)",
            Self::AddedCapability => "adds a Linux capability outside the baseline set",
            Self::ProcMountUnmasked => "exposes the unmasked /proc of the node",
            Self::SeccompUnconfined => "runs without a seccomp filter",
            Self::AppArmorUnconfined => "runs without an AppArmor profile",
        }
    }

    /// How to make the finding go away.
    pub fn fix(self) -> &'static str {
        match self {
            Self::HostNetwork => "remove hostNetwork or set it to false",
            Self::HostPid => "remove hostPID or set it to false",
            Self::HostIpc => "remove hostIPC or set it to false",
            Self::HostPathVolume => "use an emptyDir, configMap, secret or PVC volume instead",
            Self::HostPort => "remove hostPort and reach the pod through a Service",
            Self::Privileged => "remove privileged or set it to false",
            Self::AllowPrivilegeEscalation => "set allowPrivilegeEscalation to false",
            Self::RunAsRoot => "run as a non-zero uid (e.g. runAsUser: 1000, runAsNonRoot: true)",
            Self::AddedCapability => {
                "drop it from capabilities.add (allowed: AUDIT_WRITE, CHOWN, DAC_OVERRIDE, \
                 FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, \
                 SETUID, SYS_CHROOT)"
            }
            Self::ProcMountUnmasked => "remove procMount or set it to Default",
            Self::SeccompUnconfined => "use seccompProfile type RuntimeDefault or Localhost",
            Self::AppArmorUnconfined => "use appArmorProfile type RuntimeDefault or Localhost",
        }
    }
}

/// One high-risk field, where it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFinding {
    pub field: HighRiskField,
    /// JSON path in the body, e.g. `spec.template.spec.containers[0].securityContext.privileged`.
    pub path: String,
    /// The offending value as JSON text (`true`, `0`, `"SYS_ADMIN"`, …).
    pub value: String,
    /// The container it belongs to, when it is container-level.
    pub container: Option<String>,
}

impl std::fmt::Display for AuditFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}", self.path, self.value)?;
        if let Some(name) = &self.container {
            write!(f, " (container {name:?})")?;
        }
        write!(f, ": {}; fix: {}", self.field.risk(), self.field.fix())
    }
}

struct Collector(Vec<AuditFinding>);

impl Collector {
    fn push(&mut self, field: HighRiskField, path: String, value: &Value, container: Option<&str>) {
        self.0.push(AuditFinding {
            field,
            path,
            value: value.to_string(),
            container: container.map(str::to_string),
        });
    }
}

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

fn profile_unconfined(v: Option<&Value>) -> bool {
    v.and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("Unconfined"))
}

fn is_uid_zero(v: Option<&Value>) -> bool {
    v.and_then(Value::as_i64) == Some(0)
}

/// Pod-level and container-level securityContext fields both can hold.
fn audit_common_security_context(
    found: &mut Collector,
    sc: &Value,
    path: &str,
    container: Option<&str>,
) {
    if is_uid_zero(sc.get("runAsUser")) {
        found.push(
            HighRiskField::RunAsRoot,
            format!("{path}.runAsUser"),
            &sc["runAsUser"],
            container,
        );
    }
    if profile_unconfined(sc.get("seccompProfile")) {
        found.push(
            HighRiskField::SeccompUnconfined,
            format!("{path}.seccompProfile.type"),
            &sc["seccompProfile"]["type"],
            container,
        );
    }
    if profile_unconfined(sc.get("appArmorProfile")) {
        found.push(
            HighRiskField::AppArmorUnconfined,
            format!("{path}.appArmorProfile.type"),
            &sc["appArmorProfile"]["type"],
            container,
        );
    }
}

fn normalized_capability(raw: &str) -> String {
    let upper = raw.trim().to_ascii_uppercase();
    upper
        .strip_prefix("CAP_")
        .map(str::to_string)
        .unwrap_or(upper)
}

fn audit_container(found: &mut Collector, container: &Value, path: &str) {
    let name = container.get("name").and_then(Value::as_str);
    if let Some(ports) = container.get("ports").and_then(Value::as_array) {
        for (i, port) in ports.iter().enumerate() {
            if port
                .get("hostPort")
                .and_then(Value::as_i64)
                .is_some_and(|p| p != 0)
            {
                found.push(
                    HighRiskField::HostPort,
                    format!("{path}.ports[{i}].hostPort"),
                    &port["hostPort"],
                    name,
                );
            }
        }
    }
    let Some(sc) = container.get("securityContext").filter(|v| v.is_object()) else {
        return;
    };
    let sc_path = format!("{path}.securityContext");
    if is_true(sc.get("privileged")) {
        found.push(
            HighRiskField::Privileged,
            format!("{sc_path}.privileged"),
            &sc["privileged"],
            name,
        );
    }
    if is_true(sc.get("allowPrivilegeEscalation")) {
        found.push(
            HighRiskField::AllowPrivilegeEscalation,
            format!("{sc_path}.allowPrivilegeEscalation"),
            &sc["allowPrivilegeEscalation"],
            name,
        );
    }
    audit_common_security_context(found, sc, &sc_path, name);
    if let Some(added) = sc.pointer("/capabilities/add").and_then(Value::as_array) {
        for (i, cap) in added.iter().enumerate() {
            let safe = cap.as_str().is_some_and(|c| {
                SAFE_ADDED_CAPABILITIES.contains(&normalized_capability(c).as_str())
            });
            if !safe {
                found.push(
                    HighRiskField::AddedCapability,
                    format!("{sc_path}.capabilities.add[{i}]"),
                    cap,
                    name,
                );
            }
        }
    }
    if sc.get("procMount").and_then(Value::as_str) == Some("Unmasked") {
        found.push(
            HighRiskField::ProcMountUnmasked,
            format!("{sc_path}.procMount"),
            &sc["procMount"],
            name,
        );
    }
}

fn audit_legacy_annotations(found: &mut Collector, metadata: Option<&Value>, path: &str) {
    let Some(annotations) = metadata
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    else {
        return;
    };
    for (key, value) in annotations {
        let unconfined = value
            .as_str()
            .is_some_and(|v| v.eq_ignore_ascii_case("unconfined"));
        if !unconfined {
            continue;
        }
        let field = if key == LEGACY_SECCOMP_POD || key.starts_with(LEGACY_SECCOMP_CONTAINER) {
            HighRiskField::SeccompUnconfined
        } else if key.starts_with(LEGACY_APPARMOR_CONTAINER) {
            HighRiskField::AppArmorUnconfined
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

/// Findings in one pod spec at `path` (e.g. `spec.template.spec`).
pub fn audit_pod_spec(spec: &Value, path: &str) -> Vec<AuditFinding> {
    let mut found = Collector(Vec::new());
    for (key, field) in [
        ("hostNetwork", HighRiskField::HostNetwork),
        ("hostPID", HighRiskField::HostPid),
        ("hostIPC", HighRiskField::HostIpc),
    ] {
        if is_true(spec.get(key)) {
            found.push(field, format!("{path}.{key}"), &spec[key], None);
        }
    }
    if let Some(sc) = spec.get("securityContext").filter(|v| v.is_object()) {
        audit_common_security_context(&mut found, sc, &format!("{path}.securityContext"), None);
    }
    if let Some(volumes) = spec.get("volumes").and_then(Value::as_array) {
        for (i, volume) in volumes.iter().enumerate() {
            if let Some(host_path) = volume.get("hostPath").filter(|v| !v.is_null()) {
                found.push(
                    HighRiskField::HostPathVolume,
                    format!("{path}.volumes[{i}].hostPath"),
                    host_path,
                    None,
                );
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(containers) = spec.get(list).and_then(Value::as_array) {
            for (i, container) in containers.iter().enumerate() {
                audit_container(&mut found, container, &format!("{path}.{list}[{i}]"));
            }
        }
    }
    found.0
}

/// Findings in every pod spec of a workload body (Pod, Deployment, StatefulSet, Job), plus
/// the legacy seccomp/AppArmor annotations on the pod metadata.
pub fn audit_workload_body(body: &Value) -> Vec<AuditFinding> {
    let mut out = Vec::new();
    if body.get("kind").and_then(Value::as_str) == Some("Pod")
        || body.pointer("/spec/containers").is_some()
    {
        if let Some(spec) = body.get("spec") {
            out.extend(audit_pod_spec(spec, "spec"));
        }
        let mut c = Collector(Vec::new());
        audit_legacy_annotations(&mut c, body.get("metadata"), "metadata");
        out.extend(c.0);
    }
    for (pointer, path) in [
        ("/spec/template", "spec.template"),
        (
            "/spec/jobTemplate/spec/template",
            "spec.jobTemplate.spec.template",
        ),
    ] {
        let Some(pod_template) = body.pointer(pointer) else {
            continue;
        };
        if let Some(spec) = pod_template.get("spec") {
            out.extend(audit_pod_spec(spec, &format!("{path}.spec")));
        }
        let mut c = Collector(Vec::new());
        audit_legacy_annotations(
            &mut c,
            pod_template.get("metadata"),
            &format!("{path}.metadata"),
        );
        out.extend(c.0);
    }
    out
}
