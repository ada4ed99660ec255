//! Everything wrong with a template, found at once, each with the field and the fix.

use std::fmt;

use serde_json::Value;

use super::{ProviderApi, ResourceSpec, RestartPolicy, Template};
use crate::quantity::parse_quantity;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateProblem {
    /// The HostFactory key of the offending field.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for TemplateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// DNS-1123 label: lowercase alphanumerics and '-', alphanumeric at both ends, ≤ 63 chars.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn looks_like_image(image: &str) -> bool {
    image
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && !image.chars().any(char::is_whitespace)
}

impl Template {
    /// All problems; empty means the template can be used.
    pub fn problems(&self) -> Vec<TemplateProblem> {
        let mut out = Vec::new();
        let mut push =
            |field: &'static str, message: String| out.push(TemplateProblem { field, message });
        let id = self.template_id.as_str();
        if id.trim().is_empty() {
            push(
                "templateId",
                "must not be empty; give the template a unique id such as \"worker-small\"".into(),
            );
        } else if let Some(problem) = label_value_problem(id) {
            // The id is stamped on every object as the template-id label.
            push(
                "templateId",
                format!(
                    "{id:?} {problem}; it becomes a label value, so use at most 63 letters, \
                     digits, '-', '_' or '.', starting and ending with a letter or digit"
                ),
            );
        }
        let has_native = self.native_spec.is_some() || self.native_spec_path.is_some();
        match self.container_image.as_deref() {
            None if !has_native => push(
                "imageId",
                "is required: set the container image, e.g. \"imageId\": \"busybox:1.36\" (or a provider template_defaults machine_image)".into(),
            ),
            Some(image) if !looks_like_image(image) => push(
                "imageId",
                format!("{image:?} is not an image reference; it must start with a letter or digit and contain no spaces"),
            ),
            _ => {}
        }
        if let Some(max) = self.max_machines
            && max < -1
        {
            push(
                "maxNumber",
                format!("{max} is not allowed; use -1 for unlimited or a count ≥ 0"),
            );
        }
        if let Some(ns) = &self.namespace
            && !is_dns1123_label(ns)
        {
            push(
                "namespace",
                format!(
                    "{ns:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)"
                ),
            );
        }
        for ns in self.namespaces.iter().flatten() {
            if ns != "*" && !is_dns1123_label(ns) {
                push(
                    "namespaces",
                    format!("{ns:?} is not a DNS-1123 label; list namespace names or [\"*\"]"),
                );
            }
        }
        check_resources(
            "resourceRequests",
            self.resource_requests.as_ref(),
            &mut push,
        );
        check_resources("resourceLimits", self.resource_limits.as_ref(), &mut push);
        let api = self.api();
        for (field, value) in [
            ("completions", self.completions),
            ("parallelism", self.parallelism),
        ] {
            match value {
                Some(_) if api != ProviderApi::Job => push(
                    field,
                    format!(
                        "only applies to providerApi Job, not {api}; remove it or switch to Job"
                    ),
                ),
                // Seed 000: parallelism = completions = the requested count, always.
                Some(n) => push(
                    field,
                    format!(
                        "is {n}, but orb sizes every Job from the request: completions = \
                         parallelism = the number of machines asked for; remove {field}"
                    ),
                ),
                None => {}
            }
        }
        if api == ProviderApi::Job
            && let Some(policy @ (RestartPolicy::Always | RestartPolicy::OnFailure)) =
                self.restart_policy
        {
            push(
                "restartPolicy",
                format!(
                    "{policy:?} is not allowed for a Job: orb owns retries (backoffLimit 0), so \
                     its pods use Never; remove restartPolicy or set it to Never"
                ),
            );
        }
        if let Some(secs) = self.termination_grace_period_seconds
            && secs < 0
        {
            push(
                "terminationGracePeriodSeconds",
                format!("{secs} is negative; use 0 or more seconds"),
            );
        }
        if let Some(secs) = self.ttl_seconds_after_finished
            && secs < 0
        {
            push(
                "ttlSecondsAfterFinished",
                format!("{secs} is negative; use 0 or more seconds"),
            );
        }
        if let Some(secs) = self.active_deadline_seconds
            && secs <= 0
        {
            push(
                "activeDeadlineSeconds",
                format!("{secs} must be greater than 0"),
            );
        }
        for env in self.environment_variables.iter().flatten() {
            if env.name.trim().is_empty() {
                push(
                    "env",
                    "an entry has an empty name; every variable needs a name".into(),
                );
            }
        }
        if let Some(attributes) = &self.attributes {
            for (key, value) in attributes {
                if !is_attribute_pair(value) {
                    push(
                        "attributes",
                        format!(
                            "{key:?} must be a [kind, value] pair of strings such as [\"Numeric\", \"4\"], got {value}"
                        ),
                    );
                }
            }
        }
        if let Some(spec) = &self.pod_spec_override
            && !spec.is_object()
        {
            push(
                "podSpecOverride",
                "must be an object (a partial pod spec)".into(),
            );
        }
        if let Some(spec) = &self.native_spec
            && !spec.is_object()
        {
            push("nativeSpec", "must be an object (a workload body)".into());
        }
        out
    }
}

/// Why `value` is not a Kubernetes label value (apimachinery `IsValidLabelValue`), if it is
/// not: at most 63 characters of letters, digits, '-', '_' and '.', alphanumeric at both ends.
fn label_value_problem(value: &str) -> Option<&'static str> {
    let chars_ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ends_ok = value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if value.len() > 63 {
        Some("is longer than 63 characters")
    } else if !chars_ok {
        Some("contains characters other than letters, digits, '-', '_' and '.'")
    } else if !ends_ok {
        Some("does not start and end with a letter or digit")
    } else {
        None
    }
}

fn is_attribute_pair(value: &Value) -> bool {
    matches!(value.as_array(), Some(items) if items.len() == 2 && items.iter().all(Value::is_string))
}

fn check_resources(
    field: &'static str,
    spec: Option<&ResourceSpec>,
    push: &mut impl FnMut(&'static str, String),
) {
    let Some(spec) = spec else { return };
    for (what, value) in [
        ("cpu", &spec.cpu),
        ("memory", &spec.memory),
        ("ephemeral_storage", &spec.ephemeral_storage),
    ] {
        if let Some(raw) = value
            && let Err(err) = parse_quantity(what, raw)
        {
            push(field, err.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::wire::template_from_value;
    use rstest::rstest;
    use serde_json::json;

    fn problems(value: Value) -> Vec<TemplateProblem> {
        template_from_value(&value, None, "#0")
            .unwrap()
            .template
            .problems()
    }

    #[test]
    fn a_complete_template_has_no_problems() {
        assert_eq!(
            problems(
                json!({"templateId": "w", "imageId": "busybox:1.36", "namespace": "batch",
                            "resourceRequests": {"cpu": "500m", "memory": "1Gi"}})
            ),
            vec![]
        );
    }

    #[test]
    fn native_spec_templates_need_no_image() {
        assert_eq!(
            problems(json!({"templateId": "w", "nativeSpecPath": "pod.yaml"})),
            vec![]
        );
    }

    #[rstest]
    #[case::no_image(json!({"templateId": "w"}), "imageId")]
    #[case::spaced_image(json!({"templateId": "w", "imageId": " busybox"}), "imageId")]
    #[case::blank_id(json!({"templateId": " ", "imageId": "i"}), "templateId")]
    #[case::max_below_unlimited(json!({"templateId": "w", "imageId": "i", "maxNumber": -2}), "maxNumber")]
    #[case::subdomain_namespace(json!({"templateId": "w", "imageId": "i", "namespace": "production.jobs"}), "namespace")]
    #[case::upper_namespace(json!({"templateId": "w", "imageId": "i", "namespaces": ["Batch"]}), "namespaces")]
    #[case::bad_cpu(json!({"templateId": "w", "imageId": "i", "resourceLimits": {"cpu": "fast"}}), "resourceLimits")]
    #[case::completions_zero(json!({"templateId": "w", "imageId": "i", "providerApi": "Job", "completions": 0}), "completions")]
    #[case::completions_on_a_job(json!({"templateId": "w", "imageId": "i", "providerApi": "Job", "completions": 3}), "completions")]
    #[case::parallelism_on_a_job(json!({"templateId": "w", "imageId": "i", "providerApi": "Job", "parallelism": 1}), "parallelism")]
    #[case::completions_on_pod(json!({"templateId": "w", "imageId": "i", "parallelism": 2}), "parallelism")]
    #[case::job_always(json!({"templateId": "w", "imageId": "i", "providerApi": "Job", "restartPolicy": "Always"}), "restartPolicy")]
    #[case::job_on_failure(json!({"templateId": "w", "imageId": "i", "providerApi": "Job", "restartPolicy": "OnFailure"}), "restartPolicy")]
    #[case::id_with_space(json!({"templateId": "my worker", "imageId": "i"}), "templateId")]
    #[case::id_with_slash(json!({"templateId": "a/b", "imageId": "i"}), "templateId")]
    #[case::id_too_long(json!({"templateId": "w".repeat(64), "imageId": "i"}), "templateId")]
    #[case::id_ending_in_dash(json!({"templateId": "worker-", "imageId": "i"}), "templateId")]
    #[case::id_with_colon(json!({"templateId": "gpu:a100", "imageId": "i"}), "templateId")]
    #[case::negative_grace(json!({"templateId": "w", "imageId": "i", "terminationGracePeriodSeconds": -1}), "terminationGracePeriodSeconds")]
    #[case::zero_deadline(json!({"templateId": "w", "imageId": "i", "activeDeadlineSeconds": 0}), "activeDeadlineSeconds")]
    #[case::bad_attribute(json!({"templateId": "w", "imageId": "i", "attributes": {"ncpus": 4}}), "attributes")]
    #[case::override_not_object(json!({"templateId": "w", "imageId": "i", "podSpecOverride": [1]}), "podSpecOverride")]
    fn each_problem_names_its_field(#[case] value: Value, #[case] field: &str) {
        let found = problems(value);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, field);
    }

    #[rstest]
    #[case("batch", true)]
    #[case("a-1", true)]
    #[case("-a", false)]
    #[case("a.b", false)]
    #[case("", false)]
    fn dns_labels(#[case] s: &str, #[case] ok: bool) {
        assert_eq!(is_dns1123_label(s), ok);
    }

    #[test]
    fn sixty_four_characters_is_too_long_for_a_label() {
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));
    }
}
