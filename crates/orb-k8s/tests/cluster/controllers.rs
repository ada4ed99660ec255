//! Deployment and StatefulSet: one controller per request; selective release that removes
//! exactly the named hosts (Deployment) or only the tail (StatefulSet).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use orb_core::machine::MachineStatus;
use orb_core::provider::ProviderError;
use orb_core::template::ProviderApi;
use serde_json::json;

use crate::common::*;

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_release_of_m1_m2_out_of_5_removes_exactly_them() {
    let h = harness("deploy-release", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 5).await;
    let name = outcome.resource_ids[0].clone();
    assert_eq!(
        outcome.provider_data["controller"],
        json!({"kind": "Deployment", "name": name})
    );
    let report = wait_verdict(&h, &status_input(&req, &t, 5, &outcome), "fulfilled").await;
    let all = ids_with(&report, MachineStatus::Running);
    assert_eq!(all.len(), 5);
    for m in &report.machines {
        assert_eq!(m.resource_id.as_deref(), Some(name.as_str()));
        assert!(m.private_ip.is_some());
    }

    // Pick two from the middle by name, not the ReplicaSet's own default choice.
    let victims = [all[1].as_str(), all[3].as_str()];
    let released = release(&h, &req, &outcome, "Deployment", &victims)
        .await
        .unwrap();
    let mut got = released.released.clone();
    got.sort();
    assert_eq!(got, victims);
    let survivors: Vec<String> = all
        .iter()
        .filter(|n| !victims.contains(&n.as_str()))
        .cloned()
        .collect();
    wait_live_pods(&h, &req, &survivors).await;
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert_eq!(deployments.get(&name).await.unwrap().spec.replicas, Some(3));
    // No replacement appears: the survivors stay exactly the three others.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(live_pods(&h, &req).await, survivors);

    // Releasing every remaining pod deletes the Deployment itself.
    let rest: Vec<&str> = survivors.iter().map(String::as_str).collect();
    release(&h, &req, &outcome, "Deployment", &rest)
        .await
        .unwrap();
    kube_fixture::wait_for("the Deployment to be gone", WAIT, || async {
        match deployments.get_opt(&name).await.unwrap() {
            None => kube_fixture::Check::Done(()),
            Some(_) => kube_fixture::Check::NotYet("still there".into()),
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_release_by_its_own_name_deletes_the_deployment() {
    let h = harness("deploy-byname", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 2).await;
    let name = outcome.resource_ids[0].clone();
    release(&h, &req, &outcome, "Deployment", &[&name])
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let d = deployments.get_opt(&name).await.unwrap();
    assert!(
        d.is_none_or(|d| d.metadata.deletion_timestamp.is_some()),
        "Deployment {name} still live"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn statefulset_releases_only_its_tail_and_refuses_the_rest_unchanged() {
    let h = harness("sts-release", json!({})).await;
    let t = template("db", Some(ProviderApi::StatefulSet));
    let (req, outcome) = acquire(&h, &t, 3).await;
    let name = outcome.resource_ids[0].clone();
    let services: Api<Service> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let service = services
        .get(&name)
        .await
        .expect("the headless Service was created");
    assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));

    let report = wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "fulfilled").await;
    let pods: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    assert_eq!(ids_with(&report, MachineStatus::Running), pods);

    let err = release(&h, &req, &outcome, "StatefulSet", &[&pods[1]])
        .await
        .unwrap_err();
    let ProviderError::Rejected(text) = &err else {
        panic!("expected a rejection, got {err:?}")
    };
    assert!(
        text.contains(&format!(
            "{} cannot go alone: also release {}",
            pods[1], pods[2]
        )),
        "{text}"
    );
    let sets: Api<StatefulSet> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    assert_eq!(
        sets.get(&name).await.unwrap().spec.replicas,
        Some(3),
        "a refused release changes nothing"
    );

    let released = release(&h, &req, &outcome, "StatefulSet", &[&pods[2]])
        .await
        .unwrap();
    assert_eq!(released.released, vec![pods[2].clone()]);
    assert_eq!(sets.get(&name).await.unwrap().spec.replicas, Some(2));
    wait_live_pods(&h, &req, &pods[..2]).await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn statefulset_keeps_an_existing_service_and_honours_volume_claim_templates() {
    let h = harness("sts-service", json!({})).await;
    let mut t = template("db", Some(ProviderApi::StatefulSet));
    t.service_name = Some("grid".into());
    t.extra.insert(
        "volumeClaimTemplates".into(),
        json!([{"metadata": {"name": "scratch"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]),
    );
    let existing: Service = serde_json::from_value(json!({
        "metadata": {"name": "grid", "labels": {"owner": "ops"}},
        "spec": {"clusterIP": "None", "selector": {"app": "grid"}}
    }))
    .unwrap();
    let services: Api<Service> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    services
        .create(&Default::default(), &existing)
        .await
        .unwrap();

    let (_req, outcome) = acquire(&h, &t, 1).await;
    assert_eq!(outcome.provider_data["service_name"], "grid");
    assert_eq!(
        outcome.provider_data["service_created"],
        json!(null),
        "orb did not create it"
    );
    assert_eq!(
        services.get("grid").await.unwrap().metadata.labels.unwrap()["owner"],
        "ops"
    );
    let sets: Api<StatefulSet> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let set = sets.get(&outcome.resource_ids[0]).await.unwrap();
    assert_eq!(set.spec.service_name.as_deref(), Some("grid"));
    let claims = set.spec.volume_claim_templates.unwrap();
    assert_eq!(claims[0].metadata.name.as_deref(), Some("scratch"));
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn controller_pods_carry_orb_labels_that_templates_cannot_override() {
    let h = harness("labels", json!({"default_node_selector": {"type": "kwok"}})).await;
    let mut t = template("svc", Some(ProviderApi::Deployment));
    t.labels
        .insert("orb.io/request-id".into(), "req-impostor".into());
    t.labels.insert("app".into(), "grid".into());
    let (req, outcome) = acquire(&h, &t, 1).await;
    wait_verdict(&h, &status_input(&req, &t, 1, &outcome), "fulfilled").await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let list = pods.list(&Default::default()).await.unwrap();
    let pod = &list.items[0];
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["orb.io/request-id"], req.as_str());
    assert_eq!(labels["app"], "grid");
    assert_eq!(labels["orb.io/provider-api"], "Deployment");
    assert_eq!(labels["symphony/open-resource-broker-reqid"], req.as_str());
    let selector = pod.spec.as_ref().unwrap().node_selector.clone().unwrap();
    assert_eq!(
        selector["type"], "kwok",
        "the provider's default node selector is applied"
    );
}

/// An admission policy that refuses every pod-deletion-cost mark in one namespace, so the
/// Deployment's marking step really fails on the apiserver.
async fn refuse_deletion_cost_marks(h: &Harness) -> String {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let name = format!("refuse-marks-{}", h.ns.name());
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "!has(object.metadata.annotations) || !('controller.kubernetes.io/pod-deletion-cost' in object.metadata.annotations)",
                             "message": "test policy: deletion-cost marks are refused"}]
        }
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": h.ns.name()}}}}
    }))
    .unwrap();
    let client = h.cluster.client.clone();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&Default::default(), &policy)
        .await
        .unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(client)
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    name
}

async fn remove_policy(h: &Harness, name: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let client = h.cluster.client.clone();
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(name, &Default::default())
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client)
        .delete(name, &Default::default())
        .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_release_aborts_without_scaling_when_half_the_marks_fail() {
    use kube::api::{Patch, PatchParams};
    let h = harness("deploy-abort", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 3).await;
    let report = wait_verdict(&h, &status_input(&req, &t, 3, &outcome), "fulfilled").await;
    let all = ids_with(&report, MachineStatus::Running);
    let policy = refuse_deletion_cost_marks(&h).await;
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let probe =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "1"}}});
    kube_fixture::wait_for("the admission policy to refuse marks", WAIT, || async {
        match pods
            .patch(
                &all[0],
                &PatchParams::default().dry_run(),
                &Patch::Merge(&probe),
            )
            .await
        {
            Err(_) => kube_fixture::Check::Done(()),
            Ok(_) => kube_fixture::Check::NotYet("a dry-run mark was still accepted".into()),
        }
    })
    .await;

    let result = release(&h, &req, &outcome, "Deployment", &[&all[0], &all[1]]).await;
    remove_policy(&h, &policy).await;
    let err = result.unwrap_err();
    assert!(
        err.to_string()
            .contains("was not scaled: 2 of 2 victims could not be marked"),
        "{err}"
    );
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let name = &outcome.resource_ids[0];
    assert_eq!(
        deployments.get(name).await.unwrap().spec.replicas,
        Some(3),
        "nothing was scaled"
    );
    assert_eq!(live_pods(&h, &req).await, all);
}

/// A return that gives up (failed, or past its deadline) clears the victim mark it left on a
/// Deployment pod, so the next scale-down does not take a pod nobody named.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_abandoned_deployment_return_clears_its_victim_marks() {
    use kube::api::{Patch, PatchParams};
    use orb_core::provider::{AbandonInput, Provider};
    let h = harness("deploy-abandon", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 2).await;
    let report = wait_verdict(&h, &status_input(&req, &t, 2, &outcome), "fulfilled").await;
    let all = ids_with(&report, MachineStatus::Running);
    let pods: Api<Pod> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    let mark =
        json!({"metadata": {"annotations": {orb_k8s::release_plan::POD_DELETION_COST: "-9999"}}});
    pods.patch(&all[0], &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .unwrap();
    h.provider
        .abandon_release(AbandonInput {
            machines: vec![machine_ref(&req, &all[0], &outcome, "Deployment")],
        })
        .await
        .unwrap();
    let pod = pods.get(&all[0]).await.unwrap();
    assert!(
        !pod.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(orb_k8s::release_plan::POD_DELETION_COST),
        "the mark is gone"
    );
}
