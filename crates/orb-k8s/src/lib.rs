//! orb-k8s
pub mod config;
pub mod labels;
pub mod naming;
pub mod validation;
pub mod cancel;
pub mod error;
pub mod fulfilment;
pub mod handlers;
pub mod machine_state;
pub mod provider;
pub mod provider_data;
pub mod release_plan;
pub mod spec;
pub mod status;
pub mod status_cache;

pub use error::K8sError;
pub use provider::K8sProvider;
