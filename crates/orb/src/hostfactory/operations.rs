//! The five operations as functions of (broker, input) → [`ScriptReply`]. The direct path and
//! `orb serve`'s `POST /api/v1/hostfactory/{operation}` both call [`run_operation`], so a
//! script prints the same bytes and exits with the same code whichever way it went.

use std::sync::Arc;

use orb_core::hostfactory::input::{
    MachineSelector, RequestMachinesInput, RequestStatusQuery, ReturnMachinesInput,
    ReturnRequestsQuery,
};
use orb_core::hostfactory::mapping::submit_message;
use orb_core::hostfactory::output::{
    ReclaimEntry, StatusReply, SubmitReply, request_status_entry, request_status_entry_written,
    return_requests_reply, template_entry, templates_reply, unknown_request_entry,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::WrittenMachines;
use crate::failure::{CliResult, Failure};
use crate::render;
use crate::session::{BrokerEnv, Output, failure_output};
use orb_broker::{Lookup, MachineKey, RequestView, UnknownNames};

/// One of the five HostFactory provider operations, named as HostFactory's scripts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    GetAvailableTemplates,
    RequestMachines,
    RequestReturnMachines,
    GetRequestStatus,
    GetReturnRequests,
}

impl Operation {
    pub const ALL: [Operation; 5] = [
        Self::GetAvailableTemplates,
        Self::RequestMachines,
        Self::RequestReturnMachines,
        Self::GetRequestStatus,
        Self::GetReturnRequests,
    ];

    /// The script name without `.sh`, as in the route `/api/v1/hostfactory/{operation}`.
    pub fn name(self) -> &'static str {
        match self {
            Self::GetAvailableTemplates => "getAvailableTemplates",
            Self::RequestMachines => "requestMachines",
            Self::RequestReturnMachines => "requestReturnMachines",
            Self::GetRequestStatus => "getRequestStatus",
            Self::GetReturnRequests => "getReturnRequests",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the call creates or deletes anything. Such a call is never repeated on the
    /// direct path once a daemon may have received it.
    pub fn changes_state(self) -> bool {
        matches!(self, Self::RequestMachines | Self::RequestReturnMachines)
    }
}

/// What a HostFactory script prints and returns: the `orb serve` reply of
/// `POST /api/v1/hostfactory/{operation}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScriptReply {
    /// Exactly what the script writes to stdout (one JSON document and a newline).
    pub stdout: String,
    /// Lines for stderr (warnings, errors); never part of the reply HostFactory parses.
    pub stderr: Vec<String>,
    /// The script's exit code.
    pub exit_code: i32,
}

/// The media type of a script reply's compact form, which the forwarding scripts ask for with
/// `Accept`: one line of JSON with `stderr` and `exit_code`, then stdout byte for byte. The
/// JSON form escapes stdout (itself a JSON document, 240 KB for a 500-machine status) into a
/// string and the script unescapes it again; the compact form copies it. A client that does
/// not ask gets the JSON form.
pub const SCRIPT_OUTPUT_MEDIA_TYPE: &str = "application/vnd.orb.script-output";

/// The first line of the compact form.
#[derive(Serialize, Deserialize)]
struct ScriptOutputHead {
    stderr: Vec<String>,
    exit_code: i32,
}

/// Why a daemon's compact script reply (a JSON line with stderr and exit code, then stdout)
/// could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScriptOutputError {
    #[error("no line with stderr and exit_code")]
    NoHead,
    #[error("the first line is not stderr and exit_code: {0}")]
    BadHead(serde_json::Error),
    #[error("stdout is not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
}

impl ScriptReply {
    /// The compact form (see [`SCRIPT_OUTPUT_MEDIA_TYPE`]) in one buffer, for tests: orb
    /// serve sends it as [`ScriptReply::into_script_output`]'s two parts.
    #[cfg(test)]
    pub fn to_script_output(&self) -> Vec<u8> {
        let mut bytes = self.script_output_head();
        bytes.extend_from_slice(self.stdout.as_bytes());
        bytes
    }

    /// The compact form in its two parts, the head line and stdout, so that a reply body
    /// can send stdout (megabytes for thousands of machines) without copying it.
    pub fn into_script_output(self) -> (Vec<u8>, String) {
        (self.script_output_head(), self.stdout)
    }

    fn script_output_head(&self) -> Vec<u8> {
        let head = ScriptOutputHead {
            stderr: self.stderr.clone(),
            exit_code: self.exit_code,
        };
        // Compact JSON never holds a raw newline, so the first one ends the head.
        let mut bytes = serde_json::to_vec(&head).unwrap_or_else(|_| b"{}".to_vec());
        bytes.push(b'\n');
        bytes
    }

    /// Reads the compact form; the error says what is wrong with it.
    pub fn from_script_output(bytes: &[u8]) -> Result<Self, ScriptOutputError> {
        let mut reader = ScriptOutputReader::with_size(bytes.len());
        reader.push(bytes);
        reader.finish()
    }

    /// A successful reply: `stdout`, nothing on stderr, exit 0.
    pub fn ok(stdout: String) -> Self {
        Self {
            stdout,
            stderr: Vec::new(),
            exit_code: 0,
        }
    }

    /// Adds a stderr line, if there is one.
    pub fn note(mut self, note: Option<String>) -> Self {
        self.stderr.extend(note);
        self
    }

    /// A failed call: the `{"message": ...}` reply HostFactory parses, one `error:` line and
    /// the failure's exit code.
    pub fn failure(failure: &Failure) -> Self {
        failure_output(failure, true).into()
    }
}

/// Reads a compact script reply piece by piece as it arrives: the head line, then stdout,
/// copied once into a buffer of its final size. A 5,000-machine status is a 3.7 MB reply;
/// gathering it whole and copying stdout out of it again made the forwarding script fault in
/// and copy fresh memory twice, a third of its time.
#[derive(Debug, Default)]
pub struct ScriptOutputReader {
    /// The whole reply's size, when told (`Content-Length`).
    size: usize,
    head: Vec<u8>,
    /// Set once the head's newline was read.
    stdout: Option<Vec<u8>>,
}

impl ScriptOutputReader {
    /// A reader for a reply of `size` bytes (0 when unknown: stdout then grows as it comes).
    pub fn with_size(size: usize) -> Self {
        Self {
            size,
            ..Self::default()
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        if let Some(stdout) = &mut self.stdout {
            stdout.extend_from_slice(data);
            return;
        }
        // Compact JSON never holds a raw newline, so the first one ends the head.
        match data.iter().position(|b| *b == b'\n') {
            Some(split) => {
                self.head.extend_from_slice(&data[..split]);
                let rest = &data[split + 1..];
                let expected = self.size.saturating_sub(self.head.len() + 1);
                let mut stdout = Vec::with_capacity(expected.max(rest.len()));
                stdout.extend_from_slice(rest);
                self.stdout = Some(stdout);
            }
            None => self.head.extend_from_slice(data),
        }
    }

    pub fn finish(self) -> Result<ScriptReply, ScriptOutputError> {
        let stdout = self.stdout.ok_or(ScriptOutputError::NoHead)?;
        let head: ScriptOutputHead =
            serde_json::from_slice(&self.head).map_err(ScriptOutputError::BadHead)?;
        let stdout = String::from_utf8(stdout).map_err(|e| e.utf8_error())?;
        Ok(ScriptReply {
            stdout,
            stderr: head.stderr,
            exit_code: head.exit_code,
        })
    }
}

impl From<Output> for ScriptReply {
    fn from(output: Output) -> Self {
        Self {
            stdout: output.stdout,
            stderr: output.stderr,
            exit_code: output.exit,
        }
    }
}

impl From<ScriptReply> for Output {
    fn from(reply: ScriptReply) -> Self {
        Self {
            stdout: reply.stdout,
            stderr: reply.stderr,
            exit: reply.exit_code,
        }
    }
}

/// Runs `op` on `input` (the HostFactory JSON, `None` when none was given). The input is
/// checked before `open` builds the broker, so bad input never touches the store.
pub async fn run_operation<F>(op: Operation, input: Option<&Value>, open: F) -> ScriptReply
where
    F: AsyncFnOnce() -> CliResult<BrokerEnv>,
{
    match call(op, input, open).await {
        Ok(reply) => reply,
        Err(failure) => ScriptReply::failure(&failure),
    }
}

fn parsed<T>(
    input: Option<&Value>,
    parse: impl Fn(&Value) -> Result<T, orb_core::hostfactory::input::HfInputError>,
) -> CliResult<T> {
    let empty = Value::Object(Default::default());
    parse(input.unwrap_or(&empty)).map_err(|e| Failure::invalid(e.to_string()))
}

async fn call<F>(op: Operation, input: Option<&Value>, open: F) -> CliResult<ScriptReply>
where
    F: AsyncFnOnce() -> CliResult<BrokerEnv>,
{
    match op {
        Operation::GetAvailableTemplates => get_available_templates(&open().await?).await,
        Operation::RequestMachines => {
            let input = parsed(input, RequestMachinesInput::parse)?;
            request_machines(&open().await?, &input.template_id, input.machine_count).await
        }
        Operation::RequestReturnMachines => {
            let input = parsed(input, ReturnMachinesInput::parse)?;
            request_return_machines(&open().await?, &input.machines).await
        }
        Operation::GetRequestStatus => {
            let input = parsed(input, RequestStatusQuery::parse)?;
            get_request_status(&open().await?, &input.request_ids).await
        }
        Operation::GetReturnRequests => {
            let machines = match input {
                Some(value) => {
                    ReturnRequestsQuery::parse(value)
                        .map_err(|e| Failure::invalid(e.to_string()))?
                        .machines
                }
                None => Vec::new(),
            };
            get_return_requests(&open().await?, &machines).await
        }
    }
}

/// getAvailableTemplates: usable templates with their limits and live machines.
pub async fn get_available_templates(env: &BrokerEnv) -> CliResult<ScriptReply> {
    if let Some(failure) = &env.catalog_failure {
        return Err(failure.clone());
    }
    let broker = &env.broker;
    let mut stderr: Vec<String> = env
        .warnings
        .iter()
        .map(|w| format!("warning: {w}"))
        .collect();
    // A template every request would refuse is not advertised (HostFactory would keep
    // asking for it); the reason goes to stderr.
    let list = broker.servable_templates().await?;
    stderr.extend(list.unservable.iter().map(|(id, reason)| {
        format!(
            "warning: template {id:?} is not advertised (every request would be refused): \
             {reason}"
        )
    }));
    let entries: Vec<_> = list
        .listed
        .iter()
        .map(|l| template_entry(&l.template, l.max_machines, &l.usage))
        .collect();
    Ok(ScriptReply {
        stdout: render::json(&templates_reply(entries))?,
        stderr,
        exit_code: 0,
    })
}

/// requestMachines: starts an acquire.
pub async fn request_machines(
    env: &BrokerEnv,
    template_id: &str,
    count: u32,
) -> CliResult<ScriptReply> {
    if env.broker.catalog.current().templates.is_empty() && !env.warnings.is_empty() {
        return Err(Failure::invalid(env.warnings.join("; ")));
    }
    let view = env.broker.request_machines(template_id, count).await?;
    submitted(view, &env.warnings)
}

/// The broker's keys for HostFactory's `machines` entries (`machineId` and/or `name`).
pub fn machine_keys(selectors: &[MachineSelector]) -> Vec<MachineKey> {
    selectors
        .iter()
        .map(|s| MachineKey {
            machine_id: s.machine_id.clone(),
            name: s.name.clone(),
        })
        .collect()
}

/// requestReturnMachines: starts returning the named machines; unknown names are reported
/// as failed rather than refused, as HostFactory expects.
pub async fn request_return_machines(
    env: &BrokerEnv,
    machines: &[MachineSelector],
) -> CliResult<ScriptReply> {
    let view = env
        .broker
        .return_machines(&machine_keys(machines), UnknownNames::ReportAsFailed)
        .await?;
    submitted(view, &env.warnings)
}

/// The reply to a request or return just made; exit 1 when it already ended badly.
pub fn submitted(view: RequestView, warnings: &[String]) -> CliResult<ScriptReply> {
    let status = view.request.status;
    let stdout = render::json(&SubmitReply {
        request_id: view.request.request_id.to_string(),
        message: submit_message(status, view.request.status_message.as_deref()),
    })?;
    Ok(submitted_output(stdout, &view, warnings))
}

/// The stderr line for a status read that could not ask the provider (its note), if any.
pub fn stale_warning(view: &RequestView) -> Option<String> {
    let note = view.note.as_ref()?;
    Some(format!("warning: {}: {note}", view.request.request_id))
}

/// stderr and exit code of a submit reply, whatever format its stdout is in.
pub fn submitted_output(stdout: String, view: &RequestView, warnings: &[String]) -> ScriptReply {
    let status = view.request.status;
    let mut stderr: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
    let exit_code = if status.is_unsuccessful() {
        stderr.push(format!(
            "error: request {} is {}: {}",
            view.request.request_id,
            status,
            view.request
                .status_message
                .as_deref()
                .unwrap_or("no detail")
        ));
        1
    } else {
        0
    };
    ScriptReply {
        stdout,
        stderr,
        exit_code,
    }
}

/// getRequestStatus: every id gets an answer; an unknown one is finished with an error.
pub async fn get_request_status(env: &BrokerEnv, ids: &[String]) -> CliResult<ScriptReply> {
    let found = env.broker.statuses(ids).await?;
    Ok(status_reply(&found, env.written.as_ref()))
}

/// The getRequestStatus reply to what a status call `found`, with `orb serve`'s big
/// requests' machines as it wrote them before, or writes and keeps now (`written`).
pub fn status_reply(found: &[Lookup], written: Option<&WrittenMachines>) -> ScriptReply {
    let written: Vec<Option<Arc<str>>> = found
        .iter()
        .map(|lookup| match (lookup, written) {
            (Lookup::Found(view), Some(kept)) => kept.items(&view.request, &view.machines),
            _ => None,
        })
        .collect();
    let mut entries = Vec::with_capacity(found.len());
    let mut notes = Vec::new();
    for (lookup, items) in found.iter().zip(&written) {
        match (lookup, items) {
            (Lookup::Found(view), items) => {
                notes.extend(stale_warning(view));
                entries.push(match items {
                    Some(items) => request_status_entry_written(&view.request, items),
                    None => request_status_entry(&view.request, &view.machines),
                });
            }
            (Lookup::Unknown(raw), _) => entries.push(unknown_request_entry(raw)),
        }
    }
    // Written by hand, byte for byte serde_json's pretty form (a third faster at 5,000
    // machines, where escaping every string was most of the rendering).
    let mut stdout = StatusReply { requests: entries }.to_pretty_json();
    stdout.push('\n');
    ScriptReply {
        stdout,
        stderr: notes,
        exit_code: 0,
    }
}

/// getReturnRequests: the hosts the cluster is taking back on its own.
pub async fn get_return_requests(
    env: &BrokerEnv,
    machines: &[MachineSelector],
) -> CliResult<ScriptReply> {
    let (reclaims, note) = env.broker.reclaims(&machine_keys(machines)).await?;
    let entries = reclaims
        .iter()
        .map(|r| ReclaimEntry {
            machine: r.name.clone(),
            grace_period: r.grace_period_secs,
        })
        .collect();
    Ok(
        ScriptReply::ok(render::json(&return_requests_reply(entries))?)
            .note(note.map(|n| format!("warning: {n}"))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_reply_form_carries_stdout_byte_for_byte() {
        let reply = ScriptReply {
            stdout: "{\n  \"requests\": [\"é ✓\", \"a\\\"b\"]\n}\n".into(),
            stderr: vec!["warning: one\nline two".into(), String::new()],
            exit_code: 3,
        };
        let bytes = reply.to_script_output();
        let first_line = bytes.split(|b| *b == b'\n').next().unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(first_line).unwrap(),
            serde_json::json!({"stderr": ["warning: one\nline two", ""], "exit_code": 3})
        );
        assert!(
            bytes.ends_with(reply.stdout.as_bytes()),
            "stdout is copied, not escaped"
        );
        assert_eq!(ScriptReply::from_script_output(&bytes).unwrap(), reply);

        let empty = ScriptReply {
            stdout: String::new(),
            stderr: vec![],
            exit_code: 0,
        };
        assert_eq!(
            ScriptReply::from_script_output(&empty.to_script_output()).unwrap(),
            empty
        );
    }

    #[test]
    fn a_compact_reply_read_in_pieces_reads_as_read_whole() {
        let reply = ScriptReply {
            stdout: "{\n  \"requests\": [\"é ✓\"]\n}\n".into(),
            stderr: vec!["warning: w".into()],
            exit_code: 1,
        };
        let bytes = reply.to_script_output();
        // Every place to cut it in two, the head's newline and a multi-byte character
        // included; with the size told, and not.
        for cut in 0..=bytes.len() {
            for size in [bytes.len(), 0] {
                let mut reader = ScriptOutputReader::with_size(size);
                reader.push(&bytes[..cut]);
                reader.push(&bytes[cut..]);
                assert_eq!(reader.finish().unwrap(), reply, "cut at {cut}, size {size}");
            }
        }
        // One byte at a time.
        let mut reader = ScriptOutputReader::with_size(bytes.len());
        for b in &bytes {
            reader.push(std::slice::from_ref(b));
        }
        assert_eq!(reader.finish().unwrap(), reply);
    }

    #[test]
    fn a_broken_compact_reply_says_what_is_wrong() {
        for (bytes, says) in [
            (&b"{\"stderr\":[],\"exit_code\":0}"[..], "no line"),
            (&b"{\"exit_code\":0}\n{}"[..], "first line"),
            (&b"not json\n{}"[..], "first line"),
            (&b"{\"stderr\":[],\"exit_code\":0}\n\xff\xfe"[..], "UTF-8"),
        ] {
            let err = ScriptReply::from_script_output(bytes).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn operation_names_are_the_script_names_and_round_trip() {
        let names: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
        assert_eq!(
            names,
            [
                "getAvailableTemplates",
                "requestMachines",
                "requestReturnMachines",
                "getRequestStatus",
                "getReturnRequests"
            ]
        );
        for op in Operation::ALL {
            assert_eq!(Operation::from_name(op.name()), Some(op));
        }
        assert_eq!(Operation::from_name("templateWizard"), None);
    }

    #[test]
    fn only_requests_and_returns_change_state() {
        let changing: Vec<Operation> = Operation::ALL
            .into_iter()
            .filter(|op| op.changes_state())
            .collect();
        assert_eq!(
            changing,
            [Operation::RequestMachines, Operation::RequestReturnMachines]
        );
    }
}
