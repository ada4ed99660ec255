//! pdb-operator library: the PDBPolicy CRD types and every pure decision the controllers make
//! (budget math, policy resolution, enforcement, maintenance windows, gang shapes, desired PDB).
//!
//! The live half: [`runtime::run`] (controllers, discovery, leader election, HTTP endpoints),
//! [`controller`] (reconcilers that carry out decisions) and [`explain::explain`].
//!
//! A reconcile loop stays thin: build a view, ask for a [`desired::Decision`], carry it out.
//!
//! ```text
//! let view = WorkloadView::from_deployment(&deployment)?;            // or from_stateful_set,
//! let policies = Policies { namespaced, cluster, legacy_cross_namespace }; // LeaderWorkerSetView,
//! match desired_pdb_for_workload(&view, &policies, Timestamp::now()) {    // desired_pdb_for_gang
//!     Decision::Apply(want) => {
//!         // 1. find_pdb_conflict(&view.uid, name, &[view.pod_labels], &pdbs_in_namespace)
//!         //    → delete the PDB this workload owns (another PDB over its pods wins), post
//!         //      PDBConflict, requeue RETRY_AFTER, write nothing.
//!         // 2. want.only_if_exists && no owned PDB → write nothing (window open).
//!         // 3. add pdboperator.io/creation-time (live value, or now), server-side apply
//!         //    want.pdb with field manager "pdb-operator" and force.
//!         // 4. post want.events, want.window_transition_event(live), PDBCreated/PDBUpdated.
//!         // 5. requeue after want.requeue_after (next window boundary, ≤ 1 h).
//!     }
//!     Decision::NoPdb(none) => {
//!         // delete the PDB this workload owns (pdb::is_owned_by) when none.delete_owned_pdb,
//!         // post none.event + none.events, requeue none.retry_after or await a change.
//!     }
//! }
//! ```

pub mod budget;
pub mod class;
pub mod controller;
pub mod crd;
pub mod desired;
pub mod enforcement;
pub mod explain;
pub mod gang;
pub mod gang_decision;
pub mod gang_record;
pub mod metrics;
pub mod names;
pub mod pdb;
pub mod plan;
pub mod rbac;
pub mod resolve;
pub mod runtime;
pub mod status;
pub mod validation;
pub mod windows;
pub mod workload_api;
