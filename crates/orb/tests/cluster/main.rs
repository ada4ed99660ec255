//! The `orb` binary, `orb serve` and the library against the real local control plane, all in
//! one test binary so that a change to orb links one binary instead of one per file. One module
//! per former `tests/*_cluster.rs` file; `lifecycle` is the lifecycle matrix with its helpers
//! (`lifecycle::world`) and the crash, limit and scenario tests. Every test owns its namespace
//! (and its orb root directory, its `orb serve` ports and, where it needs one, its own KWOK node
//! or PostgreSQL server), so the tests run side by side.
//!
//! Run: `cargo test -p orb --test cluster -- --include-ignored --test-threads=4`, or one
//! module: `... -- --include-ignored lifecycle::crashes::`. Some modules need more than the
//! control plane (PostgreSQL, helm, the images, root): see docs/tests.md.

#[path = "../serve_support/mod.rs"]
mod serve_support;
#[path = "../support/mod.rs"]
mod support;

mod clients_rest;
mod console;
mod doctor;
mod e2e;
mod hostfactory_daemon;
mod image;
mod incluster;
mod lifecycle;
mod mcp;
mod native_spec_cli;
mod node_watch_serve;
mod postgres_restart;
mod reconcile;
mod serve;
mod serve_auth;
mod serve_kill;
mod serve_settings;
mod serve_watch_cache;
mod soak;
mod template_bounds;
mod template_policy;

/// The test cluster has room for 750 pods (3 nodes of 250) and each test that holds this fills
/// 200 of them (the kill and blackout tests of `lifecycle::crashes` and
/// `lifecycle::return_crashes`, and `serve_kill`): run alongside each other (the suite runs
/// several tests at once) they would leave pods Pending for want of room, which is not what
/// they test. One at a time, then. Every test of this binary that makes 100 pods or more must
/// hold it: the tests of all modules share the cluster at the same time.
pub(crate) static ROOM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
