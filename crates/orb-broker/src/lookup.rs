//! The use cases that take ids as users type them: the status of several requests at once,
//! and a return of machines named by id or host name. Every door (CLI, HostFactory, REST)
//! calls these instead of parsing ids and building machine keys itself.

use orb_core::ids::RequestId;

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
