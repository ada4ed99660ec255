use super::*;
use serde_json::json;

fn pod(name: &str, group: Option<&str>, labels: &[(&str, &str)]) -> PodView {
    PodView {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        pod_group_name: group.map(str::to_string),
        ..Default::default()
    }
}

fn trainer_pods() -> Vec<PodView> {
    let mut out = Vec::new();
    for g in 0..2 {
        for i in 0..2 {
            let role = if i == 0 { "leader" } else { "worker" };
            let group = format!("trainer-workers-{g}");
            out.push(pod(
                &format!("trainer-{g}-{i}"),
                Some(&group),
                &[("app", "trainer"), ("role", role)],
            ));
        }
    }
    out
}

fn live(pods: &[PodView]) -> GangPods<'_> {
    GangPods {
        live: pods.iter().collect(),
        inactive: vec![],
    }
}

fn refs(pods: &[PodView]) -> Vec<&PodView> {
    pods.iter().collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selector_keeps_only_shared_labels() {
    let members = trainer_pods();
    assert_eq!(
        derive_gang_selector(&live(&members), &refs(&members), None),
        Ok(labels(&[("app", "trainer")]))
    );
    let disjoint = [pod("a", None, &[("x", "1")]), pod("b", None, &[("y", "1")])];
    assert_eq!(
        derive_gang_selector(&live(&disjoint), &refs(&disjoint), None),
        Err(SelectorProblem::NoSharedLabels)
    );
}

#[test]
fn the_previous_selector_is_kept_while_it_is_exact() {
    // Both leaders were evicted: the workers left share role=worker too, but a selector with it
    // would leave out the leaders' replacements.
    let all = trainer_pods();
    let workers: Vec<PodView> = all
        .iter()
        .filter(|p| p.labels["role"] == "worker")
        .cloned()
        .collect();
    let previous = labels(&[("app", "trainer")]);
    assert_eq!(
        derive_gang_selector(&live(&workers), &refs(&workers), Some(&previous)),
        Ok(previous.clone())
    );
    assert_eq!(
        derive_gang_selector(&live(&workers), &refs(&workers), None),
        Ok(labels(&[("app", "trainer"), ("role", "worker")])),
        "without a previous PDB the shared labels decide"
    );
    // A stranger now matches the previous selector: it is not kept.
    let mut crowded = workers.clone();
    crowded.push(pod("stranger", None, &[("app", "trainer")]));
    let gang = GangPods {
        live: crowded.iter().take(2).collect(),
        inactive: vec![],
    };
    assert_eq!(
        derive_gang_selector(&gang, &refs(&crowded), Some(&previous)),
        Ok(labels(&[("app", "trainer"), ("role", "worker")]))
    );
    // A member the previous selector misses: it is not kept either.
    let narrow = labels(&[("app", "trainer"), ("role", "leader")]);
    assert_eq!(
        derive_gang_selector(&live(&all), &refs(&all), Some(&narrow)),
        Ok(labels(&[("app", "trainer")]))
    );
}

#[test]
fn finished_group_pods_are_neither_members_nor_strangers() {
    let mut all = trainer_pods();
    all[3].inactive = true;
    let groups = vec![
        PodGroupView {
            name: "trainer-workers-0".into(),
            workload_name: Some("trainer".into()),
            template_name: Some("workers".into()),
            min_count: Some(1),
            created: None,
        },
        PodGroupView {
            name: "trainer-workers-1".into(),
            workload_name: Some("trainer".into()),
            template_name: Some("workers".into()),
            min_count: Some(1),
            created: None,
        },
    ];
    let (_, gang) = gang_members("trainer", "workers", &groups, &all);
    assert_eq!(gang.live.len(), 3);
    assert_eq!(gang.inactive.len(), 1);
    assert_eq!(
        derive_gang_selector(&gang, &refs(&all), None),
        Ok(labels(&[("app", "trainer")]))
    );
}

#[test]
fn members_come_from_the_workloads_own_groups() {
    let mut all = trainer_pods();
    // A pod of another Workload's group with the same labels is not a member.
    all.push(pod(
        "other-0",
        Some("other-workers-0"),
        &[("app", "trainer")],
    ));
    let mut g: Vec<PodGroupView> = (0..2)
        .map(|i| PodGroupView {
            name: format!("trainer-workers-{i}"),
            workload_name: Some("trainer".into()),
            template_name: Some("workers".into()),
            min_count: Some(2),
            created: None,
        })
        .collect();
    g.push(PodGroupView {
        name: "other-workers-0".into(),
        workload_name: Some("other".into()),
        template_name: Some("workers".into()),
        min_count: Some(1),
        created: None,
    });
    let (found, members) = gang_members("trainer", "workers", &g, &all);
    assert_eq!(found.len(), 2);
    assert_eq!(members.live.len(), 4);
    assert!(members.live.iter().all(|p| p.name.starts_with("trainer-")));
}

#[test]
fn placement_and_revision_labels_never_enter_the_selector() {
    let placed = |name: &str| {
        pod(
            name,
            Some("g"),
            &[
                ("app", "trainer"),
                ("topology.kubernetes.io/zone", "zone-0"),
                ("kubernetes.io/hostname", "node-0"),
                // A Deployment's gang members: its template labels are what its controller
                // compares PDB selectors with.
                ("pod-template-hash", "5d8f"),
            ],
        )
    };
    let pods = [placed("a"), placed("b")];
    let selector = derive_gang_selector(&live(&pods), &refs(&pods), None).unwrap();
    assert_eq!(selector, labels(&[("app", "trainer")]));
}

#[test]
fn terminal_and_deleted_pods_are_inactive() {
    let p = |phase: &str, deleting: bool| {
        let mut v = json!({"metadata": {"name": "p", "creationTimestamp": "2026-06-24T12:00:00Z"},
                           "status": {"phase": phase}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-06-24T12:00:01Z");
        }
        PodView::from_pod(&serde_json::from_value(v).unwrap())
    };
    assert!(!p("Running", false).inactive);
    assert!(!p("Pending", false).inactive);
    assert!(p("Failed", false).inactive);
    assert!(p("Succeeded", false).inactive);
    assert!(p("Running", true).inactive);
    assert_eq!(
        p("Running", false).created,
        Some("2026-06-24T12:00:00Z".parse().unwrap())
    );
}
