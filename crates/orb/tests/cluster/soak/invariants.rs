//! What the soak holds orb to, sampled every second and at the end. A discrepancy that orb
//! may take a moment to see (a pod changed, created or removed) must persist past its grace to
//! count; while orb cannot see the cluster (blackout, restart) only what orb decides alone is
//! judged, and which objects exist only after the resume window.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use super::clients::give_back;
use super::{MAX_NUMBER, Soak};

/// A machine's reported state must match its pod within this.
const STATE_GRACE: Duration = Duration::from_secs(5);
/// A pod orb made must be a stored machine, and a stored live machine's pod must exist,
/// within this (one refresh after the change, with room for a busy 2-core machine).
const EXISTENCE_GRACE: Duration = Duration::from_secs(15);
/// `request.default_grace_period` (the acquire and return deadline) by default, plus one
/// refresh.
const DEADLINE: f64 = 300.0 + 30.0;
const LABELS: &str = "orb.io/managed=true";

/// One sample of both sides: the cluster (as admin) and orb (through `orb serve`).
struct Sample {
    /// Orb's pods not being deleted, by name.
    pods: BTreeMap<String, Pod>,
    /// Stored live machines (`GET /api/v1/machines?all=false`) by id.
    stored: BTreeMap<String, Value>,
    requests: Vec<Value>,
    /// Each machine's `status` as getRequestStatus reports it to HostFactory.
    reported: BTreeMap<String, String>,
}

pub(crate) async fn sample_every_second(soak: Arc<Soak>) {
    let mut since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut before: Option<Sample> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        record_rss(&soak);
        let (blind, resuming) = (soak.blind(), soak.resuming());
        let Some(now) = observe(&soak).await else {
            continue;
        };
        check(&soak, &now, before.as_ref(), &mut since);
        // A sample orb could not see through is no basis for the next.
        before = (!blind && !soak.blind()).then_some(now);
        // What needs orb's eyes does not hold against it while it was blind.
        since.retain(|k, _| {
            !(blind && k.starts_with("state ")
                || resuming && (k.starts_with("orphan ") || k.starts_with("missing ")))
        });
    }
}

fn record_rss(soak: &Soak) {
    let pid = soak.pid.load(Ordering::SeqCst);
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return;
    };
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok());
    if let Some(kib) = kib {
        let up = soak.served_since.lock().unwrap().elapsed().as_secs();
        let at = soak.start.elapsed().as_secs();
        soak.rss.lock().unwrap().push((at, kib, up));
    }
}

async fn observe(soak: &Soak) -> Option<Sample> {
    let pods = Api::<Pod>::namespaced(soak.admin.clone(), &soak.ns)
        .list(&ListParams::default().labels(LABELS))
        .await
        .ok()?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    let machines = soak
        .call("GET", "/api/v1/machines?all=false&limit=1000", None)
        .await?;
    let stored = machines["machines"]
        .as_array()?
        .iter()
        .map(|m| {
            (
                m["machine_id"].as_str().unwrap_or("").to_string(),
                m.clone(),
            )
        })
        .collect();
    let requests = soak
        .call("GET", "/api/v1/requests?limit=1000", None)
        .await?;
    let requests = requests["requests"].as_array()?.clone();
    let ids: Vec<Value> = soak
        .acquires
        .lock()
        .unwrap()
        .iter()
        .map(|id| json!({ "requestId": id }))
        .collect();
    let status = soak
        .hf("getRequestStatus", json!({ "requests": ids }))
        .await?;
    let mut reported = BTreeMap::new();
    for entry in status["requests"].as_array()? {
        for m in entry["machines"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().unwrap_or("").to_string();
            reported.insert(name, m["status"].as_str().unwrap_or("?").to_string());
        }
    }
    Some(Sample {
        pods,
        stored,
        requests,
        reported,
    })
}

/// The pod as HostFactory should see it: `running` (a Running pod, Ready or not), `pending`,
/// `failed` (phase Failed, or waiting in CrashLoopBackOff now), `done` (a Job pod that
/// finished) or `gone`.
fn pod_truth(pod: Option<&Pod>) -> &'static str {
    let Some(status) = pod.and_then(|p| p.status.as_ref()) else {
        return "gone";
    };
    let crash_looping = status.container_statuses.iter().flatten().any(|c| {
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
        waiting.and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff")
    });
    match status.phase.as_deref() {
        Some("Running") if crash_looping => "failed",
        Some("Running") => "running",
        Some("Failed") => "failed",
        Some("Succeeded") => "done",
        _ => "pending",
    }
}

/// Whether `reported` is a truthful machine status for a pod in state `truth`. A machine
/// being returned may say so (`stopping`, `shutting-down`) whatever its pod does.
fn matches(truth: &str, reported: &str) -> bool {
    if matches!(reported, "stopping" | "shutting-down") {
        return truth != "gone";
    }
    match truth {
        "running" => reported == "running",
        "pending" => matches!(reported, "pending" | "launching"),
        "failed" => reported == "failed",
        "done" => true,
        _ => !matches!(reported, "running" | "pending" | "launching"),
    }
}

fn check(
    soak: &Soak,
    now: &Sample,
    before: Option<&Sample>,
    since: &mut BTreeMap<String, Instant>,
) {
    // Each (invariant, subject) that does not hold now, with its grace; those that hold
    // again drop out of `since`.
    let mut failing: Vec<(String, Duration, String)> = Vec::new();
    let mut checks = 0u64;
    for (name, pod) in &now.pods {
        checks += 1;
        if !now.stored.contains_key(name) {
            let request = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("orb.io/request-id"));
            let what = format!("pod {name} (request {request:?}) is no stored live machine");
            failing.push((format!("orphan {name}"), EXISTENCE_GRACE, what));
        }
    }
    let mut live_per_template: BTreeMap<String, usize> = BTreeMap::new();
    for (id, m) in &now.stored {
        checks += 2;
        let status = m["status"].as_str().unwrap_or("?");
        if !now.pods.contains_key(id) {
            let what = format!("stored live machine {id} ({status}) has no pod");
            failing.push((format!("missing {id}"), EXISTENCE_GRACE, what));
        }
        *live_per_template
            .entry(m["template_id"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    for (template, live) in &live_per_template {
        checks += 1;
        if *live > MAX_NUMBER {
            let key = format!("maxNumber {template}");
            soak.violate(
                &key,
                format!("{live} live machines > maxNumber {MAX_NUMBER}"),
            );
        }
    }
    for (name, reported) in &now.reported {
        checks += 1;
        let truth = pod_truth(now.pods.get(name));
        if !matches(truth, reported) {
            let what = format!("machine {name} reported {reported}, its pod is {truth}");
            failing.push((format!("state {name}"), STATE_GRACE, what));
        }
    }
    let finished_returns: BTreeMap<&str, &str> = now
        .requests
        .iter()
        .filter(|r| r["request_type"] == "return" && r["is_terminal"] == true)
        .filter_map(|r| Some((r["request_id"].as_str()?, r["status"].as_str()?)))
        .collect();
    // The newest 1,000 requests (a quarter of an hour of the soak's traffic) hold every one
    // young enough to matter. A Job acquire has no deadline once its pods run
    // (docs/handlers.md): it is followed until the Job ends.
    for r in &now.requests {
        checks += 1;
        let duration = r["duration"].as_f64().unwrap_or(0.0);
        let job = r["provider_api"] == "Job" && r["request_type"] == "acquire";
        if r["is_terminal"] == false && duration > DEADLINE && !job {
            let id = r["request_id"].as_str().unwrap_or("?");
            let what = format!("{} after {duration:.0} s, past its deadline", r["status"]);
            soak.violate(&format!("deadline {id}"), what);
        }
    }
    for (id, m) in &now.stored {
        checks += 1;
        let status = m["status"].as_str().unwrap_or("?");
        if let Some(ret) = m["return_request_id"].as_str()
            && let Some(ended) = finished_returns.get(ret)
            && matches!(status, "stopping" | "shutting-down")
        {
            let what = format!("machine {id} ({status}) still held by return {ret} ({ended})");
            failing.push((format!("held {id}"), EXISTENCE_GRACE, what));
        }
    }
    check_removals(soak, now, before, &mut checks);
    soak.checks.fetch_add(checks, Ordering::SeqCst);
    let keys: BTreeSet<String> = failing.iter().map(|(k, _, _)| k.clone()).collect();
    since.retain(|k, _| keys.contains(k));
    for (key, grace, what) in failing {
        let first = *since.entry(key.clone()).or_insert_with(Instant::now);
        if first.elapsed() > grace {
            soak.violate(
                &key,
                format!("{what} (for {:.0} s)", first.elapsed().as_secs_f64()),
            );
        }
    }
}

/// A return removes exactly what it names: a finished `complete` return leaves none of its
/// hosts' pods, and a running host HostFactory knows that nobody returned, deleted or evicted
/// does not vanish.
fn check_removals(soak: &Soak, now: &Sample, before: Option<&Sample>, checks: &mut u64) {
    let returns = soak.returns.lock().unwrap().clone();
    let named: BTreeSet<&String> = returns.values().flat_map(|r| &r.names).collect();
    for (id, r) in &returns {
        let Some((at, status)) = &r.finished else {
            continue;
        };
        for name in &r.names {
            *checks += 1;
            if status == "complete" && now.pods.contains_key(name) && at.elapsed() > EXISTENCE_GRACE
            {
                let what = format!("return {id} is complete but pod {name} it named is still up");
                soak.violate(&format!("return-left {name}"), what);
            }
        }
    }
    let Some(before) = before else { return };
    let disrupted = soak.disrupted.lock().unwrap().clone();
    for (name, pod) in &before.pods {
        *checks += 1;
        let request = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("orb.io/request-id"));
        let job_failed = request.is_some_and(|r| disrupted.contains(&format!("request {r}")));
        if now.pods.contains_key(name) || named.contains(name) || disrupted.contains(name) {
            continue;
        }
        if job_failed {
            soak.note(format!("{name} stopped with its Job, which lost a pod"));
            continue;
        }
        if pod_truth(Some(pod)) != "running" {
            continue;
        }
        // A pod HostFactory never heard of (a ReplicaSet's replacement for a lost pod, made
        // after the acquire ended) may go with the lost host's return: that is how it is
        // accounted for (docs/handlers.md).
        if !soak.known.lock().unwrap().contains(name) {
            soak.note(format!(
                "{name}, unknown to HostFactory, removed (a replacement taken back)"
            ));
            continue;
        }
        if lost_to_a_scale_down(soak, &returns, before, pod) {
            soak.note(format!(
                "{name} lost its readiness while a sibling's return scaled the Deployment down, \
                 and the ReplicaSet took it instead (a known limit, docs/handlers.md)"
            ));
            continue;
        }
        let (stored, reported) = (before.stored.get(name), before.reported.get(name));
        let stored = stored.map(|m| m["status"].clone());
        let what = format!(
            "running host {name} HostFactory knows was removed, though no return named it \
             (stored {stored:?}, reported {reported:?})"
        );
        soak.violate(&format!("unnamed-removal {name}"), what);
    }
}

/// Whether `pod` is a Deployment's pod whose readiness the loop flapped within the last
/// 10 s, while a return of another pod of the same request began: the ReplicaSet ranks a
/// not-Ready pod before any deletion cost, so a scale-down that lands in that instant takes
/// it (docs/handlers.md, "Known limits").
fn lost_to_a_scale_down(
    soak: &Soak,
    returns: &BTreeMap<String, super::ReturnRecord>,
    before: &Sample,
    pod: &Pod,
) -> bool {
    const WINDOW: Duration = Duration::from_secs(10);
    let label = |p: &Pod, key: &str| p.metadata.labels.as_ref()?.get(key).cloned();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let flapped = soak.flapped.lock().unwrap().get(&name).copied();
    if label(pod, "orb.io/provider-api").as_deref() != Some("Deployment")
        || flapped.is_none_or(|at| at.elapsed() > WINDOW)
    {
        return false;
    }
    let request = label(pod, "orb.io/request-id");
    returns
        .values()
        .filter(|r| r.started.elapsed() < WINDOW)
        .flat_map(|r| &r.names)
        .filter_map(|n| before.pods.get(n))
        .any(|sibling| label(sibling, "orb.io/request-id") == request)
}

/// A finished return must leave no host held: a return refused because a host is "already
/// being returned" by a return that has ended is a violation.
pub(crate) async fn check_held(soak: &Soak, id: &str, message: &str) {
    if !message.contains("already being returned") {
        return;
    }
    let returns = soak.returns.lock().unwrap().clone();
    for (other, r) in returns.iter().filter(|(other, _)| *other != id) {
        if let Some((_, status)) = &r.finished
            && r.names.iter().any(|n| message.contains(n.as_str()))
        {
            let what = format!("return {id} told {message:?}; {other} ended {status}");
            soak.violate(&format!("held-by-finished {other}"), what);
        }
    }
}

/// Gives back every live machine orb stores and every host getReturnRequests lists, again
/// until none is left and no orb object remains (or two minutes pass); whether it got there,
/// and what is left if not.
pub(crate) async fn return_everything(soak: &Soak) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(120);
    let mut left = String::new();
    while Instant::now() < until {
        let machines = soak
            .call("GET", "/api/v1/machines?all=false&limit=1000", None)
            .await;
        let live: Vec<String> = machines
            .as_ref()
            .and_then(|m| m["machines"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|m| m["machine_id"].as_str().map(String::from))
            .collect();
        let objects = orb_objects(soak).await;
        if machines.is_some() && live.is_empty() && objects.is_empty() {
            return Ok(());
        }
        left = format!("live machines {live:?}, orb objects {objects:?}");
        // As HostFactory does: the live hosts, and whatever getReturnRequests lists (the lost
        // hosts of a Job that failed take the Job with them).
        let mut hosts = live;
        if let Some(listed) = soak.hf("getReturnRequests", json!({})).await {
            let listed = listed["requests"].as_array().cloned().unwrap_or_default();
            hosts.extend(
                listed
                    .iter()
                    .filter_map(|r| r["machine"].as_str().map(String::from)),
            );
        }
        hosts.sort();
        hosts.dedup();
        give_back(soak, &hosts).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    Err(left)
}

/// Every object in the namespace with orb's labels (pods not being deleted, Deployments,
/// StatefulSets, Jobs), as `Kind/name`.
async fn orb_objects(soak: &Soak) -> Vec<String> {
    let lp = ListParams::default().labels(LABELS);
    let (client, ns) = (soak.admin.clone(), soak.ns.as_str());
    let mut out = Vec::new();
    macro_rules! list {
        ($kind:ty, $label:expr) => {
            if let Ok(list) = Api::<$kind>::namespaced(client.clone(), ns).list(&lp).await {
                for o in list
                    .items
                    .into_iter()
                    .filter(|o| o.metadata.deletion_timestamp.is_none())
                {
                    out.push(format!(
                        "{}/{}",
                        $label,
                        o.metadata.name.unwrap_or_default()
                    ));
                }
            }
        };
    }
    list!(Pod, "Pod");
    list!(Deployment, "Deployment");
    list!(StatefulSet, "StatefulSet");
    list!(Job, "Job");
    out
}

/// At the end: everything returned leaves nothing behind, and orb serve's RSS stayed flat
/// (at most +10 % from its first minute to the end; not judged before it has run a minute).
pub(crate) fn final_checks(soak: &Soak, drained: Result<(), String>) {
    soak.checks.fetch_add(2, Ordering::SeqCst);
    if let Err(left) = drained {
        soak.violate("leftover", format!("after returning everything: {left}"));
    }
    let rss = soak.rss.lock().unwrap().clone();
    let baseline = rss.iter().find(|(_, _, up)| *up >= 60);
    match (baseline, rss.last()) {
        (Some((t0, first, _)), Some((t1, last, _))) => {
            let what = format!("orb serve RSS {first} KiB at {t0} s -> {last} KiB at {t1} s");
            eprintln!(
                "soak: {what} ({:+.1} %)",
                (*last as f64 / *first as f64 - 1.0) * 100.0
            );
            if *last * 10 > *first * 11 {
                soak.violate("rss", format!("{what} (> +10 %)"));
            }
        }
        (None, _) => {
            soak.note("RSS not judged: orb serve ran under a minute since its restart".into())
        }
        _ => {}
    }
}
