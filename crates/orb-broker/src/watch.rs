//! Following one request until it finishes: the one polling loop behind the CLI's `--wait`,
//! the REST event stream (and, later, REST `?wait` and MCP). Each poll is a status call (the
//! provider is asked), polls start quick and back off to a ceiling while nothing changes, and
//! only a change of what a client can see is reported.

use std::time::Duration;

use orb_core::ids::RequestId;
use orb_core::machine::MachineStatus;
use orb_core::request::RequestStatus;

use crate::{Broker, BrokerError, RequestView};

/// How often a watch polls: `first` after a change (or at the start), doubling while nothing
/// changes, never more than `max` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub first: Duration,
    pub max: Duration,
}

impl Pace {
    /// Polls starting at a quarter of `max` (at least 100 ms) and backing off to `max`.
    pub fn up_to(max: Duration) -> Self {
        Self {
            first: (max / 4).max(Duration::from_millis(100)).min(max),
            max,
        }
    }
}

/// What a client can observe of a request; a change of any part is worth reporting.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    status: RequestStatus,
    fulfilled: u32,
    failed: u32,
    message: Option<String>,
    machines: Vec<(String, MachineStatus)>,
}

impl Seen {
    fn of(view: &RequestView) -> Self {
        Self {
            status: view.request.status,
            fulfilled: view.request.fulfilled_count,
            failed: view.request.failed_count,
            message: view.request.status_message.clone(),
            machines: view
                .machines
                .iter()
                .map(|m| (m.machine_id.clone(), m.status))
                .collect(),
        }
    }
}

/// A watch of one request. [`Watch::next`] returns each view that differs from the last one
/// returned, and `None` after the view that shows a terminal status (or after an error).
#[derive(Debug)]
pub struct Watch {
    id: RequestId,
    pace: Pace,
    delay: Duration,
    first: Option<RequestView>,
    last: Option<Seen>,
    done: bool,
}

impl Watch {
    /// Watches `id`; `first` is a view already read (returned at once, not read again).
    pub fn new(id: RequestId, pace: Pace, first: Option<RequestView>) -> Self {
        Self {
            id,
            pace,
            delay: pace.first,
            first,
            last: None,
            done: false,
        }
    }

    /// The next change, polling `broker` as long as nothing changes. A request that is gone
    /// ends the watch with [`BrokerError::UnknownRequest`].
    pub async fn next(&mut self, broker: &Broker) -> Option<Result<RequestView, BrokerError>> {
        if self.done {
            return None;
        }
        loop {
            let view = match self.first.take() {
                Some(view) => view,
                None => {
                    tokio::time::sleep(self.delay).await;
                    self.delay = (self.delay * 2).min(self.pace.max);
                    match broker.refresh(&self.id).await {
                        Ok(Some(view)) => view,
                        Ok(None) => {
                            return self.fail(BrokerError::UnknownRequest(self.id.to_string()));
                        }
                        Err(err) => return self.fail(err),
                    }
                }
            };
            let seen = Seen::of(&view);
            if self.last.as_ref() == Some(&seen) {
                continue;
            }
            self.last = Some(seen);
            self.delay = self.pace.first;
            self.done = view.request.status.is_terminal();
            return Some(Ok(view));
        }
    }

    fn fail(&mut self, err: BrokerError) -> Option<Result<RequestView, BrokerError>> {
        self.done = true;
        Some(Err(err))
    }
}

impl Broker {
    /// Follows `view`'s request until its status is terminal or `limit` has passed, calling
    /// `on_change` with each new view; returns the last view seen (not terminal when the
    /// limit passed first).
    pub async fn wait_for(
        &self,
        view: RequestView,
        pace: Pace,
        limit: Duration,
        mut on_change: impl FnMut(&RequestView),
    ) -> Result<RequestView, BrokerError> {
        let mut last = view.clone();
        let mut watch = Watch::new(view.request.request_id.clone(), pace, Some(view));
        let followed = tokio::time::timeout(limit, async {
            while let Some(next) = watch.next(self).await {
                last = next?;
                on_change(&last);
            }
            Ok::<(), BrokerError>(())
        })
        .await;
        if let Ok(result) = followed {
            result?;
        }
        Ok(last)
    }
}
