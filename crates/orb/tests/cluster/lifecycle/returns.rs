//! Returns that leave nothing behind: a Deployment host lost outside orb is replaced by its
//! ReplicaSet, and returning every host HostFactory knows must still remove the whole
//! Deployment and give the template's capacity back.

use kube_fixture::{Check, wait_for};
use serde_json::{Value, json};

use super::world::{Kind, SETTLE, Setup, World, machine_ids, summary};
use super::{controller_of, status_of};

fn running(view: &Value) -> usize {
    machine_ids(view)
        .iter()
        .filter(|m| status_of(view, m) == "running")
        .count()
}

/// Waits for the acquire `id` of 3 to complete with its 3 machines running: the hosts
/// HostFactory knows, and their controller.
async fn three_running(w: &World, id: &str) -> (Vec<String>, String) {
    let view = w
        .wait_status(id, "3 running machines, the request complete", |v| {
            v["request"]["status"] == "complete" && running(v) == 3
        })
        .await;
    (machine_ids(&view), controller_of(w, &view).unwrap())
}

/// HostFactory gives back every host it knows, the lost ones too: the return completes, no
/// pod and no `controller` is left, and the template's capacity is back.
async fn returning_known_leaves_nothing(
    w: &mut World,
    id: &str,
    known: &[String],
    controller: &str,
) {
    let mut args = vec!["machines", "return"];
    args.extend(known.iter().map(String::as_str));
    let ret = w.json(&args);
    let ret_id = ret["request"]["request_id"].as_str().unwrap().to_string();
    let done = w.wait_finished(&ret_id).await;
    assert_eq!(done["request"]["status"], "complete", "{}", summary(&done));

    let kind = w.setup.kind.api();
    wait_for(&format!("no pod and no {kind} left"), SETTLE, || async {
        let pods = w.pods(id).await;
        let there = w.controller_exists(controller).await;
        if pods.is_empty() && !there {
            Check::Done(())
        } else {
            Check::NotYet(format!("pods {:?}, {kind} there: {there}", pods.keys()))
        }
    })
    .await;
    let templates = w.script("getAvailableTemplates.sh", &json!({}));
    assert_eq!(
        templates["templates"][0]["availableNumber"], 3,
        "the template's capacity is back: {templates}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn returning_every_deployment_host_hostfactory_knows_after_a_loss_leaves_nothing() {
    let mut w = World::new("ret-leak", Setup::new(Kind::Deployment).max_number(3)).await;
    let id = w.request(3);
    let (known, deployment) = three_running(&w, &id).await;
    assert_eq!(known.len(), 3, "{known:?}");

    // A pod lost outside orb (after the acquire ended; the ReplicaSet replaces it) and the
    // status reads that follow the finished acquire record the loss and the replacement.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    w.delete_pod(&known[0]).await;
    w.wait_status(&id, "the loss and its replacement recorded", |v| {
        machine_ids(v).len() == 4 && status_of(v, &known[0]) == "terminated" && running(v) == 3
    })
    .await;

    returning_known_leaves_nothing(&mut w, &id, &known, &deployment).await;
}

/// The same after a node drain (cordon, evictions honouring PDBs): every host on the drained
/// node is lost, the ReplicaSet's replacements wait for room, and returning the hosts
/// HostFactory knows still removes the Deployment whole.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn returning_every_deployment_host_after_a_drain_leaves_nothing() {
    let setup = Setup::new(Kind::Deployment)
        .max_number(3)
        .on_node_with_room(3);
    let mut w = World::new("ret-drain", setup).await;
    let id = w.request(3);
    let (known, deployment) = three_running(&w, &id).await;
    let pods = w.pods(&id).await;
    let node = pods
        .values()
        .find_map(|p| p.spec.as_ref()?.node_name.clone())
        .expect("the pods' node");

    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let evicted = kube_fixture::drain::drain(&w.cluster.client, &node, SETTLE)
        .await
        .expect("the drain");
    assert_eq!(evicted.len(), 3, "{evicted:?}");
    w.wait_status(&id, "the losses and their replacements recorded", |v| {
        machine_ids(v).len() == 6 && known.iter().all(|k| status_of(v, k) == "terminated")
    })
    .await;

    returning_known_leaves_nothing(&mut w, &id, &known, &deployment).await;
}

/// A StatefulSet recreates a lost pod under the same name: the machine HostFactory knows
/// follows it, and returning the names it knows removes the StatefulSet whole.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn returning_every_statefulset_host_after_a_loss_leaves_nothing() {
    let mut w = World::new("ret-sts", Setup::new(Kind::StatefulSet).max_number(3)).await;
    let id = w.request(3);
    let (known, statefulset) = three_running(&w, &id).await;
    let uid = w.pods(&id).await[&known[1]].metadata.uid.clone();
    w.delete_pod(&known[1]).await;
    wait_for("the lost host back under its name", SETTLE, || async {
        let pods = w.pods(&id).await;
        match pods.get(&known[1]) {
            Some(p) if p.metadata.uid != uid && p.metadata.deletion_timestamp.is_none() => {
                Check::Done(())
            }
            other => Check::NotYet(format!("{:?}", other.map(|p| &p.metadata.uid))),
        }
    })
    .await;
    w.wait_status(&id, "the new incarnation read running", |v| {
        machine_ids(v).len() == 3 && running(v) == 3
    })
    .await;

    returning_known_leaves_nothing(&mut w, &id, &known, &statefulset).await;
}
