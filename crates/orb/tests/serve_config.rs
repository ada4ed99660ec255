//! The reference broker's config and provider-schema routes: the effective configuration
//! (`/api/v1/config/`), each key's source (`…/sources`), one key (`…/{key}`), checking a
//! config document (`POST …/validate`) and the provider settings schema
//! (`/api/v1/providers/…/schema`). Through the router, no cluster: the Kubernetes settings
//! are resolved, never connected.

mod serve_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode, header};
use serde_json::{Value, json};
use serve_support::{Env, TEMPLATES, assert_problem, offline_entry, split};

/// A working config.json whose Kubernetes provider sets its namespace in the file.
fn kube_config() -> Value {
    json!({
        "providers": [{"name": "kube", "type": "k8s",
                       "config": {"namespace": "batch", "pod_timeout_seconds": 120}}],
        "request": {"max_machines_per_request": 7},
    })
}

async fn env_with(config: &Value) -> (Env, std::path::PathBuf) {
    let env = Env::new().await;
    let file = env.show_config(config);
    (env, file)
}

fn source_of<'a>(sources: &'a Value, key: &str) -> &'a Value {
    sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("{key} not in {sources}"))
}

#[tokio::test]
async fn the_effective_config_is_what_config_show_prints_with_every_value() {
    let (env, file) = env_with(&kube_config()).await;
    let (code, body) = env.get("/api/v1/config/").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["config_file"]["path"], json!(file));
    assert_eq!(body["config_file"]["exists"], true);
    assert_eq!(body["scheduler"], "default");
    assert_eq!(body["config"], kube_config(), "config.json as written");
    assert_eq!(body["provider"]["name"], "kube");
    assert_eq!(body["provider"]["type"], "k8s");
    assert_eq!(body["provider"]["settings"]["namespace"], "batch");
    assert_eq!(body["provider"]["settings"]["naming"]["prefix"], "orb");
    let values = &body["values"];
    assert_eq!(values["provider.namespace"], "batch");
    assert_eq!(values["provider.pod_timeout_seconds"], 120);
    assert_eq!(values["request.max_machines_per_request"], 7);
    assert_eq!(values["provider.name"], "kube");
    assert!(values["request.default_timeout"].is_u64(), "{values}");

    let (code, bare) = env.get("/api/v1/config").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(bare, body, "both spellings answer the same");
}

#[tokio::test]
async fn the_source_query_keeps_only_the_values_from_that_source() {
    let (env, _) = env_with(&kube_config()).await;
    let (code, body) = env.get("/api/v1/config/?source=file").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let keys: Vec<&String> = body["values"].as_object().unwrap().keys().collect();
    assert!(keys.iter().any(|k| *k == "provider.namespace"), "{keys:?}");
    assert!(
        !keys.iter().any(|k| *k == "request.default_timeout"),
        "a default is not from the file: {keys:?}"
    );
    let got = env.get("/api/v1/config/?source=vault").await;
    assert_problem(
        &got,
        400,
        "invalid-source",
        "default, file, env, flag, template",
    );
}

#[tokio::test]
async fn sources_name_where_each_value_came_from() {
    let (env, file) = env_with(&kube_config()).await;
    let (code, body) = env.get("/api/v1/config/sources").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        body["precedence"],
        json!(["default", "file", "env", "flag", "template"])
    );
    let list = body["sources"].as_array().unwrap();
    assert_eq!(body["count"], list.len());
    for entry in list {
        for field in ["key", "value", "source", "origin"] {
            assert!(entry.get(field).is_some(), "{field} missing in {entry}");
        }
    }
    let namespace = source_of(&body, "provider.namespace");
    assert_eq!(namespace["value"], "batch");
    assert_eq!(namespace["source"], "file");
    assert_eq!(namespace["origin"], format!("file {}", file.display()));
    let retries = source_of(&body, "provider.max_retries");
    assert_eq!(
        (&retries["source"], &retries["origin"]),
        (&json!("default"), &json!("default"))
    );
    let config_file = source_of(&body, "config_file");
    assert_eq!(
        config_file["source"], "flag",
        "set by --config: {config_file}"
    );
    assert_eq!(
        source_of(&body, "request.default_timeout")["source"],
        "default"
    );
    assert_eq!(
        source_of(&body, "request.max_machines_per_request")["source"],
        "file"
    );
    // Every provider setting of the field table is a key.
    for spec in orb_k8s::config::schema::FIELDS {
        source_of(&body, &format!("provider.{}", spec.path));
    }
}

#[tokio::test]
async fn one_key_answers_its_value_and_source() {
    let (env, _) = env_with(&kube_config()).await;
    let (code, body) = env.get("/api/v1/config/provider.namespace").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["key"], "provider.namespace");
    assert_eq!(body["value"], "batch");
    assert_eq!(body["source"], "file");
    let (code, nested) = env.get("/api/v1/config/provider.naming.prefix").await;
    assert_eq!(code, StatusCode::OK, "{nested}");
    assert_eq!(
        (&nested["value"], &nested["source"]),
        (&json!("orb"), &json!("default"))
    );
    let (_, sources) = env.get("/api/v1/config/sources").await;
    let (_, timeout) = env.get("/api/v1/config/request.default_timeout").await;
    assert_eq!(&timeout, source_of(&sources, "request.default_timeout"));
}

#[tokio::test]
async fn an_unknown_key_is_a_404_naming_it_and_how_to_list_keys() {
    let (env, _) = env_with(&kube_config()).await;
    let got = env.get("/api/v1/config/provider.namespase").await;
    assert_problem(&got, 404, "unknown-config-key", "\"provider.namespase\"");
    let detail = got.1["detail"].as_str().unwrap();
    assert!(
        detail.contains("did you mean \"provider.namespace\""),
        "{detail}"
    );
    assert!(detail.contains("GET /api/v1/config/sources"), "{detail}");
    let got = env.get("/api/v1/config/nothing-like-it-at-all").await;
    assert_problem(
        &got,
        404,
        "unknown-config-key",
        "GET /api/v1/config/sources",
    );
}

#[tokio::test]
async fn secrets_are_never_returned() {
    let config = json!({
        "providers": [{"name": "kube", "type": "k8s", "config": {"namespace": "batch"}}],
        "storage": {"url": "postgres://orb:pg-s3cret@db:5432/orb?password=query-s3cret"},
        "daemon": {"token_file": "/run/orb/token"},
        "auth": {"type": "none", "token": "auth-s3cret", "password": "pw-s3cret"},
        "logging": {"level": "ERROR", "api_key": "key-s3cret",
                    "headers": {"Authorization": "Bearer bearer-s3cret"}},
    });
    let (env, _) = env_with(&config).await;
    let mut answers = Vec::new();
    for uri in [
        "/api/v1/config/",
        "/api/v1/config/sources",
        "/api/v1/config/storage.url",
    ] {
        let (code, body) = env.get(uri).await;
        assert_eq!(code, StatusCode::OK, "{uri}: {body}");
        answers.push(body);
    }
    for body in &answers {
        let text = body.to_string();
        assert!(!text.contains("s3cret"), "a secret leaked: {text}");
    }
    let full = &answers[0];
    let masked = "postgres://orb:***@db:5432/orb?password=***";
    assert_eq!(full["storage_url"], masked);
    assert_eq!(full["config"]["storage"]["url"], masked);
    assert_eq!(full["config"]["auth"]["token"], "***");
    assert_eq!(full["config"]["auth"]["password"], "***");
    assert_eq!(full["config"]["logging"]["api_key"], "***");
    assert_eq!(full["config"]["logging"]["headers"]["Authorization"], "***");
    // What only points at a secret stays readable.
    assert_eq!(full["config"]["daemon"]["token_file"], "/run/orb/token");
    assert_eq!(full["config"]["auth"]["type"], "none");
    assert_eq!(answers[2]["value"], masked);
}

/// Every file under `root` with its content, to show that a call wrote nothing.
fn files_under(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[tokio::test]
async fn a_good_config_validates() {
    let (env, _) = env_with(&kube_config()).await;
    let (code, body) = env
        .post("/api/v1/config/validate", &kube_config().to_string())
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["valid"], true, "{body}");
    assert_eq!(body["problems"], json!([]));
    assert_eq!(body["checked"], "request body");
}

#[tokio::test]
async fn a_bad_config_lists_every_problem_and_nothing_is_written() {
    let (env, _) = env_with(&kube_config()).await;
    let before = files_under(env.root.path());
    let bad = json!({
        "providers": [{"name": "kube", "type": "k8s",
                       "config": {"namespace": "Bad_Namespace", "pod_timeout_seconds": 0,
                                  "naming": {"uuid_chars": 99}}}],
        "storage": {"url": "mysql://db/orb"},
        "daemon": {"socket": "/tmp/a.sock", "url": "http://b:1"},
        "serve": {"auth": {"roles": {"batch:driver": "superuser"}}},
    });
    let (code, body) = env.post("/api/v1/config/validate", &bad.to_string()).await;
    assert_eq!(code, StatusCode::OK, "a verdict, not a refusal: {body}");
    assert_eq!(body["valid"], false);
    let problems = body["problems"].as_array().unwrap();
    let fields: Vec<&str> = problems
        .iter()
        .map(|p| p["field"].as_str().unwrap())
        .collect();
    for wanted in [
        "provider.namespace",
        "provider.pod_timeout_seconds",
        "provider.naming.uuid_chars",
        "storage.url",
        "daemon",
        "serve",
    ] {
        assert!(fields.contains(&wanted), "{wanted} not listed: {fields:?}");
    }
    for problem in problems {
        assert!(
            !problem["message"].as_str().unwrap().is_empty(),
            "{problem}"
        );
    }
    let namespace = problems
        .iter()
        .find(|p| p["field"] == "provider.namespace")
        .unwrap();
    assert_eq!(namespace["provider"], "kube");
    assert_eq!(namespace["origin"], "file request body");
    assert!(
        namespace["fix"].as_str().is_some_and(|f| !f.is_empty()),
        "{namespace}"
    );
    let serve = problems.iter().find(|p| p["field"] == "serve").unwrap();
    assert!(
        serve["message"].as_str().unwrap().contains("superuser"),
        "{serve}"
    );

    assert_eq!(
        files_under(env.root.path()),
        before,
        "validate wrote something"
    );
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn validate_without_a_body_checks_the_servers_own_config_file() {
    let (env, file) = env_with(&kube_config()).await;
    let (code, body) = env.post("/api/v1/config/validate", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["checked"], json!(file));
    assert_eq!(body["valid"], true, "{body}");
    // The file as it is now, not as the server read it: an edit is checked before a restart.
    std::fs::write(
        &file,
        r#"{"providers": [{"name": "kube", "type": "nomad"}]}"#,
    )
    .unwrap();
    let (_, body) = env.post("/api/v1/config/validate", "").await;
    assert_eq!(body["valid"], false, "{body}");
    assert_eq!(body["problems"][0]["field"], "provider.type");
    // A file that does not parse is a problem too, told by position, never by quoting it.
    std::fs::write(&file, "token = \"file-s3cret\"\n").unwrap();
    let (code, body) = env.post("/api/v1/config/validate", "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["valid"], false, "{body}");
    assert_eq!(body["problems"][0]["field"], "(document)");
    assert!(
        body["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("line 1"),
        "{body}"
    );
    assert!(!body.to_string().contains("s3cret"), "{body}");
}

#[tokio::test]
async fn validate_refuses_a_body_that_is_not_json() {
    let (env, _) = env_with(&kube_config()).await;
    let got = env.post("/api/v1/config/validate", "{not json").await;
    assert_problem(&got, 400, "malformed-json", "not valid JSON");
    let response = env
        .call(
            HttpRequest::post("/api/v1/config/validate")
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_problem(&split(response).await, 415, "not-json", "Content-Type");
}

#[tokio::test]
async fn provider_schemas_come_from_the_settings_table() {
    let env = Env::new().await;
    let (code, body) = env.get("/api/v1/providers/schemas").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 1);
    let k8s = &body["schemas"][0];
    assert_eq!(k8s["provider_type"], "k8s");
    assert_eq!(k8s["aliases"], json!(["kubernetes"]));
    assert_eq!(
        k8s["providers"],
        json!([]),
        "the configured provider is not of this type"
    );
    let schema = &k8s["schema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["type"], "object");
    for spec in orb_k8s::config::schema::FIELDS {
        let property = match spec.path.split_once('.') {
            None => &schema["properties"][spec.path],
            Some((group, leaf)) => &schema["properties"][group]["properties"][leaf],
        };
        assert_eq!(property["x-orb-env"], spec.env_var(), "{}", spec.path);
    }
    assert_eq!(schema["properties"]["pod_timeout_seconds"]["default"], 300);

    for name in ["k8s", "kubernetes"] {
        let (code, one) = env.get(&format!("/api/v1/providers/{name}/schema")).await;
        assert_eq!(code, StatusCode::OK, "{name}: {one}");
        assert_eq!(&one, k8s, "{name}");
    }
}

#[tokio::test]
async fn the_configured_provider_answers_by_name_and_others_are_404() {
    let mut entry = offline_entry();
    entry.provider_type = "k8s".into();
    let kube = Env::build(entry, TEMPLATES, Duration::from_millis(50)).await;
    let (code, body) = kube.get("/api/v1/providers/kube/schema").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["providers"], json!(["kube"]));
    assert_eq!(body["provider_type"], "k8s");

    let offline = Env::new().await;
    let got = offline.get("/api/v1/providers/kube/schema").await;
    assert_problem(&got, 404, "unknown-provider", "has type \"offline\"");
    let got = offline.get("/api/v1/providers/aws/schema").await;
    assert_problem(
        &got,
        404,
        "unknown-provider",
        "GET /api/v1/providers/schemas",
    );
}

#[tokio::test]
async fn unknown_query_parameters_are_refused_on_every_route() {
    let (env, _) = env_with(&kube_config()).await;
    for uri in [
        "/api/v1/config/?verbose=1",
        "/api/v1/config?verbose=1",
        "/api/v1/config/sources?verbose=1",
        "/api/v1/config/provider.namespace?verbose=1",
        "/api/v1/providers/schemas?verbose=1",
        "/api/v1/providers/k8s/schema?verbose=1",
    ] {
        let got = env.get(uri).await;
        assert_problem(&got, 400, "invalid-query", "verbose");
    }
    let got = env.post("/api/v1/config/validate?verbose=1", "{}").await;
    assert_problem(&got, 400, "invalid-query", "verbose");
}

#[tokio::test]
async fn a_server_without_its_configuration_says_so() {
    let env = Env::new().await;
    let got = env.get("/api/v1/config/").await;
    assert_problem(&got, 503, "config-unavailable", "orb config show");
}
