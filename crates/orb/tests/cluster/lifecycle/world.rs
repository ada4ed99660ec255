//! One orb installation on one fresh namespace of the local control plane, with one template
//! whose pods misbehave the way a test asks (the KWOK stages of tools/control-plane/stages), and
//! the three doors to read it through: the CLI, the installed HostFactory scripts and a REST
//! `orb serve` started on demand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use kube_fixture::identity::BrokerIdentity;
use kube_fixture::{Check, TestCluster, TestNamespace, TestNode, wait_for};
use serde_json::{Value, json};

use crate::support;
use crate::support::serve_process::Server;

/// Long enough for pods to be created, scheduled and changed by the node simulator.
pub const SETTLE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Deployment,
    StatefulSet,
    Job,
}

impl Kind {
    pub fn api(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::Job => "Job",
        }
    }
}

/// What a test installs: the template's kind, pod annotations and placement, and settings.
#[derive(Debug, Clone)]
pub struct Setup {
    pub kind: Kind,
    pub annotations: Value,
    /// Room (in pods) of a node of the test's own that every pod must go to.
    pub node_room: Option<u32>,
    /// `ORB_K8S_*` variables for every call.
    pub env: Vec<(String, String)>,
    /// `request.default_grace_period` (the acquire and return deadline), seconds.
    pub grace_secs: u64,
    /// The template's `maxNumber` (and the per-request cap).
    pub max_number: i64,
    /// A fault proxy's kubeconfig: orb goes through it, still as the shipped identity.
    pub kubeconfig: Option<PathBuf>,
}

impl Setup {
    pub fn new(kind: Kind) -> Self {
        // Job pods run until the test ends unless it asks otherwise.
        let annotations = if kind == Kind::Job {
            json!({"pod-complete.stage.kwok.x-k8s.io/delay": "30m"})
        } else {
            json!({})
        };
        Self {
            kind,
            annotations,
            node_room: None,
            env: Vec::new(),
            grace_secs: 300,
            max_number: 20,
            kubeconfig: None,
        }
    }

    pub fn max_number(mut self, max: i64) -> Self {
        self.max_number = max;
        self
    }

    pub fn through(mut self, kubeconfig: &Path) -> Self {
        self.kubeconfig = Some(kubeconfig.to_path_buf());
        self
    }

    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.annotations[key] = json!(value);
        self
    }

    pub fn on_node_with_room(mut self, pods: u32) -> Self {
        self.node_room = Some(pods);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn grace(mut self, secs: u64) -> Self {
        self.grace_secs = secs;
        self
    }
}

pub struct World {
    /// Cluster admin, for what the test arranges and inspects; orb itself runs as `identity`.
    pub cluster: TestCluster,
    /// ServiceAccount `orb-broker` bound to exactly docs/rbac.yaml's Role: orb's kubeconfig.
    _identity: BrokerIdentity,
    pub ns: TestNamespace,
    /// The test's own node, kept (and removed at the end) for the pods placed on it.
    _node: Option<TestNode>,
    pub root: tempfile::TempDir,
    pub setup: Setup,
    scripts: Option<PathBuf>,
    server: Option<Server>,
}

impl World {
    pub async fn new(prefix: &str, setup: Setup) -> World {
        let cluster = TestCluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        let node = match setup.node_room {
            Some(room) => Some(cluster.node_with_room("lc", room).await),
            None => None,
        };
        let identity = cluster.broker_identity(&ns).await;
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.json"),
            json!({
                "providers": [{"name": "kubernetes", "type": "k8s", "enabled": true, "default": true,
                    "config": {"namespace": ns.name(), "in_cluster": false,
                               "kubeconfig_path": setup.kubeconfig.as_deref().map_or(identity.kubeconfig.clone(), |p| identity.through(p)),
                               "node_watch_enabled": false, "events_watch_enabled": false}}],
                "request": {"default_timeout": 300, "default_grace_period": setup.grace_secs,
                            "max_machines_per_request": setup.max_number.max(100)},
            })
            .to_string(),
        )
        .unwrap();
        let mut template = json!({
            "templateId": "subject",
            "providerApi": setup.kind.api(),
            "maxNumber": setup.max_number,
            "imageId": "busybox:1.36",
            "command": ["sh", "-c", "sleep 3600"],
            "annotations": setup.annotations,
        });
        if let Some(node) = &node {
            template["nodeSelector"] = node.node_selector();
            template["tolerations"] = node.tolerations();
        }
        std::fs::write(
            config.join("templates.json"),
            json!({"templates": [template]}).to_string(),
        )
        .unwrap();
        World {
            cluster,
            _identity: identity,
            ns,
            _node: node,
            root,
            setup,
            scripts: None,
            server: None,
        }
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn log_file(&self) -> PathBuf {
        self.path().join("logs/orb.log")
    }

    fn command(&self) -> std::process::Command {
        let mut cmd = support::orb(self.path());
        for (k, v) in &self.setup.env {
            cmd.env(k, v);
        }
        cmd.env("ORB_DAEMON", "off");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// `orb ARGS` started in the background (stdout and stderr captured).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Runs orb, expects success and a JSON reply.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "orb {args:?} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        json_of(&out)
    }

    /// Requests `count` machines of the template (no wait); the acquire id.
    pub fn request(&self, count: u32) -> String {
        let view = self.json(&["machines", "request", "subject", &count.to_string()]);
        view["request"]["request_id"].as_str().unwrap().to_string()
    }

    /// `orb requests status <id>`: the request view (refreshed from the cluster).
    pub fn status(&self, id: &str) -> Value {
        self.json(&["requests", "status", id])[0].clone()
    }

    /// Polls the CLI status of `id` until `done` accepts the view.
    pub async fn wait_status(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        wait_for(what, SETTLE, || async {
            let view = self.status(id);
            if done(&view) {
                Check::Done(view)
            } else {
                Check::NotYet(summary(&view))
            }
        })
        .await
    }

    /// Polls until the request is finished; its view.
    pub async fn wait_finished(&self, id: &str) -> Value {
        self.wait_status(id, &format!("request {id} to finish"), |v| {
            TERMINAL.contains(&v["request"]["status"].as_str().unwrap_or(""))
        })
        .await
    }

    fn install_scripts(&mut self) -> PathBuf {
        if let Some(dir) = &self.scripts {
            return dir.clone();
        }
        let dir = self.path().join("hostfactory/scripts");
        let out = self.run(&["hostfactory", "install", dir.to_str().unwrap()]);
        assert!(out.status.success(), "install: {}", stderr(&out));
        self.scripts = Some(dir.clone());
        dir
    }

    /// Runs a HostFactory script as HostFactory does (`<script> -f <input file>`); its stdout
    /// must be one JSON document and its stderr empty.
    pub fn script(&mut self, script: &str, input: &Value) -> Value {
        let dir = self.install_scripts();
        let input_file = self.path().join(format!("hf_in_{script}.json"));
        std::fs::write(&input_file, input.to_string()).unwrap();
        let mut cmd = std::process::Command::new(dir.join(script));
        support::clear_env(&mut cmd);
        for (k, v) in &self.setup.env {
            cmd.env(k, v);
        }
        let out = cmd
            .args(["-f", input_file.to_str().unwrap()])
            .env("ORB_ROOT_DIR", self.path())
            .env("HOME", self.path())
            .env("ORB_DAEMON", "off")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script} {input} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        assert_eq!(
            stderr(&out),
            "",
            "a HostFactory script keeps stderr clean (warnings go to the log file)"
        );
        json_of(&out)
    }

    /// The hosts getReturnRequests reports (every managed host asked about), sorted.
    pub fn hf_reclaims(&mut self) -> Vec<String> {
        let reply = self.script("getReturnRequests.sh", &json!({}));
        let mut listed: Vec<String> = reply["requests"]
            .as_array()
            .unwrap_or_else(|| panic!("getReturnRequests: {reply}"))
            .iter()
            .filter_map(|r| r["machine"].as_str().map(String::from))
            .collect();
        listed.sort();
        listed
    }

    /// getRequestStatus for one request: its entry.
    pub fn hf_status(&mut self, id: &str) -> Value {
        let reply = self.script(
            "getRequestStatus.sh",
            &json!({"requests": [{"requestId": id}]}),
        );
        reply["requests"][0].clone()
    }

    /// `orb serve` for this installation, started on first use.
    pub fn server(&mut self) -> &Server {
        if self.server.is_none() {
            self.server = Some(Server::start(self.path(), None));
        }
        self.server.as_ref().unwrap()
    }

    /// SIGKILLs the running `orb serve`.
    pub fn kill_server(&mut self) {
        if let Some(server) = self.server.take() {
            server.kill9();
        }
    }

    /// REST status of one request through `orb serve`; waits until `done` accepts it.
    pub async fn rest_status(
        &mut self,
        id: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let server = self.server();
        wait_for(what, SETTLE, || async {
            let (code, view) = server.call("GET", &format!("/api/v1/requests/{id}/status"), None);
            if code == 200 && done(&view) {
                Check::Done(view)
            } else {
                Check::NotYet(format!("{code}: {}", summary(&view)))
            }
        })
        .await
    }

    pub fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), self.ns.name())
    }

    /// The request's pods (not being deleted), by name.
    pub async fn pods(&self, request_id: &str) -> BTreeMap<String, Pod> {
        self.pods_api()
            .list(&ListParams::default().labels(&format!("orb.io/request-id={request_id}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect()
    }

    /// Waits until the request's pods are exactly `names`.
    pub async fn wait_pods(&self, request_id: &str, names: &[String], what: &str) {
        let want: Vec<String> = {
            let mut v = names.to_vec();
            v.sort();
            v
        };
        wait_for(what, SETTLE, || async {
            let have: Vec<String> = self.pods(request_id).await.into_keys().collect();
            if have == want {
                Check::Done(())
            } else {
                Check::NotYet(format!("pods {have:?}"))
            }
        })
        .await
    }

    /// Whether the request's controller object (Deployment, StatefulSet or Job) exists.
    pub async fn controller_exists(&self, name: &str) -> bool {
        let client = self.cluster.client.clone();
        let ns = self.ns.name();
        match self.setup.kind {
            Kind::Pod => false,
            Kind::Deployment => Api::<Deployment>::namespaced(client, ns)
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
            Kind::StatefulSet => Api::<StatefulSet>::namespaced(client, ns)
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
            Kind::Job => Api::<Job>::namespaced(client, ns)
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
        }
    }

    pub async fn delete_pod(&self, name: &str) {
        self.pods_api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    pub async fn evict_pod(&self, name: &str) {
        self.pods_api()
            .evict(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("evicting {name}: {e}"));
    }
}

pub const TERMINAL: &[&str] = &["complete", "partial", "failed", "cancelled", "timeout"];

/// A request view in one line: status, message and each machine's status.
pub fn summary(view: &Value) -> String {
    let machines: Vec<String> = view["machines"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    format!(
                        "{}={}({})",
                        m["machine_id"].as_str().unwrap_or("?"),
                        m["status"].as_str().unwrap_or("?"),
                        m["status_reason"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{} {:?} [{}]",
        view["request"]["status"],
        view["request"]["status_message"].as_str().unwrap_or(""),
        machines.join(", ")
    )
}

/// The machine `id` of a request view.
pub fn machine<'a>(view: &'a Value, id: &str) -> &'a Value {
    view["machines"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["machine_id"] == id))
        .unwrap_or_else(|| panic!("no machine {id} in {}", summary(view)))
}

pub fn machine_ids(view: &Value) -> Vec<String> {
    view["machines"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["machine_id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(out), stderr(out)))
}
