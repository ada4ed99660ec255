//! `orb serve`'s REST routes through the router (tower `oneshot`), on a real SQLite store.
//! Calls that would need a cluster meet a provider that cannot be built, so they show the
//! refusal path; every refusal is checked for its problem document and for storing nothing.

mod serve_support;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use serde_json::json;
use serve_support::{DONE, Env, FAILED, NOBODY, STUCK, assert_problem, split};

#[tokio::test]
async fn templates_are_listed_with_what_they_still_allow() {
    let env = Env::new().await;
    env.seed().await;
    let (code, body) = env.get("/api/v1/templates").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let list = &body["templates"];
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["template_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["worker", "gpu", "broken"]);
    // worker allows 3: one seeded machine is live, and the unfinished STUCK request will
    // still create 3 (it reserves them until it ends).
    assert_eq!(list[0]["max_instances"], 3);
    assert_eq!(list[0]["available_number"], 0);
    assert_eq!(list[0]["provider_api"], "Pod");
    assert_eq!(list[1]["max_instances"], -1);
    assert!(list[1]["available_number"].is_null(), "{}", list[1]);
    assert_eq!(list[1]["provider_api"], "Job");
    assert_eq!(list[0]["problems"], json!([]));
    assert!(
        list[2]["problems"].to_string().contains("Bad_Namespace"),
        "{}",
        list[2]
    );
    // The slash-less path answers exactly as the reference broker's trailing-slash one.
    let (_, slashed) = env.get("/api/v1/templates/").await;
    assert_eq!(slashed, body);
}

#[tokio::test]
async fn one_template_is_shown_and_an_unknown_one_is_a_404_naming_the_known_ones() {
    let env = Env::new().await;
    let (code, body) = env.get("/api/v1/templates/worker").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["template_id"], "worker");
    assert_eq!(body["template"]["container_image"], "busybox:1.36");
    // The reference broker's envelope rides along with the same template.
    assert_eq!(body["total_count"], 1);
    assert_eq!(body["templates"][0]["template_id"], "worker");
    assert_eq!(body["templates"][0]["image_id"], "busybox:1.36");
    assert_eq!(body["templates"][0]["max_instances"], 3);
    let got = env.get("/api/v1/templates/nope").await;
    assert_problem(
        &got,
        404,
        "unknown-template",
        "template \"nope\" is not defined; available templates: worker, gpu, broken",
    );
}

#[tokio::test]
async fn validate_reports_each_template_and_refuses_what_is_not_a_document() {
    let env = Env::new().await;
    let (code, body) = env
        .post("/api/v1/templates/validate", serve_support::TEMPLATES)
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["ok"], false);
    assert_eq!(body["valid"], json!(["worker", "gpu"]));
    assert_eq!(body["invalid"][0]["template_id"], "broken");
    let good = r#"{"templates": [{"templateId": "a", "maxNumber": 1, "imageId": "busybox"}]}"#;
    let (code, body) = env.post("/api/v1/templates/validate", good).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(body["invalid"], json!([]));
    let got = env
        .post("/api/v1/templates/validate", "{\"templates\": [")
        .await;
    assert_problem(&got, 400, "malformed-json", "not valid JSON");
    let got = env
        .post("/api/v1/templates/validate", "\"templates\"")
        .await;
    assert_problem(&got, 422, "invalid-template-document", "");
}

#[tokio::test]
async fn bad_machine_requests_are_refused_and_store_nothing() {
    let env = Env::new().await;
    let cases = [
        (
            "{\"template_id\": \"worker\", \"count\": ",
            400,
            "malformed-json",
            "not valid JSON",
        ),
        (
            r#"{"template_id": "nope", "count": 1}"#,
            422,
            "unknown-template",
            "template \"nope\" is not defined; available templates: worker, gpu, broken",
        ),
        (
            r#"{"template_id": "worker", "count": 0}"#,
            422,
            "count-rejected",
            "at least 1",
        ),
        (
            r#"{"template_id": "worker", "count": 4}"#,
            422,
            "count-rejected",
            "allows 3 machines",
        ),
        (
            r#"{"template_id": "gpu", "count": 6}"#,
            422,
            "count-rejected",
            "max_machines_per_request (5)",
        ),
        (
            r#"{"template_id": "broken", "count": 1}"#,
            422,
            "invalid-template",
            "Bad_Namespace",
        ),
        (r#"{"template_id": "worker"}"#, 422, "invalid-body", "count"),
        (
            r#"{"template_id": "worker", "count": -1}"#,
            422,
            "invalid-body",
            "count",
        ),
        (
            r#"{"template_id": "worker", "count": 1, "colour": "red"}"#,
            422,
            "invalid-body",
            "colour",
        ),
    ];
    for (body, status, slug, needle) in cases {
        let got = env.post("/api/v1/machines/request", body).await;
        assert_problem(&got, status, slug, needle);
    }
    let got = env
        .post(
            "/api/v1/machines/request?timeout=5",
            r#"{"template_id": "worker", "count": 1}"#,
        )
        .await;
    assert_problem(&got, 400, "timeout-without-wait", "wait=true");
    let got = env
        .post(
            "/api/v1/machines/request?wait=true&timeout=601",
            r#"{"template_id": "worker", "count": 1}"#,
        )
        .await;
    assert_problem(&got, 400, "invalid-timeout", "1 to 600");
    let got = env
        .post(
            "/api/v1/machines/request?wait=maybe",
            r#"{"template_id": "worker", "count": 1}"#,
        )
        .await;
    assert_problem(&got, 400, "invalid-query", "wait");
    let no_content_type = env
        .call(
            HttpRequest::post("/api/v1/machines/request")
                .body(Body::from(r#"{"template_id": "worker", "count": 1}"#))
                .unwrap(),
        )
        .await;
    assert_eq!(
        no_content_type.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    assert_problem(
        &split(no_content_type).await,
        415,
        "not-json",
        "Content-Type",
    );
    let huge = format!(
        r#"{{"template_id": "{}", "count": 1}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let got = env.post("/api/v1/machines/request", &huge).await;
    assert_problem(&got, 413, "unreadable-body", "at most 2 MiB");
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn a_valid_request_without_a_usable_provider_is_a_503_and_stores_nothing() {
    let env = Env::new().await;
    let got = env
        .post(
            "/api/v1/machines/request",
            r#"{"template_id": "worker", "count": 2}"#,
        )
        .await;
    assert_problem(&got, 503, "provider-misconfigured", "\"offline\"");
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn returning_machines_that_are_already_gone_completes_without_the_provider() {
    let env = Env::new().await;
    env.seed().await;
    let (code, body) = env
        .post(
            "/api/v1/machines/return",
            r#"{"machine_ids": ["orb-111111111111-0001"]}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let request = &body["request"];
    assert!(request["request_id"].as_str().unwrap().starts_with("ret-"));
    assert_eq!(request["request_type"], "return");
    assert_eq!(request["status"], "complete");
    assert_eq!(request["terminal"], true);
    assert_eq!(body["machines"][0]["machine_id"], "orb-111111111111-0001");
    assert_eq!(env.request_count().await, 4);
}

#[tokio::test]
async fn bad_returns_are_refused_and_store_nothing() {
    let env = Env::new().await;
    env.seed().await;
    let cases = [
        (
            r#"{"machine_ids": ["orb-nope"]}"#,
            422,
            "unknown-machines",
            "orb does not manage this machine: orb-nope",
        ),
        (r#"{}"#, 422, "return-selector", "exactly one of"),
        (
            r#"{"machine_ids": ["a"], "request_id": "x"}"#,
            422,
            "return-selector",
            "exactly one of",
        ),
        (r#"{"machine_ids": []}"#, 422, "nothing-to-return", "empty"),
        (
            r#"{"request_id": "bad id"}"#,
            400,
            "malformed-request-id",
            "bad id",
        ),
        (
            &format!(r#"{{"request_id": "{NOBODY}"}}"#),
            404,
            "unknown-request",
            NOBODY,
        ),
        // A live machine needs the provider, which cannot be built: nothing is stored.
        (
            r#"{"machine_ids": ["orb-111111111111-0000"]}"#,
            503,
            "provider-misconfigured",
            "offline",
        ),
        (
            "{\"machine_ids\": [",
            400,
            "malformed-json",
            "not valid JSON",
        ),
    ];
    for (body, status, slug, needle) in cases {
        let got = env.post("/api/v1/machines/return", body).await;
        assert_problem(&got, status, slug, needle);
    }
    assert_eq!(env.request_count().await, 3);
}

#[tokio::test]
async fn machines_are_listed_all_unless_all_is_false() {
    let env = Env::new().await;
    env.seed().await;
    let (code, all) = env.get("/api/v1/machines").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(all["machines"].as_array().unwrap().len(), 2, "{all}");
    let (_, live) = env.get("/api/v1/machines?all=false").await;
    assert_eq!(live["machines"].as_array().unwrap().len(), 1, "{live}");
    assert_eq!(live["machines"][0]["status"], "running");
    let got = env.get("/api/v1/machines?live=1").await;
    assert_problem(&got, 400, "invalid-query", "live");
}

#[tokio::test]
async fn requests_are_listed_filtered_and_shown() {
    let env = Env::new().await;
    env.seed().await;
    let (code, all) = env.get("/api/v1/requests").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(all["requests"].as_array().unwrap().len(), 3);
    let (_, failed) = env.get("/api/v1/requests?status=failed").await;
    assert_eq!(failed["requests"].as_array().unwrap().len(), 1);
    assert_eq!(failed["requests"][0]["request_id"], FAILED);
    let (_, one) = env.get("/api/v1/requests?limit=1").await;
    assert_eq!(one["requests"].as_array().unwrap().len(), 1);
    let (_, acquires) = env.get("/api/v1/requests?type=acquire").await;
    assert_eq!(
        acquires["total_count"], 3,
        "type is accepted for request_type"
    );
    let got = env.get("/api/v1/requests?status=running").await;
    assert_problem(&got, 400, "invalid-status", "in_progress");

    let (code, shown) = env.get(&format!("/api/v1/requests/{DONE}")).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(shown["request"]["status"], "complete");
    assert_eq!(shown["request"]["fulfilled_count"], 2);
    assert_eq!(shown["machines"].as_array().unwrap().len(), 2);
    // show does not touch the provider or settle anything: STUCK stays as stored.
    let (_, stuck) = env.get(&format!("/api/v1/requests/{STUCK}")).await;
    assert_eq!(stuck["request"]["status"], "in_progress");
}

#[tokio::test]
async fn status_refreshes_and_unknown_or_malformed_ids_are_refused() {
    let env = Env::new().await;
    env.seed().await;
    let (code, body) = env.get(&format!("/api/v1/requests/{STUCK}/status")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    // It never recorded what it created and nobody holds its claim: the read resumes it,
    // and with no provider to create with it fails, saying why (the deadline does not judge
    // an acquire that recorded nothing).
    assert_eq!(body["request"]["status"], "failed", "{body}");
    assert!(
        body["request"]["status_message"]
            .as_str()
            .unwrap()
            .contains("offline"),
        "{body}"
    );
    let (_, done) = env.get(&format!("/api/v1/requests/{DONE}/status")).await;
    assert_eq!(done["request"]["status"], "complete");
    // A finished request with a machine that may still run is followed; without a provider
    // the reply says its machines could not be checked, and the status stays.
    assert!(
        done["note"]
            .as_str()
            .is_some_and(|n| n.contains("not refreshed from the provider")),
        "{done}"
    );
    for route in ["", "/status", "/events"] {
        let got = env.get(&format!("/api/v1/requests/{NOBODY}{route}")).await;
        assert_problem(&got, 404, "unknown-request", NOBODY);
        // Ids orb never issued are looked up (legacy ids exist); ones no store can hold are 400.
        let got = env.get(&format!("/api/v1/requests/not-an-id{route}")).await;
        assert_problem(&got, 404, "unknown-request", "not-an-id");
        let got = env.get(&format!("/api/v1/requests/bad%20id{route}")).await;
        assert_problem(&got, 400, "malformed-request-id", "\"bad id\"");
    }
}

#[tokio::test]
async fn cancel_refuses_finished_unknown_and_malformed_requests() {
    let env = Env::new().await;
    env.seed().await;
    // A finished request may still have objects in the cluster, so cancel asks the provider;
    // without one it says so and changes nothing.
    let got = env
        .post(&format!("/api/v1/requests/{DONE}/cancel"), "")
        .await;
    assert_problem(&got, 503, "provider-misconfigured", "");
    let got = env
        .post(&format!("/api/v1/requests/{NOBODY}/cancel"), "")
        .await;
    assert_problem(&got, 404, "unknown-request", NOBODY);
    let got = env.post("/api/v1/requests/a%22b/cancel", "").await;
    assert_problem(&got, 400, "malformed-request-id", "a\\\"b");
    let (_, done) = env.get(&format!("/api/v1/requests/{DONE}")).await;
    assert_eq!(done["request"]["status"], "complete");
}

#[tokio::test]
async fn probes_report_store_and_provider() {
    let env = Env::new().await;
    let (code, live) = env.get("/livez").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(live["status"], "alive");
    let (code, ready) = env.get("/readyz").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_eq!(ready["checks"]["store"]["status"], "ok");
    assert_eq!(ready["checks"]["provider"]["status"], "failing");
    assert!(
        ready["checks"]["provider"]["detail"]
            .as_str()
            .unwrap()
            .contains("offline"),
        "{ready}"
    );
    let (code, health) = env.get("/health").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(health["status"], "degraded");
    assert_eq!(health["service"], "orb");
}

#[tokio::test]
async fn readyz_and_health_fail_when_the_store_is_gone() {
    let env = Env::new().await;
    env.store.close().await;
    let (code, ready) = env.get("/readyz").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready["checks"]["store"]["status"], "failing");
    let (code, health) = env.get("/health").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health["status"], "unhealthy");
}

#[tokio::test]
async fn an_unknown_route_is_a_problem_too() {
    let env = Env::new().await;
    let got = env.get("/api/v1/nothing-here").await;
    assert_problem(&got, 404, "no-such-route", "GET /api/v1/nothing-here");
}

/// `POST /api/v1/hostfactory/{operation}` answers in JSON unless the caller asks for the
/// compact form (what the forwarding scripts do); both carry the same stdout, stderr and exit
/// code.
#[tokio::test]
async fn a_hostfactory_call_answers_in_json_or_in_the_compact_form_when_asked() {
    use http_body_util::BodyExt;
    use orb_cli::hostfactory::{SCRIPT_OUTPUT_MEDIA_TYPE, ScriptReply};

    let env = Env::new().await;
    env.seed().await;
    let input = json!({"requests": [{"requestId": DONE}, {"requestId": "req-unknown"}]});
    let ask = |accept: Option<&'static str>| {
        let mut request = HttpRequest::post("/api/v1/hostfactory/getRequestStatus")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        request.body(Body::from(input.to_string())).unwrap()
    };
    let read = |response: axum::http::Response<Body>| async move {
        assert_eq!(response.status(), StatusCode::OK);
        let kind = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let length = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .map(|v| v.to_str().unwrap().parse::<usize>().unwrap());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        // The forwarding script sizes its buffer by it.
        if kind == SCRIPT_OUTPUT_MEDIA_TYPE {
            assert_eq!(
                length,
                Some(bytes.len()),
                "the compact reply says its length"
            );
        }
        (kind, bytes)
    };

    let (kind, bytes) = read(env.call(ask(None)).await).await;
    assert_eq!(kind, "application/json");
    let as_json: ScriptReply = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(as_json.exit_code, 0);
    let stdout: serde_json::Value = serde_json::from_str(&as_json.stdout).unwrap();
    assert_eq!(stdout["requests"][0]["requestId"], DONE, "{stdout}");
    assert_eq!(stdout["requests"][1]["status"], "complete_with_error");

    let accept = "application/vnd.orb.script-output, application/json;q=0.5";
    let (kind, bytes) = read(env.call(ask(Some(accept))).await).await;
    assert_eq!(kind, SCRIPT_OUTPUT_MEDIA_TYPE);
    let compact = ScriptReply::from_script_output(&bytes).unwrap();
    assert_eq!(compact, as_json, "the same reply either way");
    assert!(
        bytes.ends_with(as_json.stdout.as_bytes()),
        "stdout is sent as is"
    );
}

/// REST and the HostFactory route answer from one catalog, and both follow the template file:
/// an edit shows on the next call of either, and a broken file is reported by both.
#[tokio::test]
async fn rest_and_hostfactory_follow_the_same_template_file() {
    let env = Env::new().await;
    let rest_ids = |body: &serde_json::Value| -> Vec<String> {
        body["templates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["template_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, before) = env.get("/api/v1/templates").await;
    assert_eq!(rest_ids(&before), ["worker", "gpu", "broken"]);

    std::fs::write(
        env.template_file(),
        r#"{"templates": [
          {"templateId": "worker", "maxNumber": 7, "imageId": "busybox:1.36"},
          {"templateId": "fresh", "maxNumber": 2, "imageId": "busybox:1.36"}
        ]}"#,
    )
    .unwrap();
    let (code, after) = env.get("/api/v1/templates").await;
    assert_eq!(code, StatusCode::OK, "{after}");
    assert_eq!(rest_ids(&after), ["worker", "fresh"]);
    assert_eq!(after["templates"][0]["max_instances"], 7);
    let hf = hf_templates(&env).await;
    assert_eq!(hf["exit_code"], 0, "{hf}");
    let stdout: serde_json::Value = serde_json::from_str(hf["stdout"].as_str().unwrap()).unwrap();
    let hf_ids: Vec<&str> = stdout["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["templateId"].as_str().unwrap())
        .collect();
    assert_eq!(hf_ids, ["worker", "fresh"]);
    assert_eq!(stdout["templates"][0]["maxNumber"], 7);
    let (code, shown) = env.get("/api/v1/templates/fresh").await;
    assert_eq!(code, StatusCode::OK, "{shown}");

    std::fs::write(env.template_file(), "{not json").unwrap();
    let file_name = env
        .template_file()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert_problem(
        &env.get("/api/v1/templates").await,
        500,
        "template-file",
        &file_name,
    );
    let hf = hf_templates(&env).await;
    assert_ne!(hf["exit_code"], 0, "{hf}");
    assert!(
        hf["stdout"]
            .as_str()
            .unwrap()
            .contains("kube_templates.json"),
        "the reply names the file: {hf}"
    );
}

async fn hf_templates(env: &Env) -> serde_json::Value {
    let (code, body) = env
        .post("/api/v1/hostfactory/getAvailableTemplates", "{}")
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    body
}
