//! What a long-running process (`orb serve`) does with the broker when nobody asks: settle
//! the acquires and returns a killed process left half done, and refresh the requests whose
//! machines may have changed. The loops that call these, and leadership, live with the
//! daemon; the choice of what to settle and what to refresh lives here.

use std::collections::BTreeMap;
use std::time::Duration;

use orb_core::ids::RequestId;
use orb_core::machine::Machine;
use orb_core::request::Request;

use crate::{Broker, BrokerError, is_unrecorded_return};

impl Broker {
    /// Resumes acquires that stopped between storing the request and storing the provider's
    /// answer and that no live process works on any more (their claim is free), or fails them
    /// with the reason. Returns one line per request.
    pub async fn settle_interrupted_acquires(&self) -> Vec<String> {
        let unfinished = match self.unfinished_acquires().await {
            Ok(requests) => requests,
            Err(e) => return vec![format!("unfinished acquires not listed: {e}")],
        };
        let mut lines = Vec::new();
        for request in unfinished {
            if !matches!(self.is_unrecorded_stored_acquire(&request).await, Ok(true)) {
                continue;
            }
            let id = request.request_id.clone();
            let line = match self.resume_interrupted_acquire(&id).await {
                Ok(Some(view)) => format!(
                    "{id} resumed: {} ({} machines recorded)",
                    view.request.status,
                    view.machines.len()
                ),
                Ok(None) => continue,
                Err(e) => format!("{id} not resumed: {e}"),
            };
            tracing::info!("interrupted acquire {line}");
            lines.push(line);
        }
        lines
    }

    /// Resumes returns whose release the cluster cut off or whose process died before
    /// recording it, when no live process works on them (their claim is free); past its
    /// deadline such a return ends failed and frees its machines. Returns one line per
    /// request.
    pub async fn settle_interrupted_returns(&self) -> Vec<String> {
        let unfinished = match self.unfinished_returns().await {
            Ok(requests) => requests,
            Err(e) => return vec![format!("unfinished returns not listed: {e}")],
        };
        let mut lines = Vec::new();
        for request in unfinished.into_iter().filter(is_unrecorded_return) {
            let id = request.request_id.clone();
            let line = match self.resume_interrupted_return(&id).await {
                Ok(Some(view)) if is_unrecorded_return(&view.request) => {
                    format!(
                        "{id} still cut off: {}",
                        view.request.status_message.unwrap_or_default()
                    )
                }
                Ok(Some(view)) => format!("{id} resumed: {}", view.request.status),
                Ok(None) => continue,
                Err(e) => format!("{id} not resumed: {e}"),
            };
            tracing::info!("interrupted return {line}");
            lines.push(line);
        }
        lines
    }

    /// Both settlements, acquires first; one line per request touched.
    pub async fn settle_interrupted(&self) -> Vec<String> {
        let mut lines = self.settle_interrupted_acquires().await;
        lines.extend(self.settle_interrupted_returns().await);
        lines
    }

    /// Refreshes every unfinished acquire and return once (the status path applies
    /// `pod_timeout_seconds` and releases timed-out machines; a return completes once its
    /// machines are gone), after settling interrupted ones, and every finished acquire that
    /// still has a live machine (one that fails or disappears later is recorded even if
    /// nobody asks). A request a client has read within `skip_within` was refreshed by that
    /// read and is left alone: HostFactory polls its requests constantly, and refreshing 200
    /// of them again cost reads 600 ms of CPU on two cores (bench `daemon_status`).
    pub async fn refresh_pass(&self, skip_within: Duration) {
        self.settle_interrupted().await;
        let unfinished = match self.unfinished_acquires().await {
            Ok(requests) => requests,
            Err(e) => {
                tracing::warn!("timeout GC: unfinished acquires not listed: {e}");
                return;
            }
        };
        self.retain_refreshed(&unfinished.iter().map(|r| &r.request_id).collect());
        let mut ids: Vec<RequestId> = unfinished.into_iter().map(|r| r.request_id).collect();
        match self.unfinished_returns().await {
            Ok(returns) => ids.extend(returns.into_iter().map(|r| r.request_id)),
            Err(e) => tracing::warn!("timeout GC: unfinished returns not listed: {e}"),
        }
        match self.store.requests_with_live_machines().await {
            Ok(followed) => {
                for id in followed {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
            Err(e) => tracing::warn!("requests with live machines not listed: {e}"),
        }
        for id in ids
            .into_iter()
            .filter(|id| !self.refreshed_within(id, skip_within))
        {
            self.refresh_own(&id, "timeout GC").await;
        }
    }

    /// Refreshes one request if it belongs to this broker's provider; a failure is logged
    /// with `chore` (who asked) instead of returned.
    pub async fn refresh_own(&self, id: &RequestId, chore: &str) {
        match self.store.get_request(id).await {
            Ok(Some(r)) if r.provider_name == self.settings.provider_name => {}
            Ok(_) => return,
            Err(e) => {
                tracing::warn!("{chore}: request {id} not read: {e}");
                return;
            }
        }
        if let Err(e) = self.refresh(id).await {
            tracing::warn!("{chore}: request {id} not refreshed: {e}");
        }
    }

    /// The stored requests among `ids` (raw ids, as a cluster object's labels carry them), as
    /// reconciliation and the orphan GC judge objects by them, keyed by the raw id: a finished
    /// request with its machines (which of its objects are still needed depends on them), an
    /// unfinished one with none (every object it labels is its own). An id that is no request
    /// id, or names no stored request, is left out.
    pub async fn stored_requests_for_gc(
        &self,
        ids: impl IntoIterator<Item = String>,
    ) -> Result<BTreeMap<String, (Request, Vec<Machine>)>, BrokerError> {
        let mut found = BTreeMap::new();
        for raw in ids {
            let Ok(id) = RequestId::parse(&raw) else {
                continue;
            };
            if let Some(request) = self.store.get_request(&id).await? {
                let machines = if request.status.is_terminal() {
                    self.machines_of(&request).await?
                } else {
                    Vec::new()
                };
                found.insert(raw, (request, machines));
            }
        }
        Ok(found)
    }
}
