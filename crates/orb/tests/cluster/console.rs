//! The web console at `/ui/` in a real browser: headless Chromium driven through
//! chromedriver (WebDriver), against `orb serve` on the local control plane. Each test owns
//! its namespace, its server and its browser; screenshots of what it saw are kept in
//! `$ORB_TEST_ARTIFACTS/console/` (default `target/test-artifacts/console/`).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`./scripts/test.sh` installs them); a
//! missing browser fails the test with the fix.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_fixture::identity::{BrokerIdentity, Managed};
use kube_fixture::{Check, TestCluster, TestNamespace, wait_for};
use serde_json::{Value, json};

use crate::support::accounts::token_for;
use crate::support::browser::Session;
use crate::support::clear_env;
use crate::support::serve_process::{Server, install};

/// The label the `gated` template's pods select; its node gets it when the test lets them run.
const GATE_LABEL: &str = "orb-rs.io/console-gate";

/// How long a page may take to show what the test waits for (pods on KWOK are Ready in
/// about a second; the console follows the request's event stream).
const PAGE_WAIT: Duration = Duration::from_secs(60);

/// Templates of a console test: `worker` pods become Ready, `crasher` pods fail 2 s after
/// they are Ready (kwok stages of tools/control-plane/stages), `stuck` pods ask for a node
/// that does not exist and stay Pending, unschedulable.
const TEMPLATES: &str = r#"{"templates": [
  {"templateId": "worker", "maxNumber": 20, "imageId": "busybox:1.36",
   "command": ["sh", "-c", "sleep 3600"]},
  {"templateId": "crasher", "maxNumber": 5, "imageId": "busybox:1.36",
   "command": ["sh", "-c", "exit 1"],
   "annotations": {"kwok.orb-rs.io/fail-after": "2s", "kwok.orb-rs.io/exit-code": "3"}},
  {"templateId": "stuck", "maxNumber": 5, "imageId": "busybox:1.36",
   "nodeSelector": {"orb-rs.io/no-such-node": "none"}}
]}"#;

/// Where screenshots go.
fn artifacts_dir() -> PathBuf {
    let dir = std::env::var_os("ORB_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts")
        })
        .join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One headless Chromium session of a test, which names its screenshots.
struct Browser {
    client: Client,
    _session: Session,
    test: &'static str,
}

impl Browser {
    async fn start(test: &'static str) -> Browser {
        let session = Session::start().await;
        Browser {
            client: session.client.clone(),
            _session: session,
            test,
        }
    }

    async fn open(&self, server: &Server, page: &str) {
        self.client
            .goto(&format!("http://{}/ui/#/{page}", server.addr))
            .await
            .unwrap();
    }

    /// Runs `script` (a function body that returns a value) in the page.
    async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until `script` returns something other than null/false/"" and returns it.
    async fn until(&self, what: &str, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let got = self.eval(script).await;
            let done = !matches!(&got, Value::Null | Value::Bool(false))
                && got.as_str().is_none_or(|s| !s.is_empty());
            if done {
                return got;
            }
            if started.elapsed() > PAGE_WAIT {
                self.screenshot("timeout").await;
                let body = self
                    .eval("return document.body ? document.body.innerText : ''")
                    .await;
                panic!("the page never showed {what} in {PAGE_WAIT:?}; it shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.client
            .wait()
            .at_most(PAGE_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|all| all.len())
            .unwrap_or(0)
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap();
        let path = artifacts_dir().join(format!("{}-{name}.png", self.test));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Signs in with `token` on the login form the console shows for a 401.
    async fn sign_in(&self, token: &str) {
        self.until(
            "the login form",
            "return document.querySelector('#login-form:not([hidden]) #login-token') !== null",
        )
        .await;
        let input = self
            .client
            .find(Locator::Css("#login-token"))
            .await
            .unwrap();
        input.send_keys(token).await.unwrap();
        self.click("#login-submit").await;
    }
}

/// An `orb serve` for `ns`, as the shipped identity (kept alive by the caller), with the
/// console test templates, and `args` added to `serve`.
async fn console_server(
    cluster: &TestCluster,
    ns: &TestNamespace,
    args: &[&str],
) -> (tempfile::TempDir, Server, BrokerIdentity) {
    // `--auth-token-review` is the inbound auth feature: its TokenReview rule as well.
    let features: &[&str] = if args.contains(&"--auth-token-review") {
        &["inbound_auth_enabled"]
    } else {
        &[]
    };
    let managed = Managed::Namespaces(vec![ns.name().to_string()]);
    let identity = cluster.broker_identity_for(ns, managed, features).await;
    let root = install(ns, "kubernetes", &identity.kubeconfig, json!({}));
    std::fs::write(root.path().join("config/templates.json"), TEMPLATES).unwrap();
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("orb"));
    clear_env(&mut cmd);
    cmd.env("ORB_ROOT_DIR", root.path())
        .env("HOME", root.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--no-socket"])
        .args(args);
    let server = Server::spawn(cmd);
    (root, server, identity)
}

fn acquire(server: &Server, template: &str, count: u32) -> String {
    let (code, body) = server.call(
        "POST",
        "/api/v1/machines/request",
        Some(&json!({"template_id": template, "machine_count": count})),
    );
    assert_eq!(code, 202, "acquire: {body}");
    body["request_id"].as_str().unwrap().to_string()
}

/// The request's machines once `count` of them are in `state`.
async fn machines_in(server: &Server, request: &str, state: &str, count: usize) -> Vec<Value> {
    wait_for(
        &format!("{count} machines of {request} {state}"),
        PAGE_WAIT,
        || async {
            let (_, view) = server.call("GET", &format!("/api/v1/requests/{request}/status"), None);
            let machines: Vec<Value> = view["machines"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m["status"] == state)
                .collect();
            if machines.len() >= count {
                Check::Done(machines)
            } else {
                Check::NotYet(format!("{} {state}", machines.len()))
            }
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn a_request_made_on_the_page_fills_its_progress_bar_without_a_reload() {
    let browser = Browser::start("request").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-request").await;
    let (root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    // A node of its own that the `gated` template's pods may use only once the test labels
    // it: until then they wait, unschedulable, and the bar must show 0 of 3.
    let node = cluster.node_with_room("console", 3).await;
    let mut templates: Value = serde_json::from_str(TEMPLATES).unwrap();
    templates["templates"].as_array_mut().unwrap().push(json!({
        "templateId": "gated", "maxNumber": 3, "imageId": "busybox:1.36",
        "nodeSelector": {GATE_LABEL: ns.name()}, "tolerations": node.tolerations(),
    }));
    // The server follows its template file.
    std::fs::write(
        root.path().join("config/templates.json"),
        templates.to_string(),
    )
    .unwrap();

    browser.open(&server, "requests").await;
    browser
        .until(
            "the request form with the templates",
            "return document.querySelector('#request-template option[value=\"gated\"]') !== null",
        )
        .await;
    // A marker that a reload would wipe.
    browser
        .eval("window.__noReload = 'kept'; return true")
        .await;
    let select = browser
        .client
        .find(Locator::Css("#request-template"))
        .await
        .unwrap();
    select.select_by_value("gated").await.unwrap();
    let count = browser
        .client
        .find(Locator::Css("#request-count"))
        .await
        .unwrap();
    count.clear().await.unwrap();
    count.send_keys("3").await.unwrap();
    browser.click("#request-submit").await;

    let created = browser
        .until(
            "the new request's id",
            "const e = document.querySelector('#request-created'); \
             const m = e && e.textContent.match(/req-[0-9a-f-]{36}/); return m ? m[0] : null",
        )
        .await;
    let id = created.as_str().unwrap().to_string();
    let row = format!("#requests-table tr[data-request-id=\"{id}\"]");
    browser
        .until(
            "an empty bar while the pods wait for a node",
            &format!(
                "const p = document.querySelector('{row} progress.request-progress'); \
                 const s = document.querySelector('{row} td.status'); \
                 return p && Number(p.max) === 3 && Number(p.value) === 0 \
                   && /progress/i.test(s.textContent)"
            ),
        )
        .await;
    machines_in(&server, &id, "pending", 3).await;
    browser.screenshot("requests-waiting").await;
    // Now the pods may land: they become Ready, and the page's own updates fill the bar.
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    nodes
        .patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {GATE_LABEL: ns.name()}}})),
        )
        .await
        .unwrap();
    browser
        .until(
            "a full progress bar",
            &format!(
                "const p = document.querySelector('{row} progress.request-progress'); \
                 return p && Number(p.max) === 3 && Number(p.value) === 3"
            ),
        )
        .await;
    browser
        .until(
            "the request complete",
            &format!(
                "const s = document.querySelector('{row} td.status'); \
                 return s && /complete/i.test(s.textContent)"
            ),
        )
        .await;
    assert_eq!(
        browser.eval("return window.__noReload").await,
        "kept",
        "the page reloaded"
    );
    browser.screenshot("requests").await;

    // The server agrees: three running machines for that request.
    let running = machines_in(&server, &id, "running", 3).await;
    assert_eq!(running.len(), 3);
    // The timeline of the request, on click.
    browser.click(&format!("{row} td")).await;
    browser
        .until(
            "the request's timeline",
            "return document.querySelectorAll('#request-timeline li').length >= 2",
        )
        .await;
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn a_machine_returned_from_the_table_goes_and_its_drawer_shows_the_pod() {
    let browser = Browser::start("return").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-return").await;
    let (_root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    let request = acquire(&server, "worker", 2);
    let running = machines_in(&server, &request, "running", 2).await;
    let victim = running[0]["machine_id"].as_str().unwrap().to_string();
    let keep = running[1]["machine_id"].as_str().unwrap().to_string();

    browser.open(&server, "machines").await;
    let row = format!("#machines-table tbody tr[data-machine-id=\"{victim}\"]");
    browser
        .until(
            "the machine running",
            &format!(
                "const s = document.querySelector('{row} td.state'); \
                 return s && /running/i.test(s.textContent)"
            ),
        )
        .await;
    // The drawer: the pod's conditions and its events, from the apiserver.
    browser.click(&format!("{row} a.machine-link")).await;
    browser
        .until(
            "the pod's Ready condition and Scheduled event",
            "const d = document.querySelector('#machine-drawer'); \
             return d && !d.hidden && /Ready/.test(document.querySelector('#drawer-conditions').textContent) \
             && /Scheduled/.test(document.querySelector('#drawer-events').textContent)",
        )
        .await;
    browser.screenshot("machine-drawer").await;
    browser
        .client
        .active_element()
        .await
        .unwrap()
        .send_keys("\u{e00c}") // Escape
        .await
        .unwrap();
    browser
        .until(
            "the drawer closed by Escape",
            "return document.querySelector('#machine-drawer').hidden === true",
        )
        .await;

    browser.click(&format!("{row} input.select-machine")).await;
    browser.click("#return-selected").await;
    browser.click("#return-confirm").await;
    browser
        .until(
            "the returned machine gone from the live list or shown returned",
            &format!(
                "const s = document.querySelector('{row} td.state'); \
                 return !s || /return|terminat|stopp|shutting/i.test(s.textContent)"
            ),
        )
        .await;
    browser.screenshot("machines").await;
    let (_, machine) = server.call("GET", &format!("/api/v1/machines/{victim}"), None);
    assert!(
        machine["machines"][0]["return_request_id"].is_string(),
        "the machine has a return request: {machine}"
    );
    let (_, other) = server.call("GET", &format!("/api/v1/machines/{keep}"), None);
    assert!(
        other["machines"][0]["return_request_id"].is_null(),
        "only the selected machine is returned: {other}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn a_failed_machine_shows_its_reason_on_the_overview_and_in_the_table() {
    let browser = Browser::start("failed").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-failed").await;
    let (_root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    let request = acquire(&server, "crasher", 1);
    let failed = machines_in(&server, &request, "failed", 1).await;
    let id = failed[0]["machine_id"].as_str().unwrap().to_string();
    let reason = failed[0]["status_reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !reason.is_empty(),
        "orb gives the failure a reason: {failed:?}"
    );

    browser.open(&server, "overview").await;
    let alert = browser
        .until(
            "an alert for the failed machine",
            &format!(
                "const a = document.querySelector('#alerts [data-alert=\"failed\"][data-machine=\"{id}\"]'); \
                 return a ? a.textContent : null"
            ),
        )
        .await;
    assert!(
        alert.as_str().unwrap().contains(&reason),
        "the alert shows the reason {reason:?}: {alert}"
    );
    let failed_count = browser
        .eval("const c = document.querySelector('#machines-by-state [data-state=\"failed\"] .count'); return c ? c.textContent.trim() : null")
        .await;
    assert_eq!(failed_count, "1");
    browser.screenshot("overview").await;

    browser.open(&server, "machines").await;
    let cell = browser
        .until(
            "the reason in the table",
            &format!(
                "const r = document.querySelector('#machines-table tbody tr[data-machine-id=\"{id}\"] td.reason'); \
                 return r ? r.textContent : null"
            ),
        )
        .await;
    assert!(cell.as_str().unwrap().contains(&reason), "{cell}");
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn a_request_is_cancelled_from_the_requests_page() {
    let browser = Browser::start("cancel").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-cancel").await;
    let (_root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    let request = acquire(&server, "stuck", 2);
    machines_in(&server, &request, "pending", 2).await;

    browser.open(&server, "requests").await;
    let row = format!("#requests-table tr[data-request-id=\"{request}\"]");
    browser.click(&format!("{row} button.cancel-request")).await;
    // A confirm step, when the page asks for one.
    if browser.count("#cancel-confirm").await > 0 {
        browser.click("#cancel-confirm").await;
    }
    browser
        .until(
            "the request cancelled",
            &format!(
                "const s = document.querySelector('{row} td.status'); \
                 return s && /cancel/i.test(s.textContent)"
            ),
        )
        .await;
    assert_eq!(
        browser.count(&format!("{row} button.cancel-request")).await,
        0,
        "a cancelled request has no cancel button"
    );
    let (_, view) = server.call("GET", &format!("/api/v1/requests/{request}/status"), None);
    assert_eq!(view["request"]["status"], "cancelled", "{view}");
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn a_read_only_token_sees_no_buttons_and_the_api_refuses_it() {
    let browser = Browser::start("viewer").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-viewer").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    let viewer = token_for(&accounts, "dashboard").await;
    let operator = token_for(&accounts, "driver").await;
    let viewer_role = format!("{}:dashboard=viewer", ns.name());
    let operator_role = format!("{}:driver=operator", ns.name());
    let (_root, server, _identity) = console_server(
        &cluster,
        &ns,
        &[
            "--auth-token-review",
            "--auth-role",
            &viewer_role,
            "--auth-role",
            &operator_role,
        ],
    )
    .await;
    let (code, body) = server.call_as(
        &operator,
        "POST",
        "/api/v1/machines/request",
        Some(&json!({"template_id": "worker", "machine_count": 1})),
    );
    assert_eq!(code, 202, "{body}");
    let request = body["request_id"].as_str().unwrap().to_string();

    // The page itself is public and holds nothing; the API asks for a token.
    browser.open(&server, "requests").await;
    browser.sign_in(&viewer).await;
    browser
        .until(
            "the operator's request listed",
            &format!("return document.querySelector('#requests-table tr[data-request-id=\"{request}\"]') !== null"),
        )
        .await;
    let who = browser
        .until(
            "who is signed in",
            "const w = document.querySelector('#whoami'); return w ? w.textContent : null",
        )
        .await;
    assert!(who.as_str().unwrap().contains("viewer"), "{who}");
    for css in ["#request-submit", "#request-form", "button.cancel-request"] {
        assert_eq!(browser.count(css).await, 0, "a viewer sees no {css}");
    }
    browser.screenshot("viewer-requests").await;
    browser.open(&server, "machines").await;
    browser
        .until(
            "the machines table",
            "return document.body.dataset.rendered === 'machines'",
        )
        .await;
    assert_eq!(
        browser.count("#return-selected").await,
        0,
        "a viewer sees no return button"
    );
    // The token stays in the tab only, and nowhere in the page.
    let leaks = browser
        .eval(&format!(
            "return [localStorage.length, document.documentElement.outerHTML.includes('{}')]",
            &viewer[viewer.len() - 24..]
        ))
        .await;
    assert_eq!(
        leaks,
        json!([0, false]),
        "no token in localStorage or the page"
    );
    // The API refuses the viewer what the page does not offer.
    let (code, body) = server.call_as(
        &viewer,
        "POST",
        &format!("/api/v1/requests/{request}/cancel"),
        None,
    );
    assert_eq!(code, 403, "{body}");

    // The same console offers the buttons to an operator, after signing out and in.
    browser.click("#logout").await;
    browser.open(&server, "requests").await;
    browser.sign_in(&operator).await;
    browser
        .until(
            "the request form for an operator",
            "return document.querySelector('#request-submit') !== null",
        )
        .await;
}

#[tokio::test]
#[ignore = "needs the local control plane and Chromium; ./scripts/test.sh runs it"]
async fn every_page_renders_and_is_screenshotted() {
    let browser = Browser::start("pages").await;
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-pages").await;
    let (_root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    let request = acquire(&server, "worker", 3);
    machines_in(&server, &request, "running", 3).await;

    browser.open(&server, "overview").await;
    browser
        .until(
            "three running machines",
            "const c = document.querySelector('#machines-by-state [data-state=\"running\"] .count'); \
             return c && c.textContent.trim() === '3'",
        )
        .await;
    let usage = browser
        .eval("const t = document.querySelector('#template-usage [data-template=\"worker\"]'); return t ? t.textContent : null")
        .await;
    assert!(
        usage
            .as_str()
            .is_some_and(|u| u.contains('3') && u.contains("20")),
        "worker usage 3 of 20: {usage}"
    );
    let nodes = browser
        .eval("return Array.from(document.querySelectorAll('#node-usage [data-node] .count')).reduce((a, c) => a + Number(c.textContent), 0)")
        .await;
    assert_eq!(nodes, 3, "the node counts add up to the running machines");
    browser.screenshot("overview").await;

    browser.open(&server, "templates").await;
    browser
        .click("#templates-table tbody tr[data-template-id=\"worker\"]")
        .await;
    let body = browser
        .until(
            "the rendered Pod body",
            "const p = document.querySelector('#template-render pre'); return p && /\"kind\": *\"Pod\"/.test(p.textContent) ? p.textContent : null",
        )
        .await;
    assert!(body.as_str().unwrap().contains("busybox:1.36"), "{body}");
    // Validation from the page: a CPU request that is not a quantity is refused, by name.
    browser
        .eval(
            "const t = document.querySelector('#validate-input'); \
             t.value = JSON.stringify({templates: [{templateId: 'bad', imageId: 'x', \
               resource_requests: {cpu: 'lots'}}]}); \
             return true",
        )
        .await;
    browser.click("#validate-submit").await;
    browser
        .until(
            "the validation verdict",
            "const r = document.querySelector('#validate-result'); \
             return r && /bad/.test(r.textContent) && /not a Kubernetes quantity/.test(r.textContent)",
        )
        .await;
    browser.screenshot("templates").await;

    browser.open(&server, "config").await;
    browser
        .until(
            "the storage setting with its origin",
            "return document.querySelector('#config-table tbody tr[data-key=\"storage.url\"]') !== null",
        )
        .await;
    browser
        .until(
            "the watch cache health check",
            "return document.querySelector('#health-checks tr[data-check=\"watch_cache\"]') !== null",
        )
        .await;
    browser.screenshot("config").await;

    // Narrow window: still readable, nothing wider than the screen but the tables' own
    // scrolling areas.
    browser.client.set_window_size(420, 900).await.unwrap();
    browser.open(&server, "overview").await;
    browser
        .until(
            "the overview",
            "return document.body.dataset.rendered === 'overview'",
        )
        .await;
    let overflow = browser
        .eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await;
    assert!(
        overflow.as_i64().unwrap_or(999) <= 1,
        "the page scrolls sideways at 420 px: {overflow}"
    );
    browser.screenshot("overview-narrow").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it"]
async fn no_ui_serves_no_console_and_changes_no_api_route() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("console-off").await;
    let (_root, server, _identity) = console_server(&cluster, &ns, &["--no-ui"]).await;
    let (code, body) = server.call("GET", "/ui/", None);
    assert_eq!(code, 404, "{body}");
    let (code, _) = server.call("GET", "/api/v1/templates", None);
    assert_eq!(code, 200);
    drop(server);
    let (_root, server, _identity) = console_server(&cluster, &ns, &[]).await;
    let (code, page) = server.call("GET", "/ui/", None);
    assert_eq!(code, 200);
    assert!(
        page.as_str().is_some_and(|p| p.contains("app.js")),
        "{page}"
    );
}
