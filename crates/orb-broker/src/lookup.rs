//! The use cases that take ids as users type them: the status of several requests at once,
//! and a return of machines named by id or host name. Every door (CLI, HostFactory, REST)
//! calls these instead of parsing ids and building machine keys itself.

use orb_core::ids::RequestId;
use orb_store::{MachineFilter, SameThreadReader};

use crate::status::answered_from_storage;
use crate::{Broker, BrokerError, MachineKey, RequestView, UnknownNames};

/// What a status call found for one id.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The request, refreshed from the provider when unfinished.
    Found(Box<RequestView>),
    /// No such request (or not a request id at all), with the id as given.
    Unknown(String),
}

impl Broker {
    /// Where each request in `raw_ids` stands now, in the order given; unfinished ones are
    /// refreshed from the provider. Ids that are not request ids are [`Lookup::Unknown`].
    pub async fn statuses(&self, raw_ids: &[String]) -> Result<Vec<Lookup>, BrokerError> {
        let mut found = Vec::with_capacity(raw_ids.len());
        for raw in raw_ids {
            let view = match RequestId::parse(raw) {
                Ok(id) => self.refresh(&id).await?,
                Err(_) => None,
            };
            found.push(match view {
                Some(view) => Lookup::Found(Box::new(view)),
                None => Lookup::Unknown(raw.clone()),
            });
        }
        Ok(found)
    }

    /// Returns the machines `names` name, each by machine id or host name; a name that is no
    /// machine refuses the whole return (nothing is returned).
    pub async fn return_named(&self, names: &[String]) -> Result<RequestView, BrokerError> {
        let keys: Vec<MachineKey> = names.iter().map(MachineKey::id_or_name).collect();
        self.return_machines(&keys, UnknownNames::Refuse).await
    }
}

/// What [`Broker::statuses`] finds for `raw_ids`, read by a process that answers this one call
/// and no broker: `Some` only when every request named is answered from storage alone
/// ([`answered_from_storage`]: finished, recorded, nothing it holds can change) or unknown,
/// and then exactly the same lookups. `None` when one must be asked of the provider, or the
/// reader could not read one (a broker's store then reads it, or says what is wrong).
pub fn settled_statuses(reader: &SameThreadReader, raw_ids: &[String]) -> Option<Vec<Lookup>> {
    let mut found = Vec::with_capacity(raw_ids.len());
    for raw in raw_ids {
        let Ok(id) = RequestId::parse(raw) else {
            found.push(Lookup::Unknown(raw.clone()));
            continue;
        };
        let Some(request) = reader.get_request(&id).ok()? else {
            found.push(Lookup::Unknown(raw.clone()));
            continue;
        };
        let machines = reader
            .request_machines(&MachineFilter::of_request(&request))
            .ok()?;
        if !answered_from_storage(&request, &machines) {
            return None;
        }
        found.push(Lookup::Found(Box::new(RequestView {
            request,
            machines: machines.into(),
            note: None,
        })));
    }
    Some(found)
}
