//! A server-side dry run (`dryRun=All`) of a body orb would create: the apiserver runs
//! defaulting, validation and admission on it and answers as for a real create, but stores
//! nothing. `orb templates validate --server` reports its verdict; the integration tests call
//! the same function.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;

use crate::naming::ResourceKind;

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
    Body { kind: ResourceKind, problem: String },
    #[error(
        "the dry run of {kind} {name:?} got no answer from the apiserver: {detail}; check that \
         the apiserver is reachable and the kubeconfig valid"
    )]
    Unreachable {
        kind: ResourceKind,
        name: String,
        detail: String,
    },
}

/// The API resource orb creates for `kind`.
pub fn api_resource(kind: ResourceKind) -> ApiResource {
    match kind {
        ResourceKind::Pod => ApiResource::erase::<Pod>(&()),
        ResourceKind::Deployment => ApiResource::erase::<Deployment>(&()),
        ResourceKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        ResourceKind::Job => ApiResource::erase::<Job>(&()),
    }
}

/// Submits `body` (a full object of `kind`, with `metadata.namespace` set) with
/// `dryRun=All` and returns the apiserver's verdict. Nothing is stored.
pub async fn server_dry_run(
    client: &Client,
    kind: ResourceKind,
    body: &Value,
) -> Result<DryRunVerdict, DryRunError> {
    let body_problem = |problem: String| DryRunError::Body { kind, problem };
    let namespace = body
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .ok_or_else(|| body_problem("metadata.namespace is not set".into()))?;
    let object: DynamicObject = serde_json::from_value(body.clone())
        .map_err(|e| body_problem(format!("it is not a Kubernetes object: {e}")))?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
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
