//! Headless Chromium driven through chromedriver (WebDriver), for the console's browser tests
//! and its bench: Debian's `chromium` and `chromium-driver` (`./scripts/test.sh` installs them),
//! or `ORB_TEST_CHROMIUM` / `ORB_TEST_CHROMEDRIVER`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

fn binary(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.exists(),
        "{} not found: apt-get install chromium chromium-driver (./scripts/test.sh does), or \
         point {var} at it",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// chromedriver and one headless Chromium session in a fresh profile; both end when dropped.
pub struct Session {
    driver: Child,
    pub client: Client,
    _profile: tempfile::TempDir,
}

impl Session {
    /// Starts chromedriver on a free port and opens a session; a missing browser fails with
    /// the fix (never a skip).
    pub async fn start() -> Session {
        let chromium = binary("ORB_TEST_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = binary("ORB_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                // Headless as root on a machine without a network: no sandbox (root), and
                // none of Chromium's own calls home, which a closed network refuses.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--no-first-run",
                         "--disable-quic", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.path().display())],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        // chromedriver takes a moment to listen.
        let client = loop {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("chromedriver at {url} gave no session: {e}"),
            }
        };
        Session {
            driver,
            client,
            _profile: profile,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
