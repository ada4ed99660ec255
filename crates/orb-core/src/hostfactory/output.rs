//! HostFactory replies. Field names and shapes follow the IBM provider interface; the extras
//! orb adds are noted on each field.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::mapping::{hf_machine_result, hf_request_status};
use crate::ids::RequestId;
use crate::machine::{Machine, MachineStatus};
use crate::quantity::{cpus_for_hostfactory, mebibytes_for_hostfactory};
use crate::request::{Request, RequestStatus, RequestType};
use crate::template::wire::{tags_to_string, template_to_hostfactory};
use crate::template::{Template, TemplateUsage};

/// Any failure reply: `{"message": "..."}` and nothing else (no `requestId`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorReply {
    pub message: String,
}

/// `requestMachines` / `requestReturnMachines` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubmitReply {
    #[serde(rename = "requestId")]
    pub request_id: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplatesReply {
    pub templates: Vec<Map<String, Value>>,
    pub message: String,
}

/// Attributes HostFactory sizes hosts by: the template's explicit `attributes` win key by
/// key over values derived from resource requests (else limits); 1 CPU / 1024 MiB / X86_64
/// only when nothing is known.
pub fn template_attributes(template: &Template) -> BTreeMap<String, Value> {
    let sized = template
        .resource_requests
        .as_ref()
        .filter(|r| r.cpu.is_some() || r.memory.is_some())
        .or(template.resource_limits.as_ref());
    let cpus = sized
        .and_then(|r| r.cpu.as_deref())
        .and_then(|c| cpus_for_hostfactory(c).ok())
        .unwrap_or(1);
    let mib = sized
        .and_then(|r| r.memory.as_deref())
        .and_then(|m| mebibytes_for_hostfactory(m).ok())
        .unwrap_or(1024);
    let arch = template
        .node_selector
        .as_ref()
        .and_then(|s| s.get("kubernetes.io/arch"))
        .map(String::as_str);
    let ego_type = match arch {
        None | Some("amd64") => "X86_64".to_string(),
        Some(other) => other.to_ascii_uppercase(),
    };
    let mut attributes = BTreeMap::from([
        ("type".to_string(), json!(["String", ego_type])),
        ("ncpus".to_string(), json!(["Numeric", cpus.to_string()])),
        ("ncores".to_string(), json!(["Numeric", cpus.to_string()])),
        ("nram".to_string(), json!(["Numeric", mib.to_string()])),
    ]);
    if let Some(explicit) = &template.attributes {
        if let Some(ncpus) = explicit.get("ncpus")
            && !explicit.contains_key("ncores")
        {
            attributes.insert("ncores".into(), ncpus.clone());
        }
        attributes.extend(explicit.clone());
    }
    attributes
}

/// Keys of the template echoed to HostFactory besides the computed ones. Kubernetes
/// details (resources, selectors, overrides) stay inside orb.
const ECHOED_KEYS: &[&str] = &[
    "name",
    "imageId",
    "providerApi",
    "providerType",
    "providerName",
    "priceType",
    "allocationStrategy",
    "instanceTags",
];

pub fn template_entry(
    template: &Template,
    max_machines: i64,
    usage: &TemplateUsage,
) -> Map<String, Value> {
    let hf = template_to_hostfactory(template);
    let mut out = Map::new();
    out.insert("templateId".into(), json!(template.template_id));
    out.insert("maxNumber".into(), json!(max_machines));
    if let Some(available) = usage.available(max_machines) {
        out.insert("availableNumber".into(), json!(available));
    }
    out.insert("requestedMachines".into(), json!(usage.live_machine_names));
    out.insert(
        "attributes".into(),
        Value::Object(template_attributes(template).into_iter().collect()),
    );
    for key in ECHOED_KEYS {
        if let Some(value) = hf.get(*key) {
            out.insert((*key).to_string(), value.clone());
        }
    }
    if !out.contains_key("providerApi") {
        out.insert("providerApi".into(), json!(template.api().as_str()));
    }
    out
}

pub fn templates_reply(entries: Vec<Map<String, Value>>) -> TemplatesReply {
    let message = format!("Retrieved {} templates successfully", entries.len());
    TemplatesReply {
        templates: entries,
        message,
    }
}

/// The getRequestStatus reply. Its entries borrow from the requests and machines they
/// describe: a 5,000-machine request's reply is written without copying its strings first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReply<'a> {
    pub requests: Vec<RequestStatusEntry<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestStatusEntry<'a> {
    #[serde(rename = "requestId")]
    pub request_id: &'a str,
    pub status: &'static str,
    pub message: Cow<'a, str>,
    /// The request's stored machines already written as items of the reply's `machines`
    /// array ([`machine_items`](super::machine_items)), kept by `orb serve` between calls
    /// while the machines did not change. Written before `machines`, which then holds only
    /// the names orb never managed. Only [`StatusReply::to_pretty_json`] writes it; serde
    /// leaves it out.
    #[serde(skip)]
    pub written_machines: Option<&'a str>,
    pub machines: Vec<MachineEntry<'a>>,
}

/// A machine's tags, written as HostFactory's `instanceTags` string (`key=value;key2=value2`)
/// where the reply is written rather than built as a string of its own first (5,000 machines
/// with six labels each made that a tenth of a status read through `orb serve`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceTags<'a>(pub &'a BTreeMap<String, String>);

impl Serialize for InstanceTags<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&tags_to_string(self.0))
    }
}

static NO_TAGS: BTreeMap<String, String> = BTreeMap::new();

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineEntry<'a> {
    #[serde(rename = "machineId")]
    pub machine_id: &'a str,
    pub name: &'a str,
    pub result: &'static str,
    pub status: &'static str,
    #[serde(rename = "privateIpAddress")]
    pub private_ip_address: Option<&'a str>,
    #[serde(rename = "publicIpAddress")]
    pub public_ip_address: Option<&'a str>,
    /// Epoch seconds, UTC; 0 while unknown.
    pub launchtime: i64,
    /// Always present; explains a `fail`.
    pub message: &'a str,
    #[serde(rename = "cloudHostId")]
    pub cloud_host_id: Option<&'a str>,
    #[serde(rename = "instanceType", skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<&'a str>,
    #[serde(rename = "priceType", skip_serializing_if = "Option::is_none")]
    pub price_type: Option<&'a str>,
    #[serde(rename = "instanceTags")]
    pub instance_tags: InstanceTags<'a>,
    /// orb extra: on a return, the acquire request that created the machine.
    #[serde(rename = "requestId", skip_serializing_if = "Option::is_none")]
    pub request_id: Option<&'a str>,
    /// orb extra: on an acquire, the return request once the machine was returned.
    #[serde(rename = "returnRequestId", skip_serializing_if = "Option::is_none")]
    pub return_request_id: Option<&'a str>,
}

fn default_request_message(request: &Request) -> String {
    use RequestStatus::*;
    let (done, wanted) = (request.fulfilled_count, request.requested_count);
    match (request.request_type, request.status) {
        (_, Pending) => "Request submitted for processing".into(),
        (RequestType::Acquire, InProgress | Acquiring | PartialPending) => {
            format!("Provisioning: {done}/{wanted} machines ready")
        }
        (RequestType::Return, InProgress | Acquiring | PartialPending) => {
            format!("Returning: {done}/{wanted} machines released")
        }
        (RequestType::Acquire, Complete) => format!("All {wanted} machines are ready"),
        (RequestType::Return, Complete) => format!("All {wanted} machines were released"),
        (_, Partial) => format!("Partially fulfilled: {done}/{wanted}"),
        (_, Failed) => "Request failed".into(),
        (_, Cancelled) => "Request cancelled".into(),
        (_, Timeout) => "Request timed out".into(),
    }
}

/// The host the machine runs on, as the provider recorded it (`provider_data.cloud_host_id`;
/// the node name on Kubernetes); `None` before it is placed.
fn cloud_host_id(machine: &Machine) -> Option<&str> {
    machine
        .provider_data
        .get("cloud_host_id")
        .and_then(Value::as_str)
}

pub fn machine_entry(request_type: RequestType, machine: &Machine) -> MachineEntry<'_> {
    let result = hf_machine_result(request_type, machine.status);
    let message = match (&machine.status_reason, result) {
        (Some(reason), _) => reason.as_str(),
        (None, "fail") => "Machine failed (no detail available)",
        (None, _) => "",
    };
    MachineEntry {
        machine_id: &machine.machine_id,
        name: &machine.name,
        result,
        status: machine.status.as_str(),
        private_ip_address: machine.private_ip.as_deref(),
        public_ip_address: machine.public_ip.as_deref(),
        launchtime: machine.launch_time.map(|t| t.as_second()).unwrap_or(0),
        message,
        cloud_host_id: cloud_host_id(machine),
        instance_type: machine.instance_type.as_deref(),
        price_type: machine.price_type.as_deref(),
        instance_tags: InstanceTags(&machine.tags),
        request_id: match request_type {
            RequestType::Return => Some(machine.request_id.as_str()),
            RequestType::Acquire => None,
        },
        return_request_id: match request_type {
            RequestType::Acquire => machine.return_request_id.as_ref().map(RequestId::as_str),
            RequestType::Return => None,
        },
    }
}

/// One request's status. `machines` are the acquire's machines, or the machines being
/// returned; names the caller gave that orb never managed appear once as `fail`.
pub fn request_status_entry<'a>(
    request: &'a Request,
    machines: &'a [Machine],
) -> RequestStatusEntry<'a> {
    let mut entries: Vec<MachineEntry<'a>> = machines
        .iter()
        .map(|m| machine_entry(request.request_type, m))
        .collect();
    entries.extend(unknown_machine_entries(request));
    RequestStatusEntry {
        request_id: request.request_id.as_str(),
        status: hf_request_status(request.status),
        message: request_message(request),
        written_machines: None,
        machines: entries,
    }
}

/// [`request_status_entry`] with the stored machines already written: `items` is what
/// [`machine_items`](super::machine_items) wrote for `request.request_type` and the
/// machines the request holds now.
pub fn request_status_entry_written<'a>(
    request: &'a Request,
    items: &'a str,
) -> RequestStatusEntry<'a> {
    RequestStatusEntry {
        request_id: request.request_id.as_str(),
        status: hf_request_status(request.status),
        message: request_message(request),
        written_machines: Some(items),
        machines: unknown_machine_entries(request).collect(),
    }
}

fn request_message(request: &Request) -> Cow<'_, str> {
    match &request.status_message {
        Some(message) => Cow::Borrowed(message),
        None => Cow::Owned(default_request_message(request)),
    }
}

/// Names the caller gave that orb never managed: each once, as `fail`.
fn unknown_machine_entries(request: &Request) -> impl Iterator<Item = MachineEntry<'_>> {
    request.unknown_machines.iter().map(|unknown| MachineEntry {
        machine_id: unknown,
        name: unknown,
        result: "fail",
        status: MachineStatus::Unknown.as_str(),
        private_ip_address: None,
        public_ip_address: None,
        launchtime: 0,
        message: "unknown machine: orb does not manage a host with this id or name",
        cloud_host_id: None,
        instance_type: None,
        price_type: None,
        instance_tags: InstanceTags(&NO_TAGS),
        request_id: None,
        return_request_id: None,
    })
}

/// The entry for an id orb has no record of: finished with an error, so HostFactory stops
/// polling it.
pub fn unknown_request_entry(request_id: &str) -> RequestStatusEntry<'_> {
    RequestStatusEntry {
        request_id,
        status: "complete_with_error",
        message: Cow::Borrowed("request not found"),
        written_machines: None,
        machines: Vec::new(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReturnRequestsReply {
    pub status: &'static str,
    pub message: String,
    pub requests: Vec<ReclaimEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReclaimEntry {
    pub machine: String,
    #[serde(rename = "gracePeriod")]
    pub grace_period: u64,
}

pub fn return_requests_reply(entries: Vec<ReclaimEntry>) -> ReturnRequestsReply {
    let message = if entries.is_empty() {
        "No machines to return.".to_string()
    } else {
        let n = entries.len();
        let noun = if n == 1 { "machine is" } else { "machines are" };
        format!("{n} {noun} being reclaimed by the cluster")
    };
    ReturnRequestsReply {
        status: "complete",
        message,
        requests: entries,
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::{Value, json};

    use super::*;

    #[rstest]
    #[case::node_name_recorded(json!({"cloud_host_id": "kwok-node-1"}), Some("kwok-node-1"))]
    #[case::not_scheduled_yet(json!({"cloud_host_id": null}), None)]
    #[case::no_provider_data(Value::Null, None)]
    #[case::other_keys_only(json!({"node_name": "kwok-node-1"}), None)]
    #[case::not_a_string(json!({"cloud_host_id": 7}), None)]
    fn cloud_host_id_comes_from_provider_data(
        #[case] provider_data: Value,
        #[case] expected: Option<&str>,
    ) {
        let machine = crate::test_support::machine("orb-1234-0000")
            .request_id(crate::test_support::id(
                "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f",
            ))
            .provider_name("kubernetes")
            .provider_data(provider_data)
            .version(1)
            .build();
        let entry = machine_entry(RequestType::Acquire, &machine);
        assert_eq!(entry.cloud_host_id, expected);
    }
}
