//! Workload API gangs for the live tests: Workloads, PodGroups and the pods of each group.

use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::{create_pod, strict_policy, wait_ready_pods};

pub async fn create_workload(
    client: &Client,
    ns: &str,
    name: &str,
    labels: Value,
    templates: Value,
) {
    let api: Api<Workload> = Api::namespaced(client.clone(), ns);
    let w: Workload = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"podGroupTemplates": templates}
    }))
    .unwrap();
    api.create(&PostParams::default(), &w)
        .await
        .unwrap_or_else(|e| panic!("create Workload {name}: {e}"));
}

pub fn gang_template(name: &str, min_count: i32, mode: &str) -> Value {
    json!({"name": name, "schedulingPolicy": {"gang": {"minCount": min_count}},
           "disruptionMode": {mode: {}}})
}

pub async fn create_pod_group(
    client: &Client,
    ns: &str,
    workload: &str,
    template: &str,
    name: &str,
    min_count: i32,
    mode: &str,
) {
    let api: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let g: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"workloadRef": {"workloadName": workload, "templateName": template},
                 "schedulingPolicy": {"gang": {"minCount": min_count}},
                 "disruptionMode": {mode: {}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &g)
        .await
        .unwrap_or_else(|e| panic!("create PodGroup {name}: {e}"));
}

/// A gang to create: `groups` PodGroups `<name>-workers-<i>` with `per_group` pods each,
/// labelled `app=<app>` (role leader/worker differs between pods).
pub struct Gang<'a> {
    pub name: &'a str,
    pub app: &'a str,
    pub groups: usize,
    pub per_group: usize,
    pub min_count: i32,
    pub mode: &'a str,
}

pub async fn create_gang(client: &Client, ns: &str, gang: Gang<'_>) {
    let Gang {
        name: w,
        app,
        groups,
        per_group,
        min_count,
        mode,
    } = gang;
    for g in 0..groups {
        create_pod_group(
            client,
            ns,
            w,
            "workers",
            &format!("{w}-workers-{g}"),
            min_count,
            mode,
        )
        .await;
    }
    for g in 0..groups {
        for i in 0..per_group {
            let role = if i == 0 { "leader" } else { "worker" };
            create_pod(
                client,
                ns,
                &format!("{w}-{g}-{i}"),
                Some(&format!("{w}-workers-{g}")),
                json!({"app": app, "role": role}),
            )
            .await;
        }
    }
}

/// Single mode, 1 PodGroup `<name>-workers-0` of `pods` pods, minCount 3, under a strict
/// `class` policy.
pub async fn single_mode_gang(c: &Client, n: &str, name: &str, pods: usize, class: &str) {
    strict_policy(c, n, &format!("p-{name}"), class, name).await;
    create_workload(
        c,
        n,
        name,
        json!({"app": name}),
        json!([gang_template("workers", 3, "single")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name,
            app: name,
            groups: 1,
            per_group: pods,
            min_count: 3,
            mode: "single",
        },
    )
    .await;
}

/// Seed 003 in namespace `n`: strict mission-critical policy on `app=trainer`, Workload
/// `trainer` (gang minCount 2, all mode), 4 PodGroups of 2 pods; returns once all 8 are Ready.
pub async fn create_trainer_gang(c: &Client, n: &str) {
    strict_policy(c, n, "training-critical", "mission-critical", "trainer").await;
    create_workload(
        c,
        n,
        "trainer",
        json!({"app": "trainer"}),
        json!([gang_template("workers", 2, "all")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "trainer",
            app: "trainer",
            groups: 4,
            per_group: 2,
            min_count: 2,
            mode: "all",
        },
    )
    .await;
    wait_ready_pods(&Api::namespaced(c.clone(), n), "app=trainer", 8).await;
}
