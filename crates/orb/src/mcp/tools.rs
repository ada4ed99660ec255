//! The MCP tools: the reference broker's tool names and argument names, each one call of the
//! REST API. A tool checks its arguments against its own schema (so a model that sent a wrong
//! name or type is told which, before anything runs), then becomes a method, a URI and a JSON
//! body; what REST answers is the tool's result. The table is pure: `orb mcp validate` and
//! the unit tests build it without a config or a cluster.

use axum::http::Method;
use serde_json::{Map, Value, json};

/// A JSON type an argument may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    /// A whole number, 0 or more.
    Count,
    Boolean,
    Strings,
    Object,
}

impl Kind {
    fn schema(self) -> Value {
        match self {
            Kind::String => json!({"type": "string"}),
            Kind::Count => json!({"type": "integer", "minimum": 0}),
            Kind::Boolean => json!({"type": "boolean"}),
            Kind::Strings => json!({"type": "array", "items": {"type": "string"}}),
            Kind::Object => json!({"type": "object"}),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::Count => "a whole number (0 or more)",
            Kind::Boolean => "true or false",
            Kind::Strings => "an array of strings",
            Kind::Object => "a JSON object",
        }
    }

    fn accepts(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Count => value.as_u64().is_some(),
            Kind::Boolean => value.is_boolean(),
            Kind::Strings => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            Kind::Object => value.is_object(),
        }
    }
}

/// One argument of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub description: &'static str,
}

const fn param(name: &'static str, kind: Kind, description: &'static str) -> Param {
    Param {
        name,
        kind,
        description,
    }
}

const LIMIT: Param = param("limit", Kind::Count, "Page size, 1 to 1000 (default 50).");
const OFFSET: Param = param("offset", Kind::Count, "Items to skip before the page.");
const CURSOR: Param = param(
    "cursor",
    Kind::String,
    "The next_cursor of the previous page.",
);

/// A tool: its name, what it does, its arguments, and which of them it needs.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    pub params: &'static [Param],
    pub required: &'static [&'static str],
    /// Whether the tool changes anything (MCP's `readOnlyHint` is its negation).
    pub writes: bool,
}

/// Every tool, in the order `tools/list` shows them.
pub const TOOLS: &[Tool] = &[
    Tool {
        name: "check_provider_health",
        description: "Whether the provider can reach its Kubernetes cluster (GET /api/v1/providers/health).",
        params: &[param(
            "provider",
            Kind::String,
            "Accepted for the reference broker's clients; this broker runs one provider.",
        )],
        required: &[],
        writes: false,
    },
    Tool {
        name: "list_providers",
        description: "The provider this broker runs, with its type and health (GET /api/v1/providers/).",
        params: &[],
        required: &[],
        writes: false,
    },
    Tool {
        name: "list_templates",
        description: "The machine templates machines can be requested from (GET /api/v1/templates/).",
        params: &[
            param(
                "provider_name",
                Kind::String,
                "Only templates of this provider.",
            ),
            param(
                "provider_api",
                Kind::String,
                "Only templates of this handler: Pod, Deployment, StatefulSet or Job.",
            ),
            LIMIT,
            OFFSET,
            CURSOR,
        ],
        required: &[],
        writes: false,
    },
    Tool {
        name: "get_template",
        description: "One template, with every field and any problem that keeps it from being used (GET /api/v1/templates/{template_id}).",
        params: &[param("template_id", Kind::String, "The template's id.")],
        required: &["template_id"],
        writes: false,
    },
    Tool {
        name: "request_machines",
        description: "Request machines from a template; answers at once with the request id to follow with get_request_status (POST /api/v1/machines/request).",
        params: &[
            param(
                "template_id",
                Kind::String,
                "The template to create the machines from (list_templates lists them).",
            ),
            param(
                "requested_count",
                Kind::Count,
                "How many machines, at least 1 (machine_count and count are accepted too).",
            ),
            param("machine_count", Kind::Count, "The same as requested_count."),
            param("count", Kind::Count, "The same as requested_count."),
            param(
                "additional_data",
                Kind::Object,
                "Accepted for the reference broker's clients; not used.",
            ),
        ],
        required: &["template_id"],
        writes: true,
    },
    Tool {
        name: "get_request_status",
        description: "Where requests stand now, with their machines; the cluster is asked about unfinished ones (POST /api/v1/requests/status, or GET /api/v1/requests/{request_id}/status for one request_id).",
        params: &[
            param(
                "request_ids",
                Kind::Strings,
                "The requests to report on, 1 to 1000, answered in this order.",
            ),
            param(
                "request_id",
                Kind::String,
                "One request, instead of request_ids.",
            ),
            param(
                "verbose",
                Kind::Boolean,
                "Accepted for the reference broker's clients; machines are always included.",
            ),
        ],
        required: &[],
        writes: false,
    },
    Tool {
        name: "list_requests",
        description: "Requests, newest first, a page at a time (GET /api/v1/requests/).",
        params: &[
            param(
                "status",
                Kind::String,
                "Only requests in this status, e.g. in_progress or complete.",
            ),
            param(
                "request_type",
                Kind::String,
                "Only acquire or only return requests.",
            ),
            param(
                "template_id",
                Kind::String,
                "Only requests of this template.",
            ),
            LIMIT,
            OFFSET,
            CURSOR,
        ],
        required: &[],
        writes: false,
    },
    Tool {
        name: "list_return_requests",
        description: "Return requests, newest first (GET /api/v1/requests/return).",
        params: &[LIMIT, OFFSET, CURSOR],
        required: &[],
        writes: false,
    },
    Tool {
        name: "return_machines",
        description: "Give machines back: by id or host name, every live machine of one acquire request, or all; answers with the return request to follow (POST /api/v1/machines/return).",
        params: &[
            param(
                "machine_ids",
                Kind::Strings,
                "Machines to give back, by machine id or host name.",
            ),
            param(
                "request_id",
                Kind::String,
                "Give back every live machine of this acquire request.",
            ),
            param(
                "all",
                Kind::Boolean,
                "Give back every live machine this broker manages.",
            ),
            param(
                "force",
                Kind::Boolean,
                "Accepted for the reference broker's clients; a return always follows the handler's rules.",
            ),
        ],
        required: &[],
        writes: true,
    },
    Tool {
        name: "cancel_request",
        description: "Cancel an unfinished acquire request: what it created is deleted (DELETE /api/v1/requests/{request_id}).",
        params: &[
            param("request_id", Kind::String, "The acquire request."),
            param("reason", Kind::String, "Why; logged with the cancel."),
        ],
        required: &["request_id"],
        writes: true,
    },
    Tool {
        name: "list_machines",
        description: "Machines, newest first, a page at a time (GET /api/v1/machines/).",
        params: &[
            param(
                "status",
                Kind::String,
                "Only machines in this status, e.g. running.",
            ),
            param(
                "request_id",
                Kind::String,
                "Only the machines of this acquire request.",
            ),
            param(
                "all",
                Kind::Boolean,
                "false: only machines whose objects may still exist (default: all).",
            ),
            LIMIT,
            OFFSET,
            CURSOR,
        ],
        required: &[],
        writes: false,
    },
    Tool {
        name: "get_machine_status",
        description: "One machine as the cluster shows it now, by machine id or host name (GET /api/v1/machines/{machine_id}/status).",
        params: &[param(
            "machine_id",
            Kind::String,
            "The machine's id or host name.",
        )],
        required: &["machine_id"],
        writes: false,
    },
];

impl Tool {
    /// The tool's `inputSchema`: a JSON-Schema object naming every argument.
    pub fn input_schema(&self) -> Map<String, Value> {
        let properties: Map<String, Value> = self
            .params
            .iter()
            .map(|p| {
                let mut schema = p.kind.schema();
                schema["description"] = Value::from(p.description);
                (p.name.to_string(), schema)
            })
            .collect();
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        schema.insert("required".into(), json!(self.required));
        schema.insert("additionalProperties".into(), json!(false));
        schema
    }

    fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Every problem with `args` against this tool's arguments, in one message.
    fn check(&self, args: &Map<String, Value>) -> Result<(), String> {
        let mut problems = Vec::new();
        for (name, value) in args {
            match self.param(name) {
                None => problems.push(format!("unknown argument `{name}` ({})", self.takes())),
                // A null is an argument left out.
                Some(_) if value.is_null() => {}
                Some(p) if !p.kind.accepts(value) => {
                    problems.push(format!("`{name}` must be {}, not {value}", p.kind.name()))
                }
                Some(_) => {}
            }
        }
        for name in self.required {
            if args.get(*name).is_none_or(Value::is_null) {
                problems.push(format!("`{name}` is required"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("{}: {}", self.name, problems.join("; ")))
        }
    }

    fn takes(&self) -> String {
        if self.params.is_empty() {
            "it takes no arguments".into()
        } else {
            let names: Vec<&str> = self.params.iter().map(|p| p.name).collect();
            format!("it takes {}", names.join(", "))
        }
    }
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

/// One REST call a tool makes.
#[derive(Debug, Clone, PartialEq)]
pub struct RestCall {
    pub method: Method,
    /// Path and query, encoded.
    pub uri: String,
    pub body: Option<Value>,
}

/// Why a tool call was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("no tool named `{0}`; tools/list lists the tools this server has")]
    Unknown(String),
    #[error("{0}")]
    Arguments(String),
}

/// The REST call of tool `name` with `args`; nothing is sent when the arguments are wrong.
pub fn plan(name: &str, args: &Map<String, Value>) -> Result<RestCall, ToolError> {
    let tool = find(name).ok_or_else(|| ToolError::Unknown(name.to_string()))?;
    tool.check(args).map_err(ToolError::Arguments)?;
    let arg = |key: &str| args.get(key).filter(|v| !v.is_null());
    let text = |key: &str| arg(key).and_then(Value::as_str);
    let get = |path: String| RestCall {
        method: Method::GET,
        uri: path,
        body: None,
    };
    let call = match name {
        "check_provider_health" => get("/api/v1/providers/health".into()),
        "list_providers" => get("/api/v1/providers/".into()),
        "list_templates" => get(with_query(
            "/api/v1/templates/",
            args,
            &["provider_name", "provider_api", "limit", "offset", "cursor"],
        )),
        "get_template" => get(format!(
            "/api/v1/templates/{}",
            segment(text("template_id").unwrap_or_default())
        )),
        "request_machines" => {
            let counts: Vec<(&str, &Value)> = ["requested_count", "machine_count", "count"]
                .into_iter()
                .filter_map(|k| arg(k).map(|v| (k, v)))
                .collect();
            let count = match counts.as_slice() {
                [(_, count)] => (*count).clone(),
                [] => {
                    return Err(ToolError::Arguments(
                        "request_machines: say how many machines with `requested_count`".into(),
                    ));
                }
                several => {
                    let names: Vec<&str> = several.iter().map(|(k, _)| *k).collect();
                    return Err(ToolError::Arguments(format!(
                        "request_machines: give the count once, not as {}",
                        names.join(" and ")
                    )));
                }
            };
            let mut body = json!({"template_id": text("template_id"), "count": count});
            if let Some(data) = arg("additional_data") {
                body["additional_data"] = data.clone();
            }
            RestCall {
                method: Method::POST,
                uri: "/api/v1/machines/request".into(),
                body: Some(body),
            }
        }
        "get_request_status" => match (arg("request_ids"), text("request_id")) {
            (Some(ids), None) => RestCall {
                method: Method::POST,
                uri: "/api/v1/requests/status".into(),
                body: Some(json!({
                    "request_ids": ids,
                    "verbose": arg("verbose").cloned().unwrap_or(json!(false)),
                })),
            },
            (None, Some(id)) => get(format!("/api/v1/requests/{}/status", segment(id))),
            (Some(_), Some(_)) => {
                return Err(ToolError::Arguments(
                    "get_request_status: give `request_ids` or `request_id`, not both".into(),
                ));
            }
            (None, None) => {
                return Err(ToolError::Arguments(
                    "get_request_status: name the requests with `request_ids` (or one \
                     `request_id`); list_requests lists them"
                        .into(),
                ));
            }
        },
        "list_requests" => get(with_query(
            "/api/v1/requests/",
            args,
            &[
                "status",
                "request_type",
                "template_id",
                "limit",
                "offset",
                "cursor",
            ],
        )),
        "list_return_requests" => get(with_query(
            "/api/v1/requests/return",
            args,
            &["limit", "offset", "cursor"],
        )),
        "return_machines" => {
            let mut body = Map::new();
            for (from, to) in [
                ("machine_ids", "machine_ids"),
                ("request_id", "request_id"),
                ("all", "all_machines"),
                ("force", "force"),
            ] {
                if let Some(value) = arg(from) {
                    body.insert(to.into(), value.clone());
                }
            }
            RestCall {
                method: Method::POST,
                uri: "/api/v1/machines/return".into(),
                body: Some(Value::Object(body)),
            }
        }
        "cancel_request" => get(with_query(
            &format!(
                "/api/v1/requests/{}",
                segment(text("request_id").unwrap_or_default())
            ),
            args,
            &["reason"],
        ))
        .with_method(Method::DELETE),
        "list_machines" => get(with_query(
            "/api/v1/machines/",
            args,
            &["status", "request_id", "all", "limit", "offset", "cursor"],
        )),
        "get_machine_status" => get(format!(
            "/api/v1/machines/{}/status",
            segment(text("machine_id").unwrap_or_default())
        )),
        other => return Err(ToolError::Unknown(other.to_string())),
    };
    Ok(call)
}

impl RestCall {
    fn with_method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }
}

/// `path` with the given arguments as its query, in the order named.
fn with_query(path: &str, args: &Map<String, Value>, keys: &[&str]) -> String {
    let pairs: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            let value = match args.get(*k)? {
                Value::Null => return None,
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some(format!("{k}={}", segment(&value)))
        })
        .collect();
    if pairs.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

/// `text` percent-encoded to stand alone in a path segment or a query value: an id such as
/// `../templates` or `a?b` names that id, never another route.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Every problem with the tool table: names, schemas and the arguments they require.
pub fn problems() -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for tool in TOOLS {
        if !seen.insert(tool.name) {
            problems.push(format!("tool `{}` is listed twice", tool.name));
        }
        let valid_name = (1..=64).contains(&tool.name.len())
            && tool
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid_name {
            problems.push(format!(
                "tool name `{}` is not 1 to 64 letters, digits, `_`, `-` or `.`",
                tool.name
            ));
        }
        if tool.description.trim().is_empty() {
            problems.push(format!("tool `{}` has no description", tool.name));
        }
        let schema = Value::Object(tool.input_schema());
        if schema["type"] != "object" || !schema["properties"].is_object() {
            problems.push(format!(
                "tool `{}`: inputSchema is not a JSON-Schema object",
                tool.name
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for p in tool.params {
            if !names.insert(p.name) {
                problems.push(format!(
                    "tool `{}`: argument `{}` is listed twice",
                    tool.name, p.name
                ));
            }
            if schema["properties"][p.name]["type"].as_str().is_none() {
                problems.push(format!(
                    "tool `{}`: argument `{}` has no type",
                    tool.name, p.name
                ));
            }
        }
        for required in tool.required {
            if tool.param(required).is_none() {
                problems.push(format!(
                    "tool `{}` requires `{required}`, which is not one of its arguments",
                    tool.name
                ));
            }
        }
        // Each tool must plan a call from its required arguments alone (or say what else
        // it needs), never fall through to "unknown tool".
        let minimal: Map<String, Value> = tool
            .required
            .iter()
            .map(|r| {
                let value = match tool.param(r).map(|p| p.kind) {
                    Some(Kind::Count) => json!(1),
                    Some(Kind::Boolean) => json!(true),
                    Some(Kind::Strings) => json!(["x"]),
                    Some(Kind::Object) => json!({}),
                    _ => json!("x"),
                };
                (r.to_string(), value)
            })
            .collect();
        if let Err(ToolError::Unknown(_)) = plan(tool.name, &minimal) {
            problems.push(format!("tool `{}` has no REST call", tool.name));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn the_table_has_no_problems() {
        assert_eq!(problems(), Vec::<String>::new());
    }

    #[test]
    fn the_tools_carry_the_reference_names() {
        let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        for name in [
            "list_templates",
            "get_template",
            "request_machines",
            "get_request_status",
            "return_machines",
            "list_return_requests",
            "list_machines",
            "list_requests",
            "cancel_request",
            "check_provider_health",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
    }

    #[test]
    fn a_schema_names_every_argument_with_its_type_and_the_required_ones() {
        let schema = Value::Object(find("request_machines").unwrap().input_schema());
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["template_id"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["requested_count"]["type"], "integer");
        assert_eq!(
            schema["properties"]["template_id"]["description"],
            "The template to create the machines from (list_templates lists them)."
        );
    }

    #[test]
    fn request_machines_takes_any_one_of_the_count_names() {
        for name in ["requested_count", "machine_count", "count"] {
            let call = plan(
                "request_machines",
                &args(json!({"template_id": "w", name: 3})),
            )
            .unwrap();
            assert_eq!(call.method, Method::POST);
            assert_eq!(call.uri, "/api/v1/machines/request");
            assert_eq!(call.body, Some(json!({"template_id": "w", "count": 3})));
        }
        let two = plan(
            "request_machines",
            &args(json!({"template_id": "w", "count": 3, "machine_count": 3})),
        );
        assert_eq!(
            two,
            Err(ToolError::Arguments(
                "request_machines: give the count once, not as machine_count and count".into()
            ))
        );
        let none = plan("request_machines", &args(json!({"template_id": "w"})));
        assert!(matches!(none, Err(ToolError::Arguments(m)) if m.contains("requested_count")));
    }

    #[test]
    fn wrong_names_types_and_missing_arguments_are_all_named_at_once() {
        let err = plan(
            "request_machines",
            &args(json!({"templat_id": "w", "count": "3"})),
        )
        .unwrap_err();
        let ToolError::Arguments(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains("unknown argument `templat_id`"),
            "{message}"
        );
        assert!(
            message.contains("it takes template_id, requested_count"),
            "{message}"
        );
        assert!(
            message.contains("`count` must be a whole number"),
            "{message}"
        );
        assert!(message.contains("`template_id` is required"), "{message}");
        let negative = plan(
            "request_machines",
            &args(json!({"template_id": "w", "count": -1})),
        );
        assert!(matches!(negative, Err(ToolError::Arguments(m)) if m.contains("`count` must be")));
        assert_eq!(
            plan("reboot_machines", &Map::new()),
            Err(ToolError::Unknown("reboot_machines".into()))
        );
    }

    #[test]
    fn a_null_argument_is_one_left_out() {
        let call = plan("list_machines", &args(json!({"status": null, "limit": 5}))).unwrap();
        assert_eq!(call.uri, "/api/v1/machines/?limit=5");
        let missing = plan("get_template", &args(json!({"template_id": null})));
        assert!(matches!(missing, Err(ToolError::Arguments(m)) if m.contains("is required")));
    }

    #[test]
    fn ids_are_encoded_so_they_cannot_reach_another_route() {
        let call = plan(
            "get_template",
            &args(json!({"template_id": "../requests/x?all=1"})),
        )
        .unwrap();
        assert_eq!(call.uri, "/api/v1/templates/..%2Frequests%2Fx%3Fall%3D1");
        let cancel = plan(
            "cancel_request",
            &args(json!({"request_id": "req-1", "reason": "no longer needed & done"})),
        )
        .unwrap();
        assert_eq!(cancel.method, Method::DELETE);
        assert_eq!(
            cancel.uri,
            "/api/v1/requests/req-1?reason=no%20longer%20needed%20%26%20done"
        );
    }

    #[test]
    fn status_goes_by_batch_for_ids_and_by_path_for_one_id() {
        let batch = plan(
            "get_request_status",
            &args(json!({"request_ids": ["req-1", "req-2"]})),
        )
        .unwrap();
        assert_eq!(batch.uri, "/api/v1/requests/status");
        assert_eq!(
            batch.body,
            Some(json!({"request_ids": ["req-1", "req-2"], "verbose": false}))
        );
        let one = plan("get_request_status", &args(json!({"request_id": "req-1"}))).unwrap();
        assert_eq!(one.method, Method::GET);
        assert_eq!(one.uri, "/api/v1/requests/req-1/status");
        assert!(plan("get_request_status", &Map::new()).is_err());
        assert!(
            plan(
                "get_request_status",
                &args(json!({"request_ids": ["a"], "request_id": "b"}))
            )
            .is_err()
        );
    }

    #[test]
    fn return_machines_speaks_the_rest_body() {
        let call = plan(
            "return_machines",
            &args(json!({"machine_ids": ["m-1"], "force": true})),
        )
        .unwrap();
        assert_eq!(call.uri, "/api/v1/machines/return");
        assert_eq!(
            call.body,
            Some(json!({"machine_ids": ["m-1"], "force": true}))
        );
        let all = plan("return_machines", &args(json!({"all": true}))).unwrap();
        assert_eq!(all.body, Some(json!({"all_machines": true})));
    }

    #[test]
    fn list_queries_keep_only_given_arguments() {
        let call = plan(
            "list_requests",
            &args(json!({"status": "complete", "limit": 10, "cursor": "20"})),
        )
        .unwrap();
        assert_eq!(
            call.uri,
            "/api/v1/requests/?status=complete&limit=10&cursor=20"
        );
        let bare = plan("list_templates", &Map::new()).unwrap();
        assert_eq!(bare.uri, "/api/v1/templates/");
    }
}
