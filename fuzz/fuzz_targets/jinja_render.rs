//! Native-spec Jinja under its bounds: the input is the source of one rendering (the first
//! byte picks whole-text rendering, as a spec file or default template gets, or one inline
//! string, which keeps an expression's type). It renders on the provider's render thread
//! ([`run_with_timeout`]) with small limits, against a context shaped like the real one (where
//! `namespace` is a string, as it is for every real rendering).
//!
//! Invariants: nothing panics or aborts (a stack overflow would take `orb serve` down); every
//! rendering ends well within its time limit, so fuel bounds the work (a fuel hole shows up as
//! a timeout here, and as a memory blow-up under `-rss_limit_mb`); accepted output is within
//! the output cap; a refusal by a limit names one of the three settings.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use orb_k8s::native_spec::{JinjaFailure, RenderLimits, SpecRenderer, run_with_timeout};
use serde_json::{Value, json};

const LIMITS: RenderLimits = RenderLimits {
    fuel: 200_000,
    max_bytes: 256 * 1024,
    timeout: Duration::from_secs(5),
};

const SETTINGS: [&str; 3] = [
    "native_spec_render_fuel",
    "native_spec_render_max_bytes",
    "native_spec_render_timeout_ms",
];

fn context() -> Value {
    json!({
        "name": "orb-fe4cda5c019444bc981b", "namespace": "orb",
        "request_id": "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f", "template_id": "t",
        "replicas": 3, "requested_count": 3, "image": "busybox:1.36",
        "labels": {"orb.io/managed": "true", "app": "solver"},
        "env": {"MODE": "batch"}, "command": ["sh", "-c"], "args": ["sleep 3600"],
        "resources": {"requests": {"cpu": "500m"}}, "tolerations": [], "none": null,
    })
}

fn size(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.len())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let source = String::from_utf8_lossy(rest).into_owned();
    let started = Instant::now();
    let rendered = run_with_timeout(LIMITS.timeout, move || {
        let renderer = SpecRenderer::with_limits(LIMITS);
        if mode % 2 == 0 {
            renderer
                .render_text("fuzz", &source, &context())
                .map(|t| t.len())
        } else {
            renderer.render_leaf(&source, &context()).map(|v| size(&v))
        }
    })
    .unwrap_or_else(|| panic!("a rendering ran past {:?}", LIMITS.timeout));
    assert!(started.elapsed() < LIMITS.timeout);
    match rendered {
        Ok(len) => assert!(len <= LIMITS.max_bytes + 64, "{len} bytes came out"),
        Err(JinjaFailure {
            limit: Some(hit), ..
        }) => assert!(SETTINGS.contains(&hit.setting), "{hit:?}"),
        Err(failure) => assert!(!failure.message.is_empty(), "{failure:?}"),
    }
});
