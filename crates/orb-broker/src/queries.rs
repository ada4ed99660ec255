//! Reads of what is stored, without asking the provider: the listings every door shows.

use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_core::request::Request;
use orb_store::{EventFilter, MachineFilter, RequestEvent, RequestFilter};

use crate::{Broker, BrokerError, RequestView};

impl Broker {
    /// Stored requests matching `filter`, newest first.
    pub async fn list_requests(&self, filter: &RequestFilter) -> Result<Vec<Request>, BrokerError> {
        Ok(self.store.list_requests(filter).await?)
    }

    /// Stored machines matching `filter`.
    pub async fn list_machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>, BrokerError> {
        Ok(self.store.list_machines(filter).await?)
    }

    /// A request with its history, oldest event first; `None` when there is no such
    /// request. A request stored before orb kept histories has none.
    pub async fn timeline(
        &self,
        id: &RequestId,
    ) -> Result<Option<(Request, Vec<RequestEvent>)>, BrokerError> {
        let Some(request) = self.store.get_request(id).await? else {
            return Ok(None);
        };
        let events = self.store.request_events(id).await?;
        Ok(Some((request, events)))
    }

    /// The number of the newest event (0 when there is none).
    pub async fn last_event_seq(&self) -> Result<i64, BrokerError> {
        Ok(self.store.last_event_seq().await?)
    }

    /// Events of every request matching `filter`, oldest first.
    pub async fn events(&self, filter: &EventFilter) -> Result<Vec<RequestEvent>, BrokerError> {
        Ok(self.store.events(filter).await?)
    }

    /// A request and its machines as last stored (the provider is not asked); `None` when
    /// there is no such request.
    pub async fn stored_view(&self, id: &RequestId) -> Result<Option<RequestView>, BrokerError> {
        let Some(request) = self.store.get_request(id).await? else {
            return Ok(None);
        };
        let machines = self.machines_of(&request).await?;
        Ok(Some(RequestView {
            request,
            machines: machines.into(),
            note: None,
        }))
    }
}
