//! Runs a program from one of this project's container images on this machine the way the
//! kubelet runs a pod's container, so that in-cluster code paths run for real against the
//! local control plane: the image's files as a read-only root, the pod's volumes (ConfigMaps
//! read-only, emptyDirs writable), the ServiceAccount token, CA and namespace at
//! /var/run/secrets/kubernetes.io/serviceaccount, the KUBERNETES_SERVICE_* variables, the
//! pod's hostname, its user and group, and nothing of the test's own environment.
//!
//! Container engines cannot run in this sandbox (crun's setrlimit is refused), so the image is
//! run with util-linux instead: `unshare` gives the process a mount and hostname namespace, the
//! root and volumes are bind mounts, `unshare --root` enters it as the pod's user. Needs root.
//! The images come from `scripts/build-images.sh`, found through `ORB_IMAGES_DIR`.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::TestCluster;

/// Where the kubelet mounts the ServiceAccount's token, CA and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The images `scripts/build-images.sh` builds.
pub const IMAGE_NAMES: [&str; 2] = ["orb", "pdb-operator"];

/// The images built by `scripts/build-images.sh`: `ORB_IMAGES_DIR`.
pub struct Images {
    dir: PathBuf,
    vars: BTreeMap<String, String>,
}

impl Images {
    /// Panics (never skips) when `ORB_IMAGES_DIR` is unset or holds no complete build.
    pub fn from_env() -> Images {
        let fix = "build them with `export ORB_IMAGES_DIR=\"$(scripts/build-images.sh | tail -n1)\"` \
                   (scripts/test.sh does)";
        let dir = std::env::var_os("ORB_IMAGES_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("ORB_IMAGES_DIR is not set; {fix}"));
        let env = std::fs::read_to_string(dir.join("images.env")).unwrap_or_else(|e| {
            panic!(
                "ORB_IMAGES_DIR={} has no images.env ({e}); {fix}",
                dir.display()
            )
        });
        let vars = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Images { dir, vars }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A value of images.env (`ORB_IMAGE_ORB`, `ORB_IMAGE_ORB_BYTES`, ...).
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    fn var_prefix(name: &str) -> String {
        format!("ORB_IMAGE_{}", name.to_ascii_uppercase().replace('-', "_"))
    }

    /// `localhost/<name>:<version>`, the reference the image was tagged with.
    pub fn reference(&self, name: &str) -> &str {
        self.var(&Self::var_prefix(name))
            .unwrap_or_else(|| panic!("images.env names no image {name}"))
    }

    /// The unpacked image.
    pub fn rootfs(&self, name: &str) -> PathBuf {
        self.dir.join(name).join("rootfs")
    }

    /// The image's OCI config (`User`, `Entrypoint`, `Cmd`, `Env`, `WorkingDir`, `Labels`).
    pub fn config(&self, name: &str) -> Value {
        let path = self.dir.join(name).join("image.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let inspect: Value = serde_json::from_str(&text).expect("image.json is JSON");
        inspect["OCIv1"]["config"].clone()
    }

    /// Which of the images a pod spec's `image` names.
    pub fn name_of(&self, reference: &str) -> Option<&'static str> {
        IMAGE_NAMES
            .into_iter()
            .find(|name| self.var(&Self::var_prefix(name)) == Some(reference))
    }
}

/// The apiserver as a pod sees it: the Service address (here the loopback address the
/// apiserver listens on, which its certificate names) and the cluster CA.
#[derive(Debug, Clone)]
pub struct ApiServer {
    pub host: String,
    pub port: u16,
    pub ca_pem: Vec<u8>,
}

impl ApiServer {
    /// From the admin kubeconfig of the local control plane (server URL, CA file).
    pub fn from_kubeconfig(path: &Path) -> ApiServer {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
        let config: Value = serde_saphyr::from_str(&text).expect("kubeconfig is YAML");
        let cluster = &config["clusters"][0]["cluster"];
        let server = cluster["server"]
            .as_str()
            .expect("kubeconfig names a server");
        let authority = server
            .strip_prefix("https://")
            .expect("the apiserver URL is https://HOST:PORT")
            .trim_end_matches('/');
        let (host, port) = authority
            .rsplit_once(':')
            .expect("the apiserver URL has a port");
        let ca_file = cluster["certificate-authority"]
            .as_str()
            .expect("the kubeconfig names its CA file (certificate-authority)");
        ApiServer {
            host: host.to_string(),
            port: port.parse().expect("the apiserver port is a number"),
            ca_pem: std::fs::read(ca_file)
                .unwrap_or_else(|e| panic!("cannot read the cluster CA {ca_file}: {e}")),
        }
    }
}

/// A token of ServiceAccount `namespace/name` from the TokenRequest API (default audience,
/// one hour), as the kubelet requests one for a pod's projected volume.
pub async fn service_account_token(cluster: &TestCluster, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a TokenRequest answers with a token")
}

/// How the process starts: argv, environment, user, hostname and working directory.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub uid: u32,
    pub gid: u32,
    pub hostname: String,
    pub workdir: String,
}

/// A pod's root filesystem: a copy of the image (hard links; nothing of the image is ever
/// written) plus the files and volumes added to it. Removed when dropped.
pub struct PodRoot {
    _dir: tempfile::TempDir,
    root: PathBuf,
    writable: Vec<String>,
}

impl PodRoot {
    /// A root from the unpacked image at `rootfs`, with the mount points a container gets.
    pub fn from_image(rootfs: &Path) -> PodRoot {
        assert!(
            rootfs.is_dir(),
            "no unpacked image at {}; rebuild the images with scripts/build-images.sh",
            rootfs.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("pod-root-")
            .tempdir()
            .unwrap();
        let root = dir.path().join("root");
        copy_tree(rootfs, &root);
        let mut pod = PodRoot {
            _dir: dir,
            root,
            writable: Vec::new(),
        };
        for d in ["proc", "dev", "etc"] {
            std::fs::create_dir_all(pod.path(d)).unwrap();
        }
        for node in DEVICES {
            pod.write_file(&format!("/dev/{node}"), b"", 0o644);
        }
        pod
    }

    /// The host path of `in_pod`.
    pub fn path(&self, in_pod: &str) -> PathBuf {
        self.root.join(in_pod.trim_start_matches('/'))
    }

    /// Writes a file that the process may read but not change (a ConfigMap key, the token).
    pub fn write_file(&mut self, in_pod: &str, contents: &[u8], mode: u32) {
        let path = self.path(in_pod);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Never write through a hard link into the cached image.
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A writable directory (an emptyDir or a claim), owned by `uid:gid` as fsGroup makes it.
    pub fn volume(&mut self, in_pod: &str, uid: u32, gid: u32) -> PathBuf {
        let path = self.path(in_pod);
        std::fs::create_dir_all(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o2775)).unwrap();
        self.writable.push(in_pod.to_string());
        path
    }

    /// The command that runs `spec` in this root: a fresh mount and UTS namespace, the root
    /// bind-mounted read-only except the volumes, /proc and the usual /dev nodes, then the
    /// pod's user in the pod's root. The child's pid is the program's (everything execs).
    pub fn command(&self, spec: &ProcessSpec) -> Command {
        assert_eq!(
            effective_uid(),
            0,
            "running an image in a pod sandbox needs root (mount and unshare); run the test as root"
        );
        let mut cmd = Command::new("unshare");
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .args([
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
            ])
            .arg(SANDBOX_SCRIPT)
            .arg("pod-sandbox")
            .arg(&self.root)
            .arg(&spec.hostname)
            .args(&self.writable)
            .arg("--");
        // `env -i` leaves the program exactly the pod's environment; unshare then enters the
        // root as the pod's user (dropping supplementary groups and, as a non-root user,
        // every capability).
        for (k, v) in &spec.env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg("/usr/bin/unshare")
            .arg(format!("--root={}", self.root.display()))
            .arg(format!("--wd={}", spec.workdir))
            .arg(format!("--setgid={}", spec.gid))
            .arg(format!("--setuid={}", spec.uid))
            .arg("--")
            .args(&spec.argv);
        cmd
    }
}

/// The /dev nodes a container runtime provides.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Arguments: ROOT HOSTNAME WRITABLE... -- VAR=VALUE... /usr/bin/unshare --root ... -- ARGV.
/// Mounts first (the root read-only, each volume writable, /proc, the /dev nodes), then the
/// hostname, then `env -i` with no_new_privs (allowPrivilegeEscalation: false).
const SANDBOX_SCRIPT: &str = r#"set -eu
root=$1 host=$2; shift 2
mount --bind "$root" "$root"
while [ "$1" != "--" ]; do mount --bind "$root$1" "$root$1"; shift; done; shift
for d in null zero full random urandom tty; do mount --bind "/dev/$d" "$root/dev/$d"; done
mount -t proc proc "$root/proc"
mount -o remount,bind,ro "$root"
hostname "$host"
exec setpriv --no-new-privs -- /usr/bin/env -i "$@"
"#;

fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// Copies a directory tree: directories and symlinks anew (same owner and mode), files as
/// hard links when possible.
fn copy_tree(from: &Path, to: &Path) {
    let meta = std::fs::symlink_metadata(from).unwrap();
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).unwrap();
            let m = std::fs::metadata(&src).unwrap();
            std::os::unix::fs::chown(&dst, Some(m.uid()), Some(m.gid())).unwrap();
        }
    }
    std::fs::set_permissions(to, meta.permissions()).unwrap();
    std::os::unix::fs::chown(to, Some(meta.uid()), Some(meta.gid())).unwrap();
}
