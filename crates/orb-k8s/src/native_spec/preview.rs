//! A template's native spec checked without a real request: what `orb templates validate`
//! reports and what `orb templates render` prints. It runs the same gate, rendering and audit
//! as an acquire, with a placeholder request id (or one the caller passes).

use std::path::Path;

use orb_core::ProviderApi;
use orb_core::template::Template;
use serde_json::Value;

use super::{NativeSpecDecision, NativeSpecInput, NativeSpecSwitches, decide_native_spec};
use crate::audit::{AuditMode, enforce_audit_policy};
use crate::config::{K8sProviderConfig, NamingConfig};
use crate::naming::{self, ControllerKind, NamingError};

/// Request id used when the caller has none; its hex digits give stable names.
pub const PREVIEW_REQUEST_ID: &str = "req-00000000-0000-4000-8000-000000000000";

/// The name orb gives the object: the first pod of the request for a Pod, the controller name
/// otherwise.
pub fn object_name(
    api: ProviderApi,
    naming_config: &NamingConfig,
    request_id: &str,
) -> Result<String, NamingError> {
    let controller = match api {
        ProviderApi::Pod => return naming::pod_name(naming_config, request_id, 0),
        ProviderApi::Deployment => ControllerKind::Deployment,
        ProviderApi::StatefulSet => ControllerKind::StatefulSet,
        ProviderApi::Job => ControllerKind::Job,
    };
    naming::controller_name(naming_config, controller, request_id)
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub enum NativeSpecCheck {
    /// The template has no native spec.
    NotRequested,
    /// The template has one, but a switch is off; `reason` says which and how to turn it on.
    Ignored { reason: String },
    /// The body that would be sent, with warnings (ignored fields, audit findings in warn
    /// mode).
    Renders { body: Value, warnings: Vec<String> },
    /// The body cannot be sent: a rendering error or an audit rejection, as one message each.
    Fails {
        problems: Vec<String>,
        warnings: Vec<String>,
    },
}

/// What to check: like [`NativeSpecInput`] without the name, which is derived.
#[derive(Debug, Clone, Copy)]
pub struct PreviewRequest<'a> {
    pub template: &'a Template,
    pub config: &'a K8sProviderConfig,
    pub namespace: &'a str,
    pub count: u32,
    pub config_dir: Option<&'a Path>,
    /// [`PREVIEW_REQUEST_ID`] when `None`.
    pub request_id: Option<&'a str>,
}

/// Checks a template's native spec for `api`.
pub fn check_native_spec(
    switches: NativeSpecSwitches,
    api: ProviderApi,
    preview: &PreviewRequest<'_>,
) -> NativeSpecCheck {
    let PreviewRequest {
        template,
        config,
        namespace,
        count,
        config_dir,
        request_id,
    } = *preview;
    let mut warnings = match decide_native_spec(switches, template) {
        NativeSpecDecision::NotRequested => return NativeSpecCheck::NotRequested,
        NativeSpecDecision::Ignored { reason } => return NativeSpecCheck::Ignored { reason },
        NativeSpecDecision::Use { warnings } => warnings,
    };
    let request_id = request_id.unwrap_or(PREVIEW_REQUEST_ID);
    let name = match object_name(api, &config.naming, request_id) {
        Ok(name) => name,
        Err(e) => {
            return NativeSpecCheck::Fails {
                problems: vec![e.to_string()],
                warnings,
            };
        }
    };
    let input = NativeSpecInput {
        template,
        config,
        request_id,
        name: &name,
        namespace,
        count,
        config_dir,
    };
    let body = match super::render_native_body(api, &input) {
        Ok(body) => body,
        Err(e) => {
            return NativeSpecCheck::Fails {
                problems: vec![e.to_string()],
                warnings,
            };
        }
    };
    match enforce_audit_policy(AuditMode::from_config(config), &body) {
        Ok(findings) => {
            warnings.extend(findings.iter().map(|f| format!("high-risk pod field: {f}")));
            NativeSpecCheck::Renders { body, warnings }
        }
        Err(rejection) => NativeSpecCheck::Fails {
            problems: vec![rejection.to_string()],
            warnings,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ON: NativeSpecSwitches = NativeSpecSwitches {
        provider_enabled: true,
        application_enabled: true,
    };

    fn template(native_spec: Value) -> Template {
        Template {
            template_id: "t".into(),
            container_image: Some("busybox:1.36".into()),
            native_spec: Some(native_spec),
            ..Default::default()
        }
    }

    fn check(
        switches: NativeSpecSwitches,
        t: &Template,
        cfg: &K8sProviderConfig,
    ) -> NativeSpecCheck {
        let preview = PreviewRequest {
            template: t,
            config: cfg,
            namespace: "orb",
            count: 2,
            config_dir: None,
            request_id: None,
        };
        check_native_spec(switches, ProviderApi::Deployment, &preview)
    }

    #[test]
    fn renders_with_placeholder_names() {
        let cfg = K8sProviderConfig::default();
        let NativeSpecCheck::Renders { body, warnings } = check(ON, &template(json!({})), &cfg)
        else {
            panic!("expected a body");
        };
        assert_eq!(body["metadata"]["name"], "orb-00000000000040008000");
        assert_eq!(
            body["metadata"]["labels"]["orb.io/request-id"],
            PREVIEW_REQUEST_ID
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn ignored_when_a_switch_is_off() {
        let cfg = K8sProviderConfig::default();
        let off = NativeSpecSwitches {
            provider_enabled: false,
            ..ON
        };
        assert!(matches!(
            check(off, &template(json!({})), &cfg),
            NativeSpecCheck::Ignored { reason } if reason.starts_with("native_spec is ignored because")
        ));
    }

    #[test]
    fn jinja_errors_and_audit_rejections_are_problems_and_warn_mode_warns() {
        let cfg = K8sProviderConfig::default();
        let NativeSpecCheck::Fails { problems, .. } = check(
            ON,
            &template(json!({"spec": {"paused": "{{ nope }}"}})),
            &cfg,
        ) else {
            panic!("expected a failure");
        };
        assert!(problems[0].contains("Jinja error"), "{problems:?}");

        let risky = template(json!({"spec": {"template": {"spec": {"hostNetwork": true}}}}));
        let NativeSpecCheck::Fails { problems, .. } = check(ON, &risky, &cfg) else {
            panic!("expected a rejection");
        };
        assert!(
            problems[0].contains("spec.template.spec.hostNetwork"),
            "{problems:?}"
        );

        let warn = K8sProviderConfig {
            reject_high_risk_pod_fields: false,
            ..K8sProviderConfig::default()
        };
        let NativeSpecCheck::Renders { warnings, .. } = check(ON, &risky, &warn) else {
            panic!("expected a body");
        };
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("high-risk pod field: spec.template.spec.hostNetwork"));
    }
}
