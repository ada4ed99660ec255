//! Machines: the hosts a request delivers (one pod each on Kubernetes).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::ids::RequestId;
use crate::shared::Shared;
use crate::template::ProviderApi;

/// One machine-state enum for every path. Running-but-not-Ready is `Pending`, never a word
/// outside this enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MachineStatus {
    Pending,
    Launching,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
    Returned,
    Failed,
    Unknown,
}

impl MachineStatus {
    pub const ALL: [MachineStatus; 10] = [
        Self::Pending,
        Self::Launching,
        Self::Running,
        Self::Stopping,
        Self::Stopped,
        Self::ShuttingDown,
        Self::Terminated,
        Self::Returned,
        Self::Failed,
        Self::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Launching => "launching",
            Self::Running => "running",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
            Self::ShuttingDown => "shutting-down",
            Self::Terminated => "terminated",
            Self::Returned => "returned",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    /// A machine whose object may still exist in the cluster: it counts against `maxNumber`
    /// and a return or cancel still has something to remove. A `failed` machine is live in
    /// this sense (a pod in ImagePullBackOff or a Failed pod is still there, holding its
    /// place) until orb sees its object gone, when it becomes `terminated`.
    pub fn is_live(self) -> bool {
        !matches!(self, Self::Terminated | Self::Returned)
    }
}

impl fmt::Display for MachineStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MachineStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == lower)
            .ok_or_else(|| {
                format!(
                    "unknown machine status {s:?}; expected one of {}",
                    Self::ALL.map(|s| s.as_str()).join(", ")
                )
            })
    }
}

/// One machine as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Stable id HostFactory uses; on Kubernetes the pod name.
    pub machine_id: String,
    /// The host name HostFactory sees join; usually equal to `machine_id`.
    pub name: String,
    pub request_id: RequestId,
    pub return_request_id: Option<RequestId>,
    pub template_id: String,
    pub provider_name: String,
    /// The kind of its acquire request; `None` only in rows written without one.
    pub provider_api: Option<ProviderApi>,
    /// The object that owns the machine on the provider side (pod or controller name).
    pub resource_id: Option<String>,
    /// The provider's identity of this incarnation (pod UID); a new UID is a new machine.
    pub uid: Option<String>,
    pub status: MachineStatus,
    pub status_reason: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub launch_time: Option<Timestamp>,
    pub instance_type: Option<String>,
    pub price_type: Option<String>,
    pub tags: Shared<BTreeMap<String, String>>,
    pub provider_data: Shared<serde_json::Value>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

/// The machines of one request as the store keeps them: copies of the list share it, so a
/// status read that finds nothing new hands the kept list on without copying 5,000 machines,
/// and a read that changes a machine copies the list first (copy on write).
pub type MachineList = Shared<Vec<Machine>>;

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn every_status_round_trips_and_serialises_as_its_name() {
        for status in MachineStatus::ALL {
            assert_eq!(status.as_str().parse::<MachineStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
    }

    #[rstest]
    #[case(MachineStatus::Pending, true)]
    #[case(MachineStatus::Running, true)]
    #[case(MachineStatus::Stopping, true)]
    #[case(MachineStatus::Unknown, true)]
    #[case(MachineStatus::Terminated, false)]
    #[case(MachineStatus::Returned, false)]
    #[case::failed_pod_still_there(MachineStatus::Failed, true)]
    fn liveness(#[case] status: MachineStatus, #[case] live: bool) {
        assert_eq!(status.is_live(), live);
    }

    #[test]
    fn starting_is_not_a_machine_status() {
        assert!("starting".parse::<MachineStatus>().is_err());
    }
}
