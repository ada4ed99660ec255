//! orb-core
