//! Builders for the `Request` and `Machine` values tests need, so a test names only the fields
//! it relies on and every other field has one documented default.
//!
//! Compiled for orb-core's own tests and, for other crates, behind the `test-support` feature,
//! which they switch on in `[dev-dependencies]` only: release builds never contain it.
//!
//! ```text
//! use orb_core::test_support::{at, machine, request};
//! use orb_core::{MachineStatus, RequestStatus, RequestType};
//!
//! let acquire = request(RequestType::Acquire)
//!     .template("gpu")
//!     .count(3)
//!     .status(RequestStatus::InProgress)
//!     .build();
//! let host = machine("orb-1234-0000")
//!     .of(&acquire)
//!     .status(MachineStatus::Running)
//!     .ip("10.0.0.1")
//!     .launched(at(20))
//!     .build();
//! assert_eq!(host.request_id, acquire.request_id);
//! assert_eq!(host.template_id, "gpu");
//! ```
//!
//! (The example is `text` because doctests build orb-core without the feature; the unit test
//! `the_module_example_builds_what_it_says` runs it.)

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;

use crate::ids::RequestId;
use crate::machine::{Machine, MachineStatus};
use crate::provider::{MachineRef, StatusMachines};
use crate::request::{Request, RequestStatus, RequestType};
use crate::template::ProviderApi;

/// The tests' epoch, 2026-01-01T00:00:00Z, in Unix seconds.
pub const EPOCH_SECS: i64 = 1_767_225_600;

/// `secs` seconds after [`EPOCH_SECS`]: the timestamps of a test read as small offsets.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(EPOCH_SECS + secs).expect("a test timestamp in range")
}

/// A request id parsed from `raw`; panics on a malformed id (tests pass literals).
pub fn id(raw: &str) -> RequestId {
    RequestId::parse(raw).unwrap_or_else(|e| panic!("test request id {raw:?}: {e}"))
}

/// A [`Request`] of `kind`, built from [`Request::new`] with these defaults:
///
/// | field | default |
/// |---|---|
/// | `request_id` | fresh: `req-<uuid>` for an acquire, `ret-<uuid>` for a return |
/// | `template_id` | `Some("worker")` |
/// | `provider_name`, `provider_type` | `"kube"`, `"k8s"` |
/// | `requested_count` | 1 |
/// | `created_at`, `last_transition_at` | `at(0)` |
/// | everything else | as [`Request::new`] leaves it: `pending`, no kind, no times, `{}` data |
pub fn request(kind: RequestType) -> RequestBuilder {
    let request_id = match kind {
        RequestType::Acquire => RequestId::new_acquire(),
        RequestType::Return => RequestId::new_return(),
    };
    RequestBuilder(Request::new(
        request_id,
        kind,
        Some("worker".into()),
        "kube",
        "k8s",
        1,
        at(0),
    ))
}

/// Builds a [`Request`]; start it with [`request`]. Each method sets one field (or a pair that
/// always goes together) and returns the builder.
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the Request"]
pub struct RequestBuilder(Request);

impl RequestBuilder {
    /// The id, parsed from `raw` (see [`id`]).
    pub fn id(self, raw: &str) -> Self {
        self.request_id(id(raw))
    }
    pub fn request_id(mut self, request_id: RequestId) -> Self {
        self.0.request_id = request_id;
        self
    }
    pub fn template(mut self, template_id: &str) -> Self {
        self.0.template_id = Some(template_id.into());
        self
    }
    /// No template, as a return spanning several templates has.
    pub fn no_template(mut self) -> Self {
        self.0.template_id = None;
        self
    }
    pub fn provider(mut self, provider_name: &str, provider_type: &str) -> Self {
        self.0.provider_name = provider_name.into();
        self.0.provider_type = provider_type.into();
        self
    }
    /// The template's kind (`provider_api`).
    pub fn kind(mut self, api: ProviderApi) -> Self {
        self.0.provider_api = Some(api);
        self
    }
    /// `requested_count`.
    pub fn count(mut self, requested: u32) -> Self {
        self.0.requested_count = requested;
        self
    }
    pub fn status(mut self, status: RequestStatus) -> Self {
        self.0.status = status;
        self
    }
    /// `fulfilled_count`.
    pub fn fulfilled(mut self, fulfilled: u32) -> Self {
        self.0.fulfilled_count = fulfilled;
        self
    }
    /// `failed_count`.
    pub fn failed(mut self, failed: u32) -> Self {
        self.0.failed_count = failed;
        self
    }
    pub fn message(mut self, message: &str) -> Self {
        self.0.status_message = Some(message.into());
        self
    }
    /// `created_at` and `last_transition_at`, as [`Request::new`] sets them.
    pub fn created(mut self, created: Timestamp) -> Self {
        self.0.created_at = created;
        self.0.last_transition_at = created;
        self
    }
    pub fn started(mut self, started: Timestamp) -> Self {
        self.0.started_at = Some(started);
        self
    }
    pub fn deadline(mut self, deadline: Timestamp) -> Self {
        self.0.deadline_at = Some(deadline);
        self
    }
    /// `machine_ids`: the machines a return names.
    pub fn machine_ids<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.0.machine_ids = ids.into_iter().map(Into::into).collect();
        self
    }
    pub fn provider_data(mut self, data: Value) -> Self {
        self.0.provider_data = data.into();
        self
    }
    /// Any other change, for the fields without a method of their own.
    pub fn with(mut self, change: impl FnOnce(&mut Request)) -> Self {
        change(&mut self.0);
        self
    }
    pub fn build(self) -> Request {
        self.0
    }
}

/// A [`Machine`] whose `machine_id` and `name` are both `name`, with these defaults:
///
/// | field | default |
/// |---|---|
/// | `request_id` | a fresh acquire id (use [`MachineBuilder::of`] to tie it to a request) |
/// | `template_id` | `"worker"` |
/// | `provider_name` | `"kube"` |
/// | `provider_api` | `Some(Pod)` |
/// | `status` | `running` |
/// | `created_at`, `updated_at` | `at(0)` |
/// | `provider_data` | `null` |
/// | `version` | 0 (not stored yet) |
/// | everything else | `None` or empty |
pub fn machine(name: &str) -> MachineBuilder {
    MachineBuilder(Machine {
        machine_id: name.into(),
        name: name.into(),
        request_id: RequestId::new_acquire(),
        return_request_id: None,
        template_id: "worker".into(),
        provider_name: "kube".into(),
        provider_api: Some(ProviderApi::Pod),
        resource_id: None,
        uid: None,
        status: MachineStatus::Running,
        status_reason: None,
        private_ip: None,
        public_ip: None,
        launch_time: None,
        instance_type: None,
        price_type: None,
        tags: BTreeMap::new().into(),
        provider_data: Value::Null.into(),
        created_at: at(0),
        updated_at: at(0),
        version: 0,
    })
}

/// Builds a [`Machine`]; start it with [`machine`].
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the Machine"]
pub struct MachineBuilder(Machine);

impl MachineBuilder {
    /// A machine of acquire `request`: its id, its template (when it has one), its provider
    /// name, and its kind (when it has one).
    pub fn of(mut self, request: &Request) -> Self {
        self.0.request_id = request.request_id.clone();
        if let Some(template_id) = &request.template_id {
            self.0.template_id = template_id.clone();
        }
        self.0.provider_name = request.provider_name.clone();
        if let Some(api) = request.provider_api {
            self.0.provider_api = Some(api);
        }
        self
    }
    /// The host name, when it differs from `machine_id`.
    pub fn name(mut self, name: &str) -> Self {
        self.0.name = name.into();
        self
    }
    pub fn request_id(mut self, request_id: RequestId) -> Self {
        self.0.request_id = request_id;
        self
    }
    /// The return that took this machine (`return_request_id`).
    pub fn returned_by(mut self, return_id: RequestId) -> Self {
        self.0.return_request_id = Some(return_id);
        self
    }
    pub fn template(mut self, template_id: &str) -> Self {
        self.0.template_id = template_id.into();
        self
    }
    pub fn provider_name(mut self, provider_name: &str) -> Self {
        self.0.provider_name = provider_name.into();
        self
    }
    /// The machine's kind (`provider_api`).
    pub fn kind(mut self, api: ProviderApi) -> Self {
        self.0.provider_api = Some(api);
        self
    }
    /// `resource_id`: the pod or controller that owns the machine.
    pub fn resource(mut self, resource_id: &str) -> Self {
        self.0.resource_id = Some(resource_id.into());
        self
    }
    pub fn uid(mut self, uid: &str) -> Self {
        self.0.uid = Some(uid.into());
        self
    }
    pub fn status(mut self, status: MachineStatus) -> Self {
        self.0.status = status;
        self
    }
    /// `status_reason`.
    pub fn reason(mut self, reason: &str) -> Self {
        self.0.status_reason = Some(reason.into());
        self
    }
    /// `private_ip`.
    pub fn ip(mut self, private_ip: &str) -> Self {
        self.0.private_ip = Some(private_ip.into());
        self
    }
    /// `launch_time`.
    pub fn launched(mut self, launch_time: Timestamp) -> Self {
        self.0.launch_time = Some(launch_time);
        self
    }
    pub fn instance_type(mut self, instance_type: &str) -> Self {
        self.0.instance_type = Some(instance_type.into());
        self
    }
    pub fn price_type(mut self, price_type: &str) -> Self {
        self.0.price_type = Some(price_type.into());
        self
    }
    /// Adds one tag.
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.0.tags.insert(key.into(), value.into());
        self
    }
    pub fn provider_data(mut self, data: Value) -> Self {
        self.0.provider_data = data.into();
        self
    }
    pub fn created(mut self, created: Timestamp) -> Self {
        self.0.created_at = created;
        self
    }
    pub fn updated(mut self, updated: Timestamp) -> Self {
        self.0.updated_at = updated;
        self
    }
    pub fn version(mut self, version: i64) -> Self {
        self.0.version = version;
        self
    }
    /// Any other change, for the fields without a method of their own.
    pub fn with(mut self, change: impl FnOnce(&mut Machine)) -> Self {
        change(&mut self.0);
        self
    }
    pub fn build(self) -> Machine {
        self.0
    }
}

/// The machines of a status input as the broker would hand them over, from the references a
/// test has at hand; fields a [`MachineRef`] lacks take [`machine`]'s defaults.
pub fn status_machines(refs: impl IntoIterator<Item = MachineRef>) -> StatusMachines {
    let (list, data): (Vec<Machine>, Vec<_>) = refs
        .into_iter()
        .map(|r| {
            let machine = Machine {
                name: r.name,
                request_id: r.request_id,
                template_id: r.template_id,
                provider_api: r.provider_api,
                resource_id: r.resource_id,
                uid: r.uid,
                status: r.status,
                ..machine(&r.machine_id).build()
            };
            (machine, r.request_provider_data)
        })
        .unzip();
    StatusMachines::new(list.into(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_example_builds_what_it_says() {
        let acquire = request(RequestType::Acquire)
            .template("gpu")
            .count(3)
            .status(RequestStatus::InProgress)
            .build();
        let host = machine("orb-1234-0000")
            .of(&acquire)
            .status(MachineStatus::Running)
            .ip("10.0.0.1")
            .launched(at(20))
            .build();
        assert_eq!(host.request_id, acquire.request_id);
        assert_eq!(host.template_id, "gpu");
        assert_eq!(acquire.requested_count, 3);
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let r = request(RequestType::Return).build();
        assert!(r.request_id.as_str().starts_with("ret-"));
        assert_eq!(r.template_id.as_deref(), Some("worker"));
        assert_eq!(
            (r.provider_name.as_str(), r.provider_type.as_str()),
            ("kube", "k8s")
        );
        assert_eq!((r.requested_count, r.status), (1, RequestStatus::Pending));
        assert_eq!(r.created_at, at(0));

        let m = machine("m-0").build();
        assert_eq!((m.machine_id.as_str(), m.name.as_str()), ("m-0", "m-0"));
        assert_eq!(m.status, MachineStatus::Running);
        assert_eq!(m.provider_api, Some(ProviderApi::Pod));
        assert_eq!((&*m.provider_data, m.version), (&Value::Null, 0));
    }

    #[test]
    fn a_machine_of_a_request_keeps_its_own_kind_when_the_request_has_none() {
        let r = request(RequestType::Acquire)
            .template("gpu")
            .provider("kubernetes", "k8s")
            .build();
        let m = machine("m-0").of(&r).build();
        assert_eq!(m.request_id, r.request_id);
        assert_eq!(
            (m.template_id.as_str(), m.provider_name.as_str()),
            ("gpu", "kubernetes")
        );
        assert_eq!(m.provider_api, Some(ProviderApi::Pod));
    }
}
