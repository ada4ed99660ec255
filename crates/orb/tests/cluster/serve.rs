//! `orb serve` against the real local control plane: a machine request through the REST
//! API becomes running pods, the event stream follows it to `complete`, and a return by
//! request id gives the pods back. Needs the control plane (`tools/control-plane/cp up`).

use crate::serve_support;

use std::time::Duration;

use crate::serve_support::Env;
use crate::support::k8s_provider_entry;
use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use http_body_util::BodyExt;
use kube_fixture::TestCluster;
use serde_json::{Value, json};

const TEMPLATES: &str = r#"{"templates": [
  {"templateId": "worker", "maxNumber": 4, "imageId": "busybox:1.36",
   "command": ["sh", "-c", "sleep 3600"]}
]}"#;

/// Collects a request's event stream to its end; returns the statuses in order and the last event.
async fn follow(env: &Env, id: &str) -> (Vec<String>, Value) {
    let response = env
        .call(
            HttpRequest::get(format!("/api/v1/requests/{id}/events"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = tokio::time::timeout(Duration::from_secs(120), response.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("request {id} did not finish within 120 s"))
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|block| {
            block
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .and_then(|d| serde_json::from_str(d.trim()).ok())
        })
        .collect();
    assert!(
        text.contains("event: status"),
        "status events expected: {text}"
    );
    let statuses = events
        .iter()
        .map(|e| e["request"]["status"].as_str().unwrap_or("?").to_string())
        .collect();
    (statuses, events.last().cloned().unwrap_or(Value::Null))
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_rest_request_runs_pods_and_a_rest_return_removes_them() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve").await;
    let identity = cluster.broker_identity(&ns).await;
    let entry = k8s_provider_entry(
        &cluster,
        &ns,
        json!({"kubeconfig_path": identity.kubeconfig}),
    );
    let env = Env::build(entry, TEMPLATES, Duration::from_millis(500)).await;

    let (code, ready) = env.get("/readyz").await;
    assert_eq!(code, StatusCode::OK, "{ready}");

    let (code, body) = env
        .post(
            "/api/v1/machines/request",
            r#"{"template_id": "worker", "count": 2}"#,
        )
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    let id = body["request"]["request_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("req-"), "{body}");

    let (statuses, last) = follow(&env, &id).await;
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("complete"),
        "{statuses:?}"
    );
    let running: Vec<&Value> = last["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "running")
        .collect();
    assert_eq!(running.len(), 2, "{last}");
    assert!(
        running.iter().all(|m| m["private_ip"].is_string()),
        "{last}"
    );

    // The template now allows 4 - 2 more.
    let (_, worker) = env.get("/api/v1/templates/worker").await;
    assert_eq!(worker["available_number"], 2, "{worker}");

    let (code, body) = env
        .post(
            "/api/v1/machines/return",
            &json!({"request_id": id}).to_string(),
        )
        .await;
    assert!(
        code == StatusCode::ACCEPTED || code == StatusCode::OK,
        "{code}: {body}"
    );
    let ret = body["request"]["request_id"].as_str().unwrap().to_string();
    assert!(ret.starts_with("ret-"), "{body}");
    let (statuses, _) = follow(&env, &ret).await;
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("complete"),
        "{statuses:?}"
    );

    let (_, live) = env.get("/api/v1/machines?all=false").await;
    assert_eq!(
        live["machines"],
        json!([]),
        "no live machines after the return"
    );

    // With wait=true the reply comes when the request has finished.
    let (code, waited) = env
        .post(
            "/api/v1/machines/request?wait=true&timeout=120",
            r#"{"template_id": "worker", "count": 1}"#,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{waited}");
    assert_eq!(waited["request"]["status"], "complete", "{waited}");
    assert_eq!(waited["machines"][0]["status"], "running", "{waited}");

    let (_, metrics) = env.get("/metrics").await;
    let text = metrics.as_str().unwrap_or_default();
    for line in [
        "orb_acquire_total{handler=\"pod\",outcome=\"accepted\"} 2",
        "orb_release_total{handler=\"pod\",outcome=\"accepted\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

/// orb running as a ServiceAccount nobody bound a Role to: the apiserver answers 403.
/// An acquire is stored before its first create, so its 403 is recorded on the request: the
/// reply is the request, `failed`, with the apiserver's words, and nothing is created. A call
/// whose provider step itself is refused (a cancel, which lists and deletes the request's
/// objects) is a 403 `provider-forbidden` problem, not a generic 422 or 503 that would send
/// the user looking at the request or at the cluster's health.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn rbac_that_forbids_orb_fails_the_acquire_on_record_and_a_cancel_with_provider_forbidden() {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use kube::Api;
    use kube::api::PostParams;
    use kube_fixture::pod_sandbox::{ApiServer, service_account_token};

    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("serve-forbidden").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "orb-no-role"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let token = service_account_token(&cluster, ns.name(), "orb-no-role").await;
    let apiserver = ApiServer::from_kubeconfig(&cluster.kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &apiserver.ca_pem).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://{}:{}\n    certificate-authority: {}\nusers:\n- name: no-role\n  user:\n    token: {token}\ncontexts:\n- name: no-role\n  context:\n    cluster: local\n    user: no-role\ncurrent-context: no-role\n",
            apiserver.host,
            apiserver.port,
            ca.display()
        ),
    )
    .unwrap();
    let entry = k8s_provider_entry(&cluster, &ns, json!({"kubeconfig_path": kubeconfig}));
    let templates = r#"{"templates": [
      {"templateId": "worker", "maxNumber": 4, "imageId": "busybox:1.36",
       "command": ["sh", "-c", "sleep 3600"]},
      {"templateId": "svc", "providerApi": "Deployment", "maxNumber": 4,
       "imageId": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]}
    ]}"#;
    let env = Env::build(entry, templates, Duration::from_millis(500)).await;

    for template in ["svc", "worker"] {
        let (code, failed) = env
            .post(
                "/api/v1/machines/request",
                &json!({"template_id": template, "count": 2}).to_string(),
            )
            .await;
        assert_eq!(code, StatusCode::OK, "{failed}");
        assert_eq!(failed["request"]["status"], "failed", "{failed}");
        let message = failed["request"]["status_message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains("403 Forbidden") && message.contains("cannot create resource"),
            "{template}: {message}"
        );
        let id = failed["request"]["request_id"].as_str().unwrap();
        let got = env.post(&format!("/api/v1/requests/{id}/cancel"), "").await;
        serve_support::assert_problem(&got, 403, "provider-forbidden", "403 Forbidden");
    }
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    assert!(
        pods.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing is created"
    );
    let (_, requests) = env.get("/api/v1/requests").await;
    for request in requests["requests"].as_array().into_iter().flatten() {
        assert_ne!(request["status"], "in_progress", "{request}");
        assert_ne!(request["status"], "pending", "{request}");
    }
}
