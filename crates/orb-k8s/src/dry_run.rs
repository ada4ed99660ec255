//! A server-side dry run (`dryRun=All`) of a body orb would create: the apiserver runs
//! defaulting, validation and admission on it and answers as for a real create, but stores
//! nothing. `orb templates validate --server` reports its verdict; the integration tests call
//! the same function.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
pub use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;

use orb_core::ProviderApi;

/// The apiserver's answer to a dry-run create.
#[derive(Debug, Clone, PartialEq)]
pub enum DryRunVerdict {
    /// The object would be created; `object` is what the apiserver would store (with its
    /// defaults filled in).
    Accepted { object: Box<Value> },
    /// The apiserver refused the object (validation, admission, a name conflict, RBAC).
    Rejected {
        code: u16,
        reason: String,
        message: String,
    },
}

impl DryRunVerdict {
    pub fn is_accepted(&self) -> bool {
        matches!(self, Self::Accepted { .. })
    }
}

/// The dry run could not get a verdict at all.
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    #[error(
        "the {kind} body cannot be sent: {problem}; render it with `orb templates render` and \
         fix the template"
    )]
    Body { kind: String, problem: String },
    #[error(
        "the dry run of {kind} {name:?} got no answer from the apiserver: {detail}; check that \
         the apiserver is reachable and the kubeconfig valid"
    )]
    Unreachable {
        kind: String,
        name: String,
        detail: String,
    },
}

/// The API resource orb creates for `kind`.
pub fn api_resource(kind: ProviderApi) -> ApiResource {
    match kind {
        ProviderApi::Pod => ApiResource::erase::<Pod>(&()),
        ProviderApi::Deployment => ApiResource::erase::<Deployment>(&()),
        ProviderApi::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        ProviderApi::Job => ApiResource::erase::<Job>(&()),
    }
}

/// The API resource for a body orb sends, by its `apiVersion` and `kind`: the four workload
/// kinds and the StatefulSet's headless Service.
pub fn api_resource_of(body: &Value) -> Option<ApiResource> {
    let api_version = body.get("apiVersion").and_then(Value::as_str)?;
    let kind = body.get("kind").and_then(Value::as_str)?;
    let resource = match kind {
        "Pod" => api_resource(ProviderApi::Pod),
        "Deployment" => api_resource(ProviderApi::Deployment),
        "StatefulSet" => api_resource(ProviderApi::StatefulSet),
        "Job" => api_resource(ProviderApi::Job),
        "Service" => ApiResource::erase::<Service>(&()),
        _ => return None,
    };
    (resource.api_version == api_version).then_some(resource)
}

/// Submits `body` (a Pod, Deployment, StatefulSet, Job or Service with `metadata.namespace`
/// set) with `dryRun=All` and returns the apiserver's verdict. Nothing is stored.
pub async fn server_dry_run(client: &Client, body: &Value) -> Result<DryRunVerdict, DryRunError> {
    let kind = body
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string();
    let body_problem = |problem: String| DryRunError::Body {
        kind: kind.clone(),
        problem,
    };
    let resource = api_resource_of(body).ok_or_else(|| {
        body_problem(
            "its apiVersion/kind is not one orb creates (v1 Pod, apps/v1 Deployment or \
             StatefulSet, batch/v1 Job, v1 Service)"
                .into(),
        )
    })?;
    let namespace = body
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .ok_or_else(|| body_problem("metadata.namespace is not set".into()))?;
    let object: DynamicObject = serde_json::from_value(body.clone())
        .map_err(|e| body_problem(format!("it is not a Kubernetes object: {e}")))?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, &object).await {
        Ok(created) => Ok(DryRunVerdict::Accepted {
            object: Box::new(serde_json::to_value(created).unwrap_or(Value::Null)),
        }),
        Err(kube::Error::Api(status)) => Ok(DryRunVerdict::Rejected {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        }),
        Err(other) => Err(DryRunError::Unreachable {
            kind,
            name,
            detail: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("v1", "Pod", Some("pods"))]
    #[case("apps/v1", "Deployment", Some("deployments"))]
    #[case("apps/v1", "StatefulSet", Some("statefulsets"))]
    #[case("batch/v1", "Job", Some("jobs"))]
    #[case("v1", "Service", Some("services"))]
    #[case("apps/v1", "Pod", None)]
    #[case("apps/v1", "DaemonSet", None)]
    fn bodies_map_to_the_resource_orb_creates(
        #[case] api_version: &str,
        #[case] kind: &str,
        #[case] plural: Option<&str>,
    ) {
        let body = json!({"apiVersion": api_version, "kind": kind});
        assert_eq!(
            api_resource_of(&body).map(|r| r.plural),
            plural.map(str::to_string)
        );
    }
}
