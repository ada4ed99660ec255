//! How a command fails: one readable line and an exit code that says whose fault it was.

use orb_broker::catalog::CatalogError;
use orb_broker::{BrokerError, ErrorClass};
use orb_core::provider::ProviderError;
use orb_store::StoreError;

/// Exit codes: 1 = could not be served (storage, internal), 2 = invalid input (nothing was
/// stored or created), 3 = provider or cluster error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Generic = 1,
    InvalidInput = 2,
    Provider = 3,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: ExitKind,
    pub message: String,
}

impl Failure {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            kind: ExitKind::InvalidInput,
            message: message.into(),
        }
    }

    pub fn provider(message: impl Into<String>) -> Self {
        Self {
            kind: ExitKind::Provider,
            message: message.into(),
        }
    }

    pub fn generic(message: impl Into<String>) -> Self {
        Self {
            kind: ExitKind::Generic,
            message: message.into(),
        }
    }

    pub fn code(&self) -> i32 {
        self.kind as i32
    }
}

impl From<StoreError> for Failure {
    fn from(err: StoreError) -> Self {
        Self::generic(err.to_string())
    }
}

impl From<ProviderError> for Failure {
    /// Classified as the broker classifies it (`BrokerError::class`), with the same message.
    fn from(err: ProviderError) -> Self {
        BrokerError::Provider(err).into()
    }
}

impl From<CatalogError> for Failure {
    fn from(err: CatalogError) -> Self {
        Self::invalid(err.to_string())
    }
}

impl From<BrokerError> for Failure {
    fn from(err: BrokerError) -> Self {
        match err.class() {
            ErrorClass::InvalidInput => Self::invalid(err.to_string()),
            ErrorClass::Provider => Self::provider(err.to_string()),
            ErrorClass::Internal => Self::generic(err.to_string()),
        }
    }
}

/// A mistake in a setting (config.json, a flag, an environment variable, a file a setting
/// names); the message names the setting and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigMistake(pub String);

impl From<String> for ConfigMistake {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for ConfigMistake {
    fn from(message: &str) -> Self {
        Self(message.to_string())
    }
}

impl From<ConfigMistake> for Failure {
    fn from(err: ConfigMistake) -> Self {
        Self::invalid(err.0)
    }
}

pub type CliResult<T> = Result<T, Failure>;
