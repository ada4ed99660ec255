//! The `availability.pdboperator.io/v1alpha1` kinds: namespaced `PDBPolicy` and cluster-scoped
//! `ClusterPDBPolicy` (identical spec and status). Every rule that needs no outside data is a CEL
//! rule in the CRD, so an install without the admission webhook still rejects bad objects; the
//! same rules (plus the IANA zone and namespace-reach checks CEL cannot do) are re-checked by
//! [`crate::validation::validate_policy_spec`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::class::{AvailabilityClass, WorkloadFunction};

pub const GROUP: &str = "availability.pdboperator.io";
pub const VERSION: &str = "v1alpha1";

/// Spec of a PDBPolicy / ClusterPDBPolicy: which workloads it targets and what budget they get.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "availability.pdboperator.io",
    version = "v1alpha1",
    kind = "PDBPolicy",
    plural = "pdbpolicies",
    singular = "pdbpolicy",
    shortname = "pdbp",
    category = "pdb-operator",
    namespaced,
    status = "PDBPolicyStatus",
    derive = "PartialEq",
    doc = "Availability policy: gives matching Deployments, StatefulSets, LeaderWorkerSets and Workloads in this namespace a PodDisruptionBudget.",
    printcolumn = r#"{"name":"Availability Class","type":"string","jsonPath":".spec.availabilityClass"}"#,
    printcolumn = r#"{"name":"Enforcement","type":"string","jsonPath":".spec.enforcement"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Workloads","type":"integer","jsonPath":".status.workloadCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.availabilityClass != 'custom' || has(self.customPDBConfig)").message("custom availability class requires customPDBConfig"),
    validation = Rule::new("self.availabilityClass != 'custom' || !has(self.customPDBConfig) || has(self.customPDBConfig.minAvailable) || has(self.customPDBConfig.maxUnavailable)").message("customPDBConfig must specify either minAvailable or maxUnavailable"),
    validation = Rule::new("!has(self.enforcement) || self.enforcement != 'flexible' || !has(self.minimumClass) || !(self.minimumClass in ['non-critical', 'standard', 'high-availability', 'mission-critical', 'custom']) || !(self.availabilityClass in ['non-critical', 'standard', 'high-availability', 'mission-critical', 'custom']) || {'non-critical': 1, 'standard': 2, 'high-availability': 3, 'mission-critical': 4, 'custom': 5}[self.minimumClass] <= {'non-critical': 1, 'standard': 2, 'high-availability': 3, 'mission-critical': 4, 'custom': 5}[self.availabilityClass]").message("minimumClass cannot be higher than availabilityClass"),
    validation = Rule::new("(has(self.enforcement) && self.enforcement != 'advisory') || !has(self.overrideRequiresAnnotation) || !has(self.allowOverride) || self.allowOverride").message("overrideRequiresAnnotation: cannot require annotation when AllowOverride is false"),
    validation = Rule::new("!has(self.enforcement) || self.enforcement == 'advisory' || (!has(self.overrideRequiresAnnotation) && (!has(self.overrideRequiresReason) || !self.overrideRequiresReason))").message("overrideRequiresAnnotation and overrideRequiresReason are only applicable for advisory enforcement mode")
)]
pub struct PDBPolicySpec {
    /// Class applied to matched workloads: non-critical (20%), standard (50%), high-availability
    /// (75%), mission-critical (90%) or custom (customPDBConfig).
    #[schemars(schema_with = "class_schema")]
    #[x_kube(validation = Rule::new("self in ['non-critical', 'standard', 'high-availability', 'mission-critical', 'custom']").message("must be one of: non-critical, standard, high-availability, mission-critical, custom"))]
    pub availability_class: AvailabilityClass,

    /// Which workloads the policy targets. All non-empty criteria must hold.
    pub workload_selector: WorkloadSelector,

    /// Daily windows during which managed budgets are relaxed to minAvailable 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub maintenance_windows: Vec<MaintenanceWindow>,

    /// Budget for the custom class; unhealthyPodEvictionPolicy applies to every class.
    #[serde(
        rename = "customPDBConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_pdb_config: Option<CustomPdbConfig>,

    /// Accepted for compatibility and ignored: a PDB is never written for fewer than 2 replicas.
    #[serde(default = "default_true")]
    pub enforce_min_replicas: bool,

    /// Higher wins when several policies match (0..1000, default 50; an explicit 0 is kept).
    #[serde(default = "default_priority")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 1000").message("priority must be between 0 and 1000"))]
    pub priority: i32,

    /// How pdboperator.io/availability-class annotations interact with the policy: strict,
    /// flexible or advisory.
    #[serde(default)]
    #[schemars(schema_with = "short_string_schema")]
    #[x_kube(validation = Rule::new("self in ['strict', 'flexible', 'advisory']").message("must be one of: strict, flexible, advisory"))]
    pub enforcement: EnforcementMode,

    /// Flexible mode: the lowest class an annotation may choose (default: availabilityClass);
    /// one of the five availability classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "class_schema")]
    #[x_kube(validation = Rule::new("self in ['non-critical', 'standard', 'high-availability', 'mission-critical', 'custom']").message("must be a valid availability class"))]
    pub minimum_class: Option<AvailabilityClass>,

    /// Advisory mode: whether an annotation may override the policy at all.
    #[serde(default = "default_true")]
    pub allow_override: bool,

    /// Advisory mode: name of a workload annotation that must be non-empty for an override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    pub override_requires_annotation: Option<String>,

    /// Advisory mode: an override needs a non-empty pdboperator.io/override-reason annotation.
    #[serde(default)]
    pub override_requires_reason: bool,
}

// Enumerated fields are plain bounded strings in the schema and checked by CEL rules instead of
// an OpenAPI `enum`: the API server skips CEL rules once an enum check fails, which would lose
// the messages admission is expected to give ("must be one of: ..."). The bounds keep the
// rules' estimated cost low.
fn short_string_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "maxLength": 32 })
}

fn class_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    short_string_schema(g)
}

fn function_list_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "array", "maxItems": 3, "items": short_string_schema(g) })
}

fn default_true() -> bool {
    true
}

/// Default priority of a policy that does not set one.
pub const DEFAULT_PRIORITY: i32 = 50;

fn default_priority() -> i32 {
    DEFAULT_PRIORITY
}

/// Enforcement mode of a policy (note §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnforcementMode {
    /// The policy always wins over annotations.
    Strict,
    /// Annotations may raise the class, never below minimumClass.
    Flexible,
    /// Annotations override the policy, subject to allowOverride and its conditions.
    #[default]
    Advisory,
}

impl EnforcementMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Flexible => "flexible",
            Self::Advisory => "advisory",
        }
    }
}

// Objects written for the reference operator may carry `enforcement: ""`, which it read as
// advisory; accept that on read so they are not rejected by the controller.
impl<'de> Deserialize<'de> for EnforcementMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "strict" => Ok(Self::Strict),
            "flexible" => Ok(Self::Flexible),
            "advisory" | "" => Ok(Self::Advisory),
            other => Err(serde::de::Error::custom(format!(
                "enforcement {other:?} must be one of: strict, flexible, advisory"
            ))),
        }
    }
}

/// Selection of workloads by the labels and pdboperator.io annotations of the workload object.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0) || (has(self.workloadNames) && size(self.workloadNames) > 0) || (has(self.workloadFunctions) && size(self.workloadFunctions) > 0)").message("must specify at least one selection criteria (workloadNames, workloadFunctions, matchLabels, or matchExpressions)"))]
pub struct WorkloadSelector {
    /// Equality on the workload object's labels (not its pods' labels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub match_labels: BTreeMap<String, String>,

    /// Set-based requirements on the workload object's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<WorkloadSelectorRequirement>,

    /// Compared with annotation pdboperator.io/workload-name, else the object name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 253)))]
    pub workload_names: Vec<String>,

    /// core, management or security; compared with annotation pdboperator.io/workload-function,
    /// else core.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "function_list_schema")]
    #[x_kube(validation = Rule::new("self.all(f, f in ['core', 'management', 'security'])").message("must be one of: core, management, security"))]
    pub workload_functions: Vec<WorkloadFunction>,

    /// PDBPolicy: empty or only the policy's own namespace (a namespaced policy never reaches
    /// other namespaces). ClusterPDBPolicy: empty means every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    pub namespaces: Vec<String>,
}

/// One set-based requirement, as in a Kubernetes label selector.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) == 0) : (has(self.values) && size(self.values) > 0)").message("values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"))]
pub struct WorkloadSelectorRequirement {
    #[schemars(length(max = 317))]
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A daily window `start <= t < end` (overnight when start > end) in `timezone`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// H:MM or HH:MM, 24-hour clock.
    #[schemars(length(max = 5))]
    #[x_kube(validation = Rule::new("self.matches('^([0-1]?[0-9]|2[0-3]):[0-5][0-9]$')").message("must be in HH:MM format"))]
    pub start: String,
    /// H:MM or HH:MM, 24-hour clock; exclusive.
    #[schemars(length(max = 5))]
    #[x_kube(validation = Rule::new("self.matches('^([0-1]?[0-9]|2[0-3]):[0-5][0-9]$')").message("must be in HH:MM format"))]
    pub end: String,
    /// IANA zone in which the bounds and weekdays are read. Admission rejects an unknown zone:
    /// CEL's `getHours(zone)` fails on it, and an evaluation error rejects the object. The
    /// leading-letter pattern and the `Local` exclusion keep out what CEL would take but the
    /// controller would not (offsets like `+01:00`, the apiserver's local zone).
    #[serde(default = "default_timezone")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self == '' || self == 'UTC' || (self.matches('^[A-Za-z][A-Za-z0-9_+/-]*$') && self != 'Local' && timestamp('2026-01-01T00:00:00Z').getHours(self) >= 0)").message("must be an IANA time zone name such as UTC or Europe/Berlin"))]
    pub timezone: String,
    /// Weekdays on which the window opens, 0 = Sunday; empty = every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7), extend("x-kubernetes-list-type" = "set"))]
    #[x_kube(validation = Rule::new("self.all(d, d >= 0 && d <= 6)").message("must be between 0 (Sunday) and 6 (Saturday)"))]
    pub days_of_week: Vec<i32>,
}

fn default_timezone() -> String {
    "UTC".to_string()
}

/// Custom budget: exactly one of minAvailable / maxUnavailable when the class is custom.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.minAvailable) && has(self.maxUnavailable))").message("cannot specify both minAvailable and maxUnavailable"))]
pub struct CustomPdbConfig {
    /// Integer >= 0 or "N%" with 0 <= N <= 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^(100|[1-9]?[0-9])%$", "maxLength" = 4))]
    #[x_kube(validation = Rule::new("!string(self).startsWith('-')").message("must be an integer >= 0 or a percentage \"N%\" with 0 <= N <= 100"))]
    pub min_available: Option<IntOrString>,
    /// Integer >= 0 or "N%" with 0 <= N <= 100. Written to the PDB as maxUnavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^(100|[1-9]?[0-9])%$", "maxLength" = 4))]
    #[x_kube(validation = Rule::new("!string(self).startsWith('-')").message("must be an integer >= 0 or a percentage \"N%\" with 0 <= N <= 100"))]
    pub max_unavailable: Option<IntOrString>,
    /// Copied to every PDB produced under this policy.
    #[serde(default)]
    pub unhealthy_pod_eviction_policy: UnhealthyPodEvictionPolicy,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnhealthyPodEvictionPolicy {
    #[default]
    IfHealthyBudget,
    AlwaysAllow,
}

impl UnhealthyPodEvictionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IfHealthyBudget => "IfHealthyBudget",
            Self::AlwaysAllow => "AlwaysAllow",
        }
    }
}

/// Observed state of a policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PDBPolicyStatus {
    /// `Ready` (ComponentsMatched / NoComponentsMatched) and `Validated` (PolicyValid / PolicyInvalid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// `namespace/Kind/name` of workloads for which this policy won resolution.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_to_workloads: Vec<String>,
    /// `namespace/pdb-name` of PDBs produced under this policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pdbs_managed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Length of appliedToWorkloads (shown in the Workloads column).
    #[serde(default)]
    pub workload_count: i32,
}

/// Spec of the cluster-scoped kind: the same fields as PDBPolicySpec; here an empty
/// `workloadSelector.namespaces` means every namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "availability.pdboperator.io",
    version = "v1alpha1",
    kind = "ClusterPDBPolicy",
    plural = "clusterpdbpolicies",
    singular = "clusterpdbpolicy",
    shortname = "cpdbp",
    category = "pdb-operator",
    status = "PDBPolicyStatus",
    derive = "PartialEq",
    doc = "Cluster-wide availability policy (defaults for many namespaces); a namespaced PDBPolicy wins a priority tie.",
    printcolumn = r#"{"name":"Availability Class","type":"string","jsonPath":".spec.availabilityClass"}"#,
    printcolumn = r#"{"name":"Enforcement","type":"string","jsonPath":".spec.enforcement"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Workloads","type":"integer","jsonPath":".status.workloadCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct ClusterPDBPolicySpec(pub PDBPolicySpec);

impl std::ops::Deref for ClusterPDBPolicySpec {
    type Target = PDBPolicySpec;
    fn deref(&self) -> &PDBPolicySpec {
        &self.0
    }
}

/// Both CRDs as one multi-document YAML stream (what `pdb-operator crd` prints and what
/// `deploy/crds.yaml` must equal).
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::from("# Generated by `pdb-operator crd`; do not edit by hand.\n");
    for crd in [PDBPolicy::crd(), ClusterPDBPolicy::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
