//! `orb mcp serve`'s tools in process, on the same router and SQLite store the REST tests use
//! (no cluster: the provider cannot be built): a tool's result is the body REST answers at the
//! tool's route, refusals come back as tool errors carrying REST's error body, and a call with
//! wrong arguments sends nothing. The whole protocol with a real client runs in the cluster
//! suite (tests/cluster/mcp.rs). Also `orb mcp validate` and a broken config at start.

mod serve_support;

use orb_cli::mcp::McpServer;
use serde_json::{Map, Value, json};
use serve_support::{DONE, Env};

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

/// The tool's one text block as JSON, with whether it is an error result.
async fn tool(env: &Env, name: &str, arguments: Value) -> (bool, Value) {
    let result = McpServer::new(env.state.clone())
        .call(name, &args(arguments))
        .await
        .unwrap_or_else(|e| panic!("{name}: protocol error {e:?}"));
    assert_eq!(result.content.len(), 1, "{name}: one content block");
    let text = result.content[0]
        .as_text()
        .unwrap_or_else(|| panic!("{name}: not a text block"))
        .text
        .clone();
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
    assert_eq!(
        result.structured_content.as_ref(),
        Some(&body),
        "{name}: the structured content is the text block's JSON"
    );
    (result.is_error == Some(true), body)
}

#[tokio::test]
async fn read_tools_answer_exactly_the_body_of_their_rest_route() {
    let env = Env::new().await;
    env.seed().await;
    for (name, arguments, uri) in [
        ("list_templates", json!({}), "/api/v1/templates/"),
        (
            "list_templates",
            json!({"limit": 1, "offset": 1}),
            "/api/v1/templates/?limit=1&offset=1",
        ),
        (
            "get_template",
            json!({"template_id": "worker"}),
            "/api/v1/templates/worker",
        ),
        ("list_return_requests", json!({}), "/api/v1/requests/return"),
        ("list_providers", json!({}), "/api/v1/providers/"),
    ] {
        let (failed, body) = tool(&env, name, arguments.clone()).await;
        let (code, rest) = env.get(uri).await;
        assert!(code.is_success(), "{uri}: {code} {rest}");
        assert!(!failed, "{name}: {body}");
        assert_eq!(body, rest, "{name}({arguments}) against GET {uri}");
    }
    let (failed, listed) = tool(&env, "list_requests", json!({"status": "complete"})).await;
    assert!(!failed);
    let ids: Vec<&str> = listed["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [DONE], "{listed}");
    let (failed, status) = tool(&env, "get_request_status", json!({"request_ids": [DONE]})).await;
    assert!(!failed);
    assert_eq!(status["requests"][0]["request_id"], DONE, "{status}");
    assert_eq!(status["requests"][0]["status"], "complete", "{status}");
}

#[tokio::test]
async fn a_refusal_is_a_tool_error_with_the_rest_error_body() {
    let env = Env::new().await;
    let (failed, body) = tool(&env, "get_template", json!({"template_id": "nope"})).await;
    let (code, rest) = env.get("/api/v1/templates/nope").await;
    assert_eq!(code, 404);
    assert!(failed, "{body}");
    assert_eq!(body, rest);
    assert_eq!(body["error"]["code"], "UNKNOWN_TEMPLATE", "{body}");
    // Over the cap (5 per request here): refused by REST, nothing stored.
    let (failed, body) = tool(
        &env,
        "request_machines",
        json!({"template_id": "worker", "requested_count": 50}),
    )
    .await;
    assert!(failed, "{body}");
    assert!(body["error"]["message"].as_str().is_some(), "{body}");
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn wrong_arguments_are_named_and_nothing_is_called() {
    let env = Env::new().await;
    let (failed, body) = tool(
        &env,
        "request_machines",
        json!({"template": "worker", "requested_count": -2}),
    )
    .await;
    assert!(failed);
    assert_eq!(body["error"]["code"], "INVALID_ARGUMENTS", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    for needle in [
        "unknown argument `template`",
        "`requested_count` must be a whole number",
        "`template_id` is required",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert_eq!(env.request_count().await, 0);
    // A hostile id stays one path segment: it names no other route.
    let (failed, body) = tool(
        &env,
        "cancel_request",
        json!({"request_id": "../../templates/worker"}),
    )
    .await;
    assert!(failed, "{body}");
    assert!(body.get("templates").is_none(), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("../../templates/worker")),
        "the refusal names the id as given: {body}"
    );
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error_naming_it() {
    let env = Env::new().await;
    let err = McpServer::new(env.state.clone())
        .call("reboot_everything", &Map::new())
        .await
        .unwrap_err();
    assert!(
        err.message.contains("no tool named `reboot_everything`"),
        "{err:?}"
    );
}

#[test]
fn validate_prints_every_tool_with_its_schema() {
    let out = assert_cmd::Command::new(assert_cmd::cargo::cargo_bin!("orb"))
        .args(["mcp", "validate"])
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["server"], "open-resource-broker");
    let tools = list["tools"].as_array().unwrap();
    assert_eq!(tools.len(), orb_cli::mcp::tools::TOOLS.len());
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
}

#[test]
fn serve_with_a_broken_config_stops_before_the_handshake_and_says_why() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("config")).unwrap();
    std::fs::write(root.path().join("config/config.json"), "{ not json").unwrap();
    let out = assert_cmd::Command::new(assert_cmd::cargo::cargo_bin!("orb"))
        .args(["mcp", "serve"])
        .env_clear()
        .env("ORB_ROOT_DIR", root.path())
        .env("HOME", root.path())
        .write_stdin("")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on the protocol channel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.json"), "{stderr}");
}
