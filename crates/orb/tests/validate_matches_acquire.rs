//! `orb templates validate` is the acquire's own check: for every refusal the template
//! loader, orb-core's template checks, the spec builders, the native spec renderer, the
//! audit and the broker make before the first call to the cluster, validate reports the
//! template as invalid and an acquire refuses it with the same reason, storing nothing. A
//! template validate calls valid is never refused that way (its acquire only gets as far as
//! the cluster, which these tests do not have). No cluster needed.
//!
//! Refusals that depend on the request rather than the template (the count, maxNumber
//! against live machines, request.max_machines_per_request) are the broker's own and are
//! tested in its unit tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use orb_broker::catalog::{Catalog, CatalogCell};
use orb_broker::{Broker, BrokerError, BrokerSettings, ProviderHandle};
use orb_cli::context::load_catalog_from;
use orb_cli::provider_factory::{ProviderContext, build_kubernetes_provider};
use orb_cli::serve::daemon::ClusterRuntime;
use orb_cli::template_checks::check_template;
use orb_core::config::ProviderEntry;
use orb_core::provider::ProviderError;
use orb_store::{RequestFilter, Store};
use rstest::rstest;
use serde_json::{Value, json};

struct Installation {
    _root: tempfile::TempDir,
    provider: Arc<orb_k8s::K8sProvider>,
    runtime: Arc<ClusterRuntime>,
    catalog: Catalog,
    broker: Broker,
}

/// A Kubernetes provider managing `orb` and `batch`, native specs on, never connected (its
/// kubeconfig does not exist), and a catalog holding `template` loaded like every command.
async fn install(template: Value) -> Installation {
    let root = tempfile::tempdir().unwrap();
    let config_dir = root.path().join("config");
    std::fs::create_dir_all(config_dir.join("specs")).unwrap();
    std::fs::write(
        config_dir.join("specs/empty-service.yaml"),
        "spec:\n  serviceName: \"\"\n",
    )
    .unwrap();
    let entry = ProviderEntry {
        name: "k8s".into(),
        provider_type: "k8s".into(),
        enabled: true,
        default: true,
        config: json!({
            "namespaces": ["orb", "batch"],
            "in_cluster": false,
            "kubeconfig_path": root.path().join("no-such-kubeconfig"),
            "native_spec_enabled": true,
        }),
        template_defaults: Default::default(),
    };
    let file = config_dir.join("k8s_templates.json");
    std::fs::write(&file, json!({"templates": [template]}).to_string()).unwrap();
    let catalog = load_catalog_from(&file, &entry).unwrap();
    let context = ProviderContext {
        config_dir,
        work_dir: root.path().join("work"),
    };
    let runtime = Arc::new(
        ClusterRuntime::prepare(
            build_kubernetes_provider(&entry, &context, &BTreeMap::new()).unwrap(),
        )
        .await,
    );
    let provider = runtime.provider().clone();
    let store = Store::open_sqlite_file(&root.path().join("work/orb.db"))
        .await
        .unwrap();
    let broker = Broker {
        store,
        provider: ProviderHandle::ready(provider.clone()),
        settings: BrokerSettings {
            provider_name: "k8s".into(),
            provider_type: "k8s".into(),
            grace_secs: 300,
            max_machines_per_request: 100,
            default_max_machines: 10,
        },
        catalog: CatalogCell::new(catalog.clone()),
        clock: Arc::new(Timestamp::now),
        refreshed: Default::default(),
    };
    Installation {
        _root: root,
        provider,
        runtime,
        catalog,
        broker,
    }
}

/// What `orb templates validate` reports for the one template: its problems.
fn validate(i: &Installation) -> Vec<String> {
    let mut problems: Vec<String> = i.catalog.refused.iter().map(|r| r.reason.clone()).collect();
    for template in &i.catalog.templates {
        problems.extend(check_template(Some(&i.provider), template).problems);
    }
    problems
}

fn base(id: &str) -> Value {
    json!({"templateId": id, "maxNumber": 5, "imageId": "busybox:1.36"})
}

fn with(id: &str, extra: Value) -> Value {
    let mut t = base(id);
    for (k, v) in extra.as_object().unwrap() {
        t[k] = v.clone();
    }
    t
}

/// Every refusal made before the first API call, by who makes it.
#[rstest]
// The template loader (keys only the operator may set).
#[case::override_audit(with("t", json!({"providerConfig": {"audit_high_risk_pod_fields": false}})), "may not override \"audit_high_risk_pod_fields\"")]
#[case::override_namespaces(with("t", json!({"providerConfig": {"namespaces": ["*"]}})), "may not override \"namespaces\"")]
#[case::override_native_switch(with("t", json!({"providerConfig": {"native_spec_enabled": false}})), "may not override \"native_spec_enabled\"")]
#[case::override_not_an_object(with("t", json!({"providerConfig": [1]})), "must be an object of provider settings")]
// orb-core's template checks.
#[case::no_image(json!({"templateId": "t"}), "imageId: is required")]
#[case::bad_image(with("t", json!({"imageId": " busybox"})), "is not an image reference")]
#[case::id_not_a_label_value(with("my worker", json!({})), "it becomes a label value")]
#[case::id_too_long(with(&"w".repeat(64), json!({})), "longer than 63 characters")]
#[case::max_number(with("t", json!({"maxNumber": -2})), "maxNumber: -2 is not allowed")]
#[case::namespace_not_a_label(with("t", json!({"namespace": "production.jobs"})), "is not a DNS-1123 label")]
#[case::bad_quantity(with("t", json!({"resourceRequests": {"cpu": "fast"}})), "resourceRequests")]
#[case::job_completions(with("t", json!({"providerApi": "Job", "completions": 2})), "completions: is 2")]
#[case::job_parallelism(with("t", json!({"providerApi": "Job", "parallelism": 1})), "parallelism: is 1")]
#[case::completions_on_a_pod(with("t", json!({"completions": 1})), "only applies to providerApi Job")]
#[case::job_on_failure(with("t", json!({"providerApi": "Job", "restartPolicy": "OnFailure"})), "OnFailure is not allowed for a Job")]
#[case::job_always(with("t", json!({"providerApi": "Job", "restartPolicy": "Always"})), "Always is not allowed for a Job")]
#[case::negative_grace(with("t", json!({"terminationGracePeriodSeconds": -1})), "is negative")]
#[case::zero_deadline(with("t", json!({"activeDeadlineSeconds": 0})), "must be greater than 0")]
#[case::env_without_name(with("t", json!({"env": [{"name": " ", "value": "x"}]})), "an entry has an empty name")]
#[case::bad_attributes(with("t", json!({"attributes": {"ncpus": 4}})), "must be a [kind, value] pair")]
#[case::override_not_object(with("t", json!({"podSpecOverride": [1]})), "must be an object (a partial pod spec)")]
// The provider: effective config, namespace, spec builders, audit.
#[case::per_template_value(with("t", json!({"providerConfig": {"pod_timeout_seconds": 0}})), "pod_timeout_seconds (from template t)")]
#[case::per_template_budget(with("t", json!({"providerApi": "Deployment", "providerConfig": {"naming": {"max_deployment_name_len": 20}}})), "over the Deployment budget of 20")]
#[case::namespace_not_managed(with("t", json!({"namespace": "elsewhere"})), "is not managed by this provider")]
#[case::controller_restart_policy(with("t", json!({"providerApi": "Deployment", "restartPolicy": "Never"})), "controllers always restart their pods")]
#[case::bad_toleration(with("t", json!({"tolerations": [{"tolerationSeconds": "soon"}]})), "tolerations[0] is not a valid")]
#[case::bad_volume(with("t", json!({"volumes": ["nope"]})), "volumes[0] is not a valid")]
#[case::bad_volume_claims(with("t", json!({"providerApi": "StatefulSet", "volumeClaimTemplates": {"a": 1}})), "volumeClaimTemplates")]
#[case::bad_label(with("t", json!({"labels": {"team": "has space"}})), "has space")]
#[case::bad_security_context(with("t", json!({"securityContext": {"runAsUser": "root"}})), "securityContext is not a valid")]
#[case::override_restart_policy(with("t", json!({"podSpecOverride": {"restartPolicy": "Always"}})), "may not change restartPolicy")]
#[case::override_unknown_field(with("t", json!({"podSpecOverride": {"securityContext": {"run_as_non_root": true}}})), "securityContext.run_as_non_root")]
#[case::audit_privileged(with("t", json!({"podSpecOverride": {"containers": [{"name": "orb", "securityContext": {"privileged": true}}]}})), "request rejected before anything was created")]
#[case::audit_host_path(with("t", json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}], "volumeMounts": [{"name": "h", "mountPath": "/h"}]})), "hostPath")]
// The native spec path.
#[case::native_jinja(with("t", json!({"nativeSpec": {"spec": {"hostname": "{{ nmae }}"}}})), "Jinja error")]
#[case::native_wrong_kind(with("t", json!({"nativeSpec": {"kind": "DaemonSet"}})), "provider_api Pod creates")]
#[case::native_job_size(with("t", json!({"providerApi": "Job", "nativeSpec": {"spec": {"parallelism": 9}}})), "sets spec.parallelism to 9")]
#[case::native_backoff(with("t", json!({"providerApi": "Job", "nativeSpec": {"spec": {"backoffLimit": 3}}})), "spec.backoffLimit")]
#[case::native_restart(with("t", json!({"nativeSpec": {"spec": {"restartPolicy": "Always"}}})), "spec.restartPolicy")]
#[case::native_missing_file(with("t", json!({"nativeSpecPath": "specs/none.yaml"})), "cannot be read")]
#[case::native_empty_service(with("t", json!({"providerApi": "StatefulSet", "nativeSpecPath": "specs/empty-service.yaml"})), "spec.serviceName")]
#[case::native_wrong_type(with("t", json!({"nativeSpec": {"spec": {"hostNetwork": "maybe"}}})), "not a valid Kubernetes Pod")]
#[case::native_privileged(with("t", json!({"nativeSpec": {"spec": {"hostNetwork": true}}})), "spec.hostNetwork = true")]
#[tokio::test]
async fn every_refusal_before_the_first_api_call_is_seen_by_validate(
    #[case] template: Value,
    #[case] needle: &str,
) {
    let i = install(template.clone()).await;
    let problems = validate(&i);
    assert!(
        problems.iter().any(|p| p.contains(needle)),
        "validate missed {needle:?}: {problems:?}"
    );
    let id = template["templateId"].as_str().unwrap();
    let err = i.broker.request_machines(id, 1).await.unwrap_err();
    let refused = matches!(
        err,
        BrokerError::InvalidTemplate(_)
            | BrokerError::RefusedTemplate(_)
            | BrokerError::Provider(ProviderError::Rejected(_))
    );
    assert!(refused, "acquire must refuse it as invalid input: {err:?}");
    assert!(err.to_string().contains(needle), "{err}");
    let stored = i
        .broker
        .store
        .list_requests(&RequestFilter::default())
        .await
        .unwrap();
    assert!(stored.is_empty(), "a refused template stored {stored:?}");
}

/// Templates validate accepts get past every check: their acquire is stored and reaches the
/// create step, where only the missing cluster (the kubeconfig does not exist) stops it.
#[rstest]
#[case::pod(base("t"))]
#[case::job(with("t", json!({"providerApi": "Job"})))]
#[case::statefulset_with_claims(with("t", json!({"providerApi": "StatefulSet", "volumeClaimTemplates": []})))]
#[case::allowed_overrides(with("t", json!({"providerConfig": {"pod_timeout_seconds": 900, "naming": {"prefix": "gpu"}}})))]
#[case::managed_namespace(with("t", json!({"namespace": "batch"})))]
#[case::native(with("t", json!({"providerApi": "Deployment", "nativeSpec": {"spec": {"strategy": {"type": "Recreate"}}}})))]
#[case::override_camel_case(with("t", json!({"podSpecOverride": {"securityContext": {"runAsNonRoot": true}}})))]
#[tokio::test]
async fn what_validate_accepts_is_never_refused_by_the_acquire(#[case] template: Value) {
    let i = install(template.clone()).await;
    assert_eq!(validate(&i), Vec::<String>::new());
    let id = template["templateId"].as_str().unwrap();
    let view = i
        .broker
        .request_machines(id, 1)
        .await
        .expect("no refusal before the cluster");
    assert_eq!(view.request.status.as_str(), "failed");
    let message = view.request.status_message.unwrap_or_default();
    assert!(
        message.starts_with("cannot connect to Kubernetes"),
        "only the missing cluster may stop it: {message}"
    );
}

/// `POST /api/v1/templates/validate` on a Kubernetes provider renders and audits exactly as
/// `orb templates validate` does: the same verdict and the same problems, refusal at load
/// included.
#[rstest]
#[case::valid(base("t"))]
#[case::override_audit(with("t", json!({"providerConfig": {"audit_high_risk_pod_fields": false}})))]
#[case::audit_privileged(with("t", json!({"podSpecOverride": {"containers": [{"name": "orb", "securityContext": {"privileged": true}}]}})))]
#[case::native_jinja(with("t", json!({"nativeSpec": {"spec": {"hostname": "{{ nmae }}"}}})))]
#[case::namespace_not_managed(with("t", json!({"namespace": "elsewhere"})))]
#[case::job_on_failure(with("t", json!({"providerApi": "Job", "restartPolicy": "OnFailure"})))]
#[tokio::test]
async fn rest_validate_gives_the_cli_verdict(#[case] template: Value) {
    use axum::body::Body;
    use axum::http::{Request, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let i = install(template.clone()).await;
    let cli_problems = validate(&i);
    let state = orb_cli::serve::AppState::with_kubernetes(
        Broker {
            store: i.broker.store.clone(),
            provider: ProviderHandle::ready(i.provider.clone()),
            settings: i.broker.settings.clone(),
            catalog: CatalogCell::new(i.catalog.clone()),
            clock: Arc::new(Timestamp::now),
            refreshed: Default::default(),
        },
        orb_cli::serve::ServeOptions::default(),
        i.runtime.clone(),
    );
    let reply = orb_cli::serve::router(state)
        .oneshot(
            Request::post("/api/v1/templates/validate")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(json!({"templates": [template]}).to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let body: Value =
        serde_json::from_slice(&reply.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let rest_problems: Vec<String> = body["invalid"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["problems"].as_array().unwrap().clone())
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert_eq!(rest_problems, cli_problems);
    assert_eq!(body["ok"], json!(cli_problems.is_empty()));
}
