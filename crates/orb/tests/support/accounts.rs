//! ServiceAccounts with short-lived tokens, for inbound-auth tests.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Creates ServiceAccount `name` and returns a 10-minute token for it.
pub async fn token_for(api: &Api<ServiceAccount>, name: &str) -> String {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {name}: {e}"));
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    api.create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("requesting a token for {name}: {e}"))
        .status
        .and_then(|status| status.token)
        .expect("a token request answers with a token")
}
