//! Templates: what one machine of a kind looks like.
//!
//! Inside orb a template uses snake_case names ([`Template`]); on the HostFactory wire and in
//! HostFactory template files it uses camelCase. [`wire`] translates between the two, [`file`]
//! reads template files, [`validate`] lists everything wrong with a template at once.

pub mod file;
pub mod validate;
pub mod wire;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use validate::TemplateProblem;
pub use wire::NormalizedTemplate;

/// The Kubernetes workload one request creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ProviderApi {
    #[default]
    Pod,
    Deployment,
    StatefulSet,
    Job,
}

impl ProviderApi {
    pub const ALL: [ProviderApi; 4] = [Self::Pod, Self::Deployment, Self::StatefulSet, Self::Job];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::Job => "Job",
        }
    }
}

impl fmt::Display for ProviderApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderApi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|api| api.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "provider_api {s:?} is not supported; use Pod, Deployment, StatefulSet or Job"
                )
            })
    }
}

impl Serialize for ProviderApi {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProviderApi {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// Container resources. Quantities stay text (numbers are accepted and turned into text) so
/// the provider can hand them to the apiserver unchanged.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ResourceSpec {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "quantity_text"
    )]
    pub cpu: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "quantity_text"
    )]
    pub memory: Option<String>,
    #[serde(
        default,
        alias = "ephemeralStorage",
        alias = "ephemeral-storage",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "quantity_text"
    )]
    pub ephemeral_storage: Option<String>,
    #[serde(default, alias = "gpuCount", skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    /// Extended resource name for the GPU count, e.g. `nvidia.com/gpu`.
    #[serde(default, alias = "gpuType", skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
}

fn quantity_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(serde::de::Error::custom(format!(
            "expected a quantity such as \"500m\" or \"2Gi\", got {other}"
        ))),
    }
}

/// One container environment variable: a literal `value` or a `valueFrom` source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(
        default,
        rename = "valueFrom",
        alias = "value_from",
        skip_serializing_if = "Option::is_none"
    )]
    pub value_from: Option<Value>,
}

/// A machine template. Field names are orb's internal snake_case; see [`wire`] for the
/// HostFactory camelCase names and legacy aliases.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Template {
    pub template_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_api: Option<ProviderApi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_name: Option<String>,
    /// Container image (HostFactory `imageId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// Cap on live machines from this template (HostFactory `maxNumber`); -1 = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_machines: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_role: Option<String>,
    /// HostFactory `instanceTags`; written as `"k=v;k=v"` or an object, applied as pod labels.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "wire::tags_from_string_or_map"
    )]
    pub tags: BTreeMap<String, String>,
    /// Explicit HostFactory attributes (`{"ncpus":["Numeric","4"],…}`); derived when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Kubernetes toleration objects, passed to the provider as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requests: Option<ResourceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Value>>,
    /// Container env; a list of `{name, value|valueFrom}` or a `{name: value}` map.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "wire::env_from_list_or_map"
    )]
    pub environment_variables: Option<Vec<EnvVar>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Secret names appended to `imagePullSecrets` (HostFactory `imagePullSecret`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "wire::strings_from_string_or_list"
    )]
    pub image_pull_secrets: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Value>,
    /// Pod-level security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Partial pod spec deep-merged over the built one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_spec_override: Option<Value>,
    /// Inline workload body (no HostFactory key); needs native spec enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_spec: Option<Value>,
    /// Path of a YAML/JSON workload body; needs native spec enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_spec_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Per-template provider overrides, passed to the provider untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<Value>,
    /// Keys orb does not model (`keyName`, `vmType`, `_comment`, …), kept and echoed.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// The default `maxNumber` when neither the template nor its provider defaults set one
/// (the reference's `template.max_number`).
pub const DEFAULT_MAX_MACHINES: i64 = 10;

impl Template {
    pub fn api(&self) -> ProviderApi {
        self.provider_api.unwrap_or_default()
    }

    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.template_id)
    }

    /// The cap, with `default_max` for templates that set none. -1 means unlimited.
    pub fn max_machines_or(&self, default_max: i64) -> i64 {
        self.max_machines.unwrap_or(default_max)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("template {label} cannot be read: {message}")]
    Malformed { label: String, message: String },
    #[error("template {template_id:?} is invalid: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        template_id: String,
        problems: Vec<TemplateProblem>,
    },
}

/// Live machines of one template and the ones its unfinished requests will still create:
/// what `maxNumber` is counted against (HostFactory shows it as `availableNumber` and
/// `requestedMachines`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemplateUsage {
    pub live_machine_names: Vec<String>,
    /// Machines unfinished requests of the template will still create (counted against
    /// `maxNumber` like live ones).
    pub reserved: i64,
}

impl TemplateUsage {
    /// How many more machines `max_machines` allows (`availableNumber`): what is not live or
    /// reserved, never below 0. `None` when the template is unlimited (a negative maximum).
    pub fn available(&self, max_machines: i64) -> Option<i64> {
        (max_machines >= 0)
            .then(|| (max_machines - self.live_machine_names.len() as i64 - self.reserved).max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("Pod", ProviderApi::Pod)]
    #[case("deployment", ProviderApi::Deployment)]
    #[case("STATEFULSET", ProviderApi::StatefulSet)]
    #[case("Job", ProviderApi::Job)]
    fn provider_api_names_are_case_insensitive(#[case] raw: &str, #[case] api: ProviderApi) {
        assert_eq!(raw.parse::<ProviderApi>(), Ok(api));
    }

    #[test]
    fn unknown_provider_api_lists_the_choices() {
        let err = "CronJob".parse::<ProviderApi>().unwrap_err();
        assert!(err.contains("CronJob") && err.contains("StatefulSet"));
    }

    #[test]
    fn max_machines_falls_back_to_the_given_default() {
        let mut t = Template {
            template_id: "a".into(),
            ..Default::default()
        };
        assert_eq!(t.max_machines_or(DEFAULT_MAX_MACHINES), 10);
        t.max_machines = Some(-1);
        assert_eq!(t.max_machines_or(DEFAULT_MAX_MACHINES), -1);
    }
}
