//! Small repairs of a merged native body that the apiserver would otherwise refuse for a
//! reason nobody means: the rollout fields `maxSurge`/`maxUnavailable` are int-or-percent,
//! and the apiserver reads a string there only as a percentage, so `"0"` (as written in the
//! seed's Deployment example) is rejected. A digit-only string in those fields is sent as the
//! number it spells.

use serde_json::Value;

/// JSON pointers of the int-or-percent rollout fields.
const INT_OR_PERCENT_FIELDS: [&str; 3] = [
    "/spec/strategy/rollingUpdate/maxSurge",
    "/spec/strategy/rollingUpdate/maxUnavailable",
    "/spec/updateStrategy/rollingUpdate/maxUnavailable",
];

/// Turns digit-only strings in int-or-percent fields into numbers.
pub fn normalize_int_or_percent(body: &mut Value) {
    for pointer in INT_OR_PERCENT_FIELDS {
        if let Some(slot) = body.pointer_mut(pointer)
            && let Some(number) = slot
                .as_str()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
        {
            *slot = Value::from(number);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::digit_string_becomes_a_number(json!("0"), json!(0))]
    #[case::percent_stays(json!("25%"), json!("25%"))]
    #[case::number_stays(json!(2), json!(2))]
    #[case::other_text_stays_for_the_apiserver_to_judge(json!("1.5"), json!("1.5"))]
    fn deployment_rollout_fields(#[case] raw: Value, #[case] expected: Value) {
        let mut body = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": raw.clone(), "maxUnavailable": raw}}}});
        normalize_int_or_percent(&mut body);
        assert_eq!(
            body["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            expected
        );
        assert_eq!(
            body["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            expected
        );
    }

    #[test]
    fn statefulset_rollout_field_and_absent_fields() {
        let mut body =
            json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "3"}}}});
        normalize_int_or_percent(&mut body);
        assert_eq!(
            body["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
            3
        );
        let mut untouched = json!({"spec": {"replicas": 1}});
        normalize_int_or_percent(&mut untouched);
        assert_eq!(untouched, json!({"spec": {"replicas": 1}}));
    }
}
