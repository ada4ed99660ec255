//! The reference broker's overview routes: who is calling (`/api/v1/me/`), counts by status
//! (`/api/v1/system/dashboard`) and the provider this server serves (`/api/v1/providers/…`).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use orb_store::{MachineFilter, RequestFilter};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::auth::{Caller, Role};
use super::problem::Problem;

/// `GET /api/v1/me/`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Me {
    /// The token's user (e.g. `system:serviceaccount:batch:hf-driver`); `anonymous` when the
    /// server checks no tokens.
    pub username: String,
    pub groups: Vec<String>,
    /// The caller's role and every role it includes, largest first.
    #[schema(example = json!(["operator", "viewer"]))]
    pub roles: Vec<String>,
    /// False when this server (or this socket) checks no tokens: then every caller may do
    /// everything.
    pub authenticated: bool,
}

fn roles_from(role: Role) -> Vec<String> {
    [Role::Admin, Role::Operator, Role::Viewer]
        .into_iter()
        .filter(|r| *r <= role)
        .map(|r| r.as_str().to_string())
        .collect()
}

fn me_of(caller: Option<Caller>) -> Me {
    match caller {
        Some(c) => Me {
            username: c.identity.username,
            groups: c.identity.groups,
            roles: roles_from(c.role),
            authenticated: true,
        },
        None => Me {
            username: "anonymous".into(),
            groups: vec![],
            roles: roles_from(Role::Admin),
            authenticated: false,
        },
    }
}

/// The caller's identity and roles.
#[utoipa::path(
    get,
    path = "/api/v1/me/",
    tag = "probes",
    operation_id = "get_me_api_v1_me__get",
    responses(
        (status = 200, description = "Who is calling", body = Me),
        (status = 401, description = "No or a bad token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn me(caller: Option<axum::Extension<Caller>>) -> Json<Me> {
    Json(me_of(caller.map(|axum::Extension(c)| c)))
}

/// `GET /api/v1/me`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/me",
    tag = "probes",
    operation_id = "get_me",
    responses(
        (status = 200, description = "Who is calling", body = Me),
        (status = 401, description = "No or a bad token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn me_bare(caller: Option<axum::Extension<Caller>>) -> Json<Me> {
    me(caller).await
}

/// `GET /api/v1/system/dashboard`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Dashboard {
    /// Requests by status (every status, zero included).
    pub requests: BTreeMap<String, u64>,
    /// Machines by status (every status, zero included).
    pub machines: BTreeMap<String, u64>,
    pub total_requests: u64,
    pub total_machines: u64,
    /// Machines whose objects may still exist.
    pub live_machines: u64,
    /// Requests not finished yet.
    pub active_requests: u64,
}

/// Counts of requests and machines by status, from the store (the provider is not asked).
#[utoipa::path(
    get,
    path = "/api/v1/system/dashboard",
    tag = "probes",
    operation_id = "get_dashboard_api_v1_system_dashboard_get",
    responses(
        (status = 200, description = "Counts by status", body = Dashboard),
        (status = 503, description = "Storage unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn dashboard(State(state): State<AppState>) -> Result<Json<Dashboard>, Problem> {
    let broker = state.broker();
    let requests = broker.list_requests(&RequestFilter::default()).await?;
    let machines = broker.list_machines(&MachineFilter::default()).await?;
    let mut by_request: BTreeMap<String, u64> = orb_core::request::RequestStatus::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    for r in &requests {
        *by_request.entry(r.status.as_str().to_string()).or_default() += 1;
    }
    let mut by_machine: BTreeMap<String, u64> = orb_core::machine::MachineStatus::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    for m in &machines {
        *by_machine.entry(m.status.as_str().to_string()).or_default() += 1;
    }
    // The store's `live_only` is the same rule (`MachineStatus::is_live`); no second query.
    let live = machines.iter().filter(|m| m.status.is_live()).count() as u64;
    Ok(Json(Dashboard {
        total_requests: requests.len() as u64,
        total_machines: machines.len() as u64,
        live_machines: live,
        active_requests: requests.iter().filter(|r| !r.status.is_terminal()).count() as u64,
        requests: by_request,
        machines: by_machine,
    }))
}

/// One provider this server serves.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderItem {
    pub name: String,
    #[serde(rename = "type")]
    #[schema(example = "k8s")]
    pub provider_type: String,
    pub enabled: bool,
    pub default: bool,
}

/// `{providers: [...], count}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderList {
    pub providers: Vec<ProviderItem>,
    pub count: usize,
}

fn provider_list(state: &AppState) -> ProviderList {
    let settings = &state.broker().settings;
    ProviderList {
        providers: vec![ProviderItem {
            name: settings.provider_name.clone(),
            provider_type: settings.provider_type.clone(),
            enabled: true,
            default: true,
        }],
        count: 1,
    }
}

/// The provider this server serves (one `orb serve` serves one provider).
#[utoipa::path(
    get,
    path = "/api/v1/providers/",
    tag = "probes",
    operation_id = "list_providers_api_v1_providers__get",
    responses((status = 200, description = "The providers", body = ProviderList))
)]
pub async fn providers(State(state): State<AppState>) -> Json<ProviderList> {
    Json(provider_list(&state))
}

/// `GET /api/v1/providers`: the same as with the trailing slash.
#[utoipa::path(
    get,
    path = "/api/v1/providers",
    tag = "probes",
    operation_id = "list_providers",
    responses((status = 200, description = "The providers", body = ProviderList))
)]
pub async fn providers_bare(State(state): State<AppState>) -> Json<ProviderList> {
    Json(provider_list(&state))
}

/// `GET /api/v1/providers/health`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderHealth {
    /// ok or failing, as `/health` reports the provider.
    pub status: String,
    pub providers: Vec<ProviderHealthItem>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderHealthItem {
    pub name: String,
    #[serde(rename = "type")]
    pub provider_type: String,
    /// ok or failing.
    pub status: String,
    pub detail: Option<String>,
}

/// Whether the provider can be used: the same check as `/health`'s `provider`. 200 either
/// way (the body says), like `/health` when only a dependency is failing.
#[utoipa::path(
    get,
    path = "/api/v1/providers/health",
    tag = "probes",
    operation_id = "check_providers_health_api_v1_providers_health_get",
    responses((status = 200, description = "The provider's health", body = ProviderHealth))
)]
pub async fn providers_health(State(state): State<AppState>) -> (StatusCode, Json<ProviderHealth>) {
    let checks = super::probes::checks(&state).await;
    let check = checks.get("provider");
    let status = check.map_or("failing".to_string(), |c| c.status.clone());
    let settings = &state.broker().settings;
    (
        StatusCode::OK,
        Json(ProviderHealth {
            status: status.clone(),
            providers: vec![ProviderHealthItem {
                name: settings.provider_name.clone(),
                provider_type: settings.provider_type.clone(),
                status,
                detail: check.and_then(|c| c.detail.clone()),
            }],
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::auth::Identity;

    #[test]
    fn a_role_includes_the_smaller_ones() {
        let me = me_of(Some(Caller {
            identity: Identity {
                username: "system:serviceaccount:batch:driver".into(),
                groups: vec!["system:serviceaccounts".into()],
                claimed_role: None,
            },
            role: Role::Operator,
        }));
        assert_eq!(me.roles, ["operator", "viewer"]);
        assert!(me.authenticated);
        let open = me_of(None);
        assert_eq!(open.username, "anonymous");
        assert_eq!(open.roles, ["admin", "operator", "viewer"]);
        assert!(!open.authenticated);
    }
}
