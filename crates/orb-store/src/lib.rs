//! orb-store
