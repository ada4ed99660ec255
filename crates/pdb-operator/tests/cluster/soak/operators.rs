//! The two `pdb-operator run` replicas of the soak: the real binary as the shipped
//! ServiceAccount, leader election on in the soak's namespace, each logging to a file.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use pdb_operator::runtime::LEASE_NAME;

use super::Soak;

pub(crate) struct Replica {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

pub(crate) struct Operators {
    kubeconfig: PathBuf,
    ns: String,
    pub replicas: Vec<Replica>,
    starts: u32,
}

impl Operators {
    pub fn start(kubeconfig: PathBuf, ns: &str) -> Operators {
        let mut ops = Operators {
            kubeconfig,
            ns: ns.to_string(),
            replicas: Vec::new(),
            starts: 0,
        };
        for base in ["replica-a", "replica-b"] {
            let r = ops.spawn(base);
            ops.replicas.push(r);
        }
        ops
    }

    /// One replica with the defaults but for the namespace it watches and holds its Lease in,
    /// and the health port (two replicas share this host). Each start is a new identity
    /// `<base>-<n>`, as a restarted pod gets a new name.
    fn spawn(&mut self, base: &str) -> Replica {
        self.starts += 1;
        let name = format!("{base}-{}", self.starts);
        let log = std::env::temp_dir().join(format!("{}-{name}.log", self.ns));
        let file = std::fs::File::create(&log).expect("the replica's log file");
        let child = Command::new(env!("CARGO_BIN_EXE_pdb-operator"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("POD_NAME", &name)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "info,kube=warn")
            .args([
                "run",
                "--leader-elect",
                "--leader-election-namespace",
                &self.ns,
                "--watch-namespace",
                &self.ns,
                "--health-probe-bind-address",
                "0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("starting the pdb-operator binary");
        Replica { name, child, log }
    }

    /// The Lease holder, if any.
    pub async fn leader(soak: &Soak) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(soak.admin.clone(), &soak.ns);
        leases
            .get_opt(LEASE_NAME)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }

    /// Waits up to 60 s for a leader other than `not`; returns it and how long it took.
    pub async fn wait_leader(soak: &Soak, not: Option<&str>) -> Option<(String, Duration)> {
        let since = Instant::now();
        while since.elapsed() < Duration::from_secs(60) {
            if let Some(l) = Self::leader(soak).await
                && Some(l.as_str()) != not
            {
                return Some((l, since.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        None
    }

    /// Ends replica `name` with `signal` and starts it again under a new identity.
    pub fn restart(&mut self, name: &str, signal: &str) {
        let i = self
            .replicas
            .iter()
            .position(|r| r.name == name)
            .expect("a replica of that name");
        let pid = self.replicas[i].child.id().to_string();
        let _ = Command::new("kill").args([signal, &pid]).status();
        let _ = self.replicas[i].child.wait();
        let base = name.rsplit_once('-').map_or(name, |(b, _)| b).to_string();
        self.replicas[i] = self.spawn(&base);
    }

    /// A replica that exited on its own: its name, exit and log.
    pub fn exited(&mut self) -> Option<String> {
        self.replicas
            .iter_mut()
            .find_map(|r| match r.child.try_wait() {
                Ok(Some(exit)) => Some(format!(
                    "{} exited ({exit}); log {}",
                    r.name,
                    r.log.display()
                )),
                _ => None,
            })
    }

    /// (replica, RSS in KiB) of each running replica, from /proc.
    pub fn rss(&self) -> Vec<(String, u64)> {
        self.replicas
            .iter()
            .filter_map(|r| {
                let status =
                    std::fs::read_to_string(format!("/proc/{}/status", r.child.id())).ok()?;
                let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
                let kib = line.split_whitespace().nth(1)?.parse().ok()?;
                Some((r.name.clone(), kib))
            })
            .collect()
    }

    pub fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| r.log.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Drop for Operators {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}
