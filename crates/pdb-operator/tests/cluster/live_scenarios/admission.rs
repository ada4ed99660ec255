//! Defaulting and admission of PDBPolicy objects on the real apiserver (scenarios 36, 37, and
//! the admission half of 25).

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenarios 36 and 37: defaulting and admission on the real apiserver.

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_apiserver_defaults_policies_and_rejects_invalid_ones() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-admission").await;
    let n = ns.name();
    let c = &cluster.client;
    let sel = json!({"matchLabels": {"app": "a"}});

    // Scenario 36: what the apiserver stores when fields are omitted.
    let base = |extra: Value| {
        let mut s = json!({"availabilityClass": "standard", "workloadSelector": sel});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let stored = |o: DynamicObject| o.data["spec"].clone();
    let s = stored(
        try_create_policy(c, n, "omitted", base(json!({})))
            .await
            .unwrap(),
    );
    assert_eq!(
        (&s["priority"], &s["enforcement"], &s["allowOverride"]),
        (&json!(50), &json!("advisory"), &json!(true)),
        "{s}"
    );
    let s = stored(
        try_create_policy(c, n, "zero", base(json!({"priority": 0})))
            .await
            .unwrap(),
    );
    assert_eq!(s["priority"], json!(0), "explicit 0 is kept: {s}");
    for mode in ["strict", "flexible"] {
        let s = stored(
            try_create_policy(c, n, mode, base(json!({"enforcement": mode})))
                .await
                .unwrap(),
        );
        assert_eq!(s["allowOverride"], json!(true), "{mode}: {s}");
        assert_eq!(
            s.get("minimumClass"),
            None,
            "{mode}: read as availabilityClass, not written: {s}"
        );
    }
    let s = stored(
        try_create_policy(
            c,
            n,
            "window",
            base(json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00"}]})),
        )
        .await
        .unwrap(),
    );
    assert_eq!(s["maintenanceWindows"][0]["timezone"], json!("UTC"), "{s}");
    let s = stored(
        try_create_policy(
            c,
            n,
            "custom",
            base(
                json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "60%"}}),
            ),
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        s["customPDBConfig"]["unhealthyPodEvictionPolicy"],
        json!("IfHealthyBudget"),
        "{s}"
    );

    // Scenario 37: rejected at admission (HTTP 422) with the note's wording.
    let cases = [
        (
            "custom-no-config",
            json!({"availabilityClass": "custom"}),
            "custom availability class requires customPDBConfig",
        ),
        (
            "custom-both",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": 1, "maxUnavailable": 1}}),
            "cannot specify both minAvailable and maxUnavailable",
        ),
        (
            "custom-neither",
            json!({"availabilityClass": "custom", "customPDBConfig": {}}),
            "must specify either minAvailable or maxUnavailable",
        ),
        (
            "ns-only",
            json!({"workloadSelector": {"namespaces": [n]}}),
            "must specify at least one selection criteria",
        ),
        (
            "prio-1001",
            json!({"priority": 1001}),
            "priority must be between 0 and 1000",
        ),
        (
            "prio-neg",
            json!({"priority": -1}),
            "priority must be between 0 and 1000",
        ),
        (
            "hour-25",
            json!({"maintenanceWindows": [{"start": "25:00", "end": "04:00"}]}),
            "must be in HH:MM format",
        ),
        (
            "day-7",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [7]}]}),
            "must be between 0 (Sunday) and 6 (Saturday)",
        ),
        (
            "day-dup",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "daysOfWeek": [1, 1]}]}),
            "Duplicate value",
        ),
        (
            "min-above",
            json!({"enforcement": "flexible", "minimumClass": "mission-critical"}),
            "minimumClass cannot be higher than availabilityClass",
        ),
        (
            "strict-reason",
            json!({"enforcement": "strict", "overrideRequiresReason": true}),
            "only applicable for advisory enforcement mode",
        ),
        (
            "bare-3",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "3"}}),
            "should match '^(100|[1-9]?[0-9])%$'",
        ),
        (
            "over-100",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": "120%"}}),
            "should match '^(100|[1-9]?[0-9])%$'",
        ),
        (
            "negative",
            json!({"availabilityClass": "custom", "customPDBConfig": {"minAvailable": -1}}),
            "must be an integer >= 0",
        ),
        (
            "bad-class",
            json!({"availabilityClass": "super-duper-critical"}),
            "must be one of: non-critical, standard, high-availability, mission-critical, custom",
        ),
        (
            "bad-mode",
            json!({"enforcement": "lenient"}),
            "must be one of: strict, flexible, advisory",
        ),
        // The CRD rule's `getHours(zone)` fails on an unknown IANA zone; the apiserver prefixes
        // its own text ("unknown time zone Mars/Olympus evaluating rule: ") to the message.
        (
            "tz-mars",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "Mars/Olympus"}]}),
            "unknown time zone Mars/Olympus evaluating rule: must be an IANA time zone name such as UTC or Europe/Berlin",
        ),
        (
            "tz-offset",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "+01:00"}]}),
            "must be an IANA time zone name such as UTC or Europe/Berlin",
        ),
        // Scenario 25 at admission: deploy/admission-policy.yaml (ValidatingAdmissionPolicy).
        (
            "reach-staging",
            json!({"workloadSelector": {"matchLabels": {"app": "a"}, "namespaces": [n, "staging"]}}),
            "spec.workloadSelector.namespaces lists staging, but a PDBPolicy in",
        ),
        (
            "reach-staging-hint",
            json!({"workloadSelector": {"matchLabels": {"app": "a"}, "namespaces": ["staging"]}}),
            "only reaches its own namespace; remove it, or use a ClusterPDBPolicy",
        ),
    ];
    let mut wrong = Vec::new();
    for (name, extra, message) in cases {
        match try_create_policy(c, n, name, base(extra)).await {
            Err((422, m)) if m.contains(message) => {}
            other => wrong.push(format!(
                "{name}: wanted 422 with {message:?}, got {other:?}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // What those two rules let through.
    for (name, extra) in [
        (
            "tz-berlin",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "Europe/Berlin"}]}),
        ),
        (
            "tz-utc",
            json!({"maintenanceWindows": [{"start": "02:00", "end": "04:00", "timezone": "UTC"}]}),
        ),
        (
            "own-ns",
            json!({"workloadSelector": {"matchLabels": {"app": "a"}, "namespaces": [n]}}),
        ),
    ] {
        if let Err(e) = try_create_policy(c, n, name, base(extra)).await {
            wrong.push(format!("{name}: wanted it stored, got {e:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // An update that adds another namespace is rejected too.
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), n, &policy_resource());
    let add_staging = json!({"spec": {"workloadSelector": {"namespaces": [n, "staging"]}}});
    match api
        .patch(
            "own-ns",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&add_staging),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("lists staging") => {}
        other => panic!("adding staging to own-ns: wanted 422, got {other:?}"),
    }
    // The operator still refuses an unknown zone or another namespace (Validated=False/
    // PolicyInvalid) in a policy stored before these rules existed: `validation::rejected`
    // (`mars`, `other_namespace`) covers that path; it cannot be stored here any more.
}

// ---------------------------------------------------------------------------------------------
// The warnings of validation.rs, shown at admission (Warn-only ValidatingAdmissionPolicy), and
// PolicyRemoved.

/// Sends `request` and returns the HTTP status and the `Warning` headers the apiserver added.
async fn send_for_warnings(
    client: &Client,
    request: Result<axum::http::Request<Vec<u8>>, kube::core::request::Error>,
) -> (u16, Vec<String>) {
    let request = request
        .expect("a well-formed request")
        .map(kube::client::Body::from);
    let response = client.send(request).await.expect("the apiserver answers");
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    (response.status().as_u16(), warnings)
}

fn has_warning(warnings: &[String], sentence: &str) -> bool {
    warnings.iter().any(|w| w.contains(sentence))
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn policy_warnings_reach_the_user_and_a_deleted_policy_is_announced() {
    use pdb_operator::validation::{CHANGED_CLASS_WARNING, DELETE_WARNING};
    let s = scenario("pdbop-warn").await;
    let (c, n) = (&s.cluster.client, s.ns.name());
    let url = format!("/apis/availability.pdboperator.io/v1alpha1/namespaces/{n}/pdbpolicies");
    let policy = json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
        "metadata": {"name": "loose"},
        "spec": {"availabilityClass": "standard", "enforcement": "flexible",
                 "enforceMinReplicas": false,
                 "workloadSelector": {"matchLabels": {"app": "a"}}}
    });
    let body = serde_json::to_vec(&policy).unwrap();
    let flexible = "flexible enforcement without minimumClass: availabilityClass is the minimum";
    let ignored = "enforceMinReplicas: false is ignored";
    // The binding takes effect a moment after it is created; dry runs until it does.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for("the warnings policy in effect", WAIT, || async {
        let (code, w) =
            send_for_warnings(c, kube::core::Request::new(&url).create(&dry, body.clone())).await;
        if code == 201 && has_warning(&w, flexible) {
            Check::Done(())
        } else {
            Check::NotYet(format!("{code} {w:?}"))
        }
    })
    .await;
    let (code, w) = send_for_warnings(
        c,
        kube::core::Request::new(&url).create(&PostParams::default(), body),
    )
    .await;
    assert_eq!(code, 201, "{w:?}");
    assert!(
        has_warning(&w, flexible) && has_warning(&w, ignored),
        "{w:?}"
    );

    let change =
        kube::api::Patch::Merge(json!({"spec": {"availabilityClass": "mission-critical"}}));
    let (code, w) = send_for_warnings(
        c,
        kube::core::Request::new(&url).patch("loose", &Default::default(), &change),
    )
    .await;
    assert_eq!(code, 200, "{w:?}");
    assert!(has_warning(&w, CHANGED_CLASS_WARNING), "{w:?}");

    let (code, w) = send_for_warnings(
        c,
        kube::core::Request::new(&url).delete("loose", &DeleteParams::default()),
    )
    .await;
    assert_eq!(code, 200, "{w:?}");
    assert!(has_warning(&w, DELETE_WARNING), "{w:?}");
    let note = wait_event(c, n, "loose", "PolicyRemoved").await;
    assert!(note.contains("PDBPolicy loose was deleted"), "{note}");

    // A ClusterPDBPolicy for every namespace (dry run: nothing is left behind).
    let cluster_policy = json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "ClusterPDBPolicy",
        "metadata": {"name": format!("{n}-everywhere")},
        "spec": {"availabilityClass": "standard",
                 "workloadSelector": {"matchLabels": {"app": "a"}}}
    });
    let (code, w) = send_for_warnings(
        c,
        kube::core::Request::new("/apis/availability.pdboperator.io/v1alpha1/clusterpdbpolicies")
            .create(&dry, serde_json::to_vec(&cluster_policy).unwrap()),
    )
    .await;
    assert_eq!(code, 201, "{w:?}");
    assert!(
        has_warning(&w, "this ClusterPDBPolicy applies to all namespaces"),
        "{w:?}"
    );
}
