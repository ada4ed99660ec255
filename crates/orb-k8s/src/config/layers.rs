//! The three sources (file block < `ORB_K8S_*` env < template overrides) flattened into
//! ordered leaf assignments, each remembering its origin. Unknown keys are reported here with
//! the nearest valid key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::coerce::Raw;
use super::issues::{ConfigIssue, ConfigWarning, FieldOrigin, Origin};
use super::schema::{self, ENV_PREFIX, FieldKind, FieldSpec};

/// The provider block of a `config.json` (see [`super::file::read_provider_block`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FileLayer {
    pub path: PathBuf,
    pub block: Map<String, Value>,
}

/// Per-template overrides: a closed subset of the file block's keys
/// ([`super::template_keys::PER_TEMPLATE_KEYS`]), scoped to one template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateOverrides {
    pub template_id: String,
    pub values: Map<String, Value>,
}

/// Where a leaf assignment writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    Field(&'static FieldSpec),
    /// One key of a [`FieldKind::StringMap`] field.
    MapEntry(&'static FieldSpec, String),
}

impl Target {
    pub(crate) fn path(&self) -> String {
        match self {
            Self::Field(spec) => spec.path.to_string(),
            Self::MapEntry(spec, key) => format!("{}.{key}", spec.path),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Assignment {
    pub target: Target,
    pub raw: Raw,
    pub origin: Origin,
}

/// Assignments of one source, plus the unknown keys it contained.
#[derive(Debug, Default)]
pub(crate) struct Flattened {
    pub assignments: Vec<Assignment>,
    pub issues: Vec<ConfigIssue>,
    pub warnings: Vec<ConfigWarning>,
}

fn unknown_key_issue(path: &str, parent: Option<&str>, origin: &Origin) -> ConfigIssue {
    let key = path.rsplit('.').next().unwrap_or(path);
    let suggestion = schema::closest(key, schema::keys_under(parent))
        .map(|k| match parent {
            Some(p) => format!("the closest valid key is '{p}.{k}'"),
            None => format!("the closest valid key is '{k}'"),
        })
        .unwrap_or_else(|| "remove it".to_string());
    ConfigIssue::new(
        path,
        origin.clone(),
        format!("unknown key '{path}'"),
        format!("{suggestion}; every key is listed in docs/configuration.md"),
    )
}

fn legacy_warning(legacy: &str, canonical: &str, origin: &Origin, ignored: bool) -> ConfigWarning {
    let message = if ignored {
        format!(
            "legacy key '{legacy}' is ignored because '{canonical}' is also set; remove '{legacy}'"
        )
    } else {
        format!("'{legacy}' is a legacy name; rename it to '{canonical}'")
    };
    ConfigWarning {
        fields: vec![FieldOrigin {
            field: legacy.to_string(),
            origin: origin.clone(),
        }],
        message,
    }
}

/// Flattens a JSON object (file block, template overrides, or a JSON env value for `naming`).
/// Legacy top-level keys are applied before everything else, so the canonical key wins when
/// both are present.
pub(crate) fn flatten_object(
    object: &Map<String, Value>,
    parent: Option<&str>,
    origin: &Origin,
    out: &mut Flattened,
) {
    if parent.is_none() {
        for (legacy, canonical) in schema::LEGACY_KEYS {
            let (Some(value), Some(spec)) = (object.get(*legacy), schema::field_spec(canonical))
            else {
                continue;
            };
            let shadowed = object.contains_key(*canonical);
            out.warnings
                .push(legacy_warning(legacy, canonical, origin, shadowed));
            if !shadowed {
                out.assignments.push(Assignment {
                    target: Target::Field(spec),
                    raw: Raw::Json(value.clone()),
                    origin: origin.clone(),
                });
            }
        }
    }
    for (key, value) in object {
        if parent.is_none() && schema::canonical_for_legacy(key).is_some() {
            continue;
        }
        let path = match parent {
            Some(p) => format!("{p}.{key}"),
            None => key.clone(),
        };
        if parent.is_none() && schema::is_container(&path) {
            match value {
                Value::Object(inner) => flatten_object(inner, Some(&path), origin, out),
                other => out.issues.push(ConfigIssue::new(
                    path.clone(),
                    origin.clone(),
                    format!("{other} is not an object"),
                    format!("write '{path}' as an object, for example {{\"prefix\": \"orb\"}}"),
                )),
            }
            continue;
        }
        let Some(spec) = schema::field_spec(&path) else {
            out.issues.push(unknown_key_issue(&path, parent, origin));
            continue;
        };
        match (spec.kind, value) {
            (FieldKind::StringMap, Value::Object(entries)) if !entries.is_empty() => {
                for (entry_key, entry_value) in entries {
                    out.assignments.push(Assignment {
                        target: Target::MapEntry(spec, entry_key.clone()),
                        raw: Raw::Json(entry_value.clone()),
                        origin: origin.clone(),
                    });
                }
            }
            _ => out.assignments.push(Assignment {
                target: Target::Field(spec),
                raw: Raw::Json(value.clone()),
                origin: origin.clone(),
            }),
        }
    }
}

pub(crate) fn flatten_file(file: &FileLayer) -> Flattened {
    let mut out = Flattened::default();
    flatten_object(&file.block, None, &Origin::file(&file.path), &mut out);
    out
}

/// A template's overrides: keys on the closed per-template list are applied like file keys;
/// any other provider key is refused (see [`super::template_keys`]) and not applied.
pub(crate) fn flatten_template(template: &TemplateOverrides) -> Flattened {
    let mut out = Flattened::default();
    let origin = Origin::template(&template.template_id);
    let refused =
        super::template_keys::refused_template_keys(&template.template_id, &template.values);
    let allowed: Map<String, Value> = template
        .values
        .iter()
        .filter(|(key, _)| !refused.iter().any(|issue| issue.fields[0].field == **key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    out.issues.extend(refused);
    flatten_object(&allowed, None, &origin, &mut out);
    out
}

/// An `ORB_K8S_*` variable that is no setting: refused, unless Kubernetes put it there as a
/// service link of a Service named `orb-k8s…` (it does so in every pod of the namespace).
fn refuse_unknown_env(var: &str, out: &mut Flattened) {
    if schema::is_service_link(var) {
        tracing::debug!(
            var,
            "ignoring a Kubernetes service-link variable; it is no setting"
        );
    } else {
        out.issues.push(env_unknown_issue(var));
    }
}

fn env_unknown_issue(var: &str) -> ConfigIssue {
    let mut candidates: Vec<String> = schema::FIELDS.iter().map(FieldSpec::env_var).collect();
    candidates.extend(
        schema::FIELDS
            .iter()
            .filter(|f| f.kind == FieldKind::StringMap)
            .map(|f| format!("{}__<KEY>", f.env_var())),
    );
    let upper = var.to_ascii_uppercase();
    let nearest = schema::closest(&upper, candidates.iter().map(String::as_str))
        .unwrap_or(ENV_PREFIX)
        .to_string();
    // The value is deliberately not echoed: an unknown variable may hold a credential.
    ConfigIssue::new(
        var,
        Origin::env(var),
        format!("unknown environment variable {var}"),
        format!(
            "the closest valid variable is {nearest}; unset {var} if it is not meant for the \
             Kubernetes provider (every variable is listed in docs/configuration.md)"
        ),
    )
}

/// Flattens the `ORB_K8S_*` variables of `env` (other variables are ignored). The prefix is
/// matched case-insensitively; `__` separates nesting levels. Variables are applied in name
/// order, and setting the same leaf twice (e.g. `ORB_K8S_NAMING` JSON and
/// `ORB_K8S_NAMING__PREFIX`) is an error rather than a silent pick.
pub(crate) fn flatten_env(env: &BTreeMap<String, String>) -> Flattened {
    let mut out = Flattened::default();
    for (var, text) in env {
        let upper = var.to_ascii_uppercase();
        let Some(rest) = upper.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let origin = Origin::env(var);
        if let Some((_, why)) = schema::IGNORED_ENV_VARS
            .iter()
            .find(|(name, _)| *name == upper)
        {
            out.warnings.push(ConfigWarning {
                fields: vec![FieldOrigin {
                    field: var.clone(),
                    origin,
                }],
                message: format!("{var} has no effect: {why}"),
            });
            continue;
        }
        let segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if let [legacy] = segments.as_slice()
            && let Some(spec) = schema::canonical_for_legacy(legacy).and_then(schema::field_spec)
        {
            out.warnings.push(ConfigWarning {
                fields: vec![FieldOrigin {
                    field: spec.path.to_string(),
                    origin: origin.clone(),
                }],
                message: format!("{var} is a legacy name; rename it to {}", spec.env_var()),
            });
            out.assignments.push(Assignment {
                target: Target::Field(spec),
                raw: Raw::Text(text.clone()),
                origin,
            });
            continue;
        }
        match segments.as_slice() {
            [container] if schema::is_container(container) => {
                match serde_json::from_str::<Value>(text.trim()) {
                    Ok(Value::Object(object)) => {
                        flatten_object(&object, Some(container), &origin, &mut out)
                    }
                    _ => out.issues.push(ConfigIssue::new(
                        container.clone(),
                        origin,
                        format!("{text:?} is not a JSON object"),
                        format!(
                            "write JSON such as '{{\"prefix\":\"my-orb\"}}', or set single \
                             fields with {var}__<FIELD>"
                        ),
                    )),
                }
            }
            [name] => match schema::field_spec(name) {
                Some(spec) if spec.kind == FieldKind::StringMap => {
                    match serde_json::from_str::<Value>(text.trim()) {
                        Ok(Value::Object(object)) => {
                            let block = Map::from_iter([(name.clone(), Value::Object(object))]);
                            flatten_object(&block, None, &origin, &mut out);
                        }
                        _ => out.assignments.push(Assignment {
                            target: Target::Field(spec),
                            raw: Raw::Text(text.clone()),
                            origin,
                        }),
                    }
                }
                Some(spec) => out.assignments.push(Assignment {
                    target: Target::Field(spec),
                    raw: Raw::Text(text.clone()),
                    origin,
                }),
                None => refuse_unknown_env(var, &mut out),
            },
            [first, second] => {
                let nested = format!("{first}.{second}");
                match (schema::field_spec(&nested), schema::field_spec(first)) {
                    (Some(spec), _) => out.assignments.push(Assignment {
                        target: Target::Field(spec),
                        raw: Raw::Text(text.clone()),
                        origin,
                    }),
                    (None, Some(spec))
                        if spec.kind == FieldKind::StringMap && !second.is_empty() =>
                    {
                        out.assignments.push(Assignment {
                            target: Target::MapEntry(spec, second.clone()),
                            raw: Raw::Text(text.clone()),
                            origin,
                        })
                    }
                    _ => refuse_unknown_env(var, &mut out),
                }
            }
            _ => refuse_unknown_env(var, &mut out),
        }
    }
    reject_duplicate_env_leaves(&mut out);
    out
}

fn reject_duplicate_env_leaves(out: &mut Flattened) {
    let mut first_setter: BTreeMap<String, Origin> = BTreeMap::new();
    let mut keep = Vec::with_capacity(out.assignments.len());
    for assignment in out.assignments.drain(..) {
        let path = assignment.target.path();
        match first_setter.get(&path) {
            Some(first) => out.issues.push(ConfigIssue::new(
                path.clone(),
                assignment.origin.clone(),
                format!("{path} is also set by {first}"),
                "set it through one environment variable only",
            )),
            None => {
                first_setter.insert(path, assignment.origin.clone());
                keep.push(assignment);
            }
        }
    }
    out.assignments = keep;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn paths(flat: &Flattened) -> Vec<String> {
        flat.assignments.iter().map(|a| a.target.path()).collect()
    }

    #[test]
    fn env_nesting_and_map_entries_become_leaf_paths() {
        let flat = flatten_env(&env(&[
            ("ORB_K8S_NAMING__PREFIX", "my-orb"),
            ("ORB_K8S_DEFAULT_NODE_SELECTOR__NODE_TYPE", "compute"),
            ("orb_k8s_namespace", "orb"),
            ("HOME", "/root"),
        ]));
        assert!(flat.issues.is_empty(), "{:?}", flat.issues);
        assert_eq!(
            paths(&flat),
            vec![
                "default_node_selector.node_type",
                "naming.prefix",
                "namespace"
            ]
        );
    }

    #[test]
    fn json_env_values_for_objects_expand_per_key() {
        let flat = flatten_env(&env(&[
            ("ORB_K8S_NAMING", r#"{"prefix":"x","uuid_chars":12}"#),
            (
                "ORB_K8S_DEFAULT_NODE_SELECTOR",
                r#"{"kubernetes.io/arch":"amd64"}"#,
            ),
        ]));
        assert!(flat.issues.is_empty(), "{:?}", flat.issues);
        assert_eq!(
            paths(&flat),
            vec![
                "default_node_selector.kubernetes.io/arch",
                "naming.prefix",
                "naming.uuid_chars"
            ]
        );
    }

    #[test]
    fn unknown_env_var_names_the_closest_variable_and_hides_the_value() {
        let flat = flatten_env(&env(&[("ORB_K8S_NAMESAPCE", "s3cr3t-value")]));
        let text = flat.issues[0].to_string();
        assert!(
            text.contains("unknown environment variable ORB_K8S_NAMESAPCE"),
            "{text}"
        );
        assert!(
            text.contains("closest valid variable is ORB_K8S_NAMESPACE"),
            "{text}"
        );
        assert!(!text.contains("s3cr3t-value"), "{text}");
    }

    /// Kubernetes injects these into every pod of a namespace holding a Service named
    /// `orb-k8s` or `orb-k8s-<x>` (service links); they must not stop orb.
    #[rstest::rstest]
    #[case("ORB_K8S_SERVICE_HOST", "10.96.0.12")]
    #[case("ORB_K8S_SERVICE_PORT", "8080")]
    #[case("ORB_K8S_SERVICE_PORT_HTTP_API", "8080")]
    #[case("ORB_K8S_PORT", "tcp://10.96.0.12:8080")]
    #[case("ORB_K8S_PORT_8080_TCP", "tcp://10.96.0.12:8080")]
    #[case("ORB_K8S_PORT_8080_TCP_PROTO", "tcp")]
    #[case("ORB_K8S_PORT_8080_TCP_PORT", "8080")]
    #[case("ORB_K8S_PORT_53_UDP_ADDR", "10.96.0.12")]
    #[case("ORB_K8S_METRICS_SERVICE_HOST", "10.96.0.13")]
    #[case("ORB_K8S_METRICS_PORT_9090_SCTP_ADDR", "10.96.0.13")]
    fn service_link_variables_are_not_settings(#[case] var: &str, #[case] value: &str) {
        let flat = flatten_env(&env(&[(var, value)]));
        assert!(flat.issues.is_empty(), "{:?}", flat.issues);
        assert!(flat.assignments.is_empty() && flat.warnings.is_empty());
    }

    #[rstest::rstest]
    #[case("ORB_K8S_NAMESAPCE")]
    #[case("ORB_K8S_SERVICE_HOSTS")]
    #[case("ORB_K8S_PORT_8080_TCP_HOST")]
    #[case("ORB_K8S_PORT_HTTP_TCP")]
    #[case("orb_k8s_service_host")]
    #[case("ORB_K8S_POD_TIMEOUT_SECOND")]
    fn near_misses_of_service_links_are_still_unknown_settings(#[case] var: &str) {
        let flat = flatten_env(&env(&[(var, "1")]));
        assert_eq!(flat.issues.len(), 1, "{var}: {:?}", flat.issues);
    }

    #[test]
    fn legacy_file_keys_load_with_a_warning_and_lose_to_canonical_keys() {
        let mut out = Flattened::default();
        let block = json!({"pod_timeout": 60, "kube_context": "old", "context": "new"});
        flatten_object(
            block.as_object().unwrap(),
            None,
            &Origin::file("/c.json"),
            &mut out,
        );
        assert!(out.issues.is_empty(), "{:?}", out.issues);
        let applied: Vec<(String, Raw)> = out
            .assignments
            .iter()
            .map(|a| (a.target.path(), a.raw.clone()))
            .collect();
        assert_eq!(
            applied,
            vec![
                ("pod_timeout_seconds".to_string(), Raw::Json(json!(60))),
                ("context".to_string(), Raw::Json(json!("new"))),
            ]
        );
        let warnings: Vec<String> = out.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            vec![
                "kube_context (from file /c.json): legacy key 'kube_context' is ignored because \
                 'context' is also set; remove 'kube_context'",
                "pod_timeout (from file /c.json): 'pod_timeout' is a legacy name; rename it to \
                 'pod_timeout_seconds'",
            ]
        );
    }

    #[test]
    fn legacy_and_ignored_env_vars_warn_instead_of_failing() {
        let flat = flatten_env(&env(&[
            ("ORB_K8S_DEFAULT_NAMESPACE", "orb"),
            ("ORB_K8S_ALLOW_UNKNOWN_EXEC_PLUGIN", "1"),
        ]));
        assert!(flat.issues.is_empty(), "{:?}", flat.issues);
        assert_eq!(paths(&flat), vec!["namespace"]);
        let warnings: Vec<String> = flat.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].starts_with("ORB_K8S_ALLOW_UNKNOWN_EXEC_PLUGIN (from env ORB_K8S_ALLOW_UNKNOWN_EXEC_PLUGIN): ORB_K8S_ALLOW_UNKNOWN_EXEC_PLUGIN has no effect"));
        assert_eq!(
            warnings[1],
            "namespace (from env ORB_K8S_DEFAULT_NAMESPACE): ORB_K8S_DEFAULT_NAMESPACE is a \
             legacy name; rename it to ORB_K8S_NAMESPACE"
        );
    }

    #[test]
    fn legacy_and_canonical_env_vars_together_are_an_error() {
        let flat = flatten_env(&env(&[
            ("ORB_K8S_POD_TIMEOUT", "60"),
            ("ORB_K8S_POD_TIMEOUT_SECONDS", "90"),
        ]));
        assert_eq!(flat.issues.len(), 1);
        assert_eq!(
            flat.issues[0].to_string(),
            "pod_timeout_seconds (from env ORB_K8S_POD_TIMEOUT_SECONDS): pod_timeout_seconds is \
             also set by env ORB_K8S_POD_TIMEOUT; fix: set it through one environment variable only"
        );
    }

    #[test]
    fn same_leaf_from_two_env_vars_is_an_error() {
        let flat = flatten_env(&env(&[
            ("ORB_K8S_NAMING", r#"{"prefix":"a"}"#),
            ("ORB_K8S_NAMING__PREFIX", "b"),
        ]));
        assert_eq!(flat.issues.len(), 1);
        assert_eq!(
            flat.issues[0].problem,
            "naming.prefix is also set by env ORB_K8S_NAMING"
        );
    }

    #[test]
    fn unknown_nested_file_key_suggests_the_nested_key() {
        let mut out = Flattened::default();
        let block = json!({"naming": {"prefx": "a"}, "namespace": "x"});
        flatten_object(
            block.as_object().unwrap(),
            None,
            &Origin::file("/etc/orb/config.json"),
            &mut out,
        );
        assert_eq!(out.issues.len(), 1);
        assert_eq!(out.issues[0].problem, "unknown key 'naming.prefx'");
        assert!(
            out.issues[0]
                .fix
                .starts_with("the closest valid key is 'naming.prefix'")
        );
        assert_eq!(paths(&out), vec!["namespace"]);
    }
}
