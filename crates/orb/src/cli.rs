//! Command-line syntax (clap derive). Parsing happens before anything else is touched, so
//! `orb --version` and `orb --help` cost almost nothing.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Examples:
  orb init --namespace batch                      write a working config for the current kubeconfig
  orb templates list                              templates and how many machines each still allows
  orb machines request worker 3 --wait            ask for 3 machines and wait until they are ready
  orb requests status req-3f2b0c1e-...            where a request stands
  orb machines return orb-3f2b0c1e8a4d4c6b9e1f-0000
  orb --scheduler hostfactory requests status -f in.json   what HostFactory's getRequestStatus.sh runs
  orb hostfactory install $HF_TOP/conf/providers/kube      install the five HostFactory scripts

Exit codes: 0 success; 1 the call could not be served (or, with --scheduler hostfactory, the
request just created already failed, was cancelled, timed out or is partial); 2 invalid input,
nothing stored or created; 3 provider or cluster error.";

/// orb acquires and releases worker machines on Kubernetes (Pods, Deployments, StatefulSets
/// or Jobs) for HPC and grid schedulers such as IBM Spectrum Symphony HostFactory.
#[derive(Parser, Debug)]
#[command(name = "orb", version, about, long_about = None, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Output format for humans and scripts (HostFactory replies are always JSON).
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Json)]
    pub output: OutputFormat,

    /// Input/output conventions: `default` (snake_case) or `hostfactory` (the HostFactory
    /// provider interface, camelCase JSON). Defaults to the config's scheduler.type.
    #[arg(long, global = true, value_enum, env = "ORB_SCHEDULER")]
    pub scheduler: Option<SchedulerKind>,

    /// Read HostFactory JSON input from this file (what HostFactory passes to its scripts).
    /// For `templates validate`, the template file to check.
    #[arg(
        long,
        short = 'f',
        global = true,
        value_name = "PATH",
        conflicts_with = "data"
    )]
    pub file: Option<PathBuf>,

    /// HostFactory JSON input given inline, e.g. -d '{"requests":[{"requestId":"req-..."}]}'.
    #[arg(long, short = 'd', global = true, value_name = "JSON")]
    pub data: Option<String>,

    /// The config file (default: $ORB_CONFIG_FILE, else config.json in the config directory).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Which configured provider to use (default: $HF_PROVIDER_NAME, then the provider marked
    /// "default", then the first enabled one).
    #[arg(long, global = true, value_name = "NAME")]
    pub provider_name: Option<String>,

    /// Where HostFactory calls go: unix:PATH or http://HOST:PORT of a running `orb serve`,
    /// or `off` to always work in this process. Default: config.json's `daemon` section,
    /// else `orb serve`'s socket <work dir>/orb.sock when it exists. A daemon that does not
    /// answer is skipped with a note on stderr.
    #[arg(
        long,
        global = true,
        env = "ORB_DAEMON",
        value_name = "unix:PATH|URL|off"
    )]
    pub daemon: Option<String>,

    /// More log lines on stderr: -v adds info, -vv debug (also in the log file). Every call
    /// logs info and above to orb.log in the log directory; RUST_LOG replaces both filters.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerKind {
    Default,
    #[value(alias = "hf")]
    Hostfactory,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a working config.json and an example templates.json.
    #[command(
        after_help = "Examples:\n  orb init\n  orb init --kubeconfig ~/.kube/lab --context lab --namespace batch\n  orb init --local-control-plane --force"
    )]
    Init(InitArgs),
    /// List, show, check and generate machine templates.
    #[command(subcommand, visible_alias = "template")]
    Templates(TemplatesCommand),
    /// Request, return and list machines.
    #[command(subcommand, visible_alias = "machine")]
    Machines(MachinesCommand),
    /// Follow, list and cancel requests.
    #[command(subcommand, visible_alias = "request")]
    Requests(RequestsCommand),
    /// Show configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// HostFactory integration.
    #[command(subcommand)]
    Hostfactory(HostfactoryCommand),
    /// Check that the Kubernetes provider can work against its cluster: connectivity, server
    /// version, and every RBAC permission the configured features use.
    #[command(
        after_help = "Examples:\n  orb doctor -o table\n  orb doctor --provider-name lab\n\nExit code 0 when every check passes, 3 when any fails (each failure says how to fix it)."
    )]
    Doctor,
    /// Serve the REST API (/api/v1), probes and /metrics over HTTP.
    #[command(
        after_help = "Examples:\n  orb serve\n  orb serve --listen 0.0.0.0:8080\n  curl -s localhost:8080/api/v1/templates"
    )]
    Serve(ServeArgs),
    /// Start, stop or check the server the way the reference broker's SDKs manage it
    /// (`orb --config PATH server start --foreground --api-only --socket-path S`).
    #[command(subcommand)]
    Server(ServerCommand),
    /// Serve the broker to AI assistants over the Model Context Protocol (stdio), or check
    /// its tool list.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Print a shell completion script, e.g. `orb completions bash > /etc/bash_completion.d/orb`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// True for the commands that run the long-lived daemon (`serve`, `server start`).
    pub fn runs_the_daemon(&self) -> bool {
        matches!(
            self,
            Command::Serve(_) | Command::Server(ServerCommand::Start(_))
        )
    }
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub listen: std::net::SocketAddr,
    /// Require a Bearer token on every API route, checked with the Kubernetes TokenReview
    /// API (probes, /metrics and the OpenAPI document stay open). The provider setting
    /// inbound_auth_enabled (or ORB_K8S_INBOUND_AUTH_ENABLED=true) turns it on too.
    #[arg(long)]
    pub auth_token_review: bool,
    /// Who gets which role: NAMESPACE:SERVICEACCOUNT=ROLE, *:SERVICEACCOUNT=ROLE or
    /// USERNAME=ROLE, with ROLE viewer, operator or admin. Repeatable; adds to (and for the
    /// same WHO replaces) config.json's serve.auth.roles.
    #[arg(long = "auth-role", value_name = "WHO=ROLE")]
    pub auth_roles: Vec<String>,
    /// Role of authenticated callers no role mapping names (default: config.json's
    /// serve.auth.default_role, else none: they get 403).
    #[arg(long, value_name = "ROLE")]
    pub auth_default_role: Option<String>,
    /// Kubeconfig for the TokenReview calls (default: the provider's Kubernetes connection).
    #[arg(long, value_name = "PATH")]
    pub auth_kubeconfig: Option<PathBuf>,
    /// Also serve the API on this Unix socket, for the HostFactory scripts (default:
    /// config.json's daemon.socket, else <work dir>/orb.sock). Only the owner may connect
    /// (mode 0600); it needs no Bearer token.
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    pub socket: Option<PathBuf>,
    /// Serve no Unix socket; the HostFactory scripts then work directly.
    #[arg(long)]
    pub no_socket: bool,
    /// Serve no web console at /ui/ (also config.json's serve.ui.enabled: false). The
    /// console is a client of the API, so turning it off changes no route under /api/v1.
    #[arg(long)]
    pub no_ui: bool,
    /// Hold a Kubernetes Lease (orb-serve-<provider> in the provider's namespace) so that of
    /// several replicas sharing one store only the leader runs orphan GC, timeout GC and the
    /// resume of interrupted acquires; every replica serves the API. Default: true with a
    /// PostgreSQL store, false with SQLite (one replica).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// Set by `orb server start --socket-path`: the whole API on the socket, no TCP listener.
    #[arg(skip)]
    pub socket_only: bool,
    /// Set by `orb server start`: the file that holds this process's pid while it serves.
    #[arg(skip)]
    pub pid_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ServerCommand {
    /// Start the server: `orb serve` with the reference broker's flags. Without
    /// --foreground it starts in the background, waits until it answers, and prints its pid.
    #[command(
        after_help = "Examples:\n  orb server start --foreground --port 8000\n  orb --config ./config.json server start --foreground --api-only --socket-path /tmp/orb.sock\n  orb server start && orb server status && orb server stop\n\nThe address comes from --host/--port, else config.json's server.host and server.port, else\n127.0.0.1:8080. The pid file is config.json's server.pid_file (relative to\nserver.working_dir, else the work directory), else <work dir>/orb-server.pid; a server started\nin the background logs to orb-server.log next to it."
    )]
    Start(ServerStartArgs),
    /// Stop the server the pid file names: SIGTERM, then wait for it to finish its calls.
    Stop,
    /// Whether the server the pid file names is running. Exit 0 when it is, 1 when not.
    Status,
}

#[derive(Subcommand, Debug, Clone, Copy)]
pub enum McpCommand {
    /// Speak MCP (JSON-RPC 2.0) on stdin and stdout until the client closes stdin. Each
    /// tool is one REST call of `orb serve`'s API, made in this process; its result is the
    /// JSON body REST answers. Logs go to stderr and orb.log, never to stdout.
    #[command(
        after_help = "Examples:\n  orb mcp serve\n  orb --config ./config.json mcp serve\n\nAn MCP client starts it, e.g. in a client's server list:\n  {\"command\": \"orb\", \"args\": [\"--config\", \"/etc/orb/config.json\", \"mcp\", \"serve\"]}\n\nTools: list_templates, get_template, request_machines, get_request_status,\nlist_requests, list_return_requests, return_machines, cancel_request, list_machines,\nget_machine_status, check_provider_health, list_providers (orb mcp validate prints them\nwith their arguments)."
    )]
    Serve,
    /// Build the tool list without a config or a cluster, check every tool's inputSchema,
    /// and print the list as JSON. Exit code 0 when it is sound, 1 when not.
    Validate,
}

#[derive(Args, Debug, Clone)]
pub struct ServerStartArgs {
    /// Run in this process until SIGTERM or Ctrl-C (what the SDKs' managed mode uses).
    #[arg(long)]
    pub foreground: bool,
    /// Serve only the API: no web console at /ui/ (the SDKs' managed mode passes it).
    #[arg(long)]
    pub api_only: bool,
    /// Serve the whole API as HTTP over this Unix socket (owner only, no token) and listen
    /// on no TCP port.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["port", "host"])]
    pub socket_path: Option<PathBuf>,
    /// TCP port (default: config.json's server.port, else 8080).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Address to bind (default: config.json's server.host, else 127.0.0.1).
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory to write into (default: the resolved config directory).
    #[arg(long, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Kubeconfig file for the provider (default: $KUBECONFIG, else ~/.kube/config at run time).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Use the repository's local control plane (its admin.kubeconfig under
    /// $ORB_CP_STATE_DIR, default ./.state/control-plane).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub local_control_plane: bool,
    /// Namespace for machines.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Container image of the example template.
    #[arg(long, default_value = "busybox:1.36")]
    pub image: String,
    /// Provider name written into the config.
    #[arg(long, default_value = "kubernetes")]
    pub name: String,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Subcommand, Debug)]
pub enum TemplatesCommand {
    /// List templates (HostFactory: getAvailableTemplates).
    List,
    /// Show one template.
    Show { template_id: String },
    /// Check a template file (-f PATH, default: the configured one); exit 2 if anything is wrong.
    /// For a Kubernetes provider it also renders each template's bodies (native spec or typed)
    /// and runs the security audit on them.
    #[command(
        after_help = "Examples:\n  orb templates validate\n  orb templates validate --server"
    )]
    Validate {
        /// Also submit each template's bodies to the apiserver with dryRun=All and report its
        /// verdict (exit 2 when it rejects one). Nothing is created.
        #[arg(long)]
        server: bool,
    },
    /// Print the exact Kubernetes body (or, for several objects, a v1 List) an acquire of
    /// TEMPLATE would send, with a placeholder request id. JSON, or YAML with -o yaml.
    #[command(
        after_help = "Examples:\n  orb templates render ml-worker\n  orb templates render ml-worker --count 3 -o yaml"
    )]
    Render {
        template_id: String,
        /// Machines the request asks for (Deployment/StatefulSet replicas, Job parallelism, or
        /// the number of Pods).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
    /// Print example templates for a provider API, ready to save as a templates file.
    Generate {
        /// Pod, Deployment, StatefulSet or Job.
        #[arg(long, default_value = "Pod")]
        provider_api: String,
        /// One example per provider API.
        #[arg(long, conflicts_with = "provider_api")]
        all_apis: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum MachinesCommand {
    /// Ask for COUNT machines of TEMPLATE (HostFactory: requestMachines).
    #[command(
        after_help = "Examples:\n  orb machines request worker 3\n  orb machines request worker 3 --wait --timeout 600\n  orb --scheduler hostfactory machines request -f in.json"
    )]
    Request {
        template_id: Option<String>,
        count: Option<u32>,
        /// Wait until the request finishes (a progress bar is shown on a terminal).
        #[arg(long)]
        wait: bool,
        /// Seconds to wait with --wait (default: request.default_timeout, 300).
        #[arg(long, requires = "wait", value_name = "SECONDS")]
        timeout: Option<u64>,
    },
    /// Give machines back, by id or host name, or all machines of a request
    /// (HostFactory: requestReturnMachines).
    #[command(
        after_help = "Examples:\n  orb machines return orb-3f2b0c1e8a4d4c6b9e1f-0000 orb-3f2b0c1e8a4d4c6b9e1f-0001\n  orb machines return --request-id req-3f2b0c1e-8a4d-4c6b-9e1f-0a2b3c4d5e6f"
    )]
    Return {
        machine_ids: Vec<String>,
        #[arg(long, conflicts_with = "machine_ids", value_name = "ID")]
        request_id: Option<String>,
    },
    /// List machines orb manages (live ones unless --all).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Forget the record of a machine that is gone (terminated or returned). Never touches
    /// the cluster: a live machine is refused; give it back with `orb machines return`.
    Purge { machine_id: String },
}

#[derive(Subcommand, Debug)]
pub enum RequestsCommand {
    /// Where requests stand (HostFactory: getRequestStatus).
    Status { request_ids: Vec<String> },
    /// Recent requests, newest first.
    List {
        /// How many to show.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Cancel an acquire request and delete what it created.
    Cancel { request_id: String },
    /// Machines the cluster is taking back on its own (HostFactory: getReturnRequests).
    ListReturns,
    /// Forget a finished request and its machine records, when none of its machines can
    /// still exist and no unfinished request holds one.
    Purge { request_id: String },
    /// Forget every finished request older than the age given, with its machine records,
    /// keeping (and naming) those a purge would refuse.
    #[command(
        after_help = "Examples:\n  orb requests cleanup --older-than-days 30 --dry-run\n  orb requests cleanup --older-than-days 7 --status failed --status cancelled"
    )]
    Cleanup {
        /// Requests that finished more than this many days ago.
        #[arg(
            long,
            value_name = "DAYS",
            required_unless_present = "older_than_seconds",
            conflicts_with = "older_than_seconds"
        )]
        older_than_days: Option<u32>,
        /// The same in seconds.
        #[arg(long, value_name = "SECONDS")]
        older_than_seconds: Option<u64>,
        /// Only requests in this finished status (repeatable; default: every finished one).
        #[arg(long = "status", value_name = "STATUS")]
        statuses: Vec<String>,
        /// Say what would go, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the configuration, where each directory came from, and the Kubernetes
    /// provider's effective settings (config.json < ORB_K8S_* env < template overrides).
    #[command(
        after_help = "Examples:\n  orb config show -o table\n  orb config show --origin -o table      which source set each provider value\n  ORB_K8S_NAMESPACE=batch orb config show --origin\n  orb config show --origin --template gpu-worker   with that template's provider_config overrides"
    )]
    Show {
        /// Say for every provider value where it came from: default, the config file, an
        /// ORB_K8S_* variable, or a template id.
        #[arg(long)]
        origin: bool,
        /// Apply this template's `provider_config` overrides on top (the third source).
        #[arg(long, value_name = "TEMPLATE_ID")]
        template: Option<String>,
    },
    /// Set one value in config.json and write the file atomically, after the checks `orb
    /// serve` makes at start: a value orb would not start with is refused and nothing is
    /// written. A running server keeps its configuration until it is restarted.
    #[command(
        after_help = "KEY is the place in config.json, with dots; list items by position.\nVALUE is JSON when it parses as JSON (600, true, {\"a\": 1}), else text.\n\nExamples:\n  orb config set request.default_timeout 600\n  orb config set providers.0.config.namespace batch\n  orb config set serve.ui.enabled false\n  orb --config /etc/orb/config.json config set logging.level INFO"
    )]
    Set {
        /// The place in config.json, e.g. request.default_timeout or
        /// providers.0.config.namespace.
        key: String,
        /// The new value: JSON when it parses (600, true, "text"), else the text itself.
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum HostfactoryCommand {
    /// Write the five HostFactory provider scripts into DIR.
    #[command(
        after_help = "Example:\n  orb hostfactory install $HF_TOP/conf/providers/kube --orb-path /usr/local/bin/orb"
    )]
    Install {
        dir: PathBuf,
        /// The orb binary the scripts run (default: this binary's path). $ORB_COMMAND
        /// overrides it when a script runs.
        #[arg(long, value_name = "PATH")]
        orb_path: Option<PathBuf>,
        /// Overwrite existing scripts.
        #[arg(long)]
        force: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "orb",
            "requests",
            "status",
            "--scheduler",
            "hf",
            "-f",
            "in.json",
            "-o",
            "yaml",
        ])
        .unwrap();
        assert_eq!(cli.global.scheduler, Some(SchedulerKind::Hostfactory));
        assert_eq!(cli.global.output, OutputFormat::Yaml);
        assert_eq!(cli.global.file, Some(PathBuf::from("in.json")));
    }

    #[test]
    fn timeout_needs_wait() {
        assert!(
            Cli::try_parse_from(["orb", "machines", "request", "t", "1", "--timeout", "5"])
                .is_err()
        );
    }
}
