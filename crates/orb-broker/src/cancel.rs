//! Cancel: delete everything an acquire created (every object labelled with its request id,
//! whatever the kind) and close the request. A finished acquire can be cancelled too while
//! anything of it is left in the cluster: its status stays, its machines go.

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::machine::MachineStatus;
use orb_core::provider::{CancelInput, CancelOutcome};
use orb_core::request::RequestType;
use orb_store::StoreError;

use super::status::CONFLICT_RETRIES;
use super::{Broker, BrokerError, RequestView};

impl Broker {
    pub async fn cancel(&self, request_id: &RequestId) -> Result<RequestView, BrokerError> {
        let Some(request) = self.store.get_request(request_id).await? else {
            return Err(BrokerError::UnknownRequest(request_id.to_string()));
        };
        if request.request_type == RequestType::Return {
            return Err(BrokerError::NotAllowed(format!(
                "{request_id} is a return request; returns cannot be cancelled (the machines are already going)"
            )));
        }
        let provider = self.provider.get()?;
        // While the deletes run, this process's refreshes (the follow loop, event streams)
        // answer from storage: they would see the cancel's own deletions as machines lost.
        let _mark = self.refreshed.cancelling(request_id);
        let outcome = provider
            .cancel(CancelInput {
                request_id: request.request_id.clone(),
                provider_api: request.provider_api,
                provider_data: serde_json::Value::clone(&request.provider_data),
            })
            .await?;
        // The deletes are done and are not repeated; only recording them is, on the row as it
        // now stands, when another writer (a refresh that began before the cancel, another
        // process) changed it meanwhile.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.record_cancel(request_id, &outcome).await {
                Err(BrokerError::Store(StoreError::Conflict { .. }))
                    if attempt < CONFLICT_RETRIES => {}
                other => return other,
            }
        }
    }

    /// Writes what a cancel did: every live machine whose object did not refuse the delete is
    /// terminated, and the request is cancelled (a finished one keeps its status and says
    /// what happened after it ended).
    async fn record_cancel(
        &self,
        request_id: &RequestId,
        outcome: &CancelOutcome,
    ) -> Result<RequestView, BrokerError> {
        let Some(mut request) = self.store.get_request(request_id).await? else {
            return Err(BrokerError::UnknownRequest(request_id.to_string()));
        };
        let now = self.now();
        let stored = self.machines_of(&request).await?;
        let mut machines = stored.clone();
        let finished = request.status.is_terminal();
        let had_live = machines.iter().any(|m| m.status.is_live());
        // Everything labelled with the request id was deleted, so every machine whose object
        // did not refuse the delete is gone or going.
        let refused: std::collections::HashSet<&str> = outcome
            .failed
            .iter()
            .map(|f| f.machine_id.as_str())
            .collect();
        for m in &mut machines {
            let kept = refused.contains(m.machine_id.as_str())
                || m.resource_id
                    .as_deref()
                    .is_some_and(|r| refused.contains(r));
            if !kept && m.status.is_live() {
                m.status = MachineStatus::Terminated;
                m.status_reason = Some("cancelled".into());
                m.updated_at = now;
            }
        }
        if finished && outcome.deleted.is_empty() && outcome.failed.is_empty() && !had_live {
            return Err(BrokerError::NotAllowed(format!(
                "request {request_id} is already {} and nothing of it is left in the cluster; \
                 there is nothing to cancel",
                request.status
            )));
        }
        let reason = if outcome.failed.is_empty() {
            format!(
                "Cancelled: deleted {}, already gone {}",
                outcome.deleted.len(),
                outcome.already_gone.len()
            )
        } else {
            format!(
                "Cancelled, but {} objects could not be deleted (first: {}: {}); delete them by hand",
                outcome.failed.len(),
                outcome.failed[0].machine_id,
                outcome.failed[0].reason
            )
        };
        if finished {
            // The status of a finished request stays; what happened is still written down.
            request.status_message = Some(match request.status_message.take() {
                Some(before) => format!("{before}; after it ended: {reason}"),
                None => format!("after it ended: {reason}"),
            });
            request.last_transition_at = now;
        } else {
            lifecycle::apply(&mut request, LifecycleEvent::Cancel { reason }, now)?;
        }
        let mut changed: Vec<_> = machines
            .iter()
            .filter(|m| !stored.contains(m))
            .cloned()
            .collect();
        self.store
            .update_request(&mut request, &mut changed)
            .await?;
        let machines = self.machines_of(&request).await?;
        Ok(RequestView {
            request,
            machines: machines.into(),
            note: None,
        })
    }
}
