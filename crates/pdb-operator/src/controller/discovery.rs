//! Discovery of the optional APIs: the Workload API (`scheduling.k8s.io/v1beta1` serving both
//! `workloads` and `podgroups`) and LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`). Run at start
//! and periodically, so an API installed later turns its controller on without a restart.

use kube::Client;
use serde::Serialize;

/// Whether one optional API is served, and what discovery saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApiPresence {
    pub served: bool,
    /// Human-readable detail for logs and `/readyz`.
    pub detail: String,
}

/// Result of one discovery pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovered {
    pub workload_api: ApiPresence,
    pub leader_worker_set: ApiPresence,
}

pub const WORKLOAD_GROUP_VERSION: &str = "scheduling.k8s.io/v1beta1";
pub const LWS_GROUP_VERSION: &str = "leaderworkerset.x-k8s.io/v1";

/// Which of `needed` resources the group/version serves; the detail names what is missing.
pub fn presence(
    group_version: &str,
    served: Result<Vec<String>, String>,
    needed: &[&str],
) -> ApiPresence {
    match served {
        Err(e) => ApiPresence {
            served: false,
            detail: format!("{group_version} not served ({e}); controller off"),
        },
        Ok(names) => {
            let missing: Vec<&str> = needed
                .iter()
                .copied()
                .filter(|n| !names.iter().any(|s| s == n))
                .collect();
            if missing.is_empty() {
                ApiPresence {
                    served: true,
                    detail: format!(
                        "{group_version} serves {}; controller on",
                        needed.join(", ")
                    ),
                }
            } else {
                ApiPresence {
                    served: false,
                    detail: format!(
                        "{group_version} does not serve {}; controller off",
                        missing.join(", ")
                    ),
                }
            }
        }
    }
}

async fn resources(client: &Client, gv: &str) -> Result<Vec<String>, String> {
    match client.list_api_group_resources(gv).await {
        Ok(list) => Ok(list.resources.into_iter().map(|r| r.name).collect()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err("404 from discovery".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// One discovery pass.
pub async fn discover(client: &Client) -> Discovered {
    Discovered {
        workload_api: presence(
            WORKLOAD_GROUP_VERSION,
            resources(client, WORKLOAD_GROUP_VERSION).await,
            &["workloads", "podgroups"],
        ),
        leader_worker_set: presence(
            LWS_GROUP_VERSION,
            resources(client, LWS_GROUP_VERSION).await,
            &["leaderworkersets"],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_workload_resources_are_needed() {
        let p = presence(
            WORKLOAD_GROUP_VERSION,
            Ok(vec!["workloads".into()]),
            &["workloads", "podgroups"],
        );
        assert!(!p.served);
        assert!(
            p.detail.contains("does not serve podgroups"),
            "{}",
            p.detail
        );
        let p = presence(
            WORKLOAD_GROUP_VERSION,
            Ok(vec![
                "workloads".into(),
                "podgroups".into(),
                "podgroups/status".into(),
            ]),
            &["workloads", "podgroups"],
        );
        assert!(p.served, "{}", p.detail);
    }

    #[test]
    fn unserved_group_says_why() {
        let p = presence(
            LWS_GROUP_VERSION,
            Err("404 from discovery".into()),
            &["leaderworkersets"],
        );
        assert!(!p.served);
        assert!(
            p.detail.contains("not served (404 from discovery)"),
            "{}",
            p.detail
        );
    }
}
