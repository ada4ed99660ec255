//! Provider config layering: defaults < config.json provider block < `ORB_K8S_*` env <
//! per-template overrides. The input is a JSON envelope:
//!
//! ```json
//! {"file": <provider config block, any JSON>,
//!  "env": {"ORB_K8S_NAMESPACE": "hpc", ...},
//!  "template": {"template_id": "t1", "values": <overrides, any JSON>}}
//! ```
//!
//! Invariant: resolving never panics; a bad layer is a `ConfigErrors` value with at least one
//! issue. A config that resolves is used the way the provider uses it (durations, namespace
//! scope, pod defaults, `orb config show`), and none of that may panic either.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use orb_k8s::config::{
    ConfigLayers, OutputFormat, PodPlacement, ResolvedConfig, TemplateOverrides,
    apply_pod_defaults, layer_from_config_value, render_effective,
};
use serde_json::{Map, Value};

const ENV_PREFIX: &str = "ORB_K8S_";

fn env_pairs(env: Option<&Value>) -> Vec<(String, String)> {
    let Some(Value::Object(map)) = env else {
        return Vec::new();
    };
    map.iter()
        .map(|(key, value)| {
            // Unprefixed keys are dropped by ConfigLayers::new; prefix them so the fuzzer's
            // mutations reach the env parser instead of the filter.
            let key = if key.to_ascii_uppercase().starts_with(ENV_PREFIX) {
                key.clone()
            } else {
                format!("{ENV_PREFIX}{key}")
            };
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (key, value)
        })
        .collect()
}

fn overrides(template: Option<&Value>) -> Option<TemplateOverrides> {
    let template = template?.as_object()?;
    let values = match template.get("values") {
        Some(Value::Object(values)) => values.clone(),
        _ => Map::new(),
    };
    Some(TemplateOverrides {
        template_id: template
            .get("template_id")
            .and_then(Value::as_str)
            .unwrap_or("fuzz")
            .to_string(),
        values,
    })
}

fn exercise(resolved: &ResolvedConfig) {
    let cfg = &resolved.config;
    let _ = cfg.pod_timeout();
    let _ = cfg.stale_cache_timeout();
    let _ = cfg.orphan_gc_interval();
    let _ = cfg.orphan_min_age();
    let _ = cfg.periodic_resync_interval();
    let _ = cfg.controller_status_cache_ttl();
    let _ = cfg.circuit_breaker_reset();
    let _ = cfg.retry_base();
    let _ = cfg.retry_cap();
    assert!(
        cfg.min_server_version().is_ok(),
        "a resolved config has a parseable min_kubernetes_version"
    );
    let scope = cfg.namespace_scope("default");
    for namespace in ["default", "team-a", "Bad_Name"] {
        let _ = scope.allows(namespace);
        let _ = scope.check_target(namespace);
    }
    let _ = cfg.default_namespace("default");
    let placed = apply_pod_defaults(cfg, &PodPlacement::default());
    let _ = placed.image_pull_secret_refs();
    for format in [OutputFormat::Table, OutputFormat::Json, OutputFormat::Yaml] {
        for with_origin in [false, true] {
            let _ = render_effective(resolved, format, with_origin);
        }
    }
    for (path, _) in resolved.origins.iter().take(4) {
        let _ = resolved.origin_of(path);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(envelope)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let file = match envelope.get("file") {
        None => None,
        Some(block) => match layer_from_config_value(Path::new("/etc/orb/config.json"), block) {
            Ok(layer) => Some(layer),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return;
            }
        },
    };
    let layers = ConfigLayers::new(file, env_pairs(envelope.get("env")));
    let overrides = overrides(envelope.get("template"));
    let provider = layers.resolve(None);
    match &provider {
        Ok(resolved) => exercise(resolved),
        Err(errors) => assert!(!errors.issues.is_empty(), "an error names its problems"),
    }
    if let Some(overrides) = &overrides {
        match layers.resolve(Some(overrides)) {
            Ok(resolved) => {
                exercise(&resolved);
                // Re-deriving from the provider config gives the same answer.
                if let Ok(provider) = &provider {
                    assert_eq!(provider.for_template(overrides).ok(), Some(resolved));
                }
            }
            Err(errors) => assert!(!errors.issues.is_empty(), "an error names its problems"),
        }
    }
});
