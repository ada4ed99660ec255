//! Reads of what is stored, without asking the provider: the listings every door shows.

use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_core::request::Request;
use orb_store::{MachineFilter, RequestFilter};

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

    /// A request and its machines as last stored (the provider is not asked); `None` when
    /// there is no such request.
    pub async fn stored_view(&self, id: &RequestId) -> Result<Option<RequestView>, BrokerError> {
        let Some(request) = self.store.get_request(id).await? else {
            return Ok(None);
        };
        let machines = self.machines_of(&request).await?;
        Ok(Some(RequestView {
            request,
            machines,
            note: None,
        }))
    }
}
