//! The IBM Spectrum Symphony HostFactory provider interface: the five scripts' input and
//! output JSON, and how orb's statuses map onto HostFactory's.
//!
//! [`input`] parses what HostFactory sends (lenient about object-vs-list shapes, strict about
//! meaning); [`mapping`] holds the status tables; [`output`] builds the replies. Everything
//! here is pure, so every reply is snapshot-tested.

pub mod input;
pub mod mapping;
pub mod output;
mod status_json;

pub use status_json::machine_items;

#[cfg(test)]
mod tests;
