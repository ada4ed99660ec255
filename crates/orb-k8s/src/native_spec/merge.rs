//! The deep merge behind native specs and `pod_spec_override`.
//!
//! Objects merge key by key, recursively; on any other collision the overlay's value wins.
//! A `null` in the overlay deletes the key (JSON merge-patch style). Lists follow a
//! [`ListMerge`] rule: native specs replace them whole; `pod_spec_override` merges the
//! Kubernetes lists that have a natural key (containers by `name`, …) so overriding one
//! container field does not drop orb's container.

use serde_json::{Map, Value};

/// What happens when both sides hold a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMerge {
    /// The overlay's list replaces the base list (native specs).
    Replace,
    /// Lists of well-known keyed Kubernetes items ([`list_merge_key`]) merge item by item;
    /// other lists are replaced (`pod_spec_override`).
    ByKey,
}

/// The key that identifies items of a Kubernetes list field, as in strategic merge patch.
pub fn list_merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => Some("name"),
        "volumeMounts" | "volumeDevices" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Merges `overlay` onto `base` in place.
pub fn deep_merge(base: &mut Value, overlay: Value, lists: ListMerge) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => merge_objects(base, overlay, lists),
        (base, overlay) => *base = overlay,
    }
}

fn merge_objects(base: &mut Map<String, Value>, overlay: Map<String, Value>, lists: ListMerge) {
    for (key, value) in overlay {
        if value.is_null() {
            base.remove(&key);
            continue;
        }
        match (base.get_mut(&key), value) {
            (Some(Value::Array(items)), Value::Array(new_items)) if lists == ListMerge::ByKey => {
                match list_merge_key(&key) {
                    Some(id) if keyed(items, id) && keyed(&new_items, id) => {
                        merge_keyed_list(items, new_items, id, lists)
                    }
                    _ => *items = new_items,
                }
            }
            (Some(existing), value) => deep_merge(existing, value, lists),
            (None, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn keyed(items: &[Value], id: &str) -> bool {
    items
        .iter()
        .all(|item| item.get(id).is_some_and(|v| !v.is_null()))
}

fn merge_keyed_list(base: &mut Vec<Value>, overlay: Vec<Value>, id: &str, lists: ListMerge) {
    for item in overlay {
        match base.iter_mut().find(|b| b.get(id) == item.get(id)) {
            Some(existing) => deep_merge(existing, item, lists),
            None => base.push(item),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::disjoint_keys_are_kept(json!({"a": 1}), json!({"b": 2}), json!({"a": 1, "b": 2}))]
    #[case::overlay_leaf_wins(json!({"a": 1}), json!({"a": 2}), json!({"a": 2}))]
    #[case::nested_objects_merge(
        json!({"spec": {"replicas": 1, "paused": false}}),
        json!({"spec": {"strategy": {"type": "Recreate"}}}),
        json!({"spec": {"replicas": 1, "paused": false, "strategy": {"type": "Recreate"}}}))]
    #[case::lists_are_replaced(
        json!({"containers": [{"name": "orb", "image": "a"}]}),
        json!({"containers": [{"name": "side", "image": "b"}]}),
        json!({"containers": [{"name": "side", "image": "b"}]}))]
    #[case::null_deletes(json!({"a": 1, "b": 2}), json!({"a": null}), json!({"b": 2}))]
    #[case::type_change_takes_the_overlay(json!({"a": {"x": 1}}), json!({"a": "s"}), json!({"a": "s"}))]
    #[case::object_replaces_scalar(json!({"a": 1}), json!({"a": {"x": 1}}), json!({"a": {"x": 1}}))]
    #[case::empty_overlay_changes_nothing(json!({"a": [1]}), json!({}), json!({"a": [1]}))]
    fn native_merge_table(#[case] base: Value, #[case] overlay: Value, #[case] expected: Value) {
        let mut merged = base;
        deep_merge(&mut merged, overlay, ListMerge::Replace);
        assert_eq!(merged, expected);
    }

    #[rstest]
    #[case::container_merged_by_name(
        json!({"containers": [{"name": "orb", "image": "a", "args": ["x"]}]}),
        json!({"containers": [{"name": "orb", "securityContext": {"runAsUser": 1000}}]}),
        json!({"containers": [{"name": "orb", "image": "a", "args": ["x"], "securityContext": {"runAsUser": 1000}}]}))]
    #[case::new_container_appended(
        json!({"containers": [{"name": "orb", "image": "a"}]}),
        json!({"containers": [{"name": "side", "image": "b"}]}),
        json!({"containers": [{"name": "orb", "image": "a"}, {"name": "side", "image": "b"}]}))]
    #[case::env_merged_by_name(
        json!({"containers": [{"name": "orb", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}),
        json!({"containers": [{"name": "orb", "env": [{"name": "B", "value": "3"}]}]}),
        json!({"containers": [{"name": "orb", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]}]}))]
    #[case::unkeyed_lists_replaced(
        json!({"tolerations": [{"key": "a"}]}),
        json!({"tolerations": [{"key": "b"}]}),
        json!({"tolerations": [{"key": "b"}]}))]
    #[case::items_without_the_key_replace_the_list(
        json!({"volumes": [{"name": "v"}]}),
        json!({"volumes": [{"emptyDir": {}}]}),
        json!({"volumes": [{"emptyDir": {}}]}))]
    fn keyed_merge_table(#[case] base: Value, #[case] overlay: Value, #[case] expected: Value) {
        let mut merged = base;
        deep_merge(&mut merged, overlay, ListMerge::ByKey);
        assert_eq!(merged, expected);
    }
}
