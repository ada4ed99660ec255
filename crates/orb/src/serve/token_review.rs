//! The production [`TokenVerifier`]: asks the Kubernetes apiserver (TokenReview API) whether a
//! bearer token is valid and whose it is. orb's own credentials need `tokenreviews: create`
//! (the `system:auth-delegator` ClusterRole grants it).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;

use super::auth::{Identity, TokenVerifier, VerifyError, VerifyFuture};

pub struct TokenReviewVerifier {
    client: kube::Client,
    /// Audiences the token must be meant for; empty = the apiserver's own.
    audiences: Vec<String>,
}

impl TokenReviewVerifier {
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        Self { client, audiences }
    }

    async fn review(&self, token: &str) -> Result<Identity, VerifyError> {
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| match &e {
                kube::Error::Api(status) if status.code == 401 || status.code == 403 => {
                    VerifyError::Unavailable(format!(
                        "orb may not create TokenReviews ({e}); bind orb's service account to the \
                         ClusterRole system:auth-delegator"
                    ))
                }
                _ => VerifyError::Unavailable(format!("TokenReview failed: {e}")),
            })?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(VerifyError::Rejected(
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "the apiserver does not recognise it".into()),
            ));
        }
        let user = status.user.unwrap_or_default();
        let username = user.username.filter(|u| !u.is_empty()).ok_or_else(|| {
            VerifyError::Rejected("the apiserver accepted it but named no user".into())
        })?;
        Ok(Identity {
            username,
            groups: user.groups.unwrap_or_default(),
            claimed_role: None,
        })
    }
}

impl TokenVerifier for TokenReviewVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> VerifyFuture<'a> {
        Box::pin(self.review(token))
    }
}
