//! Resuming an acquire that orb stopped in the middle of: killed between storing the request
//! and storing the provider's answer, or cut off by a cluster that stopped answering while it
//! created. Creating is idempotent — names are deterministic and a create that finds its own
//! object adopts it — so running the provider's acquire again for the same request id creates
//! only what is missing and records it all. Whoever creates holds the request's claim
//! (orb-store); an acquire with nothing recorded whose claim is free has nobody working on it
//! and is resumed at once by the next process that looks at it. A resume moves the deadline to
//! a whole grace period from then: what it creates is judged as any acquire's machines are.

use jiff::Timestamp;
use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::machine::Machine;
use orb_core::provider::{AcquireInput, AcquireOutcome, ProviderError};
use orb_core::request::{Request, RequestType};

use super::observe::new_machine;
use super::{Broker, BrokerError, RequestView};

/// Folds the provider's answer to an acquire into the request; returns the new machines.
pub(super) fn record_acquire_outcome(
    request: &mut Request,
    outcome: Result<AcquireOutcome, ProviderError>,
    now: Timestamp,
) -> Result<Vec<Machine>, BrokerError> {
    let mut machines = Vec::new();
    match outcome {
        Ok(outcome) => {
            request.resource_ids = outcome.resource_ids.into();
            request.provider_data = outcome.provider_data.into();
            if outcome.message.is_some() {
                request.status_message = outcome.message;
            }
            machines = outcome
                .machines
                .iter()
                .map(|obs| new_machine(obs, request, now))
                .collect();
        }
        // The cluster did not answer: whatever was created stays, and the acquire is resumed
        // (its creates are idempotent) when it answers again. It is not judged meanwhile.
        Err(ProviderError::Interrupted(why)) => {
            request.status_message = Some(format!(
                "the cluster did not answer while creating the machines ({why}); orb resumes \
                 this acquire when it answers again"
            ));
        }
        Err(err) => {
            lifecycle::apply(
                request,
                LifecycleEvent::Fail {
                    reason: err.to_string(),
                },
                now,
            )?;
        }
    }
    Ok(machines)
}

/// An unfinished acquire with no provider answer stored: still creating in some process, or
/// interrupted (then its claim is free).
pub fn is_unrecorded_acquire(request: &Request, machine_count: usize) -> bool {
    request.request_type == RequestType::Acquire
        && !request.status.is_terminal()
        && nothing_recorded(request)
        && machine_count == 0
}

/// No provider answer was stored: the bookkeeping is still the empty value the request was
/// created with.
pub fn nothing_recorded(request: &Request) -> bool {
    is_empty_data(&request.provider_data) && request.resource_ids.is_empty()
}

/// Provider bookkeeping that says nothing: null or `{}`.
pub(super) fn is_empty_data(data: &serde_json::Value) -> bool {
    match data {
        serde_json::Value::Null => true,
        serde_json::Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

impl Broker {
    /// [`is_unrecorded_acquire`] of a stored request, its machines read only when the row
    /// leaves it open (nothing recorded). `orb serve` settles at start-up, beside its watch
    /// cache's first LIST: reading every machine of 1,000 unfinished requests of 50 first was
    /// a quarter of its CPU while that LIST ran (50,000 pods, 2 cores).
    pub(crate) async fn is_unrecorded_stored_acquire(
        &self,
        request: &Request,
    ) -> Result<bool, BrokerError> {
        if !nothing_recorded(request) {
            return Ok(false);
        }
        Ok(is_unrecorded_acquire(
            request,
            self.machines_of(request).await?.len(),
        ))
    }

    /// This provider's acquires that have not ended (one store may serve several providers;
    /// each looks after its own): the requests the background passes settle and refresh.
    pub async fn unfinished_acquires(&self) -> Result<Vec<Request>, orb_store::StoreError> {
        self.unfinished(RequestType::Acquire).await
    }

    /// This provider's requests of `request_type` that have not ended.
    pub(super) async fn unfinished(
        &self,
        request_type: RequestType,
    ) -> Result<Vec<Request>, orb_store::StoreError> {
        let requests = self
            .store
            .list_requests(&orb_store::RequestFilter {
                request_type: Some(request_type),
                statuses: orb_core::request::RequestStatus::UNFINISHED.to_vec(),
                ..Default::default()
            })
            .await?;
        Ok(requests
            .into_iter()
            .filter(|r| r.provider_name == self.settings.provider_name)
            .collect())
    }

    /// Finishes an interrupted acquire: takes its claim (nobody else is creating it), runs the
    /// provider's acquire again under the same request id and stores its answer, or fails the
    /// request with the reason when that is impossible (its template is gone). Returns `None`
    /// when the request is not an unfinished acquire with nothing recorded, or when a live
    /// process still holds its claim (it is creating right now).
    pub async fn resume_interrupted_acquire(
        &self,
        request_id: &RequestId,
    ) -> Result<Option<RequestView>, BrokerError> {
        let Some(_claim) = self.store.try_claim(request_id).await? else {
            return Ok(None);
        };
        // Read again under the claim: the creator may have finished just before it let go.
        let Some(mut request) = self.store.get_request(request_id).await? else {
            return Ok(None);
        };
        if !self.is_unrecorded_stored_acquire(&request).await? {
            return Ok(None);
        }
        let template = request
            .template_id
            .as_deref()
            .and_then(|id| self.catalog.current().get(id).cloned());
        let mut machines = match template {
            None => {
                let reason = format!(
                    "orb stopped during this acquire and its template {:?} is no longer \
                     defined, so it cannot be resumed; request the machines again (`orb \
                     requests cancel {request_id}` deletes what it had created)",
                    request.template_id.as_deref().unwrap_or("")
                );
                lifecycle::apply(&mut request, LifecycleEvent::Fail { reason }, self.now())?;
                Vec::new()
            }
            Some(template) => {
                // The resumed creates get the time any acquire gets: a read long after orb
                // stopped must judge what the resume delivers, not the time nobody created.
                lifecycle::apply(
                    &mut request,
                    LifecycleEvent::Resume {
                        grace_secs: self.settings.grace_secs,
                    },
                    self.now(),
                )?;
                let outcome = match self.provider.get() {
                    Ok(provider) => {
                        provider
                            .acquire(AcquireInput {
                                request_id: request.request_id.clone(),
                                template,
                                count: request.requested_count,
                            })
                            .await
                    }
                    Err(e) => Err(e),
                };
                record_acquire_outcome(&mut request, outcome, self.now())?
            }
        };
        self.store
            .update_request(&mut request, &mut machines)
            .await?;
        Ok(Some(RequestView {
            request,
            machines: machines.into(),
            note: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::request::RequestStatus;
    use orb_core::test_support;
    use rstest::rstest;

    #[rstest]
    #[case::nothing_recorded(RequestStatus::InProgress, true, 0, true)]
    #[case::pending(RequestStatus::Pending, true, 0, true)]
    #[case::recorded(RequestStatus::InProgress, false, 0, false)]
    #[case::has_machines(RequestStatus::InProgress, true, 2, false)]
    #[case::finished(RequestStatus::Failed, true, 0, false)]
    fn an_acquire_is_unrecorded_until_the_provider_answer_is_stored(
        #[case] status: RequestStatus,
        #[case] no_data: bool,
        #[case] machines: usize,
        #[case] expected: bool,
    ) {
        let mut r = test_support::request(RequestType::Acquire)
            .template("t")
            .provider("k", "k8s")
            .status(status);
        if !no_data {
            r = r.provider_data(serde_json::json!({"namespace": "batch"}));
        }
        let r = r.build();
        assert_eq!(is_unrecorded_acquire(&r, machines), expected);
    }
}
