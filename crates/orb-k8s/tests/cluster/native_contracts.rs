//! Native bodies and the typed path's guarantees, against the real apiserver (issue #53
//! point 5): a native StatefulSet whose pods mount a claim of the template's typed
//! `volumeClaimTemplates` is accepted (it used to lose them, and the apiserver refused the
//! mount of a volume that did not exist).

use kube_fixture::TestCluster;
use orb_core::ProviderApi;
use orb_core::template::Template;
use orb_k8s::config::K8sProviderConfig;
use orb_k8s::dry_run::{DryRunVerdict, server_dry_run};
use orb_k8s::native_spec::{NativeSpecInput, object_name, render_native_body};
use serde_json::json;

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_native_statefulset_keeps_the_templates_volume_claim_templates() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-vct").await;
    let mut template = Template {
        template_id: "scratch".into(),
        container_image: Some("busybox:1.36".into()),
        volume_mounts: Some(vec![json!({"name": "scratch", "mountPath": "/scratch"})]),
        native_spec: Some(json!({"spec": {"updateStrategy": {"type": "OnDelete"}}})),
        ..Template::default()
    };
    template.extra.insert(
        "volumeClaimTemplates".into(),
        json!([{"metadata": {"name": "scratch"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}]),
    );
    let config = K8sProviderConfig::default();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let name =
        object_name(ProviderApi::StatefulSet, &config.naming, &request_id).expect("a valid name");
    let input = NativeSpecInput {
        template: &template,
        config: &config,
        request_id: &request_id,
        name: &name,
        namespace: ns.name(),
        count: 2,
        config_dir: None,
    };
    let body = render_native_body(ProviderApi::StatefulSet, &input).expect("it renders");
    let verdict = server_dry_run(&cluster.client, &body)
        .await
        .expect("the apiserver answers");
    assert!(
        matches!(verdict, DryRunVerdict::Accepted { .. }),
        "the apiserver refused the native StatefulSet: {verdict:?}"
    );
}
