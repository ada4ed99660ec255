//! `POST /api/v1/admin/reload-config`: the file is re-read and checked as at start, the
//! template file is re-read, every changed setting is listed for the restart, and a file the
//! server could not start with is refused with nothing changed. Through the router, no
//! cluster: the Kubernetes settings are resolved, never connected.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use serve_support::{Env, TEMPLATES, assert_problem};

const RELOAD: &str = "/api/v1/admin/reload-config";

fn kube_config() -> Value {
    json!({
        "providers": [{"name": "kube", "type": "k8s",
                       "config": {"namespace": "batch", "pod_timeout_seconds": 120}}],
        "request": {"max_machines_per_request": 7},
    })
}

fn write(file: &std::path::Path, config: &Value) {
    std::fs::write(file, serde_json::to_string_pretty(config).unwrap()).unwrap();
}

fn change<'a>(reply: &'a Value, key: &str) -> &'a Value {
    reply["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == key)
        .unwrap_or_else(|| panic!("{key} is not among the changes: {reply}"))
}

#[tokio::test]
async fn reloading_an_unchanged_file_lists_no_changes() {
    let env = Env::new().await;
    let file = env.show_config(&kube_config());
    let (code, body) = env.post(RELOAD, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["config_file"], json!(file));
    assert_eq!(body["changes"], json!([]));
    assert_eq!(body["restart_required"], false);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("matches what the server runs with"),
        "{message}"
    );
}

#[tokio::test]
async fn every_edited_setting_is_listed_with_both_values_and_the_running_config_stays() {
    let env = Env::new().await;
    let file = env.show_config(&kube_config());
    let mut edited = kube_config();
    edited["providers"][0]["config"]["namespace"] = json!("other");
    edited["request"]["default_timeout"] = json!(900);
    edited["request"]
        .as_object_mut()
        .unwrap()
        .remove("max_machines_per_request");
    write(&file, &edited);

    let (code, body) = env.post(RELOAD, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["restart_required"], true, "{body}");
    assert_eq!(body["changes"].as_array().unwrap().len(), 3, "{body}");
    let namespace = change(&body, "providers.0.config.namespace");
    assert_eq!(namespace["running"], "batch");
    assert_eq!(namespace["on_disk"], "other");
    let added = change(&body, "request.default_timeout");
    assert!(added.get("running").is_none_or(Value::is_null), "{added}");
    assert_eq!(added["on_disk"], 900);
    let removed = change(&body, "request.max_machines_per_request");
    assert_eq!(removed["running"], 7);
    assert!(
        removed.get("on_disk").is_none_or(Value::is_null),
        "{removed}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("3 settings differ") && message.contains("restarted"),
        "{message}"
    );
    assert!(
        message.contains("providers.0.config.namespace"),
        "{message}"
    );

    // What the server runs with has not moved: the config routes still answer the start's.
    let (_, shown) = env.get("/api/v1/config/provider.namespace").await;
    assert_eq!(shown["value"], "batch", "{shown}");
}

#[tokio::test]
async fn a_changed_secret_is_listed_but_never_shown() {
    let env = Env::new().await;
    let mut config = kube_config();
    config["storage"] = json!({"url": "postgres://orb:first-pass@db.example/orb"});
    let file = env.show_config(&config);
    config["storage"]["url"] = json!("postgres://orb:second-pass@db.example/orb");
    write(&file, &config);
    let (code, body) = env.post(RELOAD, "").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    change(&body, "storage.url");
    let text = body.to_string();
    assert!(
        !text.contains("first-pass") && !text.contains("second-pass"),
        "{text}"
    );
}

#[tokio::test]
async fn the_reload_rereads_the_template_file() {
    let env = Env::new().await;
    env.show_config(&kube_config());
    let (_, before) = env.post(RELOAD, "").await;
    let count = before["templates"]["count"].as_u64().unwrap();
    assert!(count > 0, "{before}");
    let more = TEMPLATES.replacen(
        r#"[
"#,
        r#"[
  {"templateId": "extra", "maxNumber": 1, "imageId": "busybox:1.36"},
"#,
        1,
    );
    assert_ne!(more, TEMPLATES, "the fixture's template list changed shape");
    // A different length, so the followed file's size changes even within one mtime tick.
    std::fs::write(env.template_file(), more).unwrap();
    let (code, after) = env.post(RELOAD, "").await;
    assert_eq!(code, StatusCode::OK, "{after}");
    assert_eq!(
        after["templates"]["count"].as_u64().unwrap(),
        count + 1,
        "{after}"
    );
    assert_eq!(after["templates"]["warnings"], json!([]), "{after}");
}

#[tokio::test]
async fn a_file_the_server_could_not_start_with_is_refused_with_every_problem() {
    let env = Env::new().await;
    let file = env.show_config(&kube_config());
    write(
        &file,
        &json!({"providers": [{"name": "kube", "type": "nomad"}]}),
    );
    let got = env.post(RELOAD, "").await;
    assert_problem(
        &got,
        422,
        "config-invalid",
        "keeps running with the configuration it started with",
    );
    let problems = &got.1["error"]["details"]["problems"];
    assert_eq!(problems[0]["field"], "provider.type", "{}", got.1);
    // The running configuration is untouched.
    let (_, shown) = env.get("/api/v1/config/provider.namespace").await;
    assert_eq!(shown["value"], "batch", "{shown}");

    // Not JSON: told by position, never by quoting the file.
    std::fs::write(&file, "token = \"file-s3cret\"\n").unwrap();
    let got = env.post(RELOAD, "").await;
    assert_problem(&got, 422, "config-invalid", "line 1");
    assert!(!got.1.to_string().contains("s3cret"), "{}", got.1);

    // Gone.
    std::fs::remove_file(&file).unwrap();
    let got = env.post(RELOAD, "").await;
    assert_problem(&got, 422, "config-invalid", "cannot read");
}

#[tokio::test]
async fn a_server_without_its_configuration_says_so() {
    let env = Env::new().await;
    let got = env.post(RELOAD, "").await;
    assert_problem(&got, 503, "config-unavailable", "orb config show");
}
