//! orb-k8s
