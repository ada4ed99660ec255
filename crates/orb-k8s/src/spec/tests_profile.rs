//! The audit's profile on the typed path: `pod_security_profile=restricted` refuses orb's
//! plain container (it sets no securityContext), and a template meets it with its pod
//! `securityContext` plus a `podSpecOverride` for orb's container, as docs/security-audit.md
//! shows.

use orb_core::ProviderApi;
use rstest::rstest;
use serde_json::{Value, json};

use super::{FinalBodyRequest, final_workload};
use crate::config::K8sProviderConfig;
use crate::native_spec::NativeSpecSwitches;

fn build(api: ProviderApi, extra: Value) -> Result<(), String> {
    let mut value = json!({
        "templateId": "restricted",
        "providerApi": api.as_str(),
        "imageId": "busybox:1.36",
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
    });
    if let (Value::Object(base), Value::Object(more)) = (&mut value, extra) {
        base.extend(more);
    }
    let template = orb_core::template::wire::template_from_value(&value, None, "test")
        .unwrap()
        .template;
    let config = K8sProviderConfig {
        pod_security_profile: "restricted".into(),
        ..K8sProviderConfig::default()
    };
    let request = FinalBodyRequest {
        template: &template,
        config: &config,
        request_id: "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f",
        namespace: "orb",
        count: 2,
        switches: NativeSpecSwitches {
            provider_enabled: false,
            application_enabled: true,
        },
        config_dir: None,
    };
    final_workload(&request, api)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[rstest]
#[case::pod(ProviderApi::Pod)]
#[case::deployment(ProviderApi::Deployment)]
#[case::statefulset(ProviderApi::StatefulSet)]
#[case::job(ProviderApi::Job)]
fn restricted_refuses_the_plain_container_and_accepts_the_documented_override(
    #[case] api: ProviderApi,
) {
    let err = build(api, json!({})).unwrap_err();
    assert!(
        err.contains("allowPrivilegeEscalation = (not set)"),
        "{err}"
    );
    assert!(err.contains("capabilities.drop = (not set)"), "{err}");
    let container = json!({"name": "orb", "securityContext": {
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}});
    build(api, json!({"podSpecOverride": {"containers": [container]}})).unwrap();
}
