//! What RBAC refused a ServiceAccount, read from the local control plane's audit log
//! (`logs/audit.log` in its state dir; `tools/control-plane/audit-policy.yaml` records every
//! request made with a ServiceAccount token). A test that runs a program as a ServiceAccount
//! asserts the list is empty, so a missing permission fails it by verb and resource even when
//! the program only logged the 403 and carried on.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::TestCluster;

/// One request the authorizer refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Denial {
    pub verb: String,
    /// API group; empty for the core group.
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests.
    pub namespace: String,
}

impl Denial {
    /// `resource[/subresource]` with the group for non-core resources (`leases.coordination.k8s.io`).
    pub fn resource_name(&self) -> String {
        let mut name = self.resource.clone();
        if !self.api_group.is_empty() {
            name = format!("{name}.{}", self.api_group);
        }
        if !self.subresource.is_empty() {
            name = format!("{name}/{}", self.subresource);
        }
        name
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource_name())?;
        if self.namespace.is_empty() {
            write!(f, " (cluster-wide)")
        } else {
            write!(f, " in namespace {}", self.namespace)
        }
    }
}

/// The audit log of the control plane whose admin kubeconfig is `kubeconfig`.
pub fn audit_log(kubeconfig: &Path) -> PathBuf {
    kubeconfig
        .parent()
        .unwrap_or(Path::new("."))
        .join("logs/audit.log")
}

/// What the audit log says about one account: how many of its requests it recorded, and the
/// distinct ones the authorizer refused.
#[derive(Debug, Default)]
pub struct AuditView {
    pub recorded: usize,
    pub refused: BTreeSet<Denial>,
}

/// [`AuditView`] of `username` from the audit log's text (one JSON event per line).
pub fn view_in(log: &str, username: &str) -> AuditView {
    let events: Vec<Value> = log
        .lines()
        .filter(|line| line.contains(username))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["user"]["username"] == username)
        .collect();
    AuditView {
        recorded: events.len(),
        refused: refusals(&events),
    }
}

/// The distinct requests of `username` that the authorizer refused.
pub fn denials_in(log: &str, username: &str) -> BTreeSet<Denial> {
    view_in(log, username).refused
}

fn refusals(events: &[Value]) -> BTreeSet<Denial> {
    events
        .iter()
        .filter(|event| event["annotations"]["authorization.k8s.io/decision"] == "forbid")
        .map(|event| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let object = &event["objectRef"];
            Denial {
                verb: text(&event["verb"]),
                api_group: text(&object["apiGroup"]),
                resource: text(&object["resource"]),
                subresource: text(&object["subresource"]),
                namespace: text(&object["namespace"]),
            }
        })
        .collect()
}

/// The refused requests of ServiceAccount `namespace:name` so far. Panics when the control
/// plane writes no audit log (one started by an older `cp`).
pub async fn denials(cluster: &TestCluster, namespace: &str, name: &str) -> BTreeSet<Denial> {
    view(cluster, namespace, name).await.refused
}

/// [`AuditView`] of ServiceAccount `namespace:name` so far.
pub async fn view(cluster: &TestCluster, namespace: &str, name: &str) -> AuditView {
    let path = audit_log(&cluster.kubeconfig);
    // The apiserver writes an event once the answer is complete; give the last ones a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut text = String::new();
    // The rotated file (audit-<time>.log) first; the current one may have just been rotated.
    if let Some(dir) = path.parent()
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with("audit-") && file.ends_with(".log") {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
    }
    let current = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the control plane's audit log {} ({e}); restart the control plane with \
             this checkout's tools/control-plane/cp (`cp down; cp up`), which records \
             ServiceAccount requests there",
            path.display()
        )
    });
    text.push_str(&current);
    view_in(&text, &format!("system:serviceaccount:{namespace}:{name}"))
}

/// What to say when RBAC refused ServiceAccount `namespace:name` the requests `refused`
/// (None when it refused nothing); `granted_by` names where its permissions come from.
pub fn refusal_report(
    refused: &BTreeSet<Denial>,
    namespace: &str,
    name: &str,
    granted_by: &str,
) -> Option<String> {
    (!refused.is_empty()).then(|| {
        format!(
            "RBAC refused ServiceAccount {namespace}:{name} {} request(s): {}; {granted_by} does \
             not grant what the program needs",
            refused.len(),
            refused
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })
}

/// Panics, naming each verb and resource, when RBAC refused ServiceAccount `namespace:name`
/// anything.
pub async fn assert_nothing_refused(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
    granted_by: &str,
) {
    let seen = view(cluster, namespace, name).await;
    // An empty list means something only if the log records this account at all.
    assert!(
        seen.recorded > 0,
        "the audit log {} recorded no request of ServiceAccount {namespace}:{name}; is the \
         control plane's audit policy (tools/control-plane/audit-policy.yaml) in place?",
        audit_log(&cluster.kubeconfig).display()
    );
    if let Some(report) = refusal_report(&seen.refused, namespace, name, granted_by) {
        panic!("{report}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"kind":"Event","verb":"watch","user":{"username":"system:serviceaccount:t:orb"},"objectRef":{"resource":"pods","namespace":"t","apiVersion":"v1"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":""}}
{"kind":"Event","verb":"list","user":{"username":"system:serviceaccount:t:orb"},"objectRef":{"resource":"pods","namespace":"t","apiVersion":"v1"},"responseStatus":{"code":200},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"kind":"Event","verb":"patch","user":{"username":"system:serviceaccount:t:orb"},"objectRef":{"resource":"leases","namespace":"t","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}
{"kind":"Event","verb":"watch","user":{"username":"system:serviceaccount:t:orb"},"objectRef":{"resource":"pods","namespace":"t","apiVersion":"v1"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}
{"kind":"Event","verb":"create","user":{"username":"system:serviceaccount:t:orb-other"},"objectRef":{"resource":"tokenreviews","apiGroup":"authentication.k8s.io"},"annotations":{"authorization.k8s.io/decision":"forbid"}}
not json
"#;

    #[test]
    fn only_refused_requests_of_that_account_count_once_each() {
        let found: Vec<String> = denials_in(LOG, "system:serviceaccount:t:orb")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "patch leases.coordination.k8s.io in namespace t",
                "watch pods in namespace t"
            ]
        );
    }

    #[test]
    fn every_recorded_request_of_the_account_is_counted() {
        assert_eq!(view_in(LOG, "system:serviceaccount:t:orb").recorded, 4);
        assert_eq!(view_in(LOG, "system:serviceaccount:t:nobody").recorded, 0);
    }

    #[test]
    fn cluster_scoped_refusals_say_so() {
        let found: Vec<String> = denials_in(LOG, "system:serviceaccount:t:orb-other")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            ["create tokenreviews.authentication.k8s.io (cluster-wide)"]
        );
    }
}
