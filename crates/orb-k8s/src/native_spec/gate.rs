//! Whether a template's native spec is used. Two switches must both be on: the provider's
//! `native_spec_enabled` (default off, the deliberate opt-in) and the application-level
//! `native_spec.enabled` in config.json (default on, shared by every provider).

use std::collections::BTreeMap;

use orb_core::template::Template;
use serde_json::Value;

/// The two switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeSpecSwitches {
    /// `K8sProviderConfig::native_spec_enabled`.
    pub provider_enabled: bool,
    /// config.json `native_spec.enabled` (see [`app_native_spec_enabled`]).
    pub application_enabled: bool,
}

/// What to do with one template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeSpecDecision {
    /// The template has neither `native_spec` nor `native_spec_path`: typed builders.
    NotRequested,
    /// The hatch fires. `warnings` lists template fields that are ignored because of it.
    Use { warnings: Vec<String> },
    /// The template asks for a native spec but a switch is off: the typed builders run and
    /// `reason` ("native_spec is ignored because …") is what `orb templates validate` prints.
    Ignored { reason: String },
}

impl NativeSpecDecision {
    pub fn fires(&self) -> bool {
        matches!(self, Self::Use { .. })
    }
}

/// The one `native_spec.merge_mode` orb implements: the operator's spec deep-merged onto
/// the default (objects recursively, lists replaced, the operator's leaves win).
pub const MERGE_MODE: &str = "merge";

/// Reads config.json's top-level `native_spec.enabled` from the sections orb-core keeps raw
/// (`AppConfig::other`). Absent means enabled, so the provider switch alone decides. A
/// `merge_mode` other than `"merge"` is refused rather than ignored.
pub fn app_native_spec_enabled(app_sections: &BTreeMap<String, Value>) -> Result<bool, String> {
    match app_sections.get("native_spec") {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Object(section)) => {
            match section.get("merge_mode") {
                None | Some(Value::Null) => {}
                Some(Value::String(mode)) if mode == MERGE_MODE => {}
                Some(other) => {
                    return Err(format!(
                        "config.json native_spec.merge_mode {other} is not supported; orb \
                         implements only \"merge\" (the operator's spec deep-merged onto the \
                         default), so set \"merge_mode\": \"merge\" or remove it"
                    ));
                }
            }
            match section.get("enabled") {
                None | Some(Value::Null) => Ok(true),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(format!(
                    "config.json native_spec.enabled must be true or false, got {other}"
                )),
            }
        }
        Some(other) => Err(format!(
            "config.json native_spec must be an object such as {{\"enabled\": true}}, got {other}"
        )),
    }
}

/// Decides whether `template`'s native spec is used.
pub fn decide_native_spec(switches: NativeSpecSwitches, template: &Template) -> NativeSpecDecision {
    let field = match (&template.native_spec, &template.native_spec_path) {
        (None, None) => return NativeSpecDecision::NotRequested,
        (Some(_), _) => "native_spec",
        (None, Some(_)) => "native_spec_path",
    };
    let mut off = Vec::new();
    if !switches.provider_enabled {
        off.push(
            "the k8s provider's native_spec_enabled is false (the default); set \
             \"native_spec_enabled\": true in the provider config or \
             ORB_K8S_NATIVE_SPEC_ENABLED=true",
        );
    }
    if !switches.application_enabled {
        off.push("config.json sets native_spec.enabled=false; set it to true");
    }
    if !off.is_empty() {
        return NativeSpecDecision::Ignored {
            reason: format!(
                "{field} is ignored because {}; the typed builders build this template instead",
                off.join(", and ")
            ),
        };
    }
    let mut warnings = Vec::new();
    if template.native_spec.is_some() && template.native_spec_path.is_some() {
        warnings.push(
            "native_spec_path is ignored because the template also sets an inline \
             native_spec; keep only one of them"
                .to_string(),
        );
    }
    if template.pod_spec_override.is_some() {
        warnings.push(format!(
            "pod_spec_override is ignored because the template uses {field}; put those pod \
             fields in the native spec instead"
        ));
    }
    NativeSpecDecision::Use { warnings }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn template(inline: bool, path: bool, pod_override: bool) -> Template {
        Template {
            template_id: "t".into(),
            native_spec: inline.then(|| json!({"spec": {}})),
            native_spec_path: path.then(|| "spec.yaml".to_string()),
            pod_spec_override: pod_override.then(|| json!({"hostname": "x"})),
            ..Default::default()
        }
    }

    const fn on(provider_enabled: bool, application_enabled: bool) -> NativeSpecSwitches {
        NativeSpecSwitches {
            provider_enabled,
            application_enabled,
        }
    }

    #[rstest]
    #[case::both_on(on(true, true), true)]
    #[case::provider_off(on(false, true), false)]
    #[case::application_off(on(true, false), false)]
    #[case::both_off(on(false, false), false)]
    fn fires_only_when_both_switches_are_on(
        #[case] switches: NativeSpecSwitches,
        #[case] fires: bool,
    ) {
        assert_eq!(
            decide_native_spec(switches, &template(true, false, false)).fires(),
            fires
        );
    }

    #[rstest]
    #[case::provider_off(
        on(false, true),
        "native_spec is ignored because the k8s provider's native_spec_enabled is false (the default); set \"native_spec_enabled\": true in the provider config or ORB_K8S_NATIVE_SPEC_ENABLED=true; the typed builders build this template instead"
    )]
    #[case::application_off(
        on(true, false),
        "native_spec is ignored because config.json sets native_spec.enabled=false; set it to true; the typed builders build this template instead"
    )]
    fn ignored_templates_say_why(#[case] switches: NativeSpecSwitches, #[case] reason: &str) {
        assert_eq!(
            decide_native_spec(switches, &template(true, false, false)),
            NativeSpecDecision::Ignored {
                reason: reason.into()
            }
        );
    }

    #[test]
    fn both_switches_off_name_both() {
        let NativeSpecDecision::Ignored { reason } =
            decide_native_spec(on(false, false), &template(false, true, false))
        else {
            panic!("expected Ignored");
        };
        assert!(
            reason.starts_with("native_spec_path is ignored because"),
            "{reason}"
        );
        assert!(
            reason.contains("native_spec_enabled is false")
                && reason.contains("native_spec.enabled=false"),
            "{reason}"
        );
    }

    #[test]
    fn templates_without_a_native_spec_are_not_affected() {
        assert_eq!(
            decide_native_spec(on(true, true), &template(false, false, true)),
            NativeSpecDecision::NotRequested
        );
    }

    #[test]
    fn fields_shadowed_by_the_native_spec_are_warned_about() {
        let NativeSpecDecision::Use { warnings } =
            decide_native_spec(on(true, true), &template(true, true, true))
        else {
            panic!("expected Use");
        };
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("native_spec_path is ignored"));
        assert!(warnings[1].starts_with("pod_spec_override is ignored"));
    }

    #[rstest]
    #[case::absent(json!({}), Ok(true))]
    #[case::enabled(json!({"native_spec": {"enabled": true, "merge_mode": "merge"}}), Ok(true))]
    #[case::disabled(json!({"native_spec": {"enabled": false}}), Ok(false))]
    #[case::no_enabled_key(json!({"native_spec": {"merge_mode": "merge"}}), Ok(true))]
    #[case::not_a_bool(json!({"native_spec": {"enabled": "yes"}}), Err(()))]
    #[case::not_an_object(json!({"native_spec": true}), Err(()))]
    #[case::unknown_merge_mode(json!({"native_spec": {"enabled": true, "merge_mode": "replace"}}), Err(()))]
    #[case::merge_mode_not_text(json!({"native_spec": {"merge_mode": 1}}), Err(()))]
    fn application_switch_from_config_json(
        #[case] sections: Value,
        #[case] expected: Result<bool, ()>,
    ) {
        let sections: BTreeMap<String, Value> = serde_json::from_value(sections).unwrap();
        assert_eq!(app_native_spec_enabled(&sections).map_err(|_| ()), expected);
    }
}
