//! `orb mcp serve`: the broker for AI assistants, over the Model Context Protocol on stdio.
//! A thin door like the others: each tool ([`tools`]) is one call of the REST API, made in
//! this process on the same router `orb serve` runs (no socket, no token: the caller already
//! runs orb with its config), so a tool's result is exactly the JSON body REST answers, errors
//! included. Built on `rmcp`, the protocol's official Rust SDK.

pub mod tools;

use std::borrow::Cow;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool as McpTool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::cli::McpCommand;
use crate::context;
use crate::failure::{CliResult, Failure};
use crate::serve::{AppState, command, local_router};
use crate::session::{Output, Session};

/// The name the server gives in `initialize`: the reference broker's, so clients configured
/// for it recognise this one.
pub const SERVER_NAME: &str = "open-resource-broker";

/// The protocol revisions with the `initialize` handshake, the oldest being the reference
/// broker's (2024-11-05).
const PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// The largest REST reply a tool passes on (a list of every machine of a big installation
/// fits many times over).
const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;

pub fn run(session: &Session, command: McpCommand) -> CliResult<Output> {
    match command {
        McpCommand::Validate => validate(),
        McpCommand::Serve => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::generic(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(serve(session))
        }
    }
}

/// `orb mcp validate`: the tool list built offline, every schema checked; exit 1 on a problem.
fn validate() -> CliResult<Output> {
    let problems = tools::problems();
    if !problems.is_empty() {
        return Err(Failure::generic(format!(
            "the MCP tool list has {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )));
    }
    let tools: Vec<Value> = tools::TOOLS.iter().map(|t| json!(listed(t))).collect();
    let mut text = serde_json::to_string_pretty(&json!({
        "server": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "tools": tools,
    }))
    .unwrap_or_default();
    text.push('\n');
    Ok(Output::ok(text).note(Some(format!(
        "{} tools, every inputSchema a valid JSON-Schema object",
        tools::TOOLS.len()
    ))))
}

async fn serve(session: &Session) -> CliResult<Output> {
    let state = build_state(session).await?;
    let server = McpServer::new(state);
    tracing::info!("orb mcp serve: speaking MCP on stdio");
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| {
        Failure::generic(format!(
            "the MCP handshake on stdio failed: {e}; orb mcp serve is started by an MCP client \
             that speaks JSON-RPC on its stdin and stdout"
        ))
    })?;
    running
        .waiting()
        .await
        .map_err(|e| Failure::generic(format!("the MCP server stopped abnormally: {e}")))?;
    Ok(Output::default())
}

/// The same state `orb serve` answers from, minus its listeners and background tasks: the
/// configured store and provider, the template file re-read on each call, the provider's
/// template checks. A config that does not build stops here, before the handshake.
async fn build_state(session: &Session) -> CliResult<AppState> {
    let loaded = session.config()?;
    let entry = context::select_provider(&session.global, &loaded)?.clone();
    let provider =
        command::kubernetes_provider(session, &loaded, &entry, "orb mcp serve")?.map(Arc::new);
    let (broker, warnings) = session
        .broker_using(
            &loaded,
            provider
                .clone()
                .map(|p| p as Arc<dyn orb_core::provider::Provider>),
        )
        .await?;
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let options = command::serve_options(&loaded, &entry, None);
    let state = match provider {
        Some(provider) => AppState::with_checks_of(broker, options, provider),
        None => AppState::new(broker, options),
    };
    command::show_templates_and_config(&state, session, entry)?;
    Ok(state)
}

/// A tool as `tools/list` shows it.
fn listed(tool: &tools::Tool) -> McpTool {
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(!tool.writes);
    annotations.destructive_hint = Some(tool.writes && tool.name != "request_machines");
    annotations.open_world_hint = Some(false);
    McpTool::new(tool.name, tool.description, tool.input_schema()).with_annotations(annotations)
}

/// The MCP side: tools in, REST calls on the in-process router out.
#[derive(Clone)]
pub struct McpServer {
    router: Router,
}

impl McpServer {
    pub fn new(state: AppState) -> Self {
        Self {
            router: local_router(state),
        }
    }

    /// Runs tool `name`: its REST call's reply as one text block (and as structured content
    /// when it is an object), an error result when REST refused it or the arguments are wrong.
    pub async fn call(
        &self,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match tools::plan(name, arguments) {
            Ok(call) => call,
            Err(tools::ToolError::Unknown(_)) => {
                return Err(ErrorData::invalid_params(
                    tools::ToolError::Unknown(name.into()).to_string(),
                    None,
                ));
            }
            Err(tools::ToolError::Arguments(message)) => {
                let body = json!({"error": {
                    "code": "INVALID_ARGUMENTS",
                    "message": message,
                    "details": {"tool": name},
                }});
                let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
                result.structured_content = Some(body);
                return Ok(result);
            }
        };
        let mut request = axum::http::Request::builder()
            .method(call.method)
            .uri(&call.uri)
            .header(axum::http::header::ACCEPT, "application/json");
        let body = match &call.body {
            Some(body) => {
                request = request.header(axum::http::header::CONTENT_TYPE, "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        let request = request.body(body).map_err(|e| {
            ErrorData::internal_error(
                format!("cannot build the REST call {}: {e}", call.uri),
                None,
            )
        })?;
        let Ok(reply) = self.router.clone().oneshot(request).await;
        let failed = !reply.status().is_success();
        let bytes = axum::body::to_bytes(reply.into_body(), MAX_REPLY_BYTES)
            .await
            .map_err(|e| {
                ErrorData::internal_error(format!("the REST reply could not be read: {e}"), None)
            })?;
        Ok(tool_result(
            failed,
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
    }
}

/// A REST reply as a tool result: the text block as REST wrote it, and the same JSON as
/// structured content when it is an object. Clients compare the two, so numbers must come
/// back exactly: serde_json's `float_roundtrip` feature (workspace Cargo.toml) makes its
/// parse of a float like `uptime_seconds` correctly rounded (without it, about one in eight
/// 17-digit floats came back one unit in the last place off, and the MCP cycle test failed
/// now and then with "structuredContent differs from the text block").
fn tool_result(failed: bool, text: String) -> CallToolResult {
    let structured = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => Some(object),
        _ => None,
    };
    let mut result = if failed {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = structured;
    result
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A Kubernetes resource broker. list_templates shows what machines can be \
                 requested; request_machines answers with a request id at once; follow it with \
                 get_request_status until its status is complete (or failed); give machines \
                 back with return_machines and follow the return the same way.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            tools::TOOLS.iter().map(listed).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        self.call(&request.name, &arguments).await.map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_content_keeps_every_float_of_the_text_exactly() {
        // Seconds with 17 significant digits, as `uptime_seconds` has them.
        let mut x: f64 = 0.123_456_789_012_345_67;
        let mut off = Vec::new();
        for _ in 0..20_000 {
            x = x * 1.000_003_7 + 0.000_123_9;
            let text = format!("{{\"uptime_seconds\":{x}}}");
            let result = tool_result(false, text);
            let back = result.structured_content.unwrap()["uptime_seconds"]
                .as_f64()
                .unwrap();
            if back.to_bits() != x.to_bits() {
                off.push((x, back));
            }
        }
        assert!(
            off.is_empty(),
            "{} floats changed, first {:?}",
            off.len(),
            off.first()
        );
    }

    #[test]
    fn a_reply_that_is_no_object_has_no_structured_content() {
        assert!(
            tool_result(false, "[1, 2]".into())
                .structured_content
                .is_none()
        );
        assert!(
            tool_result(true, "not json".into())
                .structured_content
                .is_none()
        );
        assert_eq!(
            tool_result(true, r#"{"error": 1}"#.into()).is_error,
            Some(true)
        );
    }
}
