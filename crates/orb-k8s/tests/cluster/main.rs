//! The Kubernetes provider against the real local control plane (KWOK nodes), all in one test
//! binary so that a change to orb-k8s links one binary instead of one per file. Each numbered
//! behaviour of the handlers issue has a test here; every test owns a namespace, so the tests
//! run side by side (cargo's default threads, or `--test-threads=4` as `scripts/test.sh` runs
//! them).
//!
//! Run: `cargo test -p orb-k8s --test cluster -- --include-ignored --test-threads=4`, or one
//! module: `... -- --include-ignored watch_cache::`.
//!
//! Not here: `watch_cache_apiserver_restart.rs` restarts the apiserver every test shares, so it
//! is a binary of its own (cargo runs test binaries one after another, never two at once).

mod auth;
mod common;
mod concurrent_release;
mod controllers;
mod end_to_end;
mod job;
mod lifecycle;
mod machine_truth;
mod namespace_modes;
mod native_acquire;
mod native_contracts;
mod native_spec;
mod node_watch;
mod pod;
mod pod_security;
mod protobuf_list;
mod rbac;
mod read_ahead;
mod resilience;
mod returns;
mod settings;
mod watch_cache;
