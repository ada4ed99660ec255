"""Templates and config through orb's REST API in the reference SDKs' managed mode, driven by a
client generated from orb's own OpenAPI document (openapi-python-client). The Rust test
serve_managed_mode starts `orb --config <tmp>/config.json server start --foreground --api-only
--socket-path <sock>`, generates the client from the document that server serves, and runs
this script over the socket.

Cycle: list (empty: no template file) -> create -> read -> update -> list -> a refused create
-> delete -> list (empty) -> set a config value. Every step checks the status code and the
parsed reply; the first failed expectation prints what was expected and what came back, and
the script exits 1. On success the last line of stdout is `RESULT <json>`.

Usage: templates_cycle.py --socket PATH --client-dir DIR
"""

import argparse
import json
import sys


class Failed(Exception):
    """An expectation the server's reply did not meet."""


def expect(condition, what, got=None):
    if not condition:
        raise Failed(what if got is None else f"{what}; got: {got!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--client-dir", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.client_dir)
    import httpx
    from orb_client import Client
    from orb_client.api.config import set_config_value_api_v1_config_key_put as set_config
    from orb_client.api.templates import (
        create_template_api_v1_templates_post as create_template,
        delete_template_api_v1_templates_template_id_delete as delete_template,
        list_templates_api_v1_templates_get as list_templates,
        show_template,
        update_template_api_v1_templates_template_id_put as update_template,
    )
    from orb_client.models import (
        ConfigPersisted,
        CreateTemplateApiV1TemplatesPostBody as CreateBody,
        SetValueBody,
        TemplateDetail,
        TemplateList,
        TemplateMutation,
        UpdateTemplateApiV1TemplatesTemplateIdPutBody as UpdateBody,
    )

    client = Client(
        base_url="http://orb",
        raise_on_unexpected_status=True,
        httpx_args={"transport": httpx.HTTPTransport(uds=args.socket)},
    )

    def ids():
        reply = list_templates.sync_detailed(client=client)
        expect(reply.status_code == 200, "GET /api/v1/templates/ is 200", reply.content)
        expect(isinstance(reply.parsed, TemplateList), "a TemplateList", reply.parsed)
        return [t.template_id for t in reply.parsed.templates]

    expect(ids() == [], "no template file: an empty list", ids())

    body = CreateBody.from_dict(
        {"template_id": "worker", "name": "worker", "description": "a worker",
         "image_id": "busybox:1.36", "max_number": 3, "tags": {"team": "hpc"}}
    )
    reply = create_template.sync_detailed(client=client, body=body)
    expect(reply.status_code == 201, "create is 201", reply.content)
    expect(isinstance(reply.parsed, TemplateMutation), "a TemplateMutation", reply.parsed)
    expect(reply.parsed.status == "created", "status created", reply.parsed)
    created_file = reply.parsed.file

    reply = show_template.sync_detailed("worker", client=client)
    expect(reply.status_code == 200, "read is 200", reply.content)
    expect(isinstance(reply.parsed, TemplateDetail), "a TemplateDetail", reply.parsed)
    expect(reply.parsed.templates[0].image_id == "busybox:1.36", "the image", reply.parsed)

    reply = update_template.sync_detailed(
        "worker", client=client, body=UpdateBody.from_dict({"image_id": "busybox:1.37"})
    )
    expect(reply.status_code == 200, "update is 200", reply.content)
    expect(reply.parsed.status == "updated", "status updated", reply.parsed)
    detail = show_template.sync_detailed("worker", client=client).parsed
    expect(detail.templates[0].image_id == "busybox:1.37", "the new image", detail)
    expect(detail.templates[0].max_instances == 3, "the rest kept", detail)

    # A refusal is a documented 422 problem, not an exception of the generated client.
    reply = create_template.sync_detailed(
        client=client, body=CreateBody.from_dict({"template_id": "bad", "max_number": -4})
    )
    expect(reply.status_code == 422, "a template with problems is 422", reply.content)
    expect(ids() == ["worker"], "the refused template is not there", ids())

    reply = delete_template.sync_detailed("worker", client=client)
    expect(reply.status_code == 200, "delete is 200", reply.content)
    expect(reply.parsed.status == "deleted", "status deleted", reply.parsed)
    expect(ids() == [], "deleted", ids())

    reply = set_config.sync_detailed(
        "request.default_timeout", client=client, body=SetValueBody(value=600)
    )
    expect(reply.status_code == 200, "PUT config is 200", reply.content)
    expect(isinstance(reply.parsed, ConfigPersisted), "a ConfigPersisted", reply.parsed)
    expect(reply.parsed.persisted and reply.parsed.restart_required, "persisted", reply.parsed)

    print("RESULT " + json.dumps({"file": created_file, "config": reply.parsed.path}))


if __name__ == "__main__":
    try:
        main()
    except Failed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
