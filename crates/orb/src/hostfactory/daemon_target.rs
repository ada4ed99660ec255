//! Which `orb serve` (if any) a HostFactory call goes to: `--daemon` / `ORB_DAEMON`, then
//! config.json's `daemon` section, then the default socket `<work dir>/orb.sock` when it
//! exists. Pure: the caller supplies the values and whether the default socket exists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::failure::ConfigMistake;

/// The socket `orb serve` listens on and the scripts look for when nothing else is set.
pub const DEFAULT_SOCKET_FILE: &str = "orb.sock";

/// How to reach a daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonTarget {
    /// A Unix domain socket (no authentication; the file is only the owner's).
    Unix(PathBuf),
    /// Plain HTTP to `HOST:PORT` (with `daemon.token_file` when the daemon requires tokens).
    Http(String),
}

impl std::fmt::Display for DaemonTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
            Self::Http(authority) => write!(f, "http://{authority}"),
        }
    }
}

/// config.json's `daemon` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSection {
    /// `false`: the scripts always work directly and `orb serve` opens no socket unless
    /// `--socket` asks for one. Default `true`.
    pub enabled: Option<bool>,
    /// The Unix socket `orb serve` listens on and the scripts use
    /// (default `<work dir>/orb.sock`).
    pub socket: Option<PathBuf>,
    /// A daemon reached over plain HTTP instead, `http://HOST:PORT`.
    pub url: Option<String>,
    /// A file holding the Bearer token sent with every call (an `orb serve` with inbound
    /// auth, reached over HTTP). Read on every call, so a rotated token is picked up.
    pub token_file: Option<PathBuf>,
    /// How long a script waits for the daemon to accept the connection (default 500).
    pub connect_timeout_ms: Option<u64>,
    /// How long a script waits for the daemon's reply (default 120).
    pub reply_timeout_secs: Option<u64>,
}

const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 500;
const DEFAULT_REPLY_TIMEOUT_SECS: u64 = 120;

impl DaemonSection {
    /// Reads and checks the `daemon` section of config.json's top-level sections.
    pub fn from_config(
        sections: &std::collections::BTreeMap<String, Value>,
    ) -> Result<Self, ConfigMistake> {
        let Some(value) = sections.get("daemon") else {
            return Ok(Self::default());
        };
        let section: Self = serde_json::from_value(value.clone()).map_err(|e| {
            format!(
                "config.json \"daemon\": {e}; the keys are enabled, socket, url, token_file, \
                 connect_timeout_ms and reply_timeout_secs"
            )
        })?;
        if section.socket.is_some() && section.url.is_some() {
            return Err(
                "config.json \"daemon\" sets both socket and url; keep one (socket for a daemon \
                 on this machine, url for one reached over HTTP)"
                    .into(),
            );
        }
        if let Some(url) = &section.url {
            parse_target(url).map_err(|e| format!("config.json \"daemon.url\": {e}"))?;
        }
        if let Some(socket) = &section.socket
            && socket.as_os_str().is_empty()
        {
            return Err("config.json \"daemon.socket\" is empty; give a file path".into());
        }
        if let Some(file) = &section.token_file
            && file.as_os_str().is_empty()
        {
            return Err(
                "config.json \"daemon.token_file\" is empty; give the path of the file that \
                 holds the token"
                    .into(),
            );
        }
        if matches!(section.connect_timeout_ms, Some(0 | 10_001..)) {
            return Err(
                "config.json \"daemon.connect_timeout_ms\" must be 1..=10000 (milliseconds)".into(),
            );
        }
        if matches!(section.reply_timeout_secs, Some(0 | 3601..)) {
            return Err(
                "config.json \"daemon.reply_timeout_secs\" must be 1..=3600 (seconds)".into(),
            );
        }
        Ok(section)
    }

    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(
            self.connect_timeout_ms
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
        )
    }

    pub fn reply_timeout(&self) -> Duration {
        Duration::from_secs(
            self.reply_timeout_secs
                .unwrap_or(DEFAULT_REPLY_TIMEOUT_SECS),
        )
    }

    /// The Bearer token of `token_file`, trimmed; `None` when no file is configured.
    pub fn token(&self) -> Result<Option<String>, ConfigMistake> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read the daemon token file {} (config.json daemon.token_file): {e}; \
                 write the token there (e.g. `kubectl create token <serviceaccount>`)",
                path.display()
            )
        })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(ConfigMistake(format!(
                "the daemon token file {} (config.json daemon.token_file) is empty; write the \
                 token there (e.g. `kubectl create token <serviceaccount>`)",
                path.display()
            )));
        }
        Ok(Some(token.to_string()))
    }

    /// The socket `orb serve` binds when no flag says otherwise; `None` when disabled.
    pub fn serve_socket(&self, work_dir: &Path) -> Option<PathBuf> {
        if !self.enabled() {
            return None;
        }
        Some(
            self.socket
                .clone()
                .unwrap_or_else(|| work_dir.join(DEFAULT_SOCKET_FILE)),
        )
    }
}

/// `unix:PATH`, an absolute socket path, or `http://HOST:PORT`.
pub fn parse_target(text: &str) -> Result<DaemonTarget, ConfigMistake> {
    let text = text.trim();
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("\"unix:\" names no socket; write unix:/path/to/orb.sock".into());
        }
        return Ok(DaemonTarget::Unix(PathBuf::from(path)));
    }
    if text.starts_with('/') {
        return Ok(DaemonTarget::Unix(PathBuf::from(text)));
    }
    if let Some(rest) = text.strip_prefix("http://") {
        let authority = rest.trim_end_matches('/');
        let valid = authority
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !valid || authority.contains('/') {
            return Err(ConfigMistake(format!(
                "{text:?} is not http://HOST:PORT (e.g. http://127.0.0.1:8080)"
            )));
        }
        return Ok(DaemonTarget::Http(authority.to_string()));
    }
    if text.starts_with("https://") {
        return Err(ConfigMistake(format!(
            "{text:?}: the scripts speak plain HTTP only; use the daemon's Unix socket \
             (unix:/path/to/orb.sock) or an http:// address"
        )));
    }
    Err(ConfigMistake(format!(
        "{text:?} is not a daemon address; write unix:/path/to/orb.sock, http://HOST:PORT, or off"
    )))
}

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Run the operation in this process.
    Direct,
    /// Forward it; `origin` says who asked for this daemon (for the fallback note).
    Daemon {
        target: DaemonTarget,
        origin: &'static str,
    },
}

/// Picks the daemon: the flag or `ORB_DAEMON` (`off` forces direct), then the config
/// section, then the default socket if `default_socket_exists`.
pub fn choose(
    requested: Option<&str>,
    section: &DaemonSection,
    default_socket: &Path,
    default_socket_exists: bool,
) -> Result<Choice, ConfigMistake> {
    if let Some(value) = requested {
        if value.trim().eq_ignore_ascii_case("off") {
            return Ok(Choice::Direct);
        }
        let target = parse_target(value).map_err(|e| format!("--daemon / ORB_DAEMON: {e}"))?;
        return Ok(Choice::Daemon {
            target,
            origin: "--daemon / ORB_DAEMON",
        });
    }
    if !section.enabled() {
        return Ok(Choice::Direct);
    }
    if let Some(url) = &section.url {
        return Ok(Choice::Daemon {
            target: parse_target(url)?,
            origin: "config.json daemon.url",
        });
    }
    if let Some(socket) = &section.socket {
        return Ok(Choice::Daemon {
            target: DaemonTarget::Unix(socket.clone()),
            origin: "config.json daemon.socket",
        });
    }
    if default_socket_exists {
        return Ok(Choice::Daemon {
            target: DaemonTarget::Unix(default_socket.to_path_buf()),
            origin: "the default socket",
        });
    }
    Ok(Choice::Direct)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn section(value: Value) -> Result<DaemonSection, ConfigMistake> {
        DaemonSection::from_config(&[("daemon".to_string(), value)].into_iter().collect())
    }

    #[rstest]
    #[case("unix:/run/orb.sock", Ok(DaemonTarget::Unix("/run/orb.sock".into())))]
    #[case("/run/orb.sock", Ok(DaemonTarget::Unix("/run/orb.sock".into())))]
    #[case("http://127.0.0.1:8080", Ok(DaemonTarget::Http("127.0.0.1:8080".into())))]
    #[case("http://localhost:80/", Ok(DaemonTarget::Http("localhost:80".into())))]
    #[case("unix:", Err("names no socket"))]
    #[case("http://localhost", Err("is not http://HOST:PORT"))]
    #[case("http://h:1/api", Err("is not http://HOST:PORT"))]
    #[case("https://h:443", Err("plain HTTP only"))]
    #[case("orb.sock", Err("not a daemon address"))]
    fn targets_parse_or_say_what_to_write(
        #[case] text: &str,
        #[case] expected: Result<DaemonTarget, &str>,
    ) {
        match (parse_target(text), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(got), Err(want)) => assert!(got.to_string().contains(want), "{got}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn the_flag_wins_then_config_then_an_existing_default_socket() {
        let default = Path::new("/work/orb.sock");
        let unix = |p: &str| DaemonTarget::Unix(p.into());
        let configured = section(json!({"socket": "/cfg.sock"})).unwrap();
        assert_eq!(
            choose(Some("unix:/flag.sock"), &configured, default, true),
            Ok(Choice::Daemon {
                target: unix("/flag.sock"),
                origin: "--daemon / ORB_DAEMON"
            })
        );
        assert_eq!(
            choose(Some("OFF"), &configured, default, true),
            Ok(Choice::Direct)
        );
        assert_eq!(
            choose(None, &configured, default, true),
            Ok(Choice::Daemon {
                target: unix("/cfg.sock"),
                origin: "config.json daemon.socket"
            })
        );
        let none = DaemonSection::default();
        assert_eq!(
            choose(None, &none, default, true),
            Ok(Choice::Daemon {
                target: unix("/work/orb.sock"),
                origin: "the default socket"
            })
        );
        assert_eq!(choose(None, &none, default, false), Ok(Choice::Direct));
        let disabled = section(json!({"enabled": false})).unwrap();
        assert_eq!(choose(None, &disabled, default, true), Ok(Choice::Direct));
        assert!(
            choose(Some("ftp://x"), &none, default, false)
                .unwrap_err()
                .to_string()
                .contains("--daemon / ORB_DAEMON")
        );
    }

    #[rstest]
    #[case(json!({"sokcet": "/x"}), "unknown field `sokcet`")]
    #[case(json!({"socket": "/x", "url": "http://h:1"}), "both socket and url")]
    #[case(json!({"url": "h:1"}), "daemon.url")]
    #[case(json!({"connect_timeout_ms": 0}), "1..=10000")]
    #[case(json!({"reply_timeout_secs": 5000}), "1..=3600")]
    #[case(json!({"enabled": "yes"}), "invalid type")]
    #[case(json!({"url": "http://h:1", "token_file": ""}), "daemon.token_file\" is empty")]
    fn a_bad_daemon_section_says_what_to_fix(#[case] value: Value, #[case] expected: &str) {
        let err = section(value).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn the_token_is_read_from_its_file_on_each_call() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let configured = section(json!({"url": "http://h:1", "token_file": file.clone()})).unwrap();
        let missing = configured.token().unwrap_err().to_string();
        assert!(
            missing.starts_with(&format!(
                "cannot read the daemon token file {}",
                file.display()
            )),
            "{missing}"
        );
        std::fs::write(&file, "  \n").unwrap();
        assert!(
            configured
                .token()
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        std::fs::write(&file, "eyJhbGciOi.first\n").unwrap();
        assert_eq!(
            configured.token().unwrap().as_deref(),
            Some("eyJhbGciOi.first")
        );
        std::fs::write(&file, "eyJhbGciOi.rotated").unwrap();
        assert_eq!(
            configured.token().unwrap().as_deref(),
            Some("eyJhbGciOi.rotated")
        );
        assert_eq!(DaemonSection::default().token(), Ok(None));
    }

    #[test]
    fn serve_binds_the_configured_or_default_socket_unless_disabled() {
        let work = Path::new("/w");
        assert_eq!(
            DaemonSection::default().serve_socket(work),
            Some(PathBuf::from("/w/orb.sock"))
        );
        let configured = section(json!({"socket": "/s.sock", "connect_timeout_ms": 50})).unwrap();
        assert_eq!(configured.serve_socket(work), Some("/s.sock".into()));
        assert_eq!(configured.connect_timeout(), Duration::from_millis(50));
        assert_eq!(
            section(json!({"enabled": false}))
                .unwrap()
                .serve_socket(work),
            None
        );
    }
}
