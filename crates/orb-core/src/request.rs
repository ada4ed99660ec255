//! The request record: one acquire (`req-…`) or one return (`ret-…`) and where it stands.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::ids::RequestId;
pub use crate::ids::RequestType;
use crate::shared::Shared;
use crate::template::ProviderApi;

/// Where a request stands. Terminal: complete, partial, failed, cancelled, timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    Pending,
    InProgress,
    Acquiring,
    PartialPending,
    Complete,
    Partial,
    Failed,
    Cancelled,
    Timeout,
}

impl RequestStatus {
    pub const ALL: [RequestStatus; 9] = [
        Self::Pending,
        Self::InProgress,
        Self::Acquiring,
        Self::PartialPending,
        Self::Complete,
        Self::Partial,
        Self::Failed,
        Self::Cancelled,
        Self::Timeout,
    ];

    /// Every status that is not terminal: a request in one of these may still change.
    pub const UNFINISHED: [RequestStatus; 4] = [
        Self::Pending,
        Self::InProgress,
        Self::Acquiring,
        Self::PartialPending,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Acquiring => "acquiring",
            Self::PartialPending => "partial_pending",
            Self::Complete => "complete",
            Self::Partial => "partial",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Complete | Self::Partial | Self::Failed | Self::Cancelled | Self::Timeout
        )
    }

    /// Terminal states a caller should treat as unsuccessful (the CLI's non-zero exit in
    /// HostFactory mode).
    pub fn is_unsuccessful(self) -> bool {
        matches!(
            self,
            Self::Partial | Self::Failed | Self::Cancelled | Self::Timeout
        )
    }
}

impl fmt::Display for RequestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RequestStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        if lower == "completed" {
            return Ok(Self::Complete);
        }
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == lower)
            .ok_or_else(|| {
                format!(
                    "unknown request status {s:?}; expected one of {}",
                    Self::ALL.map(|s| s.as_str()).join(", ")
                )
            })
    }
}

/// One acquire or return request as stored. Machines live in their own records and point back
/// with `request_id` (acquire) or `return_request_id` (return).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub request_id: RequestId,
    pub request_type: RequestType,
    /// The template of an acquire; `None` for returns that span templates.
    pub template_id: Option<String>,
    pub provider_name: String,
    pub provider_type: String,
    /// The template's kind, set when an acquire is created; `None` for returns (they may span
    /// templates of several kinds).
    pub provider_api: Option<ProviderApi>,
    pub status: RequestStatus,
    pub status_message: Option<String>,
    pub requested_count: u32,
    /// Machines that count as delivered (acquire) or released (return) at the last evaluation.
    pub fulfilled_count: u32,
    pub failed_count: u32,
    /// For returns: the machine ids the caller named (resolved ones; see `unknown_machines`).
    pub machine_ids: Vec<String>,
    /// For returns: entries the caller named that orb never managed; reported once as `fail`.
    pub unknown_machines: Vec<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub deadline_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub last_transition_at: Timestamp,
    /// The provider's objects (a Pod acquire: every pod name). Shared by copies of the
    /// request, as `provider_data` is: each lists every pod of a 5,000-pod acquire, and a status
    /// read copies the request.
    pub resource_ids: Shared<Vec<String>>,
    /// Opaque provider bookkeeping (namespace, controller name, …) handed back on later calls.
    pub provider_data: Shared<serde_json::Value>,
    /// Optimistic-concurrency version; bumped by the store on every write.
    pub version: i64,
}

impl Request {
    /// A fresh `pending` request, not yet stored.
    pub fn new(
        request_id: RequestId,
        request_type: RequestType,
        template_id: Option<String>,
        provider_name: &str,
        provider_type: &str,
        requested_count: u32,
        now: Timestamp,
    ) -> Self {
        Self {
            request_id,
            request_type,
            template_id,
            provider_name: provider_name.to_string(),
            provider_type: provider_type.to_string(),
            provider_api: None,
            status: RequestStatus::Pending,
            status_message: None,
            requested_count,
            fulfilled_count: 0,
            failed_count: 0,
            machine_ids: Vec::new(),
            unknown_machines: Vec::new(),
            created_at: now,
            started_at: None,
            deadline_at: None,
            completed_at: None,
            last_transition_at: now,
            resource_ids: Shared::default(),
            provider_data: serde_json::Value::Object(Default::default()).into(),
            version: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn every_status_round_trips_through_its_name() {
        for status in RequestStatus::ALL {
            assert_eq!(status.as_str().parse::<RequestStatus>(), Ok(status));
        }
    }

    #[test]
    fn unfinished_is_every_status_that_is_not_terminal() {
        let not_terminal: Vec<RequestStatus> = RequestStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect();
        assert_eq!(RequestStatus::UNFINISHED.to_vec(), not_terminal);
    }

    #[rstest]
    #[case::alias("completed", RequestStatus::Complete)]
    #[case::upper("IN_PROGRESS", RequestStatus::InProgress)]
    fn status_parsing_is_lenient_about_case_and_the_completed_alias(
        #[case] raw: &str,
        #[case] status: RequestStatus,
    ) {
        assert_eq!(raw.parse::<RequestStatus>(), Ok(status));
    }

    #[test]
    fn unknown_status_names_the_choices() {
        let err = "done".parse::<RequestStatus>().unwrap_err();
        assert!(err.contains("\"done\"") && err.contains("partial_pending"));
    }

    #[rstest]
    #[case(RequestStatus::Pending, false, false)]
    #[case(RequestStatus::InProgress, false, false)]
    #[case(RequestStatus::Acquiring, false, false)]
    #[case(RequestStatus::PartialPending, false, false)]
    #[case(RequestStatus::Complete, true, false)]
    #[case(RequestStatus::Partial, true, true)]
    #[case(RequestStatus::Failed, true, true)]
    #[case(RequestStatus::Cancelled, true, true)]
    #[case(RequestStatus::Timeout, true, true)]
    fn terminal_and_unsuccessful_sets(
        #[case] status: RequestStatus,
        #[case] terminal: bool,
        #[case] unsuccessful: bool,
    ) {
        assert_eq!(status.is_terminal(), terminal);
        assert_eq!(status.is_unsuccessful(), unsuccessful);
    }
}
