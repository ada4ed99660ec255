//! Outbound authentication: a pure decision ([`plan_auth`]) over the config and an injectable
//! view of the process environment, then a thin async step that builds the `kube::Client`.
//!
//! Decision matrix (`in_cluster` × service-account sentinel):
//! - `true`: in-cluster; an error when the sentinel directory is missing.
//! - `false`: kubeconfig.
//! - unset: kubeconfig when `kubeconfig_path` or `context` is set explicitly (they only make
//!   sense for a kubeconfig), otherwise in-cluster when the sentinel exists, else kubeconfig.
//!
//! Kubeconfig lookup: `kubeconfig_path` → `KUBECONFIG` (a path list, merged) → `~/.kube/config`.
//! Exec credential plugins in the kubeconfig are run by kube itself.

use std::fmt;
use std::path::{Path, PathBuf};

use kube::config::{Config, InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};

use super::model::K8sProviderConfig;

/// Present when the pod has service-account credentials mounted.
pub const IN_CLUSTER_SENTINEL: &str = "/var/run/secrets/kubernetes.io";
/// Relative to the sentinel: the file holding the pod's namespace.
const SERVICE_ACCOUNT_NAMESPACE_FILE: &str = "serviceaccount/namespace";
/// Namespace used out of cluster when nothing else names one.
pub const FALLBACK_NAMESPACE: &str = "default";

/// The facts auth depends on, gathered once so the decision itself stays pure and testable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthEnvironment {
    /// Value of `KUBECONFIG`, if set.
    pub kubeconfig_env: Option<String>,
    /// The user's home directory (for `~/.kube/config`).
    pub home_dir: Option<PathBuf>,
    /// Path checked for in-cluster auto-detection.
    pub sentinel: PathBuf,
    pub sentinel_present: bool,
    /// Trimmed contents of the service account's namespace file, when readable and non-empty.
    pub service_account_namespace: Option<String>,
}

impl AuthEnvironment {
    /// Reads the real process environment and the standard sentinel path.
    pub fn detect() -> Self {
        Self::detect_at(Path::new(IN_CLUSTER_SENTINEL))
    }

    /// Like [`Self::detect`] with another sentinel directory (tests, unusual mounts).
    pub fn detect_at(sentinel: &Path) -> Self {
        let namespace = std::fs::read_to_string(sentinel.join(SERVICE_ACCOUNT_NAMESPACE_FILE))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Self {
            kubeconfig_env: std::env::var("KUBECONFIG").ok(),
            home_dir: std::env::var_os("HOME").map(PathBuf::from),
            sentinel: sentinel.to_path_buf(),
            sentinel_present: sentinel.is_dir(),
            service_account_namespace: namespace,
        }
    }
}

/// Which setting chose the kubeconfig file(s), for messages that say what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// `kubeconfig_path` (`ORB_K8S_KUBECONFIG_PATH`).
    ConfigField,
    /// The `KUBECONFIG` environment variable.
    KubeconfigEnv,
    /// `~/.kube/config`.
    HomeDefault,
}

impl fmt::Display for KubeconfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConfigField => "kubeconfig_path",
            Self::KubeconfigEnv => "KUBECONFIG",
            Self::HomeDefault => "~/.kube/config",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthPlan {
    /// Service-account token and CA from the pod. `forced` when `in_cluster=true`.
    InCluster { forced: bool },
    /// One or more kubeconfig files (several only via `KUBECONFIG`, merged first-wins).
    Kubeconfig {
        paths: Vec<PathBuf>,
        source: KubeconfigSource,
        context: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "in_cluster=true but {} does not exist, so orb is not running in a pod with a service \
         account; set in_cluster=false (ORB_K8S_IN_CLUSTER=false) and use a kubeconfig, or run \
         orb in the cluster", sentinel.display()
    )]
    InClusterNotAvailable { sentinel: PathBuf },
    #[error(
        "no kubeconfig to use: kubeconfig_path and KUBECONFIG are unset and the home directory \
         is unknown; set ORB_K8S_KUBECONFIG_PATH or KUBECONFIG"
    )]
    NoKubeconfig,
    #[error("cannot load kubeconfig {} (chosen by {source_setting}): {error}; fix the file or point {source_setting} at another one", path.display())]
    LoadKubeconfig {
        path: PathBuf,
        source_setting: KubeconfigSource,
        error: KubeconfigError,
    },
    #[error(
        "context {context:?} cannot be used: {error}; pick one listed by `kubectl config get-contexts` and set it in context (ORB_K8S_CONTEXT)"
    )]
    Context {
        context: String,
        error: KubeconfigError,
    },
    #[error("the kubeconfig ({}) cannot be turned into a client config: {error}; check its current context, cluster and user entries", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Kubeconfig {
        paths: Vec<PathBuf>,
        error: KubeconfigError,
    },
    #[error(
        "in-cluster auth failed: {0}; check KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT and the service-account mount, or set in_cluster=false"
    )]
    InCluster(#[source] InClusterError),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// Decides how to authenticate. Pure: all facts come from `env`.
pub fn plan_auth(cfg: &K8sProviderConfig, env: &AuthEnvironment) -> Result<AuthPlan, AuthError> {
    let explicit_kubeconfig = cfg.kubeconfig_path.is_some() || cfg.context.is_some();
    let in_cluster = match cfg.in_cluster {
        Some(true) if !env.sentinel_present => {
            return Err(AuthError::InClusterNotAvailable {
                sentinel: env.sentinel.clone(),
            });
        }
        Some(forced) => forced,
        None => env.sentinel_present && !explicit_kubeconfig,
    };
    if in_cluster {
        return Ok(AuthPlan::InCluster {
            forced: cfg.in_cluster == Some(true),
        });
    }
    let (paths, source) = if let Some(path) = &cfg.kubeconfig_path {
        (vec![path.clone()], KubeconfigSource::ConfigField)
    } else if let Some(paths) = env
        .kubeconfig_env
        .as_deref()
        .map(|value| {
            std::env::split_paths(value)
                .filter(|p| !p.as_os_str().is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|paths| !paths.is_empty())
    {
        (paths, KubeconfigSource::KubeconfigEnv)
    } else if let Some(home) = &env.home_dir {
        (
            vec![home.join(".kube").join("config")],
            KubeconfigSource::HomeDefault,
        )
    } else {
        return Err(AuthError::NoKubeconfig);
    };
    Ok(AuthPlan::Kubeconfig {
        paths,
        source,
        context: cfg.context.clone(),
    })
}

/// The namespace used when neither `namespace` nor `namespaces` names one: the service
/// account's namespace in-cluster, else `default`.
pub fn resolve_default_namespace(plan: &AuthPlan, env: &AuthEnvironment) -> String {
    match plan {
        AuthPlan::InCluster { .. } => env
            .service_account_namespace
            .clone()
            .unwrap_or_else(|| FALLBACK_NAMESPACE.to_string()),
        AuthPlan::Kubeconfig { .. } => FALLBACK_NAMESPACE.to_string(),
    }
}

/// Turns a plan into a `kube::Config` whose default namespace is `namespace`.
pub async fn kube_config_for(plan: &AuthPlan, namespace: &str) -> Result<Config, AuthError> {
    let mut config = match plan {
        AuthPlan::InCluster { .. } => Config::incluster().map_err(AuthError::InCluster)?,
        AuthPlan::Kubeconfig {
            paths,
            source,
            context,
        } => {
            let mut merged = Kubeconfig::default();
            for path in paths {
                let loaded = Kubeconfig::read_from(path)
                    .and_then(|file| merged.clone().merge(file))
                    .map_err(|error| AuthError::LoadKubeconfig {
                        path: path.clone(),
                        source_setting: *source,
                        error,
                    })?;
                merged = loaded;
            }
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            Config::from_custom_kubeconfig(merged, &options)
                .await
                .map_err(|error| match (context, error) {
                    (Some(context), error @ KubeconfigError::LoadContext(_)) => {
                        AuthError::Context {
                            context: context.clone(),
                            error,
                        }
                    }
                    (_, error) => AuthError::Kubeconfig {
                        paths: paths.clone(),
                        error,
                    },
                })?
        }
    };
    config.default_namespace = namespace.to_string();
    // orb has exactly one retry layer of its own; kube's silent retry of 429/503/504 would
    // stack under it (reference defect 17) and hide the apiserver's real answers.
    config.default_retry = false;
    Ok(config)
}

/// Builds the client for `cfg` from the real environment. Its default namespace is the
/// provider's default namespace ([`K8sProviderConfig::default_namespace`]).
pub async fn build_kube_client(cfg: &K8sProviderConfig) -> Result<kube::Client, AuthError> {
    build_kube_client_with(cfg, &AuthEnvironment::detect()).await
}

/// [`build_kube_client`] with an explicit environment.
pub async fn build_kube_client_with(
    cfg: &K8sProviderConfig,
    env: &AuthEnvironment,
) -> Result<kube::Client, AuthError> {
    let plan = plan_auth(cfg, env)?;
    let namespace = cfg.default_namespace(&resolve_default_namespace(&plan, env));
    let config = kube_config_for(&plan, &namespace).await?;
    kube::Client::try_from(config).map_err(AuthError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn env(kubeconfig: Option<&str>, home: Option<&str>, sentinel: bool) -> AuthEnvironment {
        AuthEnvironment {
            kubeconfig_env: kubeconfig.map(str::to_string),
            home_dir: home.map(PathBuf::from),
            sentinel: PathBuf::from(IN_CLUSTER_SENTINEL),
            sentinel_present: sentinel,
            service_account_namespace: sentinel.then(|| "orb-system".to_string()),
        }
    }

    fn cfg(
        in_cluster: Option<bool>,
        path: Option<&str>,
        context: Option<&str>,
    ) -> K8sProviderConfig {
        K8sProviderConfig {
            in_cluster,
            kubeconfig_path: path.map(PathBuf::from),
            context: context.map(str::to_string),
            ..K8sProviderConfig::default()
        }
    }

    fn kubeconfig(paths: &[&str], source: KubeconfigSource, context: Option<&str>) -> AuthPlan {
        AuthPlan::Kubeconfig {
            paths: paths.iter().map(PathBuf::from).collect(),
            source,
            context: context.map(str::to_string),
        }
    }

    #[rstest]
    #[case::auto_in_pod(cfg(None, None, None), env(None, Some("/home/u"), true),
        AuthPlan::InCluster { forced: false })]
    #[case::auto_outside(cfg(None, None, None), env(None, Some("/home/u"), false),
        kubeconfig(&["/home/u/.kube/config"], KubeconfigSource::HomeDefault, None))]
    #[case::forced_in_pod(cfg(Some(true), None, None), env(None, None, true),
        AuthPlan::InCluster { forced: true })]
    #[case::forced_kubeconfig_in_pod(cfg(Some(false), None, None), env(Some("/k/a"), None, true),
        kubeconfig(&["/k/a"], KubeconfigSource::KubeconfigEnv, None))]
    #[case::explicit_path_beats_env(cfg(None, Some("/etc/orb/kubeconfig"), Some("prod")), env(Some("/k/a"), Some("/home/u"), true),
        kubeconfig(&["/etc/orb/kubeconfig"], KubeconfigSource::ConfigField, Some("prod")))]
    #[case::context_alone_means_kubeconfig(cfg(None, None, Some("dev")), env(None, Some("/home/u"), true),
        kubeconfig(&["/home/u/.kube/config"], KubeconfigSource::HomeDefault, Some("dev")))]
    #[case::kubeconfig_path_list(cfg(None, None, None), env(Some("/k/a::/k/b"), Some("/home/u"), false),
        kubeconfig(&["/k/a", "/k/b"], KubeconfigSource::KubeconfigEnv, None))]
    #[case::empty_kubeconfig_env_falls_back_to_home(cfg(None, None, None), env(Some(""), Some("/home/u"), false),
        kubeconfig(&["/home/u/.kube/config"], KubeconfigSource::HomeDefault, None))]
    fn decision_matrix(
        #[case] cfg: K8sProviderConfig,
        #[case] env: AuthEnvironment,
        #[case] expected: AuthPlan,
    ) {
        assert_eq!(plan_auth(&cfg, &env).unwrap(), expected);
    }

    #[test]
    fn forcing_in_cluster_outside_a_pod_is_an_error_with_the_fix() {
        let err = plan_auth(&cfg(Some(true), None, None), &env(None, None, false)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("in_cluster=true but /var/run/secrets/kubernetes.io does not exist"),
            "{text}"
        );
        assert!(text.contains("ORB_K8S_IN_CLUSTER=false"), "{text}");
    }

    #[test]
    fn no_kubeconfig_anywhere_is_an_error() {
        let err = plan_auth(&cfg(None, None, None), &env(None, None, false)).unwrap_err();
        assert!(matches!(err, AuthError::NoKubeconfig));
    }

    #[rstest]
    #[case::in_cluster_uses_service_account(AuthPlan::InCluster { forced: false }, true, "orb-system")]
    #[case::in_cluster_without_namespace_file(AuthPlan::InCluster { forced: false }, false, "default")]
    #[case::kubeconfig_uses_default(kubeconfig(&["/k"], KubeconfigSource::ConfigField, None), true, "default")]
    fn default_namespace_when_unset(
        #[case] plan: AuthPlan,
        #[case] sa_file: bool,
        #[case] expected: &str,
    ) {
        let mut env = env(None, None, true);
        if !sa_file {
            env.service_account_namespace = None;
        }
        assert_eq!(resolve_default_namespace(&plan, &env), expected);
    }

    #[test]
    fn detect_at_reads_the_service_account_namespace_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("serviceaccount")).unwrap();
        std::fs::write(dir.path().join("serviceaccount/namespace"), "team-a\n").unwrap();
        let detected = AuthEnvironment::detect_at(dir.path());
        assert!(detected.sentinel_present);
        assert_eq!(
            detected.service_account_namespace.as_deref(),
            Some("team-a")
        );
        let absent = AuthEnvironment::detect_at(&dir.path().join("missing"));
        assert!(!absent.sentinel_present);
        assert_eq!(absent.service_account_namespace, None);
    }

    const KUBECONFIG_YAML: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev
  cluster: { server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true }
- name: prod
  cluster: { server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true }
users:
- name: u
  user: { token: abc }
contexts:
- name: dev
  context: { cluster: dev, user: u, namespace: dev-ns }
- name: prod
  context: { cluster: prod, user: u }
"#;

    #[tokio::test]
    async fn kubeconfig_plan_selects_the_context_and_sets_the_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, KUBECONFIG_YAML).unwrap();
        let plan = AuthPlan::Kubeconfig {
            paths: vec![path.clone()],
            source: KubeconfigSource::ConfigField,
            context: Some("prod".into()),
        };
        let config = kube_config_for(&plan, "orb").await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(config.default_namespace, "orb");
    }

    #[tokio::test]
    async fn unknown_context_names_the_context_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, KUBECONFIG_YAML).unwrap();
        let plan = AuthPlan::Kubeconfig {
            paths: vec![path],
            source: KubeconfigSource::ConfigField,
            context: Some("staging".into()),
        };
        let err = kube_config_for(&plan, "orb").await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("context \"staging\" cannot be used"),
            "{text}"
        );
        assert!(text.contains("ORB_K8S_CONTEXT"), "{text}");
    }

    #[tokio::test]
    async fn missing_kubeconfig_file_names_the_path_and_the_setting() {
        let plan = AuthPlan::Kubeconfig {
            paths: vec![PathBuf::from("/nonexistent/kubeconfig")],
            source: KubeconfigSource::KubeconfigEnv,
            context: None,
        };
        let text = kube_config_for(&plan, "orb").await.unwrap_err().to_string();
        assert!(
            text.starts_with(
                "cannot load kubeconfig /nonexistent/kubeconfig (chosen by KUBECONFIG)"
            ),
            "{text}"
        );
    }
}
