//! orb-k8s: the Kubernetes provider of orb (config, naming, labels, spec builders, native
//! specs, the security audit, the four handlers, machine status, and `orb doctor`'s checks).
pub mod audit;
pub mod cancel;
pub mod config;
pub mod daemon;
pub mod doctor;
pub mod dry_run;
pub mod error;
pub mod fulfilment;
pub mod handlers;
pub mod kept;
pub mod labels;
pub mod machine_state;
pub mod metrics;
pub mod naming;
pub mod native_spec;
pub mod pod_description;
pub mod pod_read;
pub mod protobuf_list;
pub(crate) mod protobuf_wire;
pub mod provider;
pub mod provider_data;
pub mod rbac;
pub mod release_plan;
pub mod resilience;
pub mod spec;
pub mod status;
pub mod status_cache;
/// A pod builder and the apiserver stand-in that records a handler's calls; see the
/// `test-support` feature.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod validation;

pub use error::K8sError;
pub use provider::{ClusterViews, K8sProvider};
