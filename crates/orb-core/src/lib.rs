//! orb-core: the broker's domain, with no IO.
//!
//! Templates, requests, machines, the request lifecycle state machine, the HostFactory wire
//! format, configuration shapes and directory resolution all live here as plain data and pure
//! functions. Storage (`orb-store`), the Kubernetes provider (`orb-k8s`) and the CLI (`orb`)
//! call into this crate; it never calls out.
#![forbid(unsafe_code)]

pub mod config;
pub mod dirs;
pub mod hostfactory;
pub mod ids;
pub mod kept;
pub mod lifecycle;
pub mod machine;
pub mod provider;
pub mod quantity;
pub mod request;
pub mod shared;
pub mod sorted;
pub mod template;
/// Request and machine builders for tests; see the `test-support` feature.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use ids::{RequestId, RequestIdError};
pub use lifecycle::{LifecycleError, LifecycleEvent, Verdict};
pub use machine::{Machine, MachineStatus};
pub use provider::{Provider, ProviderError};
pub use request::{Request, RequestStatus, RequestType};
pub use template::{ProviderApi, Template, TemplateError};
