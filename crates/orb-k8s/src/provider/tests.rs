use orb_core::template::{ProviderApi, Template};
use rstest::rstest;
use serde_json::{Value, json};

use super::*;
use crate::config::{ConfigLayers, FileLayer};

/// A provider with an unconnected client: these tests never reach a cluster.
fn provider(settings: Value) -> K8sProvider {
    let Value::Object(block) = settings else {
        panic!("settings must be an object")
    };
    let layers = ConfigLayers::new(
        Some(FileLayer {
            path: "config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    );
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = Client::try_from(config).unwrap();
    K8sProvider::with_client(client, layers.resolve(None).unwrap(), "detected")
}

fn template(namespace: Option<&str>, provider_config: Option<Value>) -> Template {
    Template {
        template_id: "t".into(),
        namespace: namespace.map(str::to_string),
        provider_config,
        ..Template::default()
    }
}

#[rstest]
#[case::config_namespace(json!({"namespace": "orb"}), None, Ok("orb"))]
#[case::detected_when_unset(json!({}), None, Ok("detected"))]
#[case::template_overrides_single(json!({"namespace": "orb"}), Some("team-x"), Ok("team-x"))]
#[case::first_of_the_list(json!({"namespaces": ["a", "b"]}), None, Ok("a"))]
#[case::list_allows_member(json!({"namespaces": ["a", "b"]}), Some("b"), Ok("b"))]
#[case::list_is_a_boundary(json!({"namespaces": ["a", "b"]}), Some("c"), Err("is not managed by this provider"))]
#[case::not_a_label(json!({}), Some("production.jobs"), Err("is not a valid namespace name"))]
#[tokio::test]
async fn target_namespace(
    #[case] settings: Value,
    #[case] template_ns: Option<&str>,
    #[case] expected: Result<&str, &str>,
) {
    let p = provider(settings);
    let t = template(template_ns, None);
    let cfg = p.effective_config(Some(&t)).unwrap();
    match (p.target_namespace(&cfg, &t), expected) {
        (Ok(ns), Ok(want)) => assert_eq!(ns, want),
        (Err(e), Err(needle)) => assert!(e.to_string().contains(needle), "{e}"),
        (got, want) => panic!("got {got:?}, wanted {want:?}"),
    }
}

#[tokio::test]
async fn template_provider_config_overrides_the_provider_settings() {
    let p = provider(json!({"pod_timeout_seconds": 300}));
    let t = template(None, Some(json!({"pod_timeout_seconds": 7})));
    assert_eq!(p.effective_config(Some(&t)).unwrap().pod_timeout_seconds, 7);
    assert_eq!(p.effective_config(None).unwrap().pod_timeout_seconds, 300);
}

#[rstest]
#[case::unknown_key(json!({"pod_timeout": "x", "no_such_key": 1}), "no_such_key")]
#[case::not_an_object(json!(["pod_timeout_seconds"]), "provider_config must be an object")]
#[tokio::test]
async fn bad_template_provider_config_is_refused(#[case] overrides: Value, #[case] needle: &str) {
    let p = provider(json!({}));
    let err = p
        .effective_config(Some(&template(None, Some(overrides))))
        .unwrap_err();
    assert!(err.to_string().contains(needle), "{err}");
}

#[rstest]
#[case(None, ProviderApi::Pod)]
#[case(Some(ProviderApi::Pod), ProviderApi::Pod)]
#[case(Some(ProviderApi::Deployment), ProviderApi::Deployment)]
#[case(Some(ProviderApi::StatefulSet), ProviderApi::StatefulSet)]
#[case(Some(ProviderApi::Job), ProviderApi::Job)]
fn the_handler_kind_follows_provider_api(
    #[case] api: Option<ProviderApi>,
    #[case] kind: ProviderApi,
) {
    let t = Template {
        provider_api: api,
        ..Template::default()
    };
    assert_eq!(t.api(), kind);
    assert_eq!(handler_for(kind).kind(), kind);
}

#[tokio::test]
async fn an_unreadable_kubeconfig_is_a_configuration_problem_naming_the_file() {
    use orb_core::provider::{AcquireInput, Provider, ProviderError};
    let mut block = serde_json::Map::new();
    block.insert("in_cluster".into(), json!(false));
    block.insert(
        "kubeconfig_path".into(),
        json!("/nonexistent/orb/kubeconfig"),
    );
    let resolved = ConfigLayers::new(
        Some(FileLayer {
            path: "config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    )
    .resolve(None)
    .unwrap();
    let provider = K8sProvider::new(resolved).expect("deciding auth needs no file");
    let err = provider
        .acquire(AcquireInput {
            request_id: orb_core::ids::RequestId::new_acquire(),
            template: Template {
                template_id: "t".into(),
                container_image: Some("busybox:1.36".into()),
                ..Template::default()
            },
            count: 1,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Misconfigured(m) if m.contains("/nonexistent/orb/kubeconfig")),
        "{err:?}"
    );
}

/// The settings that shape `orb serve`'s watch cache and the status cache reach them: the
/// cache is built from the provider exactly as configured (defaults included).
#[rstest]
#[case::defaults(json!({}), Some((600, None)), Some(5_000))]
#[case::set(json!({"stale_cache_timeout_seconds": 42, "periodic_resync_interval_seconds": 7,
    "controller_status_cache_ttl_seconds": 2.5}), Some((42, Some(7))), Some(2_500))]
#[case::watch_off_and_no_status_cache(json!({"watch_enabled": false,
    "controller_status_cache_ttl_seconds": 0}), None, None)]
#[tokio::test]
async fn cache_settings_are_wired_from_the_config(
    #[case] settings: Value,
    #[case] watch: Option<(u64, Option<u64>)>,
    #[case] status_ttl_ms: Option<u64>,
) {
    let p = provider(settings);
    let cache = crate::daemon::PodCache::for_provider(&p);
    assert_eq!(
        cache.as_ref().map(|c| (
            c.stale_after().as_secs(),
            c.resync_every().map(|d| d.as_secs())
        )),
        watch
    );
    if let Some(cache) = cache {
        assert_eq!(cache.scope(), &p.watch_scope());
    }
    assert_eq!(
        p.status_cache.ttl().map(|d| d.as_millis() as u64),
        status_ttl_ms
    );
}

/// A template whose providerConfig switches the audit off is refused by the provider itself
/// too (not only at load), naming the key; a per-template naming warning is kept.
#[tokio::test]
async fn the_provider_refuses_operator_keys_in_a_template_and_keeps_its_warnings() {
    use orb_core::provider::Provider;
    let p = provider(json!({}));
    let mut t = template(None, Some(json!({"audit_high_risk_pod_fields": false})));
    t.container_image = Some("busybox:1.36".into());
    t.pod_spec_override =
        Some(json!({"containers": [{"name": "orb", "securityContext": {"privileged": true}}]}));
    let err = p.check_acquire(&t, 1).unwrap_err();
    assert!(
        err.to_string()
            .contains("may not override \"audit_high_risk_pod_fields\""),
        "{err}"
    );
    t.provider_config = Some(json!({"naming": {"max_pod_name_len": 63, "max_job_name_len": 60}}));
    t.pod_spec_override = None;
    let warnings = p.check_acquire(&t, 1).unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("template \"t\" providerConfig: naming.max_job_name_len")),
        "{warnings:?}"
    );
}
