//! The `orb` binary end to end, without a cluster: templates, validation, bad input, status of
//! stored requests, the HostFactory scripts. Every refusal is checked for its message, its
//! exit code and for leaving storage untouched.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use orb_core::ids::RequestId;
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::test_support::{self, at};
use orb_store::{RequestFilter, Store};
use serde_json::{Value, json};

struct Env {
    root: tempfile::TempDir,
}

const TEMPLATES: &str = r#"{"scheduler_type": "hostfactory", "templates": [
  {"templateId": "worker", "maxNumber": 3, "imageId": "busybox:1.36", "instanceTags": "team=hpc",
   "resourceRequests": {"cpu": "2", "memory": "4Gi"}},
  {"templateId": "gpu", "maxNumber": -1, "imageId": "cuda:12", "providerApi": "Job",
   "attributes": {"type": ["String", "X86_64"], "ncpus": ["Numeric", "8"], "nram": ["Numeric", "65536"]}},
  {"templateId": "broken", "maxNumber": 2, "namespace": "Bad_Namespace"}
]}"#;

impl Env {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.json"),
            json!({
                // A provider type no build knows: these tests pin down what orb does on its
                // own, so they must not depend on which providers are compiled in.
                "providers": [{"name": "kube", "type": "offline", "config": {"namespace": "batch"}}],
                "request": {"max_machines_per_request": 5}
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(config.join("kube_templates.json"), TEMPLATES).unwrap();
        Self { root }
    }

    fn path(&self) -> &Path {
        self.root.path()
    }

    fn db(&self) -> PathBuf {
        self.path().join("work/orb.db")
    }

    fn orb(&self) -> Command {
        let mut cmd = Command::cargo_bin("orb").unwrap();
        for var in support::ENV_TO_CLEAR {
            cmd.env_remove(var);
        }
        cmd.env("ORB_ROOT_DIR", self.path())
            .env("HOME", self.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.orb().args(args).output().unwrap()
    }

    fn hf(&self, args: &[&str], input: &str) -> Output {
        let file = self.path().join("hf_in.json");
        std::fs::write(&file, input).unwrap();
        let mut all = vec!["--scheduler", "hostfactory"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-f", file.to_str().unwrap()]);
        self.run(&all)
    }

    async fn store(&self) -> Store {
        Store::open_sqlite_file(&self.db()).await.unwrap()
    }

    /// The stored status of request `id`, which must exist.
    async fn stored_status(&self, id: &str) -> RequestStatus {
        self.store()
            .await
            .get_request(&RequestId::parse(id).unwrap())
            .await
            .unwrap()
            .unwrap()
            .status
    }

    async fn request_count(&self) -> usize {
        if !self.db().exists() {
            return 0;
        }
        self.store()
            .await
            .list_requests(&RequestFilter::default())
            .await
            .unwrap()
            .len()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(out)))
}

/// A refusal: the given code, one `error:` line naming the problem, and for HostFactory a
/// `{"message"}` reply without a requestId.
fn assert_refused(out: &Output, code: i32, needle: &str, hostfactory: bool) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "exactly one error line: {err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
    if hostfactory {
        let reply = json_of(out);
        assert!(reply["message"].as_str().unwrap().contains(needle));
        assert!(reply.get("requestId").is_none());
    } else {
        assert!(out.stdout.is_empty(), "nothing on stdout: {}", stdout(out));
    }
}

#[test]
fn version_answers_without_config() {
    let env = Env::new();
    let out = env
        .orb()
        .env("ORB_ROOT_DIR", "/nonexistent")
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(stdout(&out).starts_with("orb "));
}

#[test]
fn hostfactory_template_list_is_the_documented_reply() {
    let env = Env::new();
    let out = env.hf(&["templates", "list"], "{}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    insta::assert_json_snapshot!("hf_templates_list", json_of(&out));
    assert!(
        stderr(&out).contains("template \"broken\" is not advertised"),
        "{}",
        stderr(&out)
    );
}

/// A daemon that accepted the connection but is wedged (here: a socket nobody ever reads)
/// is skipped within seconds, not after `reply_timeout_secs` (120 s): the script runs the call
/// directly, with the same stdout and a note on stderr.
#[test]
fn a_wedged_daemon_is_skipped_within_seconds() {
    let env = Env::new();
    let direct = env.hf(&["templates", "list"], "{}");
    let socket = env.path().join("wedged.sock");
    // Bound and listening: the kernel completes connections, nothing ever answers them.
    let _wedged = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let started = std::time::Instant::now();
    let file = env.path().join("hf_in.json");
    let out = env
        .orb()
        .env("ORB_DAEMON", format!("unix:{}", socket.display()))
        .args(["--scheduler", "hostfactory", "templates", "list", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), stdout(&direct));
    assert!(
        stderr(&out).contains("did not answer")
            && stderr(&out).contains("ran getAvailableTemplates directly"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn default_template_list_uses_internal_names() {
    let env = Env::new();
    let out = env.run(&["templates", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list = json_of(&out);
    assert_eq!(list[0]["template_id"], "worker");
    assert_eq!(list[0]["available_number"], 3);
    assert_eq!(list[0]["attributes"]["ncpus"], json!(["Numeric", "2"]));
    let table = env.run(&["templates", "list", "-o", "table"]);
    assert!(stdout(&table).starts_with("TEMPLATE"), "{}", stdout(&table));
}

#[test]
fn showing_an_unknown_template_lists_the_known_ones() {
    let env = Env::new();
    let out = env.run(&["templates", "show", "nope"]);
    assert_refused(
        &out,
        2,
        "template \"nope\" is not defined; available templates: worker, gpu, broken",
        false,
    );
}

#[test]
fn validate_reports_every_problem_with_exit_2() {
    let env = Env::new();
    let out = env.run(&["templates", "validate"]);
    assert_eq!(out.status.code(), Some(2));
    let reply = json_of(&out);
    assert_eq!(reply["valid"], json!(["worker", "gpu"]));
    let problems = reply["invalid"][0]["problems"].to_string();
    assert!(
        problems.contains("imageId") && problems.contains("namespace"),
        "{problems}"
    );
    let good = env.path().join("good.json");
    std::fs::write(&good, r#"[{"templateId": "a", "imageId": "x"}]"#).unwrap();
    let ok = env.run(&["templates", "validate", "-f", good.to_str().unwrap()]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
}

#[tokio::test]
async fn bad_acquire_input_is_refused_and_nothing_is_stored() {
    let env = Env::new();
    let cases: [(&str, &str); 6] = [
        ("{\"template\": ", "is not valid JSON"),
        (
            r#"{"template": {"templateId": "nope", "machineCount": 1}}"#,
            "template \"nope\" is not defined",
        ),
        (
            r#"{"template": {"templateId": "worker", "machineCount": 0}}"#,
            "machineCount must be at least 1, got 0",
        ),
        (
            r#"{"template": {"templateId": "worker", "machineCount": 4}}"#,
            "at most 3 more can be requested, not 4",
        ),
        (
            r#"{"template": {"templateId": "gpu", "machineCount": 6}}"#,
            "more than request.max_machines_per_request (5)",
        ),
        (
            r#"{"template": {"templateId": "broken", "machineCount": 1}}"#,
            "Bad_Namespace",
        ),
    ];
    for (input, needle) in cases {
        let out = env.hf(&["machines", "request"], input);
        assert_refused(&out, 2, needle, true);
    }
    let out = env.run(&["machines", "request", "worker", "0"]);
    assert_refused(&out, 2, "at least 1", false);
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn a_valid_request_without_a_provider_fails_with_exit_3_and_stores_nothing() {
    let env = Env::new();
    let out = env.hf(
        &["machines", "request"],
        r#"{"template": {"templateId": "worker", "machineCount": 1}}"#,
    );
    assert_refused(
        &out,
        3,
        "provider \"kube\" has type \"offline\", which orb does not know",
        true,
    );
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn returning_unknown_machines_is_refused_and_nothing_is_stored() {
    let env = Env::new();
    let out = env.run(&["machines", "return", "ghost-1"]);
    assert_refused(&out, 2, "orb does not manage this machine: ghost-1", false);
    let out = env.hf(
        &["machines", "return"],
        r#"{"machines": [{"name": "ghost-1"}, {"name": "ghost-2"}]}"#,
    );
    assert_refused(&out, 2, "ghost-1, ghost-2", true);
    let out = env.hf(&["machines", "return"], r#"{"machines": []}"#);
    assert_refused(&out, 2, "list is empty", true);
    let out = env.run(&[
        "machines",
        "return",
        "--request-id",
        "req-00000000-0000-4000-8000-000000000000",
    ]);
    assert_refused(
        &out,
        2,
        "request req-00000000-0000-4000-8000-000000000000 not found",
        false,
    );
    assert_eq!(env.request_count().await, 0);
}

#[test]
fn unknown_request_ids() {
    let env = Env::new();
    let out = env.run(&[
        "requests",
        "status",
        "req-00000000-0000-4000-8000-000000000000",
    ]);
    assert_refused(
        &out,
        2,
        "request req-00000000-0000-4000-8000-000000000000 not found",
        false,
    );
    let out = env.run(&[
        "requests",
        "cancel",
        "req-00000000-0000-4000-8000-000000000000",
    ]);
    assert_refused(&out, 2, "not found", false);
    let out = env.run(&["requests", "cancel", "not an id"]);
    assert_refused(&out, 2, "is not valid", false);
    let out = env.hf(&["requests", "status"], r#"{"requests": []}"#);
    assert_refused(&out, 2, "no request ids given", true);
}

fn machine(request: &Request, name: &str, status: MachineStatus, ip: Option<&str>) -> Machine {
    test_support::machine(name)
        .request_id(request.request_id.clone())
        .resource(name)
        .status(status)
        .instance_type("k8s/Pod")
        .tag("orb.io/managed", "true")
        .provider_data(json!({}))
        .created(at(1))
        .updated(at(20))
        .with(|m| {
            m.private_ip = ip.map(String::from);
            m.launch_time = ip.map(|_| at(20));
        })
        .build()
}

fn acquire(id: &str, status: RequestStatus, wanted: u32) -> Request {
    test_support::request(RequestType::Acquire)
        .id(id)
        .count(wanted)
        .status(status)
        .kind(orb_core::ProviderApi::Pod)
        .started(at(0))
        .deadline(at(300))
        .build()
}

const DONE: &str = "req-11111111-1111-4111-8111-111111111111";
const FAILED: &str = "req-22222222-2222-4222-8222-222222222222";
const STUCK: &str = "req-33333333-3333-4333-8333-333333333333";

async fn seed(env: &Env) {
    let store = env.store().await;
    let mut done = acquire(DONE, RequestStatus::Complete, 2);
    done.fulfilled_count = 2;
    let mut machines = vec![
        machine(
            &done,
            "orb-111111111111-0000",
            MachineStatus::Running,
            Some("10.0.0.1"),
        ),
        machine(
            &done,
            "orb-111111111111-0001",
            MachineStatus::Terminated,
            Some("10.0.0.2"),
        ),
    ];
    machines[1].status_reason = Some("Evicted".into());
    store
        .insert_request(&mut done, &mut machines)
        .await
        .unwrap();
    let mut failed = acquire(FAILED, RequestStatus::Failed, 1);
    failed.status_message = Some("image registry.invalid/x:1 cannot be pulled".into());
    store.insert_request(&mut failed, &mut []).await.unwrap();
    // In progress, deadline long past: any read settles it without needing the cluster.
    let mut stuck = acquire(STUCK, RequestStatus::InProgress, 3);
    store.insert_request(&mut stuck, &mut []).await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn hostfactory_status_of_stored_requests() {
    let env = Env::new();
    seed(&env).await;
    let input = json!({"requests": [
        {"requestId": DONE}, {"requestId": FAILED}, {"requestId": STUCK},
        {"requestId": "req-00000000-0000-4000-8000-000000000000"}, {"requestId": "bad id"}
    ]});
    let out = env.hf(&["requests", "status"], &input.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    insta::assert_json_snapshot!("hf_request_status", json_of(&out));
    // STUCK never recorded anything and nobody holds its claim: the read resumed it, and
    // with no provider that can be built the resume failed it, with the reason.
    assert_eq!(
        env.stored_status(STUCK).await,
        RequestStatus::Failed,
        "the settled state was stored"
    );
}

/// A one-shot call closes its store before it exits, so SQLite's last connection checkpoints
/// the WAL and removes it with the shared-memory index. Were the store only dropped, its
/// close would be cut off by the exit: the WAL stays, and every later call with no daemon
/// holding the file recovers it and checkpoints (and fsyncs) it again.
#[tokio::test]
async fn one_shot_calls_leave_no_wal_behind() {
    let env = Env::new();
    seed(&env).await;
    let wal = env.db().with_extension("db-wal");
    let shm = env.db().with_extension("db-shm");
    let status_of = |id: &str| json!({"requests": [{"requestId": id}]}).to_string();
    let (settles, reads, settled) = (status_of(STUCK), status_of(DONE), status_of(FAILED));
    type Call<'a> = Box<dyn Fn() -> Output + 'a>;
    let calls: [(&str, Call<'_>); 6] = [
        (
            "a HostFactory status that settles a request (a write)",
            Box::new(|| env.hf(&["requests", "status"], &settles)),
        ),
        (
            "a HostFactory status that only reads",
            Box::new(|| env.hf(&["requests", "status"], &reads)),
        ),
        (
            "a HostFactory status of a settled request (read without sqlx)",
            Box::new(|| env.hf(&["requests", "status"], &settled)),
        ),
        (
            "orb requests status",
            Box::new(|| env.run(&["requests", "status", DONE])),
        ),
        (
            "orb requests list",
            Box::new(|| env.run(&["requests", "list"])),
        ),
        (
            "orb machines list",
            Box::new(|| env.run(&["machines", "list"])),
        ),
    ];
    // An exit that cuts the close off wins that race only some of the time: many calls.
    for (what, call) in calls.iter().cycle().take(30) {
        let out = call();
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(
            !wal.exists() && !shm.exists(),
            "{what} left the WAL ({}) or its index ({}) behind",
            wal.exists(),
            shm.exists()
        );
    }
    assert_eq!(
        env.stored_status(STUCK).await,
        RequestStatus::Failed,
        "the write reached the database file"
    );
}

#[tokio::test]
async fn status_works_without_a_template_file_but_requests_say_it_is_missing() {
    let env = Env::new();
    seed(&env).await;
    std::fs::remove_file(env.path().join("config/kube_templates.json")).unwrap();
    let out = env.hf(
        &["requests", "status"],
        &json!({"requests": [{"requestId": DONE}]}).to_string(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["requests"][0]["status"], "complete");
    let out = env.hf(
        &["machines", "request"],
        r#"{"template": {"templateId": "worker", "machineCount": 1}}"#,
    );
    assert_refused(&out, 2, "no template file in", true);
}

#[tokio::test]
async fn default_status_shows_stored_requests() {
    let env = Env::new();
    seed(&env).await;
    let out = env.run(&["requests", "status", DONE]);
    assert!(out.status.success(), "{}", stderr(&out));
    let views = json_of(&out);
    assert_eq!(views[0]["request"]["status"], "complete");
    assert_eq!(views[0]["machines"].as_array().unwrap().len(), 2);
    let listed = json_of(&env.run(&["requests", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 3);
    let machines = json_of(&env.run(&["machines", "list"]));
    assert_eq!(machines.as_array().unwrap().len(), 1, "live machines only");
    let all = json_of(&env.run(&["machines", "list", "--all"]));
    assert_eq!(all.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn hostfactory_return_requests_lists_hosts_the_cluster_took() {
    let env = Env::new();
    seed(&env).await;
    let out = env.hf(&["requests", "list-returns"], "{}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    insta::assert_json_snapshot!("hf_return_requests", json_of(&out));
    assert!(
        stderr(&out).contains("live machines were not checked"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn hostfactory_return_of_a_machine_the_cluster_already_removed_completes() {
    let env = Env::new();
    seed(&env).await;
    let out = env.hf(
        &["machines", "return"],
        r#"{"machines": [{"name": "orb-111111111111-0001"}]}"#,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reply = json_of(&out);
    let id = reply["requestId"].as_str().unwrap().to_string();
    assert!(id.starts_with("ret-"));
    let status = env.hf(
        &["requests", "status"],
        &json!({"requests": [{"requestId": id}]}).to_string(),
    );
    let entry = &json_of(&status)["requests"][0];
    assert_eq!(entry["status"], "complete");
    assert_eq!(entry["machines"][0]["result"], "succeed");
}

#[test]
fn installed_scripts_run_orb_in_hostfactory_mode() {
    let env = Env::new();
    let dir = env.path().join("hf/providers/kube");
    let out = env.run(&["hostfactory", "install", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    for name in [
        "getAvailableTemplates.sh",
        "requestMachines.sh",
        "requestReturnMachines.sh",
        "getRequestStatus.sh",
        "getReturnRequests.sh",
    ] {
        let meta = std::fs::metadata(dir.join(name)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            meta.permissions().mode() & 0o111,
            0o111,
            "{name} is executable"
        );
    }
    let input = env.path().join("in.json");
    std::fs::write(&input, "{}").unwrap();
    let script = std::process::Command::new(dir.join("getAvailableTemplates.sh"))
        .args(["-f", input.to_str().unwrap()])
        .env("ORB_ROOT_DIR", env.path())
        .env_remove("ORB_CONFIG_DIR")
        .env_remove("HF_PROVIDER_CONFDIR")
        .output()
        .unwrap();
    assert!(script.status.success(), "{}", stderr(&script));
    assert_eq!(json_of(&script)["templates"][0]["templateId"], "worker");
    let again = env.run(&["hostfactory", "install", dir.to_str().unwrap()]);
    assert_refused(&again, 2, "--force", false);
}

#[test]
fn init_writes_a_loadable_config_once() {
    let env = Env::new();
    let dir = env.path().join("fresh");
    let out = env.run(&[
        "init",
        "--config-dir",
        dir.to_str().unwrap(),
        "--namespace",
        "batch",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["providers"][0]["config"]["namespace"], "batch");
    let listed = env
        .orb()
        .env("ORB_CONFIG_DIR", &dir)
        .args(["templates", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_eq!(json_of(&listed).as_array().unwrap().len(), 4);
    let again = env.run(&["init", "--config-dir", dir.to_str().unwrap()]);
    assert_refused(&again, 2, "--force", false);
    let missing = env.run(&[
        "init",
        "--config-dir",
        dir.to_str().unwrap(),
        "--force",
        "--kubeconfig",
        "/no/such/file",
    ]);
    assert_refused(&missing, 2, "/no/such/file does not exist", false);
}

#[test]
fn missing_config_points_at_orb_init() {
    let env = Env::new();
    let out = env
        .orb()
        .env("ORB_CONFIG_DIR", env.path().join("empty"))
        .args(["templates", "list"])
        .output()
        .unwrap();
    assert_refused(&out, 2, "run `orb init`", false);
    let show = env
        .orb()
        .env("ORB_CONFIG_DIR", env.path().join("empty"))
        .args(["config", "show"])
        .output()
        .unwrap();
    assert!(show.status.success());
    assert_eq!(json_of(&show)["config_file"]["exists"], false);
}

#[test]
fn completions_are_generated() {
    let env = Env::new();
    let out = env.run(&["completions", "bash"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("_orb()"), "{}", &stdout(&out)[..200]);
}

/// `orb machines purge`, `orb requests purge` and `orb requests cleanup`: the same rules as
/// the REST routes, refusals as one error line (exit 2) that leave the store as it was.
#[tokio::test]
async fn purges_and_cleanups_from_the_command_line() {
    let env = Env::new();
    seed(&env).await;
    let out = env.run(&["machines", "purge", "orb-111111111111-0000"]);
    assert_refused(&out, 2, "orb machines return orb-111111111111-0000", false);
    let out = env.run(&["requests", "purge", STUCK]);
    assert_refused(&out, 2, "orb requests cancel", false);
    let out = env.run(&[
        "requests",
        "cleanup",
        "--older-than-days",
        "1",
        "--status",
        "timeout",
        "--status",
        "acquiring",
    ]);
    assert_refused(&out, 2, "acquiring is not finished", false);
    assert_eq!(env.request_count().await, 3);

    let out = env.run(&["-o", "json", "machines", "purge", "orb-111111111111-0001"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_of(&out)["machine_id"], "orb-111111111111-0001");
    let out = env.run(&[
        "-o",
        "json",
        "requests",
        "cleanup",
        "--older-than-days",
        "1",
        "--dry-run",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dry = json_of(&out);
    assert_eq!(dry["request_ids"], json!([FAILED]), "{dry}");
    assert_eq!(dry["kept"][0]["request_id"], DONE, "{dry}");
    assert_eq!(env.request_count().await, 3);
    let out = env.run(&["-o", "json", "requests", "purge", FAILED]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(env.request_count().await, 2);
}

/// `orb machines return A B` with A held by a return still under way returns B, and says on
/// stderr which machine it left out and why, with exit 4 (partial success).
#[tokio::test]
async fn a_partial_return_names_what_it_left_out_and_exits_4() {
    let env = Env::new();
    seed(&env).await;
    let (held, gone) = ("orb-111111111111-0000", "orb-111111111111-0001");
    let store = env.store().await;
    let mut machines = store.find_machines(&[held.to_string()]).await.unwrap();
    let mut other = test_support::request(RequestType::Return)
        .status(RequestStatus::InProgress)
        .started(at(0))
        .build();
    machines[0].return_request_id = Some(other.request_id.clone());
    store
        .insert_request(&mut other, &mut machines)
        .await
        .unwrap();
    store.close().await;

    let out = env.run(&["machines", "return", held, gone]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(held) && err.contains(other.request_id.as_str()),
        "names the machine left out and the return holding it: {err}"
    );
}
