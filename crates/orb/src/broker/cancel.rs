//! Cancel: delete what an acquire created and close the request.

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::machine::MachineStatus;
use orb_core::provider::CancelInput;
use orb_core::request::RequestType;

use super::{Broker, BrokerError, RequestView};

impl Broker {
    pub async fn cancel(&self, request_id: &RequestId) -> Result<RequestView, BrokerError> {
        let Some(mut request) = self.store.get_request(request_id).await? else {
            return Err(BrokerError::UnknownRequest(request_id.to_string()));
        };
        if request.request_type == RequestType::Return {
            return Err(BrokerError::NotAllowed(format!(
                "{request_id} is a return request; returns cannot be cancelled (the machines are already going)"
            )));
        }
        if request.status.is_terminal() {
            return Err(BrokerError::NotAllowed(format!(
                "request {request_id} is already {}; there is nothing to cancel",
                request.status
            )));
        }
        let provider = self.provider.get()?;
        let outcome = provider
            .cancel(CancelInput {
                request_id: request.request_id.clone(),
                provider_api: request.provider_api.clone(),
                provider_data: request.provider_data.clone(),
            })
            .await?;
        let now = self.now();
        let mut machines = self.machines_of(&request).await?;
        for m in &mut machines {
            let removed = outcome.deleted.contains(&m.machine_id)
                || outcome.already_gone.contains(&m.machine_id)
                || m.resource_id
                    .as_ref()
                    .is_some_and(|r| outcome.deleted.contains(r));
            if removed && m.status.is_live() {
                m.status = MachineStatus::Terminated;
                m.status_reason = Some("cancelled".into());
                m.updated_at = now;
            }
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
        lifecycle::apply(&mut request, LifecycleEvent::Cancel { reason }, now)?;
        let stored = self.machines_of(&request).await?;
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
            machines,
            note: None,
        })
    }
}
