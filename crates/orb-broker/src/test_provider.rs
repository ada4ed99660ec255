//! An in-process provider for lifecycle tests of the broker only: it answers from a script
//! and records what it was asked. It models no cluster behaviour.

use std::collections::VecDeque;
use std::sync::Mutex;

use orb_core::lifecycle::Verdict;
use orb_core::machine::MachineStatus;
use orb_core::provider::*;

#[derive(Default)]
pub struct ScriptedProvider {
    pub acquire_error: Mutex<Option<ProviderError>>,
    /// When set, acquires report no machines, as a controller's acquire does: the first
    /// status read records them.
    pub acquire_without_machines: Mutex<bool>,
    pub statuses: Mutex<VecDeque<Result<StatusReport, ProviderError>>>,
    pub release_failures: Mutex<Vec<MachineFailure>>,
    /// When set, the next release is refused as a whole with this error.
    pub release_error: Mutex<Option<ProviderError>>,
    /// What the next release takes along unnamed, and the acquires it ends.
    pub also_released: Mutex<Vec<String>>,
    pub ended: Mutex<Vec<EndedAcquire>>,
    pub notices: Mutex<Vec<ReclaimNotice>>,
    pub calls: Mutex<Vec<String>>,
    /// Each status and release call's machines, with the acquire record it was handed for
    /// each.
    pub machine_records: Mutex<Vec<Vec<(String, serde_json::Value)>>>,
    /// When set, the next acquire first stores a change to its own request in this store,
    /// as a status poll running at the same moment would.
    pub concurrent_writer: Mutex<Option<orb_store::Store>>,
    /// When set, the next status call first stores a change to its request in this store, as
    /// another process's read at the same moment would: the caller's write then conflicts.
    pub status_writer: Mutex<Option<orb_store::Store>>,
    /// When set, the next release first stores a change to this machine's row in this store,
    /// as a status read of its acquire at the same moment would.
    pub release_writer: Mutex<Option<(orb_store::Store, String)>>,
    /// When set, the next cancel first stores a change to its request in this store, as a
    /// refresh that began before the cancel would: the cancel's write then conflicts.
    pub cancel_writer: Mutex<Option<orb_store::Store>>,
    /// When set, the next cancel says it has started (the sender) and waits to be let go
    /// (the receiver) before it answers: a test runs other calls in between.
    pub cancel_gate: Mutex<Option<CancelGate>>,
    /// When set, every pre-flight check (`check_acquire`) refuses with this error.
    pub preflight_error: Mutex<Option<ProviderError>>,
    /// When set, every pre-flight check first blocks its thread this long (a template whose
    /// Jinja renders slowly).
    pub preflight_delay: Mutex<Option<std::time::Duration>>,
    /// When set, status reads of acquires are read ahead (see [`ReadAheadMode`]).
    pub read_ahead: Mutex<Option<ReadAheadMode>>,
}

/// How [`ScriptedProvider`] reads ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAheadMode {
    /// At once; the status call says what it was handed.
    Finish,
    /// Never finishes; dropping the read is recorded.
    Never,
}

/// Records that a read ahead was dropped before it finished.
struct DroppedUnfinished<'a> {
    calls: &'a Mutex<Vec<String>>,
    request_id: String,
}

impl Drop for DroppedUnfinished<'_> {
    fn drop(&mut self) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("read-ahead {} dropped", self.request_id));
    }
}

/// See [`ScriptedProvider::cancel_gate`].
pub type CancelGate = (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<()>,
);

/// Stores a change to request `id` as another orb process would while the caller waits on
/// the provider: the caller's own write of the request then conflicts.
async fn write_meanwhile(store: &orb_store::Store, id: &orb_core::ids::RequestId, message: &str) {
    let mut request = store
        .get_request(id)
        .await
        .expect("reading the request")
        .expect("the request is stored before the provider is called");
    request.status_message = Some(message.into());
    store
        .update_request(&mut request, &mut [])
        .await
        .expect("the concurrent write");
}

pub fn report(verdict: Verdict, machines: &[(&str, MachineStatus)]) -> StatusReport {
    let fulfilled = machines
        .iter()
        .filter(|(_, s)| *s == MachineStatus::Running || *s == MachineStatus::Terminated)
        .count() as u32;
    StatusReport {
        verdict,
        fulfilled,
        failed: 0,
        machines: machines
            .iter()
            .map(|(id, status)| MachineObservation::new(id, *status).into())
            .collect(),
        message: None,
        note: None,
    }
}

impl ScriptedProvider {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Provider for ScriptedProvider {
    fn provider_type(&self) -> &str {
        "scripted"
    }

    fn acquire(&self, input: AcquireInput) -> ProviderFuture<'_, AcquireOutcome> {
        self.record(format!(
            "acquire {} x{}",
            input.template.template_id, input.count
        ));
        let error = self.acquire_error.lock().unwrap().take();
        let writer = self.concurrent_writer.lock().unwrap().take();
        let without_machines = *self.acquire_without_machines.lock().unwrap();
        Box::pin(async move {
            if let Some(store) = writer {
                write_meanwhile(&store, &input.request_id, "polled while acquiring").await;
            }
            if let Some(error) = error {
                return Err(error);
            }
            let names: Vec<String> = (0..input.count)
                .map(|i| format!("m-{}-{i:04}", &input.request_id.hex_digits()[..8]))
                .collect();
            Ok(AcquireOutcome {
                resource_ids: names.clone(),
                machines: names
                    .iter()
                    .filter(|_| !without_machines)
                    .map(|n| MachineObservation::new(n, MachineStatus::Pending))
                    .collect(),
                provider_data: serde_json::json!({"pod_names": names}),
                message: None,
            })
        })
    }

    fn release(&self, input: ReleaseInput) -> ProviderFuture<'_, ReleaseOutcome> {
        let ids: Vec<String> = input
            .machines
            .iter()
            .map(|m| m.machine_id.clone())
            .collect();
        self.record(format!("release {}", ids.join(",")));
        self.machine_records.lock().unwrap().push(
            input
                .machines
                .iter()
                .map(|m| (m.machine_id.clone(), (*m.request_provider_data).clone()))
                .collect(),
        );
        let failed = self.release_failures.lock().unwrap().clone();
        let error = self.release_error.lock().unwrap().take();
        let also_released = std::mem::take(&mut *self.also_released.lock().unwrap());
        let ended = std::mem::take(&mut *self.ended.lock().unwrap());
        let writer = self.release_writer.lock().unwrap().take();
        Box::pin(async move {
            if let Some((store, id)) = writer {
                let mut m = store.find_machines(&[id]).await.unwrap().remove(0);
                let mut acquire = store.get_request(&m.request_id).await.unwrap().unwrap();
                m.status_reason = Some("read meanwhile".into());
                store.update_request(&mut acquire, &mut [m]).await.unwrap();
            }
            if let Some(error) = error {
                return Err(error);
            }
            Ok(ReleaseOutcome {
                released: ids,
                failed,
                also_released,
                ended,
                provider_data: serde_json::Value::Null,
                message: None,
            })
        })
    }

    fn abandon_release(&self, input: AbandonInput) -> ProviderFuture<'_, ()> {
        let ids: Vec<String> = input
            .machines
            .iter()
            .map(|m| m.machine_id.clone())
            .collect();
        self.record(format!("abandon {}", ids.join(",")));
        Box::pin(async { Ok(()) })
    }

    fn status(&self, input: StatusInput) -> ProviderFuture<'_, StatusReport> {
        self.record(format!("status {}", input.request_id));
        self.machine_records.lock().unwrap().push(
            input
                .machines
                .iter()
                .map(|m| (m.machine_id.clone(), m.request_provider_data.clone()))
                .collect(),
        );
        let next = self.statuses.lock().unwrap().pop_front();
        let writer = self.status_writer.lock().unwrap().take();
        Box::pin(async move {
            if let Some(store) = writer {
                write_meanwhile(&store, &input.request_id, "read by another process").await;
            }
            next.unwrap_or_else(|| Ok(report(Verdict::InProgress, &[])))
        })
    }

    fn read_ahead(
        &self,
        request_id: &orb_core::ids::RequestId,
        request_type: orb_core::request::RequestType,
        _provider_data: &serde_json::Value,
    ) -> Option<ReadAheadFuture<'_>> {
        let mode = (*self.read_ahead.lock().unwrap())
            .filter(|_| request_type == orb_core::request::RequestType::Acquire)?;
        self.record(format!("read-ahead {request_id}"));
        let request_id = request_id.to_string();
        Some(match mode {
            ReadAheadMode::Finish => {
                Box::pin(async move { ReadAhead::new(format!("read ahead for {request_id}")) })
            }
            ReadAheadMode::Never => {
                let guard = DroppedUnfinished {
                    calls: &self.calls,
                    request_id,
                };
                Box::pin(async move {
                    let _dropped_with_the_read = guard;
                    std::future::pending::<ReadAhead>().await
                })
            }
        })
    }

    fn status_after(
        &self,
        input: StatusInput,
        ahead: Option<ReadAhead>,
    ) -> ProviderFuture<'_, StatusReport> {
        if let Some(read) = ahead.and_then(ReadAhead::take::<String>) {
            self.record(format!("status {} with {read}", input.request_id));
        }
        self.status(input)
    }

    fn cancel(&self, input: CancelInput) -> ProviderFuture<'_, CancelOutcome> {
        // The first cancel of a request deletes its pods; later ones find nothing left.
        let first = !self
            .calls()
            .contains(&format!("cancel {}", input.request_id));
        self.record(format!("cancel {}", input.request_id));
        let names: Vec<String> = input.provider_data["pod_names"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let writer = self.cancel_writer.lock().unwrap().take();
        let gate = self.cancel_gate.lock().unwrap().take();
        Box::pin(async move {
            if let Some(store) = writer {
                write_meanwhile(&store, &input.request_id, "refreshed meanwhile").await;
            }
            if let Some((started, release)) = gate {
                let _ = started.send(());
                let _ = release.await;
            }
            Ok(CancelOutcome {
                deleted: if first { names } else { Vec::new() },
                ..Default::default()
            })
        })
    }

    fn check_acquire(
        &self,
        _template: &orb_core::template::Template,
        _count: u32,
    ) -> Result<Vec<String>, ProviderError> {
        if let Some(delay) = *self.preflight_delay.lock().unwrap() {
            std::thread::sleep(delay);
        }
        match self.preflight_error.lock().unwrap().clone() {
            Some(error) => Err(error),
            None => Ok(Vec::new()),
        }
    }

    fn reclaims(&self, input: ReclaimQuery) -> ProviderFuture<'_, Vec<ReclaimNotice>> {
        let asked: Vec<String> = input
            .machines
            .iter()
            .map(|m| m.machine_id.clone())
            .collect();
        self.record(format!("reclaims {}", asked.join(",")));
        let notices = self.notices.lock().unwrap().clone();
        Box::pin(async move {
            Ok(notices
                .into_iter()
                .filter(|n| asked.contains(&n.machine_id))
                .collect())
        })
    }
}
