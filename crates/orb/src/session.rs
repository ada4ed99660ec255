//! What every door of `orb` shares: the [`Session`] (flags and directories, with config,
//! provider and broker loaded on demand), the [`BrokerEnv`] a call runs with, and the
//! [`Output`] a command leaves for stdout, stderr and the exit code.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use orb_broker::{Broker, BrokerSettings, ProviderHandle};
use orb_core::dirs::Dirs;
use orb_core::hostfactory::output::ErrorReply;
use orb_store::Store;

use crate::cli::{GlobalArgs, SchedulerKind};
use crate::context::{self, LoadedConfig};
use crate::failure::{CliResult, Failure};
use crate::hostfactory::WrittenMachines;
use crate::provider_factory::{ProviderContext, build_provider_for_app};
use crate::render;

/// What a command produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: Vec<String>,
    pub exit: i32,
}

impl Output {
    pub fn ok(stdout: String) -> Self {
        Self {
            stdout,
            ..Default::default()
        }
    }

    pub fn note(mut self, note: Option<String>) -> Self {
        self.stderr.extend(note);
        self
    }
}

/// Everything a command may need, loaded on demand.
pub struct Session {
    pub global: GlobalArgs,
    pub dirs: Dirs,
    /// config.json as first read; one process reads it once, however many steps of a call
    /// (is it a HostFactory call, is a daemon configured, the broker) look at it.
    loaded: OnceLock<CliResult<LoadedConfig>>,
    /// The Kubernetes provider as first built from that config: a getRequestStatus poll
    /// builds it to check the configuration, then, when it must go the full way, hands the
    /// same one to the broker instead of building it again (and logging its warnings twice).
    provider: OnceLock<CliResult<Option<Arc<dyn orb_core::provider::Provider>>>>,
    /// The stores this process opened, to close before it exits (see [`Self::close_stores`]).
    opened: Mutex<Vec<Store>>,
}

/// How long [`Session::close_stores`] waits for a store to close before the process exits
/// anyway (the file stays consistent either way).
const STORE_CLOSE_WAIT: Duration = Duration::from_secs(2);

impl Session {
    pub fn new(global: GlobalArgs) -> Self {
        let dirs = context::resolve(&global);
        Self::with_dirs(global, dirs)
    }

    /// A session on directories resolved by the caller (tests and embedders that must not
    /// depend on this process's environment).
    pub fn with_dirs(global: GlobalArgs, dirs: Dirs) -> Self {
        Self {
            global,
            dirs,
            loaded: OnceLock::new(),
            provider: OnceLock::new(),
            opened: Mutex::new(Vec::new()),
        }
    }

    /// config.json, read and parsed on the first call; later calls get the same result.
    pub fn config(&self) -> CliResult<LoadedConfig> {
        self.loaded
            .get_or_init(|| context::load_config(&self.dirs))
            .clone()
    }

    /// The scheduler from the flag, else from config.json if it can be read.
    pub fn scheduler_hint(&self) -> SchedulerKind {
        match self.global.scheduler {
            Some(kind) => kind,
            None => {
                context::scheduler(&self.global, self.config().ok().as_ref().map(|c| &c.config))
            }
        }
    }

    pub fn is_hostfactory(&self, loaded: &LoadedConfig) -> bool {
        context::scheduler(&self.global, Some(&loaded.config)) == SchedulerKind::Hostfactory
    }

    /// The selected provider when it is the Kubernetes one, built on the first call (later
    /// calls get the same one, or the same failure): an invalid provider configuration stops
    /// the command with every problem (seed 001: it raises at start-up). `None` for other
    /// provider types, which are built when first used.
    pub fn kubernetes_provider(&self) -> CliResult<Option<Arc<dyn orb_core::provider::Provider>>> {
        self.provider
            .get_or_init(|| {
                let loaded = self.config()?;
                let entry = context::select_provider(&self.global, &loaded)?;
                if !crate::provider_factory::is_kubernetes(entry) {
                    return Ok(None);
                }
                build_provider_for_app(entry, &self.provider_context(), &loaded.config.other)
                    .map(Some)
                    .map_err(Failure::from)
            })
            .clone()
    }

    fn provider_context(&self) -> ProviderContext {
        ProviderContext {
            config_dir: self.dirs.config_dir.path.clone(),
            work_dir: self.dirs.work_dir.path.clone(),
        }
    }

    /// The configured store, opened now and closed by [`Self::close_stores`].
    pub async fn open_store(&self, loaded: &LoadedConfig) -> CliResult<Store> {
        let store = context::open_store(&loaded.config, &self.dirs).await?;
        if let Ok(mut opened) = self.opened.lock() {
            opened.push(store.clone());
        }
        Ok(store)
    }

    /// Closes the stores this process opened; a one-shot command calls it before it exits.
    /// Only dropped, a SQLite store is closed on sqlx's thread while the process exits, and
    /// the close is cut off: the last connection's checkpoint of the WAL (with its fsync)
    /// then starts again in every later process while no daemon holds the file open, and
    /// the WAL is never removed. Closed, the WAL is checkpointed once and removed.
    pub async fn close_stores(&self) {
        let stores = match self.opened.lock() {
            Ok(mut opened) => std::mem::take(&mut *opened),
            Err(_) => return,
        };
        for store in stores {
            let _ = tokio::time::timeout(STORE_CLOSE_WAIT, store.close()).await;
        }
    }

    /// A broker on the configured store and provider (the Kubernetes provider is built now,
    /// so a bad configuration is reported before anything else; other types lazily).
    pub async fn broker(&self, loaded: &LoadedConfig) -> CliResult<(Broker, Vec<String>)> {
        self.broker_using(loaded, None).await
    }

    /// [`Self::broker`], with a provider built by the caller (`orb serve` builds the concrete
    /// Kubernetes provider to run its watch cache on) instead of a lazily built one.
    pub async fn broker_using(
        &self,
        loaded: &LoadedConfig,
        provider: Option<Arc<dyn orb_core::provider::Provider>>,
    ) -> CliResult<(Broker, Vec<String>)> {
        let (broker, warnings, _) = self.assemble(loaded, provider).await?;
        Ok((broker, warnings))
    }

    /// The broker for a HostFactory operation, keeping why the template file could not be
    /// read (getAvailableTemplates fails with it; the other operations only warn).
    pub async fn hostfactory_env(&self, loaded: &LoadedConfig) -> CliResult<BrokerEnv> {
        let (broker, warnings, catalog_failure) = self.assemble(loaded, None).await?;
        Ok(BrokerEnv {
            broker: Arc::new(broker),
            warnings,
            catalog_failure,
            written: None,
        })
    }

    /// The broker on the configured store, provider and template file, with what loading
    /// the file said (its warnings, and why it could not be read).
    async fn assemble(
        &self,
        loaded: &LoadedConfig,
        provider: Option<Arc<dyn orb_core::provider::Provider>>,
    ) -> CliResult<(Broker, Vec<String>, Option<Failure>)> {
        let entry = context::select_provider(&self.global, loaded)?.clone();
        // Status, returns and cancels work on stored requests even when the template file is
        // missing or broken; an acquire then finds no template and says which exist.
        let (catalog, warnings, catalog_failure) = match context::load_catalog(&self.dirs, &entry) {
            Ok(catalog) => {
                let warnings = catalog.notes();
                (catalog, warnings, None)
            }
            Err(failure) => (
                Default::default(),
                vec![failure.message.clone()],
                Some(failure),
            ),
        };
        let provider = match provider {
            Some(provider) => Some(provider),
            None => self.kubernetes_provider()?,
        };
        let store = self.open_store(loaded).await?;
        let provider_context = self.provider_context();
        let settings = BrokerSettings {
            provider_name: entry.name.clone(),
            provider_type: entry.provider_type.clone(),
            grace_secs: loaded.config.request.default_grace_period,
            max_machines_per_request: loaded.config.request.max_machines_per_request,
            default_max_machines: loaded.config.template.max_number,
        };
        // config.json's top-level sections (e.g. `native_spec.enabled`, the application half
        // of the native-spec switch) travel with the provider.
        let app_sections = loaded.config.other.clone();
        let broker = Broker {
            store,
            provider: match provider {
                Some(provider) => ProviderHandle::ready(provider),
                None => ProviderHandle::lazy(move || {
                    build_provider_for_app(&entry, &provider_context, &app_sections)
                }),
            },
            settings,
            catalog: orb_broker::catalog::CatalogCell::new(catalog),
            clock: Arc::new(jiff::Timestamp::now),
            refreshed: Default::default(),
        };
        Ok((broker, warnings, catalog_failure))
    }
}

/// A broker and what loading its template file said (`orb serve` shares its own broker).
pub struct BrokerEnv {
    pub broker: Arc<Broker>,
    /// Template-file warnings, or the reason the file could not be read (as the direct
    /// path has always reported it).
    pub warnings: Vec<String>,
    /// Why the template file could not be read; `getAvailableTemplates` fails with it.
    pub catalog_failure: Option<Failure>,
    /// `orb serve`'s big requests' machines as its last getRequestStatus replies wrote
    /// them; `None` in a process that answers one call.
    pub written: Option<WrittenMachines>,
}

/// A failed command: one `error:` line on stderr, its exit code, and for HostFactory a
/// `{"message": ...}` reply on stdout (HostFactory always parses one).
pub fn failure_output(failure: &Failure, hostfactory: bool) -> Output {
    let stdout = if hostfactory {
        render::json(&ErrorReply {
            message: failure.message.clone(),
        })
        .unwrap_or_default()
    } else {
        String::new()
    };
    Output {
        stdout,
        stderr: vec![format!("error: {}", failure.message)],
        exit: failure.code(),
    }
}
