//! pdb-operator library: the PDBPolicy CRD types and every pure decision the controllers make
//! (budget math, policy resolution, enforcement, maintenance windows, gang shapes, desired PDB).
//! The reconcile loops only gather inputs, call [`desired::desired_pdb_for_workload`],
//! [`desired::desired_pdb_for_leader_worker_set`] or [`workload_api::desired_pdb_for_gang`],
//! and carry out the returned [`desired::Decision`].

pub mod budget;
pub mod class;
pub mod crd;
pub mod desired;
pub mod enforcement;
pub mod gang;
pub mod names;
pub mod pdb;
pub mod plan;
pub mod resolve;
pub mod status;
pub mod validation;
pub mod windows;
pub mod workload_api;
