//! The patch formats the real server applies to objects. JSON merge patch (RFC 7386) is
//! `json_patch::merge`, applied by the registry as it is; here are JSON patch (RFC 6902, the
//! `json_patch` crate with the real server's limits and error codes) and strategic merge patch,
//! which no library does: the list merge keys each Go type declares (`patchStrategy` /
//! `patchMergeKey` tags in `k8s.io/api`) and the `$patch` directives. Pure functions.

use serde_json::{Map, Value};

use crate::errors::ApiError;
use crate::resources::Store;

/// How a list field merges under a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListStrategy {
    /// No patch strategy: the patch's list replaces the live list (atomic).
    Replace,
    /// `patchStrategy:"merge"` on a list of scalars: set union.
    MergeScalars,
    /// `patchStrategy:"merge" patchMergeKey:"<key>"` on a list of objects.
    MergeKey(&'static str),
}

/// The merge strategy of the list at `path` (field names from the object root, no indices),
/// as declared by the Go types in `k8s.io/api` for the kinds served here.
pub fn list_strategy(store: Store, path: &[&str]) -> ListStrategy {
    use ListStrategy::*;
    match path {
        // ObjectMeta: Finalizers `patchStrategy:"merge"`, OwnerReferences merge on uid.
        ["metadata", "finalizers"] => MergeScalars,
        ["metadata", "ownerReferences"] => MergeKey("uid"),
        _ => match (store, path) {
            // NodeSpec.PodCIDRs `patchStrategy:"merge"`; Taints carry no strategy (atomic).
            (Store::Nodes, ["spec", "podCIDRs"]) => MergeScalars,
            // NodeStatus.Conditions and .Addresses: `patchStrategy:"merge" patchMergeKey:"type"`.
            // For addresses this is a known upstream mistake (two InternalIPs collapse into one);
            // real clients send `$patch: replace` for addresses, which this honours too.
            (Store::Nodes, ["status", "conditions"]) => MergeKey("type"),
            (Store::Nodes, ["status", "addresses"]) => MergeKey("type"),
            // ServiceSpec.Ports: `patchStrategy:"merge" patchMergeKey:"port"`.
            (Store::Services, ["spec", "ports"]) => MergeKey("port"),
            (Store::Services, ["status", "conditions"]) => MergeKey("type"),
            (Store::Namespaces, ["status", "conditions"]) => MergeKey("type"),
            _ => Replace,
        },
    }
}

/// Applies an RFC 6902 JSON patch. A patch that does not decode is a 400; one that fails to
/// apply (a failed `test`, a missing path) is the real server's generic 422.
pub fn json_patch(doc: &mut Value, patch_bytes: &[u8]) -> Result<(), ApiError> {
    let patch: json_patch::Patch =
        serde_json::from_slice(patch_bytes).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if patch.0.len() > 10000 {
        return Err(ApiError {
            code: 413,
            reason: "RequestEntityTooLarge",
            message: format!(
                "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got {}",
                patch.0.len()
            ),
            details: None,
            list_continue: None,
        });
    }
    json_patch::patch(doc, &patch).map_err(|_| ApiError::generic_unprocessable())
}

/// Errors of strategic merge patch, mapped to codes the way `interpretStrategicMergePatchError`
/// does (malformed directives are 400; anything else passes through as a 500).
fn smp_bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `original` for an object of `store`.
pub fn strategic_merge(store: Store, original: &Value, patch: &Value) -> Result<Value, ApiError> {
    let Value::Object(p) = patch else {
        return Err(smp_bad("invalid JSON document"));
    };
    let orig = original.as_object().cloned().unwrap_or_default();
    let mut path = Vec::new();
    Ok(Value::Object(merge_map(store, orig, p, &mut path)?))
}

fn merge_map(
    store: Store,
    mut orig: Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(d) = patch.get(DIRECTIVE) {
        match d.as_str() {
            Some("replace") => {
                let mut p = patch.clone();
                p.remove(DIRECTIVE);
                return merge_map(store, Map::new(), &p, path);
            }
            Some("delete") => return Ok(Map::new()),
            _ => return Err(smp_bad(format!("Unknown patch type: {d}"))),
        }
    }
    // $deleteFromPrimitiveList/<field>: remove listed values from a scalar list.
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE_PREFIX) {
            let Value::Array(del) = v else {
                return Err(smp_bad("invalid patch: $deleteFromPrimitiveList must be a list"));
            };
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|x| !del.contains(x));
            }
        }
    }
    for (k, v) in patch {
        if k == RETAIN_KEYS || k.starts_with(SET_ORDER_PREFIX) || k.starts_with(DELETE_PRIMITIVE_PREFIX) {
            continue;
        }
        if v.is_null() {
            orig.remove(k);
            continue;
        }
        path.push(k.clone());
        let merged = match (orig.remove(k), v) {
            (Some(Value::Object(o)), Value::Object(pv)) => Value::Object(merge_map(store, o, pv, path)?),
            (Some(Value::Array(o)), Value::Array(pv)) => {
                let order = patch
                    .get(&format!("{SET_ORDER_PREFIX}{k}"))
                    .and_then(Value::as_array);
                Value::Array(merge_list(store, o, pv, order, path)?)
            }
            (_, Value::Object(pv)) => Value::Object(merge_map(store, Map::new(), pv, path)?),
            (_, Value::Array(pv)) => {
                let order = patch
                    .get(&format!("{SET_ORDER_PREFIX}{k}"))
                    .and_then(Value::as_array);
                Value::Array(merge_list(store, Vec::new(), pv, order, path)?)
            }
            (_, other) => other.clone(),
        };
        path.pop();
        orig.insert(k.clone(), merged);
    }
    // A $setElementOrder without a patch for that list only reorders the live list.
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(SET_ORDER_PREFIX)
            && !patch.contains_key(field)
        {
            let Value::Array(order) = v else {
                return Err(smp_bad("invalid patch: $setElementOrder must be a list"));
            };
            if let Some(Value::Array(list)) = orig.remove(field) {
                path.push(field.to_string());
                let key = match list_strategy(store, &path.iter().map(String::as_str).collect::<Vec<_>>()) {
                    ListStrategy::MergeKey(k) => Some(k),
                    _ => None,
                };
                path.pop();
                let reordered = normalize_order(list.clone(), order, &list, key);
                orig.insert(field.to_string(), Value::Array(reordered));
            }
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let Value::Array(keys) = retain else {
            return Err(smp_bad("invalid patch: $retainKeys must be a list"));
        };
        let keep: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(orig)
}

fn identity<'a>(item: &'a Value, key: Option<&str>) -> Option<&'a Value> {
    match key {
        Some(k) => item.get(k),
        None => Some(item),
    }
}

fn position(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    let id = identity(item, key)?;
    list.iter().position(|x| identity(x, key) == Some(id))
}

/// The real server's `normalizeElementOrder` + `mergeSortedSlice`: items named in the patch
/// (or `$setElementOrder`) keep that order, the others keep the live order, and the two are
/// interleaved by their positions in the live list.
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    live: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let (mut patch_items, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|x| position(patch_order, x, key).is_some());
    patch_items.sort_by_key(|x| position(patch_order, x, key).unwrap_or(usize::MAX));
    server_only.sort_by_key(|x| position(live, x, key).unwrap_or(usize::MAX));
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(patch_items.len() + server_only.len());
    while i < server_only.len() || j < patch_items.len() {
        if i >= server_only.len() {
            out.push(patch_items[j].clone());
            j += 1;
        } else if j >= patch_items.len() {
            out.push(server_only[i].clone());
            i += 1;
        } else {
            let l = position(live, &server_only[i], key);
            let r = position(live, &patch_items[j], key);
            match (l, r) {
                (Some(l), Some(r)) if l < r => {
                    out.push(server_only[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(patch_items[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

fn merge_list(
    store: Store,
    orig: Vec<Value>,
    patch: &[Value],
    set_order: Option<&Vec<Value>>,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, ApiError> {
    let strategy = list_strategy(store, &path.iter().map(String::as_str).collect::<Vec<_>>());
    match strategy {
        ListStrategy::Replace => {
            // Atomic list: the patch's value wins; directives inside maps are still stripped.
            let mut out = Vec::with_capacity(patch.len());
            for item in patch {
                out.push(match item {
                    Value::Object(m) => Value::Object(merge_map(store, Map::new(), m, path)?),
                    other => other.clone(),
                });
            }
            Ok(out)
        }
        ListStrategy::MergeScalars => {
            if patch.iter().any(Value::is_object) {
                return Err(smp_bad("invalid patch: a list of primitives cannot contain maps"));
            }
            let mut merged = orig.clone();
            for item in patch {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            let order: &[Value] = set_order.map(Vec::as_slice).unwrap_or(patch);
            Ok(normalize_order(merged, order, &orig, None))
        }
        ListStrategy::MergeKey(key) => {
            // `{"$patch": "replace"}` as an element replaces the whole list with the others.
            if patch
                .iter()
                .any(|i| i.get(DIRECTIVE).and_then(Value::as_str) == Some("replace"))
            {
                let mut out = Vec::new();
                for item in patch {
                    if item.get(DIRECTIVE).is_some() {
                        continue;
                    }
                    match item {
                        Value::Object(m) => out.push(Value::Object(merge_map(store, Map::new(), m, path)?)),
                        other => out.push(other.clone()),
                    }
                }
                return Ok(out);
            }
            let mut merged = orig.clone();
            let mut plain: Vec<Value> = Vec::new();
            for item in patch {
                let Value::Object(m) = item else {
                    return Err(smp_bad(
                        "invalid patch: a list with a merge key must contain maps",
                    ));
                };
                let Some(kv) = m.get(key) else {
                    // mergepatch.ErrNoMergeKey is not mapped by the real server: it surfaces as a 500.
                    return Err(ApiError::internal_unknown(format!(
                        "map: {} does not contain declared merge key: {key}",
                        Value::Object(m.clone())
                    )));
                };
                match m.get(DIRECTIVE).and_then(Value::as_str) {
                    Some("delete") => {
                        merged.retain(|x| x.get(key) != Some(kv));
                        continue;
                    }
                    Some("merge") | None => {}
                    Some(other) => return Err(smp_bad(format!("Unknown patch type: {other}"))),
                }
                let mut m = m.clone();
                m.remove(DIRECTIVE);
                if let Some(pos) = merged.iter().position(|x| x.get(key) == Some(kv)) {
                    let current = merged[pos].as_object().cloned().unwrap_or_default();
                    merged[pos] = Value::Object(merge_map(store, current, &m, path)?);
                } else {
                    merged.push(Value::Object(merge_map(store, Map::new(), &m, path)?));
                }
                plain.push(Value::Object(m));
            }
            let order: &[Value] = set_order.map(Vec::as_slice).unwrap_or(&plain);
            Ok(normalize_order(merged, order, &orig, Some(key)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_test_op_is_a_precondition() {
        let mut doc = json!({"metadata": {"resourceVersion": "5", "labels": {}}});
        let ok = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"5"},{"op":"add","path":"/metadata/labels/a","value":"b"}]"#;
        json_patch(&mut doc, ok).unwrap();
        assert_eq!(doc["metadata"]["labels"]["a"], "b");
        let stale = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"4"},{"op":"add","path":"/metadata/labels/c","value":"d"}]"#;
        let err = json_patch(&mut doc, stale).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert!(doc["metadata"]["labels"].get("c").is_none());
        let err = json_patch(&mut doc, b"{not json").unwrap_err();
        assert_eq!(err.code, 400);
        let err = json_patch(&mut doc, br#"[{"op":"remove","path":"/spec/nothing"}]"#).unwrap_err();
        assert_eq!(err.code, 422);
    }

    fn smp(store: Store, orig: Value, patch: Value) -> Value {
        strategic_merge(store, &orig, &patch).unwrap()
    }

    #[test]
    fn strategic_merge_node_conditions_by_type() {
        let orig = json!({"status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
        ]}});
        let got = smp(
            Store::Nodes,
            orig,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": null}]}}),
        );
        assert_eq!(
            got,
            json!({"status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"}
            ]}})
        );
    }

    #[test]
    fn strategic_merge_new_item_goes_first_like_upstream() {
        let orig = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}});
        let got = smp(
            Store::Nodes,
            orig,
            json!({"status": {"conditions": [{"type": "C"}]}}),
        );
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "C"}, {"type": "A"}, {"type": "B"}])
        );
    }

    #[test]
    fn strategic_merge_addresses_merge_by_type_and_replace_directive() {
        let orig = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n1"}
        ]}});
        // Merge key `type`: a second InternalIP replaces the first (the upstream quirk).
        let got = smp(
            Store::Nodes,
            orig.clone(),
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        );
        assert_eq!(
            got["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}])
        );
        // What client-go's PatchNodeStatus sends: `$patch: replace` as a list element.
        let got = smp(
            Store::Nodes,
            orig,
            json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.2"},
                {"type": "InternalIP", "address": "10.0.0.3"},
                {"$patch": "replace"}
            ]}}),
        );
        assert_eq!(
            got["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "InternalIP", "address": "10.0.0.3"}])
        );
    }

    #[test]
    fn strategic_merge_taints_are_atomic() {
        let orig = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let got = smp(
            Store::Nodes,
            orig,
            json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}),
        );
        assert_eq!(
            got["spec"]["taints"],
            json!([{"key": "b", "effect": "NoExecute"}])
        );
    }

    #[test]
    fn strategic_merge_service_ports_by_port() {
        let orig = json!({"spec": {"ports": [
            {"name": "http", "port": 80, "nodePort": 30080},
            {"name": "https", "port": 443, "nodePort": 30443}
        ]}});
        let got = smp(
            Store::Services,
            orig,
            json!({"spec": {"ports": [{"port": 443, "name": "tls"}, {"port": 80, "$patch": "delete"}]}}),
        );
        assert_eq!(
            got["spec"]["ports"],
            json!([{"name": "tls", "port": 443, "nodePort": 30443}])
        );
    }

    #[test]
    fn strategic_merge_finalizers_union_and_delete_from_primitive_list() {
        let orig = json!({"metadata": {"finalizers": ["a", "b"]}});
        let got = smp(
            Store::Services,
            orig.clone(),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
        );
        assert_eq!(got["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let got = smp(
            Store::Services,
            orig,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(got["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn strategic_merge_set_element_order_and_retain_keys() {
        let orig = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}, {"type": "C"}]}});
        let got = smp(
            Store::Nodes,
            orig,
            json!({"status": {"$setElementOrder/conditions": [{"type": "C"}, {"type": "B"}, {"type": "A"}]}}),
        );
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "C"}, {"type": "B"}, {"type": "A"}])
        );
        let got = smp(
            Store::Nodes,
            json!({"spec": {"a": 1, "b": 2}}),
            json!({"spec": {"$retainKeys": ["b"], "b": 3}}),
        );
        assert_eq!(got, json!({"spec": {"b": 3}}));
    }

    #[test]
    fn strategic_merge_map_directives_and_errors() {
        let got = smp(
            Store::Nodes,
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(got["metadata"]["labels"], json!({"c": "3"}));
        let got = smp(
            Store::Nodes,
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"a": null}}}),
        );
        assert_eq!(got["metadata"]["labels"], json!({}));
        let e = strategic_merge(
            Store::Nodes,
            &json!({}),
            &json!({"status": {"conditions": [{"status": "x"}]}}),
        )
        .unwrap_err();
        assert_eq!(e.code, 500);
        let e = strategic_merge(Store::Nodes, &json!({}), &json!({"spec": {"$patch": "bogus"}})).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            strategic_merge(Store::Nodes, &json!({}), &json!([1]))
                .unwrap_err()
                .code,
            400
        );
    }
}
