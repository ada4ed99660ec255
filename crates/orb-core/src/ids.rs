//! Request identifiers: `req-<uuid>` for acquires and `ret-<uuid>` for returns.
//!
//! The prefix carries the request type. Ids we did not mint ourselves (legacy 12-character ids,
//! migrated data) are still accepted as opaque strings so stored requests always stay readable.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a request does: acquire machines or return them. The id's prefix says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestType {
    Acquire,
    Return,
}

impl RequestType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Return => "return",
        }
    }
}

impl FromStr for RequestType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "acquire" => Ok(Self::Acquire),
            "return" => Ok(Self::Return),
            other => Err(format!(
                "unknown request type {other:?}; expected acquire or return"
            )),
        }
    }
}

/// An acquire or return request id. Construct with [`RequestId::new_acquire`],
/// [`RequestId::new_return`] or [`RequestId::parse`].
///
/// Shared, not owned: every machine of a request carries its id, and a status read of
/// thousands of machines copies them several times over, each copy a reference count.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(Arc<str>);

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|id| Self(id.into()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestIdError {
    #[error("request id is empty; pass an id such as req-3f2b0c1e-8a4d-4c6b-9e1f-0a2b3c4d5e6f")]
    Empty,
    #[error(
        "request id {0:?} is not valid: use the id orb printed (req-<uuid> or ret-<uuid>), \
         without spaces or slashes"
    )]
    Malformed(String),
}

impl RequestId {
    pub fn new_acquire() -> Self {
        Self::from_uuid(RequestType::Acquire, Uuid::new_v4())
    }

    pub fn new_return() -> Self {
        Self::from_uuid(RequestType::Return, Uuid::new_v4())
    }

    pub fn from_uuid(kind: RequestType, uuid: Uuid) -> Self {
        let prefix = match kind {
            RequestType::Acquire => "req",
            RequestType::Return => "ret",
        };
        Self(format!("{prefix}-{}", uuid.hyphenated()).into())
    }

    /// Accepts any id orb may have stored: printable ASCII, no whitespace or `/`, at most 128
    /// characters. Unknown ids are a lookup miss, not a parse error.
    pub fn parse(raw: &str) -> Result<Self, RequestIdError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(RequestIdError::Empty);
        }
        let acceptable = trimmed.len() <= 128
            && trimmed
                .chars()
                .all(|c| c.is_ascii_graphic() && c != '/' && c != '\\' && c != '"');
        if !acceptable {
            return Err(RequestIdError::Malformed(raw.to_string()));
        }
        Ok(Self(trimmed.into()))
    }

    /// The request type the prefix names; `None` for foreign or legacy ids.
    pub fn kind(&self) -> Option<RequestType> {
        if self.0.starts_with("req-") {
            Some(RequestType::Acquire)
        } else if self.0.starts_with("ret-") {
            Some(RequestType::Return)
        } else {
            None
        }
    }

    /// The uuid's hex digits without prefix and hyphens (the base of generated resource names).
    pub fn hex_digits(&self) -> String {
        let body = self
            .0
            .strip_prefix("req-")
            .or_else(|| self.0.strip_prefix("ret-"))
            .or_else(|| self.0.strip_prefix("req_"))
            .unwrap_or(&self.0);
        body.chars().filter(|c| c.is_ascii_hexdigit()).collect()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn an_id_is_a_plain_json_string_and_copies_share_it() {
        let id = RequestId::new_acquire();
        let text = serde_json::to_string(&id).unwrap();
        assert_eq!(text, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<RequestId>(&text).unwrap(), id);
        let copy = id.clone();
        assert!(std::ptr::eq(copy.as_str(), id.as_str()));
    }

    #[test]
    fn minted_ids_carry_their_type_prefix_and_a_lowercase_uuid() {
        let acquire = RequestId::new_acquire();
        let ret = RequestId::new_return();
        assert_eq!(acquire.kind(), Some(RequestType::Acquire));
        assert_eq!(ret.kind(), Some(RequestType::Return));
        assert_eq!(acquire.as_str().len(), 4 + 36);
        assert_eq!(acquire.as_str(), acquire.as_str().to_lowercase());
        assert_ne!(acquire, RequestId::new_acquire());
    }

    #[rstest]
    #[case::acquire("req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f", Some(RequestType::Acquire))]
    #[case::ret("ret-ce0680f0-0194-44bc-981b-0a2b3c4d5e6f", Some(RequestType::Return))]
    #[case::legacy("abcdefghijkl", None)]
    #[case::ibm_sample("r-010d8f03b13097efd", None)]
    fn stored_id_forms_parse(#[case] raw: &str, #[case] kind: Option<RequestType>) {
        let id = RequestId::parse(raw).expect("valid id");
        assert_eq!(id.kind(), kind);
        assert_eq!(id.as_str(), raw);
    }

    #[rstest]
    #[case::empty("", RequestIdError::Empty)]
    #[case::blank("   ", RequestIdError::Empty)]
    #[case::space("req 1", RequestIdError::Malformed("req 1".into()))]
    #[case::slash("../etc", RequestIdError::Malformed("../etc".into()))]
    fn malformed_ids_are_rejected(#[case] raw: &str, #[case] expected: RequestIdError) {
        assert_eq!(RequestId::parse(raw), Err(expected));
    }

    #[test]
    fn hex_digits_strip_prefix_and_hyphens() {
        let id = RequestId::parse("req-fe4cda5c-0194-44bc-981b-0a2b3c4d5e6f").unwrap();
        assert_eq!(id.hex_digits(), "fe4cda5c019444bc981b0a2b3c4d5e6f");
    }
}
