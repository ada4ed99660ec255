//! `orb server start|stop|status`: the process contract of the reference broker's SDKs. Their
//! managed mode runs `orb --config PATH server start --foreground --api-only` with
//! `--socket-path S` or `--port N --host H`, and waits for the socket or port. `start` is
//! `orb serve` with those flags and config.json's `server` section; a pid file names the
//! running server so that `stop` and `status` find it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use serde::Deserialize;
use serde_json::{Value, json};

use super::command::DEFAULT_LISTEN;
use crate::cli::{ServeArgs, ServerCommand, ServerStartArgs};
use crate::failure::{CliResult, Failure};
use crate::render;
use crate::session::{Output, Session};

/// The pid file's name when config.json names none.
pub const DEFAULT_PID_FILE: &str = "orb-server.pid";
/// Where a server started in the background writes its log, next to its pid file.
const LOG_FILE: &str = "orb-server.log";
/// How long `start` waits for a background server to answer, and `stop` for it to exit.
const START_WAIT: Duration = Duration::from_secs(30);
const STOP_WAIT: Duration = Duration::from_secs(30);

/// config.json's `server` section, in the reference's shape. Fields it does not know are
/// ignored (the SDKs' configs carry more).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerSection {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub working_dir: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
}

impl ServerSection {
    /// The section of `config` (config.json's top-level sections orb has no type for);
    /// absent is the default. A section of the wrong shape says which field to fix.
    pub fn from_config(config: &std::collections::BTreeMap<String, Value>) -> Result<Self, String> {
        match config.get("server") {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(value) => serde_json::from_value(value.clone()).map_err(|e| {
                format!(
                    "config.json's \"server\" section is not valid ({e}); it takes host (text), \
                     port (a number from 1 to 65535), working_dir and pid_file (paths)"
                )
            }),
        }
    }

    /// The pid file: `pid_file` (relative to `working_dir`, else to `work_dir`), else
    /// `orb-server.pid` there.
    pub fn pid_file(&self, work_dir: &Path) -> PathBuf {
        let base = match &self.working_dir {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => work_dir.join(dir),
            None => work_dir.to_path_buf(),
        };
        match &self.pid_file {
            Some(file) if file.is_absolute() => file.clone(),
            Some(file) => base.join(file),
            None => base.join(DEFAULT_PID_FILE),
        }
    }

    /// The TCP address: the flags, else the section, else [`DEFAULT_LISTEN`].
    pub fn listen(
        &self,
        host: Option<&str>,
        port: Option<u16>,
    ) -> Result<std::net::SocketAddr, String> {
        let default: std::net::SocketAddr = DEFAULT_LISTEN.parse().map_err(|e| format!("{e}"))?;
        let host = host
            .or(self.host.as_deref())
            .map(str::to_string)
            .unwrap_or_else(|| default.ip().to_string());
        let port = port.or(self.port).unwrap_or(default.port());
        let text = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        use std::net::ToSocketAddrs;
        let why = match text.to_socket_addrs().map(|mut addrs| addrs.next()) {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => format!("{host} resolves to no address"),
            Err(e) => e.to_string(),
        };
        Err(format!(
            "cannot listen on {host}:{port} ({why}); pass --host with an IP address or a resolvable name"
        ))
    }
}

/// The top-level sections of config.json that orb reads besides its typed ones (providers,
/// provider, storage, request, scheduler, template), and `version`, which it need not read.
const KNOWN_SECTIONS: [&str; 6] = [
    "daemon",
    "serve",
    "server",
    "native_spec",
    "auth",
    "version",
];

/// What `orb serve` says at start-up about a config in the reference broker's shape: a
/// `storage.type` orb replaces, and sections it does not use. Errors for what it must not
/// ignore: an `auth.type` that would leave the API open if orb pretended to apply it.
pub fn config_warnings(config: &orb_core::config::AppConfig) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    match config.storage.other.get("type").and_then(Value::as_str) {
        None => {}
        Some("json") => warnings.push(
            "storage.type \"json\" is the reference broker's file store; orb keeps requests \
             and machines in its embedded SQLite database (storage.url sets another, e.g. \
             postgres://...)"
                .to_string(),
        ),
        Some(kind @ ("sqlite" | "sql" | "postgres" | "postgresql"))
            if config.storage.url.is_none() =>
        {
            warnings.push(format!(
                "storage.type {kind:?} without storage.url: orb uses its embedded SQLite \
                 database; set storage.url (sqlite://PATH or postgres://...) to choose"
            ));
        }
        Some("sqlite" | "sql" | "postgres" | "postgresql") => {}
        Some(other) => warnings.push(format!(
            "storage.type {other:?} is not a store orb has; it uses storage.url, else its \
             embedded SQLite database"
        )),
    }
    if let Some(auth) = config.other.get("auth") {
        match auth.get("type").and_then(Value::as_str) {
            // "bearer" is applied by the auth plan, which checks its bearer_token section.
            None | Some("none" | "bearer") => {}
            Some(kind) => {
                return Err(format!(
                    "auth.type {kind:?} is not supported, and orb will not serve the API without \
                     the authentication it asks for; use auth.type \"bearer\" (JWTs signed with \
                     auth.bearer_token.secret_key), serve.auth (Bearer tokens checked by the \
                     Kubernetes TokenReview API, see docs/rest-api.md) or auth.type \"none\""
                ));
            }
        }
    }
    for name in config.other.keys() {
        if !KNOWN_SECTIONS.contains(&name.as_str()) {
            warnings.push(format!(
                "config.json section {name:?} is not used by orb and is ignored{}",
                if name == "logging" {
                    " (orb serve logs at info; ORB_LOG=debug or ORB_LOG=warn changes it)"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(warnings)
}

/// Runs one `orb server` verb.
pub fn run(session: &Session, command: ServerCommand) -> CliResult<Output> {
    let loaded = session.config()?;
    let section = ServerSection::from_config(&loaded.config.other)
        .map_err(|e| Failure::invalid(format!("{}: {e}", loaded.file.display())))?;
    let pid_file = section.pid_file(&session.dirs.work_dir.path);
    match command {
        ServerCommand::Start(args) if args.foreground => {
            foreground(session, &section, &args, pid_file)
        }
        ServerCommand::Start(args) => background(session, &section, &args, &pid_file),
        ServerCommand::Stop => stop(&pid_file),
        ServerCommand::Status => status(&pid_file),
    }
}

/// `orb serve` with the reference's flags, in this process.
fn foreground(
    session: &Session,
    section: &ServerSection,
    args: &ServerStartArgs,
    pid_file: PathBuf,
) -> CliResult<Output> {
    let listen = section
        .listen(args.host.as_deref(), args.port)
        .map_err(Failure::invalid)?;
    let serve = ServeArgs {
        listen,
        auth_token_review: false,
        auth_roles: Vec::new(),
        auth_default_role: None,
        auth_kubeconfig: None,
        socket: args.socket_path.clone(),
        no_socket: false,
        no_ui: args.api_only,
        leader_elect: None,
        socket_only: args.socket_path.is_some(),
        pid_file: Some(pid_file),
    };
    super::command::run(session, serve)
}

/// Starts `orb … server start --foreground` as its own process group, logging to
/// `orb-server.log` next to the pid file, and waits until its pid file names it and it
/// answers on its socket or port.
fn background(
    session: &Session,
    section: &ServerSection,
    args: &ServerStartArgs,
    pid_file: &Path,
) -> CliResult<Output> {
    if let Some(pid) = running_pid(pid_file) {
        return Err(already_running(pid, pid_file));
    }
    let listen = section
        .listen(args.host.as_deref(), args.port)
        .map_err(Failure::invalid)?;
    let dir = pid_file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::generic(format!("cannot create {}: {e}", dir.display())))?;
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Failure::generic(format!("cannot open {}: {e}", log_path.display())))?;
    let log_err = log
        .try_clone()
        .map_err(|e| Failure::generic(format!("cannot open {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::generic(format!("cannot find the orb executable: {e}")))?;
    let mut command = Command::new(exe);
    // The child resolves its directories as this process did.
    command
        .env("ORB_CONFIG_FILE", &session.dirs.config_file.path)
        .env("ORB_CONFIG_DIR", &session.dirs.config_dir.path)
        .env("ORB_WORK_DIR", &session.dirs.work_dir.path)
        .env("ORB_LOG_DIR", &session.dirs.log_dir.path);
    if let Some(name) = &session.global.provider_name {
        command.args(["--provider-name", name]);
    }
    command.args(["server", "start", "--foreground"]);
    match &args.socket_path {
        Some(path) => {
            command.arg("--socket-path").arg(path);
        }
        None => {
            command
                .args(["--host", &listen.ip().to_string()])
                .args(["--port", &listen.port().to_string()]);
        }
    }
    use std::os::unix::process::CommandExt;
    command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let mut child = command
        .spawn()
        .map_err(|e| Failure::generic(format!("cannot start the server: {e}")))?;
    let deadline = Instant::now() + START_WAIT;
    loop {
        if let Ok(Some(exit)) = child.try_wait() {
            return Err(Failure::generic(format!(
                "the server exited during start-up ({exit}); the end of {}:\n{}",
                log_path.display(),
                tail(&log_path, 20)
            )));
        }
        let answering = match &args.socket_path {
            Some(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
            None => {
                std::net::TcpStream::connect_timeout(&listen, Duration::from_millis(200)).is_ok()
            }
        };
        if answering && read_pid(pid_file) == Some(child.id() as i32) {
            break;
        }
        if Instant::now() >= deadline {
            let _ = kill_process(pid_of(child.id() as i32)?, Signal::TERM);
            return Err(Failure::generic(format!(
                "the server did not answer within {} s, so it was stopped; the end of {}:\n{}",
                START_WAIT.as_secs(),
                log_path.display(),
                tail(&log_path, 20)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let address = match &args.socket_path {
        Some(path) => format!("unix:{}", path.display()),
        None => format!("http://{listen}"),
    };
    Ok(Output::ok(render::json(&json!({
        "running": true,
        "pid": child.id(),
        "address": address,
        "pid_file": pid_file,
        "log_file": log_path,
    }))?))
}

/// SIGTERM to the server the pid file names, then waits until it has exited. Stopping a
/// server that is not running succeeds (a stale pid file is removed).
fn stop(pid_file: &Path) -> CliResult<Output> {
    let Some(pid) = read_pid(pid_file) else {
        return Ok(Output::ok(render::json(&json!({
            "running": false,
            "message": format!("no server is running (no pid file at {})", pid_file.display()),
        }))?));
    };
    if !alive(pid) {
        let _ = std::fs::remove_file(pid_file);
        return Ok(Output::ok(render::json(&json!({
            "running": false,
            "message": format!("no server is running (pid {pid} has exited; its pid file was removed)"),
        }))?));
    }
    kill_process(pid_of(pid)?, Signal::TERM)
        .map_err(|e| Failure::generic(format!("cannot signal the server (pid {pid}): {e}")))?;
    let deadline = Instant::now() + STOP_WAIT;
    while alive(pid) {
        if Instant::now() >= deadline {
            return Err(Failure::generic(format!(
                "the server (pid {pid}) is still running {} s after SIGTERM; it may be finishing \
                 long calls. Check again with `orb server status`, or end it with kill -KILL {pid}",
                STOP_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Output::ok(render::json(&json!({
        "running": false,
        "pid": pid,
        "message": "stopped",
    }))?))
}

/// Whether the server the pid file names runs: exit 0 when it does, 1 when not.
fn status(pid_file: &Path) -> CliResult<Output> {
    match running_pid(pid_file) {
        Some(pid) => Ok(Output::ok(render::json(&json!({
            "running": true,
            "pid": pid,
            "pid_file": pid_file,
        }))?)),
        None => Ok(Output {
            exit: 1,
            ..Output::ok(render::json(&json!({
                "running": false,
                "pid_file": pid_file,
            }))?)
        }),
    }
}

fn read_pid(pid_file: &Path) -> Option<i32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

fn running_pid(pid_file: &Path) -> Option<i32> {
    read_pid(pid_file).filter(|pid| alive(*pid))
}

/// Why a start is refused: the pid file names a server that runs.
fn already_running(pid: i32, pid_file: &Path) -> Failure {
    Failure::invalid(format!(
        "a server is already running (pid {pid}, pid file {}); stop it with `orb server stop`",
        pid_file.display()
    ))
}

fn pid_of(pid: i32) -> CliResult<Pid> {
    Pid::from_raw(pid).ok_or_else(|| Failure::generic(format!("{pid} is not a process id")))
}

/// Whether a process with this pid runs (signal 0). A process of another user counts: it
/// exists, only this user may not signal it. A zombie does not: it has exited and waits for
/// its parent (e.g. an SDK that started it) to collect its status.
fn alive(pid: i32) -> bool {
    let exists = match Pid::from_raw(pid) {
        Some(p) => match test_kill_process(p) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        },
        None => false,
    };
    exists && !is_zombie(pid)
}

/// Linux: the state field of /proc/PID/stat (after the parenthesised command name) is `Z`.
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The last `lines` lines of a file, for a start-up failure.
fn tail(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Holds the pid file while the server runs and removes it at the end, if it still names
/// this process.
pub struct PidFile {
    path: PathBuf,
    pid: i32,
}

impl PidFile {
    /// Writes this process's pid to `path`; refuses when a live process already holds it.
    pub fn claim(path: &Path) -> CliResult<Self> {
        let pid = std::process::id() as i32;
        if let Some(other) = running_pid(path).filter(|other| *other != pid) {
            return Err(already_running(other, path));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::generic(format!("cannot create {}: {e}", dir.display())))?;
        }
        std::fs::write(path, format!("{pid}\n")).map_err(|e| {
            Failure::generic(format!("cannot write the pid file {}: {e}", path.display()))
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if read_pid(&self.path) == Some(self.pid) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn section(value: Value) -> Result<ServerSection, String> {
        let mut config = BTreeMap::new();
        config.insert("server".to_string(), value);
        ServerSection::from_config(&config)
    }

    #[test]
    fn the_sdks_server_section_reads_and_extra_fields_are_ignored() {
        let s = section(
            json!({"host": "0.0.0.0", "port": 8000, "working_dir": "/srv/orb",
            "pid_file": "orb.pid", "workers": 4}),
        )
        .unwrap();
        assert_eq!(s.listen(None, None).unwrap().to_string(), "0.0.0.0:8000");
        assert_eq!(
            s.pid_file(Path::new("/work")),
            Path::new("/srv/orb/orb.pid")
        );
        assert_eq!(
            s.listen(Some("127.0.0.1"), Some(9000)).unwrap().to_string(),
            "127.0.0.1:9000",
            "flags win over the section"
        );
    }

    #[test]
    fn without_a_section_the_defaults_apply() {
        let s = ServerSection::from_config(&BTreeMap::new()).unwrap();
        assert_eq!(s.listen(None, None).unwrap().to_string(), DEFAULT_LISTEN);
        assert_eq!(
            s.pid_file(Path::new("/work")),
            Path::new("/work/orb-server.pid")
        );
        let relative = section(json!({"working_dir": "run"})).unwrap();
        assert_eq!(
            relative.pid_file(Path::new("/work")),
            Path::new("/work/run/orb-server.pid")
        );
    }

    #[test]
    fn a_bad_section_says_which_fields_it_takes() {
        let err = section(json!({"port": "eighty"})).unwrap_err();
        assert!(err.contains("port (a number from 1 to 65535)"), "{err}");
        let err = section(json!({"port": 70000})).unwrap_err();
        assert!(err.contains("\"server\" section is not valid"), "{err}");
    }

    fn app_config(value: Value) -> orb_core::config::AppConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_reference_config_shape_warns_about_what_orb_replaces_or_ignores() {
        let config = app_config(json!({
            "version": "2.0.0",
            "provider": {"providers": []},
            "storage": {"type": "json"},
            "server": {"port": 8000},
            "auth": {"type": "none"},
            "logging": {"level": "ERROR"},
            "metrics_exporter": {},
        }));
        let warnings = config_warnings(&config).unwrap();
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(
            warnings[0].contains("storage.type \"json\""),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("\"logging\" is not used") && warnings[1].contains("ORB_LOG"));
        assert!(warnings[2].contains("\"metrics_exporter\" is not used"));
        assert!(config_warnings(&app_config(json!({}))).unwrap().is_empty());
    }

    #[test]
    fn an_auth_type_orb_cannot_apply_stops_the_server() {
        let err = config_warnings(&app_config(json!({"auth": {"type": "oauth2"}}))).unwrap_err();
        assert!(
            err.contains("auth.type \"oauth2\" is not supported"),
            "{err}"
        );
        assert!(
            err.contains("serve.auth") && err.contains("\"bearer\""),
            "{err}"
        );
        assert!(config_warnings(&app_config(json!({"auth": {"type": "bearer"}}))).is_ok());
    }

    #[test]
    fn a_pid_file_of_a_live_process_is_not_taken_and_is_removed_only_by_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("orb.pid");
        let held = PidFile::claim(&path).unwrap();
        assert_eq!(read_pid(&path), Some(std::process::id() as i32));
        // pid 1 is alive on every Linux system.
        std::fs::write(&path, "1\n").unwrap();
        let err = PidFile::claim(&path).err().expect("pid 1 holds it");
        assert!(
            err.message.contains("already running (pid 1"),
            "{}",
            err.message
        );
        drop(held);
        assert!(
            path.exists(),
            "the file names another process now, so it stays"
        );
    }
}
