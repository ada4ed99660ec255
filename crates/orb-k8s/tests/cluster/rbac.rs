//! The broker runs as a ServiceAccount bound to exactly the Role in docs/rbac.yaml (token from
//! the TokenRequest API), not as cluster admin, and completes request → status → return with
//! every handler. If a handler needed a verb the Role does not grant, the apiserver would
//! answer 403 and the test would fail, so the documented Role is the one that works.

use crate::common::*;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube_fixture::TestCluster;
use orb_core::ids::RequestId;
use orb_core::machine::MachineStatus;
use orb_core::provider::StatusInput;
use orb_core::request::RequestType;
use orb_core::template::ProviderApi;
use orb_core::test_support::status_machines;
use serde_json::json;

const RBAC_YAML: &str = include_str!("../../../../docs/rbac.yaml");
const SA: &str = "orb-broker";

/// The documents of docs/rbac.yaml with the placeholders filled in.
fn rbac_documents(namespace: &str) -> Vec<DynamicObject> {
    let text = RBAC_YAML
        .replace("ORB_SERVICE_ACCOUNT_NAMESPACE", namespace)
        .replace("ORB_NAMESPACE", namespace);
    serde_saphyr::from_multiple::<DynamicObject>(&text).expect("docs/rbac.yaml parses")
}

fn document<T: serde::de::DeserializeOwned>(docs: &[DynamicObject], kind: &str) -> T {
    let doc = docs
        .iter()
        .find(|d| d.types.as_ref().is_some_and(|t| t.kind == kind))
        .unwrap_or_else(|| panic!("docs/rbac.yaml has no {kind}"));
    serde_json::from_value(serde_json::to_value(doc).unwrap()).unwrap()
}

/// A kubeconfig for the ServiceAccount: the admin kubeconfig's cluster, a bound token.
async fn service_account_client(cluster: &TestCluster, namespace: &str) -> kube::Client {
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": SA}})).unwrap(),
    )
    .await
    .expect("create ServiceAccount");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let token: TokenRequest = sas
        .create_subresource("token", SA, &PostParams::default(), &request)
        .await
        .expect("TokenRequest for the ServiceAccount");
    let token = token
        .status
        .and_then(|s| s.token)
        .expect("a token was issued");

    let admin: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let server = admin["clusters"][0]["cluster"]["server"].as_str().unwrap();
    let ca = admin["clusters"][0]["cluster"]["certificate-authority"]
        .as_str()
        .unwrap();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": SA, "context": {"cluster": "local", "user": SA, "namespace": namespace}}],
        "current-context": SA,
    });
    let path = std::env::temp_dir().join(format!("orb-rbac-{namespace}.kubeconfig"));
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    let client = kube_fixture::client_from(&path)
        .await
        .expect("client for the token");
    let _ = std::fs::remove_file(&path);
    client
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn every_handler_works_with_only_the_documented_role() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("rbac").await;
    let docs = rbac_documents(ns.name());
    let role: Role = document(&docs, "Role");
    let binding: RoleBinding = document(&docs, "RoleBinding");
    Api::<Role>::namespaced(cluster.client.clone(), ns.name())
        .create(&PostParams::default(), &role)
        .await
        .expect("create Role from docs/rbac.yaml");
    Api::<RoleBinding>::namespaced(cluster.client.clone(), ns.name())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create RoleBinding from docs/rbac.yaml");
    let sa_client = service_account_client(&cluster, ns.name()).await;

    // The token really is limited: outside its namespace it may not even list pods.
    let elsewhere: Api<Pod> = Api::namespaced(sa_client.clone(), "default");
    match elsewhere.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("the ServiceAccount must not read pods in 'default': {other:?}"),
    }

    let admin_view = harness_with_client(&cluster, &ns, sa_client);
    for api in ProviderApi::ALL {
        let t = template(
            &format!("rbac-{}", api.as_str().to_ascii_lowercase()),
            Some(api),
        );
        let (req, outcome) = acquire(&admin_view, &t, 2).await;
        let input = status_input(&req, &t, 2, &outcome);
        let report = wait_verdict(&admin_view, &input, "fulfilled").await;
        let running = ids_with(&report, MachineStatus::Running);
        let done_kind = if api == ProviderApi::Job {
            MachineStatus::Stopped
        } else {
            MachineStatus::Running
        };
        let delivered = ids_with(&report, done_kind);
        assert_eq!(
            delivered.len(),
            2,
            "{api}: {report:?} (running: {running:?})"
        );

        let victim = delivered.last().unwrap().clone();
        release(&admin_view, &req, &outcome, api.as_str(), &[&victim])
            .await
            .unwrap_or_else(|e| panic!("{api}: release as the ServiceAccount failed: {e}"));
        let mut returned = machine_ref(&req, &victim, &outcome, api.as_str());
        returned.uid = report
            .machines
            .iter()
            .find(|m| m.machine_id == victim)
            .and_then(|m| m.uid.clone());
        let return_input = StatusInput {
            request_id: RequestId::new_return(),
            request_type: RequestType::Return,
            requested_count: 1,
            provider_api: Some(api),
            provider_data: json!(null).into(),
            template: Some(t.clone()),
            machines: status_machines([returned]),
        };
        wait_verdict(&admin_view, &return_input, "fulfilled").await;
    }
}

fn harness_with_client(
    cluster: &TestCluster,
    ns: &kube_fixture::TestNamespace,
    client: kube::Client,
) -> Harness {
    let sa_cluster = TestCluster {
        client,
        kubeconfig: cluster.kubeconfig.clone(),
    };
    let provider = provider_for(&sa_cluster, ns.name(), json!({}));
    // The harness owns a namespace guard; give it one for a throwaway namespace name that is
    // never created, so dropping it deletes nothing real. The test's own guard `ns` cleans up.
    Harness {
        cluster: sa_cluster,
        ns: kube_fixture::TestNamespace::detached(ns.name()),
        provider,
    }
}
