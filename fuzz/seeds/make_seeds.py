#!/usr/bin/env python3
"""Writes the hand-picked seed inputs of every fuzz target into fuzz/corpus/<target>/.

The seeds are the real examples from the crates' tests and docs (docs/hostfactory.md,
docs/configuration.md, docs/native-spec.md, the seed-002 native-spec examples, the built-in
default specs). Re-run it after changing a target's input envelope; the fuzzer adds the rest.
"""
import hashlib
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, value):
    text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=False)
    data = text.encode()
    out = CORPUS / target
    out.mkdir(parents=True, exist_ok=True)
    (out / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


# --- hostfactory_input: what `orb ... -f FILE` / `-d JSON` receive -----------------------
for value in [
    {"template": {"templateId": "worker", "machineCount": 3}},
    {"templateId": "t", "machineCount": 2},
    {"template": {"template_id": "t", "machine_count": 1}},
    {"templateId": "t", "maxNumber": 50, "machineCount": 1},
    {"template": {"templateId": "t", "machineCount": 0}},
    {"template": {"templateId": "t", "machineCount": 1.5}},
    {"template": {"templateId": " ", "machineCount": "2"}},
    {"machines": [{"name": "orb-fe4cda5c019444bc981b-0000",
                   "machineId": "orb-fe4cda5c019444bc981b-0000"}]},
    {"machines": {"name": "h1"}},
    {"machines": [{"machine_id": "m1"}, {"name": 7}]},
    {"machines": []},
    {},
    {"requests": [{"requestId": "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f"},
                  {"request_id": "ret-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f"}]},
    {"requests": {"requestId": "a"}},
    {"requests": [{}]},
    [],
]:
    write("hostfactory_input", value)

# --- template_file: <provider>_templates.json as written on disk --------------------------
demo = ROOT / ".state" / "demo" / "config" / "templates.json"
rich = {
    "templateId": "rich", "providerApi": "Job", "imageId": "busybox:1.36",
    "instanceTags": "team=hpc;tier=batch", "labels": {"app": "solver"},
    "annotations": {"example.com/owner": "hpc"}, "command": ["sh", "-c"],
    "args": ["sleep 3600"], "environment_variables": {"MODE": "batch"},
    "resource_requests": {"cpu": "500m", "memory": "1Gi"},
    "resource_limits": {"cpu": "1", "memory": "1Gi", "gpu_count": 1},
    "node_selector": {"pool": "orb"},
    "tolerations": [{"key": "orb", "operator": "Exists", "effect": "NoSchedule"}],
    "service_account": "orb-runner", "image_pull_secrets": ["regcred"],
    "volumes": [{"name": "scratch", "emptyDir": {}}],
    "volume_mounts": [{"name": "scratch", "mountPath": "/scratch"}],
    "termination_grace_period_seconds": 30, "ttl_seconds_after_finished": 600,
    "maxNumber": 4, "attributes": {"type": ["String", "X86_64"], "ncpus": ["Numeric", "2"]},
}
ml_worker = {
    "template_id": "ml-worker", "provider_type": "k8s", "provider_api": "Pod",
    "image_id": "registry.example.com/ml-worker:1", "namespace": "orb-ml", "max_instances": 16,
    "native_spec": {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": 2000}}},
}
for value in [
    {"scheduler_type": "hostfactory", "templates": [rich, ml_worker]},
    [{"templateId": "a", "imageId": "busybox"}, {"templateId": "a", "imageId": "busybox"}],
    {"templates": [{"template_id": "legacy", "vm_type": "x", "machine_image": "busybox:1.36",
                    "max_number": 2, "instanceTags": "a=b;c"}]},
    {"templates": "not a list"},
    {"scheduler_type": 3},
    {"templates": [{"templateId": "bad id!", "imageId": " busybox", "maxNumber": -1,
                    "providerApi": "CronJob"}]},
    '{"templates": [{"templateId": "x",,}]}',
]:
    write("template_file", value)
if demo.exists():
    write("template_file", demo.read_text())

# --- config_layers: {"file": block, "env": {...}, "template": {...}} -----------------------
for value in [
    {"file": {"kubeconfig_path": "/etc/orb/kubeconfig", "context": "prod",
              "namespaces": ["orb", "orb-batch"], "label_prefix": "orb.example.com",
              "emit_legacy_labels": False, "default_node_selector": {"workload": "orb"},
              "default_tolerations": [{"key": "orb", "operator": "Exists",
                                       "effect": "NoSchedule"}],
              "default_image_pull_secret": "orb-registry", "pod_timeout_seconds": 240,
              "orphan_gc_enabled": True, "orphan_gc_interval_seconds": 600,
              "periodic_resync_interval_seconds": 180, "events_watch_enabled": True,
              "naming": {"prefix": "orb", "uuid_chars": 20}},
     "env": {"ORB_K8S_POD_TIMEOUT_SECONDS": "480",
             "ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE": "compute"},
     "template": {"template_id": "gpu-workers", "values": {"naming": {"prefix": "gpu"}}}},
    {"file": {"namespace": "default"}, "env": {"ORB_K8S_NAMESPACE": "hpc"}},
    {"file": {"pod_timeout_seconds": 120}, "env": {"ORB_K8S_POD_TIMEOUT_SECONDS": "240"}},
    {"env": {"ORB_K8S_NAMESPACES": "[\"team-a\"]", "ORB_K8S_NAMING__PREFIX": "my-orb"}},
    {"env": {"ORB_K8S_NAMING__PREFIX": "a-very-long-prefix-xx",
             "ORB_K8S_NAMING__UUID_CHARS": "27"}},
    {"file": {"retry_base_delay": 0.5, "retry_max_delay": 30.0,
              "controller_status_cache_ttl_seconds": 2.5, "circuit_breaker_reset_timeout": 60,
              "min_kubernetes_version": "1.30"}},
    {"file": {"namespces": ["orb"], "kube_config": "/x"}},
    {"file": ["not", "an", "object"]},
    {"file": None, "template": {"template_id": "t", "values": {"namespaces": ["*"]}}},
    {"env": {"ORB_K8S_PERIODIC_RESYNC_INTERVAL_SECONDS": "-1",
             "ORB_K8S_RETRY_BASE_DELAY": "NaN"}},
]:
    write("config_layers", value)

# --- native_spec: template + default/operator texts + loose merge/override/audit values ----
specs = ROOT / "crates" / "orb-k8s" / "specs"
deployment = {
    "template_id": "long-running-service", "provider_type": "k8s",
    "provider_api": "Deployment", "image_id": "registry.example.com/svc:42",
    "namespace": "orb", "max_instances": 8,
    "native_spec": {"spec": {"strategy": {"type": "RollingUpdate",
                                          "rollingUpdate": {"maxSurge": "25%",
                                                            "maxUnavailable": "0"}}}},
}
ml_full = dict(ml_worker)
ml_full["native_spec"] = {"spec": {
    "initContainers": [{"name": "warm-cache", "image": "registry.example.com/cache-warmer:1",
                        "command": ["sh", "-c", "/usr/local/bin/warm"]}],
    "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule"}]}}
jinja_inline = {"template_id": "jinja", "provider_api": "StatefulSet", "image_id": "busybox",
                "native_spec": {"spec": {"replicas": "{{ replicas }}",
                                         "template": {"metadata": {"labels": "{{ labels }}"}}}}}
risky_pod_spec = {"hostNetwork": True, "hostPID": True, "containers": [
    {"name": "worker", "image": "busybox", "securityContext": {
        "privileged": True, "capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}},
     "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
    "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
for value in [
    {"template": ml_full},
    {"template": deployment},
    {"template": jinja_inline, "count": 5},
    {"template": dict(rich, native_spec={})},
    {"template": {"template_id": "file-job", "provider_api": "Job", "image_id": "busybox"},
     "operator_file": "spec:\n  parallelism: {{ replicas }}\n"
                      "  template:\n    spec:\n      restartPolicy: OnFailure\n"},
    {"template": {"template_id": "wrong-kind", "provider_api": "Pod", "image_id": "busybox",
                  "native_spec": {"kind": "Deployment", "spec": []}}},
    {"template": {"template_id": "override", "provider_api": "Pod", "image_id": "busybox",
                  "native_spec": {},
                  "pod_spec_override": {"dnsPolicy": "None",
                                        "containers": [{"name": "worker", "tty": True}]}}},
    {"base": {"spec": {"containers": [{"name": "a", "image": "x"}], "volumes": []}},
     "overlay": {"spec": {"containers": [{"name": "a", "tty": True}, {"name": "b"}],
                          "volumes": None}}},
    {"pod_spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "x"}]},
     "override": {"restart_policy": "Always", "host_network": True,
                  "containers": [{"name": "worker", "env": [{"name": "A", "value": "1"}]}]}},
    {"body": {"kind": "Pod", "metadata": {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}},
        "spec": risky_pod_spec}},
    {"body": {"kind": "Deployment", "spec": {"template": {"spec": risky_pod_spec}}}},
]:
    write("native_spec", value)
for kind, api in [("pod", "Pod"), ("deployment", "Deployment"),
                  ("statefulset", "StatefulSet"), ("job", "Job")]:
    path = specs / kind / "default.json"
    if path.exists():
        write("native_spec", {"template": {"template_id": "d-" + kind, "provider_api": api,
                                           "image_id": "busybox", "native_spec": {}},
                              "default": path.read_text()})
