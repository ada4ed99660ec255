//! The bookkeeping an acquire hands back to the broker (`provider_data`), read again on every
//! later status, release and cancel of that request. Field names follow the reference so
//! stored requests stay readable.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::naming::ResourceKind;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: String,
    pub namespace: String,
    /// `Pod`, `Deployment`, `StatefulSet` or `Job`.
    #[serde(default)]
    pub provider_api: String,
    /// The label prefix the objects were stamped with.
    #[serde(default)]
    pub label_prefix: String,
    #[serde(default)]
    pub requested_count: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_pod_names: Vec<String>,
    /// Why each failed create failed (apiserver reason).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub create_failures: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statefulset_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Whether orb created the headless Service (and so deletes it with the set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub service_created: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
}

impl RequestRecord {
    /// Reads stored provider data; `None` when it is missing or not orb-k8s bookkeeping.
    pub fn from_value(value: &Value) -> Option<Self> {
        if value.is_null() {
            return None;
        }
        serde_json::from_value(value.clone())
            .ok()
            .filter(|r: &RequestRecord| !r.namespace.is_empty())
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn kind(&self) -> Option<ResourceKind> {
        ResourceKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(&self.provider_api))
    }

    /// The Deployment, StatefulSet or Job name; `None` for bare pods.
    pub fn controller_name(&self) -> Option<&str> {
        self.deployment_name
            .as_deref()
            .or(self.statefulset_name.as_deref())
            .or(self.job_name.as_deref())
    }
}
