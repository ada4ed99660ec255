//! Native-spec render + merge + audit. The input is a JSON envelope, every part optional:
//!
//! ```json
//! {"template": {<template, HostFactory or internal spelling>},
//!  "default": "<Jinja text replacing the built-in default spec>",
//!  "operator_file": "<Jinja text of a native_spec_path file>",
//!  "count": 3,
//!  "base": <any>, "overlay": <any>,
//!  "pod_spec": <any>, "override": <any>,
//!  "body": <any>}
//! ```
//!
//! The template drives `render_native_body_from` (no file IO: the sources are built here);
//! the loose values drive `deep_merge` (both list rules), `apply_pod_spec_override` and the
//! high-risk field audit. Invariant: nothing panics; failures are `NativeSpecError` /
//! `PodSpecOverrideError` values.
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use orb_core::ProviderApi;
use orb_core::template::wire::template_from_value;
use orb_k8s::audit::{
    AuditMode, AuditPolicy, PodSecurityProfile, audit_pod_spec, audit_workload_body,
    enforce_audit_policy,
};
use orb_k8s::config::K8sProviderConfig;
use orb_k8s::native_spec::{
    ListMerge, NativeSources, NativeSpecInput, NativeSpecSwitches, OperatorSpec, SpecSource,
    apply_pod_spec_override, builtin_default_spec, decide_native_spec, deep_merge,
    load_operator_spec, render_native_body_from,
};
use serde_json::{Map, Value};

const REQUEST_ID: &str = "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f";

const PROFILES: [PodSecurityProfile; 2] =
    [PodSecurityProfile::Baseline, PodSecurityProfile::Restricted];

fn audit_everything(body: &Value) {
    for profile in PROFILES {
        let policy = AuditPolicy {
            profile,
            ..AuditMode::Reject.into()
        };
        for finding in audit_workload_body(body, &policy) {
            assert!(!finding.to_string().is_empty());
        }
    }
    for mode in [AuditMode::Warn, AuditMode::Reject] {
        if let Err(rejection) = enforce_audit_policy(mode, body) {
            assert!(
                !rejection.findings.is_empty(),
                "a rejection lists its findings"
            );
        }
    }
}

fn merges(envelope: &Map<String, Value>) {
    if let (Some(base), Some(overlay)) = (envelope.get("base"), envelope.get("overlay")) {
        for lists in [ListMerge::Replace, ListMerge::ByKey] {
            let mut merged = base.clone();
            deep_merge(&mut merged, overlay.clone(), lists);
            audit_everything(&merged);
        }
    }
    if let (Some(pod_spec), Some(overlay)) = (envelope.get("pod_spec"), envelope.get("override")) {
        for api in ProviderApi::ALL {
            if let Ok(spec) = apply_pod_spec_override(api, pod_spec, overlay) {
                for profile in PROFILES {
                    let _ = audit_pod_spec(&spec, "spec", profile);
                }
            }
        }
    }
    if let Some(body) = envelope.get("body") {
        audit_everything(body);
    }
}

fn render(envelope: &Map<String, Value>) {
    let Some(raw) = envelope.get("template") else {
        return;
    };
    let Ok(normalized) = template_from_value(raw, None, "fuzz") else {
        return;
    };
    let mut template = normalized.template;
    // No file IO in the fuzzer: a native_spec_path is replaced by `operator_file`.
    template.native_spec_path = None;
    let api = template.api();
    let _ = decide_native_spec(
        NativeSpecSwitches {
            application_enabled: true,
            provider_enabled: true,
        },
        &template,
    );
    let operator = match envelope.get("operator_file").and_then(Value::as_str) {
        Some(text) if template.native_spec.is_none() => Some(OperatorSpec::File {
            path: PathBuf::from("/etc/orb/specs/fuzz.yaml"),
            text: text.to_string(),
        }),
        _ => match load_operator_spec(&template, None) {
            Ok(operator) => operator,
            Err(_) => return,
        },
    };
    let default_spec = match envelope.get("default").and_then(Value::as_str) {
        Some(text) => SpecSource {
            label: "/etc/orb/config/specs/fuzz/default.json".into(),
            text: text.to_string(),
        },
        None => SpecSource {
            label: "built-in default".into(),
            text: builtin_default_spec(api).to_string(),
        },
    };
    let sources = NativeSources {
        default_spec,
        operator,
    };
    let count = envelope
        .get("count")
        .and_then(Value::as_u64)
        .map_or(3, |n| n.min(u64::from(u32::MAX)) as u32);
    let config = K8sProviderConfig::default();
    let name = match api {
        ProviderApi::Pod => "orb-fe4cda5c019444bc981b-0000",
        _ => "orb-fe4cda5c019444bc981b",
    };
    let input = NativeSpecInput {
        template: &template,
        config: &config,
        request_id: REQUEST_ID,
        name,
        namespace: "orb",
        count,
        config_dir: None,
    };
    match render_native_body_from(api, &input, &sources) {
        Ok(body) => {
            assert!(body.is_object(), "a rendered body is an object");
            audit_everything(&body);
            if let Some(overlay) = &template.pod_spec_override {
                let pod_spec = match api {
                    ProviderApi::Pod => body.get("spec"),
                    _ => body.pointer("/spec/template/spec"),
                };
                if let Some(pod_spec) = pod_spec {
                    let _ = apply_pod_spec_override(api, pod_spec, overlay);
                }
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(envelope)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    merges(&envelope);
    render(&envelope);
});
