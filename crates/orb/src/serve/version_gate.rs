//! `min_kubernetes_version` for `orb serve`: it will not start against an older apiserver,
//! and `/readyz` reports the comparison as its `kubernetes_version` check, asking the
//! apiserver at most once a minute (an apiserver upgrade or downgrade shows within that).

use std::time::{Duration, Instant};

use orb_k8s::K8sProvider;
use orb_k8s::doctor::{CheckResult, version_result};
use tokio::sync::Mutex;

use super::model::Check;
use crate::failure::{CliResult, Failure};

/// How long a known version is trusted.
pub const RECHECK_AFTER: Duration = Duration::from_secs(60);
/// How long "the apiserver did not answer" is kept before asking again.
const RETRY_UNKNOWN_AFTER: Duration = Duration::from_secs(10);
/// The longest a version request may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the apiserver's version could not be asked.
#[derive(Debug, thiserror::Error)]
enum NotAsked {
    #[error("cannot build the Kubernetes client: {0}")]
    Client(orb_k8s::error::K8sError),
    #[error("the apiserver did not answer within {ASK_TIMEOUT:?}")]
    Timeout,
    #[error("the apiserver did not answer: {0}")]
    Failed(kube::Error),
}

/// The apiserver's verdict, or why it could not be asked.
async fn ask(provider: &K8sProvider) -> Result<CheckResult, NotAsked> {
    let client = provider.kube_client().await.map_err(NotAsked::Client)?;
    let info = tokio::time::timeout(ASK_TIMEOUT, client.apiserver_version())
        .await
        .map_err(|_| NotAsked::Timeout)?
        .map_err(NotAsked::Failed)?;
    Ok(version_result(&info, provider.config()))
}

/// The start-up check: an error when the apiserver is older than `min_kubernetes_version`,
/// a warning (to print) when it could not be asked.
pub async fn refuse_old_apiserver(provider: &K8sProvider) -> CliResult<Option<String>> {
    match ask(provider).await {
        Ok(result) if result.ok => Ok(None),
        Ok(result) => Err(Failure::provider(format!(
            "orb serve will not start: {}; {}",
            result.detail,
            result.fix.unwrap_or_default()
        ))),
        Err(why) => Ok(Some(format!(
            "min_kubernetes_version {:?} not checked at start ({why}); /readyz checks it again",
            provider.config().min_kubernetes_version
        ))),
    }
}

/// How long one "the apiserver answers" (or does not) is reused by `/readyz`.
const REACHABILITY_TTL: Duration = Duration::from_secs(3);

/// The `/readyz` `apiserver` check: failing while the apiserver does not answer, so a replica
/// that cannot reach its cluster is not ready (its status reads would be stale and its
/// requests could not be carried out), cached for a few seconds.
#[derive(Default)]
pub struct ReachabilityCache {
    last: Mutex<Option<(Instant, Check)>>,
}

impl ReachabilityCache {
    pub async fn check(&self, provider: &K8sProvider) -> Check {
        let mut last = self.last.lock().await;
        if let Some((at, check)) = last.as_ref()
            && at.elapsed() < REACHABILITY_TTL
        {
            return check.clone();
        }
        let check = match ask(provider).await {
            Ok(result) => Check {
                status: "ok".into(),
                detail: Some(format!("the apiserver answers ({})", result.detail)),
            },
            Err(why) => Check {
                status: "failing".into(),
                detail: Some(format!(
                    "{why}; requests cannot be carried out and status reads may be stale \
                     until it answers again"
                )),
            },
        };
        *last = Some((Instant::now(), check.clone()));
        check
    }
}

/// The `/readyz` check, cached.
#[derive(Default)]
pub struct VersionCheckCache {
    last: Mutex<Option<(Instant, Duration, Check)>>,
}

impl VersionCheckCache {
    pub async fn check(&self, provider: &K8sProvider) -> Check {
        // Held while asking, so concurrent probes wait for one answer instead of each asking.
        let mut last = self.last.lock().await;
        if let Some((at, ttl, check)) = last.as_ref()
            && at.elapsed() < *ttl
        {
            return check.clone();
        }
        let (ttl, check) = match ask(provider).await {
            Ok(result) => (RECHECK_AFTER, check_of(result)),
            // Reachability is not this check's business; it fails only on a known old server.
            Err(why) => (
                RETRY_UNKNOWN_AFTER,
                Check {
                    status: "ok".into(),
                    detail: Some(format!("not checked: {why}")),
                },
            ),
        };
        *last = Some((Instant::now(), ttl, check.clone()));
        check
    }
}

fn check_of(result: CheckResult) -> Check {
    if result.ok {
        Check {
            status: "ok".into(),
            detail: Some(format!("apiserver {}", result.detail)),
        }
    } else {
        Check {
            status: "failing".into(),
            detail: Some(format!(
                "{}; {}",
                result.detail,
                result.fix.unwrap_or_default()
            )),
        }
    }
}
