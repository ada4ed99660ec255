//! [`Shared`]: a value that copies of its owner share until one of them changes it.
//!
//! A machine's tags and provider data are small maps of strings; a status read of a
//! 5,000-machine request copied them for every machine several times over (the stored list,
//! the provider's observation, the folded result). Shared, a copy is a reference count, and
//! a write through `DerefMut` copies the value first only if someone else still holds it.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value behind a reference count. Reads go through [`Deref`]; a write through
/// [`DerefMut`] copies the value first when another owner still holds it (copy on write).
/// Equality, ordering of fields and the serialised form are those of the value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub fn new(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// The shared value itself, for an owner that only reads it.
    pub fn to_arc(&self) -> Arc<T> {
        self.0.clone()
    }

    /// Whether `a` and `b` are the same allocation (so equal without comparing).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T: Clone> Shared<T> {
    /// The value, copied only when another owner still holds it.
    pub fn into_inner(self) -> T {
        Arc::unwrap_or_clone(self.0)
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn copies_share_until_one_is_changed() {
        let mut a: Shared<BTreeMap<String, String>> =
            BTreeMap::from([("k".to_string(), "v".to_string())]).into();
        let b = a.clone();
        assert!(Shared::ptr_eq(&a, &b), "a copy is the same allocation");
        a.insert("k2".into(), "v2".into());
        assert!(!Shared::ptr_eq(&a, &b), "a write copies first");
        assert_eq!(b.len(), 1, "the other copy is untouched");
        assert_eq!(a.len(), 2);
        let mut only = Shared::new(vec![1]);
        let before = Arc::as_ptr(&only.0);
        only.push(2);
        assert_eq!(Arc::as_ptr(&only.0), before, "a sole owner writes in place");
        let held = only.clone();
        assert_eq!(only.into_inner(), vec![1, 2], "a held value is copied out");
        assert_eq!(*held, vec![1, 2], "and the holder keeps it");
    }

    #[test]
    fn equality_and_json_are_those_of_the_value() {
        let a = Shared::new(serde_json::json!({"node_name": "n1", "ready": true}));
        let b = Shared::new(serde_json::json!({"ready": true, "node_name": "n1"}));
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), format!("{:?}", *b));
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, serde_json::to_string(&*a).unwrap());
        assert_eq!(
            serde_json::from_str::<Shared<serde_json::Value>>(&text).unwrap(),
            a
        );
    }
}
