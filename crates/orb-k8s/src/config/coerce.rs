//! Turning one raw value (JSON from a file or template, or text from an env var) into the
//! canonical JSON the typed model deserialises, according to the field's [`FieldKind`].
//!
//! Coercion is lenient the way pydantic-settings is ("240" is a number, "false" a boolean),
//! but never guesses across kinds: a JSON number is not accepted where a version string is
//! expected, because `1.30` would silently become "1.3".

use k8s_openapi::api::core::v1::Toleration;
use serde_json::Value;

use super::schema::FieldKind;

/// A value as it arrived from a source.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    Json(Value),
    /// Env var text: never JSON-decoded unless the field's kind is a list or an object.
    Text(String),
}

/// Why a value was refused, and how to write it instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problem: String,
    pub fix: String,
}

fn refuse(problem: impl Into<String>, fix: impl Into<String>) -> Refusal {
    Refusal {
        problem: problem.into(),
        fix: fix.into(),
    }
}

fn show(raw: &Raw) -> String {
    match raw {
        Raw::Json(v) => v.to_string(),
        Raw::Text(t) => format!("{t:?}"),
    }
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// Optional fields treat an empty env var (`ORB_K8S_CONTEXT=`) and JSON `null` as "unset".
fn is_unset(raw: &Raw) -> bool {
    matches!(raw, Raw::Json(Value::Null)) || matches!(raw, Raw::Text(t) if t.trim().is_empty())
}

pub fn coerce(kind: FieldKind, raw: &Raw) -> Result<Value, Refusal> {
    match kind {
        FieldKind::Bool => coerce_bool(raw),
        FieldKind::OptionalBool if is_unset(raw) => Ok(Value::Null),
        FieldKind::OptionalBool => coerce_bool(raw),
        FieldKind::String => coerce_string(raw),
        FieldKind::OptionalString if is_unset(raw) => Ok(Value::Null),
        FieldKind::OptionalString => coerce_string(raw),
        FieldKind::UInt { min, max } => coerce_uint(raw, min, max),
        FieldKind::Float { min } => coerce_float(raw, min),
        FieldKind::StringList if is_unset(raw) => Ok(Value::Null),
        FieldKind::StringList => coerce_string_list(raw),
        FieldKind::StringMap if is_unset(raw) => Ok(Value::Null),
        FieldKind::StringMap => coerce_string_map(raw),
        FieldKind::Tolerations if is_unset(raw) => Ok(Value::Null),
        FieldKind::Tolerations => coerce_tolerations(raw),
    }
}

fn coerce_bool(raw: &Raw) -> Result<Value, Refusal> {
    let parsed = match raw {
        Raw::Json(Value::Bool(b)) => Some(*b),
        Raw::Json(Value::String(s)) | Raw::Text(s) => parse_bool(s),
        Raw::Json(Value::Number(n)) => match n.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        Raw::Json(_) => None,
    };
    parsed.map(Value::Bool).ok_or_else(|| {
        refuse(
            format!("{} is not a boolean", show(raw)),
            "write true or false (1 and 0 are accepted too)",
        )
    })
}

fn coerce_string(raw: &Raw) -> Result<Value, Refusal> {
    match raw {
        Raw::Json(Value::String(s)) | Raw::Text(s) => Ok(Value::String(s.clone())),
        Raw::Json(Value::Number(_)) => Err(refuse(
            format!("{} is a number, not a string", show(raw)),
            format!("quote it: \"{}\"", show(raw)),
        )),
        Raw::Json(other) => Err(refuse(
            format!("{other} is not a string"),
            "write a quoted string",
        )),
    }
}

fn coerce_uint(raw: &Raw, min: u64, max: u64) -> Result<Value, Refusal> {
    let range_fix = if max >= u64::from(u32::MAX) {
        format!("use a whole number of at least {min}")
    } else {
        format!("use a whole number from {min} to {max}")
    };
    let number: Option<f64> = match raw {
        Raw::Json(Value::Number(n)) => n.as_f64(),
        Raw::Json(Value::String(s)) | Raw::Text(s) => s.trim().parse::<f64>().ok(),
        Raw::Json(_) => None,
    };
    let Some(number) = number.filter(|n| n.is_finite() && n.fract() == 0.0) else {
        return Err(refuse(
            format!("{} is not a whole number", show(raw)),
            range_fix,
        ));
    };
    if number < 0.0 {
        return Err(refuse(format!("{} is negative", show(raw)), range_fix));
    }
    if number < min as f64 || number > max as f64 {
        return Err(refuse(format!("{} is out of range", show(raw)), range_fix));
    }
    Ok(Value::from(number as u64))
}

/// The largest number of seconds a float field accepts (about 317 years; well below what a
/// `Duration` can hold, and far beyond any sensible timeout).
const MAX_FLOAT_SECONDS: f64 = 1e10;

fn coerce_float(raw: &Raw, min: f64) -> Result<Value, Refusal> {
    let fix = format!("use a number of at least {min}, such as 1.5");
    let number: Option<f64> = match raw {
        Raw::Json(Value::Number(n)) => n.as_f64(),
        Raw::Json(Value::String(s)) | Raw::Text(s) => s.trim().parse::<f64>().ok(),
        Raw::Json(_) => None,
    };
    let Some(number) = number.filter(|n| n.is_finite()) else {
        return Err(refuse(format!("{} is not a number", show(raw)), fix));
    };
    if number < min {
        let problem = if number < 0.0 {
            format!("{} is negative", show(raw))
        } else {
            format!("{} is below {min}", show(raw))
        };
        return Err(refuse(problem, fix));
    }
    // Every float field is a number of seconds that becomes a `Duration`; one too large for
    // it would panic there (`Duration::from_secs_f64`), so it is refused here instead.
    if number > MAX_FLOAT_SECONDS {
        return Err(refuse(
            format!("{} seconds is too long to be a duration", show(raw)),
            format!("use a number of seconds from {min} to {MAX_FLOAT_SECONDS:e}"),
        ));
    }
    Ok(serde_json::json!(number))
}

/// Env text for list/object fields must be JSON; a file/template value already is.
fn decode_structured(raw: &Raw, example: &str) -> Result<Value, Refusal> {
    match raw {
        Raw::Json(v) => Ok(v.clone()),
        Raw::Text(t) => serde_json::from_str(t.trim()).map_err(|e| {
            refuse(
                format!("{t:?} is not valid JSON ({e})"),
                format!("write JSON, for example '{example}'"),
            )
        }),
    }
}

fn coerce_string_list(raw: &Raw) -> Result<Value, Refusal> {
    const EXAMPLE: &str = r#"["team-a","team-b"]"#;
    let value = decode_structured(raw, EXAMPLE)?;
    match &value {
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(value),
        _ => Err(refuse(
            format!("{value} is not a list of strings"),
            format!("write a JSON list of strings, for example '{EXAMPLE}'"),
        )),
    }
}

fn coerce_string_map(raw: &Raw) -> Result<Value, Refusal> {
    const EXAMPLE: &str = r#"{"workload":"orb"}"#;
    let value = decode_structured(raw, EXAMPLE)?;
    match &value {
        Value::Object(map) if map.values().all(Value::is_string) => Ok(value),
        _ => Err(refuse(
            format!("{value} is not an object of string values"),
            format!("write a JSON object with quoted values, for example '{EXAMPLE}'"),
        )),
    }
}

fn coerce_tolerations(raw: &Raw) -> Result<Value, Refusal> {
    const EXAMPLE: &str = r#"[{"key":"orb","operator":"Exists","effect":"NoSchedule"}]"#;
    let value = decode_structured(raw, EXAMPLE)?;
    let Value::Array(items) = &value else {
        return Err(refuse(
            format!("{value} is not a list of tolerations"),
            format!("write a JSON list, for example '{EXAMPLE}'"),
        ));
    };
    let mut normalised = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let toleration: Toleration = serde_json::from_value(item.clone()).map_err(|e| {
            refuse(
                format!("entry {index} ({item}) is not a toleration: {e}"),
                format!("use Kubernetes toleration fields, for example '{EXAMPLE}'"),
            )
        })?;
        normalised.push(serde_json::to_value(toleration).map_err(|e| {
            refuse(
                format!("entry {index} cannot be stored: {e}"),
                "report this bug",
            )
        })?);
    }
    Ok(Value::Array(normalised))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    const U: FieldKind = FieldKind::UInt { min: 1, max: 100 };

    #[rstest]
    #[case::bool_text_true(FieldKind::Bool, Raw::Text("TRUE".into()), json!(true))]
    #[case::bool_text_one(FieldKind::Bool, Raw::Text("1".into()), json!(true))]
    #[case::bool_text_zero(FieldKind::Bool, Raw::Text("0".into()), json!(false))]
    #[case::bool_json(FieldKind::Bool, Raw::Json(json!(false)), json!(false))]
    #[case::opt_bool_empty(FieldKind::OptionalBool, Raw::Text("".into()), json!(null))]
    #[case::opt_string_null(FieldKind::OptionalString, Raw::Json(json!(null)), json!(null))]
    #[case::string_text_digits(FieldKind::String, Raw::Text("123".into()), json!("123"))]
    #[case::uint_text(U, Raw::Text("42".into()), json!(42))]
    #[case::uint_integral_float(U, Raw::Json(json!(42.0)), json!(42))]
    #[case::float_text(FieldKind::Float { min: 0.0 }, Raw::Text("2.5".into()), json!(2.5))]
    #[case::float_int(FieldKind::Float { min: 0.0 }, Raw::Json(json!(5)), json!(5.0))]
    #[case::list_text(FieldKind::StringList, Raw::Text(r#"["a","b"]"#.into()), json!(["a", "b"]))]
    #[case::map_text(FieldKind::StringMap, Raw::Text(r#"{"a":"b"}"#.into()), json!({"a": "b"}))]
    #[case::tolerations_text(
        FieldKind::Tolerations,
        Raw::Text(r#"[{"key":"k","operator":"Exists"}]"#.into()),
        json!([{"key": "k", "operator": "Exists"}])
    )]
    fn accepted(#[case] kind: FieldKind, #[case] raw: Raw, #[case] expected: Value) {
        assert_eq!(coerce(kind, &raw), Ok(expected));
    }

    #[rstest]
    #[case::bool_word(FieldKind::Bool, Raw::Text("maybe".into()), "\"maybe\" is not a boolean")]
    #[case::bool_empty(FieldKind::Bool, Raw::Text("".into()), "\"\" is not a boolean")]
    #[case::string_number(FieldKind::String, Raw::Json(json!(1.3)), "1.3 is a number, not a string")]
    #[case::uint_negative(U, Raw::Text("-5".into()), "\"-5\" is negative")]
    #[case::uint_fraction(U, Raw::Json(json!(2.5)), "2.5 is not a whole number")]
    #[case::uint_range(U, Raw::Json(json!(101)), "101 is out of range")]
    #[case::uint_word(U, Raw::Text("ten".into()), "\"ten\" is not a whole number")]
    #[case::float_negative(FieldKind::Float { min: 0.0 }, Raw::Json(json!(-1.0)), "-1.0 is negative")]
    #[case::float_nan(FieldKind::Float { min: 0.0 }, Raw::Text("NaN".into()), "\"NaN\" is not a number")]
    // Found by the config_layers fuzz target: 1e300 passed validation and then panicked in
    // `Duration::from_secs_f64` when the provider read `retry_base()`.
    #[case::float_beyond_duration(FieldKind::Float { min: 0.0 }, Raw::Json(json!(1e300)), "1e+300 seconds is too long")]
    #[case::float_text_beyond_limit(FieldKind::Float { min: 0.0 }, Raw::Text("2e10".into()), "\"2e10\" seconds is too long")]
    #[case::list_csv(FieldKind::StringList, Raw::Text("a,b".into()), "\"a,b\" is not valid JSON")]
    #[case::list_of_numbers(FieldKind::StringList, Raw::Json(json!([1])), "[1] is not a list of strings")]
    #[case::map_number_value(FieldKind::StringMap, Raw::Json(json!({"a": 1})), "{\"a\":1} is not an object of string values")]
    #[case::toleration_bad_type(FieldKind::Tolerations, Raw::Json(json!([{"key": 5}])), "entry 0 ({\"key\":5}) is not a toleration")]
    fn refused(#[case] kind: FieldKind, #[case] raw: Raw, #[case] problem_start: &str) {
        let refusal = coerce(kind, &raw).expect_err("must be refused");
        assert!(
            refusal.problem.starts_with(problem_start),
            "{:?} does not start with {problem_start:?}",
            refusal.problem
        );
        assert!(!refusal.fix.is_empty());
    }
}
