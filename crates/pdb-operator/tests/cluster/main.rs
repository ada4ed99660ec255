//! The operator against the real local control plane, all in one test binary so that a change
//! to pdb-operator links one binary instead of one per file. One module per former
//! `tests/live_*.rs` file (their test names keep the `live_apps::`, `live_scenarios::` ...
//! prefixes docs/pdb-operator/scenarios.md uses) and the in-cluster image test. Every test owns
//! its namespace and its in-process operator scoped to it, so the tests run side by side.
//! Cluster-scoped objects are shared and safe to share: the CRDs and the admission policy are
//! applied idempotently and never deleted (except the LeaderWorkerSet CRD, which only
//! `live_lws` touches, under its own lock), ClusterRoles and ClusterPDBPolicies carry the
//! test's unique name and a ClusterPDBPolicy lists only its test's namespace.
//!
//! Run: `cargo test -p pdb-operator --test cluster -- --include-ignored --test-threads=4`
//! (`incluster_image` also needs root, `ORB_HELM` and `ORB_IMAGES_DIR`: see docs/tests.md).

#[path = "../common/mod.rs"]
mod common;
mod incluster_image;
mod live_apps;
mod live_gang;
mod live_gang_change;
mod live_gang_drain;
mod live_kill;
mod live_lws;
mod live_overlap;
mod live_rbac;
mod live_runtime;
mod live_scenarios;
mod soak;
