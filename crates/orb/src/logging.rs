//! Where a CLI or HostFactory call writes its log, like a HostFactory provider: every line at
//! `info` and above goes to `orb.log` in the log directory (`ORB_LOG_DIR`, else
//! `HF_PROVIDER_LOGDIR`, ...; see `orb config show`), and warnings also to stderr, except in a
//! HostFactory call, whose stdout and stderr belong to HostFactory. `-v` adds `info` to stderr,
//! `-vv` `debug` everywhere; `RUST_LOG` (or `ORB_LOG`) replaces both filters.
//!
//! The file is opened on the first line written, so a call that logs nothing never touches the
//! disk, and it is kept under [`MAX_LOG_BYTES`]: when it has grown past that at start, it is
//! renamed to `orb.log.1` (the one before that is dropped).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The log file's name in the log directory.
pub const LOG_FILE: &str = "orb.log";
/// Past this size the log is rotated at the next call's first line.
pub const MAX_LOG_BYTES: u64 = 10 * 1024 * 1024;

/// How a call logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPlan {
    pub file: Option<PathBuf>,
    pub file_filter: String,
    /// `None`: nothing on stderr (a HostFactory call).
    pub stderr_filter: Option<String>,
}

/// The plan for a call with `-v` given `verbose` times; `env_filter` is `RUST_LOG` or
/// `ORB_LOG` when set.
pub fn plan(log_dir: &Path, verbose: u8, hostfactory: bool, env_filter: Option<String>) -> LogPlan {
    // sqlx reports every statement slower than a second (a SQLite lock wait, a busy
    // PostgreSQL) as a warning: noise for a broker's user, so only its errors get through.
    let (file_default, stderr_default) = match verbose {
        0 => ("info,sqlx=error", "warn,sqlx=error"),
        1 => ("info,sqlx=error", "info,sqlx=error"),
        _ => ("debug", "debug"),
    };
    let file_filter = env_filter.clone().unwrap_or_else(|| file_default.into());
    let stderr_filter = (!hostfactory).then(|| env_filter.unwrap_or_else(|| stderr_default.into()));
    LogPlan {
        file: Some(log_dir.join(LOG_FILE)),
        file_filter,
        stderr_filter,
    }
}

/// Installs the plan as the process's subscriber (once; later calls are no-ops).
pub fn install(plan: &LogPlan) {
    let filter = |spec: &str| EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
    let file_layer = plan.file.as_ref().map(|path| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(LazyFile::new(path.clone()))
            .with_filter(filter(&plan.file_filter))
    });
    let stderr_layer = plan.stderr_filter.as_ref().map(|spec| {
        // Colours only for a terminal: a container's stderr goes to log collectors, which
        // would keep the escape codes.
        tracing_subscriber::fmt::layer()
            .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
            .with_writer(io::stderr)
            .without_time()
            .with_target(false)
            .with_filter(filter(spec))
    });
    use tracing_subscriber::Layer;
    let _ = tracing_subscriber::registry()
        .with(file_layer)
        .with(stderr_layer)
        .try_init();
}

/// `RUST_LOG`, else `ORB_LOG`, when set and not empty.
pub fn env_filter() -> Option<String> {
    ["RUST_LOG", "ORB_LOG"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
}

/// The log file, opened (and rotated) on the first write. A directory that cannot be made
/// or a file that cannot be opened loses the log lines, never the call.
#[derive(Clone)]
struct LazyFile {
    path: PathBuf,
    file: Arc<Mutex<Option<Option<File>>>>,
}

impl LazyFile {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: Arc::new(Mutex::new(None)),
        }
    }
}

fn open_rotated(path: &Path) -> Option<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ok()?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        let _ = std::fs::rename(path, PathBuf::from(old));
    }
    OpenOptions::new().create(true).append(true).open(path).ok()
}

impl Write for LazyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let file = slot.get_or_insert_with(|| open_rotated(&self.path));
        match file {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            Some(Some(f)) => f.flush(),
            _ => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for LazyFile {
    type Writer = LazyFile;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::quiet(0, false, None, "info,sqlx=error", Some("warn,sqlx=error"))]
    #[case::verbose(1, false, None, "info,sqlx=error", Some("info,sqlx=error"))]
    #[case::very_verbose(2, false, None, "debug", Some("debug"))]
    #[case::hostfactory_keeps_stderr_clean(2, true, None, "debug", None)]
    #[case::rust_log_wins(
        0,
        false,
        Some("orb_k8s=trace"),
        "orb_k8s=trace",
        Some("orb_k8s=trace")
    )]
    fn filters_follow_the_flags_and_rust_log(
        #[case] verbose: u8,
        #[case] hostfactory: bool,
        #[case] env: Option<&str>,
        #[case] file: &str,
        #[case] stderr: Option<&str>,
    ) {
        let plan = plan(
            Path::new("/var/log/orb"),
            verbose,
            hostfactory,
            env.map(String::from),
        );
        assert_eq!(plan.file, Some(PathBuf::from("/var/log/orb/orb.log")));
        assert_eq!(plan.file_filter, file);
        assert_eq!(plan.stderr_filter.as_deref(), stderr);
    }

    #[test]
    fn the_file_is_made_on_first_write_and_rotated_once_too_big() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join(LOG_FILE);
        let mut writer = LazyFile::new(path.clone());
        assert!(!path.exists(), "nothing written, nothing made");
        writer.write_all(b"first line\n").unwrap();
        writer.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first line\n");

        std::fs::write(&path, vec![b'x'; (MAX_LOG_BYTES + 1) as usize]).unwrap();
        let mut next = LazyFile::new(path.clone());
        next.write_all(b"after rotation\n").unwrap();
        next.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after rotation\n");
        let rotated = dir.path().join("logs").join("orb.log.1");
        assert_eq!(std::fs::metadata(rotated).unwrap().len(), MAX_LOG_BYTES + 1);
    }

    #[test]
    fn an_unwritable_log_dir_loses_lines_not_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, "a file where the log dir should be").unwrap();
        let mut writer = LazyFile::new(blocker.join(LOG_FILE));
        assert_eq!(writer.write(b"lost\n").unwrap(), 5);
    }
}
