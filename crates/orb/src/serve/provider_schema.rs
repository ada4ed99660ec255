//! The reference broker's provider-schema routes: the settings each provider type takes, as
//! a JSON Schema generated from the Kubernetes provider's own field table
//! ([`orb_k8s::config::provider_settings_schema`]).

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::extract::{ApiQuery, NoQuery};
use super::problem::Problem;
use crate::provider_factory::KUBERNETES_TYPES;

/// The settings schema of one provider type.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderSchema {
    /// The provider type, as config.json's `type` names it.
    #[schema(example = "k8s")]
    pub provider_type: String,
    /// Other spellings of the type orb accepts.
    pub aliases: Vec<String>,
    /// The configured providers of this type (this server serves one).
    pub providers: Vec<String>,
    /// A JSON Schema (draft 2020-12) of the provider entry's `config` block.
    #[schema(value_type = Object)]
    pub schema: Value,
}

/// `GET /api/v1/providers/schemas`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderSchemas {
    pub schemas: Vec<ProviderSchema>,
    pub count: usize,
}

fn is_kubernetes(provider_type: &str) -> bool {
    KUBERNETES_TYPES.contains(&provider_type.trim().to_ascii_lowercase().as_str())
}

fn kubernetes_schema(state: &AppState) -> ProviderSchema {
    let settings = &state.broker().settings;
    ProviderSchema {
        provider_type: KUBERNETES_TYPES[0].to_string(),
        aliases: KUBERNETES_TYPES[1..]
            .iter()
            .map(|t| t.to_string())
            .collect(),
        providers: is_kubernetes(&settings.provider_type)
            .then(|| settings.provider_name.clone())
            .into_iter()
            .collect(),
        schema: orb_k8s::config::provider_settings_schema(),
    }
}

/// The settings schema of every provider type orb has (the Kubernetes provider).
#[utoipa::path(
    get,
    path = "/api/v1/providers/schemas",
    tag = "probes",
    operation_id = "get_all_provider_schemas_api_v1_providers_schemas_get",
    responses(
        (status = 200, description = "One schema per provider type", body = ProviderSchemas),
        (status = 400, description = "An unknown query parameter", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn all_provider_schemas(
    State(state): State<AppState>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
) -> Json<ProviderSchemas> {
    let schemas = vec![kubernetes_schema(&state)];
    Json(ProviderSchemas {
        count: schemas.len(),
        schemas,
    })
}

/// One provider's settings schema, by provider type (`k8s`, `kubernetes`) or by the name of
/// the configured provider.
#[utoipa::path(
    get,
    path = "/api/v1/providers/{name}/schema",
    tag = "probes",
    operation_id = "get_provider_schema_api_v1_providers__name__schema_get",
    params(("name" = String, Path, description = "A provider type (k8s, kubernetes) or the configured provider's name")),
    responses(
        (status = 200, description = "The provider's settings schema", body = ProviderSchema),
        (status = 400, description = "An unknown query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such provider, or one without a settings schema", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn provider_schema(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(NoQuery {}): ApiQuery<NoQuery>,
) -> Result<Json<ProviderSchema>, Problem> {
    let settings = &state.broker().settings;
    let configured = name == settings.provider_name;
    if is_kubernetes(&name) || (configured && is_kubernetes(&settings.provider_type)) {
        return Ok(Json(kubernetes_schema(&state)));
    }
    let detail = if configured {
        format!(
            "provider {name:?} has type {:?}, which has no settings schema; orb's provider \
             type is k8s (GET /api/v1/providers/k8s/schema)",
            settings.provider_type
        )
    } else {
        format!(
            "{name:?} is neither a provider type orb has ({}) nor the configured provider \
             ({:?}); GET /api/v1/providers/schemas lists the schemas",
            KUBERNETES_TYPES.join(", "),
            settings.provider_name
        )
    };
    Err(Problem::not_found(
        "unknown-provider",
        "Unknown provider",
        detail,
    ))
}
