//! A pod template, as the cluster stores it in a Deployment, set up the way the kubelet sets
//! up one of its pods: the container's image (one of this project's), its command and args
//! over the image's entrypoint, its environment (values, Secret and ConfigMap keys, the
//! downward API), its volumes (ConfigMaps and Secrets as files, emptyDirs and claims as
//! writable directories), its user from the security contexts, the ServiceAccount's token,
//! and the in-cluster variables. What the chart renders is what runs, nothing re-typed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::Value;

use crate::TestCluster;
use crate::pod_sandbox::{
    ApiServer, Images, PodRoot, ProcessSpec, SERVICE_ACCOUNT_DIR, service_account_token,
};

/// A pod ready to start: its root and its process.
pub struct SandboxPod {
    pub name: String,
    pub root: PodRoot,
    pub process: ProcessSpec,
    /// The ServiceAccount it runs as (`namespace`, `name`).
    pub service_account: (String, String),
}

impl SandboxPod {
    /// The command that starts the pod's container (see [`PodRoot::command`]).
    pub fn command(&self) -> std::process::Command {
        self.root.command(&self.process)
    }
}

/// Sets up pod `pod_name` in `namespace` from `template` (a Deployment's `spec.template`),
/// running its first container.
pub async fn pod_from_template(
    cluster: &TestCluster,
    namespace: &str,
    pod_name: &str,
    template: &Value,
    images: &Images,
) -> SandboxPod {
    let spec = &template["spec"];
    let container = &spec["containers"][0];
    let reference = container["image"]
        .as_str()
        .expect("the container names an image");
    let image = images.name_of(reference).unwrap_or_else(|| {
        panic!(
            "the pod runs image {reference}, which is not one scripts/build-images.sh built \
             ({}, {}); the chart must reference the project's image (name and Cargo version)",
            images.reference("orb"),
            images.reference("pdb-operator")
        )
    });
    let config = images.config(image);
    let mut root = PodRoot::from_image(&images.rootfs(image));

    let (uid, gid) = user(spec, container, &config);
    let fs_group = spec["securityContext"]["fsGroup"]
        .as_u64()
        .map_or(gid, |g| g as u32);
    let run_as_non_root = container["securityContext"]["runAsNonRoot"]
        .as_bool()
        .or(spec["securityContext"]["runAsNonRoot"].as_bool())
        .unwrap_or(false);
    assert!(
        !(run_as_non_root && uid == 0),
        "the kubelet would refuse pod {pod_name}: runAsNonRoot is set but the container runs as root"
    );

    mount_volumes(
        cluster, namespace, spec, container, &mut root, uid, fs_group,
    )
    .await;

    let account = spec["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let api = ApiServer::from_kubeconfig(&cluster.kubeconfig);
    if spec["automountServiceAccountToken"] != false {
        let token = service_account_token(cluster, namespace, &account).await;
        root.write_file(
            &format!("{SERVICE_ACCOUNT_DIR}/token"),
            token.as_bytes(),
            0o644,
        );
        root.write_file(&format!("{SERVICE_ACCOUNT_DIR}/ca.crt"), &api.ca_pem, 0o644);
        root.write_file(
            &format!("{SERVICE_ACCOUNT_DIR}/namespace"),
            namespace.as_bytes(),
            0o644,
        );
    }
    root.write_file(
        "/etc/hosts",
        format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n127.0.0.1\t{pod_name}\n")
            .as_bytes(),
        0o644,
    );

    let mut env: BTreeMap<String, String> = config["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // The kubelet's service variables come first; the container's own env may override them.
    env.insert("KUBERNETES_SERVICE_HOST".into(), api.host.clone());
    env.insert("KUBERNETES_SERVICE_PORT".into(), api.port.to_string());
    env.insert("HOSTNAME".into(), pod_name.to_string());
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().expect("env entries have a name");
        let value = env_value(cluster, namespace, pod_name, &account, var).await;
        env.insert(name.to_string(), value);
    }

    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
    };
    let command = strings(&container["command"]);
    let args = strings(&container["args"]);
    let mut argv = command
        .clone()
        .or_else(|| strings(&config["Entrypoint"]))
        .unwrap_or_default();
    match (command, args) {
        (_, Some(args)) => argv.extend(args),
        (None, None) => argv.extend(strings(&config["Cmd"]).unwrap_or_default()),
        (Some(_), None) => {}
    }
    assert!(!argv.is_empty(), "pod {pod_name} has nothing to run");
    let workdir = container["workingDir"]
        .as_str()
        .or(config["WorkingDir"].as_str())
        .filter(|w| !w.is_empty())
        .unwrap_or("/")
        .to_string();
    SandboxPod {
        name: pod_name.to_string(),
        root,
        process: ProcessSpec {
            argv,
            env: env.into_iter().collect(),
            uid,
            gid,
            hostname: pod_name.to_string(),
            workdir,
        },
        service_account: (namespace.to_string(), account),
    }
}

/// runAsUser / runAsGroup of the container, else of the pod, else the image's `User`.
fn user(spec: &Value, container: &Value, config: &Value) -> (u32, u32) {
    let image_user = config["User"].as_str().unwrap_or("0");
    let (image_uid, image_gid) = image_user.split_once(':').unwrap_or((image_user, "0"));
    let pick = |field: &str, image: &str| -> u32 {
        container["securityContext"][field]
            .as_u64()
            .or(spec["securityContext"][field].as_u64())
            .map(|v| v as u32)
            .unwrap_or_else(|| {
                image.parse().unwrap_or_else(|_| {
                    panic!("image user {image_user:?} is not numeric; set {field} in the pod")
                })
            })
    };
    (pick("runAsUser", image_uid), pick("runAsGroup", image_gid))
}

async fn mount_volumes(
    cluster: &TestCluster,
    namespace: &str,
    spec: &Value,
    container: &Value,
    root: &mut PodRoot,
    uid: u32,
    fs_group: u32,
) {
    let volumes: BTreeMap<&str, &Value> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["name"].as_str().unwrap_or_default(), v))
        .collect();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = mount["name"].as_str().unwrap_or_default();
        let path = mount["mountPath"]
            .as_str()
            .expect("volumeMounts have a mountPath");
        let volume = volumes
            .get(name)
            .unwrap_or_else(|| panic!("volumeMount {name} names no volume"));
        if let Some(source) = volume.get("configMap") {
            let map_name = source["name"].as_str().unwrap();
            let map = Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace)
                .get(map_name)
                .await
                .unwrap_or_else(|e| panic!("ConfigMap {map_name} of volume {name}: {e}"));
            for (key, text) in map.data.unwrap_or_default() {
                root.write_file(&format!("{path}/{key}"), text.as_bytes(), 0o644);
            }
        } else if let Some(source) = volume.get("secret") {
            let secret_name = source["secretName"].as_str().unwrap();
            let secret = Api::<Secret>::namespaced(cluster.client.clone(), namespace)
                .get(secret_name)
                .await
                .unwrap_or_else(|e| panic!("Secret {secret_name} of volume {name}: {e}"));
            for (key, bytes) in secret.data.unwrap_or_default() {
                root.write_file(&format!("{path}/{key}"), &bytes.0, 0o644);
            }
        } else if volume.get("emptyDir").is_some() || volume.get("persistentVolumeClaim").is_some()
        {
            root.volume(path, uid, fs_group);
        } else {
            panic!("the pod sandbox cannot mount volume {name}: {volume}");
        }
    }
}

/// One `env` entry's value: `value`, or `valueFrom` a Secret key, a ConfigMap key or the
/// downward API.
async fn env_value(
    cluster: &TestCluster,
    namespace: &str,
    pod_name: &str,
    account: &str,
    var: &Value,
) -> String {
    if let Some(value) = var.get("value") {
        return value.as_str().unwrap_or_default().to_string();
    }
    let from = &var["valueFrom"];
    let name = var["name"].as_str().unwrap_or_default();
    if let Some(key_ref) = from.get("secretKeyRef") {
        let (secret, key) = (
            key_ref["name"].as_str().unwrap(),
            key_ref["key"].as_str().unwrap(),
        );
        let data = Api::<Secret>::namespaced(cluster.client.clone(), namespace)
            .get(secret)
            .await
            .unwrap_or_else(|e| panic!("Secret {secret} for env {name}: {e}"))
            .data
            .unwrap_or_default();
        let bytes = data
            .get(key)
            .unwrap_or_else(|| panic!("Secret {secret} has no key {key} (env {name})"));
        return String::from_utf8(bytes.0.clone()).expect("the Secret value is UTF-8");
    }
    if let Some(key_ref) = from.get("configMapKeyRef") {
        let (map, key) = (
            key_ref["name"].as_str().unwrap(),
            key_ref["key"].as_str().unwrap(),
        );
        let data = Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace)
            .get(map)
            .await
            .unwrap_or_else(|e| panic!("ConfigMap {map} for env {name}: {e}"))
            .data
            .unwrap_or_default();
        return data
            .get(key)
            .unwrap_or_else(|| panic!("ConfigMap {map} has no key {key} (env {name})"))
            .clone();
    }
    match from["fieldRef"]["fieldPath"].as_str() {
        Some("metadata.name") => pod_name.to_string(),
        Some("metadata.namespace") => namespace.to_string(),
        Some("spec.serviceAccountName") => account.to_string(),
        Some("status.podIP") | Some("status.hostIP") => "127.0.0.1".to_string(),
        other => panic!("the pod sandbox cannot fill env {name} from {other:?}"),
    }
}
