//! What the REST API reads and writes. These types are the API's contract (they carry the
//! OpenAPI schema); they are filled from the broker's domain types and never stored.

use std::collections::BTreeMap;

use jiff::Timestamp;
use orb_core::machine::Machine;
use orb_core::request::Request;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use orb_broker::RequestView;

/// `POST /api/v1/machines/request`. The document names the reference broker's camelCase
/// fields, so a client generated from it sends the same body as one generated from the
/// reference's; the snake_case spellings are accepted too.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineRequestBody {
    /// The template to create machines from (`GET /api/v1/templates` lists them);
    /// `template_id` is accepted too.
    #[serde(rename = "templateId", alias = "template_id")]
    #[schema(example = "worker")]
    pub template_id: String,
    /// How many machines; at least 1.
    #[serde(alias = "machine_count", alias = "machineCount")]
    #[schema(example = 2, minimum = 1)]
    pub count: u32,
    /// Accepted for the reference broker's clients; orb does not use it.
    #[serde(default, rename = "additionalData", alias = "additional_data")]
    #[schema(value_type = Option<Object>)]
    pub additional_data: Option<serde_json::Value>,
}

/// `?wait=true&timeout=S` on `POST /api/v1/machines/request` and `…/return`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Answer only when the request has finished (or `timeout` has passed).
    #[serde(default)]
    pub wait: bool,
    /// Seconds to wait with `wait=true`, 1 to 600; default `request.default_timeout` (at most 600).
    pub timeout: Option<u64>,
}

/// `?verbose&wait=true&timeout=S` on `GET /api/v1/requests/{id}/status`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    /// Accepted for the reference broker's clients; machines are always included.
    #[serde(default)]
    pub verbose: bool,
    /// Answer only when the request has finished (or `timeout` has passed).
    #[serde(default)]
    pub wait: bool,
    /// Seconds to wait with `wait=true`, 1 to 600; default `request.default_timeout` (at most 600).
    pub timeout: Option<u64>,
}

/// `POST /api/v1/machines/return`: exactly one of `machineIds`, `requestId` and
/// `allMachines`. Named in the reference broker's camelCase, as on machine requests; the
/// snake_case spellings are accepted too.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReturnBody {
    /// Machines to give back, by machine id or host name.
    #[serde(default, rename = "machineIds", alias = "machine_ids")]
    pub machine_ids: Option<Vec<String>>,
    /// Give back every live machine of this acquire request.
    #[serde(default, rename = "requestId", alias = "request_id")]
    pub request_id: Option<String>,
    /// Give back every live machine orb manages that is not already being returned.
    #[serde(default, rename = "allMachines", alias = "all_machines")]
    pub all_machines: bool,
    /// Accepted for the reference broker's clients; a return always follows the
    /// handler's rules (graceful delete, scale-down), so it changes nothing.
    #[serde(default)]
    pub force: bool,
    /// When given, must be this server's provider.
    #[serde(default, rename = "providerName", alias = "provider_name")]
    pub provider_name: Option<String>,
    /// When given, must be this server's provider type.
    #[serde(default, rename = "providerType", alias = "provider_type")]
    pub provider_type: Option<String>,
}

/// A request as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RequestInfo {
    #[schema(example = "req-3f2b0c1e-8a4d-4c6b-9e1f-0a2b3c4d5e6f")]
    pub request_id: String,
    /// `acquire` or `return`.
    pub request_type: String,
    /// pending, in_progress, acquiring, partial_pending, complete, partial, failed, cancelled or timeout.
    #[schema(example = "in_progress")]
    pub status: String,
    /// True once the status can no longer change.
    pub terminal: bool,
    pub status_message: Option<String>,
    pub template_id: Option<String>,
    pub provider_name: String,
    pub provider_api: Option<String>,
    pub requested_count: u32,
    pub fulfilled_count: u32,
    pub failed_count: u32,
    /// For returns: the machines named.
    pub machine_ids: Vec<String>,
    /// For returns: names orb never managed.
    pub unknown_machines: Vec<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub deadline_at: Option<String>,
    pub completed_at: Option<String>,
    pub last_transition_at: String,
}

/// A machine as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MachineInfo {
    pub machine_id: String,
    pub name: String,
    pub request_id: String,
    pub return_request_id: Option<String>,
    pub template_id: String,
    pub provider_api: Option<String>,
    pub resource_id: Option<String>,
    /// pending, launching, running, stopping, stopped, shutting-down, terminated, returned, failed or unknown.
    #[schema(example = "running")]
    pub status: String,
    pub status_reason: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub launch_time: Option<String>,
    /// The node's instance type when `orb serve` watches nodes, else `k8s/<Api>`.
    pub instance_type: Option<String>,
    /// `spot` or `ondemand` from the node's capacity-type label, when known.
    pub price_type: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// The node the machine runs on, as the node watcher last saw it (`node_watch_enabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<MachineNode>,
    pub created_at: String,
    pub updated_at: String,
}

/// The node a machine runs on (from `provider_data.node`, written when the node watcher runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MachineNode {
    #[schema(example = "ip-10-0-3-17.ec2.internal")]
    pub name: String,
    #[schema(example = "m5.large")]
    pub instance_type: Option<String>,
    #[schema(example = "us-east-1a")]
    pub zone: Option<String>,
    #[schema(example = "us-east-1")]
    pub region: Option<String>,
    /// `spot` or `ondemand`.
    #[schema(example = "spot")]
    pub capacity_type: Option<String>,
    /// CPU capacity in millicores.
    #[schema(example = 2000)]
    pub cpu_millis: Option<u64>,
    /// Memory capacity in bytes.
    #[schema(example = 8589934592u64)]
    pub memory_bytes: Option<u64>,
    /// The node's Ready condition when last seen.
    pub ready: bool,
}

/// A request with its machines (an acquire's machines, or the machines a return covers).
/// `request_id`, `message` and `requests` are the same facts in the reference broker's
/// shape, for its clients; orb's own are `request`, `machines` and `note`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequestDetail {
    #[schema(example = "req-3f2b0c1e-8a4d-4c6b-9e1f-0a2b3c4d5e6f")]
    pub request_id: String,
    /// A one-line summary of where the request stands.
    #[schema(example = "Request in progress")]
    pub message: String,
    /// The request as the reference broker shows it, as a one-element list.
    pub requests: Vec<crate::serve::reference::RequestItem>,
    pub request: RequestInfo,
    pub machines: Vec<MachineInfo>,
    /// Why the answer may be stale (the provider could not be asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn time(t: Timestamp) -> String {
    t.to_string()
}

impl From<&Request> for RequestInfo {
    fn from(r: &Request) -> Self {
        Self {
            request_id: r.request_id.to_string(),
            request_type: r.request_type.as_str().to_string(),
            status: r.status.to_string(),
            terminal: r.status.is_terminal(),
            status_message: r.status_message.clone(),
            template_id: r.template_id.clone(),
            provider_name: r.provider_name.clone(),
            provider_api: r.provider_api.map(|api| api.as_str().to_string()),
            requested_count: r.requested_count,
            fulfilled_count: r.fulfilled_count,
            failed_count: r.failed_count,
            machine_ids: r.machine_ids.clone(),
            unknown_machines: r.unknown_machines.clone(),
            created_at: time(r.created_at),
            started_at: r.started_at.map(time),
            deadline_at: r.deadline_at.map(time),
            completed_at: r.completed_at.map(time),
            last_transition_at: time(r.last_transition_at),
        }
    }
}

impl From<&Machine> for MachineInfo {
    fn from(m: &Machine) -> Self {
        Self {
            machine_id: m.machine_id.clone(),
            name: m.name.clone(),
            request_id: m.request_id.to_string(),
            return_request_id: m.return_request_id.as_ref().map(ToString::to_string),
            template_id: m.template_id.clone(),
            provider_api: m.provider_api.map(|api| api.as_str().to_string()),
            resource_id: m.resource_id.clone(),
            status: m.status.to_string(),
            status_reason: m.status_reason.clone(),
            private_ip: m.private_ip.clone(),
            public_ip: m.public_ip.clone(),
            launch_time: m.launch_time.map(time),
            instance_type: m.instance_type.clone(),
            price_type: m.price_type.clone(),
            tags: (*m.tags).clone(),
            node: m
                .provider_data
                .get("node")
                .and_then(|n| MachineNode::deserialize(n).ok()),
            created_at: time(m.created_at),
            updated_at: time(m.updated_at),
        }
    }
}

impl RequestDetail {
    /// `provider_type` and `now` fill the reference broker's fields.
    pub fn of(view: &RequestView, provider_type: &str, now: Timestamp) -> Self {
        let r = &view.request;
        Self {
            request_id: r.request_id.to_string(),
            message: orb_core::hostfactory::mapping::submit_message(
                r.status,
                r.status_message.as_deref(),
            ),
            requests: vec![crate::serve::reference::RequestItem::of_view(
                view,
                provider_type,
                now,
            )],
            request: r.into(),
            machines: view.machines.iter().map(MachineInfo::from).collect(),
            note: view.note.clone(),
        }
    }
}

/// One template with what it still allows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateInfo {
    pub template_id: String,
    /// Pod, Deployment, StatefulSet or Job.
    pub provider_api: String,
    /// `maxNumber`; -1 means unlimited.
    pub max_machines: i64,
    /// How many more machines may be requested now; absent when unlimited.
    pub available_number: Option<i64>,
    /// Why the template cannot be used; empty when it can.
    pub problems: Vec<String>,
    /// The whole template, in orb's internal (snake_case) spelling.
    #[schema(value_type = Object)]
    pub template: serde_json::Value,
}

/// The result of `POST /api/v1/templates/validate`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ValidationReport {
    /// True when every template is usable and none was unreadable.
    pub ok: bool,
    /// Ids of usable templates.
    pub valid: Vec<String>,
    pub invalid: Vec<InvalidTemplate>,
    /// Spelling and similar warnings that do not stop a template from working.
    pub warnings: Vec<String>,
    /// How the templates were checked: with their maximum count and a fresh preview request
    /// id, which a real acquire does not share.
    pub note: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InvalidTemplate {
    /// The template's id; absent when the entry could not be read at all.
    pub template_id: Option<String>,
    pub problems: Vec<String>,
}

/// The reply of `/livez`, `/readyz` and `/health`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthReport {
    #[schema(example = "orb")]
    pub service: String,
    pub version: String,
    /// ok, degraded or unhealthy (`/livez`: alive).
    pub status: String,
    /// One entry per dependency checked.
    pub checks: BTreeMap<String, Check>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Check {
    /// ok or failing.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::test_support;
    use serde_json::json;

    fn machine(provider_data: serde_json::Value) -> Machine {
        let now: Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        test_support::machine("orb-abc-0000")
            .provider_name("k8s")
            .instance_type("m5.large")
            .price_type("spot")
            .provider_data(provider_data)
            .created(now)
            .updated(now)
            .version(1)
            .build()
    }

    #[test]
    fn the_node_comes_from_provider_data() {
        let info = MachineInfo::from(&machine(json!({
            "node_name": "ip-1",
            "node": {"name": "ip-1", "instance_type": "m5.large", "zone": "us-east-1a",
                     "region": "us-east-1", "capacity_type": "spot", "cpu_millis": 2000,
                     "memory_bytes": 8589934592u64, "ready": true},
        })));
        let node = info.node.expect("node facts");
        assert_eq!(node.zone.as_deref(), Some("us-east-1a"));
        assert_eq!(node.capacity_type.as_deref(), Some("spot"));
        assert_eq!(node.cpu_millis, Some(2000));
        let shown = serde_json::to_value(MachineInfo::from(&machine(json!({})))).unwrap();
        assert!(shown.get("node").is_none(), "no node key without facts");
    }
}
