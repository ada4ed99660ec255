//! The field table: one row per leaf of seed 001, in the seed's order and groups.
//!
//! Layering, type coercion, unknown-key suggestions, provenance, `orb config show` and the
//! documentation all walk this table, so adding a field here (and to the model) is enough for
//! every source to accept it.

/// Value shape of a field; decides how file/env/template values are coerced and checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldKind {
    Bool,
    OptionalBool,
    String,
    OptionalString,
    /// Whole number in `min..=max`.
    UInt {
        min: u64,
        max: u64,
    },
    /// Finite number `>= min`.
    Float {
        min: f64,
    },
    /// Optional list of strings; a later source replaces the whole list.
    StringList,
    /// Optional string → string map; later sources merge key by key.
    StringMap,
    /// Optional list of Kubernetes tolerations; a later source replaces the whole list.
    Tolerations,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldSpec {
    /// Dotted path, e.g. `pod_timeout_seconds` or `naming.prefix`.
    pub path: &'static str,
    pub kind: FieldKind,
    /// Seed 001 group heading.
    pub group: &'static str,
}

impl FieldSpec {
    /// `ORB_K8S_` + path upper-cased, with `.` (nesting) written as `__`.
    pub fn env_var(&self) -> String {
        format!(
            "{ENV_PREFIX}{}",
            self.path.replace('.', "__").to_ascii_uppercase()
        )
    }
}

pub const ENV_PREFIX: &str = "ORB_K8S_";
/// Nested objects (only `naming` today).
pub const CONTAINERS: &[&str] = &["naming"];

const AUTH: &str = "Authentication and cluster targeting";
const NAMESPACING: &str = "Namespacing";
const LABELS: &str = "Labels";
const POD_DEFAULTS: &str = "Pod defaults";
const TIMING: &str = "Timing";
const WATCH: &str = "Watch and reconciliation";
const AUDIT: &str = "Security audit";
const OPT_IN: &str = "Opt-in features";
const STATUS_CACHE: &str = "Controller status cache";
const RESILIENCE: &str = "Resilience";
const OBSERVABILITY: &str = "Observability";
const NATIVE_SPEC: &str = "Native spec escape hatch";
const NAMING: &str = "Resource naming";

const fn field(path: &'static str, kind: FieldKind, group: &'static str) -> FieldSpec {
    FieldSpec { path, kind, group }
}

const SECONDS: FieldKind = FieldKind::UInt {
    min: 0,
    max: u32::MAX as u64,
};
const POSITIVE_SECONDS: FieldKind = FieldKind::UInt {
    min: 1,
    max: u32::MAX as u64,
};
const NAME_BUDGET: FieldKind = FieldKind::UInt { min: 1, max: 63 };

pub const FIELDS: &[FieldSpec] = &[
    field("kubeconfig_path", FieldKind::OptionalString, AUTH),
    field("context", FieldKind::OptionalString, AUTH),
    field("in_cluster", FieldKind::OptionalBool, AUTH),
    field("namespace", FieldKind::OptionalString, NAMESPACING),
    field("namespaces", FieldKind::StringList, NAMESPACING),
    field("label_prefix", FieldKind::String, LABELS),
    field("emit_legacy_labels", FieldKind::Bool, LABELS),
    field("default_node_selector", FieldKind::StringMap, POD_DEFAULTS),
    field("default_tolerations", FieldKind::Tolerations, POD_DEFAULTS),
    field(
        "default_image_pull_secret",
        FieldKind::OptionalString,
        POD_DEFAULTS,
    ),
    field("pod_timeout_seconds", POSITIVE_SECONDS, TIMING),
    field("delete_timed_out_pods", FieldKind::Bool, TIMING),
    field("stale_cache_timeout_seconds", SECONDS, TIMING),
    field("watch_enabled", FieldKind::Bool, WATCH),
    field("min_kubernetes_version", FieldKind::String, WATCH),
    field("auto_cleanup_orphans", FieldKind::Bool, WATCH),
    field("orphan_gc_enabled", FieldKind::Bool, WATCH),
    field("orphan_gc_interval_seconds", POSITIVE_SECONDS, WATCH),
    field("orphan_min_age_seconds", SECONDS, WATCH),
    field("periodic_resync_interval_seconds", SECONDS, WATCH),
    field("audit_high_risk_pod_fields", FieldKind::Bool, AUDIT),
    field("reject_high_risk_pod_fields", FieldKind::Bool, AUDIT),
    field("pod_security_profile", FieldKind::String, AUDIT),
    field("node_watch_enabled", FieldKind::Bool, OPT_IN),
    field("events_watch_enabled", FieldKind::Bool, OPT_IN),
    field("inbound_auth_enabled", FieldKind::Bool, OPT_IN),
    field(
        "controller_status_cache_ttl_seconds",
        FieldKind::Float { min: 0.0 },
        STATUS_CACHE,
    ),
    field(
        "circuit_breaker_failure_threshold",
        FieldKind::UInt {
            min: 1,
            max: u32::MAX as u64,
        },
        RESILIENCE,
    ),
    field(
        "circuit_breaker_reset_timeout",
        POSITIVE_SECONDS,
        RESILIENCE,
    ),
    field(
        "max_retries",
        FieldKind::UInt {
            min: 0,
            max: u32::MAX as u64,
        },
        RESILIENCE,
    ),
    field(
        "retry_base_delay",
        FieldKind::Float { min: 0.0 },
        RESILIENCE,
    ),
    field("retry_max_delay", FieldKind::Float { min: 0.0 }, RESILIENCE),
    field("metrics_enabled", FieldKind::Bool, OBSERVABILITY),
    field("native_spec_enabled", FieldKind::Bool, NATIVE_SPEC),
    field(
        "native_spec_render_fuel",
        FieldKind::UInt {
            min: 10_000,
            max: 1_000_000_000,
        },
        NATIVE_SPEC,
    ),
    field(
        "native_spec_render_max_bytes",
        FieldKind::UInt {
            min: 4_096,
            max: 64 << 20,
        },
        NATIVE_SPEC,
    ),
    field(
        "native_spec_render_timeout_ms",
        FieldKind::UInt {
            min: 10,
            max: 600_000,
        },
        NATIVE_SPEC,
    ),
    field("naming.prefix", FieldKind::String, NAMING),
    field(
        "naming.uuid_chars",
        FieldKind::UInt { min: 8, max: 32 },
        NAMING,
    ),
    field("naming.max_pod_name_len", NAME_BUDGET, NAMING),
    field("naming.max_deployment_name_len", NAME_BUDGET, NAMING),
    field("naming.max_statefulset_name_len", NAME_BUDGET, NAMING),
    field("naming.max_job_name_len", NAME_BUDGET, NAMING),
];

pub fn field_spec(path: &str) -> Option<&'static FieldSpec> {
    FIELDS.iter().find(|f| f.path == path)
}

pub fn is_container(path: &str) -> bool {
    CONTAINERS.contains(&path)
}

/// Older top-level key names still accepted (with a warning) so configs written for the
/// reference broker keep loading: (legacy key, canonical field).
pub const LEGACY_KEYS: &[(&str, &str)] = &[
    ("kube_config_path", "kubeconfig_path"),
    ("kube_context", "context"),
    ("default_namespace", "namespace"),
    ("pod_timeout", "pod_timeout_seconds"),
    ("orphan_gc_interval", "orphan_gc_interval_seconds"),
    ("orphan_min_age", "orphan_min_age_seconds"),
];

pub fn canonical_for_legacy(key: &str) -> Option<&'static str> {
    LEGACY_KEYS
        .iter()
        .find(|(legacy, _)| *legacy == key)
        .map(|(_, canonical)| *canonical)
}

/// `ORB_K8S_*` variables the reference understood that have no effect here; accepted with a
/// warning instead of failing the load: (variable, why it is ignored).
pub const IGNORED_ENV_VARS: &[(&str, &str)] = &[(
    "ORB_K8S_ALLOW_UNKNOWN_EXEC_PLUGIN",
    "orb-rs has no exec-plugin allow-list; it runs the exec credential plugin the kubeconfig \
     names, so control which plugins run by controlling the kubeconfig",
)];

/// Whether `var` has the shape of a variable the kubelet injects for a Service (`<SVC>_SERVICE_HOST`,
/// `<SVC>_SERVICE_PORT[_<PORT NAME>]`, `<SVC>_PORT`, `<SVC>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`,
/// upper case as Kubernetes writes them). No setting has such a name, so a Service named
/// `orb-k8s…` must not make its variables unknown settings.
pub fn is_service_link(var: &str) -> bool {
    let Some(rest) = var.strip_prefix(ENV_PREFIX.trim_end_matches('_')) else {
        return false;
    };
    if !rest.starts_with('_')
        || !rest
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return false;
    }
    if rest.ends_with("_SERVICE_HOST")
        || rest.ends_with("_SERVICE_PORT")
        || rest.ends_with("_PORT")
        || rest
            .split_once("_SERVICE_PORT_")
            .is_some_and(|(_, name)| !name.is_empty())
    {
        return true;
    }
    // `_PORT_<n>_<PROTO>` with an optional `_PROTO`, `_PORT` or `_ADDR` after it.
    let words: Vec<&str> = rest.rsplit('_').collect();
    let tail = match words.as_slice() {
        [last, ..] if ["PROTO", "PORT", "ADDR"].contains(last) => &words[1..],
        _ => &words[..],
    };
    matches!(tail, [proto, number, "PORT", ..]
        if ["TCP", "UDP", "SCTP"].contains(proto)
            && !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit()))
}

/// Keys valid directly under `parent` (`None` = top level), containers included.
pub fn keys_under(parent: Option<&str>) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for f in FIELDS {
        let key = match (parent, f.path.split_once('.')) {
            (None, None) => f.path,
            (None, Some((container, _))) => container,
            (Some(p), Some((container, leaf))) if p == container => leaf,
            _ => continue,
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Levenshtein distance, for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b_chars.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b_chars.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b_chars.len()]
}

/// The candidate nearest to `key`: candidates that extend or contain the key (a truncated
/// name such as `pod_timeout`) come first, then the smallest edit distance, first on ties.
pub fn closest<'a>(key: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    candidates.into_iter().min_by_key(|candidate| {
        let c = candidate.to_ascii_lowercase();
        let related = key.len() >= 3 && (c.contains(&key) || key.starts_with(&c));
        (!related, edit_distance(&key, &c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("kitten", "sitting", 3)]
    #[case("namespace", "namespaces", 1)]
    #[case("", "abc", 3)]
    #[case("same", "same", 0)]
    fn levenshtein(#[case] a: &str, #[case] b: &str, #[case] d: usize) {
        assert_eq!(edit_distance(a, b), d);
    }

    #[test]
    fn env_var_names_follow_the_seed() {
        let names: Vec<String> = FIELDS.iter().map(FieldSpec::env_var).collect();
        assert!(names.contains(&"ORB_K8S_KUBECONFIG_PATH".to_string()));
        assert!(names.contains(&"ORB_K8S_NAMING__MAX_STATEFULSET_NAME_LEN".to_string()));
        assert!(names.contains(&"ORB_K8S_CONTROLLER_STATUS_CACHE_TTL_SECONDS".to_string()));
    }

    #[test]
    fn every_table_row_exists_in_the_serialised_model_and_vice_versa() {
        let value = serde_json::to_value(super::super::K8sProviderConfig::default()).unwrap();
        let mut model_paths = Vec::new();
        for (key, v) in value.as_object().unwrap() {
            if is_container(key) {
                for sub in v.as_object().unwrap().keys() {
                    model_paths.push(format!("{key}.{sub}"));
                }
            } else {
                model_paths.push(key.clone());
            }
        }
        let mut table_paths: Vec<String> = FIELDS.iter().map(|f| f.path.to_string()).collect();
        model_paths.sort();
        table_paths.sort();
        assert_eq!(model_paths, table_paths);
    }

    #[test]
    fn the_configuration_page_documents_every_field_and_variable() {
        let page = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/configuration.md"
        ));
        for spec in FIELDS {
            assert!(
                page.contains(&format!("`{}`", spec.path)),
                "{} undocumented",
                spec.path
            );
            assert!(
                page.contains(&spec.env_var()),
                "{} undocumented",
                spec.env_var()
            );
        }
    }

    #[test]
    fn keys_under_lists_top_level_and_nested_keys() {
        assert!(keys_under(None).contains(&"naming"));
        assert!(!keys_under(None).contains(&"prefix"));
        assert!(keys_under(Some("naming")).contains(&"uuid_chars"));
        assert_eq!(closest("namespase", keys_under(None)), Some("namespace"));
        assert_eq!(
            closest("pod_timeout", keys_under(None)),
            Some("pod_timeout_seconds")
        );
        assert_eq!(closest("watch", keys_under(None)), Some("watch_enabled"));
    }
}
