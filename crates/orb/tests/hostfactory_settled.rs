//! getRequestStatus of settled requests read on the script process's own thread
//! (`status_from_storage`), against the full way through a broker on the same SQLite file:
//! the same reply byte for byte when it answers, and no answer (the full way runs) whenever
//! a request must still be asked of the provider or the file cannot be read as it is. No
//! cluster: the Kubernetes provider is built, as a script call builds it, but never asked.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use orb_cli::cli::Cli;
use orb_cli::hostfactory::{Operation, ScriptReply, run_operation, status_from_storage};
use orb_cli::session::Session;
use orb_core::ProviderApi;
use orb_core::dirs::{DirFlags, Dirs, resolve_dirs};
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestStatus, RequestType};
use orb_core::test_support::{self, at};
use orb_store::Store;
use serde_json::{Value, json};

struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.json"),
            json!({"providers": [{"name": "kube", "type": "k8s", "config": {"namespace": "batch"}}]})
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            config.join("kube_templates.json"),
            json!({"templates": [{"templateId": "worker", "maxNumber": -1, "imageId": "busybox:1.36"}]})
                .to_string(),
        )
        .unwrap();
        Self { dir }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("work/orb.db")
    }

    fn dirs(&self) -> Dirs {
        let root = self.dir.path().to_str().unwrap().to_string();
        let env = move |name: &str| (name == "ORB_ROOT_DIR").then(|| root.clone());
        resolve_dirs(&DirFlags::default(), &env, Path::new("/nonexistent"))
    }

    fn session(&self) -> Session {
        let cli = Cli::try_parse_from(["orb", "--scheduler", "hostfactory", "requests", "status"])
            .unwrap();
        Session::with_dirs(cli.global, self.dirs())
    }

    async fn store(&self) -> Store {
        Store::open_sqlite_file(&self.db()).await.unwrap()
    }

    /// Stores acquire `request` with a machine of its own in each of `statuses`, closed again.
    async fn put(&self, mut request: Request, statuses: &[MachineStatus]) -> String {
        let mut machines = machines_of(&request, statuses);
        let store = self.store().await;
        store
            .insert_request(&mut request, &mut machines)
            .await
            .unwrap();
        store.close().await;
        request.request_id.to_string()
    }

    /// The reply read on this thread, if it answers.
    fn settled(&self, input: &Value) -> Option<ScriptReply> {
        status_from_storage(&self.session(), Some(input))
    }

    /// The reply the full way gives: a broker on the store, as a script call without the
    /// shortcut runs it.
    async fn full(&self, input: &Value) -> ScriptReply {
        let session = self.session();
        let reply = run_operation(Operation::GetRequestStatus, Some(input), async || {
            let loaded = session.config()?;
            session.hostfactory_env(&loaded).await
        })
        .await;
        session.close_stores().await;
        reply
    }
}

fn status_input(ids: &[&str]) -> Value {
    json!({"requests": ids.iter().map(|id| json!({"requestId": id})).collect::<Vec<_>>()})
}

fn acquire(status: RequestStatus, count: u32, api: ProviderApi) -> Request {
    test_support::request(RequestType::Acquire)
        .count(count)
        .status(status)
        .kind(api)
        .provider_data(json!({"pods": ["recorded"]}))
        .build()
}

fn machines_of(request: &Request, statuses: &[MachineStatus]) -> Vec<Machine> {
    statuses
        .iter()
        .enumerate()
        .map(|(i, status)| {
            test_support::machine(&format!(
                "orb-settled-{}-{i:03}",
                &request.request_id.hex_digits()[..12]
            ))
            .of(request)
            .status(*status)
            .ip(&format!("10.1.0.{}", i + 1))
            .launched(at(10))
            .tag("team", "hpc")
            .build()
        })
        .collect()
}

/// A finished return of `count` machines (each gone), with the acquire they came from.
async fn finished_return(root: &Root, count: usize) -> (String, String) {
    let store = root.store().await;
    let mut acquired = acquire(RequestStatus::Complete, count as u32, ProviderApi::Pod);
    let mut giving_back = test_support::request(RequestType::Return)
        .no_template()
        .count(count as u32)
        .status(RequestStatus::Complete)
        .fulfilled(count as u32)
        .message(&format!("{count} of {count} machines released"))
        .build();
    let mut machines = machines_of(&acquired, &vec![MachineStatus::Terminated; count]);
    for m in &mut machines {
        m.return_request_id = Some(giving_back.request_id.clone());
    }
    giving_back.machine_ids = machines.iter().map(|m| m.machine_id.clone()).collect();
    acquired.fulfilled_count = count as u32;
    store
        .insert_request(&mut acquired, &mut machines)
        .await
        .unwrap();
    store
        .insert_request(&mut giving_back, &mut [])
        .await
        .unwrap();
    store.close().await;
    (
        acquired.request_id.to_string(),
        giving_back.request_id.to_string(),
    )
}

#[tokio::test]
async fn settled_requests_read_here_reply_exactly_as_the_full_way() {
    let root = Root::new();
    let (acquired, returned) = finished_return(&root, 40).await;
    // A cancel deleted the Deployment's pods: nothing comes back on its own.
    let cancelled = root
        .put(
            acquire(RequestStatus::Cancelled, 2, ProviderApi::Deployment),
            &[MachineStatus::Terminated; 2],
        )
        .await;
    // Failed before it created anything it recorded as a machine.
    let failed = {
        let mut request = acquire(RequestStatus::Failed, 3, ProviderApi::Job);
        request.status_message = Some("image registry.invalid/x:1 cannot be pulled".into());
        root.put(request, &[]).await
    };
    let cases: [(&str, Vec<&str>); 6] = [
        ("a finished return", vec![&returned]),
        ("the acquire whose machines it took back", vec![&acquired]),
        ("a cancelled Deployment acquire", vec![&cancelled]),
        ("a failed acquire", vec![&failed]),
        (
            "unknown and malformed ids",
            vec!["req-00000000-0000-4000-8000-000000000000", "not an id"],
        ),
        (
            "all of them at once, one twice",
            vec![
                &returned,
                "not an id",
                &acquired,
                &cancelled,
                &failed,
                &returned,
            ],
        ),
    ];
    for (what, ids) in cases {
        let input = status_input(&ids);
        let here = root
            .settled(&input)
            .unwrap_or_else(|| panic!("{what}: not answered on this thread"));
        let full = root.full(&input).await;
        assert_eq!(here, full, "{what}");
        assert_eq!(here.exit_code, 0, "{what}");
    }
    // Not a stand-in: the reply carries the stored machines.
    let reply: Value =
        serde_json::from_str(&root.settled(&status_input(&[&returned])).unwrap().stdout).unwrap();
    assert_eq!(
        reply["requests"][0]["machines"].as_array().unwrap().len(),
        40
    );
}

#[tokio::test]
async fn requests_the_provider_must_still_be_asked_about_go_the_full_way() {
    let root = Root::new();
    let (_, returned) = finished_return(&root, 2).await;
    let running = root
        .put(
            acquire(RequestStatus::Complete, 2, ProviderApi::Pod),
            &[MachineStatus::Running, MachineStatus::Terminated],
        )
        .await;
    // A Deployment's pod that went without a return: its controller may start a new one.
    let may_come_back = root
        .put(
            acquire(RequestStatus::Complete, 1, ProviderApi::Deployment),
            &[MachineStatus::Terminated],
        )
        .await;
    // A failed pod is still an object on the cluster until someone deletes it.
    let failed_pods_left = root
        .put(
            acquire(RequestStatus::Failed, 1, ProviderApi::Pod),
            &[MachineStatus::Failed],
        )
        .await;
    let in_progress = root
        .put(
            acquire(RequestStatus::InProgress, 2, ProviderApi::Pod),
            &[MachineStatus::Pending; 2],
        )
        .await;
    for (what, id) in [
        ("a complete acquire with a running machine", &running),
        ("a Deployment machine that may come back", &may_come_back),
        (
            "a failed acquire whose failed pod is left",
            &failed_pods_left,
        ),
        ("an acquire in progress", &in_progress),
    ] {
        assert_eq!(root.settled(&status_input(&[id])), None, "{what}");
        // One such request among settled ones sends the whole call the full way.
        assert_eq!(
            root.settled(&status_input(&[&returned, id])),
            None,
            "{what}, beside a settled one"
        );
    }
    assert!(root.settled(&status_input(&[&returned])).is_some());
}

#[tokio::test]
async fn a_file_that_is_missing_or_not_read_as_it_is_goes_the_full_way_untouched() {
    let root = Root::new();
    let input = status_input(&["req-00000000-0000-4000-8000-000000000000"]);
    // No database yet: the full way creates it; this way creates nothing.
    assert_eq!(root.settled(&input), None);
    assert!(!root.db().exists(), "the file was created");
    assert!(
        !root.db().parent().unwrap().exists(),
        "the work dir was created"
    );
    // A file from before the schema version was kept in its header: the migrator's to read.
    let (_, returned) = finished_return(&root, 1).await;
    let input = status_input(&[&returned]);
    assert!(root.settled(&input).is_some());
    rusqlite_exec(&root.db(), "PRAGMA user_version = 0");
    assert_eq!(root.settled(&input), None);
    let full = root.full(&input).await;
    assert_eq!(full.exit_code, 0, "{full:?}");
    assert_eq!(
        root.settled(&input),
        Some(full),
        "the full way's open brought the header up to date"
    );
    // Input that is not a status query: the full way says what is wrong with it.
    for bad in [json!({}), json!({"requests": "x"})] {
        assert_eq!(root.settled(&bad), None, "{bad}");
    }
}

#[tokio::test]
async fn a_machine_row_edited_by_hand_is_reported_by_the_full_way() {
    let root = Root::new();
    let (acquired, returned) = finished_return(&root, 3).await;
    let _ = acquired;
    rusqlite_exec(
        &root.db(),
        "UPDATE machines SET tags = 'not json' WHERE machine_id LIKE '%-001'",
    );
    let input = status_input(&[&returned]);
    assert_eq!(root.settled(&input), None);
    let full = root.full(&input).await;
    assert_ne!(full.exit_code, 0, "{full:?}");
    assert!(
        full.stdout.contains("unreadable") && full.stdout.contains("-001"),
        "the full way names the row: {}",
        full.stdout
    );
}

/// HostFactory polls from many script processes at once while another process writes:
/// every poll is answered, with the same reply, and the last one out removes the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pollers_in_parallel_beside_a_writer_all_get_the_same_reply() {
    let root = Root::new();
    let (_, returned) = finished_return(&root, 40).await;
    let input = status_input(&[&returned]);
    let expected = root.full(&input).await;
    let file = root.dir.path().join("status.json");
    std::fs::write(&file, input.to_string()).unwrap();
    let polling = Arc::new(AtomicBool::new(true));
    let writer = {
        let (store, polling) = (root.store().await, polling.clone());
        tokio::spawn(async move {
            let mut written = 0;
            while polling.load(Ordering::Relaxed) {
                let mut request = acquire(RequestStatus::Complete, 2, ProviderApi::Pod);
                let mut machines = machines_of(&request, &[MachineStatus::Terminated; 2]);
                store
                    .insert_request(&mut request, &mut machines)
                    .await
                    .unwrap();
                written += 1;
            }
            store.close().await;
            written
        })
    };
    let pollers: Vec<_> = (0..6)
        .map(|_| {
            let (dir, file) = (root.dir.path().to_path_buf(), file.clone());
            tokio::task::spawn_blocking(move || {
                (0..8)
                    .map(|_| {
                        support::orb(&dir)
                            .args(["--scheduler", "hostfactory", "requests", "status", "-f"])
                            .arg(&file)
                            .output()
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut replies = Vec::new();
    for poller in pollers {
        replies.extend(poller.await.unwrap());
    }
    polling.store(false, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 0, "the writer wrote while the polls ran");
    for out in &replies {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected.stdout);
    }
    assert_eq!(replies.len(), 48);
    assert!(!root.db().with_extension("db-wal").exists());
}

/// Runs `sql` on the file the way a person with the sqlite3 shell would.
fn rusqlite_exec(db: &Path, sql: &str) {
    let connection = rusqlite::Connection::open(db).unwrap();
    connection.execute_batch(sql).unwrap();
}

/// A poll that the check on this thread sends the full way builds the Kubernetes provider
/// once, not once per way: a configuration warning reaches the log once per call, whichever
/// way the call goes.
#[test]
fn a_configuration_warning_is_logged_once_per_poll_either_way() {
    let root = Root::new();
    let log = root.dir.path().join("logs/orb.log");
    let warnings = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("ORB_K8S_DEFAULT_NAMESPACE is a legacy name")
            .count()
    };
    let input = status_input(&["req-00000000-0000-4000-8000-000000000000"]).to_string();
    let poll = || {
        support::orb(root.dir.path())
            .env("ORB_K8S_DEFAULT_NAMESPACE", "batch")
            .args(["--scheduler", "hostfactory", "requests", "status", "-d"])
            .arg(&input)
            .output()
            .unwrap()
    };
    // No file yet: nothing to read here, so the full way runs (and creates it).
    assert!(!root.db().exists());
    let first = poll();
    assert!(first.status.success(), "{first:?}");
    assert!(root.db().exists(), "the full way ran");
    assert_eq!(warnings(), 1, "the full way's call");
    // Now the unknown id is settled and answered here.
    let second = poll();
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(warnings(), 2, "one more for the call answered here");
}
