//! Shared fixture for integration tests that run against the local Kubernetes control plane
//! (`tools/control-plane/cp up`). Each test gets its own namespace, removed when the test ends
//! (pass or panic), and `wait_for` turns "eventually" into a bounded wait whose failure message
//! says what was expected and what was last seen.
//!
//! The fixture never fakes the cluster: if no control plane answers, `TestCluster::connect`
//! fails the test with instructions instead of skipping it. Tests that use it carry
//! `#[ignore = "needs the local control plane; ..."]`, so plain `cargo test` lists them as
//! ignored and passes; `./scripts/test.sh` (or `cargo test -- --include-ignored`) runs them.

pub mod audit;
pub mod drain;
pub mod fault_proxy;
pub mod helm;
pub mod identity;
pub mod misbehave;
mod nodes;
pub mod pod_sandbox;
pub mod pod_template;
pub mod soak;

pub use nodes::{NodeDown, NodeOutage, TEST_NODE_KEY, TestNode};

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Where `cp up` writes the admin kubeconfig when `KUBECONFIG` is not set.
pub fn default_kubeconfig_path() -> PathBuf {
    if let Ok(p) = std::env::var("KUBECONFIG") {
        return PathBuf::from(p);
    }
    let state = std::env::var("ORB_CP_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.state/control-plane")
        });
    state.join("admin.kubeconfig")
}

/// A connection to the running local control plane.
#[derive(Clone)]
pub struct TestCluster {
    pub client: Client,
    pub kubeconfig: PathBuf,
}

impl TestCluster {
    /// Connects with the local control plane's admin kubeconfig; fails loudly when it is not up.
    pub async fn connect() -> TestCluster {
        let kubeconfig = default_kubeconfig_path();
        let client = client_from(&kubeconfig).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach the local control plane with kubeconfig {}: {e:#}\n\
                 start it with `tools/control-plane/cp up` (or run the whole suite with `./scripts/test.sh`)",
                kubeconfig.display()
            )
        });
        if let Err(e) = client.apiserver_version().await {
            panic!(
                "the apiserver named in {} does not answer: {e}\n\
                 start it with `tools/control-plane/cp up`",
                kubeconfig.display()
            );
        }
        TestCluster { client, kubeconfig }
    }

    /// Creates a fresh namespace `<prefix>-<random>` and waits for its `default` ServiceAccount,
    /// so pods created right away are admitted.
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        let name = format!(
            "{}-{}",
            prefix.to_ascii_lowercase(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("orb-rs.io/test".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating test namespace {name}: {e}"));
        let guard = TestNamespace {
            name: name.clone(),
            kubeconfig: self.kubeconfig.clone(),
            delete_on_drop: std::env::var("ORB_TEST_KEEP_NAMESPACES").is_err(),
            owner: true,
        };
        let sa: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &name);
        wait_for(
            &format!("ServiceAccount default in namespace {name}"),
            Duration::from_secs(60),
            || {
                let sa = sa.clone();
                async move {
                    match sa.get_opt("default").await {
                        Ok(Some(_)) => Check::Done(()),
                        Ok(None) => Check::NotYet("not created yet".into()),
                        Err(e) => Check::NotYet(format!("error: {e}")),
                    }
                }
            },
        )
        .await;
        guard
    }
}

/// Builds a client from a kubeconfig file (current context).
pub async fn client_from(kubeconfig: &std::path::Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    // Tests must see the apiserver's answers as they are (a 429 from the eviction API is the
    // behaviour under test), so kube's built-in retry of 429/503/504 is off.
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

/// A namespace owned by one test; deleted on drop unless `ORB_TEST_KEEP_NAMESPACES` is set.
pub struct TestNamespace {
    pub name: String,
    kubeconfig: PathBuf,
    delete_on_drop: bool,
    owner: bool,
}

impl TestNamespace {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second handle on a namespace another guard owns: it names the namespace and never
    /// deletes it (for helpers that hold a `TestNamespace` by value).
    pub fn detached(name: &str) -> TestNamespace {
        TestNamespace {
            name: name.to_string(),
            kubeconfig: PathBuf::new(),
            delete_on_drop: false,
            owner: false,
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if !self.delete_on_drop {
            if self.owner {
                eprintln!(
                    "keeping test namespace {} (ORB_TEST_KEEP_NAMESPACES)",
                    self.name
                );
            }
            return;
        }
        // Drop cannot await, and the test's runtime may be shutting down (or panicking), so the
        // delete runs on a runtime of its own in a helper thread. Deletion is asynchronous in the
        // cluster; we only make sure the request was sent.
        let name = self.name.clone();
        let kubeconfig = self.kubeconfig.clone();
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(rt) = rt else { return };
            rt.block_on(async move {
                if let Ok(client) = client_from(&kubeconfig).await {
                    let api: Api<Namespace> = Api::all(client);
                    let _ = api.delete(&name, &DeleteParams::background()).await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// One observation of a condition being waited for.
pub enum Check<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; the text says what was seen, for the timeout message.
    NotYet(String),
}

/// Polls `probe` every 250 ms until it reports `Done`, or panics after `timeout` with
/// "timed out after Ns waiting for <what>; last seen: <observation>".
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Check<T>>,
{
    let start = Instant::now();
    loop {
        let last = match probe().await {
            Check::Done(v) => return v,
            Check::NotYet(seen) => seen,
        };
        if start.elapsed() >= timeout {
            panic!(
                "timed out after {:.0?} waiting for {what}; last seen: {last}",
                timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A loopback TCP port free at the time of the call, for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_value_once_the_probe_is_done() {
        let mut calls = 0;
        let v = wait_for("third call", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move {
                if n >= 3 {
                    Check::Done(n)
                } else {
                    Check::NotYet(format!("call {n}"))
                }
            }
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for never; last seen: still no")]
    async fn wait_for_names_the_expectation_and_last_observation_on_timeout() {
        wait_for::<(), _, _>("never", Duration::from_millis(300), || async {
            Check::NotYet("still no".into())
        })
        .await;
    }
}
