//! Semantic rules checked once every source is applied: names, cross-field constraints and
//! naming budgets. Type and range checks already happened during coercion.

use std::collections::{BTreeMap, BTreeSet};

use orb_core::ProviderApi;

use super::issues::{ConfigIssue, ConfigWarning, FieldOrigin, Origin};
use super::model::{ALL_NAMESPACES, K8sProviderConfig};
use super::version::KubernetesVersion;
use crate::audit::PodSecurityProfile;
use crate::naming::{self, KindNaming};
use crate::validation;

/// Looks up origins while rules run.
pub(crate) struct Origins<'a>(pub &'a BTreeMap<String, Origin>);

impl Origins<'_> {
    fn of(&self, path: &str) -> Origin {
        self.0.get(path).cloned().unwrap_or(Origin::Default)
    }
    fn field(&self, path: &str) -> FieldOrigin {
        FieldOrigin {
            field: path.to_string(),
            origin: self.of(path),
        }
    }
}

#[derive(Default)]
pub(crate) struct Findings {
    pub issues: Vec<ConfigIssue>,
    pub warnings: Vec<ConfigWarning>,
}

impl Findings {
    fn issue(
        &mut self,
        origins: &Origins<'_>,
        path: &str,
        problem: String,
        fix: impl Into<String>,
    ) {
        self.issues
            .push(ConfigIssue::new(path, origins.of(path), problem, fix));
    }
    fn warn(&mut self, origins: &Origins<'_>, paths: &[&str], message: impl Into<String>) {
        self.warnings.push(ConfigWarning {
            fields: paths.iter().map(|p| origins.field(p)).collect(),
            message: message.into(),
        });
    }
}

/// The operator's deliberate departures from the secure defaults (reject mode off, the audit
/// off, the native spec hatch on). Legal, so not warnings about a mistake, but `orb serve`
/// prints them at every start and `orb doctor` and `orb config show` list them, each with
/// where it was set.
pub(crate) fn security_opt_outs(
    cfg: &K8sProviderConfig,
    origins: &Origins<'_>,
) -> Vec<ConfigWarning> {
    let mut out = Vec::new();
    let mut note = |path: &str, message: &str| {
        out.push(ConfigWarning {
            fields: vec![origins.field(path)],
            message: message.to_string(),
        })
    };
    if !cfg.audit_high_risk_pod_fields {
        note(
            "audit_high_risk_pod_fields",
            "SECURITY opt-out: the high-risk pod field audit is off; privileged, hostNetwork, \
             hostPath and similar pod settings are neither refused nor logged",
        );
    } else if !cfg.reject_high_risk_pod_fields {
        note(
            "reject_high_risk_pod_fields",
            "SECURITY opt-out: reject mode is off; high-risk pod fields (privileged, \
             hostNetwork, hostPath, …) are logged as warnings and the pods are created",
        );
    }
    if cfg.native_spec_enabled {
        note(
            "native_spec_enabled",
            "SECURITY opt-in: the native spec escape hatch is on; templates may submit whole \
             Kubernetes bodies (the audit in reject mode still checks them) when config.json's \
             native_spec.enabled is not false",
        );
    }
    out
}

pub(crate) fn check(cfg: &K8sProviderConfig, origins: &Origins<'_>) -> Findings {
    let mut found = Findings::default();
    check_auth(cfg, origins, &mut found);
    check_namespaces(cfg, origins, &mut found);
    check_labels_and_pod_defaults(cfg, origins, &mut found);
    check_timing_and_versions(cfg, origins, &mut found);
    check_naming(cfg, origins, &mut found);
    warn_about_risky_combinations(cfg, origins, &mut found);
    found
}

fn check_auth(cfg: &K8sProviderConfig, origins: &Origins<'_>, found: &mut Findings) {
    if let Some(path) = &cfg.kubeconfig_path
        && path.as_os_str().to_string_lossy().trim().is_empty()
    {
        found.issue(
            origins,
            "kubeconfig_path",
            "the path is blank".into(),
            "give the kubeconfig file's path, or leave it unset to use KUBECONFIG or ~/.kube/config",
        );
    }
    if let Some(context) = &cfg.context
        && context.trim().is_empty()
    {
        found.issue(
            origins,
            "context",
            "the context name is blank".into(),
            "name a context from the kubeconfig, or leave it unset to use its current-context",
        );
    }
}

fn namespace_fix(value: &str) -> String {
    let suggestion: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .trim_matches('-')
        .chars()
        .take(63)
        .collect();
    if validation::is_dns1123_label(&suggestion) {
        format!("use a DNS-1123 label such as {suggestion:?}")
    } else {
        "use a DNS-1123 label: lowercase letters, digits and '-', at most 63 characters".into()
    }
}

fn check_namespaces(cfg: &K8sProviderConfig, origins: &Origins<'_>, found: &mut Findings) {
    if let Some(ns) = &cfg.namespace {
        let problems = validation::dns1123_label_problems(ns);
        if !problems.is_empty() {
            found.issue(
                origins,
                "namespace",
                format!(
                    "{ns:?} is not a valid namespace name: it {}",
                    problems.join(" and ")
                ),
                namespace_fix(ns),
            );
        }
    }
    let Some(list) = &cfg.namespaces else { return };
    if list.is_empty() {
        found.issue(
            origins,
            "namespaces",
            "the list is empty".into(),
            r#"list at least one namespace, use ["*"] for cluster-wide, or leave it unset to use `namespace`"#,
        );
        return;
    }
    if list.iter().any(|n| n == ALL_NAMESPACES) {
        if list.len() > 1 {
            found.issue(
                origins,
                "namespaces",
                format!("\"*\" is combined with other entries in {list:?}"),
                r#"use ["*"] alone for cluster-wide mode, or list the namespaces without "*""#,
            );
        }
        return;
    }
    let mut seen = BTreeSet::new();
    for ns in list {
        let problems = validation::dns1123_label_problems(ns);
        if !problems.is_empty() {
            found.issue(
                origins,
                "namespaces",
                format!(
                    "entry {ns:?} is not a valid namespace name: it {}",
                    problems.join(" and ")
                ),
                namespace_fix(ns),
            );
        }
        if !seen.insert(ns.as_str()) {
            found.issue(
                origins,
                "namespaces",
                format!("entry {ns:?} is listed twice"),
                "list each namespace once",
            );
        }
    }
    // `namespaces` is the managed list and wins; `namespace` then only picks the default
    // target among them. Outside the list it cannot be one, so it is ignored, loudly.
    if let Some(ns) = &cfg.namespace
        && !list.contains(ns)
    {
        found.warn(
            origins,
            &["namespace", "namespaces"],
            format!(
                "namespace {ns:?} is ignored because namespaces {list:?} lists the managed \
                 namespaces and does not include it (namespaces wins); templates without their \
                 own namespace go to {:?}. Add {ns:?} to namespaces or unset namespace to \
                 silence this warning",
                list[0]
            ),
        );
    }
}

fn check_labels_and_pod_defaults(
    cfg: &K8sProviderConfig,
    origins: &Origins<'_>,
    found: &mut Findings,
) {
    let prefix_problems = validation::dns1123_subdomain_problems(&cfg.label_prefix);
    if !prefix_problems.is_empty() {
        found.issue(
            origins,
            "label_prefix",
            format!(
                "{:?} is not a valid RFC 1123 subdomain: it {}",
                cfg.label_prefix,
                prefix_problems.join(" and ")
            ),
            "use a lowercase DNS name without '/' or spaces, such as \"orb.io\" or \"orb.example.com\"",
        );
    }
    for (key, value) in cfg.default_node_selector.iter().flatten() {
        let path = format!("default_node_selector.{key}");
        let key_problems = validation::qualified_name_problems(key);
        if !key_problems.is_empty() {
            found.issue(
                origins,
                &path,
                format!(
                    "{key:?} is not a valid label key: {}",
                    key_problems.join(" and ")
                ),
                "use a node label key such as \"workload\" or \"kubernetes.io/arch\"",
            );
        }
        let value_problems = validation::label_value_problems(value);
        if !value_problems.is_empty() {
            found.issue(
                origins,
                &path,
                format!(
                    "{value:?} is not a valid label value: it {}",
                    value_problems.join(" and ")
                ),
                "use at most 63 letters, digits, '-', '_' or '.'",
            );
        }
    }
    for (index, toleration) in cfg.default_tolerations.iter().flatten().enumerate() {
        let operator = toleration.operator.as_deref().unwrap_or("Equal");
        let effect = toleration.effect.as_deref().unwrap_or("");
        let key_empty = toleration.key.as_deref().unwrap_or("").is_empty();
        let value_set = !toleration.value.as_deref().unwrap_or("").is_empty();
        let mut problems = Vec::new();
        if !matches!(operator, "Equal" | "Exists") {
            problems.push(format!(
                "operator {operator:?} must be \"Equal\" or \"Exists\""
            ));
        }
        if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            problems.push(format!(
                "effect {effect:?} must be \"NoSchedule\", \"PreferNoSchedule\" or \"NoExecute\""
            ));
        }
        if operator == "Exists" && value_set {
            problems.push("operator \"Exists\" must not have a value".into());
        }
        if key_empty && operator != "Exists" {
            problems.push("an empty key needs operator \"Exists\"".into());
        }
        if toleration.toleration_seconds.is_some() && effect != "NoExecute" {
            problems.push("tolerationSeconds only applies to effect \"NoExecute\"".into());
        }
        for problem in problems {
            found.issue(
                origins,
                "default_tolerations",
                format!("entry {index}: {problem}"),
                "fix the toleration as described; see the Kubernetes taints and tolerations docs",
            );
        }
    }
    if let Some(secret) = &cfg.default_image_pull_secret {
        let problems = validation::dns1123_subdomain_problems(secret);
        if !problems.is_empty() {
            found.issue(
                origins,
                "default_image_pull_secret",
                format!("{secret:?} is not a valid Secret name: it {}", problems.join(" and ")),
                "name an existing Secret of type kubernetes.io/dockerconfigjson, e.g. \"orb-registry\"",
            );
        }
    }
}

fn check_timing_and_versions(cfg: &K8sProviderConfig, origins: &Origins<'_>, found: &mut Findings) {
    if let Err(problem) = cfg.pod_security_profile.parse::<PodSecurityProfile>() {
        found.issue(
            origins,
            "pod_security_profile",
            problem,
            "set \"baseline\" (the default) or \"restricted\"",
        );
    }
    if let Err(err) = KubernetesVersion::parse(&cfg.min_kubernetes_version) {
        found.issue(
            origins,
            "min_kubernetes_version",
            format!("{:?} cannot be parsed", err.value),
            "write MAJOR.MINOR such as \"1.28\"",
        );
    }
    if cfg.retry_max_delay < cfg.retry_base_delay {
        found.issues.push(ConfigIssue {
            fields: vec![
                origins.field("retry_max_delay"),
                origins.field("retry_base_delay"),
            ],
            problem: format!(
                "retry_max_delay {} is smaller than retry_base_delay {}",
                cfg.retry_max_delay, cfg.retry_base_delay
            ),
            fix: "raise retry_max_delay to at least retry_base_delay".into(),
        });
    }
}

fn check_naming(cfg: &K8sProviderConfig, origins: &Origins<'_>, found: &mut Findings) {
    let prefix = &cfg.naming.prefix;
    if prefix.len() > naming::MAX_PREFIX_LEN {
        found.issue(
            origins,
            "naming.prefix",
            format!(
                "{prefix:?} has {} characters, more than the {} allowed",
                prefix.len(),
                naming::MAX_PREFIX_LEN
            ),
            format!(
                "shorten it to at most {} characters",
                naming::MAX_PREFIX_LEN
            ),
        );
    }
    if !validation::is_dns1123_label(prefix) {
        found.issue(
            origins,
            "naming.prefix",
            format!("{prefix:?} is not a valid DNS-1123 label segment"),
            "use lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. \"my-orb\"",
        );
        return; // budgets of an invalid prefix would only repeat the problem
    }
    for overflow in naming::budget_overflows(&cfg.naming) {
        let budget_field = format!("naming.{}", overflow.kind.budget_field());
        let fix = match overflow.max_prefix_len() {
            Some(max_prefix) => format!(
                "shorten naming.prefix to at most {max_prefix} characters, lower naming.uuid_chars \
                 to at most {}, or raise {budget_field}",
                overflow.max_uuid_chars()
            ),
            None => format!("raise {budget_field} or lower naming.uuid_chars"),
        };
        found.issues.push(ConfigIssue {
            fields: vec![
                origins.field("naming.prefix"),
                origins.field("naming.uuid_chars"),
                origins.field(&budget_field),
            ],
            problem: format!(
                "{} names would be {} characters ({}), over the {} budget of {}",
                overflow.kind, overflow.name_len, overflow.shape, overflow.kind, overflow.budget
            ),
            fix,
        });
    }
    for kind in ProviderApi::ALL {
        let budget = cfg.naming.budget(kind);
        let safe = kind.default_budget();
        if budget > safe {
            found.warn(
                origins,
                &[&format!("naming.{}", kind.budget_field())],
                format!(
                    "{kind} budget {budget} exceeds the suffix-safe default {safe}; names the \
                     controller derives from it may pass 63 characters and be rejected"
                ),
            );
        }
    }
}

fn warn_about_risky_combinations(
    cfg: &K8sProviderConfig,
    origins: &Origins<'_>,
    found: &mut Findings,
) {
    // The native spec hatch lets a template write any pod field, so the audit in reject mode
    // is the only thing between a template file and a privileged pod: as in the reference,
    // the hatch with reject mode off (or the audit off) is refused, not merely warned about.
    if cfg.native_spec_enabled && !cfg.audit_high_risk_pod_fields {
        found.issues.push(ConfigIssue {
            fields: vec![
                origins.field("native_spec_enabled"),
                origins.field("audit_high_risk_pod_fields"),
            ],
            problem: "the native spec escape hatch is on while the pod-spec audit is off; a \
                      template could submit privileged, hostNetwork or hostPath pods unseen"
                .into(),
            fix: "set audit_high_risk_pod_fields=true and reject_high_risk_pod_fields=true \
                  (the defaults), or turn native_spec_enabled off"
                .into(),
        });
    } else if cfg.native_spec_enabled && !cfg.reject_high_risk_pod_fields {
        found.issues.push(ConfigIssue {
            fields: vec![
                origins.field("native_spec_enabled"),
                origins.field("reject_high_risk_pod_fields"),
            ],
            problem: "the native spec escape hatch is on while high-risk pod fields are only \
                      logged, not refused; a template could submit privileged, hostNetwork or \
                      hostPath pods"
                .into(),
            fix: "set reject_high_risk_pod_fields=true (the default), or turn \
                  native_spec_enabled off"
                .into(),
        });
    }
    if cfg.auto_cleanup_orphans && !cfg.orphan_gc_enabled {
        found.warn(
            origins,
            &["auto_cleanup_orphans", "orphan_gc_enabled"],
            "auto_cleanup_orphans=true has no effect while orphan_gc_enabled=false",
        );
    }
    if cfg.in_cluster == Some(true) {
        let ignored = [
            ("kubeconfig_path", cfg.kubeconfig_path.is_some()),
            ("context", cfg.context.is_some()),
        ];
        for (field, set) in ignored {
            if set {
                found.warn(
                    origins,
                    &["in_cluster", field],
                    format!("{field} is ignored because in_cluster=true forces in-cluster auth"),
                );
            }
        }
    }
}
