//! The provider contract: what the broker asks of a cluster.
//!
//! # Design
//! [`Provider`] is **object-safe** so the CLI can hold one `Arc<dyn Provider>` chosen at
//! runtime by the config's provider `type`. Each method returns a boxed `Send` future
//! ([`ProviderFuture`]) instead of using `async fn` (which would make the trait
//! non-object-safe). Inputs and outputs are plain owned data: the broker decides request state
//! through [`crate::lifecycle`]; the provider only acts on the cluster and reports what it
//! sees. Providers never write to storage.
//!
//! An implementation looks like:
//! ```text
//! impl Provider for K8sProvider {
//!     fn provider_type(&self) -> &str { "k8s" }
//!     fn acquire(&self, input: AcquireInput) -> ProviderFuture<'_, AcquireOutcome> {
//!         Box::pin(async move { self.acquire_inner(input).await })
//!     }
//!     // release, status, cancel, reclaims likewise
//! }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use jiff::Timestamp;
use serde_json::Value;

use crate::ids::RequestId;
use crate::lifecycle::Verdict;
use crate::machine::{Machine, MachineList, MachineStatus};
use crate::request::RequestType;
use crate::shared::Shared;
use crate::template::{ProviderApi, Template};

pub type ProviderFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request cannot work as asked (bad template for this provider, refused release
    /// plan, audit rejection). Nothing was created. CLI exit code 2.
    #[error("{0}")]
    Rejected(String),
    /// An object the request needs already exists and is not the request's own (a name
    /// taken by something else), or was changed under us. Nothing of this request was
    /// created in its place. CLI exit code 2.
    #[error("{0}")]
    Conflict(String),
    /// The cluster does not let orb do this (RBAC: orb's own identity lacks a permission).
    /// CLI exit code 3.
    #[error("{0}")]
    Forbidden(String),
    /// The cluster refused us (quota, an error it will not explain) or cannot be used. CLI
    /// exit code 3.
    #[error("{0}")]
    Unavailable(String),
    /// The cluster did not answer (network, timeout, server errors past the retries, an open
    /// circuit breaker): the call may or may not have happened, and trying again later is
    /// right. An acquire cut off this way is resumed, not failed. CLI exit code 3.
    #[error("{0}")]
    Interrupted(String),
    /// The provider itself is misconfigured or not built in. CLI exit code 3.
    #[error("{0}")]
    Misconfigured(String),
}

/// Create `count` machines of `template` for `request_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireInput {
    pub request_id: RequestId,
    pub template: Template,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AcquireOutcome {
    /// Objects created (pod names, or the one controller name).
    pub resource_ids: Vec<String>,
    /// Machines already known at create time (bare pods); controllers report theirs later
    /// through [`Provider::status`].
    pub machines: Vec<MachineObservation>,
    /// Bookkeeping handed back on every later call for this request.
    pub provider_data: Value,
    pub message: Option<String>,
}

/// What the provider saw of one machine.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineObservation {
    pub machine_id: String,
    pub name: String,
    pub status: MachineStatus,
    pub status_reason: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub launch_time: Option<Timestamp>,
    pub instance_type: Option<String>,
    pub price_type: Option<String>,
    pub tags: Shared<BTreeMap<String, String>>,
    pub resource_id: Option<String>,
    pub uid: Option<String>,
    pub provider_data: Shared<Value>,
}

impl MachineObservation {
    /// An observation with only identity and status set.
    pub fn new(machine_id: &str, status: MachineStatus) -> Self {
        Self {
            machine_id: machine_id.to_string(),
            name: machine_id.to_string(),
            status,
            status_reason: None,
            private_ip: None,
            public_ip: None,
            launch_time: None,
            instance_type: None,
            price_type: None,
            tags: Shared::default(),
            resource_id: None,
            uid: None,
            provider_data: Shared::default(),
        }
    }
}

/// The key, `true` in an observation's `provider_data`, of a machine orb removed itself
/// outside any return (a pod timed out and deleted under `delete_timed_out_pods`). The broker
/// keeps it on the machine through every later read (the pod being deleted, then gone), so
/// getReturnRequests never offers it back as a host the cluster took.
pub const REMOVED_BY_ORB: &str = "removed_by_orb";

/// Whether `provider_data` carries the [`REMOVED_BY_ORB`] mark.
pub fn removed_by_orb(provider_data: &Value) -> bool {
    provider_data.get(REMOVED_BY_ORB) == Some(&Value::Bool(true))
}

/// A machine as the broker knows it, for release, status and reclaim checks.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineRef {
    pub machine_id: String,
    pub name: String,
    /// The acquire request that created it.
    pub request_id: RequestId,
    pub template_id: String,
    /// The stored machine's kind; `None` when its row has none (see `Machine::provider_api`).
    pub provider_api: Option<ProviderApi>,
    pub resource_id: Option<String>,
    pub uid: Option<String>,
    pub status: MachineStatus,
    /// The acquire request's provider bookkeeping, shared by every machine of the request (a
    /// copy per machine cost a status read of 50 machines 2,500 string copies: the record
    /// lists every pod name).
    pub request_provider_data: std::sync::Arc<Value>,
}

/// Release `machines` under return request `return_request_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseInput {
    pub return_request_id: RequestId,
    pub machines: Vec<MachineRef>,
    /// Templates of the machines' acquires, by template id, when still defined.
    pub templates: BTreeMap<String, Template>,
    /// For each acquire request (by id) of `machines`: the ids of its other stored machines
    /// that may still exist and are in no return. Empty means the return takes everything orb
    /// knows of that request (a controller is then deleted, not scaled).
    pub others: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReleaseOutcome {
    pub released: Vec<String>,
    pub failed: Vec<MachineFailure>,
    pub provider_data: Value,
    pub message: Option<String>,
    /// Machines of [`ReleaseInput::others`] this release removes as well, though nobody named
    /// them: the other hosts of a Job (it is deleted whole), failed ordinals above a
    /// StatefulSet's tail. The broker adds them to the return.
    pub also_released: Vec<String>,
    /// Acquire requests this release ended (a returned Job cannot deliver any more).
    pub ended: Vec<EndedAcquire>,
}

/// An acquire request a release ended, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedAcquire {
    pub request_id: String,
    pub reason: String,
}

/// A return gave up on these machines (it failed or timed out): undo whatever would still
/// remove them later, so a new return starts from a clean slate.
#[derive(Debug, Clone, PartialEq)]
pub struct AbandonInput {
    pub machines: Vec<MachineRef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFailure {
    pub machine_id: String,
    pub reason: String,
}

/// Read the current state of a request's machines.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusInput {
    pub request_id: RequestId,
    pub request_type: RequestType,
    pub requested_count: u32,
    /// The request's kind; `None` for returns, which may span kinds.
    pub provider_api: Option<ProviderApi>,
    /// Shared with the acquire's machine references.
    pub provider_data: std::sync::Arc<Value>,
    pub template: Option<Template>,
    /// Machines stored for this request (for a return: the machines being returned).
    pub machines: StatusMachines,
}

/// The machines a status read asks about: the broker's kept list itself, shared rather than
/// copied into a [`MachineRef`] each (six strings a machine: a read of a 5,000-machine acquire
/// copied and freed 30,000 of them to build one set of names), each with the bookkeeping of
/// the acquire it belongs to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusMachines {
    list: MachineList,
    /// The acquire bookkeeping by runs of consecutive machines: each run's end (the index
    /// after its last machine) and its acquire's record. All of an acquire's own machines
    /// are one run, so a status read does not count one reference per machine.
    runs: Vec<(usize, std::sync::Arc<Value>)>,
}

impl StatusMachines {
    /// `acquire_data` holds, machine by machine, the provider bookkeeping of the acquire that
    /// created it.
    ///
    /// # Panics
    /// When the two lengths differ: a caller's mistake, never the user's.
    pub fn new(list: MachineList, acquire_data: Vec<std::sync::Arc<Value>>) -> Self {
        assert_eq!(
            list.len(),
            acquire_data.len(),
            "one acquire record per machine"
        );
        let mut runs: Vec<(usize, std::sync::Arc<Value>)> = Vec::new();
        for (i, data) in acquire_data.into_iter().enumerate() {
            match runs.last_mut() {
                Some((end, last)) if std::sync::Arc::ptr_eq(last, &data) => *end = i + 1,
                _ => runs.push((i + 1, data)),
            }
        }
        Self { list, runs }
    }

    /// `runs` holds, for each run of consecutive machines of one acquire, the index after
    /// its last machine and the acquire's bookkeeping.
    ///
    /// # Panics
    /// When the runs do not end in order at the list's end: a caller's mistake.
    pub fn from_runs(list: MachineList, runs: Vec<(usize, std::sync::Arc<Value>)>) -> Self {
        assert!(
            runs.windows(2).all(|w| w[0].0 < w[1].0)
                && runs.last().map_or(0, |r| r.0) == list.len(),
            "acquire runs must end in order at the last machine"
        );
        Self { list, runs }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> StatusMachineIter<'_> {
        StatusMachineIter {
            machines: self.list.iter().enumerate(),
            runs: &self.runs,
            run: 0,
        }
    }
}

impl<'a> IntoIterator for &'a StatusMachines {
    type Item = StatusMachine<'a>;
    type IntoIter = StatusMachineIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The machines of a [`StatusMachines`], in stored order.
#[derive(Debug, Clone)]
pub struct StatusMachineIter<'a> {
    machines: std::iter::Enumerate<std::slice::Iter<'a, Machine>>,
    runs: &'a [(usize, std::sync::Arc<Value>)],
    /// The run of the machine handed out last (runs only move forward).
    run: usize,
}

impl<'a> Iterator for StatusMachineIter<'a> {
    type Item = StatusMachine<'a>;

    fn next(&mut self) -> Option<StatusMachine<'a>> {
        let (i, machine) = self.machines.next()?;
        while self.runs[self.run].0 <= i {
            self.run += 1;
        }
        Some(StatusMachine {
            machine,
            request_provider_data: &self.runs[self.run].1,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.machines.size_hint()
    }
}

impl ExactSizeIterator for StatusMachineIter<'_> {}

/// One machine of a [`StatusMachines`]: the stored machine (through `Deref`) and its
/// acquire's bookkeeping.
#[derive(Debug, Clone, Copy)]
pub struct StatusMachine<'a> {
    machine: &'a Machine,
    pub request_provider_data: &'a Value,
}

impl<'a> StatusMachine<'a> {
    /// The stored machine, for as long as the list lives.
    pub fn machine(self) -> &'a Machine {
        self.machine
    }
}

impl std::ops::Deref for StatusMachine<'_> {
    type Target = Machine;

    fn deref(&self) -> &Machine {
        self.machine
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    pub verdict: Verdict,
    /// Machines delivered (acquire: live and ready hosts) or released (return).
    pub fulfilled: u32,
    pub failed: u32,
    /// Shared: a provider may hand out the observation it made of an unchanged pod at an
    /// earlier read (`orb serve`'s watch cache keeps one per pod) instead of making 5,000 anew.
    pub machines: Vec<Shared<MachineObservation>>,
    pub message: Option<String>,
    /// Said to the reader of this one report, never stored: e.g. that it was served from a
    /// view of the cluster that may be out of date.
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CancelInput {
    pub request_id: RequestId,
    /// The acquire's kind, as stored with the request (`None` if the row has none).
    pub provider_api: Option<ProviderApi>,
    pub provider_data: Value,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CancelOutcome {
    pub deleted: Vec<String>,
    pub already_gone: Vec<String>,
    pub failed: Vec<MachineFailure>,
}

/// Which of these machines is the cluster taking away (eviction, preemption, drain,
/// external delete)? Only machines not already in an orb return are asked about.
#[derive(Debug, Clone, PartialEq)]
pub struct ReclaimQuery {
    pub machines: Vec<MachineRef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimNotice {
    pub machine_id: String,
    pub name: String,
    /// Seconds left before the host disappears; 0 when it is already gone.
    pub grace_period_secs: u64,
    pub reason: String,
}

/// What a provider read for a status call before the broker had read the request's
/// machines ([`Provider::read_ahead`]). Opaque to the broker: only the provider that made it
/// reads it, in [`Provider::status_after`].
pub struct ReadAhead(Box<dyn std::any::Any + Send>);

impl ReadAhead {
    pub fn new<T: std::any::Any + Send>(read: T) -> Self {
        Self(Box::new(read))
    }

    /// The read, if it is a `T`.
    pub fn take<T: std::any::Any>(self) -> Option<T> {
        self.0.downcast::<T>().ok().map(|read| *read)
    }
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadAhead(..)")
    }
}

/// A read started by [`Provider::read_ahead`]; it never fails (a failed read is handed to
/// the status call, which reports it as its own).
pub type ReadAheadFuture<'a> = Pin<Box<dyn Future<Output = ReadAhead> + Send + 'a>>;

/// A cluster back end. See the module docs for the design.
pub trait Provider: Send + Sync {
    /// The config `type` this provider serves (e.g. `k8s`).
    fn provider_type(&self) -> &str;

    /// Create machines. Must not return before the create calls finished; an error means
    /// nothing usable was created.
    fn acquire(&self, input: AcquireInput) -> ProviderFuture<'_, AcquireOutcome>;

    /// Start releasing machines; completion is observed through [`Provider::status`].
    fn release(&self, input: ReleaseInput) -> ProviderFuture<'_, ReleaseOutcome>;

    /// Undo a release that will not finish (clear marks left on objects).
    fn abandon_release(&self, input: AbandonInput) -> ProviderFuture<'_, ()>;

    /// Observe a request's machines now. Transient cluster errors should come back as
    /// `Verdict::InProgress` with a message, not as `Err`, so polls keep going.
    fn status(&self, input: StatusInput) -> ProviderFuture<'_, StatusReport>;

    /// Starts the part of a status read of a stored request that does not depend on its
    /// machines, so the broker can read those from storage meanwhile; `None` when there is
    /// nothing to gain. The broker hands what was read to [`Provider::status_after`], or drops
    /// the read, finished or not, when the request needs no status call after all. The read
    /// is taken before the machines are, so a machine recorded in between is missing from it:
    /// the provider must check that before trusting it.
    fn read_ahead(
        &self,
        request_id: &RequestId,
        request_type: RequestType,
        provider_data: &Value,
    ) -> Option<ReadAheadFuture<'_>> {
        let _ = (request_id, request_type, provider_data);
        None
    }

    /// [`Provider::status`], with what [`Provider::read_ahead`] read for this request.
    fn status_after(
        &self,
        input: StatusInput,
        ahead: Option<ReadAhead>,
    ) -> ProviderFuture<'_, StatusReport> {
        let _ = ahead;
        self.status(input)
    }

    /// Delete everything created for a request.
    fn cancel(&self, input: CancelInput) -> ProviderFuture<'_, CancelOutcome>;

    /// Report machines the cluster removed or is about to remove on its own.
    fn reclaims(&self, input: ReclaimQuery) -> ProviderFuture<'_, Vec<ReclaimNotice>>;

    /// Every check an acquire of `count` machines of `template` makes before its first call
    /// to the cluster, without making one. `orb templates validate` and the template listings
    /// ask it, and the broker asks it before storing a request, so a template that passes is
    /// never refused later for a reason visible up front. Returns the warnings the acquire
    /// would log; `Err` is always [`ProviderError::Rejected`]. The default checks nothing.
    fn check_acquire(&self, template: &Template, count: u32) -> Result<Vec<String>, ProviderError> {
        let _ = (template, count);
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::machine;
    use std::sync::Arc;

    #[test]
    fn status_machines_pair_each_machine_with_its_acquires_record_without_copying_the_list() {
        let list: MachineList = vec![machine("a").build(), machine("b").build()].into();
        let first = Arc::new(serde_json::json!({"pod_names": ["a"]}));
        let second = Arc::new(serde_json::json!({"pod_names": ["b"]}));
        let machines = StatusMachines::new(list.clone(), vec![first.clone(), second.clone()]);
        let seen: Vec<(&str, &Value)> = machines
            .iter()
            .map(|m| (m.machine().machine_id.as_str(), m.request_provider_data))
            .collect();
        assert_eq!(seen, [("a", &*first), ("b", &*second)]);
        assert!(
            std::ptr::eq(machines.iter().next().unwrap().machine(), &list[0]),
            "the input reads the kept list itself"
        );
        assert_eq!(machines.len(), 2);
    }

    #[test]
    fn runs_of_one_acquire_serve_each_of_its_machines() {
        let list: MachineList = ["a", "b", "c", "d"]
            .map(|n| machine(n).build())
            .to_vec()
            .into();
        let (one, two) = (
            Arc::new(serde_json::json!(1)),
            Arc::new(serde_json::json!(2)),
        );
        let records = |m: &StatusMachines| -> Vec<Value> {
            m.iter().map(|m| m.request_provider_data.clone()).collect()
        };
        let by_runs =
            StatusMachines::from_runs(list.clone(), vec![(3, one.clone()), (4, two.clone())]);
        let by_machine = StatusMachines::new(
            list.clone(),
            vec![one.clone(), one.clone(), one.clone(), two.clone()],
        );
        assert_eq!(records(&by_runs), [1, 1, 1, 2].map(Value::from));
        assert_eq!(
            by_runs, by_machine,
            "neighbours sharing a record make one run"
        );
        assert_eq!(by_machine.runs.len(), 2);
        // Equal records that are not shared stay apart, and records may come back.
        let apart = StatusMachines::new(
            list.clone(),
            vec![one.clone(), Arc::new(serde_json::json!(1)), two, one],
        );
        assert_eq!(apart.runs.len(), 4);
        assert_eq!(records(&apart), [1, 1, 2, 1].map(Value::from));
        assert!(StatusMachines::from_runs(MachineList::default(), vec![]).is_empty());
    }

    #[test]
    #[should_panic(expected = "acquire runs must end in order at the last machine")]
    fn runs_that_stop_short_are_refused() {
        let list: MachineList = vec![machine("a").build(), machine("b").build()].into();
        let _ = StatusMachines::from_runs(list, vec![(1, Arc::new(Value::Null))]);
    }

    #[test]
    #[should_panic(expected = "one acquire record per machine")]
    fn status_machines_refuse_a_record_list_of_another_length() {
        let list: MachineList = vec![machine("a").build()].into();
        let _ = StatusMachines::new(list, Vec::new());
    }
}
