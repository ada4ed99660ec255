//! Inbound authentication: a Bearer token on every non-public route, checked by a pluggable
//! [`TokenVerifier`] (the Kubernetes TokenReview API in production), the identity mapped to
//! a [`Role`], and the role compared with what the route needs. 401 for a missing or bad
//! token, 403 for too small a role, 503 when the verifier cannot be asked.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::failure::ConfigMistake;

use super::problem::Problem;

/// What a caller may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read templates, machines, requests, events.
    Viewer,
    /// Also request and return machines, cancel requests, purge finished records.
    Operator,
    /// Everything (reserved for administrative routes).
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = ConfigMistake;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "viewer" => Ok(Self::Viewer),
            "operator" => Ok(Self::Operator),
            "admin" => Ok(Self::Admin),
            other => Err(ConfigMistake(format!(
                "role {other:?} is not known; use viewer, operator or admin"
            ))),
        }
    }
}

/// Who a token belongs to, as the verifier reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// e.g. `system:serviceaccount:batch:hf-driver`.
    pub username: String,
    pub groups: Vec<String>,
    /// The role the token itself grants (a signed JWT's `roles` claim); the role mapping by
    /// name still comes first.
    pub claimed_role: Option<Role>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The token is not valid (expired, revoked, wrong audience, garbage).
    #[error("{0}")]
    Rejected(String),
    /// The verifier could not be asked (apiserver down, RBAC missing).
    #[error("{0}")]
    Unavailable(String),
}

pub type VerifyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Identity, VerifyError>> + Send + 'a>>;

/// Checks a bearer token. Implementations: a TokenReview client; stubs in tests.
pub trait TokenVerifier: Send + Sync {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a>;
}

/// Roles by identity: an exact username (for service accounts also `namespace:name`), then
/// `*:name` for a service account in any namespace, then the default (none = refused).
#[derive(Debug, Clone, Default)]
pub struct RoleMap {
    entries: HashMap<String, Role>,
    pub default: Option<Role>,
}

impl RoleMap {
    /// Builds the map from `(key, role)` pairs, e.g. `("batch:hf-driver", "operator")`.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        default: Option<Role>,
    ) -> Result<Self, ConfigMistake> {
        let mut entries = HashMap::new();
        for (key, role) in pairs {
            let role: Role = role
                .parse()
                .map_err(|e| format!("role mapping {key:?}: {e}"))?;
            entries.insert(key.trim().to_string(), role);
        }
        Ok(Self { entries, default })
    }

    /// The mapping by name first, then the role the token claims, then the default.
    pub fn role_for(&self, identity: &Identity) -> Option<Role> {
        if let Some(role) = self.entries.get(&identity.username) {
            return Some(*role);
        }
        if let Some(rest) = identity.username.strip_prefix("system:serviceaccount:")
            && let Some((namespace, name)) = rest.split_once(':')
        {
            let exact = format!("{namespace}:{name}");
            let any = format!("*:{name}");
            if let Some(role) = self.entries.get(&exact).or_else(|| self.entries.get(&any)) {
                return Some(*role);
            }
        }
        identity.claimed_role.or(self.default)
    }
}

/// One `--auth-role WHO=ROLE` flag.
pub fn parse_role_flag(flag: &str) -> Result<(String, Role), ConfigMistake> {
    let Some((who, role)) = flag.rsplit_once('=') else {
        return Err(ConfigMistake(format!(
            "--auth-role {flag:?} has no '='; write WHO=ROLE, e.g. batch:hf-driver=operator"
        )));
    };
    let who = who.trim();
    if who.is_empty() {
        return Err(ConfigMistake(format!(
            "--auth-role {flag:?} names nobody; write WHO=ROLE, e.g. batch:hf-driver=operator"
        )));
    }
    let role = role
        .parse()
        .map_err(|e| format!("--auth-role {flag:?}: {e}"))?;
    Ok((who.to_string(), role))
}

/// The role a route needs; `None` for public routes (probes, metrics, the OpenAPI document,
/// the console's files).
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    const PUBLIC: [&str; 6] = [
        "/livez",
        "/readyz",
        "/health",
        "/metrics",
        "/api/v1/openapi.json",
        "/openapi.json",
    ];
    // The console's files carry no data; the page asks for a token when the API wants one.
    if PUBLIC.contains(&path) || super::console::is_console_path(path) {
        return None;
    }
    // HostFactory's read operations are POSTs (they carry the script's input) but read only.
    const HOSTFACTORY_READS: [&str; 3] = [
        "/api/v1/hostfactory/getAvailableTemplates",
        "/api/v1/hostfactory/getRequestStatus",
        "/api/v1/hostfactory/getReturnRequests",
    ];
    // `POST /api/v1/templates/validate` stores nothing but renders the caller's own Jinja and
    // reads the spec files it names, so it needs the role that may acquire (issue #53).
    let changes_state = *method != Method::GET
        && *method != Method::HEAD
        // Checks the config document it is sent; stores and changes nothing.
        && path != "/api/v1/config/validate"
        // Batch status reads (a POST only because it carries the list of ids).
        && path != "/api/v1/requests/status"
        // Lists the templates as the file has them (the server follows the file anyway).
        && path != "/api/v1/templates/refresh"
        && !HOSTFACTORY_READS.contains(&path);
    Some(if path.starts_with("/api/v1/admin/") {
        // Store-wide operations (a cleanup removes records of every caller's requests).
        Role::Admin
    } else if changes_state && path.starts_with("/api/v1/config/") {
        // Rewriting config.json decides how every later start runs (the reference: admin).
        Role::Admin
    } else if changes_state {
        Role::Operator
    } else {
        Role::Viewer
    })
}

/// Verifier, role map and a short-lived cache of verified tokens.
pub struct Auth {
    verifier: Arc<dyn TokenVerifier>,
    roles: RoleMap,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Identity, Instant)>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("roles", &self.roles)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// `ttl`: how long a verified token is trusted without asking again (0 = always ask).
    pub fn new(verifier: Arc<dyn TokenVerifier>, roles: RoleMap, ttl: Duration) -> Self {
        Self {
            verifier,
            roles,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn identify(&self, token: &str) -> Result<Identity, VerifyError> {
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.retain(|_, (_, at)| now.duration_since(*at) < self.ttl);
            if let Some((identity, _)) = cache.get(token) {
                return Ok(identity.clone());
            }
        }
        let identity = self.verifier.verify(token).await?;
        if !self.ttl.is_zero() {
            self.cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(token.to_string(), (identity.clone(), now));
        }
        Ok(identity)
    }

    /// The caller's role if it suffices for `needed`, else the problem to answer with.
    pub async fn authorize(
        &self,
        authorization: Option<&str>,
        needed: Role,
    ) -> Result<Caller, Problem> {
        let token = match authorization.map(str::trim) {
            Some(value) if value.len() > 7 && value[..7].eq_ignore_ascii_case("bearer ") => {
                value[7..].trim()
            }
            Some(_) => {
                return Err(unauthorized(
                    "the Authorization header is not a Bearer token; send Authorization: Bearer <token>",
                ));
            }
            None => {
                return Err(unauthorized(
                    "this route needs a Bearer token; send Authorization: Bearer <token> (for a service account: kubectl create token <name>)",
                ));
            }
        };
        let identity = self.identify(token).await.map_err(|e| match e {
            VerifyError::Rejected(why) => unauthorized(&format!(
                "the token was not accepted: {why}; get a fresh one"
            )),
            VerifyError::Unavailable(why) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "auth-unavailable",
                "Token could not be checked",
                format!("the token could not be checked: {why}; retry later"),
            ),
        })?;
        let Some(role) = self.roles.role_for(&identity) else {
            return Err(forbidden(format!(
                "{} has no role here; map it to viewer, operator or admin in the auth role mapping",
                identity.username
            )));
        };
        if role < needed {
            return Err(forbidden(format!(
                "{} has role {} but this call needs {}; map it to {} or higher in the auth role mapping",
                identity.username,
                role.as_str(),
                needed.as_str(),
                needed.as_str()
            )));
        }
        Ok(Caller { identity, role })
    }
}

/// Who made a call that passed the token check, and with which role; in the request's
/// extensions for the handlers (`GET /api/v1/me/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub identity: Identity,
    pub role: Role,
}

fn unauthorized(detail: &str) -> Problem {
    Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "Not authenticated",
        detail,
    )
}

fn forbidden(detail: String) -> Problem {
    Problem::new(StatusCode::FORBIDDEN, "forbidden", "Role too small", detail)
}

/// The middleware: public routes pass, the rest need a token with a large enough role.
pub async fn require_token(
    State(auth): State<Arc<Auth>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(needed) = required_role(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let mut request = request;
    let header_value = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match auth.authorize(header_value.as_deref(), needed).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(problem) => {
            let challenge = problem.status == 401;
            let mut response = problem.into_response();
            if challenge {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn sa(namespace: &str, name: &str) -> Identity {
        Identity {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![],
            claimed_role: None,
        }
    }

    #[rstest]
    #[case(sa("batch", "driver"), Some(Role::Operator))]
    #[case(sa("other", "driver"), Some(Role::Viewer))]
    #[case(sa("batch", "boss"), Some(Role::Admin))]
    #[case(sa("batch", "nobody"), None)]
    #[case(Identity { username: "alice".into(), ..Default::default() }, Some(Role::Admin))]
    fn roles_map_exact_then_any_namespace_then_default(
        #[case] who: Identity,
        #[case] role: Option<Role>,
    ) {
        let map = RoleMap::parse(
            [
                ("batch:driver", "operator"),
                ("*:driver", "viewer"),
                ("*:boss", "Admin"),
                ("alice", "admin"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(map.role_for(&who), role);
    }

    #[rstest]
    #[case("batch:hf-driver=operator", Ok(("batch:hf-driver".to_string(), Role::Operator)))]
    #[case("*:dash=Viewer", Ok(("*:dash".to_string(), Role::Viewer)))]
    #[case("alice=admin", Ok(("alice".to_string(), Role::Admin)))]
    #[case("alice", Err("has no '='".to_string()))]
    #[case("=admin", Err("names nobody".to_string()))]
    #[case("alice=root", Err("\"root\" is not known".to_string()))]
    fn role_flags_parse_or_say_what_to_write(
        #[case] flag: &str,
        #[case] want: Result<(String, Role), String>,
    ) {
        match (parse_role_flag(flag), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(got), Err(needle)) => assert!(got.to_string().contains(&needle), "{got}"),
            (got, want) => panic!("{flag}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn an_unknown_role_name_is_refused_with_the_choices() {
        let err = RoleMap::parse([("a:b", "root")], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"root\"") && err.contains("viewer, operator or admin"),
            "{err}"
        );
    }

    #[rstest]
    #[case(Method::GET, "/livez", None)]
    #[case(Method::GET, "/metrics", None)]
    #[case(Method::GET, "/api/v1/openapi.json", None)]
    #[case(Method::GET, "/openapi.json", None)]
    #[case(Method::POST, "/api/v1/requests/status", Some(Role::Viewer))]
    #[case(Method::GET, "/ui/", None)]
    #[case(Method::GET, "/ui/app.js", None)]
    #[case(Method::GET, "/uinfo", Some(Role::Viewer))]
    #[case(Method::DELETE, "/api/v1/requests/req-1", Some(Role::Operator))]
    #[case(Method::GET, "/api/v1/requests", Some(Role::Viewer))]
    #[case(Method::GET, "/api/v1/requests/req-1/events", Some(Role::Viewer))]
    #[case(Method::POST, "/api/v1/templates/validate", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/config/validate", Some(Role::Viewer))]
    #[case(Method::GET, "/api/v1/config/provider.namespace", Some(Role::Viewer))]
    #[case(Method::PUT, "/api/v1/config/provider.namespace", Some(Role::Admin))]
    #[case(Method::POST, "/api/v1/config/save", Some(Role::Admin))]
    #[case(Method::POST, "/api/v1/templates/", Some(Role::Operator))]
    #[case(Method::DELETE, "/api/v1/templates/worker", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/machines/request", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/machines/return", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/requests/req-1/cancel", Some(Role::Operator))]
    #[case(Method::DELETE, "/api/v1/machines/orb-1", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/requests/req-1/purge", Some(Role::Operator))]
    #[case(Method::POST, "/api/v1/admin/database/cleanup", Some(Role::Admin))]
    #[case(Method::POST, "/api/v1/admin/reload-config", Some(Role::Admin))]
    #[case(
        Method::POST,
        "/api/v1/hostfactory/getRequestStatus",
        Some(Role::Viewer)
    )]
    #[case(
        Method::POST,
        "/api/v1/hostfactory/requestMachines",
        Some(Role::Operator)
    )]
    fn each_route_needs_its_role(
        #[case] method: Method,
        #[case] path: &str,
        #[case] role: Option<Role>,
    ) {
        assert_eq!(required_role(&method, path), role);
    }
}
