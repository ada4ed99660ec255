//! The container images of orb and pdb-operator (deploy/images, built offline by
//! scripts/build-images.sh): what is in them (a static binary, CA roots, a non-root user,
//! nothing else: no shell), that the binary inside runs and prints the Cargo version, and that
//! `orb doctor` inside the orb image passes against the local control plane as the chart's
//! ServiceAccount, in-cluster. Container engines cannot run here (crun's setrlimit is refused
//! in this sandbox), so the unpacked image runs in kube_fixture's pod sandbox.
//!
//! The image tests need root, `ORB_IMAGES_DIR` (scripts/build-images.sh) and, for doctor,
//! `ORB_HELM` and the control plane. The Containerfile comparison needs nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube_fixture::TestCluster;
use kube_fixture::helm::Release;
use kube_fixture::pod_sandbox::{IMAGE_NAMES, Images, PodRoot, ProcessSpec};
use kube_fixture::pod_template::pod_from_template;
use serde_json::{Value, json};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The runtime stages of a Containerfile (from the first `FROM scratch`), with the source of
/// each COPY reduced to the path under the assembled layout.
fn runtime_stages(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("FROM scratch"))
        .map(|l| {
            l.replace("COPY --from=build /rootfs/", "COPY ")
                .replace("COPY --from=build --chown", "COPY --chown")
                .replace(" /rootfs/", " ")
        })
        .collect()
}

#[test]
fn both_containerfiles_build_the_same_runtime_images() {
    let read = |f: &str| std::fs::read_to_string(repo().join("deploy/images").join(f)).unwrap();
    let registry = runtime_stages(&read("Containerfile"));
    let offline = runtime_stages(&read("Containerfile.prebuilt"));
    assert!(
        !registry.is_empty(),
        "deploy/images/Containerfile has no FROM scratch stage"
    );
    assert_eq!(
        registry, offline,
        "the runtime stages of deploy/images/Containerfile and Containerfile.prebuilt differ"
    );
    for name in IMAGE_NAMES {
        assert!(
            offline.contains(&format!("FROM scratch AS {name}")),
            "no {name} target"
        );
    }
}

/// Every path in `root`, relative, directories with a trailing slash.
fn listing(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                out.insert(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

#[test]
#[ignore = "needs the images in ORB_IMAGES_DIR and root; ./scripts/test.sh runs it (or set ORB_IMAGES_DIR from scripts/build-images.sh, then cargo test -- --include-ignored)"]
fn each_image_holds_a_static_binary_ca_roots_and_a_non_root_user_only() {
    let images = Images::from_env();
    for name in IMAGE_NAMES {
        assert_eq!(
            images.reference(name),
            format!("localhost/{name}:{VERSION}")
        );
        let config = images.config(name);
        assert_eq!(config["User"], "65532:65532", "{name}: {config}");
        assert_eq!(
            config["Entrypoint"],
            json!([format!("/usr/local/bin/{name}")]),
            "{name}"
        );
        assert_eq!(
            config["Labels"]["org.opencontainers.image.version"], VERSION,
            "{name}"
        );
        let mut want: BTreeSet<String> = [
            "etc/",
            "etc/group",
            "etc/nsswitch.conf",
            "etc/passwd",
            "etc/ssl/",
            "etc/ssl/certs/",
            "etc/ssl/certs/ca-certificates.crt",
            "tmp/",
            "usr/",
            "usr/local/",
            "usr/local/bin/",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        want.insert(format!("usr/local/bin/{name}"));
        if name == "orb" {
            want.extend(["var/".to_string(), "var/lib/".into(), "var/lib/orb/".into()]);
        }
        let root = images.rootfs(name);
        assert_eq!(
            listing(&root),
            want,
            "{name}: files (no shell, no libraries)"
        );
        let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
        assert!(passwd.contains("orb:x:65532:65532:"), "{passwd}");
        let roots =
            std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
        assert!(
            roots.matches("BEGIN CERTIFICATE").count() > 50,
            "{name}: the CA bundle holds the public roots"
        );
    }
}

#[test]
#[ignore = "needs the images in ORB_IMAGES_DIR and root; ./scripts/test.sh runs it (or set ORB_IMAGES_DIR from scripts/build-images.sh, then cargo test -- --include-ignored)"]
fn the_binaries_inside_run_and_print_the_cargo_version() {
    let images = Images::from_env();
    for name in IMAGE_NAMES {
        let root = PodRoot::from_image(&images.rootfs(name));
        let spec = ProcessSpec {
            argv: vec![format!("/usr/local/bin/{name}"), "--version".into()],
            env: vec![],
            uid: 65532,
            gid: 65532,
            hostname: format!("{name}-version"),
            workdir: "/".into(),
        };
        let out = root.command(&spec).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} --version in the image: {out:?}"
        );
        assert_eq!(stdout.trim(), format!("{name} {VERSION}"), "{name}");
    }
}

#[test]
#[ignore = "needs the images in ORB_IMAGES_DIR and root; ./scripts/test.sh runs it (or set ORB_IMAGES_DIR from scripts/build-images.sh, then cargo test -- --include-ignored)"]
fn in_the_pod_sandbox_the_root_is_read_only_and_only_volumes_take_writes() {
    let images = Images::from_env();
    let init_into = |root: &PodRoot, dir: &str| {
        let spec = ProcessSpec {
            argv: vec![
                "/usr/local/bin/orb".into(),
                "init".into(),
                "--config-dir".into(),
                dir.into(),
            ],
            env: vec![("HOME".into(), "/var/lib/orb".into())],
            uid: 65532,
            gid: 65532,
            hostname: "orb-write-check".into(),
            workdir: "/".into(),
        };
        root.command(&spec).output().unwrap()
    };
    // The image's /var/lib/orb belongs to the user, but without a volume it is part of the
    // read-only root, as with readOnlyRootFilesystem.
    let bare = PodRoot::from_image(&images.rootfs("orb"));
    let refused = init_into(&bare, "/var/lib/orb/config");
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("Read-only file system"), "{stderr}");

    let mut with_volume = PodRoot::from_image(&images.rootfs("orb"));
    let volume = with_volume.volume("/var/lib/orb", 65532, 65532);
    let written = init_into(&with_volume, "/var/lib/orb/config");
    assert!(written.status.success(), "{written:?}");
    assert!(volume.join("config/config.json").is_file());
    // Nothing reached the cached image.
    assert!(!images.rootfs("orb").join("var/lib/orb/config").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn orb_doctor_in_the_image_passes_in_cluster_as_the_charts_service_account() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("orb-doctor-img").await;
    let n = ns.name().to_string();
    let chart = repo().join("deploy/helm/orb");
    let _release = Release::install(
        &cluster.kubeconfig,
        &chart,
        "orb",
        &n,
        &json!({"fullnameOverride": n, "provider": {"config": {"node_watch_enabled": true}}}),
    );
    let deployment = Api::<Deployment>::namespaced(cluster.client.clone(), &n)
        .get(&n)
        .await
        .unwrap();
    let template = serde_json::to_value(deployment.spec.template).unwrap();
    let mut pod = pod_from_template(&cluster, &n, &format!("{n}-0"), &template, &images).await;
    // `kubectl exec <pod> -- orb doctor`: the pod's files and environment, another command.
    pod.process.argv = vec![
        "/usr/local/bin/orb".into(),
        "doctor".into(),
        "-o".into(),
        "json".into(),
    ];
    let out = pod.command().output().unwrap();
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "orb doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{reply:#}");
    assert_eq!(reply["failed"], 0, "{reply:#}");
    let checks = reply["checks"].as_array().unwrap();
    let connectivity = checks
        .iter()
        .find(|c| c["check"] == "connectivity")
        .expect("a connectivity check");
    assert_eq!(connectivity["ok"], true, "{connectivity}");
    // The namespace came from the service-account file (the chart sets none), and the chart's
    // RBAC grants what doctor asks about there and cluster-wide (the node watch).
    for check in [
        format!("rbac: create core/pods in {n}"),
        "rbac: watch core/nodes cluster-wide".to_string(),
    ] {
        let found = checks
            .iter()
            .find(|c| c["check"] == check.as_str())
            .unwrap_or_else(|| panic!("doctor did not check {check}: {reply:#}"));
        assert_eq!(found["ok"], true, "{found}");
    }
}
