"""One machine cycle through orb's REST API, driven by a client generated from orb's own
OpenAPI document (openapi-python-client; the cluster test clients_rest generates it from the
running server's /openapi.json and then runs this script against that server).

Cycle: list templates -> request machines -> poll their status until complete -> read the
request's SSE stream to its closing `data: {}` -> return one machine -> poll the return until
complete -> request machines that cannot be scheduled -> cancel them -> check the request is
cancelled. Every step checks what the reply says; the first failed expectation prints what was
expected and what came back, and the script exits 1. On success the last line of stdout is
`RESULT <json>`: the ids the cluster test then checks in the cluster itself.

Usage: rest_cycle.py --base-url URL --client-dir DIR --template ID --held-template ID
"""

import argparse
import json
import sys
import time

DEADLINE_SECONDS = 120.0
POLL_SECONDS = 0.5


class Failed(Exception):
    """An expectation the server's reply did not meet."""


def expect(condition, what, got=None):
    if not condition:
        raise Failed(what if got is None else f"{what}; got: {got!r}")


def step(text):
    print(f"--- {text}", flush=True)


def main():
    args = parse_args()
    # The generated package lives in a temp dir of the test, not in the venv.
    sys.path.insert(0, args.client_dir)
    import httpx
    from orb_client import Client
    from orb_client.api.machines import request_machines, return_machines
    from orb_client.api.requests import (
        cancel_request_api_v1_requests_request_id_delete as cancel_request,
        request_status,
        stream_request_status_api_v1_requests_request_id_stream_get as stream_request,
    )
    from orb_client.api.templates import list_templates_api_v1_templates_get as list_templates
    from orb_client.models import (
        CancelReply,
        MachineRequestBody,
        RequestDetail,
        ReturnBody,
        TemplateList,
    )

    # An undocumented status code raises instead of answering None: the document must list
    # every status the server sends on these routes.
    client = Client(
        base_url=args.base_url,
        raise_on_unexpected_status=True,
        timeout=httpx.Timeout(30.0),
    )

    def status_of(request_id):
        reply = request_status.sync(request_id, client=client)
        expect(
            isinstance(reply, RequestDetail),
            f"GET status of {request_id} is a RequestDetail",
            reply,
        )
        return reply

    def wait_terminal(request_id, what):
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            reply = status_of(request_id)
            item = reply.requests[0]
            if item.is_terminal:
                return reply
            expect(
                time.monotonic() < deadline,
                f"{what}: {request_id} finished within {DEADLINE_SECONDS:.0f} s",
                f"{item.status} ({item.message})",
            )
            time.sleep(POLL_SECONDS)

    step("list templates")
    templates = list_templates.sync(client=client)
    expect(
        isinstance(templates, TemplateList), "GET /api/v1/templates/ is a TemplateList", templates
    )
    ids = [t.template_id for t in templates.templates]
    expect(
        args.template in ids and args.held_template in ids,
        f"templates {args.template} and {args.held_template} listed",
        ids,
    )
    subject = next(t for t in templates.templates if t.template_id == args.template)
    expect(
        subject.provider_type == "k8s", "the template's provider type is k8s", subject.provider_type
    )

    step(f"request {args.count} machines of {args.template}")
    body = MachineRequestBody(template_id=args.template, count=args.count)
    # The generated model writes the reference broker's camelCase body.
    expect(
        body.to_dict() == {"templateId": args.template, "count": args.count},
        "the body is the reference's",
        body.to_dict(),
    )
    response = request_machines.sync_detailed(client=client, body=body)
    expect(
        response.status_code in (200, 202),
        "POST /api/v1/machines/request is accepted",
        (response.status_code, response.content),
    )
    acquire = response.parsed
    expect(isinstance(acquire, RequestDetail), "the reply is a RequestDetail", acquire)
    acquire_id = acquire.request_id
    expect(acquire_id.startswith("req-"), "an acquire id is req-…", acquire_id)

    step(f"poll {acquire_id} until it is complete")
    done = wait_terminal(acquire_id, "acquire")
    item = done.requests[0]
    expect(
        item.status == "complete", f"{acquire_id} is complete", f"{item.status} ({item.message})"
    )
    expect(done.request.status == "complete", "orb's own view agrees", done.request.status)
    machines = item.machines or []
    expect(len(machines) == args.count, f"{args.count} machines", [m.machine_id for m in machines])
    for m in machines:
        expect(
            m.result == "succeed" and m.status == "running",
            f"machine {m.machine_id} is running",
            (m.status, m.result),
        )
        expect(
            bool(m.private_ip_address), f"machine {m.machine_id} has an IP", m.private_ip_address
        )

    step(f"read the stream of {acquire_id} to its closing frame")
    frames = read_stream(client, stream_request, acquire_id)
    expect(len(frames) >= 2, "at least one status frame and the closing one", frames)
    expect(frames[-1] == {}, "the last frame is data: {}", frames[-1])
    for frame in frames[:-1]:
        # Each frame is the same JSON as …/status: the generated model reads it.
        view = RequestDetail.from_dict(frame)
        expect(view.request_id == acquire_id, "a frame of this request", view.request_id)
    last = RequestDetail.from_dict(frames[-2])
    expect(
        last.requests[0].status == "complete",
        "the last status frame says complete",
        last.requests[0].status,
    )
    # The generated operation itself reads the stream as one string once the server ends it
    # (the document calls the body a string of frames, not one JSON object).
    whole = stream_request.sync(acquire_id, client=client)
    expect(
        isinstance(whole, str), "the generated stream operation answers the frames as text", whole
    )
    expect(
        parse_frames(whole.splitlines()) == frames[-2:],
        "a finished request streams its last status and data: {}",
        whole,
    )

    returned = machines[0]
    step(f"return machine {returned.machine_id}")
    body = ReturnBody(machine_ids=[returned.machine_id])
    expect(
        body.to_dict() == {"machineIds": [returned.machine_id]},
        "the body is the reference's",
        body.to_dict(),
    )
    response = return_machines.sync_detailed(client=client, body=body)
    expect(
        response.status_code in (200, 202),
        "POST /api/v1/machines/return is accepted",
        (response.status_code, response.content),
    )
    ret = response.parsed
    expect(isinstance(ret, RequestDetail), "the reply is a RequestDetail", ret)
    return_id = ret.request_id
    expect(return_id.startswith("ret-"), "a return id is ret-…", return_id)

    step(f"poll {return_id} until it is complete")
    done = wait_terminal(return_id, "return")
    item = done.requests[0]
    expect(item.status == "complete", f"{return_id} is complete", f"{item.status} ({item.message})")
    expect(item.request_type == "return", "it is a return request", item.request_type)
    expect(
        returned.machine_id in item.machine_ids, "it covers the returned machine", item.machine_ids
    )

    step(f"request 2 machines of {args.held_template} (they cannot be scheduled) and cancel them")
    response = request_machines.sync_detailed(
        client=client, body=MachineRequestBody(template_id=args.held_template, count=2)
    )
    expect(
        response.status_code == 202,
        "POST /api/v1/machines/request is under way",
        (response.status_code, response.content),
    )
    held_id = response.parsed.request_id
    # Cancel once its pods exist, so the cancel has something in the cluster to delete.
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        item = status_of(held_id).requests[0]
        expect(
            not item.is_terminal,
            f"{held_id} stays unfinished while its pods are Pending",
            item.status,
        )
        if len(item.machines or []) == 2:
            break
        expect(time.monotonic() < deadline, f"{held_id} has 2 machines", item.machines)
        time.sleep(POLL_SECONDS)
    reply = cancel_request.sync(held_id, client=client, reason="rest_cycle.py")
    expect(isinstance(reply, CancelReply), "DELETE /api/v1/requests/{id} is a CancelReply", reply)
    expect(
        reply.request_id == held_id and reply.status == "cancelled",
        f"{held_id} is cancelled",
        (reply.request_id, reply.status, reply.message),
    )
    item = status_of(held_id).requests[0]
    expect(
        item.status == "cancelled" and item.is_terminal and item.is_failure_like,
        f"{held_id} reads cancelled",
        (item.status, item.is_terminal, item.is_failure_like),
    )

    result = {
        "acquire": acquire_id,
        "machines": {m.machine_id: m.name for m in machines},
        "returned": returned.machine_id,
        "return": return_id,
        "cancelled": held_id,
    }
    print("RESULT " + json.dumps(result), flush=True)


def read_stream(client, stream_request, request_id):
    """The JSON payloads of the stream's frames, in order, until the server ends it.

    The generated operation cannot stream (it would read the whole body as one string), so
    this sends the generated operation's own request (its `_get_kwargs`: method, path and
    query) through the generated client's underlying httpx client (same base URL, headers and
    auth) and reads the frames as they come."""
    kwargs = stream_request._get_kwargs(request_id)
    with client.get_httpx_client().stream(**kwargs) as response:
        expect(
            response.status_code == 200, f"GET stream of {request_id} is 200", response.status_code
        )
        content_type = response.headers.get("content-type", "")
        expect(content_type.startswith("text/event-stream"), "an event stream", content_type)
        return parse_frames(response.iter_lines())


def parse_frames(lines):
    """The JSON payload of each SSE frame of `lines`, in order."""
    frames, data = [], []
    for line in lines:
        if line.startswith(":"):
            continue  # an SSE comment (why the stream closes, keep-alives)
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line == "" and data:
            frames.append(json.loads("\n".join(data)))
            data = []
    if data:
        frames.append(json.loads("\n".join(data)))
    return frames


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument(
        "--client-dir", required=True, help="the directory holding the generated orb_client package"
    )
    parser.add_argument("--template", required=True, help="a template whose pods run at once")
    parser.add_argument("--held-template", required=True, help="a template whose pods stay Pending")
    parser.add_argument("--count", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    try:
        main()
    except Failed as failure:
        print(f"FAILED: {failure}", file=sys.stderr, flush=True)
        sys.exit(1)
