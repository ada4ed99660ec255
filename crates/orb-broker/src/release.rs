//! Return: resolve the named hosts, store the return with its machines in one write, then ask
//! the provider to release the live ones.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use orb_core::ids::RequestId;
use orb_core::lifecycle::{self, LifecycleEvent, Verdict};
use orb_core::machine::{Machine, MachineStatus};
use std::sync::Arc;

use orb_core::provider::{Provider, ProviderError, ReleaseInput};
use orb_core::request::{Request, RequestType};
use orb_store::MachineFilter;

use super::{Broker, BrokerError, RequestView};

/// How to treat names orb does not manage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownNames {
    /// Refuse the whole return (operator commands: a typo must not go unnoticed).
    Refuse,
    /// Return what is known and report the rest once as failed (HostFactory).
    ReportAsFailed,
}

/// One machine as a caller names it: by machine id, by host name, or both (HostFactory may
/// send both; the id is tried first). A name also matches a machine id, since users type
/// either.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineKey {
    pub machine_id: Option<String>,
    pub name: Option<String>,
}

impl MachineKey {
    /// The machine with this id.
    pub fn id(machine_id: impl Into<String>) -> Self {
        Self {
            machine_id: Some(machine_id.into()),
            name: None,
        }
    }

    /// The machine with this id or host name, as a user types either.
    pub fn id_or_name(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            machine_id: Some(text.clone()),
            name: Some(text),
        }
    }

    /// The text to show for this key.
    pub fn label(&self) -> &str {
        self.machine_id
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or("")
    }

    /// The store lookups this key needs (its id and its name).
    pub(crate) fn lookups(&self) -> impl Iterator<Item = &String> {
        self.machine_id.iter().chain(self.name.iter())
    }
}

/// The stored machines a return names, found by id or by name without a scan per key (a
/// return of thousands of one request's machines would otherwise be quadratic).
struct Found<'m> {
    by_id: HashMap<&'m str, &'m Machine>,
    by_name: HashMap<&'m str, &'m Machine>,
}

impl<'m> Found<'m> {
    fn new(found: &'m [Machine]) -> Self {
        let mut by_name = HashMap::with_capacity(found.len());
        for m in found {
            // The first machine of a name, as a scan in list order would find.
            by_name.entry(m.name.as_str()).or_insert(m);
        }
        Self {
            by_id: found.iter().map(|m| (m.machine_id.as_str(), m)).collect(),
            by_name,
        }
    }

    /// By id when the key has one; else by name, and a name that is some machine's id.
    fn resolve(&self, key: &MachineKey) -> Option<&'m Machine> {
        let by_id = key
            .machine_id
            .as_deref()
            .and_then(|id| self.by_id.get(id).copied());
        let by_name = || {
            key.name.as_deref().and_then(|name| {
                self.by_name
                    .get(name)
                    .or_else(|| self.by_id.get(name))
                    .copied()
            })
        };
        by_id.or_else(by_name)
    }
}

impl Broker {
    /// Returns every live machine of an acquire request.
    pub async fn return_request_machines(
        &self,
        request_id: &RequestId,
    ) -> Result<RequestView, BrokerError> {
        let Some(acquire) = self.store.get_request(request_id).await? else {
            return Err(BrokerError::UnknownRequest(request_id.to_string()));
        };
        if acquire.request_type != RequestType::Acquire {
            return Err(BrokerError::NotAllowed(format!(
                "{request_id} is a return request; pass the acquire request (req-…) whose machines should go back"
            )));
        }
        // Gone machines go too: the provider answers "already gone" for them, and whatever
        // of the request is still there (a failed Job's object) is removed with them.
        let machines: Vec<Machine> = self
            .store
            .list_machines(&MachineFilter {
                request_id: Some(request_id.clone()),
                not_returning: true,
                ..Default::default()
            })
            .await?
            .into_iter()
            .filter(|m| m.status != MachineStatus::Returned)
            .collect();
        if machines.is_empty() {
            return Err(BrokerError::UnknownMachines(format!(
                "request {request_id} has no machines that are not already being returned; \
                 `orb requests cancel {request_id}` deletes anything still labelled with it"
            )));
        }
        let keys: Vec<MachineKey> = machines
            .iter()
            .map(|m| MachineKey::id(m.machine_id.clone()))
            .collect();
        self.return_machines(&keys, UnknownNames::Refuse).await
    }

    pub async fn return_machines(
        &self,
        keys: &[MachineKey],
        unknown_names: UnknownNames,
    ) -> Result<RequestView, BrokerError> {
        let (mut chosen, mut unknown) = self.resolve(keys).await?;
        if !unknown.is_empty() && self.record_unpolled_acquires().await? {
            (chosen, unknown) = self.resolve(keys).await?;
        }
        if chosen.is_empty() || (unknown_names == UnknownNames::Refuse && !unknown.is_empty()) {
            return Err(BrokerError::UnknownMachines(format!(
                "orb does not manage {}: {}; `orb machines list` shows the machines it manages",
                if unknown.len() == 1 {
                    "this machine"
                } else {
                    "these machines"
                },
                unknown.join(", ")
            )));
        }
        let ended = self.ended_returns(chosen.values()).await?;
        let (busy, mut machines): (Vec<Machine>, Vec<Machine>) =
            chosen.into_values().partition(|m| {
                m.return_request_id
                    .as_ref()
                    .is_some_and(|r| !ended.contains(r))
            });
        let held: Vec<String> = busy
            .iter()
            .filter_map(|m| {
                let by = m.return_request_id.as_ref()?;
                Some(format!("{} (by {by})", m.machine_id))
            })
            .collect();
        if machines.is_empty() {
            return Err(BrokerError::NotAllowed(format!(
                "already being returned: {}; poll those return requests instead",
                held.join(", ")
            )));
        }
        // Every named machine orb has not seen returned goes to the provider, gone ones
        // included: it removes what is still there (a pod that exited, the Job of a lost
        // host) and answers "already gone" for the rest.
        let to_release: Vec<Machine> = machines
            .iter()
            .filter(|m| m.status != MachineStatus::Returned)
            .cloned()
            .collect();
        // Live machines need the provider; machines orb saw gone only benefit from it (it
        // removes leftovers), so without one they are simply already gone.
        let any_live = to_release.iter().any(|m| m.status.is_live());
        let provider = if to_release.is_empty() {
            None
        } else if any_live {
            Some(self.provider.get()?)
        } else {
            self.provider.get().ok()
        };
        let to_release = if provider.is_some() {
            to_release
        } else {
            Vec::new()
        };

        let now = self.now();
        let templates: BTreeSet<&str> = machines.iter().map(|m| m.template_id.as_str()).collect();
        let mut request = Request::new(
            RequestId::new_return(),
            RequestType::Return,
            (templates.len() == 1)
                .then(|| templates.iter().next().map(|t| t.to_string()))
                .flatten(),
            &self.settings.provider_name,
            &self.settings.provider_type,
            machines.len() as u32,
            now,
        );
        request.machine_ids = machines.iter().map(|m| m.machine_id.clone()).collect();
        request.unknown_machines = unknown;
        // A partial return says what it left out, on the request and to the caller.
        let skipped = (!held.is_empty()).then(|| {
            format!(
                "left out machines already being returned: {}; poll those returns instead",
                held.join(", ")
            )
        });
        request.status_message.clone_from(&skipped);
        lifecycle::apply(
            &mut request,
            LifecycleEvent::Start {
                grace_secs: self.settings.grace_secs,
            },
            now,
        )?;
        for m in &mut machines {
            m.return_request_id = Some(request.request_id.clone());
            m.updated_at = now;
        }
        // Held while the release runs and is recorded: a process that finds this return
        // unrecorded and the claim free knows nobody works on it any more, and resumes it.
        let _claim = self.store.try_claim(&request.request_id).await?;
        self.store
            .insert_request(&mut request, &mut machines)
            .await?;

        let already_gone = (machines.len() - to_release.len()) as u32;
        let Some(provider) = provider else {
            lifecycle::apply(
                &mut request,
                LifecycleEvent::ProviderVerdict {
                    verdict: Verdict::Fulfilled,
                    fulfilled: already_gone,
                    failed: 0,
                    message: Some("every named machine was already gone".into()),
                },
                self.now(),
            )?;
            self.store.update_request(&mut request, &mut []).await?;
            return Ok(RequestView {
                request,
                machines: machines.into(),
                note: skipped,
            });
        };

        let mut view = self
            .release_and_record(request, machines, provider, &to_release)
            .await?;
        view.note = match (skipped, view.note.take()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        Ok(view)
    }

    /// The stored machines `keys` name, by machine id, and the labels of the keys that name none.
    async fn resolve(
        &self,
        keys: &[MachineKey],
    ) -> Result<(BTreeMap<String, Machine>, Vec<String>), BrokerError> {
        let lookups: Vec<String> = keys
            .iter()
            .flat_map(|k| k.lookups().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let found = self.store.find_machines(&lookups).await?;
        let mut chosen = BTreeMap::new();
        let mut unknown = Vec::new();
        let index = Found::new(&found);
        for key in keys {
            match index.resolve(key) {
                Some(m) => {
                    chosen.insert(m.machine_id.clone(), m.clone());
                }
                None => unknown.push(key.label().to_string()),
            }
        }
        Ok((chosen, unknown))
    }

    /// Reads the unfinished acquires once, as a status call would: a controller's machines are
    /// recorded by the first read after the acquire, and a return of them may come before it
    /// (`orb machines request` without `--wait`). Whether there was any to read.
    async fn record_unpolled_acquires(&self) -> Result<bool, BrokerError> {
        let acquires = self.unfinished(RequestType::Acquire).await?;
        for acquire in &acquires {
            // A read that fails only leaves its machines unknown, which the return reports.
            if let Err(e) = self.refresh(&acquire.request_id).await {
                tracing::warn!(request = %acquire.request_id, "reading an unfinished acquire for a return: {e}");
            }
        }
        Ok(!acquires.is_empty())
    }

    /// The returns holding some of `machines` that have ended (or are gone): a machine such a
    /// return still names is free, whatever left it held (a store written by an older orb).
    async fn ended_returns(
        &self,
        machines: impl Iterator<Item = &Machine>,
    ) -> Result<BTreeSet<RequestId>, BrokerError> {
        let holders: BTreeSet<&RequestId> = machines
            .filter_map(|m| m.return_request_id.as_ref())
            .collect();
        let mut ended = BTreeSet::new();
        for id in holders {
            let request = self.store.get_request(id).await?;
            if request.is_none_or(|r| r.status.is_terminal()) {
                ended.insert(id.clone());
            }
        }
        Ok(ended)
    }

    /// Asks the provider to release `to_release` for the stored return `request` (whose
    /// claim the caller holds) and stores what it answered. A release the cluster cut off
    /// leaves the return in progress with nothing recorded, to be resumed by the next read.
    pub(super) async fn release_and_record(
        &self,
        mut request: Request,
        mut machines: Vec<Machine>,
        provider: Arc<dyn Provider>,
        to_release: &[Machine],
    ) -> Result<RequestView, BrokerError> {
        let mut to_release = to_release.to_vec();
        // What orb keeps of each acquire besides the machines named: a return that leaves none
        // deletes the controller, and a Job takes its other hosts along.
        let mut siblings: BTreeMap<String, Vec<Machine>> = BTreeMap::new();
        for acquire in to_release
            .iter()
            .map(|m| m.request_id.clone())
            .collect::<BTreeSet<_>>()
        {
            let named: BTreeSet<&str> = machines.iter().map(|m| m.machine_id.as_str()).collect();
            let kept: Vec<Machine> = self
                .store
                .list_machines(&MachineFilter {
                    request_id: Some(acquire.clone()),
                    live_only: true,
                    not_returning: true,
                    ..Default::default()
                })
                .await?
                .into_iter()
                .filter(|m| !named.contains(m.machine_id.as_str()))
                .collect();
            let finished = self
                .store
                .get_request(&acquire)
                .await?
                .and_then(|a| a.completed_at);
            if is_only_replacements(&kept, finished) {
                // The last hosts HostFactory knows of this Deployment go: the replicas its
                // ReplicaSet made for lost pods after the acquire ended (nobody was told of them)
                // join the return, so the Deployment goes whole and nothing of it stays.
                for mut m in kept {
                    m.return_request_id = Some(request.request_id.clone());
                    m.updated_at = self.now();
                    request.machine_ids.push(m.machine_id.clone());
                    request.requested_count += 1;
                    to_release.push(m.clone());
                    machines.push(m);
                }
                siblings.insert(acquire.to_string(), Vec::new());
            } else {
                siblings.insert(acquire.to_string(), kept);
            }
        }
        let refs = self.machine_refs(&to_release).await?;
        let others = siblings
            .iter()
            .map(|(id, kept)| {
                (
                    id.clone(),
                    kept.iter().map(|m| m.machine_id.clone()).collect(),
                )
            })
            .collect();
        let catalog = self.catalog.current();
        let templates = to_release
            .iter()
            .filter_map(|m| {
                catalog
                    .get(&m.template_id)
                    .map(|t| (m.template_id.clone(), t.clone()))
            })
            .collect();
        let outcome = provider
            .release(ReleaseInput {
                return_request_id: request.request_id.clone(),
                machines: refs,
                templates,
                others,
            })
            .await;
        let now = self.now();
        let mut ended = Vec::new();
        let mut note = None;
        match outcome {
            Ok(outcome) => {
                // Machines the release takes along though nobody named them join the return,
                // so they are followed (and reported) as returned, not as lost.
                let taken: BTreeSet<&str> =
                    outcome.also_released.iter().map(String::as_str).collect();
                for sibling in siblings
                    .into_values()
                    .flatten()
                    .filter(|m| taken.contains(m.machine_id.as_str()))
                {
                    let mut sibling = sibling;
                    sibling.return_request_id = Some(request.request_id.clone());
                    sibling.updated_at = now;
                    request.machine_ids.push(sibling.machine_id.clone());
                    request.requested_count += 1;
                    machines.push(sibling);
                }
                ended = outcome.ended;
                // Something is always recorded: an empty answer would read as a release
                // that never ran, and be run again.
                request.provider_data = if crate::resume::is_empty_data(&outcome.provider_data) {
                    serde_json::json!({"released": outcome.released})
                } else {
                    outcome.provider_data
                }
                .into();
                if outcome.message.is_some() {
                    request.status_message = outcome.message;
                }
                // A machine whose release failed is not being returned: it is freed with the
                // reason at once, so a later return can take it (nothing else would free it).
                let mut left_out = Vec::new();
                for failure in &outcome.failed {
                    if let Some(m) = machines
                        .iter_mut()
                        .find(|m| m.machine_id == failure.machine_id)
                    {
                        m.return_request_id = None;
                        m.status_reason = Some(format!(
                            "release failed: {}; the machine is free to be returned again",
                            failure.reason
                        ));
                        m.updated_at = now;
                        left_out.push(format!("{}: {}", m.machine_id, failure.reason));
                    }
                }
                if !left_out.is_empty() {
                    let why = format!(
                        "could not release {} (free to be returned again)",
                        left_out.join("; ")
                    );
                    if left_out.len() == request.machine_ids.len() {
                        lifecycle::apply(
                            &mut request,
                            LifecycleEvent::Fail {
                                reason: why.clone(),
                            },
                            now,
                        )?;
                    } else {
                        // The return goes on for the rest and ends `partial` (HostFactory:
                        // complete_with_error), naming what it could not give back: a caller
                        // told `complete` would count those hosts as gone.
                        request
                            .machine_ids
                            .retain(|id| !outcome.failed.iter().any(|f| &f.machine_id == id));
                        if let Some(data) = request.provider_data.as_object_mut() {
                            data.insert(NOT_RELEASED.into(), why.clone().into());
                        }
                    }
                    note = Some(why);
                }
            }
            Err(ProviderError::Rejected(reason)) => {
                // The provider refused the plan and changed nothing: the return ends failed
                // and its machines are free to be returned again.
                lifecycle::apply(&mut request, LifecycleEvent::Fail { reason }, now)?;
                for m in &mut machines {
                    m.return_request_id = None;
                    m.updated_at = now;
                }
            }
            Err(ProviderError::Interrupted(why)) => {
                // The cluster did not answer mid-release: some of it may be done, some not.
                // Releasing is idempotent (deletes by name, a Deployment scaled to a target it
                // records), so the return stays in progress with nothing recorded, holding its
                // machines, and the next read resumes it; its deadline still ends it.
                request.status_message = Some(interrupted_release_message(&why));
            }
            Err(err) => {
                // The provider broke down in a way a retry would not mend (a misconfigured
                // client, an apiserver refusing with 401/403): the return ends failed and frees
                // what it held, so the machines can be returned again.
                let reason = match &err {
                    ProviderError::Unavailable(text) => format!(
                        "{text}; the return failed and its machines are free again: return \
                         them again once the cluster accepts it"
                    ),
                    other => other.to_string(),
                };
                lifecycle::apply(&mut request, LifecycleEvent::Fail { reason }, now)?;
                self.give_up_return(&request, &mut machines).await;
            }
        }
        self.record_release(&mut request, &mut machines).await?;
        for end in ended {
            self.end_acquire(&end.request_id, &end.reason, &request.request_id)
                .await?;
        }
        Ok(RequestView {
            request,
            machines: machines.into(),
            note,
        })
    }

    /// Stores what a release did. A machine it took along was in no return when read, so a
    /// status read of its acquire may have written its row meanwhile: the fresh row takes this
    /// return's part again (its return, and the reason of a failed release) and the write is
    /// tried again, for the cluster has changed and the return must be on record.
    async fn record_release(
        &self,
        request: &mut Request,
        machines: &mut [Machine],
    ) -> Result<(), BrokerError> {
        for _ in 0..3 {
            match self.store.update_request(request, machines).await {
                Err(orb_store::StoreError::Conflict {
                    entity: "machine", ..
                }) => {
                    let ids: Vec<String> = machines.iter().map(|m| m.machine_id.clone()).collect();
                    let fresh: HashMap<String, Machine> = self
                        .store
                        .find_machines(&ids)
                        .await?
                        .into_iter()
                        .map(|m| (m.machine_id.clone(), m))
                        .collect();
                    for m in machines.iter_mut() {
                        let Some(mut row) = fresh.get(&m.machine_id).cloned() else {
                            continue;
                        };
                        if row.version == m.version {
                            continue;
                        }
                        if m.return_request_id.is_none() {
                            row.status_reason = m.status_reason.take();
                        }
                        row.return_request_id = m.return_request_id.take();
                        row.updated_at = m.updated_at;
                        *m = row;
                    }
                }
                other => return other.map_err(BrokerError::from),
            }
        }
        self.store
            .update_request(request, machines)
            .await
            .map_err(BrokerError::from)
    }

    /// Closes an acquire a release ended (a returned Job): cancelled with the reason when it
    /// was still running; a finished one keeps its status.
    async fn end_acquire(
        &self,
        acquire_id: &str,
        reason: &str,
        by: &RequestId,
    ) -> Result<(), BrokerError> {
        let Ok(id) = RequestId::parse(acquire_id) else {
            return Ok(());
        };
        for _ in 0..3 {
            let Some(mut acquire) = self.store.get_request(&id).await? else {
                return Ok(());
            };
            if acquire.status.is_terminal() {
                return Ok(());
            }
            lifecycle::apply(
                &mut acquire,
                LifecycleEvent::Cancel {
                    reason: format!("{reason} (return {by})"),
                },
                self.now(),
            )?;
            match self.store.update_request(&mut acquire, &mut []).await {
                Err(orb_store::StoreError::Conflict { .. }) => continue,
                other => return other.map_err(BrokerError::from),
            }
        }
        Ok(())
    }
}

/// Whether every machine orb keeps of an acquire (`kept`, live, in no return, not named) is a
/// Deployment replica recorded after the acquire `finished`: a replacement for a lost pod,
/// which HostFactory, done polling the acquire, never heard of.
fn is_only_replacements(kept: &[Machine], finished: Option<jiff::Timestamp>) -> bool {
    let Some(finished) = finished else {
        return false;
    };
    !kept.is_empty()
        && kept.iter().all(|m| {
            m.provider_api == Some(orb_core::ProviderApi::Deployment) && m.created_at > finished
        })
}

/// The key of a return's provider data naming the machines it could not release.
const NOT_RELEASED: &str = "not_released";

/// A provider's verdict on a return, judged with what the release left out: a return that
/// could not release some named machines is `partial` once the rest are gone, never
/// `complete`, and its message says which and why.
pub(super) fn judge_return(
    request: &Request,
    verdict: Verdict,
    message: Option<String>,
) -> (Verdict, Option<String>) {
    let left_out = request
        .provider_data
        .get(NOT_RELEASED)
        .and_then(|v| v.as_str());
    match (verdict, left_out) {
        (Verdict::Fulfilled, Some(left_out)) => {
            let message = match message {
                Some(m) => format!("{m}; {left_out}"),
                None => left_out.to_string(),
            };
            (Verdict::Partial { is_final: true }, Some(message))
        }
        (verdict, _) => (verdict, message),
    }
}

/// What a return says while the cluster keeps it from releasing.
pub(super) fn interrupted_release_message(why: &str) -> String {
    format!(
        "the cluster did not answer while releasing the machines ({why}); orb resumes this \
         return when it answers again, until the return's deadline"
    )
}
