"""A full machine cycle through `orb mcp serve`, driven by the official MCP Python SDK.

Run by crates/orb/tests/cluster/mcp.rs with one argument, a JSON object:
  {"command": [orb, args...], "env": {...}, "template_id": "...", "count": 3}
It starts the server as an MCP client does (stdio), lists the tools, requests `count`
machines, follows the request until it is complete, returns one machine, follows the return,
and checks a few refusals on the way. On success it prints one JSON line (the ids the Rust
test checks against the cluster); on any failed expectation it exits 1 saying which.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# How long a request may take to settle: the pods are scheduled and started by the simulated
# nodes in seconds; a minute leaves room for a loaded CI machine.
SETTLE_SECONDS = 120


class CycleFailed(Exception):
    """An expectation of the cycle did not hold."""


def fail(message):
    raise CycleFailed(message)


def body_of(result):
    """The REST body a tool answered, from its one text block."""
    if len(result.content) != 1 or result.content[0].type != "text":
        fail(f"a tool result must be one text block, got {result.content!r}")
    try:
        return json.loads(result.content[0].text)
    except json.JSONDecodeError as e:
        fail(f"the tool's text is not JSON ({e}): {result.content[0].text!r}")


async def call(session, name, arguments, expect_error=False):
    result = await session.call_tool(name, arguments)
    body = body_of(result)
    if bool(result.isError) != expect_error:
        fail(f"{name}({arguments}) isError={result.isError}, expected {expect_error}: {body}")
    if result.structuredContent is not None and result.structuredContent != body:
        fail(f"{name}: structuredContent differs from the text block")
    return body


async def follow(session, request_id, what):
    """Polls get_request_status until the request is finished; its status entry."""
    deadline = time.monotonic() + SETTLE_SECONDS
    last = None
    while time.monotonic() < deadline:
        body = await call(session, "get_request_status", {"request_ids": [request_id]})
        entries = body.get("requests") or []
        if len(entries) != 1 or entries[0].get("request_id") != request_id:
            fail(f"{what}: status of {request_id} answered {body}")
        last = entries[0]
        if last.get("is_terminal"):
            return last
        await asyncio.sleep(1)
    fail(f"{what}: {request_id} did not finish within {SETTLE_SECONDS} s; last: {last}")


async def cycle(spec):
    params = StdioServerParameters(
        command=spec["command"][0], args=spec["command"][1:], env=spec["env"]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            if init.serverInfo.name != "open-resource-broker":
                fail(f"server name {init.serverInfo.name!r}")

            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ["list_templates", "get_template", "request_machines",
                         "get_request_status", "return_machines", "list_return_requests",
                         "list_machines", "list_requests", "cancel_request",
                         "check_provider_health"]:
                if name not in tools:
                    fail(f"tool {name} missing from {sorted(tools)}")
                if tools[name].inputSchema.get("type") != "object":
                    fail(f"{name}: inputSchema is not an object schema")
            if "template_id" not in tools["request_machines"].inputSchema["properties"]:
                fail("request_machines does not take template_id")

            templates = await call(session, "list_templates", {})
            ids = [t["template_id"] for t in templates.get("templates", [])]
            if spec["template_id"] not in ids:
                fail(f"template {spec['template_id']} not in {ids}")

            # Refusals are tool errors carrying REST's error body, and change nothing.
            missing = await call(session, "get_template", {"template_id": "no-such-template"},
                                 expect_error=True)
            if missing.get("error", {}).get("code") != "UNKNOWN_TEMPLATE":
                fail(f"unknown template: {missing}")
            wrong = await call(session, "request_machines",
                               {"template_id": spec["template_id"], "requested_count": "3"},
                               expect_error=True)
            if wrong.get("error", {}).get("code") != "INVALID_ARGUMENTS":
                fail(f"a string count: {wrong}")

            acquired = await call(session, "request_machines",
                                  {"template_id": spec["template_id"],
                                   "requested_count": spec["count"]})
            request_id = acquired.get("request_id")
            if not request_id:
                fail(f"request_machines answered no request_id: {acquired}")
            done = await follow(session, request_id, "the acquire")
            if done.get("status") != "complete":
                fail(f"the acquire ended {done.get('status')}: {done}")
            machines = await call(session, "list_machines", {"request_id": request_id})
            names = sorted(m["machine_id"] for m in machines.get("machines", []))
            if len(names) != spec["count"]:
                fail(f"{len(names)} machines listed for {request_id}, expected {spec['count']}")

            victim = names[0]
            returned = await call(session, "return_machines", {"machine_ids": [victim]})
            return_id = returned.get("request_id")
            if not return_id:
                fail(f"return_machines answered no request_id: {returned}")
            back = await follow(session, return_id, "the return")
            if back.get("status") != "complete":
                fail(f"the return ended {back.get('status')}: {back}")
            returns = await call(session, "list_return_requests", {})
            if return_id not in [r["request_id"] for r in returns.get("requests", [])]:
                fail(f"return {return_id} not in list_return_requests: {returns}")
            gone = await call(session, "get_machine_status", {"machine_id": victim})
            shown = gone.get("machines") or [{}]
            if len(shown) != 1 or shown[0].get("status") not in ("returned", "terminated"):
                fail(f"the returned machine reads {gone}")

            print(json.dumps({"request_id": request_id, "machines": names,
                              "returned": victim, "return_id": return_id}))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mcp_cycle.py '<json spec>'")
    try:
        asyncio.run(cycle(json.loads(sys.argv[1])))
    except* CycleFailed as failed:
        # The SDK's task groups nest the failure in groups of their own.
        for e in leaves(failed):
            print(f"mcp_cycle: {e}", file=sys.stderr)
        sys.exit(1)


def leaves(group):
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from leaves(e)
        else:
            yield e


if __name__ == "__main__":
    main()
