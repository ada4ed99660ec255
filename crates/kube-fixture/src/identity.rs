//! The identity orb has in cluster tests: ServiceAccount `orb-broker` bound to exactly the rules
//! of docs/rbac.yaml (which a unit test of orb-k8s holds equal to orb's RBAC table), with a
//! token from the TokenRequest API in a kubeconfig file of its own. A 403 in a test run as it
//! is a permission orb needs and does not document. The admin client stays for what a test
//! arranges itself (nodes, misbehaving pods, drains).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::{TestCluster, TestNamespace, client_from};

/// docs/rbac.yaml, the RBAC orb ships.
pub const RBAC_YAML: &str = include_str!("../../../docs/rbac.yaml");
/// The ServiceAccount orb runs as in every test namespace.
pub const SERVICE_ACCOUNT: &str = "orb-broker";
/// The opt-in features docs/rbac.yaml gives commented rules for, by their config key.
pub const OPT_IN_FEATURES: [&str; 4] = [
    "node_watch_enabled",
    "events_watch_enabled",
    "inbound_auth_enabled",
    "leader_election",
];

/// The rules of docs/rbac.yaml: the Role's, the ClusterRole's, and per opt-in feature the
/// commented rules (as JSON rule lists).
pub struct DocumentedRbac {
    pub role: Value,
    pub cluster_role: Value,
    pub opt_in: BTreeMap<String, Value>,
}

/// Parses docs/rbac.yaml; panics naming what is missing.
pub fn documented() -> DocumentedRbac {
    let docs: Vec<Value> = serde_saphyr::from_multiple(RBAC_YAML).expect("docs/rbac.yaml parses");
    let rules_of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("docs/rbac.yaml has no {kind}"))["rules"]
            .clone()
    };
    // Each opt-in block is a comment line starting with the feature's key, then the rule lines
    // commented out ("  # - apiGroups: ..." and their continuation lines).
    let mut blocks: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for text in RBAC_YAML.lines().filter_map(|l| l.strip_prefix("  # ")) {
        if let Some(feature) = OPT_IN_FEATURES.iter().find(|f| text.starts_with(*f)) {
            current = Some(feature);
        } else if let Some(feature) = current
            && (text.starts_with("- ") || text.starts_with("  "))
        {
            let block = blocks.entry(feature.to_string()).or_default();
            block.push_str(text);
            block.push('\n');
        }
    }
    let opt_in = OPT_IN_FEATURES
        .iter()
        .map(|f| {
            let yaml = blocks
                .get(*f)
                .unwrap_or_else(|| panic!("docs/rbac.yaml gives no commented rule for {f}"));
            (f.to_string(), serde_saphyr::from_str(yaml).unwrap())
        })
        .collect();
    DocumentedRbac {
        role: rules_of("Role"),
        cluster_role: rules_of("ClusterRole"),
        opt_in,
    }
}

/// Every (API group, resource, verb) a rule list grants, one per entry ("pods/eviction" is a
/// resource of its own to RBAC), so lists that group rules differently compare equal.
pub fn grants(rules: &Value) -> BTreeSet<(String, String, String)> {
    let list = |rule: &Value, field: &str| -> Vec<String> {
        rule[field]
            .as_array()
            .unwrap_or_else(|| panic!("rule without {field}: {rule}"))
            .iter()
            .map(|v| v.as_str().expect("a string").to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in rules.as_array().expect("a rule list") {
        for group in list(rule, "apiGroups") {
            for resource in list(rule, "resources") {
                for verb in list(rule, "verbs") {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// Where the identity's namespaced rules apply.
pub enum Managed {
    /// A Role and RoleBinding in each of these namespaces.
    Namespaces(Vec<String>),
    /// `namespaces: ["*"]`: the ClusterRole.
    ClusterWide,
}

/// ServiceAccount `orb-broker` of a test namespace with docs/rbac.yaml's rules, and a
/// kubeconfig for it (deleted with the guard; the RBAC objects go with the namespace).
pub struct BrokerIdentity {
    pub client: Client,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl BrokerIdentity {
    /// A kubeconfig for the fault proxy whose kubeconfig is `proxy_kubeconfig`, carrying this
    /// identity's token: the proxy forwards the caller's Authorization header, so orb goes
    /// through the proxy as this ServiceAccount. Lives as long as the identity.
    pub fn through(&self, proxy_kubeconfig: &std::path::Path) -> PathBuf {
        let mine: Value =
            serde_json::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let mut doc: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(proxy_kubeconfig).unwrap())
                .expect("the proxy's kubeconfig parses");
        doc["users"][0]["user"] = mine["users"][0]["user"].clone();
        let path = self
            .kubeconfig
            .with_file_name("orb-broker-through-proxy.kubeconfig");
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    /// The identity as a [`TestCluster`], for helpers that take one.
    pub fn as_cluster(&self) -> TestCluster {
        TestCluster {
            client: self.client.clone(),
            kubeconfig: self.kubeconfig.clone(),
        }
    }
}

impl TestCluster {
    /// The shipped identity managing `ns` alone, with no opt-in feature.
    pub async fn broker_identity(&self, ns: &TestNamespace) -> BrokerIdentity {
        self.broker_identity_for(ns, Managed::Namespaces(vec![ns.name.clone()]), &[])
            .await
    }

    /// The shipped identity (ServiceAccount in `ns`) managing `managed`, plus the rules of
    /// `features` (keys of [`OPT_IN_FEATURES`]): nodes and tokenreviews through a ClusterRole,
    /// node events through a Role in `default`, the Lease through a Role in `ns`.
    pub async fn broker_identity_for(
        &self,
        ns: &TestNamespace,
        managed: Managed,
        features: &[&str],
    ) -> BrokerIdentity {
        let rbac = documented();
        let sa_ns = ns.name.as_str();
        let sas: Api<ServiceAccount> = Api::namespaced(self.client.clone(), sa_ns);
        create(&sas, json!({"metadata": {"name": SERVICE_ACCOUNT}})).await;
        // Objects outside the test namespace are owned by it, so they go when it goes.
        let owner = Api::<Namespace>::all(self.client.clone())
            .get(sa_ns)
            .await
            .expect("the test namespace");
        let owned = |name: String| {
            json!({"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace",
                   "name": sa_ns, "uid": owner.metadata.uid}]})
        };
        let subjects =
            json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": sa_ns}]);
        let name = format!("{SERVICE_ACCOUNT}-{sa_ns}");
        let bind = |kind: &str, name: &str| {
            json!({"metadata": owned(name.to_string()), "subjects": subjects,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}})
        };
        let opt = |f: &str| -> Vec<Value> {
            if features.contains(&f) {
                rbac.opt_in[f].as_array().unwrap().clone()
            } else {
                Vec::new()
            }
        };
        let mut cluster_rules = opt("node_watch_enabled");
        cluster_rules.extend(opt("inbound_auth_enabled"));
        let namespaced: Vec<(String, Value)> = match managed {
            Managed::Namespaces(list) => list.into_iter().map(|n| (n, rbac.role.clone())).collect(),
            Managed::ClusterWide => {
                cluster_rules.extend(rbac.cluster_role.as_array().unwrap().clone());
                Vec::new()
            }
        };
        let mut roles = namespaced;
        if features.contains(&"events_watch_enabled") {
            roles.push(("default".into(), json!(opt("events_watch_enabled"))));
        }
        if features.contains(&"leader_election") {
            roles.push((sa_ns.to_string(), json!(opt("leader_election"))));
        }
        // One Role per (namespace, rule list); a namespace named twice gets both lists.
        let mut merged: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (namespace, rules) in roles {
            merged
                .entry(namespace)
                .or_default()
                .extend(rules.as_array().unwrap().clone());
        }
        for (namespace, rules) in merged {
            let role = json!({"metadata": owned(name.clone()), "rules": rules});
            create(
                &Api::<Role>::namespaced(self.client.clone(), &namespace),
                role,
            )
            .await;
            let binding = bind("Role", &name);
            create(
                &Api::<RoleBinding>::namespaced(self.client.clone(), &namespace),
                binding,
            )
            .await;
            granted(&self.client, sa_ns, Some(&namespace), &rules[0]).await;
        }
        if !cluster_rules.is_empty() {
            let role = json!({"metadata": owned(name.clone()), "rules": cluster_rules});
            create(&Api::<ClusterRole>::all(self.client.clone()), role).await;
            create(
                &Api::<ClusterRoleBinding>::all(self.client.clone()),
                bind("ClusterRole", &name),
            )
            .await;
            granted(&self.client, sa_ns, None, &cluster_rules[0]).await;
        }
        // Longer than any test runs; the apiserver refuses less than 10 minutes.
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"expirationSeconds": 4 * 3600}})).unwrap();
        let token = sas
            .create_subresource::<TokenRequest, TokenRequest>(
                "token",
                SERVICE_ACCOUNT,
                &PostParams::default(),
                &request,
            )
            .await
            .expect("TokenRequest for the ServiceAccount")
            .status
            .and_then(|s| s.token)
            .expect("a token was issued");
        let admin: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap())
                .expect("the admin kubeconfig parses");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("orb-broker.kubeconfig");
        let doc = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": SERVICE_ACCOUNT,
                          "context": {"cluster": "local", "user": SERVICE_ACCOUNT, "namespace": sa_ns}}],
            "current-context": SERVICE_ACCOUNT,
        });
        std::fs::write(&kubeconfig, doc.to_string()).unwrap();
        let client = client_from(&kubeconfig)
            .await
            .expect("a client for the ServiceAccount's token");
        BrokerIdentity {
            client,
            kubeconfig,
            _dir: dir,
        }
    }
}

/// Waits until the apiserver's authorizer grants the ServiceAccount of `sa_ns` the first verb of
/// `rule` (in `namespace`, or in every namespace): a new binding reaches the RBAC authorizer
/// through its informer, which a loaded machine can leave behind the test's first call.
async fn granted(admin: &Client, sa_ns: &str, namespace: Option<&str>, rule: &Value) {
    let first = |key: &str| rule[key][0].as_str().unwrap_or_default().to_string();
    let resource = first("resources");
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, sub)) => (r.to_string(), Some(sub.to_string())),
        None => (resource, None),
    };
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{sa_ns}:{SERVICE_ACCOUNT}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{sa_ns}"), "system:authenticated"],
        "resourceAttributes": {"group": first("apiGroups"), "resource": resource,
            "subresource": subresource, "verb": first("verbs"), "namespace": namespace},
    }}))
    .expect("a SubjectAccessReview");
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    crate::wait_for(
        &format!("the authorizer to grant {rule} to {SERVICE_ACCOUNT} in {namespace:?}"),
        std::time::Duration::from_secs(60),
        || {
            let (reviews, review) = (reviews.clone(), review.clone());
            async move {
                match reviews.create(&PostParams::default(), &review).await {
                    Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => crate::Check::Done(()),
                    Ok(r) => crate::Check::NotYet(format!("not yet: {:?}", r.status)),
                    Err(e) => crate::Check::NotYet(format!("error: {e}")),
                }
            }
        },
    )
    .await;
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + Serialize,
    K::DynamicType: Default,
{
    let typed: K = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("not a {}: {e}: {object}", K::kind(&Default::default())));
    // A second identity in the same namespace (two orb processes of one test) reuses the
    // objects of the first.
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating {object}: {e}"),
    }
}
