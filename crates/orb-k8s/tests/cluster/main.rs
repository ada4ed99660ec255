//! The Kubernetes provider against the real local control plane (KWOK nodes). Each numbered
//! behaviour of the handlers issue has a test here; every test owns a namespace.
//!
//! Run: `KUBECONFIG=/work/main/.state/control-plane/admin.kubeconfig cargo test -p orb-k8s -- --include-ignored --test-threads=4`

mod common;
mod controllers;
mod end_to_end;
mod job;
mod lifecycle;
mod pod;
