//! Leader election between `orb serve` replicas that share one store (PostgreSQL): one
//! coordination.k8s.io Lease per provider, held through kube-lease-manager. Every replica
//! serves the API; only the leader runs the cluster-wide chores (orphan GC, timeout GC,
//! resuming interrupted acquires). The flag is a `watch` channel so a chore can check it
//! before each pass, and the `leader` gauge mirrors it.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::K8sError;
use crate::metrics::K8sMetrics;

/// Where the Lease lives and how it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a holder's claim lasts without renewal (a crashed leader is replaced
    /// after at most this long).
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// `orb-serve-<provider>`, lower-cased and cut to a valid object name.
pub fn lease_name(provider_name: &str) -> String {
    let cleaned: String = provider_name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("orb-serve-{cleaned}");
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_string()
}

/// `<hostname>-<pid>-<random>`: unique per process, readable in `kubectl get lease`.
pub fn lease_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "orb".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &random[..8])
}

/// This replica's view of the election.
#[derive(Debug, Clone)]
pub struct Leadership {
    flag: watch::Receiver<bool>,
    /// Keeps a fixed flag's sender alive (leader election off).
    _fixed: Option<std::sync::Arc<watch::Sender<bool>>>,
}

impl Leadership {
    /// A single replica that leads without a Lease (leader election off).
    pub fn always(metrics: &K8sMetrics) -> Self {
        metrics.leader.set(1);
        let (tx, flag) = watch::channel(true);
        Self {
            flag,
            _fixed: Some(std::sync::Arc::new(tx)),
        }
    }

    pub fn is_leader(&self) -> bool {
        *self.flag.borrow()
    }

    /// A receiver that changes whenever leadership is won or lost.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.flag.clone()
    }
}

/// Joins the election: returns the flag and a task that holds or waits for the Lease until
/// `shutdown` turns true, then releases it (so another replica takes over at once).
pub async fn elect(
    client: Client,
    settings: &LeaseSettings,
    metrics: K8sMetrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(Leadership, JoinHandle<()>), K8sError> {
    let manager = LeaseManagerBuilder::new(client, &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.duration.as_secs().max(2))
        .with_grace(settings.grace.as_secs().max(1))
        .build()
        .await
        .map_err(|e| {
            K8sError::Client(format!(
                "leader election: cannot use Lease {}/{}: {e}; orb serve needs get/create/update/patch \
                 on coordination.k8s.io leases in that namespace, or run it with --leader-elect=false",
                settings.namespace, settings.name
            ))
        })?;
    let (mut lease_rx, lease_task) = manager.watch().await;
    metrics.leader.set(0);
    let (tx, flag) = watch::channel(false);
    let identity = settings.identity.clone();
    let name = settings.name.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = lease_rx.changed() => {
                    if changed.is_err() {
                        tracing::error!(lease = %name, "leader election stopped; this replica no longer leads");
                        break;
                    }
                    let leading = *lease_rx.borrow_and_update();
                    metrics.leader.set(i64::from(leading));
                    tracing::info!(lease = %name, identity = %identity, leading, "leadership changed");
                    let _ = tx.send(leading);
                }
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        metrics.leader.set(0);
        let _ = tx.send(false);
        // Dropping the last receiver makes the manager release the Lease and return.
        drop(lease_rx);
        let _ = lease_task.await;
    });
    Ok((Leadership { flag, _fixed: None }, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::plain("kubernetes", "orb-serve-kubernetes")]
    #[case::mixed_case_and_underscore("My_K8s", "orb-serve-my-k8s")]
    #[case::trailing_symbol("k8s-", "orb-serve-k8s")]
    fn the_lease_is_named_after_the_provider(#[case] provider: &str, #[case] expected: &str) {
        assert_eq!(lease_name(provider), expected);
    }

    #[test]
    fn identities_differ_between_managers_of_one_process() {
        let (a, b) = (lease_identity(), lease_identity());
        assert_ne!(a, b);
        assert!(a.contains(&std::process::id().to_string()), "{a}");
    }
}
