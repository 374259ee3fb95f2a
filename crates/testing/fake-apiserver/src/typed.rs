//! Decoding into the real API types. The real server decodes request bodies into Go structs,
//! which drops unknown fields and rejects wrongly typed ones; a typed round trip through
//! k8s-openapi gives the same pruning and type checks here.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::errors::ApiError;
use crate::resources::{ResourceDef, Store};

fn round_trip<T: DeserializeOwned + Serialize>(def: &ResourceDef, v: Value) -> Result<Value, ApiError> {
    let typed: T = serde_json::from_value(v).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {ver:?} cannot be handled as a {kind}: {e}",
            kind = def.kind,
            ver = def.version
        ))
    })?;
    serde_json::to_value(&typed).map_err(ApiError::internal)
}

/// Checks `apiVersion`/`kind` against the endpoint and prunes the body to the type's fields.
pub fn decode(def: &ResourceDef, mut v: Value) -> Result<Value, ApiError> {
    let Value::Object(map) = &mut v else {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {ver:?} cannot be handled as a {kind}: expected an object",
            kind = def.kind,
            ver = def.version
        )));
    };
    let want = def.api_version();
    if let Some(av) = map.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != want
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want})"
        )));
    }
    if let Some(k) = map.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "{k} in version {ver:?} cannot be handled as a {kind}: the kind in the data does not match",
            kind = def.kind,
            ver = def.version
        )));
    }
    map.insert("apiVersion".into(), Value::String(want));
    map.insert("kind".into(), Value::String(def.kind.into()));
    use k8s_openapi::api;
    match (def.store, def.events_v1) {
        (Store::Nodes, _) => round_trip::<api::core::v1::Node>(def, v),
        (Store::Services, _) => round_trip::<api::core::v1::Service>(def, v),
        (Store::Namespaces, _) => round_trip::<api::core::v1::Namespace>(def, v),
        (Store::ConfigMaps, _) => round_trip::<api::core::v1::ConfigMap>(def, v),
        (Store::Secrets, _) => round_trip::<api::core::v1::Secret>(def, v),
        (Store::Leases, _) => round_trip::<api::coordination::v1::Lease>(def, v),
        (Store::Events, false) => round_trip::<api::core::v1::Event>(def, v),
        (Store::Events, true) => round_trip::<api::events::v1::Event>(def, v),
    }
}

/// Moves fields between the core/v1 Event (the stored shape) and the `events.k8s.io/v1` shape.
const EVENT_FIELD_MAP: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

pub fn event_core_to_v1(core: &Value) -> Value {
    let mut out = core.clone();
    if let Value::Object(m) = &mut out {
        for (c, e) in EVENT_FIELD_MAP {
            if let Some(v) = m.remove(*c) {
                m.insert((*e).to_string(), v);
            }
        }
        m.insert("apiVersion".into(), Value::String("events.k8s.io/v1".into()));
        m.insert("kind".into(), Value::String("Event".into()));
    }
    out
}

pub fn event_v1_to_core(v1: &Value) -> Value {
    let mut out = v1.clone();
    if let Value::Object(m) = &mut out {
        for (c, e) in EVENT_FIELD_MAP {
            if let Some(v) = m.remove(*e) {
                m.insert((*c).to_string(), v);
            }
        }
        m.insert("apiVersion".into(), Value::String("v1".into()));
        m.insert("kind".into(), Value::String("Event".into()));
    }
    out
}

/// The stored object as the endpoint `def` presents it.
pub fn present(def: &ResourceDef, stored: &Value) -> Value {
    if def.events_v1 {
        event_core_to_v1(stored)
    } else {
        stored.clone()
    }
}

/// Converts a request-shaped object to the stored shape.
pub fn to_storage(def: &ResourceDef, obj: Value) -> Value {
    if def.events_v1 {
        event_v1_to_core(&obj)
    } else {
        obj
    }
}

/// Fields of `input` that the typed decode dropped: what the real server's strict decoder
/// reports as `unknown field "<path>"`.
pub fn unknown_fields(input: &Value, decoded: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_unknown(input, decoded, "", &mut out);
    out
}

fn walk_unknown(input: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(i), Value::Object(d)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match d.get(k) {
                    Some(dv) => walk_unknown(v, dv, &p, out),
                    None if v.is_null() => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(i), Value::Array(d)) => {
            for (n, (iv, dv)) in i.iter().zip(d.iter()).enumerate() {
                walk_unknown(iv, dv, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prunes_unknown_fields_and_rejects_wrong_types() {
        let nodes = crate::resources::find("", "v1", "nodes").unwrap();
        let v = decode(
            nodes,
            json!({"metadata": {"name": "n"}, "spec": {"bogus": 1, "unschedulable": true}}),
        )
        .unwrap();
        assert_eq!(v["spec"], json!({"unschedulable": true}));
        assert_eq!(v["kind"], "Node");
        let e = decode(
            nodes,
            json!({"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}}),
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        let e = decode(nodes, json!({"apiVersion": "apps/v1", "metadata": {"name": "n"}})).unwrap_err();
        assert_eq!(e.code, 400);
    }

    #[test]
    fn event_shapes_round_trip() {
        let v1 = json!({"metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "n"}, "note": "hi", "reportingController": "c", "deprecatedCount": 3});
        let core = event_v1_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "n");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["count"], 3);
        let back = event_core_to_v1(&core);
        assert_eq!(back["note"], "hi");
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
    }
}
