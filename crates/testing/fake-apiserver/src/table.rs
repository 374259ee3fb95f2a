//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for (`as=Table`), with the
//! columns the real printers (`pkg/printers/internalversion`) use for these kinds.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{ResourceDef, Store};
use crate::strategy::s;

fn col(name: &str, ty: &str, format: &str, priority: i32, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

/// kubectl's `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    let y = d / 365;
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        let s = secs % 60;
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        let mm = m % 60;
        if mm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{mm}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        let hh = h % 24;
        if hh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{hh}h")
        }
    } else if y < 2 {
        format!("{d}d")
    } else if y < 8 {
        let dd = d % 365;
        if dd == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{dd}d")
        }
    } else {
        format!("{y}y")
    }
}

fn age(ts: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(ts) {
        Ok(t) => human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()),
        Err(_) => "<unknown>".into(),
    }
}

fn node_row(n: &Value) -> Vec<Value> {
    let conds = n
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = match conds
        .iter()
        .find(|c| s(c, "/type") == "Ready")
        .map(|c| s(c, "/status"))
    {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if n.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = n
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| {
                    if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                        Some(r.to_string())
                    } else if k == "kubernetes.io/role" {
                        v.as_str().map(str::to_string)
                    } else {
                        None
                    }
                })
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let addr = |t: &str| {
        n.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| s(x, "/type") == t))
            .map(|x| s(x, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |f: &str| {
        let v = s(n, &format!("/status/nodeInfo/{f}"));
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        json!(s(n, "/metadata/name")),
        json!(status),
        json!(roles),
        json!(age(s(n, "/metadata/creationTimestamp"))),
        json!(s(n, "/status/nodeInfo/kubeletVersion")),
        json!(addr("InternalIP")),
        json!(addr("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn service_row(v: &Value) -> Vec<Value> {
    let ty = s(v, "/spec/type");
    let external = match ty {
        "LoadBalancer" => {
            let ing = v
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut ips: Vec<String> = ing
                .iter()
                .map(|i| {
                    if s(i, "/ip").is_empty() {
                        s(i, "/hostname").to_string()
                    } else {
                        s(i, "/ip").to_string()
                    }
                })
                .filter(|x| !x.is_empty())
                .collect();
            if let Some(e) = v.pointer("/spec/externalIPs").and_then(Value::as_array) {
                ips.extend(e.iter().filter_map(Value::as_str).map(str::to_string));
            }
            if ips.is_empty() {
                "<pending>".to_string()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(v, "/spec/externalName").to_string(),
        _ => match v.pointer("/spec/externalIPs").and_then(Value::as_array) {
            Some(e) if !e.is_empty() => e.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
            _ => "<none>".to_string(),
        },
    };
    let ports = v
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let proto = s(p, "/protocol");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) if np != 0 => format!("{port}:{np}/{proto}"),
                        _ => format!("{port}/{proto}"),
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "<none>".into());
    let selector = v
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|| "<none>".into());
    let cip = s(v, "/spec/clusterIP");
    vec![
        json!(s(v, "/metadata/name")),
        json!(ty),
        json!(if cip.is_empty() { "<none>" } else { cip }),
        json!(external),
        json!(ports),
        json!(age(s(v, "/metadata/creationTimestamp"))),
        json!(selector),
    ]
}

fn count(v: &Value, field: &str) -> usize {
    v.get(field).and_then(Value::as_object).map_or(0, |m| m.len())
}

fn columns_and_cells(def: &ResourceDef, v: &Value) -> (Vec<Value>, Vec<Value>) {
    let name_col = col(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace.",
    );
    let age_col = col(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    let created = age(s(v, "/metadata/creationTimestamp"));
    let name = json!(s(v, "/metadata/name"));
    match def.store {
        Store::Nodes => (
            vec![
                name_col,
                col("Status", "string", "", 0, "The status of the node"),
                col("Roles", "string", "", 0, "The roles of the node"),
                age_col,
                col(
                    "Version",
                    "string",
                    "",
                    0,
                    "Kubelet Version reported by the node.",
                ),
                col(
                    "Internal-IP",
                    "string",
                    "",
                    1,
                    "List of internal IPs for the node.",
                ),
                col(
                    "External-IP",
                    "string",
                    "",
                    1,
                    "List of external IPs for this node.",
                ),
                col(
                    "OS-Image",
                    "string",
                    "",
                    1,
                    "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                ),
                col(
                    "Kernel-Version",
                    "string",
                    "",
                    1,
                    "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                ),
                col(
                    "Container-Runtime",
                    "string",
                    "",
                    1,
                    "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                ),
            ],
            node_row(v),
        ),
        Store::Services => (
            vec![
                name_col,
                col(
                    "Type",
                    "string",
                    "",
                    0,
                    "Type determines how the Service is exposed.",
                ),
                col(
                    "Cluster-IP",
                    "string",
                    "",
                    0,
                    "clusterIP is the IP address of the service.",
                ),
                col(
                    "External-IP",
                    "string",
                    "",
                    0,
                    "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
                ),
                col(
                    "Port(s)",
                    "string",
                    "",
                    0,
                    "The list of ports that are exposed by this service.",
                ),
                age_col,
                col(
                    "Selector",
                    "string",
                    "",
                    1,
                    "Route service traffic to pods with label keys and values matching this selector.",
                ),
            ],
            service_row(v),
        ),
        Store::Namespaces => (
            vec![
                name_col,
                col("Status", "string", "", 0, "The status of the namespace"),
                age_col,
            ],
            vec![name, json!(s(v, "/status/phase")), json!(created)],
        ),
        Store::ConfigMaps => (
            vec![
                name_col,
                col("Data", "string", "", 0, "Data contains the configuration data."),
                age_col,
            ],
            vec![
                name,
                json!(count(v, "data") + count(v, "binaryData")),
                json!(created),
            ],
        ),
        Store::Secrets => (
            vec![
                name_col,
                col("Type", "string", "", 0, "The type of the secret"),
                col("Data", "string", "", 0, "The number of entries in the data"),
                age_col,
            ],
            vec![
                name,
                json!(s(v, "/type")),
                json!(count(v, "data")),
                json!(created),
            ],
        ),
        Store::Leases => (
            vec![
                name_col,
                col("Holder", "string", "", 0, "The holder of the lease"),
                age_col,
            ],
            vec![name, json!(s(v, "/spec/holderIdentity")), json!(created)],
        ),
        Store::Events => {
            let (inv, msg) = if def.events_v1 {
                ("/regarding", "/note")
            } else {
                ("/involvedObject", "/message")
            };
            let kind = s(v, &format!("{inv}/kind")).to_lowercase();
            let obj = format!("{kind}/{}", s(v, &format!("{inv}/name")));
            let mut last = s(v, "/lastTimestamp");
            if last.is_empty() {
                last = s(v, "/deprecatedLastTimestamp");
            }
            if last.is_empty() {
                last = s(v, "/series/lastObservedTime");
            }
            if last.is_empty() {
                last = s(v, "/eventTime");
            }
            (
                vec![
                    col("Last Seen", "string", "", 0, "Time when last event occurred"),
                    col("Type", "string", "", 0, "Type of this event"),
                    col("Reason", "string", "", 0, "Reason is why the action was taken"),
                    col("Object", "string", "", 0, "The object that this event is about"),
                    col(
                        "Message",
                        "string",
                        "",
                        0,
                        "A human-readable description of the status of this operation",
                    ),
                ],
                vec![
                    json!(age(last)),
                    json!(s(v, "/type")),
                    json!(s(v, "/reason")),
                    json!(obj),
                    json!(s(v, msg)),
                ],
            )
        }
    }
}

/// Builds a Table of already-presented objects. `include_object` false gives the default
/// `PartialObjectMetadata` rows.
pub fn to_table(
    def: &ResourceDef,
    items: &[Arc<Value>],
    list_meta: Option<Value>,
    include_object: bool,
) -> Value {
    let mut columns = None;
    let mut rows = Vec::with_capacity(items.len());
    for it in items {
        let (cols, cells) = columns_and_cells(def, it);
        columns.get_or_insert(cols);
        let object = if include_object {
            (**it).clone()
        } else {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": it.get("metadata").cloned().unwrap_or(json!({}))})
        };
        rows.push(json!({"cells": cells, "object": object}));
    }
    let columns = columns.unwrap_or_else(|| columns_and_cells(def, &json!({})).0);
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta.unwrap_or(json!({})),
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_kubectl() {
        for (s, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (3 * 86400, "3d"),
            (10 * 86400, "10d"),
        ] {
            assert_eq!(human_duration(s), want);
        }
    }

    #[test]
    fn service_cells() {
        let v = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.5", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}, "status": {"loadBalancer": {}}});
        let cells = service_row(&v);
        assert_eq!(cells[3], "<pending>");
        assert_eq!(cells[4], "80:30080/TCP");
    }
}
