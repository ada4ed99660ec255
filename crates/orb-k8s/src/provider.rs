//! [`K8sProvider`]: orb-core's `Provider` on a Kubernetes cluster. It resolves the effective
//! config and namespace of each request, plans its final objects with
//! [`crate::spec::final_workload`] (native spec when both switches are on, typed builders
//! otherwise, then the security audit: a rejection creates nothing), and hands them to the
//! handler the template's `provider_api` names (Pod when unset), chosen at request time.
//! `orb templates render` prints the same plan ([`K8sProvider::final_workload_for`]). The client is built on first use, so commands that never reach the cluster
//! never load a kubeconfig.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::Client;
use orb_core::ProviderApi;
use orb_core::ids::RequestId;
use orb_core::provider::{
    AbandonInput, AcquireInput, AcquireOutcome, CancelInput, CancelOutcome, MachineFailure,
    Provider, ProviderError, ProviderFuture, ReadAhead, ReadAheadFuture, ReclaimNotice,
    ReclaimQuery, ReleaseInput, ReleaseOutcome, StatusInput, StatusReport,
};
use orb_core::request::RequestType;
use orb_core::template::Template;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::config::{
    AuthEnvironment, AuthPlan, K8sProviderConfig, ResolvedConfig, TemplateOverrides,
    kube_config_for, plan_auth, resolve_default_namespace,
};
use crate::daemon::{NodeIndex, PodCache};
use crate::error::K8sError;
use crate::handlers::{HandlerCx, Victims, handler_for};
use crate::metrics::K8sMetrics;
use crate::native_spec::NativeSpecSwitches;
use crate::provider_data::RequestRecord;
use crate::resilience::{BreakerState, HandlerBreakers, RetryPolicy, client_with_retries};
use crate::spec::{FinalBodyError, FinalBodyRequest, FinalWorkload, final_workload};
use crate::status_cache::ControllerStatusCache;

/// The provider type names this provider answers to in `config.json`.
pub const PROVIDER_TYPES: &[&str] = &["k8s", "kubernetes"];

pub struct K8sProvider {
    resolved: ResolvedConfig,
    auth: Option<AuthPlan>,
    detected_namespace: String,
    client: OnceCell<Client>,
    pub(crate) status_cache: ControllerStatusCache,
    native: NativeSpecContext,
    metrics: K8sMetrics,
    /// One circuit breaker per handler kind around the handler calls.
    breakers: HandlerBreakers,
    /// The read-side views `orb serve` feeds; none in the CLI.
    views: ClusterViews,
}

/// The in-memory views of the cluster a provider may read instead of asking the apiserver,
/// given when the provider is built ([`K8sProvider::with_cluster_views`]). Whoever builds
/// them also runs the loops that fill them (`orb serve`); the provider only reads.
#[derive(Clone, Default)]
pub struct ClusterViews {
    /// Managed pods: status reads skip the LIST while it may answer.
    pub pods: Option<Arc<PodCache>>,
    /// Node facts and live disruptions: machines carry their node's.
    pub nodes: Option<Arc<NodeIndex>>,
}

impl ClusterViews {
    /// The views `orb serve` runs for `provider`, as its config says: a pod cache unless
    /// `watch_enabled=false`, a node index when the node or the events watcher is on. Empty
    /// views until their loops run ([`PodCache::run`], [`crate::daemon::nodes::run_node_watch`]).
    pub fn for_provider(provider: &K8sProvider) -> Self {
        let config = provider.config();
        Self {
            pods: PodCache::for_provider(provider).map(Arc::new),
            nodes: (config.node_watch_enabled || config.events_watch_enabled)
                .then(|| Arc::new(NodeIndex::new(provider.metrics().clone()))),
        }
    }
}

/// One acquire, planned: its final objects, their namespace and the effective config.
#[derive(Debug, Clone)]
pub struct PlannedAcquire {
    pub workload: FinalWorkload,
    pub namespace: String,
    pub config: K8sProviderConfig,
}

/// What the native spec hatch needs from outside the provider's own config block.
#[derive(Debug, Clone, Default)]
struct NativeSpecContext {
    /// config.json's `native_spec.enabled` (`None`: absent, which means enabled).
    application_enabled: Option<bool>,
    /// Where `specs/<api>/default.json` overrides and relative `native_spec_path`s live.
    config_dir: Option<PathBuf>,
}

impl K8sProvider {
    /// A provider for a resolved configuration; decides authentication now (so a bad setting
    /// is reported at start-up) and connects on first use.
    pub fn new(resolved: ResolvedConfig) -> Result<Self, ProviderError> {
        let env = AuthEnvironment::detect();
        let plan = plan_auth(&resolved.config, &env)
            .map_err(|e| ProviderError::Misconfigured(e.to_string()))?;
        let detected_namespace = resolve_default_namespace(&plan, &env);
        let metrics = K8sMetrics::new();
        Ok(Self {
            status_cache: ControllerStatusCache::new(resolved.config.controller_status_cache_ttl()),
            breakers: HandlerBreakers::new(&resolved.config, metrics.clone()),
            resolved,
            auth: Some(plan),
            detected_namespace,
            client: OnceCell::new(),
            native: NativeSpecContext::default(),
            metrics,
            views: ClusterViews::default(),
        })
    }

    /// A provider around an existing client (tests, embedding). `detected_namespace` is the
    /// namespace used when the config names none. The client is used as it is: orb's retry
    /// layer is only in clients the provider builds ([`Self::with_kube_config`]).
    pub fn with_client(client: Client, resolved: ResolvedConfig, detected_namespace: &str) -> Self {
        Self::around(client, K8sMetrics::new(), resolved, detected_namespace)
    }

    /// A provider whose client is built now from `config`, with orb's retry layer (the
    /// config's retry settings, retries counted in this provider's metrics).
    pub fn with_kube_config(
        mut config: kube::Config,
        resolved: ResolvedConfig,
        detected_namespace: &str,
    ) -> Result<Self, K8sError> {
        config.default_retry = false;
        let metrics = K8sMetrics::new();
        let client =
            client_with_retries(config, RetryPolicy::from_config(&resolved.config), &metrics)?;
        Ok(Self::around(client, metrics, resolved, detected_namespace))
    }

    fn around(
        client: Client,
        metrics: K8sMetrics,
        resolved: ResolvedConfig,
        detected_namespace: &str,
    ) -> Self {
        Self {
            status_cache: ControllerStatusCache::new(resolved.config.controller_status_cache_ttl()),
            breakers: HandlerBreakers::new(&resolved.config, metrics.clone()),
            resolved,
            auth: None,
            detected_namespace: detected_namespace.to_string(),
            client: OnceCell::new_with(Some(client)),
            native: NativeSpecContext::default(),
            metrics,
            views: ClusterViews::default(),
        }
    }

    /// The application-level half of the native spec switch (config.json
    /// `native_spec.enabled`, see [`crate::native_spec::app_native_spec_enabled`]) and the
    /// config directory native specs are read from. Without this call the application switch
    /// counts as on (its documented default) and relative paths resolve under the working
    /// directory.
    pub fn with_native_spec_context(
        mut self,
        application_enabled: bool,
        config_dir: Option<PathBuf>,
    ) -> Self {
        self.native = NativeSpecContext {
            application_enabled: Some(application_enabled),
            config_dir,
        };
        self
    }

    /// The provider with the views it reads from now on (replacing any it had). `orb serve`
    /// builds them with [`ClusterViews::for_provider`] before it shares the provider, and
    /// then starts the loops that fill them.
    pub fn with_cluster_views(mut self, views: ClusterViews) -> Self {
        self.views = views;
        self
    }

    /// Both native spec switches for a template's effective config.
    pub fn native_spec_switches(&self, config: &K8sProviderConfig) -> NativeSpecSwitches {
        NativeSpecSwitches {
            provider_enabled: config.native_spec_enabled,
            application_enabled: self.native.application_enabled.unwrap_or(true),
        }
    }

    /// The config directory native specs are read from, if one was given.
    pub fn native_spec_config_dir(&self) -> Option<&Path> {
        self.native.config_dir.as_deref()
    }

    /// The exact objects an acquire of `count` machines of `template` under `request_id`
    /// creates, audited: native spec or typed builders, as the switches decide. `orb templates
    /// render` prints these, so what it shows is what acquire sends.
    pub fn final_workload_for(
        &self,
        template: &Template,
        request_id: &str,
        count: u32,
    ) -> Result<PlannedAcquire, FinalBodyError> {
        let early = |source: K8sError| FinalBodyError {
            source: Box::new(source),
            warnings: Vec::new(),
        };
        let (config, config_warnings) = self
            .effective_config_with_warnings(Some(template))
            .map_err(early)?;
        let namespace = self.target_namespace(&config, template).map_err(early)?;
        let mut workload = final_workload(
            &FinalBodyRequest {
                template,
                config: &config,
                request_id,
                namespace: &namespace,
                count,
                switches: self.native_spec_switches(&config),
                config_dir: self.native_spec_config_dir(),
            },
            template.api(),
        )
        .map_err(|mut failure| {
            failure
                .warnings
                .splice(0..0, config_warnings.iter().cloned());
            failure
        })?;
        workload.warnings.splice(0..0, config_warnings);
        Ok(PlannedAcquire {
            workload,
            namespace,
            config,
        })
    }

    pub fn config(&self) -> &K8sProviderConfig {
        &self.resolved.config
    }

    /// The operator's departures from the secure defaults (reject mode or the audit off, the
    /// native spec hatch on), each naming where it was set; `orb serve` prints them at start.
    pub fn security_opt_outs(&self) -> Vec<String> {
        self.resolved
            .security_opt_outs
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The namespace used when neither the config nor a template names one.
    pub fn detected_namespace(&self) -> &str {
        &self.detected_namespace
    }

    /// The namespaces the provider manages (and `orb serve` watches).
    pub fn watch_scope(&self) -> crate::config::NamespaceScope {
        self.resolved
            .config
            .namespace_scope(&self.detected_namespace)
    }

    /// The provider's metrics; `orb serve` registers them.
    pub fn metrics(&self) -> &K8sMetrics {
        &self.metrics
    }

    /// The circuit breaker of each handler (`pod`, `deployment`, `statefulset`, `job`) now.
    pub fn circuit_states(&self) -> Vec<(&'static str, BreakerState)> {
        self.breakers.states()
    }

    /// Runs a handler call of `kind` through that handler's circuit breaker.
    pub(crate) async fn guarded<T>(
        &self,
        kind: ProviderApi,
        call: impl std::future::Future<Output = Result<T, K8sError>>,
    ) -> Result<T, K8sError> {
        self.breakers.guard(kind, call).await
    }

    pub fn pod_cache(&self) -> Option<&Arc<PodCache>> {
        self.views.pods.as_ref()
    }

    pub fn node_index(&self) -> Option<&Arc<NodeIndex>> {
        self.views.nodes.as_ref()
    }

    /// The live Karpenter disruption of the node `pod` runs on, if the index knows one.
    pub(crate) fn node_disruption(
        &self,
        pod: &impl crate::pod_read::PodRead,
    ) -> Option<crate::daemon::nodes::Disruption> {
        let index = self.views.nodes.as_ref()?;
        let node = pod.node_name()?;
        index.disruption(node, jiff::Timestamp::now())
    }

    /// Adds the facts and live disruption of `pod`'s node to its observation (nothing
    /// without a node index; a shared observation is copied only when there is something
    /// to add).
    pub(crate) fn annotate_with_node(
        &self,
        observation: &mut orb_core::shared::Shared<orb_core::provider::MachineObservation>,
        pod: &impl crate::pod_read::PodRead,
    ) {
        let Some(index) = &self.views.nodes else {
            return;
        };
        let Some(node) = pod.node_name() else {
            return;
        };
        let facts = index.node(node);
        let disruption = index.disruption(node, jiff::Timestamp::now());
        if facts.is_none() && disruption.is_none() {
            return;
        }
        crate::daemon::nodes::annotate_observation(
            observation,
            facts.as_ref(),
            disruption.as_ref(),
        );
    }

    /// The Kubernetes client (built on first use), for the background tasks of `orb serve`.
    pub async fn kube_client(&self) -> Result<Client, K8sError> {
        self.client().await.cloned()
    }

    /// Live pods of a request for a status read: the LIST read `ahead` of the machine rows,
    /// or the watch cache when it may answer, else a LIST. When a pod orb `expects` (a stored
    /// machine not known gone) is missing from the read ahead or the cache, the read LISTs to
    /// confirm: neither may have seen a pod created a moment ago by another process, and a
    /// machine is only called gone on the apiserver's word.
    pub(crate) async fn live_pods(
        &self,
        client: &Client,
        record: &RequestRecord,
        expected: &orb_core::sorted::SortedNames<'_>,
        ahead: Option<crate::status::PodsAhead>,
    ) -> Result<Vec<Arc<crate::kept::Kept>>, K8sError> {
        use crate::metrics::ReasonLabels;
        use crate::pod_read::PodRead;
        if let Some(read) = ahead.and_then(|ahead| ahead.answer(record, expected)) {
            return read.map(|pods| pods.into_iter().map(Arc::new).collect());
        }
        if let Some(cache) = &self.views.pods
            && record.label_prefix == self.resolved.config.label_prefix
            && let Ok(pods) = cache.pods_of(&record.namespace, &record.request_id)
            && crate::status::holds_every(pods.iter().map(|p| p.name()), expected)
        {
            self.metrics
                .status_reads
                .get_or_create(&ReasonLabels { reason: "cache" })
                .inc();
            return Ok(pods);
        }
        if self.views.pods.is_some() {
            self.metrics
                .status_reads
                .get_or_create(&ReasonLabels { reason: "list" })
                .inc();
        }
        let listed = self
            .guarded(
                record.kind,
                crate::handlers::request_kept_pods(client, record),
            )
            .await?;
        Ok(listed.into_iter().map(Arc::new).collect())
    }

    pub(crate) async fn client(&self) -> Result<&Client, K8sError> {
        self.client
            .get_or_try_init(|| async {
                let plan = self.auth.as_ref().ok_or_else(|| {
                    K8sError::Client("the provider has neither a client nor an auth plan".into())
                })?;
                let namespace = self
                    .resolved
                    .config
                    .default_namespace(&self.detected_namespace);
                let config = kube_config_for(plan, &namespace)
                    .await
                    .map_err(|e| K8sError::Client(e.to_string()))?;
                client_with_retries(
                    config,
                    RetryPolicy::from_config(&self.resolved.config),
                    &self.metrics,
                )
            })
            .await
    }

    /// The provider config with the template's `provider_config` overrides applied (only the
    /// keys a template may override; any other key refuses the template).
    pub fn effective_config(
        &self,
        template: Option<&Template>,
    ) -> Result<K8sProviderConfig, K8sError> {
        self.effective_config_with_warnings(template)
            .map(|(config, _)| config)
    }

    /// [`Self::effective_config`] and the warnings the template's overrides add to the
    /// provider's own (which were reported when the provider was built).
    pub fn effective_config_with_warnings(
        &self,
        template: Option<&Template>,
    ) -> Result<(K8sProviderConfig, Vec<String>), K8sError> {
        let Some(template) = template else {
            return Ok((self.resolved.config.clone(), Vec::new()));
        };
        match &template.provider_config {
            None | Some(Value::Null) => Ok((self.resolved.config.clone(), Vec::new())),
            Some(Value::Object(values)) => {
                let resolved = self
                    .resolved
                    .for_template(&TemplateOverrides {
                        template_id: template.template_id.clone(),
                        values: values.clone(),
                    })
                    .map_err(K8sError::TemplateConfig)?;
                let added = resolved
                    .warnings
                    .iter()
                    .filter(|w| !self.resolved.warnings.contains(w))
                    .map(|w| format!("template {:?} providerConfig: {w}", template.template_id))
                    .collect();
                Ok((resolved.config, added))
            }
            Some(other) => Err(K8sError::Refused(format!(
                "template {:?}: provider_config must be an object of provider settings, got {other}",
                template.template_id
            ))),
        }
    }

    /// The namespace a template's objects go to, checked against the provider's scope.
    pub fn target_namespace(
        &self,
        config: &K8sProviderConfig,
        template: &Template,
    ) -> Result<String, K8sError> {
        let namespace = template
            .namespace
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| config.default_namespace(&self.detected_namespace));
        config
            .namespace_scope(&self.detected_namespace)
            .check_target(&namespace)?;
        Ok(namespace)
    }

    pub(crate) fn cx<'a>(&'a self, client: &'a Client) -> HandlerCx<'a> {
        HandlerCx {
            client,
            status_cache: &self.status_cache,
            metrics: &self.metrics,
        }
    }

    async fn acquire_inner(&self, input: AcquireInput) -> Result<AcquireOutcome, K8sError> {
        let request_id = input.request_id.as_str();
        let PlannedAcquire {
            workload,
            namespace,
            config,
        } = self
            .final_workload_for(&input.template, request_id, input.count)
            .map_err(|failure| {
                log_warnings(request_id, &failure.warnings);
                *failure.source
            })?;
        log_warnings(request_id, &workload.warnings);
        let kind = workload.built.kind();
        let record = RequestRecord {
            request_id: request_id.to_string(),
            namespace,
            kind,
            label_prefix: config.label_prefix.clone(),
            ..RequestRecord::default()
        };
        let client = self.client().await?;
        let cx = self.cx(client);
        self.guarded(kind, handler_for(kind).create(&cx, workload.built, record))
            .await
    }

    async fn release_inner(&self, input: ReleaseInput) -> Result<ReleaseOutcome, K8sError> {
        // Machines of one acquire request are released together, by that request's handler.
        let mut groups: BTreeMap<String, (Value, Victims)> = BTreeMap::new();
        for m in &input.machines {
            let entry = groups
                .entry(m.request_id.to_string())
                .or_insert_with(|| (Value::clone(&m.request_provider_data), Victims::default()));
            if let Some(uid) = &m.uid {
                entry.1.uids.insert(m.machine_id.clone(), uid.clone());
            }
            entry.1.names.push(m.machine_id.clone());
        }
        for (request_id, (_, victims)) in groups.iter_mut() {
            victims.kept = input.others.get(request_id).cloned();
            victims.return_request_id = Some(input.return_request_id.to_string());
        }
        let client = self.client().await?;
        let cx = self.cx(client);
        let mut outcome = ReleaseOutcome::default();
        let mut messages = Vec::new();
        for (request_id, (data, victims)) in groups {
            let record = match RequestRecord::from_stored(&request_id, &data) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    let reason = format!(
                        "request {request_id} has no Kubernetes bookkeeping (provider_data), so orb cannot tell which objects to change"
                    );
                    outcome.failed.extend(all_failed(victims.names, &reason));
                    continue;
                }
                Err(e) => {
                    outcome
                        .failed
                        .extend(all_failed(victims.names, &e.to_string()));
                    continue;
                }
            };
            let kind = record.kind;
            match self
                .guarded(
                    kind,
                    handler_for(kind).release(&cx, &record, victims.clone()),
                )
                .await
            {
                Ok(result) => {
                    if !result.released.is_empty() {
                        tracing::info!(
                            return_request_id = %input.return_request_id,
                            request_id = %request_id,
                            machines = ?result.released,
                            also_released = ?result.also_released,
                            "released machines (deleted or scaled away): given back by a return"
                        );
                    }
                    outcome.released.extend(result.released);
                    outcome.failed.extend(result.failed);
                    outcome.also_released.extend(result.also_released);
                    if let Some(reason) = result.ends_request {
                        outcome.ended.push(orb_core::provider::EndedAcquire {
                            request_id: request_id.clone(),
                            reason,
                        });
                    }
                    messages.extend(result.message);
                }
                // A refused plan changes nothing; with one request the whole return fails
                // with the reason, otherwise the other requests' machines still go. A cluster
                // that stopped answering cuts the whole release off, whatever was done: it is
                // idempotent, and the return runs it again once the cluster answers.
                Err(e) if input.machines.len() == victims.names.len() || e.is_transient() => {
                    return Err(e);
                }
                Err(e) => outcome
                    .failed
                    .extend(victims.names.into_iter().map(|machine_id| MachineFailure {
                        machine_id,
                        reason: e.to_string(),
                    })),
            }
        }
        outcome.message = (!messages.is_empty()).then(|| messages.join("; "));
        outcome.provider_data = json!({"released": outcome.released});
        Ok(outcome)
    }
}

impl K8sProvider {
    /// Clears the victim marks a Deployment return left on the pods of `input` (the other
    /// kinds leave nothing behind that a later release could trip over).
    async fn abandon_inner(&self, input: AbandonInput) -> Result<(), K8sError> {
        let mut by_request: BTreeMap<String, (Value, Vec<String>)> = BTreeMap::new();
        for m in &input.machines {
            by_request
                .entry(m.request_id.to_string())
                .or_insert_with(|| (Value::clone(&m.request_provider_data), Vec::new()))
                .1
                .push(m.machine_id.clone());
        }
        let client = self.client().await?;
        let mut failures = Vec::new();
        for (request_id, (data, names)) in by_request {
            let record = match RequestRecord::from_stored(&request_id, &data) {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                // Which kind it is, and so whether it left marks, cannot be told.
                Err(e) => {
                    failures.extend(all_failed(names, &e.to_string()));
                    continue;
                }
            };
            if record.kind != ProviderApi::Deployment {
                continue;
            }
            let api = kube::Api::namespaced(client.clone(), &record.namespace);
            failures.extend(crate::handlers::unmark_victims(&api, &names).await);
        }
        match failures.first() {
            None => Ok(()),
            Some(first) => Err(K8sError::Refused(format!(
                "the deletion marks of {} pods could not be cleared (first: {}: {}); remove the \
                 annotation {} from them by hand",
                failures.len(),
                first.machine_id,
                first.reason,
                crate::release_plan::POD_DELETION_COST
            ))),
        }
    }
}

/// The same failure for each of `machines`.
fn all_failed(machines: Vec<String>, reason: &str) -> impl Iterator<Item = MachineFailure> + '_ {
    machines.into_iter().map(move |machine_id| MachineFailure {
        machine_id,
        reason: reason.to_string(),
    })
}

/// Warnings of one acquire (ignored native spec, unknown native fields, high-risk fields in
/// warn mode) go to the log; nothing about them stops the request.
fn log_warnings(request_id: &str, warnings: &[String]) {
    for warning in warnings {
        tracing::warn!(request_id, "{warning}");
    }
}

impl Provider for K8sProvider {
    fn provider_type(&self) -> &str {
        "k8s"
    }

    fn acquire(&self, input: AcquireInput) -> ProviderFuture<'_, AcquireOutcome> {
        Box::pin(async move { self.acquire_inner(input).await.map_err(ProviderError::from) })
    }

    fn release(&self, input: ReleaseInput) -> ProviderFuture<'_, ReleaseOutcome> {
        Box::pin(async move { self.release_inner(input).await.map_err(ProviderError::from) })
    }

    fn abandon_release(&self, input: AbandonInput) -> ProviderFuture<'_, ()> {
        Box::pin(async move { self.abandon_inner(input).await.map_err(ProviderError::from) })
    }

    fn status(&self, input: StatusInput) -> ProviderFuture<'_, StatusReport> {
        self.status_after(input, None)
    }

    fn read_ahead(
        &self,
        request_id: &RequestId,
        request_type: RequestType,
        provider_data: &Value,
    ) -> Option<ReadAheadFuture<'_>> {
        self.read_pods_ahead(request_id, request_type, provider_data)
    }

    fn status_after(
        &self,
        input: StatusInput,
        ahead: Option<ReadAhead>,
    ) -> ProviderFuture<'_, StatusReport> {
        let ahead = ahead.and_then(ReadAhead::take::<crate::status::PodsAhead>);
        Box::pin(async move {
            self.status_inner(input, ahead)
                .await
                .map_err(ProviderError::from)
        })
    }

    fn cancel(&self, input: CancelInput) -> ProviderFuture<'_, CancelOutcome> {
        Box::pin(async move { self.cancel_inner(input).await.map_err(ProviderError::from) })
    }

    fn check_acquire(&self, template: &Template, count: u32) -> Result<Vec<String>, ProviderError> {
        self.final_workload_for(template, &crate::native_spec::preview_request_id(), count)
            .map(|planned| planned.workload.warnings)
            .map_err(|failure| ProviderError::from(*failure.source))
    }

    fn reclaims(&self, input: ReclaimQuery) -> ProviderFuture<'_, Vec<ReclaimNotice>> {
        Box::pin(async move {
            self.reclaims_inner(input)
                .await
                .map_err(ProviderError::from)
        })
    }
}

#[cfg(test)]
mod tests;
