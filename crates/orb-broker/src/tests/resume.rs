//! Acquires resumed after orb stopped in the middle of them: the deadline judges them only
//! once the resume has had its chance.

use super::*;

/// What a CLI killed while it created leaves behind: the acquire stored in progress with its
/// deadline (the fixture's grace, 300 s), nothing recorded, and its claim free.
async fn killed_mid_acquire(f: &Fixture, count: u32) -> orb_core::request::Request {
    let now = (f.broker.clock)();
    let mut request = test_support::request(RequestType::Acquire)
        .count(count)
        .created(now)
        .status(RequestStatus::InProgress)
        .started(now)
        .deadline(now + jiff::SignedDuration::from_secs(300))
        .build();
    f.insert_request(&mut request).await;
    request
}

/// The names the scripted provider gives the machines of `request`.
fn machine_names(request: &orb_core::request::Request) -> Vec<String> {
    (0..request.requested_count)
        .map(|i| format!("m-{}-{i:04}", &request.request_id.hex_digits()[..8]))
        .collect()
}

/// Nobody reads the acquire until long after its deadline: the first read resumes the
/// creates and sees half the machines running two seconds in. That is the resume at work,
/// not an acquire that ran out of time: it goes on, completes when every machine runs, and
/// only a resume that then gets nowhere for a whole grace period is judged.
#[tokio::test]
async fn an_acquire_resumed_after_its_deadline_is_judged_only_after_the_resume_had_its_chance() {
    for gets_there in [true, false] {
        let f = fixture().await;
        let request = killed_mid_acquire(&f, 2).await;
        let id = &request.request_id;
        let names = machine_names(&request);
        f.advance(400);
        f.next_status(
            Verdict::InProgress,
            &[
                (&names[0], MachineStatus::Running),
                (&names[1], MachineStatus::Pending),
            ],
        );
        let resumed = f.refresh(id).await;
        assert_eq!(
            resumed.request.status,
            RequestStatus::InProgress,
            "resumed, not judged in the same breath: {:?}",
            resumed.request.status_message
        );
        assert_eq!(resumed.machines.len(), 2, "its machines are recorded");
        if gets_there {
            f.advance(2);
            f.next_status(
                Verdict::Fulfilled,
                &[
                    (&names[0], MachineStatus::Running),
                    (&names[1], MachineStatus::Running),
                ],
            );
            let done = f.refresh(id).await;
            assert_eq!(done.request.status, RequestStatus::Complete);
        } else {
            // A whole grace period after the resume, the deadline judges it as any other.
            f.advance(301);
            f.next_status(
                Verdict::InProgress,
                &[
                    (&names[0], MachineStatus::Running),
                    (&names[1], MachineStatus::Pending),
                ],
            );
            let judged = f.refresh(id).await;
            assert_eq!(judged.request.status, RequestStatus::Partial);
            assert_eq!(
                judged.request.status_message.as_deref(),
                Some("Deadline exceeded: 1/2 fulfilled")
            );
        }
    }
}
