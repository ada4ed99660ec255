//! pdb-operator library: the PDBPolicy CRD types and every pure decision the controllers make
//! (budget math, policy resolution, enforcement, maintenance windows, gang shapes, desired PDB).
//! The reconcile loops only gather inputs, call [`desired::desired_pdb_for_workload`] or
//! [`workload_api::desired_pdb_for_gang`], and apply the result.

pub mod budget;
pub mod class;
pub mod crd;
pub mod gang;
pub mod names;
