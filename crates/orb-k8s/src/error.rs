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
    /// A request's stored provider data is not bookkeeping orb can act on.
    #[error(transparent)]
    Bookkeeping(#[from] crate::provider_data::RecordError),
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

    /// The cluster did not give an answer that stands: no reply (network, timeout), a
    /// throttle or server error that outlasted the retries, or an open circuit breaker. The
    /// call may or may not have been carried out; trying again later is the right move.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Api { code: None, .. } | Self::CircuitOpen { .. } => true,
            Self::Api {
                code: Some(code), ..
            } => *code == 429 || (500..=599).contains(code),
            _ => false,
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
                code: Some(409), ..
            } => ProviderError::Conflict(text),
            K8sError::Api {
                code: Some(401 | 403),
                ..
            } => ProviderError::Forbidden(text),
            K8sError::Api {
                code: Some(400 | 404 | 410 | 422),
                ..
            }
            | K8sError::Spec(_)
            | K8sError::Namespace(_)
            | K8sError::TemplateConfig(_)
            | K8sError::StatefulSetRelease(_)
            | K8sError::Audit(_)
            | K8sError::Bookkeeping(_)
            | K8sError::Refused(_) => ProviderError::Rejected(text),
            K8sError::Client(_) => ProviderError::Misconfigured(text),
            _ if error.is_transient() => ProviderError::Interrupted(text),
            K8sError::Api { .. } | K8sError::CircuitOpen { .. } => ProviderError::Unavailable(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn api(code: Option<u16>) -> K8sError {
        K8sError::Api {
            operation: "creating pod p".into(),
            code,
            detail: "x".into(),
        }
    }

    /// Only an answer that did not come (or that says "later") interrupts an acquire; a real
    /// refusal fails it.
    #[rstest]
    #[case::no_answer(api(None), "interrupted")]
    #[case::throttled(api(Some(429)), "interrupted")]
    #[case::server_error(api(Some(503)), "interrupted")]
    #[case::breaker(K8sError::CircuitOpen { handler: "pod", failures: 5, retry_in_secs: 60 }, "interrupted")]
    #[case::forbidden(api(Some(403)), "forbidden")]
    #[case::unauthorized(api(Some(401)), "forbidden")]
    #[case::taken(api(Some(409)), "conflict")]
    #[case::gone(api(Some(410)), "rejected")]
    #[case::other_4xx(api(Some(413)), "unavailable")]
    #[case::invalid(api(Some(422)), "rejected")]
    #[case::refused(K8sError::Refused("no".into()), "rejected")]
    #[case::client(K8sError::Client("bad kubeconfig".into()), "misconfigured")]
    fn errors_reach_the_broker_as_what_they_are(#[case] error: K8sError, #[case] want: &str) {
        let got = match ProviderError::from(error) {
            ProviderError::Interrupted(_) => "interrupted",
            ProviderError::Unavailable(_) => "unavailable",
            ProviderError::Rejected(_) => "rejected",
            ProviderError::Misconfigured(_) => "misconfigured",
            ProviderError::Conflict(_) => "conflict",
            ProviderError::Forbidden(_) => "forbidden",
        };
        assert_eq!(got, want);
    }
}
