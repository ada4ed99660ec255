//! Acquire: check everything, then store the request, then create machines.

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent};
use orb_core::provider::AcquireInput;
use orb_core::request::{Request, RequestType};
use orb_core::template::TemplateError;
use orb_store::{StoreError, TemplateLimit};

/// Tries to store an acquire's outcome when concurrent status reads keep changing the request.
const RECORD_ATTEMPTS: usize = 5;

use super::resume::record_acquire_outcome;
use super::{Broker, BrokerError, RequestView};

impl Broker {
    /// Requests `count` machines of `template_id`. Every limit is checked before anything is
    /// stored or created; once stored, the request id is always returned, with the failure in
    /// its status if the provider failed.
    pub async fn request_machines(
        &self,
        template_id: &str,
        count: u32,
    ) -> Result<RequestView, BrokerError> {
        let catalog = self.catalog.current();
        let template = catalog.lookup(template_id)?.clone();
        let problems = template.problems();
        if !problems.is_empty() {
            return Err(BrokerError::InvalidTemplate(TemplateError::Invalid {
                template_id: template.template_id.clone(),
                problems,
            }));
        }
        let max = template.max_machines_or(self.settings.default_max_machines);
        self.check_count(&template.template_id, max, count).await?;
        let provider = self.provider.get()?;
        // The provider's own pre-flight (effective config, namespace, bodies, audit): a
        // template it refuses leaves no failed request behind.
        // On the blocking pool: planning renders the template's Jinja (see templates.rs).
        let check = (provider.clone(), template.clone());
        tokio::task::spawn_blocking(move || check.0.check_acquire(&check.1, count))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;

        let now = self.now();
        let mut request = Request::new(
            RequestId::new_acquire(),
            RequestType::Acquire,
            Some(template.template_id.clone()),
            &self.settings.provider_name,
            &self.settings.provider_type,
            count,
            now,
        );
        request.provider_api = Some(template.api());
        lifecycle::apply(
            &mut request,
            LifecycleEvent::Start {
                grace_secs: self.settings.grace_secs,
            },
            now,
        )?;
        // Held while the objects are created and recorded: a process that finds this acquire
        // unrecorded and the claim free knows nobody works on it any more, and resumes it.
        let _claim = self.store.try_claim(&request.request_id).await?;
        // maxNumber is checked again where it counts: in the transaction that stores the
        // request, which concurrent acquires of the template cannot interleave with.
        let limit = (max >= 0).then(|| TemplateLimit {
            template_id: template.template_id.clone(),
            max,
        });
        match self
            .store
            .insert_acquire(&mut request, limit.as_ref())
            .await
        {
            Err(e @ StoreError::LimitExceeded { .. }) => {
                return Err(BrokerError::CountRejected(e.to_string()));
            }
            other => other?,
        }

        let outcome = provider
            .acquire(AcquireInput {
                request_id: request.request_id.clone(),
                template,
                count,
            })
            .await;
        // A status poll (a caller's, or the daemon's timeout GC) may store the request while
        // the provider creates its objects; the outcome is then recorded on the fresh copy,
        // so a created request is never reported as a conflict.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut fresh = request.clone();
            let mut machines = record_acquire_outcome(&mut fresh, outcome.clone(), self.now())?;
            match self.store.update_request(&mut fresh, &mut machines).await {
                Ok(()) => {
                    return Ok(RequestView {
                        request: fresh,
                        machines: machines.into(),
                        note: None,
                    });
                }
                Err(StoreError::Conflict { .. }) if attempt < RECORD_ATTEMPTS => {
                    request = self
                        .store
                        .get_request(&request.request_id)
                        .await?
                        .ok_or_else(|| {
                            BrokerError::UnknownRequest(request.request_id.to_string())
                        })?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn check_count(
        &self,
        template_id: &str,
        max: i64,
        count: u32,
    ) -> Result<(), BrokerError> {
        if count == 0 {
            return Err(BrokerError::CountRejected(
                "machine count must be at least 1; ask for one or more machines".into(),
            ));
        }
        let per_request = self.settings.max_machines_per_request;
        if count > per_request {
            return Err(BrokerError::CountRejected(format!(
                "{count} machines is more than request.max_machines_per_request ({per_request}); \
                 split the request or raise the limit in config.json"
            )));
        }
        if max < 0 {
            return Ok(());
        }
        // A first look outside the lock, so an obvious refusal needs no provider; the
        // authoritative check is in the store write.
        let usage = self.store.template_usage(template_id).await?;
        let available = (max - usage.in_use()).max(0);
        if i64::from(count) > available {
            return Err(BrokerError::CountRejected(
                StoreError::LimitExceeded {
                    template_id: template_id.to_string(),
                    max,
                    live: usage.live,
                    reserved: usage.reserved,
                    requested: i64::from(count),
                }
                .to_string(),
            ));
        }
        Ok(())
    }
}
