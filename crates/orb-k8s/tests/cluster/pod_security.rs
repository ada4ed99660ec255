//! orb's audit against the apiserver's own PodSecurity admission (issue #53). Every case of
//! the tables below (one passing and one failing body per Pod Security Standards check, at
//! pod, container, init-container and ephemeral-container level where the check reads that
//! level, for Pod, Deployment, StatefulSet and Job) goes through orb's audit and through a
//! server-side dry-run create in a namespace labelled
//! `pod-security.kubernetes.io/enforce=<profile>`; the two verdicts must agree, and a refusal
//! must name the check the case is about on both sides (so no case passes by tripping
//! another check).
//!
//! The apiserver refuses a Pod (403, "violates PodSecurity") but only warns for a workload
//! ("would violate PodSecurity" in a `Warning` header): that warning is its verdict on the
//! pod template. Ephemeral containers cannot be created with a pod (nor exist in a
//! template), so that level is a dry-run patch of a real Pod's `ephemeralcontainers`
//! subresource, which admission checks like a create.
//!
//! Not here: what orb refuses on purpose although the standard lets it through (seed 001's
//! `runAsUser: 0` and `allowPrivilegeEscalation: true` under baseline, `procMount` of a
//! user-namespace pod, inline CSI and orb's own rules); docs/security-audit.md lists them.

use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use orb_k8s::audit::{
    AuditMode, AuditPolicy, HighRiskField as F, PodSecurityProfile, audit_workload_body,
};
use orb_k8s::native_spec::{ListMerge, deep_merge};
use serde_json::{Value, json};

const KINDS: [&str; 4] = ["Pod", "Deployment", "StatefulSet", "Job"];
const IMAGE: &str = "busybox:1.36";
/// The real Pod of each namespace (the dry-run bodies are all called `pss`).
const BASE_POD: &str = "pss-base";
/// Dry runs in flight at once.
const PARALLEL: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Pod,
    Container,
    Init,
    Ephemeral,
    /// The pod's annotations (for container `c`).
    Annotation,
}

use Level::{Annotation, Container, Ephemeral, Init, Pod};
const CONTAINERS: &[Level] = &[Container, Init, Ephemeral];
/// Probes, lifecycle hooks and ports cannot be set on an ephemeral container.
const NOT_EPHEMERAL: &[Level] = &[Container, Init];

struct Case {
    check: &'static str,
    levels: &'static [Level],
    pass: Value,
    fail: Value,
    /// Merged into the pod spec of the failing body only (what the apiserver's validation
    /// needs for the failing value to be valid at all).
    fail_pod: Value,
    /// What orb must find in the failing body.
    field: F,
    /// What the apiserver's refusal must mention (either of them: restricted replaces some
    /// baseline checks by its own).
    reasons: &'static [&'static str],
}

fn case(
    check: &'static str,
    levels: &'static [Level],
    pass: Value,
    fail: Value,
    field: F,
    reasons: &'static [&'static str],
) -> Case {
    Case {
        check,
        levels,
        pass,
        fail,
        fail_pod: Value::Null,
        field,
        reasons,
    }
}

fn sc(v: Value) -> Value {
    json!({ "securityContext": v })
}

/// The checks of profile baseline. `restricted_pass` is false when the passing body adds
/// something profile restricted refuses (then the restricted run uses only the failing one).
fn baseline_cases() -> Vec<(Case, bool)> {
    let caps = |add: Value| sc(json!({"capabilities": {"add": add}}));
    let apparmor = |t: &str| sc(json!({"appArmorProfile": {"type": t}}));
    let seccomp = |t: &str| sc(json!({"seccompProfile": {"type": t}}));
    let selinux = |o: Value| sc(json!({ "seLinuxOptions": o }));
    let host_process = |on: bool| sc(json!({"windowsOptions": {"hostProcess": on}}));
    let annotation = |v: &str| json!({"container.apparmor.security.beta.kubernetes.io/c": v});
    let mut host_process_pod = case(
        "hostProcess (pod)",
        &[Pod],
        host_process(false),
        host_process(true),
        F::HostProcess,
        &["hostProcess"],
    );
    host_process_pod.fail_pod = json!({"hostNetwork": true});
    // Every container of a hostProcess pod must be one, so only the only container can be.
    let mut host_process_container = case(
        "hostProcess (container)",
        &[Container],
        host_process(false),
        host_process(true),
        F::HostProcess,
        &["hostProcess"],
    );
    host_process_container.fail_pod = json!({"hostNetwork": true});
    let volume = |v: Value| json!({ "volumes": [v] });
    vec![
        (
            case(
                "hostNetwork",
                &[Pod],
                json!({"hostNetwork": false}),
                json!({"hostNetwork": true}),
                F::HostNetwork,
                &["host namespaces"],
            ),
            true,
        ),
        (
            case(
                "hostPID",
                &[Pod],
                json!({"hostPID": false}),
                json!({"hostPID": true}),
                F::HostPid,
                &["host namespaces"],
            ),
            true,
        ),
        (
            case(
                "hostIPC",
                &[Pod],
                json!({"hostIPC": false}),
                json!({"hostIPC": true}),
                F::HostIpc,
                &["host namespaces"],
            ),
            true,
        ),
        (
            case(
                "privileged",
                CONTAINERS,
                sc(json!({"privileged": false})),
                sc(json!({"privileged": true, "allowPrivilegeEscalation": null})),
                F::Privileged,
                &["privileged"],
            ),
            true,
        ),
        (
            case(
                "capabilities",
                CONTAINERS,
                caps(json!(["CHOWN", "NET_BIND_SERVICE"])),
                caps(json!(["SYS_ADMIN"])),
                F::AddedCapability,
                &["non-default capabilities", "unrestricted capabilities"],
            ),
            false,
        ),
        (
            case(
                "capabilities (spelling)",
                CONTAINERS,
                caps(json!(["NET_BIND_SERVICE"])),
                caps(json!(["cap_net_bind_service"])),
                F::AddedCapability,
                &["non-default capabilities", "unrestricted capabilities"],
            ),
            true,
        ),
        (
            case(
                "hostPath",
                &[Pod],
                volume(json!({"name": "v", "emptyDir": {}})),
                volume(json!({"name": "v", "hostPath": {"path": "/tmp"}})),
                F::HostPathVolume,
                &["hostPath volumes", "restricted volume types"],
            ),
            true,
        ),
        (
            case(
                "hostPort",
                NOT_EPHEMERAL,
                json!({"ports": [{"containerPort": 8080}]}),
                json!({"ports": [{"containerPort": 8080, "hostPort": 8080}]}),
                F::HostPort,
                &["hostPort"],
            ),
            true,
        ),
        (
            case(
                "appArmorProfile",
                &[Pod, Container, Init, Ephemeral],
                apparmor("RuntimeDefault"),
                apparmor("Unconfined"),
                F::AppArmorUnconfined,
                &["AppArmor profile"],
            ),
            true,
        ),
        (
            case(
                "appArmor annotation",
                &[Annotation],
                annotation("runtime/default"),
                annotation("unconfined"),
                F::AppArmorUnconfined,
                &["AppArmor profile"],
            ),
            true,
        ),
        (
            case(
                "seLinuxOptions type",
                &[Pod, Container, Init, Ephemeral],
                selinux(json!({"type": "container_t"})),
                selinux(json!({"type": "spc_t"})),
                F::SeLinuxOptions,
                &["seLinuxOptions"],
            ),
            true,
        ),
        (
            case(
                "seLinuxOptions user",
                &[Pod, Container],
                selinux(json!({"level": "s0:c1,c2"})),
                selinux(json!({"user": "system_u"})),
                F::SeLinuxOptions,
                &["seLinuxOptions"],
            ),
            true,
        ),
        (
            case(
                "seccompProfile",
                &[Pod, Container, Init, Ephemeral],
                seccomp("RuntimeDefault"),
                seccomp("Unconfined"),
                F::SeccompUnconfined,
                &["seccompProfile"],
            ),
            true,
        ),
        (
            case(
                "sysctls",
                &[Pod],
                sc(json!({"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]})),
                sc(json!({"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]})),
                F::UnsafeSysctl,
                &["forbidden sysctls"],
            ),
            true,
        ),
        (
            case(
                "probe host",
                NOT_EPHEMERAL,
                json!({"livenessProbe": {"httpGet": {"port": 8080}}}),
                json!({"livenessProbe": {"httpGet": {"port": 8080, "host": "example.com"}}}),
                F::ProbeHost,
                &["probe or lifecycle host"],
            ),
            true,
        ),
        (
            case(
                "lifecycle host",
                NOT_EPHEMERAL,
                json!({"lifecycle": {"preStop": {"tcpSocket": {"port": 8080}}}}),
                json!({"lifecycle": {"preStop": {"tcpSocket": {"port": 8080, "host": "169.254.169.254"}}}}),
                F::ProbeHost,
                &["probe or lifecycle host"],
            ),
            true,
        ),
        (host_process_pod, true),
        (host_process_container, true),
    ]
}

/// The checks profile restricted adds.
fn restricted_cases() -> Vec<Case> {
    let volume = |v: Value| json!({ "volumes": [v] });
    let mut proc_mount = case(
        "procMount",
        &[Container, Init],
        sc(json!({"procMount": "Default"})),
        sc(json!({"procMount": "Unmasked"})),
        F::ProcMountUnmasked,
        &["procMount"],
    );
    // Unmasked is valid only in a user namespace (where baseline stops checking it).
    proc_mount.fail_pod = json!({"hostUsers": false});
    vec![
        case(
            "allowPrivilegeEscalation",
            CONTAINERS,
            sc(json!({"allowPrivilegeEscalation": false})),
            sc(json!({"allowPrivilegeEscalation": true})),
            F::AllowPrivilegeEscalation,
            &["allowPrivilegeEscalation"],
        ),
        case(
            "allowPrivilegeEscalation unset",
            CONTAINERS,
            sc(json!({"allowPrivilegeEscalation": false})),
            sc(json!({"allowPrivilegeEscalation": null})),
            F::AllowPrivilegeEscalation,
            &["allowPrivilegeEscalation"],
        ),
        case(
            "capabilities add",
            CONTAINERS,
            sc(json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}})),
            sc(json!({"capabilities": {"add": ["CHOWN"]}})),
            F::AddedCapability,
            &["unrestricted capabilities"],
        ),
        case(
            "capabilities drop",
            CONTAINERS,
            sc(json!({"capabilities": {"drop": ["ALL"]}})),
            sc(json!({"capabilities": {"drop": ["NET_RAW"]}})),
            F::CapabilitiesNotDropped,
            &["unrestricted capabilities"],
        ),
        case(
            "volume types",
            &[Pod],
            volume(json!({"name": "v", "configMap": {"name": "x"}})),
            volume(
                json!({"name": "v", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:disk", "lun": 0}}),
            ),
            F::VolumeType,
            &["restricted volume types"],
        ),
        case(
            "runAsNonRoot",
            &[Pod, Container, Init, Ephemeral],
            sc(json!({"runAsNonRoot": true})),
            sc(json!({"runAsNonRoot": false})),
            F::RunAsNonRootUnset,
            &["runAsNonRoot"],
        ),
        case(
            "runAsNonRoot unset",
            &[Pod],
            sc(json!({"runAsNonRoot": true})),
            sc(json!({"runAsNonRoot": null})),
            F::RunAsNonRootUnset,
            &["runAsNonRoot"],
        ),
        case(
            "runAsUser",
            &[Pod, Container, Init, Ephemeral],
            sc(json!({"runAsUser": 1000})),
            sc(json!({"runAsUser": 0})),
            F::RunAsRoot,
            &["runAsUser=0"],
        ),
        case(
            "seccompProfile unset",
            &[Pod],
            sc(json!({"seccompProfile": {"type": "RuntimeDefault"}})),
            sc(json!({"seccompProfile": null})),
            F::SeccompUnconfined,
            &["seccompProfile"],
        ),
        proc_mount,
    ]
}

fn container(name: &str, profile: PodSecurityProfile) -> Value {
    let mut c = json!({"name": name, "image": IMAGE});
    if profile == PodSecurityProfile::Restricted {
        c["securityContext"] =
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    }
    c
}

fn base_pod_spec(profile: PodSecurityProfile) -> Value {
    let mut spec = json!({"containers": [container("c", profile)]});
    if profile == PodSecurityProfile::Restricted {
        spec["securityContext"] =
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    }
    spec
}

fn merged(mut base: Value, overlay: &Value) -> Value {
    if !overlay.is_null() {
        deep_merge(&mut base, overlay.clone(), ListMerge::Replace);
    }
    base
}

/// The pod spec and pod annotations of one body: `fragment` at `level`.
fn pod_of(
    profile: PodSecurityProfile,
    level: Level,
    fragment: &Value,
    pod_extra: &Value,
) -> (Value, Value) {
    let mut spec = merged(base_pod_spec(profile), pod_extra);
    let mut annotations = json!({});
    match level {
        Pod => spec = merged(spec, fragment),
        Annotation => annotations = fragment.clone(),
        Container => spec["containers"][0] = merged(container("c", profile), fragment),
        Init => {
            let mut init = merged(container("i", profile), fragment);
            // Probes and hooks are allowed on an init container only as a sidecar.
            if ["livenessProbe", "lifecycle"]
                .iter()
                .any(|k| init.get(k).is_some())
            {
                init["restartPolicy"] = json!("Always");
            }
            spec["initContainers"] = json!([init]);
        }
        Ephemeral => {
            spec["ephemeralContainers"] = json!([merged(container("e", profile), fragment)])
        }
    }
    (spec, annotations)
}

fn body_of(kind: &str, namespace: &str, mut spec: Value, annotations: Value) -> Value {
    let labels = json!({"app": "pss"});
    let metadata = json!({"name": "pss", "namespace": namespace});
    let template = |spec: Value| json!({"metadata": {"labels": labels, "annotations": annotations}, "spec": spec});
    match kind {
        "Pod" => json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": merged(metadata, &json!({"annotations": annotations})), "spec": spec}),
        "Deployment" => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template(spec)}}),
        "StatefulSet" => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
            "spec": {"replicas": 1, "serviceName": "pss", "selector": {"matchLabels": labels}, "template": template(spec)}}),
        _ => {
            spec["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"backoffLimit": 0, "template": template(spec)}})
        }
    }
}

fn collection_path(kind: &str, namespace: &str) -> String {
    match kind {
        "Pod" => format!("/api/v1/namespaces/{namespace}/pods"),
        "Deployment" => format!("/apis/apps/v1/namespaces/{namespace}/deployments"),
        "StatefulSet" => format!("/apis/apps/v1/namespaces/{namespace}/statefulsets"),
        _ => format!("/apis/batch/v1/namespaces/{namespace}/jobs"),
    }
}

/// The apiserver's PodSecurity verdict on one request: `Some(why)` when it refuses (a Pod)
/// or warns (a workload's template). A refusal for another reason is a broken case: `Err`.
async fn admission_refusal(
    client: &Client,
    request: http::Request<Vec<u8>>,
    what: &str,
) -> Result<Option<String>, String> {
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer from the apiserver: {e}"));
    let status = response.status();
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    if status.is_success() {
        return Ok(warnings
            .into_iter()
            .find(|w| w.contains("would violate PodSecurity")));
    }
    if status == http::StatusCode::FORBIDDEN && text.contains("violates PodSecurity") {
        return Ok(Some(text.into_owned()));
    }
    Err(format!(
        "{what}: broken case, the apiserver refused the body for another reason than \
         PodSecurity ({status}): {text}"
    ))
}

/// One body sent both ways: returns a line naming the disagreement, if any.
async fn compare(
    client: Client,
    policy: AuditPolicy,
    what: String,
    audited: Value,
    request: http::Request<Vec<u8>>,
    failing: Option<(F, &'static [&'static str])>,
) -> Option<String> {
    let findings = audit_workload_body(&audited, &policy);
    let apiserver = match admission_refusal(&client, request, &what).await {
        Ok(verdict) => verdict,
        Err(broken) => return Some(broken),
    };
    match (failing, apiserver) {
        (None, None) if findings.is_empty() => None,
        (None, apiserver) => Some(format!(
            "{what}: should pass; orb found {findings:?}, the apiserver said {apiserver:?}"
        )),
        (Some((field, reasons)), Some(why)) => {
            let orb_ok = findings.iter().any(|f| f.field == field);
            let apiserver_ok = reasons.iter().any(|r| why.contains(r));
            (!orb_ok || !apiserver_ok).then(|| {
                format!("{what}: should fail on {field:?} ({reasons:?}); orb found {findings:?}, the apiserver said {why}")
            })
        }
        (Some(_), None) => Some(format!(
            "{what}: should fail; orb found {findings:?}, the apiserver admitted it"
        )),
    }
}

fn post(path: &str, body: &Value) -> http::Request<Vec<u8>> {
    http::Request::post(format!("{path}?dryRun=All"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).expect("json"))
        .expect("a request")
}

/// A namespace whose PodSecurity admission enforces `profile`, once admission sees the label.
async fn enforcing_namespace(cluster: &TestCluster, profile: PodSecurityProfile) -> TestNamespace {
    let ns = cluster
        .namespace(&format!("pss-{}", profile.as_str()))
        .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": profile.as_str(),
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(ns.name(), &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("labelling the namespace");
    let probe = body_of(
        "Pod",
        ns.name(),
        merged(base_pod_spec(profile), &json!({"hostPID": true})),
        json!({}),
    );
    let path = collection_path("Pod", ns.name());
    wait_for(
        &format!(
            "PodSecurity admission enforcing {} in {}",
            profile.as_str(),
            ns.name()
        ),
        Duration::from_secs(30),
        || {
            let request = post(&path, &probe);
            let client = cluster.client.clone();
            async move {
                match admission_refusal(&client, request, "probe").await {
                    Ok(Some(_)) => Check::Done(()),
                    Ok(None) => Check::NotYet("a hostPID pod is still admitted".into()),
                    Err(e) => Check::NotYet(e),
                }
            }
        },
    )
    .await;
    ns
}

async fn differential(profile: PodSecurityProfile) {
    let cluster = TestCluster::connect().await;
    let ns = enforcing_namespace(&cluster, profile).await;
    let policy = AuditPolicy {
        profile,
        ..AuditMode::Reject.into()
    };
    // The real Pod whose ephemeralcontainers subresource the ephemeral cases patch.
    let mut base = body_of("Pod", ns.name(), base_pod_spec(profile), json!({}));
    base["metadata"]["name"] = json!(BASE_POD);
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(cluster.client.clone(), ns.name());
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(base.clone()).expect("a pod"),
    )
    .await
    .expect("creating the base pod");

    let cases: Vec<(Case, bool)> = match profile {
        PodSecurityProfile::Baseline => baseline_cases(),
        PodSecurityProfile::Restricted => baseline_cases()
            .into_iter()
            .chain(restricted_cases().into_iter().map(|c| (c, true)))
            .collect(),
    };
    let mut runs = Vec::new();
    for (case, pass_applies) in &cases {
        let pass_applies = *pass_applies || profile == PodSecurityProfile::Baseline;
        for &level in case.levels {
            let bodies = [
                (pass_applies, &case.pass, &Value::Null, None),
                (
                    true,
                    &case.fail,
                    &case.fail_pod,
                    Some((case.field, case.reasons)),
                ),
            ];
            for (applies, fragment, pod_extra, failing) in bodies {
                if !applies || (level == Ephemeral && !pod_extra.is_null()) {
                    continue;
                }
                let verdict = if failing.is_some() { "fail" } else { "pass" };
                let (spec, annotations) = pod_of(profile, level, fragment, pod_extra);
                if level == Ephemeral {
                    let what = format!("{} {verdict} at {level:?} (Pod)", case.check);
                    let patch =
                        json!({"spec": {"ephemeralContainers": spec["ephemeralContainers"]}});
                    let request = http::Request::patch(format!(
                        "{}/{BASE_POD}/ephemeralcontainers?dryRun=All",
                        collection_path("Pod", ns.name())
                    ))
                    .header("content-type", "application/strategic-merge-patch+json")
                    .body(serde_json::to_vec(&patch).expect("json"))
                    .expect("a request");
                    let audited = body_of("Pod", ns.name(), spec, annotations);
                    runs.push(compare(
                        cluster.client.clone(),
                        policy.clone(),
                        what,
                        audited,
                        request,
                        failing,
                    ));
                    continue;
                }
                for kind in KINDS {
                    let what = format!("{} {verdict} at {level:?} ({kind})", case.check);
                    let body = body_of(kind, ns.name(), spec.clone(), annotations.clone());
                    let request = post(&collection_path(kind, ns.name()), &body);
                    runs.push(compare(
                        cluster.client.clone(),
                        policy.clone(),
                        what,
                        body,
                        request,
                        failing,
                    ));
                }
            }
        }
    }
    let total = runs.len();
    let started = std::time::Instant::now();
    let disagreements: Vec<String> = futures::stream::iter(runs)
        .buffer_unordered(PARALLEL)
        .filter_map(|d| async move { d })
        .collect()
        .await;
    eprintln!(
        "{}: {total} bodies through orb's audit and the apiserver in {:?}, {} disagreements",
        profile.as_str(),
        started.elapsed(),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {total} bodies got different verdicts from orb and the apiserver's PodSecurity \
         admission ({}):\n{}",
        disagreements.len(),
        profile.as_str(),
        disagreements.join("\n")
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_audit_agrees_with_pod_security_admission_baseline() {
    differential(PodSecurityProfile::Baseline).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_audit_agrees_with_pod_security_admission_restricted() {
    differential(PodSecurityProfile::Restricted).await;
}
