//! Authentication against the real apiserver: `kubeconfig_path` + `context` pick the user, and
//! an exec credential plugin in that kubeconfig is run to get the token.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_fixture::TestCluster;
use orb_k8s::config::{ConfigLayers, FileLayer, build_kube_client};
use serde_json::{Value, json};

async fn service_account_token(cluster: &TestCluster, ns: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap(),
    )
    .await
    .unwrap();
    // The bootstrap "view" ClusterRole, granted in this namespace only.
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "reader-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cluster.client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let issued: TokenRequest = sas
        .create_subresource("token", "reader", &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token.expect("a token was issued")
}

/// A kubeconfig with two contexts: `broken` (current; a token the apiserver rejects) and
/// `plugin`, whose user runs an exec credential plugin that prints `token`.
fn write_kubeconfig(
    cluster: &TestCluster,
    dir: &std::path::Path,
    token: &str,
) -> std::path::PathBuf {
    let admin: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let plugin = dir.join("credential-plugin.sh");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"}}}}'\n"
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [
            {"name": "broken", "user": {"token": "not-a-valid-token"}},
            {"name": "plugin", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": plugin.to_str().unwrap(),
                "interactiveMode": "Never"}}}
        ],
        "contexts": [
            {"name": "broken", "context": {"cluster": "local", "user": "broken"}},
            {"name": "plugin", "context": {"cluster": "local", "user": "plugin"}}
        ],
        "current-context": "broken",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    path
}

fn provider_config(
    kubeconfig: &std::path::Path,
    context: Option<&str>,
    ns: &str,
) -> orb_k8s::config::K8sProviderConfig {
    let mut block = serde_json::Map::new();
    block.insert("kubeconfig_path".into(), json!(kubeconfig));
    block.insert("namespace".into(), json!(ns));
    if let Some(c) = context {
        block.insert("context".into(), json!(c));
    }
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "auth-test.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    );
    layers.resolve(None).expect("valid config").config
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn context_selects_a_user_whose_exec_plugin_supplies_the_token() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("auth-exec").await;
    let token = service_account_token(&cluster, ns.name()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(&cluster, dir.path(), &token);

    let via_plugin = build_kube_client(&provider_config(&kubeconfig, Some("plugin"), ns.name()))
        .await
        .expect("client from the plugin context");
    let pods: Api<Pod> = Api::namespaced(via_plugin, ns.name());
    pods.list(&ListParams::default())
        .await
        .expect("the plugin's ServiceAccount token may list pods in its namespace");

    // Without `context`, the kubeconfig's current context (a rejected token) is used.
    let via_current = build_kube_client(&provider_config(&kubeconfig, None, ns.name()))
        .await
        .expect("client from the current context");
    let pods: Api<Pod> = Api::namespaced(via_current, ns.name());
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401, "{s:?}"),
        other => panic!("the current context's bad token must be refused with 401, got {other:?}"),
    }
}
