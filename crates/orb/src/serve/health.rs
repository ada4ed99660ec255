//! What the probes and `/metrics` ask of the background side of `orb serve`, in the HTTP
//! layer's own terms: named checks and a gauge refresh. The Kubernetes daemon
//! ([`super::daemon::ClusterRuntime`]) answers it; the probes never see a Kubernetes type.

use std::future::Future;
use std::pin::Pin;

use super::model::Check;

/// A check's answer, boxed so the probes can hold the daemon as a trait object.
pub type ChecksFuture<'a> = Pin<Box<dyn Future<Output = Vec<(String, Check)>> + Send + 'a>>;

/// The running daemon, as `/readyz`, `/health` and `/metrics` see it.
pub trait DaemonHealth: Send + Sync {
    /// The daemon's checks by name, added to the store and provider checks.
    fn readiness(&self) -> ChecksFuture<'_>;

    /// Brings gauges that change with time alone up to date before `/metrics` encodes them.
    fn refresh_gauges(&self);
}
