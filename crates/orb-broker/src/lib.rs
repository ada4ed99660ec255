//! The broker: runs requests through their lifecycle, with the store for memory and a
//! provider for hands. Decisions come from orb-core (lifecycle, validation, mappings); this
//! crate sequences IO around them and keeps every state change to one store write. The doors
//! of `orb` (CLI, HostFactory scripts, REST) are adapters over it: they parse, call one use
//! case here and render its typed reply.
#![forbid(unsafe_code)]

mod acquire;
mod cancel;
pub mod catalog;
mod chores;
mod lookup;
mod observe;
pub mod purge;
mod queries;
mod reclaim;
mod release;
mod resume;
mod resume_return;
mod status;
pub mod templates;
pub mod usage;
pub mod watch;

#[cfg(test)]
mod test_provider;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::lifecycle::LifecycleError;
use orb_core::machine::{Machine, MachineList};
use orb_core::provider::{MachineRef, Provider, ProviderError};
use orb_core::request::Request;
use orb_core::template::TemplateError;
use orb_store::{Store, StoreError};
use serde::Serialize;

use crate::catalog::CatalogCell;

pub use lookup::{Lookup, settled_statuses};
pub use reclaim::Reclaim;
pub use release::{MachineKey, UnknownNames};
pub use resume::{is_unrecorded_acquire, nothing_recorded};
pub use resume_return::is_unrecorded_return;

/// Builds the provider on first use, so commands that never need the cluster (status of a
/// finished request, template listing) never construct a client.
pub struct ProviderHandle {
    cell: OnceLock<Result<Arc<dyn Provider>, ProviderError>>,
    build: Box<dyn Fn() -> Result<Arc<dyn Provider>, ProviderError> + Send + Sync>,
}

impl ProviderHandle {
    pub fn lazy(
        build: impl Fn() -> Result<Arc<dyn Provider>, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            cell: OnceLock::new(),
            build: Box::new(build),
        }
    }

    pub fn ready(provider: Arc<dyn Provider>) -> Self {
        Self::lazy(move || Ok(provider.clone()))
    }

    pub fn get(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        self.cell.get_or_init(|| (self.build)()).clone()
    }
}

/// Limits and identity the broker applies to every request.
#[derive(Debug, Clone)]
pub struct BrokerSettings {
    pub provider_name: String,
    pub provider_type: String,
    pub grace_secs: u64,
    pub max_machines_per_request: u32,
    /// `maxNumber` for templates that set none.
    pub default_max_machines: i64,
}

pub struct Broker {
    pub store: Store,
    pub provider: ProviderHandle,
    pub settings: BrokerSettings,
    /// The templates; a long-running process replaces them when the file changes.
    pub catalog: CatalogCell,
    pub clock: Clock,
    /// When each unfinished request was last refreshed from the provider (shared by the
    /// brokers of one process, so the daemon's refresh pass skips what clients just read).
    pub refreshed: RefreshLog,
}

/// See [`Broker::refreshed`]. Also the requests a cancel in this process is deleting right
/// now: a refresh answers those from storage, so that it does not see the cancel's own
/// deletions as machines lost and end the request `failed` before the cancel records it.
#[derive(Debug, Default, Clone)]
pub struct RefreshLog {
    at: Arc<std::sync::Mutex<HashMap<RequestId, std::time::Instant>>>,
    cancelling: Arc<std::sync::Mutex<std::collections::HashSet<RequestId>>>,
}

impl RefreshLog {
    fn times(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, std::time::Instant>> {
        self.at.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cancels(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<RequestId>> {
        self.cancelling.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `id` as being cancelled until the returned guard is dropped.
    fn cancelling(&self, id: &RequestId) -> CancelMark {
        self.cancels().insert(id.clone());
        CancelMark {
            log: self.clone(),
            id: id.clone(),
        }
    }

    fn is_cancelling(&self, id: &RequestId) -> bool {
        self.cancels().contains(id)
    }
}

/// A request being cancelled in this process, for as long as this lives.
struct CancelMark {
    log: RefreshLog,
    id: RequestId,
}

impl Drop for CancelMark {
    fn drop(&mut self) {
        self.log.cancels().remove(&self.id);
    }
}

/// Time source; tests move it by hand.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// A request with its machines (an acquire's machines, or the machines a return covers).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestView {
    pub request: Request,
    /// Shared with the store's kept list when a status read changed none of them.
    pub machines: MachineList,
    /// Why the view may be stale (the provider could not be asked); not stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("template {template_id:?} is not defined; available templates: {available}")]
    UnknownTemplate {
        template_id: String,
        available: String,
    },
    #[error(transparent)]
    InvalidTemplate(TemplateError),
    /// The template was refused when the templates were loaded (the reason names the key).
    #[error("{0}")]
    RefusedTemplate(String),
    #[error("{0}")]
    CountRejected(String),
    #[error("request {0} not found; check the id (`orb requests list` shows recent ones)")]
    UnknownRequest(String),
    #[error("{0}")]
    UnknownMachines(String),
    #[error("{0}")]
    NotAllowed(String),
    #[error(
        "no machine has the id or host name {0:?}; `orb machines list` shows the machines orb has a record of"
    )]
    UnknownMachine(String),
    /// A purge found something that still needs the record; the text says what and the fix.
    #[error("{0}")]
    PurgeRefused(String),
    #[error("{0}")]
    InvalidCleanup(String),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whose fault a [`BrokerError`] is, for the doors' exit codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request cannot work as asked; nothing was stored or created.
    InvalidInput,
    /// The provider or the cluster failed.
    Provider,
    /// The broker could not serve the call (storage, a bug).
    Internal,
}

impl BrokerError {
    pub fn class(&self) -> ErrorClass {
        match self {
            BrokerError::Provider(ProviderError::Rejected(_) | ProviderError::Conflict(_)) => {
                ErrorClass::InvalidInput
            }
            BrokerError::Provider(_) => ErrorClass::Provider,
            BrokerError::Store(_)
            | BrokerError::Lifecycle(LifecycleError::IllegalTransition { .. }) => {
                ErrorClass::Internal
            }
            _ => ErrorClass::InvalidInput,
        }
    }
}

impl Broker {
    fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// Machine references for provider calls, with each machine's acquire bookkeeping.
    async fn machine_refs(&self, machines: &[Machine]) -> Result<Vec<MachineRef>, BrokerError> {
        let runs = self.acquire_records(machines, None).await?;
        let mut run = runs.iter().peekable();
        Ok(machines
            .iter()
            .enumerate()
            .map(|(i, m)| {
                while run.next_if(|(end, _)| *end <= i).is_some() {}
                let (_, data) = run.peek().expect("the runs cover every machine");
                (m, data.clone())
            })
            .map(|(m, request_provider_data)| MachineRef {
                machine_id: m.machine_id.clone(),
                name: m.name.clone(),
                request_id: m.request_id.clone(),
                template_id: m.template_id.clone(),
                provider_api: m.provider_api,
                resource_id: m.resource_id.clone(),
                uid: m.uid.clone(),
                status: m.status,
                request_provider_data,
            })
            .collect())
    }

    /// The provider bookkeeping of the acquire that created each machine, read once per
    /// acquire, by runs of consecutive machines of one acquire (see
    /// [`StatusMachines::from_runs`]); `known` (an acquire request already read, and its
    /// provider data) is not read again.
    async fn acquire_records(
        &self,
        machines: &[Machine],
        known: Option<(&RequestId, std::sync::Arc<serde_json::Value>)>,
    ) -> Result<Vec<(usize, std::sync::Arc<serde_json::Value>)>, BrokerError> {
        let mut acquires: BTreeMap<RequestId, std::sync::Arc<serde_json::Value>> = BTreeMap::new();
        if let Some((id, data)) = known {
            acquires.insert(id.clone(), data);
        }
        let mut runs: Vec<(usize, std::sync::Arc<serde_json::Value>)> = Vec::new();
        let mut current: Option<&RequestId> = None;
        for (i, m) in machines.iter().enumerate() {
            if current == Some(&m.request_id)
                && let Some((end, _)) = runs.last_mut()
            {
                *end = i + 1;
                continue;
            }
            if !acquires.contains_key(&m.request_id) {
                let data = self.store.get_request(&m.request_id).await?.map_or_else(
                    || std::sync::Arc::new(serde_json::Value::Null),
                    |r| r.provider_data.to_arc(),
                );
                acquires.insert(m.request_id.clone(), data);
            }
            runs.push((i + 1, acquires[&m.request_id].clone()));
            current = Some(&m.request_id);
        }
        Ok(runs)
    }
}
