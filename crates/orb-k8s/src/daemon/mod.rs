//! The long-running parts of the Kubernetes provider, started by `orb serve` (the CLI and
//! the HostFactory scripts never start them): the pod watch cache, the node index, and the
//! background tasks built on them. The provider's metrics, which every path records, are
//! at the crate root ([`crate::metrics`]).

pub mod leader;
pub mod nodes;
pub mod pod_cache;
pub mod reconcile;

pub use nodes::NodeIndex;
pub use pod_cache::PodCache;
