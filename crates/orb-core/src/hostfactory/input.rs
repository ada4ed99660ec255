//! Parsing HostFactory script input. Each parser names the field that was wrong and shows the
//! expected shape.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HfInputError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, HfInputError> {
    Err(HfInputError(message.into()))
}

/// `requestMachines.sh` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMachinesInput {
    pub template_id: String,
    pub machine_count: u32,
}

const REQUEST_SHAPE: &str =
    "expected {\"template\": {\"templateId\": \"<id>\", \"machineCount\": <n>}}";

fn text_field<'a>(object: &'a serde_json::Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| object.get(*k))
}

impl RequestMachinesInput {
    pub fn parse(value: &Value) -> Result<Self, HfInputError> {
        let Some(root) = value.as_object() else {
            return err(format!(
                "request input must be a JSON object; {REQUEST_SHAPE}"
            ));
        };
        let body = match root.get("template") {
            Some(Value::Object(inner)) => inner,
            Some(_) => return err(format!("\"template\" must be an object; {REQUEST_SHAPE}")),
            None => root,
        };
        let template_id = match text_field(body, &["templateId", "template_id"]) {
            Some(Value::String(id)) if !id.trim().is_empty() => id.trim().to_string(),
            Some(Value::String(_)) | None => {
                return err(format!("templateId is missing or empty; {REQUEST_SHAPE}"));
            }
            Some(other) => return err(format!("templateId must be a string, got {other}")),
        };
        // machineCount is the only count key: a template's maxNumber must never be read as
        // the number of machines wanted.
        let machine_count = match text_field(body, &["machineCount", "machine_count"]) {
            None => return err(format!("machineCount is missing; {REQUEST_SHAPE}")),
            Some(raw) => match raw.as_i64() {
                Some(n) if n >= 1 && n <= u32::MAX as i64 => n as u32,
                Some(n) => {
                    return err(format!(
                        "machineCount must be at least 1, got {n}; ask for one or more machines"
                    ));
                }
                None => return err(format!("machineCount must be a whole number, got {raw}")),
            },
        };
        Ok(Self {
            template_id,
            machine_count,
        })
    }
}

/// One host named in a return or a reclaim query: by `machineId`, by `name`, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSelector {
    pub machine_id: Option<String>,
    pub name: Option<String>,
}

impl MachineSelector {
    /// The text to show for this entry.
    pub fn label(&self) -> &str {
        self.machine_id
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or("")
    }
}

const RETURN_SHAPE: &str =
    "expected {\"machines\": [{\"name\": \"<host>\", \"machineId\": \"<id>\"}]}";

fn parse_selectors(value: &Value, required: bool) -> Result<Vec<MachineSelector>, HfInputError> {
    let Some(root) = value.as_object() else {
        return err(format!("input must be a JSON object; {RETURN_SHAPE}"));
    };
    let entries: Vec<&Value> = match root.get("machines") {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(single @ Value::Object(_)) => vec![single],
        Some(Value::Null) | None if !required => vec![],
        Some(Value::Null) | None => return err(format!("\"machines\" is missing; {RETURN_SHAPE}")),
        Some(other) => {
            return err(format!(
                "\"machines\" must be a list, got {other}; {RETURN_SHAPE}"
            ));
        }
    };
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let Some(object) = entry.as_object() else {
            return err(format!(
                "machines[{i}] must be an object with \"name\" or \"machineId\", got {entry}"
            ));
        };
        let pick = |keys: &[&str]| -> Result<Option<String>, HfInputError> {
            match text_field(object, keys) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
                Some(other) => err(format!(
                    "machines[{i}].{} must be a string, got {other}",
                    keys[0]
                )),
            }
        };
        let selector = MachineSelector {
            machine_id: pick(&["machineId", "machine_id"])?,
            name: pick(&["name"])?,
        };
        if selector.machine_id.is_none() && selector.name.is_none() {
            return err(format!(
                "machines[{i}] has neither \"name\" nor \"machineId\"; {RETURN_SHAPE}"
            ));
        }
        out.push(selector);
    }
    if required && out.is_empty() {
        return err(format!(
            "no machines to return: the list is empty; {RETURN_SHAPE}"
        ));
    }
    Ok(out)
}

/// `requestReturnMachines.sh` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnMachinesInput {
    pub machines: Vec<MachineSelector>,
}

impl ReturnMachinesInput {
    pub fn parse(value: &Value) -> Result<Self, HfInputError> {
        Ok(Self {
            machines: parse_selectors(value, true)?,
        })
    }
}

/// `getReturnRequests.sh` input: the hosts HostFactory knows; may be empty (check them all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnRequestsQuery {
    pub machines: Vec<MachineSelector>,
}

impl ReturnRequestsQuery {
    pub fn parse(value: &Value) -> Result<Self, HfInputError> {
        Ok(Self {
            machines: parse_selectors(value, false)?,
        })
    }
}

/// `getRequestStatus.sh` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStatusQuery {
    pub request_ids: Vec<String>,
}

const STATUS_SHAPE: &str = "expected {\"requests\": [{\"requestId\": \"<id>\"}]}";

impl RequestStatusQuery {
    pub fn parse(value: &Value) -> Result<Self, HfInputError> {
        let Some(root) = value.as_object() else {
            return err(format!(
                "status input must be a JSON object; {STATUS_SHAPE}"
            ));
        };
        let entries: Vec<&Value> = match root.get("requests") {
            Some(Value::Array(list)) => list.iter().collect(),
            Some(single @ Value::Object(_)) => vec![single],
            None => return err(format!("\"requests\" is missing; {STATUS_SHAPE}")),
            Some(other) => {
                return err(format!(
                    "\"requests\" must be a list, got {other}; {STATUS_SHAPE}"
                ));
            }
        };
        let mut request_ids = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let id = entry
                .as_object()
                .and_then(|o| text_field(o, &["requestId", "request_id"]));
            match id {
                Some(Value::String(s)) if !s.trim().is_empty() => {
                    request_ids.push(s.trim().to_string())
                }
                _ => return err(format!("requests[{i}] has no requestId; {STATUS_SHAPE}")),
            }
        }
        if request_ids.is_empty() {
            return err(format!("no request ids given; {STATUS_SHAPE}"));
        }
        Ok(Self { request_ids })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::ibm(json!({"template": {"templateId": "t", "machineCount": 3}}), "t", 3)]
    #[case::flat(json!({"templateId": "t", "machineCount": 2}), "t", 2)]
    #[case::snake(json!({"template": {"template_id": "t", "machine_count": 1}}), "t", 1)]
    #[case::max_number_is_not_a_count(json!({"templateId": "t", "maxNumber": 50, "machineCount": 1}), "t", 1)]
    fn request_input_shapes(#[case] value: Value, #[case] id: &str, #[case] count: u32) {
        assert_eq!(
            RequestMachinesInput::parse(&value),
            Ok(RequestMachinesInput {
                template_id: id.into(),
                machine_count: count
            })
        );
    }

    #[rstest]
    #[case::zero(json!({"template": {"templateId": "t", "machineCount": 0}}), "at least 1, got 0")]
    #[case::negative(json!({"template": {"templateId": "t", "machineCount": -4}}), "at least 1, got -4")]
    #[case::fraction(json!({"template": {"templateId": "t", "machineCount": 1.5}}), "whole number")]
    #[case::text_count(json!({"template": {"templateId": "t", "machineCount": "2"}}), "whole number")]
    #[case::no_count(json!({"template": {"templateId": "t"}}), "machineCount is missing")]
    #[case::no_id(json!({"template": {"machineCount": 1}}), "templateId is missing")]
    #[case::blank_id(json!({"template": {"templateId": " ", "machineCount": 1}}), "templateId is missing")]
    #[case::list(json!([]), "must be a JSON object")]
    #[case::template_not_object(json!({"template": "t"}), "must be an object")]
    fn bad_request_input(#[case] value: Value, #[case] needle: &str) {
        let e = RequestMachinesInput::parse(&value).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }

    #[rstest]
    #[case::name_only(json!({"machines": [{"name": "h1"}]}), None, Some("h1"))]
    #[case::id_only(json!({"machines": [{"machineId": "m1"}]}), Some("m1"), None)]
    #[case::both(json!({"machines": [{"machineId": "m1", "name": "h1"}]}), Some("m1"), Some("h1"))]
    #[case::single_object(json!({"machines": {"name": "h1"}}), None, Some("h1"))]
    #[case::snake(json!({"machines": [{"machine_id": "m1"}]}), Some("m1"), None)]
    fn return_input_shapes(
        #[case] value: Value,
        #[case] id: Option<&str>,
        #[case] name: Option<&str>,
    ) {
        let parsed = ReturnMachinesInput::parse(&value).unwrap();
        assert_eq!(
            parsed.machines,
            vec![MachineSelector {
                machine_id: id.map(String::from),
                name: name.map(String::from)
            }]
        );
    }

    #[rstest]
    #[case::empty_list(json!({"machines": []}), "list is empty")]
    #[case::missing(json!({}), "\"machines\" is missing")]
    #[case::anonymous(json!({"machines": [{"ip": "1.2.3.4"}]}), "neither")]
    #[case::number_name(json!({"machines": [{"name": 7}]}), "must be a string")]
    fn bad_return_input(#[case] value: Value, #[case] needle: &str) {
        let e = ReturnMachinesInput::parse(&value).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }

    #[test]
    fn reclaim_query_may_be_empty() {
        assert_eq!(
            ReturnRequestsQuery::parse(&json!({})).unwrap().machines,
            vec![]
        );
    }

    #[rstest]
    #[case::list(json!({"requests": [{"requestId": "a"}, {"request_id": "b"}]}), vec!["a", "b"])]
    #[case::object(json!({"requests": {"requestId": "a"}}), vec!["a"])]
    fn status_query_shapes(#[case] value: Value, #[case] ids: Vec<&str>) {
        assert_eq!(RequestStatusQuery::parse(&value).unwrap().request_ids, ids);
    }

    #[rstest]
    #[case::none(json!({}), "\"requests\" is missing")]
    #[case::empty(json!({"requests": []}), "no request ids")]
    #[case::no_id(json!({"requests": [{}]}), "requests[0] has no requestId")]
    fn bad_status_query(#[case] value: Value, #[case] needle: &str) {
        let e = RequestStatusQuery::parse(&value).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
}
