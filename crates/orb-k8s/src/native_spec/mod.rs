//! The native spec escape hatch (seed 002): a template may carry a whole Kubernetes body
//! (inline `native_spec`, or a JSON/YAML file by `native_spec_path`). When both switches are
//! on ([`decide_native_spec`]), orb renders the per-API default template
//! (`specs/<api>/default.json`), renders the operator's spec against the same context,
//! deep-merges it on top (objects recursively, lists replaced, operator's leaves win), then
//! stamps its identity so the object stays discoverable. The caller runs the security audit
//! ([`crate::audit`]) on the result before sending it. Also here: `pod_spec_override` for the
//! typed path. docs/native-spec.md is the user-facing description.
//!
//! ```no_run
//! # fn demo(t: &orb_core::template::Template, cfg: &orb_k8s::config::K8sProviderConfig)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use orb_k8s::native_spec::{NativeSpecInput, render_native_body};
//! use orb_core::ProviderApi;
//! let input = NativeSpecInput {
//!     template: t,
//!     config: cfg,
//!     request_id: "req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f",
//!     name: "orb-fe4cda5c019444bc981b",
//!     namespace: "orb",
//!     count: 3,
//!     config_dir: Some("/etc/orb/config".as_ref()),
//! };
//! let body = render_native_body(ProviderApi::Deployment, &input)?;
//! orb_k8s::audit::enforce_audit_policy(orb_k8s::audit::AuditMode::from_config(cfg), &body)?;
//! # Ok(()) }
//! ```

mod branching;
pub mod context;
pub mod defaults;
mod gate;
mod identity;
mod jinja;
pub mod merge;
mod normalize;
mod pod_override;
mod preview;
pub mod source;

#[cfg(test)]
mod tests_render;
#[cfg(test)]
mod tests_seed_examples;

use std::path::Path;

use orb_core::ProviderApi;
use orb_core::template::Template;
use serde_json::Value;

use crate::config::K8sProviderConfig;
use crate::labels::LabelError;

pub use branching::request_id_branches;
pub use context::{WorkloadIdentity, build_context, workload_identity};
pub use defaults::{SpecSource, builtin_default_spec, load_default_spec, spec_dir_name};
pub use gate::{
    NativeSpecDecision, NativeSpecSwitches, app_native_spec_enabled, decide_native_spec,
};
pub use identity::{api_version_and_kind, stamp_identity};
pub use jinja::{JinjaFailure, LimitHit, RenderLimits, SpecRenderer, run_with_timeout};
pub use merge::{ListMerge, deep_merge};
pub use pod_override::{PodSpecOverrideError, apply_pod_spec_override};
pub use preview::{object_name, preview_request_id};
pub use source::{OperatorSpec, load_operator_spec, render_operator_spec};

/// Everything one rendering needs besides the API.
#[derive(Debug, Clone, Copy)]
pub struct NativeSpecInput<'a> {
    pub template: &'a Template,
    /// The resolved provider config (label prefix, legacy labels, pod defaults).
    pub config: &'a K8sProviderConfig,
    pub request_id: &'a str,
    /// `metadata.name`: the pod name for a Pod (also its machine id), the controller name
    /// otherwise (see [`crate::naming`]).
    pub name: &'a str,
    /// Target namespace, already checked against the provider's namespace scope.
    pub namespace: &'a str,
    /// Machines requested: Deployment/StatefulSet replicas, Job parallelism and completions.
    /// A Pod body is one machine; pass the request's count.
    pub count: u32,
    /// The config directory: `<config_dir>/specs/<api>/default.json` overrides a built-in
    /// default, and a relative `native_spec_path` resolves under it (the working directory
    /// when `None`).
    pub config_dir: Option<&'a Path>,
}

/// The sources of one template, read once; a Pod request renders them once per pod.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeSources {
    pub default_spec: SpecSource,
    /// `None` when the template has neither `native_spec` nor `native_spec_path` (the body
    /// is then the rendered default alone).
    pub operator: Option<OperatorSpec>,
}

fn line_text(line: &Option<usize>) -> String {
    line.map_or_else(String::new, |l| format!(", line {l}"))
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NativeSpecError {
    #[error(
        "template {template_id:?}: Jinja error in {origin}{}: {message}; {fix}",
        line_text(.line)
    )]
    Jinja {
        template_id: String,
        /// The file, `built-in specs/<api>/default.json`, or `inline native_spec at <JSON
        /// path of the failing string>`.
        origin: String,
        line: Option<usize>,
        message: String,
        fix: &'static str,
    },
    #[error(
        "template {template_id:?}: rendering {origin} was stopped: {what} ({setting}); make \
         the template do less work (fewer or smaller loops, shorter strings) or raise {setting} \
         in the provider config (env ORB_K8S_{})",
        setting.to_ascii_uppercase()
    )]
    RenderLimit {
        template_id: String,
        origin: String,
        what: String,
        setting: &'static str,
    },
    #[error(
        "template {template_id:?}: {origin}{} did not render to valid JSON/YAML: {message}; \
         check quoting around {{{{ … }}}} (strings need quotes, or use `| tojson`)",
        line_text(.line)
    )]
    Parse {
        template_id: String,
        origin: String,
        line: Option<usize>,
        message: String,
    },
    #[error(
        "template {template_id:?}: {origin} must render to an object (a Kubernetes body such \
         as {{\"spec\": {{…}}}}), got {found}"
    )]
    NotAnObject {
        template_id: String,
        origin: String,
        found: &'static str,
    },
    #[error(
        "template {template_id:?}: native spec field {path} must be an object, got {found}; \
         fix the native spec"
    )]
    WrongShape {
        template_id: String,
        path: String,
        found: &'static str,
    },
    #[error(
        "template {template_id:?}: the native spec sets {field} to {found}, but provider_api \
         {api} creates {expected}; remove {field} from the native spec or change provider_api"
    )]
    WrongKind {
        template_id: String,
        api: ProviderApi,
        field: String,
        expected: String,
        found: String,
    },
    #[error(
        "template {template_id:?}: native_spec_path {path:?} is outside the config directory \
         {base}; put the spec file below {base} and name it relative to it (neither '..' nor \
         a symlink may lead out)"
    )]
    PathEscapes {
        template_id: String,
        path: String,
        base: String,
    },
    #[error(
        "template {template_id:?}: native_spec_path {path} cannot be read: {message}; check \
         the path (relative paths are resolved under the config directory)"
    )]
    ReadSpecFile {
        template_id: String,
        path: String,
        message: String,
    },
    #[error(
        "default spec override {path} cannot be read: {message}; fix its permissions or \
         remove it to use the built-in default"
    )]
    ReadDefault { path: String, message: String },
    #[error("{0}")]
    Invariant(Box<InvariantBreach>),
    #[error("template {template_id:?}: {field} is invalid for a native spec: {message}")]
    InvalidTemplateField {
        template_id: String,
        field: &'static str,
        message: String,
    },
    #[error("template {template_id:?}: {source}")]
    Label {
        template_id: String,
        source: Box<LabelError>,
    },
}

/// A merged native body that changes one of the typed builders' guard-rails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "template {template_id:?}: the native spec sets {path} to {found}, but a {api} request \
     needs {expected} there: {why}; remove {path} from the native spec (or the default spec \
     override)"
)]
pub struct InvariantBreach {
    pub template_id: String,
    pub api: ProviderApi,
    /// JSON path of the field, e.g. `spec.parallelism`.
    pub path: String,
    pub found: String,
    pub expected: String,
    pub why: &'static str,
}

impl NativeSpecError {
    pub(crate) fn jinja(
        template_id: &str,
        origin: &str,
        at: Option<&str>,
        failure: JinjaFailure,
    ) -> Self {
        let origin = match at {
            Some(path) if !path.is_empty() => format!("{origin} at {path}"),
            _ => origin.to_string(),
        };
        if let Some(LimitHit { what, setting }) = failure.limit {
            return Self::RenderLimit {
                template_id: template_id.to_string(),
                origin,
                what,
                setting,
            };
        }
        Self::Jinja {
            template_id: template_id.to_string(),
            origin,
            line: failure.line,
            message: failure.message,
            fix: failure.fix,
        }
    }
}

/// Reads the default template (config dir override or built-in) and the operator's spec.
pub fn load_native_sources(
    api: ProviderApi,
    input: &NativeSpecInput<'_>,
) -> Result<NativeSources, NativeSpecError> {
    Ok(NativeSources {
        default_spec: load_default_spec(api, input.config_dir)?,
        operator: load_operator_spec(input.template, input.config_dir)?,
    })
}

/// Renders, merges and stamps one body from already-loaded sources, on a thread of its own
/// within the provider's `native_spec_render_timeout_ms` (see [`RenderLimits`]).
pub fn render_native_body_from(
    api: ProviderApi,
    input: &NativeSpecInput<'_>,
    sources: &NativeSources,
) -> Result<Value, NativeSpecError> {
    let limits = RenderLimits::from_config(input.config);
    let owned = OwnedInput::of(input);
    let sources = sources.clone();
    let rendered = run_with_timeout(limits.timeout, move || {
        render_body_within(api, &owned.input(), &sources, limits)
    });
    rendered.unwrap_or_else(|| {
        Err(NativeSpecError::RenderLimit {
            template_id: input.template.template_id.clone(),
            origin: "the native spec".into(),
            what: format!("it did not finish within {} ms", limits.timeout.as_millis()),
            setting: "native_spec_render_timeout_ms",
        })
    })
}

/// [`NativeSpecInput`] with its own copies, for the rendering thread.
struct OwnedInput {
    template: Template,
    config: K8sProviderConfig,
    request_id: String,
    name: String,
    namespace: String,
    count: u32,
    config_dir: Option<std::path::PathBuf>,
}

impl OwnedInput {
    fn of(input: &NativeSpecInput<'_>) -> Self {
        Self {
            template: input.template.clone(),
            config: input.config.clone(),
            request_id: input.request_id.to_string(),
            name: input.name.to_string(),
            namespace: input.namespace.to_string(),
            count: input.count,
            config_dir: input.config_dir.map(Path::to_path_buf),
        }
    }

    fn input(&self) -> NativeSpecInput<'_> {
        NativeSpecInput {
            template: &self.template,
            config: &self.config,
            request_id: &self.request_id,
            name: &self.name,
            namespace: &self.namespace,
            count: self.count,
            config_dir: self.config_dir.as_deref(),
        }
    }
}

/// Renders, merges and stamps one body, on the caller's thread. Pure.
fn render_body_within(
    api: ProviderApi,
    input: &NativeSpecInput<'_>,
    sources: &NativeSources,
    limits: RenderLimits,
) -> Result<Value, NativeSpecError> {
    let template_id = input.template.template_id.as_str();
    let identity = workload_identity(api, input)?;
    let context = build_context(input, &identity)?;
    let renderer = SpecRenderer::with_limits(limits);

    let default = &sources.default_spec;
    let text = renderer
        .render_text(&default.label, &default.text, &context)
        .map_err(|f| NativeSpecError::jinja(template_id, &default.label, None, f))?;
    let mut body = source::parse_rendered(template_id, &default.label, &text, true)?;
    if !body.is_object() {
        return Err(NativeSpecError::NotAnObject {
            template_id: template_id.to_string(),
            origin: default.label.clone(),
            found: source::kind_name(&body),
        });
    }
    if let Some(operator) = &sources.operator {
        let overlay = render_operator_spec(&renderer, template_id, operator, &context)?;
        deep_merge(&mut body, overlay, ListMerge::Replace);
    }
    normalize::normalize_int_or_percent(&mut body);
    identity::check_invariants(&body, &identity, template_id)?;
    stamp_identity(&mut body, &identity, template_id)?;
    Ok(body)
}

/// The whole pipeline for one object: load, render, merge, stamp. Call it only when
/// [`decide_native_spec`] says [`NativeSpecDecision::Use`], and audit the result.
pub fn render_native_body(
    api: ProviderApi,
    input: &NativeSpecInput<'_>,
) -> Result<Value, NativeSpecError> {
    let sources = load_native_sources(api, input)?;
    render_native_body_from(api, input, &sources)
}
