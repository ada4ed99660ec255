//! maxNumber under concurrency, with default settings: twenty requests of 5 against a template
//! with maxNumber 60, sent at once by twenty CLI processes (SQLite, then PostgreSQL) and as
//! twenty concurrent POSTs to two `orb serve` replicas on one PostgreSQL. Exactly twelve are
//! accepted, the other eight are refused with the limit in the message, and the cluster holds
//! exactly 60 pods of the template.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::world::{Kind, Setup, World};
use crate::support::postgres_url;
use crate::support::serve_process::Server;

/// Gives the template a name no other test uses (a PostgreSQL database is shared by the
/// suite) and `maxNumber`; its name.
fn limited_template(w: &World, max: i64) -> String {
    let name = format!(
        "limited-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let file = w.path().join("config/templates.json");
    let mut templates: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    templates["templates"][0]["templateId"] = json!(name);
    templates["templates"][0]["maxNumber"] = json!(max);
    std::fs::write(&file, templates.to_string()).unwrap();
    name
}

async fn managed_pods(w: &World, template: &str) -> usize {
    w.pods_api()
        .list(&kube::api::ListParams::default().labels(&format!("orb.io/template-id={template}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

/// Twenty `orb machines request subject 5` processes at once; (accepted, refused) and the
/// refusal messages.
fn twenty_processes(
    w: &World,
    template: &str,
    storage_url: Option<&str>,
) -> (usize, usize, Vec<String>) {
    let children: Vec<_> = (0..20)
        .map(|_| {
            let mut cmd = crate::support::orb(w.path());
            cmd.env("ORB_DAEMON", "off");
            if let Some(url) = storage_url {
                cmd.env("ORB_STORAGE_URL", url);
            }
            cmd.args(["machines", "request", template, "5"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut accepted = 0;
    let mut refused = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => accepted += 1,
            Some(2) => refused.push(String::from_utf8_lossy(&out.stderr).into_owned()),
            other => panic!("exit {other:?}: {}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    (accepted, refused.len(), refused)
}

async fn check(w: &World, template: &str, accepted: usize, refused: usize, messages: &[String]) {
    assert_eq!((accepted, refused), (12, 8), "{messages:?}");
    for m in messages {
        assert!(m.contains("maxNumber"), "{m}");
    }
    kube_fixture::wait_for("60 pods of the template", super::world::SETTLE, || async {
        let n = managed_pods(w, template).await;
        if n == 60 {
            kube_fixture::Check::Done(())
        } else {
            kube_fixture::Check::NotYet(format!("{n} pods"))
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        managed_pods(w, template).await,
        60,
        "never more than maxNumber"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn twenty_cli_processes_never_exceed_max_number_on_sqlite() {
    let w = World::new("lc-limit-sqlite", Setup::new(Kind::Pod)).await;
    let template = limited_template(&w, 60);
    let (accepted, refused, messages) = twenty_processes(&w, &template, None);
    check(&w, &template, accepted, refused, &messages).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn twenty_cli_processes_never_exceed_max_number_on_postgres() {
    let Some(url) = postgres_url() else { return };
    let w = World::new("lc-limit-pg", Setup::new(Kind::Pod)).await;
    let template = limited_template(&w, 60);
    let (accepted, refused, messages) = twenty_processes(&w, &template, Some(&url));
    check(&w, &template, accepted, refused, &messages).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn twenty_posts_to_two_serve_replicas_never_exceed_max_number() {
    let Some(url) = postgres_url() else { return };
    let w = World::new("lc-limit-replicas", Setup::new(Kind::Pod)).await;
    let template = limited_template(&w, 60);
    // Two replicas: two installations (work dirs, sockets) with one config and one database.
    let second = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(second.path().join("config")).unwrap();
    for file in ["config.json", "templates.json"] {
        std::fs::copy(
            w.path().join("config").join(file),
            second.path().join("config").join(file),
        )
        .unwrap();
    }
    let a = Server::start(w.path(), Some(&url));
    let b = Server::start(second.path(), Some(&url));
    let addrs = [a.addr.clone(), b.addr.clone()];
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let addr = addrs[i % 2].clone();
            let template = template.clone();
            std::thread::spawn(move || {
                crate::support::serve_process::http(
                    &addr,
                    "POST",
                    "/api/v1/machines/request",
                    Some(&json!({"template_id": template, "count": 5})),
                )
            })
        })
        .collect();
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    let mut messages = Vec::new();
    for t in threads {
        let (code, body) = t.join().unwrap();
        *codes.entry(code).or_default() += 1;
        if code >= 400 {
            messages.push(body.to_string());
        }
    }
    let accepted = codes.get(&202).copied().unwrap_or(0) + codes.get(&200).copied().unwrap_or(0);
    let refused: usize = codes
        .iter()
        .filter(|(c, _)| **c >= 400)
        .map(|(_, n)| n)
        .sum();
    check(&w, &template, accepted, refused, &messages).await;
    drop((a, b));
}
