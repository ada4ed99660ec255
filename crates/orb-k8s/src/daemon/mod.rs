//! The long-running parts of the Kubernetes provider, started by `orb serve` (the CLI and
//! the HostFactory scripts never start them): the pod watch cache, metrics shared with the
//! HTTP layer, and the background tasks built on them.

pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod pod_cache;
pub mod reconcile;

pub use metrics::K8sMetrics;
pub use nodes::NodeIndex;
pub use pod_cache::PodCache;
