//! HostFactory's view of orb's statuses.

use crate::machine::MachineStatus;
use crate::request::{RequestStatus, RequestType};

/// HostFactory request `status`.
pub fn hf_request_status(status: RequestStatus) -> &'static str {
    use RequestStatus::*;
    match status {
        Pending | InProgress | Acquiring | PartialPending => "running",
        Complete => "complete",
        Partial | Failed | Cancelled | Timeout => "complete_with_error",
    }
}

/// The same table over raw status words (stored text from older versions): lower-cased first,
/// `completed`/`provisioning`/`error` understood, anything unknown keeps HostFactory polling.
pub fn hf_request_status_for_word(word: &str) -> &'static str {
    match word.trim().to_ascii_lowercase().as_str() {
        "complete" | "completed" => "complete",
        "partial" | "failed" | "cancelled" | "timeout" | "error" => "complete_with_error",
        _ => "running",
    }
}

/// HostFactory machine `result`: `succeed`, `executing` or `fail`.
pub fn hf_machine_result(request_type: RequestType, status: MachineStatus) -> &'static str {
    use MachineStatus::*;
    match request_type {
        // A stopped machine exited (its pod is still there): not a host any more.
        RequestType::Acquire => match status {
            Running => "succeed",
            Terminated | Failed | Stopped => "fail",
            Pending | Launching | Stopping | ShuttingDown | Returned | Unknown => "executing",
        },
        // Until its object is gone, a machine being returned is still on its way out.
        RequestType::Return => match status {
            Terminated => "succeed",
            ShuttingDown | Stopping | Pending | Running | Failed | Stopped => "executing",
            Launching | Returned | Unknown => "fail",
        },
    }
}

/// The `message` of a requestMachines / requestReturnMachines reply, by status at reply time.
pub fn submit_message(status: RequestStatus, detail: Option<&str>) -> String {
    use RequestStatus::*;
    let with = |head: &str| match detail {
        Some(d) if !d.is_empty() => format!("{head}: {d}"),
        _ => head.to_string(),
    };
    match status {
        Pending => "Request submitted for processing".into(),
        InProgress | Acquiring | PartialPending => "Request in progress".into(),
        Complete => match detail {
            Some(d) if !d.is_empty() => d.to_string(),
            _ => "Request completed successfully".into(),
        },
        Failed => with("Request failed"),
        Partial => with("Request partially completed"),
        Cancelled => with("Request cancelled"),
        Timeout => with("Request timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(RequestStatus::Pending, "running")]
    #[case(RequestStatus::InProgress, "running")]
    #[case(RequestStatus::Acquiring, "running")]
    #[case(RequestStatus::PartialPending, "running")]
    #[case(RequestStatus::Complete, "complete")]
    #[case(RequestStatus::Partial, "complete_with_error")]
    #[case(RequestStatus::Failed, "complete_with_error")]
    #[case(RequestStatus::Cancelled, "complete_with_error")]
    #[case(RequestStatus::Timeout, "complete_with_error")]
    fn request_status_table(#[case] status: RequestStatus, #[case] hf: &str) {
        assert_eq!(hf_request_status(status), hf);
        assert_eq!(hf_request_status_for_word(status.as_str()), hf);
    }

    #[rstest]
    #[case("COMPLETED", "complete")]
    #[case("provisioning", "running")]
    #[case("error", "complete_with_error")]
    #[case("something-new", "running")]
    fn request_status_words(#[case] word: &str, #[case] hf: &str) {
        assert_eq!(hf_request_status_for_word(word), hf);
    }

    #[rstest]
    #[case(RequestType::Acquire, MachineStatus::Running, "succeed")]
    #[case(RequestType::Acquire, MachineStatus::Pending, "executing")]
    #[case(RequestType::Acquire, MachineStatus::Launching, "executing")]
    #[case(RequestType::Acquire, MachineStatus::Terminated, "fail")]
    #[case::exited_host(RequestType::Acquire, MachineStatus::Stopped, "fail")]
    #[case(RequestType::Acquire, MachineStatus::Failed, "fail")]
    #[case(RequestType::Acquire, MachineStatus::Unknown, "executing")]
    #[case(RequestType::Return, MachineStatus::Terminated, "succeed")]
    #[case::exited_host_still_there(RequestType::Return, MachineStatus::Stopped, "executing")]
    #[case(RequestType::Return, MachineStatus::ShuttingDown, "executing")]
    #[case(RequestType::Return, MachineStatus::Stopping, "executing")]
    #[case(RequestType::Return, MachineStatus::Pending, "executing")]
    #[case(RequestType::Return, MachineStatus::Running, "executing")]
    #[case(RequestType::Return, MachineStatus::Unknown, "fail")]
    #[case::failed_host_still_there(RequestType::Return, MachineStatus::Failed, "executing")]
    #[case(RequestType::Return, MachineStatus::Returned, "fail")]
    fn machine_result_table(
        #[case] kind: RequestType,
        #[case] status: MachineStatus,
        #[case] result: &str,
    ) {
        assert_eq!(hf_machine_result(kind, status), result);
    }

    #[rstest]
    #[case(RequestStatus::Pending, None, "Request submitted for processing")]
    #[case(RequestStatus::InProgress, None, "Request in progress")]
    #[case(RequestStatus::Complete, None, "Request completed successfully")]
    #[case(
        RequestStatus::Failed,
        Some("image missing"),
        "Request failed: image missing"
    )]
    #[case(
        RequestStatus::Partial,
        Some("1/2"),
        "Request partially completed: 1/2"
    )]
    #[case(RequestStatus::Cancelled, None, "Request cancelled")]
    #[case(RequestStatus::Timeout, None, "Request timed out")]
    fn submit_messages(
        #[case] status: RequestStatus,
        #[case] detail: Option<&str>,
        #[case] message: &str,
    ) {
        assert_eq!(submit_message(status, detail), message);
    }
}
