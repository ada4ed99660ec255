//! `/metrics` of an operator the test started: what it counted, read over plain HTTP.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A free loopback address for the operator's health/metrics listener.
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Plain HTTP/1.1 GET on a fresh connection: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// The operator's `/metrics` text ("" while it does not answer).
pub async fn metrics_text(addr: SocketAddr) -> String {
    http_get(addr, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default()
}

/// Sum of the series of `family` whose labels contain every `key="value"` of `labels`.
pub fn metric_sum(text: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// Reconciles `controller` has finished so far.
pub async fn reconciles(addr: SocketAddr, controller: &str) -> f64 {
    metric_sum(
        &metrics_text(addr).await,
        "pdb_operator_reconciliation_duration_seconds_count",
        &[("controller", controller)],
    )
}

/// Waits until `controller` finished a reconcile after the `before` count and nothing waits
/// for one: the operator has looked at everything that changed so far.
pub async fn wait_settled(addr: SocketAddr, controller: &str, before: f64) {
    kube_fixture::wait_for(
        &format!("{controller}: a reconcile after {before} and none waiting"),
        super::WAIT,
        || async {
            let text = metrics_text(addr).await;
            let done = metric_sum(
                &text,
                "pdb_operator_reconciliation_duration_seconds_count",
                &[("controller", controller)],
            );
            let waiting = metric_sum(&text, "pdb_operator_reconcile_queue_length", &[]);
            if done > before && waiting == 0.0 {
                kube_fixture::Check::Done(())
            } else {
                kube_fixture::Check::NotYet(format!("{done} reconciles, {waiting} waiting"))
            }
        },
    )
    .await;
}
