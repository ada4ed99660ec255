//! Template authors as adversaries, through `orb serve` on the real control plane with the
//! native-spec hatch on, bearer auth and the default render limits (issue #53):
//! `POST /api/v1/templates/validate` renders the caller's own Jinja, so it needs the operator
//! role; an operator cannot make it read a file outside the config directory nor see a byte of
//! one; a nested-loop template is refused within a second while other calls keep answering;
//! string-growing templates leave the daemon's memory bounded.

use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use kube_fixture::TestCluster;
use serde_json::{Value, json};

use crate::support::serve_process::{Server, http, install};

const SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

fn token(role: &str) -> String {
    let claims = json!({"sub": format!("{role}-1"), "exp": jiff::Timestamp::now().as_second() + 3600,
                        "roles": [role]});
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn document(template: Value) -> Value {
    let mut template = template;
    template["providerApi"] = json!("Pod");
    template["imageId"] = json!("busybox:1.36");
    json!({"templates": [template]})
}

fn validate(server: &Server, role: &str, template: Value) -> (u16, Value) {
    server.call_as(
        &token(role),
        "POST",
        "/api/v1/templates/validate",
        Some(&document(template)),
    )
}

/// Peak resident memory of `pid` so far (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

const NESTED_LOOP: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn validate_of_a_callers_template_needs_the_operator_and_is_confined_and_bounded() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("tpl-bounds").await;
    let identity = cluster.broker_identity(&ns).await;
    let root = install(
        &ns,
        "kube",
        &identity.kubeconfig,
        json!({"native_spec_enabled": true}),
    );
    let config_file = root.path().join("config/config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_file).unwrap()).unwrap();
    config["native_spec"] = json!({"enabled": true});
    config["auth"] = json!({"type": "bearer",
                            "bearer_token": {"secret_key": SECRET, "algorithm": "HS256"}});
    std::fs::write(&config_file, config.to_string()).unwrap();
    let server = Server::start(root.path(), None);
    let pid = server.child.id();

    // A viewer may not have its own template rendered, whatever it names.
    for path in ["/etc/passwd", "/proc/self/environ"] {
        let (code, reply) = validate(
            &server,
            "viewer",
            json!({"templateId": "peek", "nativeSpecPath": path}),
        );
        assert_eq!(code, 403, "{reply}");
        assert_eq!(reply["type"], "urn:orb:problem:forbidden", "{reply}");
    }
    // An operator may, but a spec file outside the config directory is refused unread.
    for path in [
        "/etc/passwd",
        "/proc/self/environ",
        "../../../../etc/passwd",
    ] {
        let (code, reply) = validate(
            &server,
            "operator",
            json!({"templateId": "peek", "nativeSpecPath": path}),
        );
        assert_eq!(code, 200, "{reply}");
        let text = reply.to_string();
        assert!(text.contains("is outside the config directory"), "{text}");
        for secret in ["root:", "/bin/", "ORB_", "PATH=", "HOME="] {
            assert!(
                !text.contains(secret),
                "{path}: the reply shows {secret:?}: {text}"
            );
        }
    }

    // A nested loop is refused within a second, naming the limit, and while four of them
    // run the daemon keeps answering other calls.
    let started = Instant::now();
    let (code, reply) = validate(
        &server,
        "operator",
        json!({"templateId": "spin",
        "nativeSpec": {"spec": {"hostname": NESTED_LOOP}}}),
    );
    let took = started.elapsed();
    assert_eq!(code, 200, "{reply}");
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    let problems = reply["invalid"][0]["problems"].to_string();
    assert!(problems.contains("native_spec_render_fuel"), "{reply}");
    let spinners: Vec<_> = (0..4)
        .map(|i| {
            let addr = server.addr.clone();
            let token = token("operator");
            std::thread::spawn(move || {
                let body = document(json!({"templateId": format!("spin-{i}"),
                    "nativeSpec": {"spec": {"hostname": NESTED_LOOP}}}));
                crate::support::serve_process::http_with(
                    &addr,
                    "POST",
                    "/api/v1/templates/validate",
                    Some(&body),
                    Some(&token),
                )
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    while !spinners.iter().all(std::thread::JoinHandle::is_finished) {
        let asked = Instant::now();
        let (code, _) = http(&server.addr, "GET", "/livez", None);
        assert_eq!(code, 200);
        slowest = slowest.max(asked.elapsed());
    }
    for spinner in spinners {
        let (code, reply) = spinner.join().unwrap();
        assert_eq!(code, 200, "{reply}");
        assert_eq!(reply["ok"], false, "{reply}");
    }
    assert!(
        slowest < Duration::from_millis(500),
        "/livez took {slowest:?}"
    );

    // Templates that grow strings without end are stopped by their fuel; memory stays bounded.
    let before = peak_rss_mib(pid);
    for (i, hostname) in [
        "{% macro grow(s, n) %}{% if n > 0 %}{{ grow(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}{{ grow('x', 64) }}",
        "{{ ('x' * 100000000000) | length }}",
        "{{ (range(100000) | join('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') * 1000) | length }}",
    ]
    .iter()
    .enumerate()
    {
        let (code, reply) = validate(&server, "operator", json!({"templateId": format!("grow-{i}"),
            "nativeSpec": {"spec": {"hostname": hostname}}}));
        assert_eq!(code, 200, "{reply}");
        assert!(reply["invalid"][0]["problems"].to_string().contains("native_spec_render_"), "{reply}");
    }
    let after = peak_rss_mib(pid);
    eprintln!(
        "peak RSS of orb serve: {before} MiB before the growing templates, {after} MiB after"
    );
    assert!(
        after < before + 300,
        "peak RSS grew from {before} MiB to {after} MiB"
    );
    let (code, _) = http(&server.addr, "GET", "/livez", None);
    assert_eq!(code, 200, "the daemon survived");
    server.stop();
}
