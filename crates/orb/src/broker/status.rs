//! Status: read a request, ask the provider how its machines are doing, let the lifecycle
//! decide, and store the result if anything changed.

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::machine::Machine;
use orb_core::provider::StatusInput;
use orb_core::request::{Request, RequestType};
use orb_store::{MachineFilter, StoreError};

use super::observe::machine_from_observation;
use super::{Broker, BrokerError, RequestView};

/// Concurrent pollers may race; a conflicting write is retried on fresh data this many times.
const CONFLICT_RETRIES: usize = 3;

impl Broker {
    pub async fn machines_of(&self, request: &Request) -> Result<Vec<Machine>, BrokerError> {
        let filter = match request.request_type {
            RequestType::Acquire => MachineFilter {
                request_id: Some(request.request_id.clone()),
                ..Default::default()
            },
            RequestType::Return => MachineFilter {
                return_request_id: Some(request.request_id.clone()),
                ..Default::default()
            },
        };
        Ok(self.store.list_machines(&filter).await?)
    }

    /// The current state of a request; `None` if orb has no such request. Finished requests
    /// are answered from storage without asking the provider.
    pub async fn refresh(
        &self,
        request_id: &RequestId,
    ) -> Result<Option<RequestView>, BrokerError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.refresh_once(request_id).await {
                Err(BrokerError::Store(StoreError::Conflict { .. }))
                    if attempt < CONFLICT_RETRIES =>
                {
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn refresh_once(
        &self,
        request_id: &RequestId,
    ) -> Result<Option<RequestView>, BrokerError> {
        let Some(stored) = self.store.get_request(request_id).await? else {
            return Ok(None);
        };
        let stored_machines = self.machines_of(&stored).await?;
        if stored.status.is_terminal() {
            return Ok(Some(RequestView {
                request: stored,
                machines: stored_machines,
                note: None,
            }));
        }
        let mut request = stored.clone();
        let mut machines = stored_machines.clone();
        let mut note = None;
        match self.provider.get() {
            Err(err) => note = Some(format!("status not refreshed from the provider: {err}")),
            Ok(provider) => {
                let template = request
                    .template_id
                    .as_deref()
                    .and_then(|id| self.catalog.get(id))
                    .cloned();
                let input = StatusInput {
                    request_id: request.request_id.clone(),
                    request_type: request.request_type,
                    requested_count: request.requested_count,
                    provider_api: request.provider_api.clone(),
                    provider_data: request.provider_data.clone(),
                    template,
                    machines: self.machine_refs(&machines).await?,
                };
                match provider.status(input).await {
                    Err(err) => {
                        note = Some(format!("status not refreshed from the provider: {err}"))
                    }
                    Ok(report) => {
                        let now = self.now();
                        for observation in &report.machines {
                            let index = machines
                                .iter()
                                .position(|m| m.machine_id == observation.machine_id);
                            match (index, request.request_type) {
                                (Some(i), _) => {
                                    machines[i] = machine_from_observation(
                                        observation,
                                        &request,
                                        Some(&machines[i]),
                                        now,
                                    );
                                }
                                (None, RequestType::Acquire) => {
                                    machines.push(machine_from_observation(
                                        observation,
                                        &request,
                                        None,
                                        now,
                                    ));
                                }
                                // A return only tracks the machines it was given.
                                (None, RequestType::Return) => {}
                            }
                        }
                        lifecycle::apply(
                            &mut request,
                            LifecycleEvent::ProviderVerdict {
                                verdict: report.verdict,
                                fulfilled: report.fulfilled,
                                failed: report.failed,
                                message: report.message,
                            },
                            now,
                        )?;
                    }
                }
            }
        }
        if note.is_some() {
            lifecycle::apply(&mut request, LifecycleEvent::DeadlineSweep, self.now())?;
        }
        let mut changed: Vec<Machine> = machines
            .iter()
            .filter(|m| !stored_machines.contains(m))
            .cloned()
            .collect();
        if request != stored || !changed.is_empty() {
            self.store
                .update_request(&mut request, &mut changed)
                .await?;
            for updated in changed {
                if let Some(slot) = machines
                    .iter_mut()
                    .find(|m| m.machine_id == updated.machine_id)
                {
                    *slot = updated;
                }
            }
        }
        Ok(Some(RequestView {
            request,
            machines,
            note,
        }))
    }
}
