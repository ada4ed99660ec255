//! The bookkeeping an acquire hands back to the broker (`provider_data`), read again on every
//! later status, release and cancel of that request. Field names follow the reference so
//! stored requests stay readable; records written before the controller was one field
//! (`deployment_name`, `statefulset_name`, `job_name`, `requested_count`) still decode.

use std::collections::BTreeMap;

use orb_core::ProviderApi;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The Deployment, StatefulSet or Job that owns a request's pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRef {
    pub kind: ProviderApi,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RequestRecord {
    pub request_id: String,
    pub namespace: String,
    /// The request's kind; stored under the reference's key `provider_api`.
    #[serde(rename = "provider_api")]
    pub kind: ProviderApi,
    /// The label prefix the objects were stamped with.
    pub label_prefix: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_pod_names: Vec<String>,
    /// Why each failed create failed (apiserver reason).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub create_failures: BTreeMap<String, String>,
    /// `None` for bare pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Whether orb created the headless Service (and so deletes it with the set).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub service_created: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
}

/// Why stored provider data is not a [`RequestRecord`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider data of request {request_id} is not orb-k8s bookkeeping: {problem}")]
pub struct RecordError {
    /// The request the data is stored with (not the id inside the data, which may be missing).
    pub request_id: String,
    pub problem: RecordProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordProblem {
    #[error("expected a JSON object, got {0}")]
    NotAnObject(&'static str),
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("{0}")]
    Unreadable(String),
    #[error(
        "it names a {controller} controller for a {kind} request; \
         the data was edited or written by something other than orb"
    )]
    ControllerMismatch {
        kind: ProviderApi,
        controller: ProviderApi,
    },
}

/// Every key a record has ever been written with; the legacy ones are folded into the new
/// fields by [`RequestRecord::decode`].
#[derive(Deserialize)]
struct StoredRecord {
    request_id: Option<String>,
    namespace: Option<String>,
    /// Absent or empty in the oldest records: the kind then follows from the controller.
    #[serde(default)]
    provider_api: Option<String>,
    #[serde(default)]
    label_prefix: String,
    #[serde(default)]
    pod_names: Vec<String>,
    #[serde(default)]
    failed_pod_names: Vec<String>,
    #[serde(default)]
    create_failures: BTreeMap<String, String>,
    #[serde(default)]
    controller: Option<ControllerRef>,
    #[serde(default)]
    deployment_name: Option<String>,
    #[serde(default)]
    statefulset_name: Option<String>,
    #[serde(default)]
    job_name: Option<String>,
    #[serde(default)]
    service_name: Option<String>,
    #[serde(default)]
    service_created: bool,
    #[serde(default)]
    replicas: Option<u32>,
    #[serde(default)]
    parallelism: Option<u32>,
}

impl StoredRecord {
    /// The controller as written now, else as the legacy per-kind name fields had it.
    fn controller(&mut self) -> Option<ControllerRef> {
        let legacy = [
            (ProviderApi::Deployment, self.deployment_name.take()),
            (ProviderApi::StatefulSet, self.statefulset_name.take()),
            (ProviderApi::Job, self.job_name.take()),
        ]
        .into_iter()
        .find_map(|(kind, name)| Some(ControllerRef { kind, name: name? }));
        self.controller.take().or(legacy)
    }
}

impl RequestRecord {
    /// Reads the provider data stored with request `request_id`. `Ok(None)` means there is no
    /// bookkeeping yet (null, or the empty object a request starts with); anything else that
    /// is not a record is an error saying what is wrong with it.
    pub fn from_stored(request_id: &str, value: &Value) -> Result<Option<Self>, RecordError> {
        match value {
            Value::Null => Ok(None),
            Value::Object(map) if map.is_empty() => Ok(None),
            _ => Self::decode(request_id, value).map(Some),
        }
    }

    /// Reads a record that must be there.
    pub fn decode(request_id: &str, value: &Value) -> Result<Self, RecordError> {
        let fail = |problem| RecordError {
            request_id: request_id.to_string(),
            problem,
        };
        if !value.is_object() {
            return Err(fail(RecordProblem::NotAnObject(
                orb_core::template::wire::kind_of(value),
            )));
        }
        let mut stored = StoredRecord::deserialize(value)
            .map_err(|e| fail(RecordProblem::Unreadable(e.to_string())))?;
        let controller = stored.controller();
        let non_empty = |text: Option<String>| text.filter(|t| !t.trim().is_empty());
        let kind = match non_empty(stored.provider_api.take()) {
            Some(text) => text
                .parse::<ProviderApi>()
                .map_err(|e| fail(RecordProblem::Unreadable(e)))?,
            None => controller.as_ref().map_or(ProviderApi::Pod, |c| c.kind),
        };
        if let Some(c) = &controller
            && c.kind != kind
        {
            return Err(fail(RecordProblem::ControllerMismatch {
                kind,
                controller: c.kind,
            }));
        }
        Ok(Self {
            request_id: non_empty(stored.request_id)
                .ok_or_else(|| fail(RecordProblem::Missing("request_id")))?,
            namespace: non_empty(stored.namespace)
                .ok_or_else(|| fail(RecordProblem::Missing("namespace")))?,
            kind,
            label_prefix: stored.label_prefix,
            pod_names: stored.pod_names,
            failed_pod_names: stored.failed_pod_names,
            create_failures: stored.create_failures,
            controller,
            service_name: stored.service_name,
            service_created: stored.service_created,
            replicas: stored.replicas,
            parallelism: stored.parallelism,
        })
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The Deployment, StatefulSet or Job name; `None` for bare pods.
    pub fn controller_name(&self) -> Option<&str> {
        self.controller.as_ref().map(|c| c.name.as_str())
    }

    /// The controller's name if it is of `kind`.
    pub fn controller_of(&self, kind: ProviderApi) -> Option<&str> {
        self.controller
            .as_ref()
            .filter(|c| c.kind == kind)
            .map(|c| c.name.as_str())
    }

    /// Records `name` as the request's controller, of the request's own kind.
    pub fn set_controller(&mut self, name: String) {
        self.controller = Some(ControllerRef {
            kind: self.kind,
            name,
        });
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::json;

    use super::*;

    const ID: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

    fn decode(value: Value) -> Result<RequestRecord, RecordError> {
        RequestRecord::decode(ID, &value)
    }

    /// Records as the code before `controller` wrote them, one per kind.
    #[rstest]
    #[case::pod(json!({"provider_api": "Pod", "pod_names": ["orb-fe4c-0000"]}), ProviderApi::Pod, None)]
    #[case::deployment(json!({"provider_api": "Deployment", "deployment_name": "orb-fe4c"}),
        ProviderApi::Deployment, Some("orb-fe4c"))]
    #[case::statefulset(json!({"provider_api": "StatefulSet", "statefulset_name": "orb-fe4c",
        "service_name": "grid", "service_created": true}), ProviderApi::StatefulSet, Some("orb-fe4c"))]
    #[case::job(json!({"provider_api": "Job", "job_name": "orb-fe4c", "parallelism": 3}),
        ProviderApi::Job, Some("orb-fe4c"))]
    #[case::lowercase_kind(json!({"provider_api": "statefulset", "statefulset_name": "orb-fe4c"}),
        ProviderApi::StatefulSet, Some("orb-fe4c"))]
    #[case::no_kind_written(json!({"job_name": "orb-fe4c"}), ProviderApi::Job, Some("orb-fe4c"))]
    #[case::empty_kind_bare_pods(json!({"provider_api": ""}), ProviderApi::Pod, None)]
    fn old_records_decode(
        #[case] extra: Value,
        #[case] kind: ProviderApi,
        #[case] controller: Option<&str>,
    ) {
        let mut value = json!({
            "request_id": ID, "namespace": "batch", "label_prefix": "orb",
            "requested_count": 3,
        });
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let record = decode(value.clone()).unwrap();
        assert_eq!(record.kind, kind);
        assert_eq!(record.controller_name(), controller);
        assert_eq!(
            record.controller.as_ref().map(|c| c.kind),
            controller.map(|_| kind)
        );
        assert_eq!(record.namespace, "batch");
        assert_eq!(record.label_prefix, "orb");
        if let Some(name) = value.get("service_name") {
            assert_eq!(record.service_name.as_deref(), name.as_str());
            assert!(record.service_created);
        }
        if value.get("parallelism").is_some() {
            assert_eq!(record.parallelism, Some(3));
        }
        if kind == ProviderApi::Pod {
            assert_eq!(
                record.pod_names,
                value["pod_names"].as_array().map_or(vec![], |names| {
                    names
                        .iter()
                        .map(|n| n.as_str().unwrap().to_string())
                        .collect()
                })
            );
        }
    }

    #[rstest]
    #[case::pod(ProviderApi::Pod)]
    #[case::deployment(ProviderApi::Deployment)]
    #[case::statefulset(ProviderApi::StatefulSet)]
    #[case::job(ProviderApi::Job)]
    fn new_records_round_trip(#[case] kind: ProviderApi) {
        let mut record = RequestRecord {
            request_id: ID.into(),
            namespace: "batch".into(),
            kind,
            label_prefix: "orb".into(),
            pod_names: vec!["orb-fe4c-0000".into()],
            failed_pod_names: vec!["orb-fe4c-0001".into()],
            create_failures: BTreeMap::from([("orb-fe4c-0001".into(), "Forbidden".into())]),
            replicas: Some(2),
            ..RequestRecord::default()
        };
        if kind != ProviderApi::Pod {
            record.set_controller("orb-fe4c".into());
        }
        let value = record.to_value();
        assert_eq!(value["provider_api"], kind.as_str(), "{value}");
        assert!(value.get("requested_count").is_none(), "{value}");
        assert!(value.get("deployment_name").is_none(), "{value}");
        assert_eq!(decode(value.clone()).unwrap(), record, "{value}");
        assert_eq!(
            RequestRecord::from_stored(ID, &value).unwrap(),
            Some(record)
        );
    }

    #[test]
    fn the_new_shape_names_the_controller_with_its_kind() {
        let mut record = RequestRecord {
            request_id: ID.into(),
            namespace: "batch".into(),
            kind: ProviderApi::Job,
            ..RequestRecord::default()
        };
        record.set_controller("orb-fe4c".into());
        assert_eq!(
            record.to_value(),
            json!({"request_id": ID, "namespace": "batch", "provider_api": "Job",
                   "label_prefix": "", "controller": {"kind": "Job", "name": "orb-fe4c"}})
        );
        assert_eq!(record.controller_of(ProviderApi::Job), Some("orb-fe4c"));
        assert_eq!(record.controller_of(ProviderApi::Deployment), None);
    }

    #[rstest]
    #[case::null(Value::Null)]
    #[case::fresh_request(json!({}))]
    fn no_bookkeeping_is_none(#[case] value: Value) {
        assert_eq!(RequestRecord::from_stored(ID, &value), Ok(None));
    }

    #[rstest]
    #[case::no_namespace(json!({"request_id": ID, "provider_api": "Pod"}), "missing namespace")]
    #[case::empty_namespace(json!({"request_id": ID, "namespace": ""}), "missing namespace")]
    #[case::no_request_id(json!({"namespace": "batch"}), "missing request_id")]
    #[case::not_an_object(json!(["orb-fe4c-0000"]), "expected a JSON object, got a list")]
    #[case::unknown_kind(json!({"request_id": ID, "namespace": "b", "provider_api": "CronJob"}),
        "provider_api \"CronJob\" is not supported")]
    #[case::wrong_type(json!({"request_id": ID, "namespace": "b", "pod_names": "orb-0"}),
        "invalid type: string \"orb-0\", expected a sequence")]
    #[case::mismatched_controller(json!({"request_id": ID, "namespace": "b",
        "provider_api": "Deployment", "job_name": "orb-fe4c"}),
        "it names a Job controller for a Deployment request")]
    fn bad_data_says_what_is_wrong(#[case] value: Value, #[case] problem: &str) {
        let err = RequestRecord::from_stored(ID, &value).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "provider data of request {ID} is not orb-k8s bookkeeping: "
            )),
            "{text}"
        );
        assert!(text.contains(problem), "{text}");
    }
}
