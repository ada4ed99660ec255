//! Resuming a return that orb stopped in the middle of: killed between storing the return and
//! storing the provider's answer, or cut off by a cluster that stopped answering while it
//! released. Releasing is idempotent (deletes by name, a Deployment scaled to a target it
//! records on the object), so asking the provider again for the same machines converges. The
//! releasing process holds the return's claim; a return with nothing recorded whose claim is
//! free is resumed at once by the next process that looks at it, until its deadline.

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent, Verdict};
use orb_core::machine::{Machine, MachineStatus};
use orb_core::request::{Request, RequestType};

use super::release::interrupted_release_message;
use super::resume::nothing_recorded;
use super::{Broker, BrokerError, RequestView};

/// An unfinished return with no provider answer stored: still releasing in some process, or
/// interrupted (then its claim is free).
pub fn is_unrecorded_return(request: &Request) -> bool {
    request.request_type == RequestType::Return
        && !request.status.is_terminal()
        && nothing_recorded(request)
}

impl Broker {
    /// This provider's returns that have not ended: the background pass resumes the
    /// interrupted ones among them.
    pub async fn unfinished_returns(&self) -> Result<Vec<Request>, orb_store::StoreError> {
        self.unfinished(RequestType::Return).await
    }

    /// Finishes an interrupted return: takes its claim, asks the provider again to release
    /// the machines it holds and stores the answer. Past its deadline it ends failed instead
    /// and frees its machines. Returns `None` when the request is not an unfinished return
    /// with nothing recorded, or when a live process holds its claim (it is releasing now).
    pub async fn resume_interrupted_return(
        &self,
        request_id: &RequestId,
    ) -> Result<Option<RequestView>, BrokerError> {
        let Some(_claim) = self.store.try_claim(request_id).await? else {
            return Ok(None);
        };
        // Read again under the claim: the releaser may have finished just before it let go.
        let Some(mut request) = self.store.get_request(request_id).await? else {
            return Ok(None);
        };
        if !is_unrecorded_return(&request) {
            return Ok(None);
        }
        let mut machines = self.machines_of(&request).await?;
        let now = self.now();
        if request.deadline_at.is_some_and(|d| d <= now) {
            let why = request
                .status_message
                .clone()
                .unwrap_or_else(|| "orb stopped during the release".into());
            let reason = format!(
                "the release did not get through before the return's deadline ({why}); the \
                 machines still there are free to be returned again"
            );
            lifecycle::apply(&mut request, LifecycleEvent::Fail { reason }, now)?;
            self.give_up_return(&request, &mut machines).await;
            return self.store_return(request, machines).await.map(Some);
        }
        let to_release: Vec<Machine> = machines
            .iter()
            .filter(|m| m.status != MachineStatus::Returned)
            .cloned()
            .collect();
        if to_release.is_empty() {
            lifecycle::apply(
                &mut request,
                LifecycleEvent::ProviderVerdict {
                    verdict: Verdict::Fulfilled,
                    fulfilled: machines.len() as u32,
                    failed: 0,
                    message: Some("every named machine was already gone".into()),
                },
                now,
            )?;
            return self.store_return(request, machines).await.map(Some);
        }
        match self.provider.get() {
            Ok(provider) => self
                .release_and_record(request, machines, provider, &to_release)
                .await
                .map(Some),
            Err(e) => {
                request.status_message = Some(interrupted_release_message(&e.to_string()));
                self.store_return(request, machines).await.map(Some)
            }
        }
    }

    async fn store_return(
        &self,
        mut request: Request,
        mut machines: Vec<Machine>,
    ) -> Result<RequestView, BrokerError> {
        self.store
            .update_request(&mut request, &mut machines)
            .await?;
        Ok(RequestView {
            request,
            machines: machines.into(),
            note: None,
        })
    }
}
