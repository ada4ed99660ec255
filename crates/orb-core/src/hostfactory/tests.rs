//! Snapshots of every HostFactory reply shape. A change here changes what HostFactory parses:
//! review the diff as an interface change.

use insta::assert_json_snapshot;
use serde_json::json;

use super::machine_items;
use super::output::*;
use crate::ids::RequestId;
use crate::machine::{Machine, MachineStatus};
use crate::request::{Request, RequestStatus, RequestType};
use crate::template::TemplateUsage;
use crate::template::wire::template_from_value;
use crate::test_support::{self, at};

fn acquire_id() -> RequestId {
    RequestId::parse("req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f").unwrap()
}

fn return_id() -> RequestId {
    RequestId::parse("ret-ce0680f0-1111-4222-8333-944455556666").unwrap()
}

fn machine(name: &str, status: MachineStatus, ip: Option<&str>, reason: Option<&str>) -> Machine {
    test_support::machine(name)
        .request_id(acquire_id())
        .provider_name("kubernetes")
        .resource(name)
        .status(status)
        .instance_type("k8s/Pod")
        .price_type("ondemand")
        .tag("orb.io/managed", "true")
        .tag("team", "hpc")
        .provider_data(json!({}))
        .updated(at(30))
        .version(1)
        .with(|m| {
            m.status_reason = reason.map(String::from);
            m.private_ip = ip.map(String::from);
            m.launch_time = ip.map(|_| at(30));
        })
        .build()
}

/// The acquire's first machine, terminated by the return [`return_id`].
fn returned_machine() -> Machine {
    let mut returned = machine(
        "orb-fe4cda5c019444bc981b-0000",
        MachineStatus::Terminated,
        Some("10.0.0.7"),
        None,
    );
    returned.return_request_id = Some(return_id());
    returned
}

fn request(kind: RequestType, status: RequestStatus, wanted: u32, done: u32) -> Request {
    let id = match kind {
        RequestType::Acquire => acquire_id(),
        RequestType::Return => return_id(),
    };
    test_support::request(kind)
        .request_id(id)
        .provider("kubernetes", "k8s")
        .count(wanted)
        .status(status)
        .fulfilled(done)
        .build()
}

#[test]
fn templates_reply_with_derived_and_explicit_attributes() {
    let sized = template_from_value(
        &json!({"templateId": "worker", "maxNumber": 4, "imageId": "busybox:1.36",
                "instanceTags": "team=hpc;tier=batch", "priceType": "ondemand",
                "resourceRequests": {"cpu": "1500m", "memory": "3Gi"},
                "nodeSelector": {"kubernetes.io/arch": "amd64"}, "namespace": "batch"}),
        None,
        "#0",
    )
    .unwrap()
    .template;
    let explicit = template_from_value(
        &json!({"templateId": "gpu", "maxNumber": -1, "imageId": "cuda:12", "providerApi": "Job",
                "attributes": {"type": ["String", "NTX64"], "ncpus": ["Numeric", "16"]}}),
        None,
        "#1",
    )
    .unwrap()
    .template;
    let reply = templates_reply(vec![
        template_entry(
            &sized,
            4,
            &TemplateUsage {
                live_machine_names: vec!["orb-fe4cda5c019444bc981b-0000".into()],
                reserved: 0,
            },
        ),
        template_entry(&explicit, -1, &TemplateUsage::default()),
    ]);
    assert_json_snapshot!(reply);
}

#[test]
fn submit_replies() {
    assert_json_snapshot!(json!({
        "accepted": SubmitReply { request_id: acquire_id().to_string(), message: "Request submitted for processing".into() },
        "rejected": ErrorReply { message: "template \"nope\" is not defined; available: worker, gpu".into() },
    }));
}

#[test]
fn status_reply_for_acquire_return_and_unknown_ids() {
    let acquire = request(RequestType::Acquire, RequestStatus::PartialPending, 3, 1);
    let mut running = machine(
        "orb-fe4cda5c019444bc981b-0000",
        MachineStatus::Running,
        Some("10.0.0.7"),
        None,
    );
    running.provider_data =
        json!({"cloud_host_id": "kwok-node-3", "node_name": "kwok-node-3"}).into();
    let acquired = vec![
        running,
        machine(
            "orb-fe4cda5c019444bc981b-0001",
            MachineStatus::Pending,
            None,
            Some("Unschedulable"),
        ),
        machine(
            "orb-fe4cda5c019444bc981b-0002",
            MachineStatus::Failed,
            None,
            None,
        ),
    ];
    let mut ret = request(RequestType::Return, RequestStatus::Complete, 1, 1);
    ret.template_id = None;
    ret.unknown_machines = vec!["host-we-never-made".into()];
    let returned = [returned_machine()];
    let reply = StatusReply {
        requests: vec![
            request_status_entry(&acquire, &acquired),
            request_status_entry(&ret, &returned),
            unknown_request_entry("req-00000000-0000-4000-8000-000000000000"),
        ],
    };
    assert_json_snapshot!(reply);
}

#[test]
fn status_messages_for_finished_requests() {
    let mut failed = request(RequestType::Acquire, RequestStatus::Failed, 2, 0);
    failed.status_message = Some("image registry.invalid/x:1 cannot be pulled".into());
    let timeout = request(RequestType::Acquire, RequestStatus::Timeout, 2, 0);
    let complete = request(RequestType::Acquire, RequestStatus::Complete, 2, 2);
    let reply = StatusReply {
        requests: vec![
            request_status_entry(&failed, &[]),
            request_status_entry(&timeout, &[]),
            request_status_entry(&complete, &[]),
        ],
    };
    assert_json_snapshot!(reply);
}

#[test]
fn return_requests_replies() {
    assert_json_snapshot!(json!({
        "none": return_requests_reply(vec![]),
        "reclaimed": return_requests_reply(vec![
            ReclaimEntry { machine: "orb-fe4cda5c019444bc981b-0001".into(), grace_period: 0 },
            ReclaimEntry { machine: "orb-fe4cda5c019444bc981b-0002".into(), grace_period: 30 },
        ]),
    }));
}

#[test]
fn machines_written_ahead_make_the_same_reply() {
    let mut acquire = request(RequestType::Acquire, RequestStatus::Complete, 3, 2);
    let machines = vec![
        returned_machine(),
        machine(
            "orb-fe4cda5c019444bc981b-0001",
            MachineStatus::Failed,
            None,
            Some("quote \" and\nline break"),
        ),
        machine(
            "orb-fe4cda5c019444bc981b-0002",
            MachineStatus::Running,
            Some("10.0.0.8"),
            None,
        ),
    ];
    let mut ret = request(RequestType::Return, RequestStatus::InProgress, 2, 1);
    for (unknown, machines) in [(vec![], &machines[..]), (vec!["ghost", "x\"y"], &[][..])]
        .into_iter()
        .chain([(vec!["ghost"], &machines[..1]), (vec![], &[][..])])
    {
        for request in [&mut acquire, &mut ret] {
            request.unknown_machines = unknown.iter().map(|s| s.to_string()).collect();
            let items = machine_items(request.request_type, machines);
            let written = StatusReply {
                requests: vec![request_status_entry_written(request, &items)],
            };
            let built = StatusReply {
                requests: vec![request_status_entry(request, machines)],
            };
            assert_eq!(
                written.to_pretty_json(),
                built.to_pretty_json(),
                "{:?} with {} machines and unknown {unknown:?}",
                request.request_type,
                machines.len()
            );
        }
    }
    // The items are the request type's: an acquire's do not stand in for a return's.
    let items = machine_items(RequestType::Acquire, &machines);
    assert_ne!(
        StatusReply {
            requests: vec![request_status_entry_written(&ret, &items)]
        }
        .to_pretty_json(),
        StatusReply {
            requests: vec![request_status_entry(&ret, &machines)]
        }
        .to_pretty_json()
    );
}
