//! Finding high-risk pod fields in a workload body. Every pod spec in the body is inspected:
//! `spec` of a Pod, `spec.template.spec` of a Deployment, StatefulSet or Job (and
//! `spec.jobTemplate.spec.template.spec`, should a CronJob body ever pass through), at pod
//! level and in every container, init container and ephemeral container; so are the object's
//! and the pod template's metadata. The checks themselves are in `pod_checks.rs`.

use serde_json::Value;

use super::pod_checks;
use super::{AuditPolicy, PodSecurityProfile};

/// The kinds of high-risk field. [`HighRiskField::ALL`] is seed 001's list;
/// [`HighRiskField::BEYOND_SEED`] the Pod Security Standards checks and orb's own rules added
/// to it (docs/security-audit.md has the table).
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
    // Pod Security Standards "baseline" checks beyond the seed's list.
    HostProcess,
    SeLinuxOptions,
    UnsafeSysctl,
    ProbeHost,
    // Pod Security Standards "restricted" checks (profile `restricted` only).
    RunAsNonRootUnset,
    CapabilitiesNotDropped,
    VolumeType,
    // orb's own rules, in both profiles.
    NodeName,
    TokenAudience,
    RootGroup,
    Finalizers,
    OwnerReferences,
    ForeignOrbLabel,
}

impl HighRiskField {
    /// Seed 001's list.
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

    /// Everything checked beyond seed 001's list.
    pub const BEYOND_SEED: [HighRiskField; 13] = [
        Self::HostProcess,
        Self::SeLinuxOptions,
        Self::UnsafeSysctl,
        Self::ProbeHost,
        Self::RunAsNonRootUnset,
        Self::CapabilitiesNotDropped,
        Self::VolumeType,
        Self::NodeName,
        Self::TokenAudience,
        Self::RootGroup,
        Self::Finalizers,
        Self::OwnerReferences,
        Self::ForeignOrbLabel,
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
            Self::AddedCapability => "adds a Linux capability the profile does not allow",
            Self::ProcMountUnmasked => "exposes the unmasked /proc of the node",
            Self::SeccompUnconfined => "runs without a seccomp filter",
            Self::AppArmorUnconfined => "runs without an AppArmor profile",
            Self::HostProcess => "runs as a Windows host process, outside any container",
            Self::SeLinuxOptions => {
                "chooses an SELinux user, role or type outside the container types"
            }
            Self::UnsafeSysctl => "sets a kernel parameter outside the namespaced safe set",
            Self::ProbeHost => {
                "makes the kubelet connect to another host (probe or lifecycle hook)"
            }
            Self::RunAsNonRootUnset => "may run as root: runAsNonRoot is not true",
            Self::CapabilitiesNotDropped => "keeps the runtime's default capabilities",
            Self::VolumeType => "mounts a volume type that reaches the node or the network",
            Self::NodeName => "pins the pod to a node, past the scheduler and its taints",
            Self::TokenAudience => "mints a service account token for another audience",
            Self::RootGroup => "runs with group 0 (root's group)",
            Self::Finalizers => "sets finalizers that can keep the object from ever being deleted",
            Self::OwnerReferences => "hands the object to another owner (garbage collection)",
            Self::ForeignOrbLabel => "carries another orb instance's identity label",
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
                "drop it from capabilities.add (profile baseline allows, spelt exactly so: \
                 AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, \
                 NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT; profile \
                 restricted only NET_BIND_SERVICE)"
            }
            Self::ProcMountUnmasked => "remove procMount or set it to Default",
            Self::SeccompUnconfined => "use seccompProfile type RuntimeDefault or Localhost",
            Self::AppArmorUnconfined => "use appArmorProfile type RuntimeDefault or Localhost",
            Self::HostProcess => "remove windowsOptions.hostProcess or set it to false",
            Self::SeLinuxOptions => {
                "leave seLinuxOptions user and role unset and type unset or one of container_t, \
                 container_init_t, container_kvm_t, container_engine_t"
            }
            Self::UnsafeSysctl => {
                "remove it (allowed: kernel.shm_rmid_forced, net.ipv4.ip_local_port_range, \
                 net.ipv4.ip_local_reserved_ports, net.ipv4.ip_unprivileged_port_start, \
                 net.ipv4.ping_group_range, net.ipv4.tcp_syncookies, net.ipv4.tcp_keepalive_time, \
                 net.ipv4.tcp_fin_timeout, net.ipv4.tcp_keepalive_intvl, \
                 net.ipv4.tcp_keepalive_probes, net.ipv4.tcp_rmem, net.ipv4.tcp_wmem, \
                 net.ipv4.tcp_slow_start_after_idle, net.ipv4.tcp_notsent_lowat)"
            }
            Self::ProbeHost => "remove host: probes and hooks then target the pod itself",
            Self::RunAsNonRootUnset => "set runAsNonRoot: true (pod or container securityContext)",
            Self::CapabilitiesNotDropped => "set capabilities.drop: [\"ALL\"]",
            Self::VolumeType => {
                "use a configMap, secret, downwardAPI, emptyDir, projected, ephemeral, image or \
                 PVC volume (profile baseline refuses only gitRepo, flexVolume, csi and nfs \
                 besides hostPath)"
            }
            Self::NodeName => "remove nodeName; use a nodeSelector or node affinity",
            Self::TokenAudience => {
                "remove the audience (the token is then for the apiserver, like the automatic one)"
            }
            Self::RootGroup => "use a non-zero gid for runAsGroup, fsGroup and supplementalGroups",
            Self::Finalizers => "remove metadata.finalizers; orb deletes what it creates",
            Self::OwnerReferences => "remove metadata.ownerReferences; orb owns what it creates",
            Self::ForeignOrbLabel => {
                "remove the label; orb stamps its own identity labels under its label_prefix"
            }
        }
    }
}

/// One high-risk field, where it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFinding {
    pub field: HighRiskField,
    /// JSON path in the body, e.g. `spec.template.spec.containers[0].securityContext.privileged`.
    pub path: String,
    /// The offending value as JSON text (`true`, `0`, `"SYS_ADMIN"`, …), or `(not set)` for
    /// a field the profile requires.
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

pub(super) struct Collector(pub Vec<AuditFinding>);

impl Collector {
    pub fn push(
        &mut self,
        field: HighRiskField,
        path: String,
        value: &Value,
        container: Option<&str>,
    ) {
        self.0.push(AuditFinding {
            field,
            path,
            value: value.to_string(),
            container: container.map(str::to_string),
        });
    }

    /// A field the profile requires is missing.
    pub fn push_unset(&mut self, field: HighRiskField, path: String, container: Option<&str>) {
        self.0.push(AuditFinding {
            field,
            path,
            value: "(not set)".to_string(),
            container: container.map(str::to_string),
        });
    }
}

/// Findings in one pod spec at `path` (e.g. `spec.template.spec`) under `profile`.
pub fn audit_pod_spec(spec: &Value, path: &str, profile: PodSecurityProfile) -> Vec<AuditFinding> {
    let mut found = Collector(Vec::new());
    pod_checks::check_pod_spec(&mut found, spec, path, profile);
    found.0
}

/// Findings in every pod spec of a workload body (Pod, Deployment, StatefulSet, Job), in its
/// pod metadata (the legacy seccomp/AppArmor annotations) and in the object's own metadata.
pub fn audit_workload_body(body: &Value, policy: &AuditPolicy) -> Vec<AuditFinding> {
    let mut found = Collector(Vec::new());
    pod_checks::check_object_metadata(&mut found, body.get("metadata"), "metadata", policy);
    let is_pod = body.get("kind").and_then(Value::as_str) == Some("Pod")
        || body.pointer("/spec/containers").is_some();
    if is_pod {
        if let Some(spec) = body.get("spec") {
            pod_checks::check_pod_spec(&mut found, spec, "spec", policy.profile);
        }
        pod_checks::check_pod_annotations(&mut found, body.get("metadata"), "metadata");
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
            pod_checks::check_pod_spec(&mut found, spec, &format!("{path}.spec"), policy.profile);
        }
        let metadata_path = format!("{path}.metadata");
        pod_checks::check_object_metadata(
            &mut found,
            pod_template.get("metadata"),
            &metadata_path,
            policy,
        );
        pod_checks::check_pod_annotations(&mut found, pod_template.get("metadata"), &metadata_path);
    }
    found.0
}
