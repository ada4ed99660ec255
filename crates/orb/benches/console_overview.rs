//! How long the web console's overview takes to render in a real browser with many machines:
//! `orb serve`'s router over a SQLite store seeded with `BENCH_CONSOLE_MACHINES` machines
//! (default 10,000, in requests of 10), headless Chromium through chromedriver, and the time
//! from navigation start to the page saying it has rendered (`window.orbRenderedAt`). No
//! cluster: the overview reads the store through the REST API, as it does on one.
//!
//! `cargo bench -p orb --bench console_overview` (needs /usr/bin/chromium and
//! /usr/bin/chromedriver, or ORB_TEST_CHROMIUM / ORB_TEST_CHROMEDRIVER). Target (issue #21):
//! under 1 s at 10,000 machines.

#[path = "../tests/support/browser.rs"]
mod browser;
#[path = "../tests/serve_support/mod.rs"]
mod serve_support;

use std::time::{Duration, Instant};

use fantoccini::Locator;
use orb_core::machine::MachineStatus;
use orb_core::request::RequestStatus;
use serde_json::json;
use serve_support::{Env, acquire, machine};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A mix like a busy grid's: mostly running, some waiting, failing and returned machines,
/// spread over 50 nodes and 4 namespaces.
async fn seed(env: &Env, machines: usize) {
    let per_request = 10;
    for r in 0..machines.div_ceil(per_request) {
        let id = format!("req-{r:08x}-0000-4000-8000-{r:012x}");
        let mut request = acquire(&id, RequestStatus::Complete, per_request as u32);
        request.fulfilled_count = per_request as u32;
        let mut items: Vec<_> = (0..per_request.min(machines - r * per_request))
            .map(|i| {
                let n = r * per_request + i;
                let status = match n % 50 {
                    0 => MachineStatus::Failed,
                    1 | 2 => MachineStatus::Pending,
                    3 => MachineStatus::Returned,
                    _ => MachineStatus::Running,
                };
                let mut m = machine(&request, &format!("orb-{r:012x}-{i:04}"), status);
                m.provider_data = json!({
                    "node_name": format!("kwok-node-{}", n % 50),
                    "namespace": format!("grid-{}", n % 4),
                })
                .into();
                if status == MachineStatus::Failed {
                    m.status_reason =
                        Some("container worker exited with code 137 (OOMKilled)".into());
                }
                if status == MachineStatus::Pending {
                    m.status_reason = Some("0/50 nodes are available: 50 Insufficient cpu".into());
                }
                m
            })
            .collect();
        env.store
            .insert_request(&mut request, &mut items)
            .await
            .unwrap();
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let machines = knob("BENCH_CONSOLE_MACHINES", 10_000);
    let loads = knob("BENCH_CONSOLE_LOADS", 5);

    // orb serve's default poll interval for event streams (the test Env polls every 50 ms).
    let env = Env::build(
        serve_support::offline_entry(),
        serve_support::TEMPLATES,
        Duration::from_secs(2),
    )
    .await;
    let started = Instant::now();
    seed(&env, machines).await;
    eprintln!(
        "seeded {machines} machines in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = env.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let session = browser::Session::start().await;
    let client = &session.client;

    let mut figures = Vec::new();
    let mut fetches = Vec::new();
    // The first load warms the browser's caches and the store's; it is printed, not counted.
    for load in 0..=loads {
        // A new query string makes each load a new document (a new hash alone would not), so
        // `performance.now()` counts from this navigation.
        client
            .goto(&format!("http://{addr}/ui/?load={load}#/overview"))
            .await
            .unwrap();
        client
            .wait()
            .at_most(Duration::from_secs(60))
            .for_element(Locator::Css("body[data-rendered=\"overview\"]"))
            .await
            .expect("the overview renders");
        let got = client
            .execute(
                "const api = performance.getEntriesByType('resource') \
                   .filter(e => e.name.includes('/api/v1/machines')) \
                   .reduce((a, e) => Math.max(a, e.responseEnd - e.startTime), 0); \
                 const shown = Array.from(document.querySelectorAll('#machines-by-state [data-state] .count')) \
                   .reduce((a, c) => a + Number(c.textContent.replace(/[^0-9]/g, '')), 0); \
                 return [window.orbRenderedAt, api, shown]",
                vec![],
            )
            .await
            .unwrap();
        let rendered = got[0].as_f64().unwrap_or(f64::NAN);
        let api = got[1].as_f64().unwrap_or(f64::NAN);
        let shown = got[2].as_u64().unwrap_or(0);
        assert_eq!(
            shown as usize, machines,
            "the overview counts every machine (by state)"
        );
        println!(
            "load {load}{}: rendered at {rendered:.0} ms after navigation start (machine list fetch {api:.0} ms)",
            if load == 0 { " (warm-up)" } else { "" }
        );
        if load > 0 {
            figures.push(rendered);
            fetches.push(api);
        }
    }
    figures.sort_by(|a, b| a.total_cmp(b));
    fetches.sort_by(|a, b| a.total_cmp(b));
    let median = figures[figures.len() / 2];
    let max = figures[figures.len() - 1];
    let fetch_median = fetches[fetches.len() / 2];
    println!(
        "console overview, {machines} machines, {loads} loads: median {median:.0} ms, max {max:.0} ms \
         (target < 1000 ms: {})",
        if max < 1000.0 { "met" } else { "missed" }
    );
    // For bench/collect.py.
    println!(
        "BENCH_JSON {}",
        json!({"machines": machines, "loads": loads, "rendered_median_ms": median,
               "rendered_max_ms": max, "machine_list_fetch_median_ms": fetch_median})
    );
    let _ = client.clone().close().await;
}
