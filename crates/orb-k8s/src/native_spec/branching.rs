//! Flags native-spec sources that branch on the request id. Validate and render can only
//! preview a request with a fresh id, so a spec that decides something on the id (or on the
//! names built from it) may send another body at acquire than the one that was checked.
//! Writing the id into the body (`{{ request_id }}`, `{{ name | upper }}`) is fine; testing
//! it (`{% if %}`, `{% for %}`, `{% set %}`, a comparison, `in`, `is`, an index) is flagged.

use serde_json::Value;

use super::NativeSources;
use super::source::{INLINE_LABEL, OperatorSpec};

/// Context variables whose values come from the request id.
const PER_REQUEST: &[&str] = &["request_id", "name", "resource_name", "machine_id"];
/// Words and operators that make an expression decide rather than print.
const DECIDING: &[&str] = &[
    "if", "in", "is", "and", "or", "not", "==", "!=", "<", ">", "[",
];

/// One warning per source (and variable) that branches on the request id, naming the source
/// and line but not quoting it.
pub fn request_id_branches(sources: &NativeSources) -> Vec<String> {
    let mut found = Vec::new();
    let default = &sources.default_spec;
    scan_text(&default.label, &default.text, &mut found);
    match &sources.operator {
        Some(OperatorSpec::File { path, text }) => {
            scan_text(&path.display().to_string(), text, &mut found);
        }
        Some(OperatorSpec::Inline(value)) => scan_value(value, "", &mut found),
        None => {}
    }
    found.dedup();
    found
        .into_iter()
        .map(|(origin, line, variable)| {
            format!(
                "{origin}{} branches on {variable}, which comes from \
                 the request id: validate and render preview a fresh id, so an acquire may \
                 send another body than the one checked; use {variable} only to name things",
                line.map_or_else(String::new, |l| format!(", line {l},"))
            )
        })
        .collect()
}

type Found = (String, Option<usize>, &'static str);

fn scan_value(value: &Value, path: &str, found: &mut Vec<Found>) {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::String(s) => scan_text(&format!("{INLINE_LABEL} at {path}"), s, found),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                scan_value(item, &format!("{path}[{i}]"), found);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                scan_text(&format!("{INLINE_LABEL} at {}", at(key)), key, found);
                scan_value(item, &at(key), found);
            }
        }
        _ => {}
    }
}

/// Scans every `{% … %}` and `{{ … }}` of `text`.
fn scan_text(origin: &str, text: &str, found: &mut Vec<Found>) {
    let mut rest = text;
    let mut offset = 0;
    while let Some(start) = rest.find(['{']) {
        let open = &rest[start..];
        let close = if open.starts_with("{%") {
            "%}"
        } else if open.starts_with("{{") {
            "}}"
        } else {
            offset += start + 1;
            rest = &rest[start + 1..];
            continue;
        };
        let Some(len) = open[2..].find(close) else {
            return;
        };
        let inner = &open[2..2 + len];
        let statement = close == "%}";
        if let Some(variable) = deciding_on_request(inner, statement) {
            let line = text[..offset + start].matches('\n').count() + 1;
            found.push((origin.to_string(), Some(line), variable));
        }
        offset += start + 2 + len + 2;
        rest = &rest[start + 2 + len + 2..];
    }
}

/// The per-request variable `expr` decides on, if any. A statement decides on every variable
/// it names; an expression when it also holds a [`DECIDING`] word.
fn deciding_on_request(expr: &str, statement: bool) -> Option<&'static str> {
    let tokens = tokens(expr);
    let variable = PER_REQUEST
        .iter()
        .find(|v| tokens.iter().any(|t| t == *v))?;
    (statement || tokens.iter().any(|t| DECIDING.contains(&t.as_str()))).then_some(*variable)
}

/// Identifiers (not attributes, not inside string literals) and operators of `expr`.
fn tokens(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    let mut after_dot = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                }
                after_dot = false;
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut word = c.to_string();
                while let Some(&d) = chars.peek() {
                    if !(d.is_alphanumeric() || d == '_') {
                        break;
                    }
                    word.push(d);
                    chars.next();
                }
                if !after_dot {
                    out.push(word);
                }
                after_dot = false;
            }
            '.' => after_dot = true,
            '=' | '!' | '<' | '>' => {
                let mut op = c.to_string();
                if chars.peek() == Some(&'=') {
                    op.push('=');
                    chars.next();
                }
                out.push(op);
                after_dot = false;
            }
            '[' => {
                out.push("[".into());
                after_dot = false;
            }
            _ => after_dot = after_dot && c.is_whitespace(),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native_spec::SpecSource;
    use rstest::rstest;
    use serde_json::json;

    fn inline(spec: Value) -> NativeSources {
        NativeSources {
            default_spec: SpecSource {
                label: "built-in specs/pod/default.json".into(),
                text: crate::native_spec::builtin_default_spec(orb_core::ProviderApi::Pod).into(),
            },
            operator: Some(OperatorSpec::Inline(spec)),
        }
    }

    #[rstest]
    #[case::if_tag(
        "{% if request_id.endswith('0') %}ops-admin{% else %}default{% endif %}",
        Some("request_id")
    )]
    #[case::conditional_expression(
        "{{ 'ops-admin' if name[-1] == '0' else 'default' }}",
        Some("name")
    )]
    #[case::lookup_by_id("{{ {'a': 1}[request_id] }}", Some("request_id"))]
    #[case::set_then_test("{% set n = machine_id %}", Some("machine_id"))]
    #[case::membership("{{ '7' in resource_name }}", Some("resource_name"))]
    #[case::printing_is_fine("{{ request_id }}-{{ name | upper }}", None)]
    #[case::attribute_of_the_same_name("{% if template.name == 'x' %}a{% endif %}", None)]
    #[case::quoted_words_are_not_variables("{% if image == 'request_id' %}a{% endif %}", None)]
    #[case::other_variables("{% if replicas > 3 %}big{% endif %}", None)]
    fn branches_on_the_request_id_are_flagged(#[case] text: &str, #[case] expected: Option<&str>) {
        let warnings = request_id_branches(&inline(json!({"spec": {"serviceAccountName": text}})));
        match expected {
            None => assert!(warnings.is_empty(), "{warnings:?}"),
            Some(variable) => {
                assert_eq!(warnings.len(), 1, "{warnings:?}");
                assert!(
                    warnings[0].starts_with(&format!(
                        "inline native_spec at spec.serviceAccountName, line 1, \
                         branches on {variable}, which comes from the request id"
                    )),
                    "{warnings:?}"
                );
            }
        }
    }

    #[test]
    fn a_file_is_flagged_with_its_line_and_without_its_text() {
        let sources = NativeSources {
            operator: Some(OperatorSpec::File {
                path: "/etc/orb/ml.yaml".into(),
                text: "spec:\n  a: 1\n  b: {% if request_id < 'req-8' %}secret-one{% endif %}\n"
                    .into(),
            }),
            ..inline(json!({}))
        };
        let warnings = request_id_branches(&sources);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("/etc/orb/ml.yaml, line 3, branches on request_id"),
            "{warnings:?}"
        );
        assert!(!warnings[0].contains("secret-one"), "{warnings:?}");
    }

    #[test]
    fn the_built_in_defaults_do_not_branch_on_the_request_id() {
        for api in [
            orb_core::ProviderApi::Pod,
            orb_core::ProviderApi::Deployment,
            orb_core::ProviderApi::StatefulSet,
            orb_core::ProviderApi::Job,
        ] {
            let mut sources = inline(json!({}));
            sources.default_spec.text = crate::native_spec::builtin_default_spec(api).into();
            assert_eq!(request_id_branches(&sources), Vec::<String>::new());
        }
    }
}
