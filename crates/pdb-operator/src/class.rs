//! Availability classes, workload functions and the percentage each combination asks for
//! (note §3.1, §3.2).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much of a workload must stay up during voluntary disruptions.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum AvailabilityClass {
    NonCritical,
    Standard,
    HighAvailability,
    MissionCritical,
    Custom,
}

/// Error for a class name that is not one of the five.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid availability class: {0:?}; must be one of: non-critical, standard, high-availability, mission-critical, custom"
)]
pub struct InvalidClass(pub String);

impl AvailabilityClass {
    pub const ALL: [AvailabilityClass; 5] = [
        Self::NonCritical,
        Self::Standard,
        Self::HighAvailability,
        Self::MissionCritical,
        Self::Custom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NonCritical => "non-critical",
            Self::Standard => "standard",
            Self::HighAvailability => "high-availability",
            Self::MissionCritical => "mission-critical",
            Self::Custom => "custom",
        }
    }

    /// Rank used by `minimumClass` comparisons; `custom` ranks highest (5), as in the reference,
    /// but flexible enforcement never lets a `custom` annotation satisfy a minimum.
    pub fn rank(self) -> u8 {
        match self {
            Self::NonCritical => 1,
            Self::Standard => 2,
            Self::HighAvailability => 3,
            Self::MissionCritical => 4,
            Self::Custom => 5,
        }
    }

    /// minAvailable percentage of a predefined class, including the security boost.
    /// `custom` has no percentage of its own (its value comes from customPDBConfig, else 50%).
    pub fn min_available_percent(self, function: WorkloadFunction) -> u32 {
        let security = function == WorkloadFunction::Security;
        match self {
            Self::NonCritical if security => 50,
            Self::NonCritical => 20,
            Self::Standard if security => 75,
            Self::Standard => 50,
            Self::HighAvailability => 75,
            Self::MissionCritical => 90,
            Self::Custom => 50,
        }
    }

    /// Text of the `pdboperator.io/description` annotation.
    pub fn description(self) -> &'static str {
        match self {
            Self::NonCritical => "Non-critical apps (batch jobs, testing)",
            Self::Standard => "Typical microservices & APIs",
            Self::HighAvailability => "Stateful apps, DBs, Kafka consumers",
            Self::MissionCritical => "Critical services that must not go down",
            Self::Custom => "Custom availability configuration",
        }
    }
}

impl fmt::Display for AvailabilityClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AvailabilityClass {
    type Err = InvalidClass;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| InvalidClass(s.to_string()))
    }
}

/// What a workload does; `security` raises non-critical to 50% and standard to 75%.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadFunction {
    Core,
    Management,
    Security,
}

/// Error for a function name that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid workload function: {0:?}; must be one of: core, management, security")]
pub struct InvalidFunction(pub String);

impl WorkloadFunction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Core => "core",
            Self::Management => "management",
            Self::Security => "security",
        }
    }
}

impl fmt::Display for WorkloadFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkloadFunction {
    type Err = InvalidFunction;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "core" => Ok(Self::Core),
            "management" => Ok(Self::Management),
            "security" => Ok(Self::Security),
            other => Err(InvalidFunction(other.to_string())),
        }
    }
}

const SECURITY_HINTS: [&str; 7] = [
    "auth", "security", "identity", "keycloak", "oauth", "jwt", "rbac",
];
const MANAGEMENT_HINTS: [&str; 5] = ["operator", "controller", "manager", "webhook", "admission"];

/// Function guessed from the object name; used only on the policy path when the
/// `pdboperator.io/workload-function` annotation is absent (note §3.2). Security hints win.
pub fn infer_function_from_name(name: &str) -> WorkloadFunction {
    let lower = name.to_lowercase();
    if SECURITY_HINTS.iter().any(|h| lower.contains(h)) {
        WorkloadFunction::Security
    } else if MANAGEMENT_HINTS.iter().any(|h| lower.contains(h)) {
        WorkloadFunction::Management
    } else {
        WorkloadFunction::Core
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::non_critical(AvailabilityClass::NonCritical, WorkloadFunction::Core, 20)]
    #[case::non_critical_security(AvailabilityClass::NonCritical, WorkloadFunction::Security, 50)]
    #[case::standard(AvailabilityClass::Standard, WorkloadFunction::Core, 50)]
    #[case::standard_security(AvailabilityClass::Standard, WorkloadFunction::Security, 75)]
    #[case::ha(AvailabilityClass::HighAvailability, WorkloadFunction::Core, 75)]
    #[case::ha_management(AvailabilityClass::HighAvailability, WorkloadFunction::Management, 75)]
    #[case::ha_security(AvailabilityClass::HighAvailability, WorkloadFunction::Security, 75)]
    #[case::mission_critical(AvailabilityClass::MissionCritical, WorkloadFunction::Core, 90)]
    #[case::mission_critical_security(
        AvailabilityClass::MissionCritical,
        WorkloadFunction::Security,
        90
    )]
    #[case::custom_without_config(AvailabilityClass::Custom, WorkloadFunction::Core, 50)]
    fn class_percentages(
        #[case] class: AvailabilityClass,
        #[case] f: WorkloadFunction,
        #[case] pct: u32,
    ) {
        assert_eq!(class.min_available_percent(f), pct);
    }

    #[rstest]
    #[case::oauth("oauth-proxy", WorkloadFunction::Security)]
    #[case::upper_case("KeyCloak", WorkloadFunction::Security)]
    #[case::security_beats_management("auth-operator", WorkloadFunction::Security)]
    #[case::controller("cert-controller", WorkloadFunction::Management)]
    #[case::plain("web", WorkloadFunction::Core)]
    fn name_inference(#[case] name: &str, #[case] want: WorkloadFunction) {
        assert_eq!(infer_function_from_name(name), want);
    }

    #[test]
    fn parse_rejects_unknown_class_with_the_allowed_list() {
        let err = "super-duper-critical"
            .parse::<AvailabilityClass>()
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("invalid availability class"), "{msg}");
        assert!(msg.contains("must be one of: non-critical"), "{msg}");
    }

    #[test]
    fn ranks_follow_the_class_order() {
        let ranks: Vec<u8> = AvailabilityClass::ALL.iter().map(|c| c.rank()).collect();
        assert_eq!(ranks, vec![1, 2, 3, 4, 5]);
        for c in AvailabilityClass::ALL {
            assert_eq!(c.as_str().parse::<AvailabilityClass>(), Ok(c));
        }
    }
}
