//! The HostFactory side of the soak: clients that request, poll, hold and return hosts of one
//! template each, and HostFactory's getReturnRequests timer, which gives back what it lists.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ReturnRecord, Rng, Soak, invariants, template_id};

/// A HostFactory-style client of one template: request, poll until settled, hold the hosts
/// a while, return them (part first, sometimes), poll the return; again until told to stop.
pub(crate) async fn client(soak: Arc<Soak>, kind: &'static str, mut rng: Rng) {
    let template = template_id(kind);
    while !soak.stop.load(Ordering::SeqCst) {
        let count = rng.range(1, 4);
        let input = json!({"template": {"templateId": template, "machineCount": count}});
        let Some(reply) = soak.hf("requestMachines", input).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let Some(id) = reply["requestId"].as_str().map(String::from) else {
            soak.note(format!("{template} x{count} refused: {}", reply["message"]));
            tokio::time::sleep(Duration::from_secs(rng.range(2, 5))).await;
            continue;
        };
        soak.note(format!("{template} x{count} -> {id}"));
        soak.acquires.lock().unwrap().insert(id.clone());
        let hosts = poll(&soak, &id, Duration::from_secs(120)).await;
        let hold_until = Instant::now() + Duration::from_secs(rng.range(3, 12));
        while Instant::now() < hold_until && !soak.stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut hosts: Vec<String> = hosts;
        // Part of the hosts first, now and then (a Job returns as a whole).
        if kind != "Job" && hosts.len() > 1 && rng.range(0, 2) == 0 {
            let rest = hosts.split_off(rng.range(1, hosts.len() as u64 - 1) as usize);
            give_back(&soak, &hosts).await;
            hosts = rest;
        }
        give_back(&soak, &hosts).await;
    }
}

/// Polls getRequestStatus once a second until the request is no longer `running` (or
/// `timeout` passes); the hosts it names that may still be up.
async fn poll(soak: &Soak, id: &str, timeout: Duration) -> Vec<String> {
    let until = Instant::now() + timeout;
    let mut hosts = Vec::new();
    while Instant::now() < until {
        let input = json!({"requests": [{"requestId": id}]});
        if let Some(reply) = soak.hf("getRequestStatus", input).await {
            let entry = &reply["requests"][0];
            let names = entry["machines"].as_array().into_iter().flatten();
            let names = names.filter_map(|m| m["name"].as_str().map(String::from));
            soak.known.lock().unwrap().extend(names);
            hosts = entry["machines"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| !matches!(m["status"].as_str(), Some("terminated" | "stopped")))
                .filter_map(|m| m["name"].as_str().map(String::from))
                .collect();
            if entry["status"] != "running" {
                break;
            }
        }
        if soak.stop.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    hosts
}

/// requestReturnMachines for `hosts`, then polls the return until it is settled. A return
/// refused because a finished return still holds a host is a violation.
pub(crate) async fn give_back(soak: &Soak, hosts: &[String]) {
    if hosts.is_empty() {
        return;
    }
    let machines: Vec<Value> = hosts
        .iter()
        .map(|h| json!({"name": h, "machineId": h}))
        .collect();
    // Named before it is sent: orb may remove the pods before it replies.
    let sending = format!("sending {}", uuid::Uuid::new_v4());
    let record = ReturnRecord {
        names: hosts.iter().cloned().collect(),
        started: Instant::now(),
        finished: None,
    };
    soak.returns.lock().unwrap().insert(sending.clone(), record);
    let mut reply = None;
    for _ in 0..30 {
        reply = soak
            .hf("requestReturnMachines", json!({ "machines": machines }))
            .await;
        if reply.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let record = soak.returns.lock().unwrap().remove(&sending);
    let Some(reply) = reply else { return };
    let message = reply["message"].as_str().unwrap_or("").to_string();
    let Some(id) = reply["requestId"].as_str().map(String::from) else {
        soak.note(format!("return of {hosts:?} refused: {message}"));
        return;
    };
    soak.note(format!("return {id} of {hosts:?}: {message}"));
    let record = record.expect("recorded above");
    soak.returns.lock().unwrap().insert(id.clone(), record);
    invariants::check_held(soak, &id, &message).await;
    let until = Instant::now() + Duration::from_secs(120);
    while Instant::now() < until {
        let input = json!({"requests": [{"requestId": id}]});
        if let Some(reply) = soak.hf("getRequestStatus", input).await {
            let status = reply["requests"][0]["status"].as_str().unwrap_or("?");
            if status != "running" {
                let end = (Instant::now(), status.to_string());
                if let Some(r) = soak.returns.lock().unwrap().get_mut(&id) {
                    r.finished = Some(end);
                }
                soak.note(format!("return {id} {status}"));
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// HostFactory's timer: getReturnRequests every 5 s, and whatever it lists is given back.
pub(crate) async fn reclaimer(soak: Arc<Soak>) {
    while !soak.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let Some(reply) = soak.hf("getReturnRequests", json!({})).await else {
            continue;
        };
        let listed: Vec<String> = reply["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["machine"].as_str().map(String::from))
            .collect();
        if !listed.is_empty() {
            soak.event("reclaim", format!("getReturnRequests listed {listed:?}"));
            give_back(&soak, &listed).await;
        }
    }
}
