//! The HostFactory scripts through a running `orb serve` (its Unix socket) print exactly what
//! they print when they work directly, for each of the five operations, on the real local
//! control plane; a configured daemon that does not answer is skipped with a note on stderr
//! and the same stdout. Needs the control plane (`tools/control-plane/cp up`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use crate::support::serve_process::spawn_listening;
use crate::support::{clear_env, init_local_control_plane, orb};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

/// How a script call is routed.
#[derive(Debug, Clone, Copy)]
enum Route<'a> {
    /// `ORB_DAEMON=off`.
    Direct,
    /// `ORB_DAEMON=unix:PATH`.
    Daemon(&'a Path),
    /// No `ORB_DAEMON`: config.json and the default socket decide.
    Configured,
}

/// One script run: stdout, stderr, exit code.
#[derive(Debug)]
struct Ran {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

struct Setup {
    root: tempfile::TempDir,
    ns: TestNamespace,
    scripts: PathBuf,
}

impl Setup {
    async fn new(prefix: &str) -> Setup {
        let cluster = TestCluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        let root = init_local_control_plane(&cluster, &ns).await;
        let scripts = root.path().join("hostfactory/scripts");
        let install = orb(root.path())
            .args(["hostfactory", "install", scripts.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(install.status.success(), "install: {install:?}");
        Setup { root, ns, scripts }
    }

    fn path(&self) -> &Path {
        self.root.path()
    }

    /// Runs an installed script the way HostFactory does: `<script> -f <input file>`.
    fn script(&self, script: &str, input: &Value, route: Route<'_>) -> Ran {
        let input_file = self.path().join(format!("hf_in_{script}.json"));
        std::fs::write(&input_file, input.to_string()).unwrap();
        let mut cmd = Command::new(self.scripts.join(script));
        clear_env(&mut cmd)
            .args(["-f", input_file.to_str().unwrap()])
            .env("ORB_ROOT_DIR", self.path())
            .env("HOME", self.path());
        match route {
            Route::Direct => cmd.env("ORB_DAEMON", "off"),
            Route::Daemon(socket) => cmd.env("ORB_DAEMON", format!("unix:{}", socket.display())),
            Route::Configured => &mut cmd,
        };
        let out = cmd.output().unwrap();
        Ran {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
        }
    }

    /// The same call both ways; asserts equal stdout and exit code, returns the daemon's run.
    fn both_ways(&self, script: &str, input: &Value, socket: &Path) -> Ran {
        let via_daemon = self.script(script, input, Route::Daemon(socket));
        let direct = self.script(script, input, Route::Direct);
        assert_eq!(
            via_daemon.stdout, direct.stdout,
            "{script}: daemon and direct stdout differ\ndaemon stderr: {}\ndirect stderr: {}",
            via_daemon.stderr, direct.stderr
        );
        assert_eq!(via_daemon.code, direct.code, "{script}: exit codes differ");
        assert!(
            !via_daemon.stderr.contains("did not answer"),
            "{script} fell back: {}",
            via_daemon.stderr
        );
        via_daemon
    }

    async fn wait_until(&self, what: &str, id: &str, socket: &Path, done: fn(&Value) -> bool) {
        self.wait_until_via(what, id, Route::Daemon(socket), done)
            .await;
    }

    /// Polls `getRequestStatus.sh` for `id` through `route` until `done` holds.
    async fn wait_until_via(
        &self,
        what: &str,
        id: &str,
        route: Route<'_>,
        done: impl Fn(&Value) -> bool,
    ) {
        self.wait_until_within(what, id, route, Duration::from_secs(60), done)
            .await;
    }

    async fn wait_until_within(
        &self,
        what: &str,
        id: &str,
        route: Route<'_>,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) {
        let input = json!({"requests": [{"requestId": id}]});
        wait_for(what, within, || async {
            let entry =
                self.script("getRequestStatus.sh", &input, route).json()["requests"][0].clone();
            if done(&entry) {
                Check::Done(())
            } else {
                Check::NotYet(entry.to_string())
            }
        })
        .await;
    }
}

/// A running `orb serve`, stopped (SIGTERM) when dropped.
struct Daemon {
    child: Child,
    addr: String,
    socket: PathBuf,
}

impl Daemon {
    fn start(root: &Path) -> Daemon {
        let (child, addr, socket, _) = spawn_listening(orb(root));
        Daemon {
            child,
            addr,
            socket,
        }
    }

    fn get(&self, path: &str) -> String {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    /// How many HostFactory calls the daemon has answered (its HTTP counter).
    fn hostfactory_calls(&self) -> u64 {
        self.get("/metrics")
            .lines()
            .filter(|l| l.starts_with("orb_http_requests_total{"))
            .filter(|l| l.contains("route=\"/api/v1/hostfactory/{operation}\""))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `stdout` with each listed id replaced by a placeholder, to compare two replies that
/// differ only in the request ids they created.
fn with_ids_masked(stdout: &str, ids: &[&str]) -> String {
    ids.iter().fold(stdout.to_string(), |text, id| {
        text.replace(id, "<request-id>")
    })
}

fn submitted_id(ran: &Ran) -> String {
    let reply = ran.json();
    reply["requestId"]
        .as_str()
        .unwrap_or_else(|| panic!("no request id: {ran:?}"))
        .to_string()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn each_hostfactory_operation_answers_the_same_through_the_daemon_as_directly() {
    let setup = Setup::new("hf-daemon").await;
    let daemon = Daemon::start(setup.path());
    let socket = daemon.socket.clone();
    assert_eq!(socket, setup.path().join("work/orb.sock"));
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is the owner's only");
    let calls_before = daemon.hostfactory_calls();

    // getAvailableTemplates.
    let templates = setup.both_ways("getAvailableTemplates.sh", &json!({}), &socket);
    assert_eq!(templates.code, Some(0));
    assert!(templates.stdout.contains("\"templateId\": \"pod-worker\""));

    // requestMachines: one request each way; the replies differ only in the new id.
    let request = json!({"template": {"templateId": "pod-worker", "machineCount": 2}});
    let via_daemon = setup.script("requestMachines.sh", &request, Route::Daemon(&socket));
    let direct = setup.script("requestMachines.sh", &request, Route::Direct);
    assert_eq!(via_daemon.code, Some(0), "{via_daemon:?}");
    assert_eq!(direct.code, Some(0), "{direct:?}");
    let (first, second) = (submitted_id(&via_daemon), submitted_id(&direct));
    assert_ne!(first, second);
    assert_eq!(
        with_ids_masked(&via_daemon.stdout, &[&first]),
        with_ids_masked(&direct.stdout, &[&second])
    );

    // getRequestStatus, once both requests have their 2 machines.
    let complete = |e: &Value| e["status"] == "complete";
    setup
        .wait_until(
            "the daemon's request to complete",
            &first,
            &socket,
            complete,
        )
        .await;
    setup
        .wait_until("the direct request to complete", &second, &socket, complete)
        .await;
    let both = json!({"requests": [{"requestId": first}, {"requestId": second}, {"requestId": "req-unknown"}]});
    let status = setup.both_ways("getRequestStatus.sh", &both, &socket);
    let entries = status.json()["requests"].clone();
    assert_eq!(
        entries[0]["machines"].as_array().unwrap().len(),
        2,
        "{entries}"
    );
    let machine_of = |i: usize| {
        entries[i]["machines"][0]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (mine, theirs) = (machine_of(0), machine_of(1));

    // The template's live machines are listed now, the same way.
    setup.both_ways("getAvailableTemplates.sh", &json!({}), &socket);

    // requestReturnMachines: one machine of each request, one each way.
    let ret = |name: &str| json!({"machines": [{"name": name, "machineId": name}]});
    let returned_via_daemon = setup.script(
        "requestReturnMachines.sh",
        &ret(&mine),
        Route::Daemon(&socket),
    );
    let returned_direct = setup.script("requestReturnMachines.sh", &ret(&theirs), Route::Direct);
    assert_eq!(returned_via_daemon.code, Some(0), "{returned_via_daemon:?}");
    let (ret_a, ret_b) = (
        submitted_id(&returned_via_daemon),
        submitted_id(&returned_direct),
    );
    assert_eq!(
        with_ids_masked(&returned_via_daemon.stdout, &[&ret_a]),
        with_ids_masked(&returned_direct.stdout, &[&ret_b])
    );
    // An unknown machine is reported the same way too (a failed return).
    setup.both_ways(
        "requestReturnMachines.sh",
        &ret("orb-no-such-machine-0000"),
        &socket,
    );

    setup
        .wait_until("the daemon's return to complete", &ret_a, &socket, complete)
        .await;
    setup
        .wait_until("the direct return to complete", &ret_b, &socket, complete)
        .await;
    let returns =
        json!({"requests": [{"requestId": ret_a}, {"requestId": ret_b}, {"requestId": first}]});
    setup.both_ways("getRequestStatus.sh", &returns, &socket);

    // getReturnRequests.
    let reclaims = setup.both_ways("getReturnRequests.sh", &json!({}), &socket);
    assert_eq!(reclaims.json()["status"], "complete", "{}", reclaims.stdout);

    // Bad input fails the same way (exit code and the HostFactory error reply).
    let bad = setup.both_ways("requestMachines.sh", &json!({"template": {}}), &socket);
    assert_ne!(bad.code, Some(0));
    assert!(bad.json()["message"].is_string(), "{}", bad.stdout);

    assert!(
        daemon.hostfactory_calls() >= calls_before + 12,
        "the daemon-routed calls reached the daemon: {}",
        daemon.get("/metrics")
    );

    let exit = daemon.stop();
    assert!(exit.success(), "{exit:?}");
    assert!(!socket.exists(), "the socket is removed at shutdown");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_daemon_that_does_not_answer_is_skipped_with_a_note_and_the_same_stdout() {
    let setup = Setup::new("hf-nodaemon").await;
    let request = json!({"template": {"templateId": "pod-worker", "machineCount": 1}});
    let submitted = setup.script("requestMachines.sh", &request, Route::Direct);
    let id = submitted_id(&submitted);
    // The three reads below must see the same cluster: a pod turning Ready between them would
    // change stdout for a reason that has nothing to do with the daemon being skipped.
    setup
        .wait_until_via("the request to complete", &id, Route::Direct, |e| {
            e["status"] == "complete"
        })
        .await;
    let status_input = json!({"requests": [{"requestId": id}]});
    let direct = setup.script("getRequestStatus.sh", &status_input, Route::Direct);

    // Named by ORB_DAEMON: nothing listens there.
    let nowhere = setup.path().join("work/nobody.sock");
    let skipped = setup.script(
        "getRequestStatus.sh",
        &status_input,
        Route::Daemon(&nowhere),
    );
    // Nothing named: a socket left at the default path by a daemon that died.
    let default_socket = setup.path().join("work/orb.sock");
    drop(std::os::unix::net::UnixListener::bind(&default_socket).unwrap());
    let stale = setup.script("getRequestStatus.sh", &status_input, Route::Configured);
    assert_eq!(stale.stdout, direct.stdout, "stale socket: stdout differs");
    assert_eq!(stale.code, direct.code);
    assert!(
        stale.stderr.contains(&format!(
            "note: the orb daemon at unix:{} (the default socket) did not answer",
            default_socket.display()
        )),
        "{}",
        stale.stderr
    );
    // Named in config.json (which wins over the default socket).
    let config_file = setup.path().join("config/config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_file).unwrap()).unwrap();
    config["daemon"] = json!({"socket": nowhere, "connect_timeout_ms": 200});
    std::fs::write(&config_file, config.to_string()).unwrap();
    let from_config = setup.script("getRequestStatus.sh", &status_input, Route::Configured);

    for (how, ran) in [("ORB_DAEMON", &skipped), ("config.json", &from_config)] {
        assert_eq!(ran.stdout, direct.stdout, "{how}: stdout differs");
        assert_eq!(ran.code, direct.code, "{how}: exit code differs");
        assert!(
            ran.stderr.contains(&format!(
                "note: the orb daemon at unix:{} ",
                nowhere.display()
            )) && ran.stderr.contains("ran getRequestStatus directly"),
            "{how}: {}",
            ran.stderr
        );
    }
    assert!(
        from_config.stderr.contains("config.json daemon.socket"),
        "{}",
        from_config.stderr
    );
    // A request that may have reached nobody is still made directly once nothing was sent.
    let requested = setup.script("requestMachines.sh", &request, Route::Daemon(&nowhere));
    assert_eq!(requested.code, Some(0), "{requested:?}");
    assert!(requested.stderr.contains("ran requestMachines directly"));
}

/// A request of 500 machines or more: `orb serve` keeps its machines as it wrote them and
/// hands that text out again while the store's machine list is the same one. Through the
/// daemon the reply stays the direct reply call after call, and the kept text follows its
/// machines: a return and a pod deleted behind orb's back show on the next call.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_big_requests_status_through_the_daemon_follows_its_machines() {
    const MACHINES: usize = 500; // the daemon keeps the written machines from 500 on
    let setup = Setup::new("hf-big").await;
    let cluster = TestCluster::connect().await;
    // A node of the test's own, so 500 pods take no other test's room.
    let node = cluster.node_with_room("hf-big", MACHINES as u32 + 10).await;
    let templates_file = setup.path().join("config/templates.json");
    let mut templates: Value =
        serde_json::from_str(&std::fs::read_to_string(&templates_file).unwrap()).unwrap();
    templates["templates"].as_array_mut().unwrap().push(json!({
        "templateId": "big", "maxNumber": MACHINES, "imageId": "busybox:1.36",
        "nodeSelector": node.node_selector(), "tolerations": node.tolerations(),
    }));
    std::fs::write(&templates_file, templates.to_string()).unwrap();
    let config_file = setup.path().join("config/config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_file).unwrap()).unwrap();
    config["request"]["max_machines_per_request"] = json!(MACHINES);
    std::fs::write(&config_file, config.to_string()).unwrap();
    let daemon = Daemon::start(setup.path());
    let socket = daemon.socket.clone();

    let request = json!({"template": {"templateId": "big", "machineCount": MACHINES}});
    let acquire =
        submitted_id(&setup.script("requestMachines.sh", &request, Route::Daemon(&socket)));
    setup
        .wait_until_within(
            "500 machines running",
            &acquire,
            Route::Daemon(&socket),
            Duration::from_secs(300),
            |e| e["status"] == "complete",
        )
        .await;
    let status = json!({"requests": [{"requestId": acquire}, {"requestId": "req-unknown"}]});
    let first = setup.both_ways("getRequestStatus.sh", &status, &socket);
    let machines = first.json()["requests"][0]["machines"].clone();
    assert_eq!(
        machines.as_array().unwrap().len(),
        MACHINES,
        "{}",
        first.stdout
    );
    // The second call hands out the kept text: still the direct reply.
    let again = setup.both_ways("getRequestStatus.sh", &status, &socket);
    assert_eq!(again.stdout, first.stdout);

    // A return of three: the acquire's entries of those three name it on the next call.
    let names: Vec<String> = (0..3)
        .map(|i| machines[i]["name"].as_str().unwrap().to_string())
        .collect();
    let returned = names
        .iter()
        .map(|n| json!({"name": n, "machineId": n}))
        .collect::<Vec<_>>();
    let ret = submitted_id(&setup.script(
        "requestReturnMachines.sh",
        &json!({"machines": returned}),
        Route::Daemon(&socket),
    ));
    setup
        .wait_until("the return to complete", &ret, &socket, |e| {
            e["status"] == "complete"
        })
        .await;
    let after_return = setup.both_ways("getRequestStatus.sh", &status, &socket);
    let entries = after_return.json()["requests"][0]["machines"].clone();
    for entry in entries.as_array().unwrap() {
        let named = names.iter().any(|n| entry["name"] == n.as_str());
        assert_eq!(
            entry["returnRequestId"].as_str() == Some(ret.as_str()),
            named,
            "{entry}"
        );
    }

    // A pod deleted behind orb's back: its machine stops being running on the next calls.
    let gone = machines[10]["name"].as_str().unwrap().to_string();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), setup.ns.name());
    pods.delete(&gone, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    setup
        .wait_until_within(
            "the deleted pod's machine to leave running",
            &acquire,
            Route::Daemon(&socket),
            Duration::from_secs(60),
            |e| {
                e["machines"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["name"] == gone.as_str() && m["status"] != "running")
            },
        )
        .await;
    setup.both_ways("getRequestStatus.sh", &status, &socket);
    let exit = daemon.stop();
    assert!(exit.success(), "{exit:?}");
}
