//! The provider's one error type, and how each kind reaches the broker: a request that cannot
//! work as asked is `Rejected` (nothing was created), a cluster that cannot be reached or
//! refused us is `Unavailable`.

use orb_core::provider::ProviderError;

use crate::config::{ConfigErrors, NamespaceRefusal};
use crate::release_plan::StatefulSetReleaseError;
use crate::spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Namespace(#[from] NamespaceRefusal),
    #[error("the template's provider_config cannot be applied: {0}")]
    TemplateConfig(ConfigErrors),
    #[error(transparent)]
    StatefulSetRelease(#[from] StatefulSetReleaseError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditRejection),
    /// The Kubernetes client could not be built (kubeconfig, context, in-cluster auth).
    #[error("cannot connect to Kubernetes: {0}")]
    Client(String),
    /// A refusal decided by orb (with the fix in the text).
    #[error("{0}")]
    Refused(String),
    #[error("{operation} failed: {detail}")]
    Api {
        operation: String,
        /// HTTP status, when the apiserver answered.
        code: Option<u16>,
        detail: String,
    },
    /// A handler's circuit breaker is open: the call was not sent.
    #[error(
        "the Kubernetes API has failed {failures} times in a row for {handler} calls; orb stops calling it for {retry_in_secs}s (circuit breaker open); check the apiserver"
    )]
    CircuitOpen {
        handler: &'static str,
        failures: u32,
        retry_in_secs: u64,
    },
}

impl K8sError {
    /// Wraps a kube error with what orb was doing.
    pub fn api(operation: impl Into<String>, error: kube::Error) -> Self {
        let (code, detail) = match &error {
            kube::Error::Api(status) => (
                Some(status.code),
                format!(
                    "the apiserver answered {} {}: {}",
                    status.code, status.reason, status.message
                ),
            ),
            other => (
                None,
                format!("{other}; check that the apiserver is reachable and the kubeconfig valid"),
            ),
        };
        Self::Api {
            operation: operation.into(),
            code,
            detail,
        }
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => *code,
            _ => None,
        }
    }
}

/// True when a kube error is the apiserver's 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// True when a kube error is the apiserver's 409.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

impl From<K8sError> for ProviderError {
    fn from(error: K8sError) -> Self {
        let text = error.to_string();
        match &error {
            K8sError::Api {
                code: Some(400 | 404 | 409 | 410 | 422),
                ..
            }
            | K8sError::Spec(_)
            | K8sError::Namespace(_)
            | K8sError::TemplateConfig(_)
            | K8sError::StatefulSetRelease(_)
            | K8sError::Audit(_)
            | K8sError::Refused(_) => ProviderError::Rejected(text),
            K8sError::Client(_) => ProviderError::Misconfigured(text),
            K8sError::Api { .. } | K8sError::CircuitOpen { .. } => ProviderError::Unavailable(text),
        }
    }
}
