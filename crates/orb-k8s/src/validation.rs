//! Kubernetes name and label syntax rules, ported from apimachinery's `validation.go`.
//!
//! Each `*_problems` function returns the list of violated rules (empty = valid), worded so
//! that it can be appended to a message naming the offending field. No regex engine is needed:
//! the grammars are small enough to check character by character.

/// Longest DNS-1123 label (namespace names, pod host names, label name parts).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (most object names, label key prefixes).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// Longest label value and the name part of a qualified name.
pub const LABEL_VALUE_MAX_LEN: usize = 63;

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without the length rule.
fn matches_dns1123_label_grammar(value: &str) -> bool {
    let (Some(first), Some(last)) = (value.chars().next(), value.chars().last()) else {
        return false;
    };
    is_lower_alnum(first)
        && is_lower_alnum(last)
        && value.chars().all(|c| is_lower_alnum(c) || c == '-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` without the length rule.
fn matches_qualified_name_grammar(value: &str) -> bool {
    let (Some(first), Some(last)) = (value.chars().next(), value.chars().last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Rules for a DNS-1123 label (apimachinery `IsDNS1123Label`): at most 63 characters, lowercase
/// letters, digits and '-', starting and ending with a letter or digit.
pub fn dns1123_label_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LEN {
        problems.push(format!(
            "must be no more than {DNS1123_LABEL_MAX_LEN} characters (has {})",
            value.len()
        ));
    }
    if !matches_dns1123_label_grammar(value) {
        problems.push(
            "must consist of lowercase letters, digits and '-', and start and end with a \
             letter or digit (e.g. 'my-name' or '123-abc')"
                .to_string(),
        );
    }
    problems
}

/// Rules for a DNS-1123 subdomain (apimachinery `IsDNS1123Subdomain`): at most 253 characters,
/// one or more DNS-1123 labels joined by '.'.
pub fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        problems.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX_LEN} characters (has {})",
            value.len()
        ));
    }
    if !value.split('.').all(matches_dns1123_label_grammar) {
        problems.push(
            "must consist of lowercase letters, digits, '-' and '.', and each dot-separated \
             part must start and end with a letter or digit (e.g. 'example.com')"
                .to_string(),
        );
    }
    problems
}

/// Rules for a qualified name such as a label key (apimachinery `IsQualifiedName`): an optional
/// DNS-1123 subdomain prefix and '/', then a name of at most 63 characters made of letters,
/// digits, '-', '_' and '.', starting and ending with a letter or digit.
pub fn qualified_name_problems(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return vec!["the prefix before '/' must not be empty".to_string()];
            }
            let prefix_problems = dns1123_subdomain_problems(prefix);
            if !prefix_problems.is_empty() {
                return prefix_problems
                    .into_iter()
                    .map(|p| format!("prefix part {p}"))
                    .collect();
            }
            *name
        }
        _ => {
            return vec![
                "must be a name with an optional DNS subdomain prefix and a single '/' \
                 (e.g. 'example.com/my-name')"
                    .to_string(),
            ];
        }
    };
    let mut problems = Vec::new();
    if name.is_empty() {
        problems.push("name part must not be empty".to_string());
        return problems;
    }
    if name.len() > LABEL_VALUE_MAX_LEN {
        problems.push(format!(
            "name part must be no more than {LABEL_VALUE_MAX_LEN} characters (has {})",
            name.len()
        ));
    }
    if !matches_qualified_name_grammar(name) {
        problems.push(
            "name part must consist of letters, digits, '-', '_' or '.', and start and end \
             with a letter or digit (e.g. 'MyName', 'my.name' or '123-abc')"
                .to_string(),
        );
    }
    problems
}

/// Rules for a label value (apimachinery `IsValidLabelValue`): empty, or at most 63 characters
/// of letters, digits, '-', '_' and '.', starting and ending with a letter or digit.
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LEN {
        problems.push(format!(
            "must be no more than {LABEL_VALUE_MAX_LEN} characters (has {})",
            value.len()
        ));
    }
    if !value.is_empty() && !matches_qualified_name_grammar(value) {
        problems.push(
            "must be empty or consist of letters, digits, '-', '_' or '.', and start and end \
             with a letter or digit (e.g. 'MyValue', 'my_value' or '12345')"
                .to_string(),
        );
    }
    problems
}

pub fn is_dns1123_label(value: &str) -> bool {
    dns1123_label_problems(value).is_empty()
}

pub fn is_dns1123_subdomain(value: &str) -> bool {
    dns1123_subdomain_problems(value).is_empty()
}

pub fn is_qualified_name(value: &str) -> bool {
    qualified_name_problems(value).is_empty()
}

pub fn is_valid_label_value(value: &str) -> bool {
    label_value_problems(value).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::simple("orb", true)]
    #[case::digits_first("123-abc", true)]
    #[case::single_char("a", true)]
    #[case::max_len(&"a".repeat(63), true)]
    #[case::too_long(&"a".repeat(64), false)]
    #[case::empty("", false)]
    #[case::uppercase("Orb", false)]
    #[case::leading_hyphen("-orb", false)]
    #[case::trailing_hyphen("orb-", false)]
    #[case::dot("orb.io", false)]
    #[case::underscore("orb_io", false)]
    fn dns1123_label(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(is_dns1123_label(value), valid, "{value:?}");
    }

    #[rstest]
    #[case::single_label("orb", true)]
    #[case::dotted("orb.example.com", true)]
    #[case::max_len(&format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)), true)]
    #[case::too_long(&format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(62)), false)]
    #[case::empty("", false)]
    #[case::slash("orb.io/x", false)]
    #[case::space("orb io", false)]
    #[case::double_dot("orb..io", false)]
    #[case::trailing_dot("orb.io.", false)]
    #[case::part_trailing_hyphen("orb-.io", false)]
    #[case::uppercase("ORB.io", false)]
    fn dns1123_subdomain(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(is_dns1123_subdomain(value), valid, "{value:?}");
    }

    #[rstest]
    #[case::plain("workload", true)]
    #[case::mixed_case("NodeType", true)]
    #[case::prefixed("kubernetes.io/arch", true)]
    #[case::dots_underscores("a.b_c-d", true)]
    #[case::empty("", false)]
    #[case::empty_prefix("/arch", false)]
    #[case::empty_name("kubernetes.io/", false)]
    #[case::two_slashes("a/b/c", false)]
    #[case::bad_prefix("Kubernetes.IO/arch", false)]
    #[case::name_too_long(&"a".repeat(64), false)]
    #[case::trailing_dot("arch.", false)]
    fn qualified_name(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(is_qualified_name(value), valid, "{value:?}");
    }

    #[rstest]
    #[case::empty("", true)]
    #[case::plain("orb", true)]
    #[case::request_id("req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f", true)]
    #[case::mixed("My_Value.1", true)]
    #[case::max_len(&"a".repeat(63), true)]
    #[case::too_long(&"a".repeat(64), false)]
    #[case::space("my value", false)]
    #[case::slash("a/b", false)]
    #[case::leading_dash("-a", false)]
    fn label_value(#[case] value: &str, #[case] valid: bool) {
        assert_eq!(is_valid_label_value(value), valid, "{value:?}");
    }

    #[test]
    fn problems_name_the_length_that_was_found() {
        let problems = dns1123_label_problems(&"a".repeat(70));
        assert_eq!(
            problems,
            vec!["must be no more than 63 characters (has 70)"]
        );
    }
}
