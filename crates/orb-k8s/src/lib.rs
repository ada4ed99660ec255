//! orb-k8s
pub mod config;
pub mod labels;
pub mod naming;
pub mod validation;
