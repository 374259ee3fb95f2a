//! What Octavia reports about a load balancer and its children: the fields of Octavia's v2 API
//! responses this provider reads (`GET /v2/lbaas/loadbalancers`, `listeners`, `pools`,
//! `pools/{id}/members`, `healthmonitors`). Every field but the ID has a default, so an answer
//! with a field missing or null (older Octavia, another provider) reads as "not set", never as
//! a failure.

use serde::{Deserialize, Deserializer};

/// A `null` read as the type's default (Octavia answers `null` for unset strings and lists).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `{"id": …}` in a parent's list of children.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IdOnly {
    pub id: String,
}

/// A load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct LoadBalancer {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `DELETED`, `ERROR`.
    #[serde(default, deserialize_with = "null_default")]
    pub provisioning_status: String,
    #[serde(default, deserialize_with = "null_default")]
    pub vip_address: String,
    #[serde(default, deserialize_with = "null_default")]
    pub vip_port_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub vip_subnet_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub vip_network_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub listeners: Vec<IdOnly>,
    #[serde(default, deserialize_with = "null_default")]
    pub pools: Vec<IdOnly>,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub provider: String,
}

impl LoadBalancer {
    /// Whether Octavia is working on it (`PENDING_*`): it takes no write until it is done.
    pub fn is_pending(&self) -> bool {
        self.provisioning_status.starts_with("PENDING_")
    }
}

/// A listener.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Listener {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub protocol: String,
    #[serde(default)]
    pub protocol_port: u16,
    #[serde(default)]
    pub connection_limit: Option<i32>,
    #[serde(default, deserialize_with = "null_default")]
    pub default_pool_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub insert_headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_client_data: Option<u32>,
    #[serde(default)]
    pub timeout_member_connect: Option<u32>,
    #[serde(default)]
    pub timeout_member_data: Option<u32>,
    #[serde(default)]
    pub timeout_tcp_inspect: Option<u32>,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub allowed_cidrs: Vec<String>,
    /// The Barbican reference a `TERMINATED_HTTPS` listener serves its certificate from; empty
    /// without TLS.
    #[serde(default, deserialize_with = "null_default")]
    pub default_tls_container_ref: String,
}

impl Listener {
    /// Whether the listener inserts `X-Forwarded-For` (OCCM writes `"true"`).
    pub fn inserts_x_forwarded_for(&self) -> bool {
        self.insert_headers
            .get("X-Forwarded-For")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// `session_persistence` of a pool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct SessionPersistence {
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub kind: String,
}

/// A pool, with its members and monitor once read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Pool {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub protocol: String,
    #[serde(default, deserialize_with = "null_default")]
    pub lb_algorithm: String,
    #[serde(default)]
    pub session_persistence: Option<SessionPersistence>,
    #[serde(default, deserialize_with = "null_default")]
    pub listeners: Vec<IdOnly>,
    #[serde(default, deserialize_with = "null_default")]
    pub healthmonitor_id: String,
    /// Not in Octavia's pool answer (which lists member IDs only): read separately.
    #[serde(skip)]
    pub members: Vec<Member>,
    /// Not in Octavia's pool answer: read separately.
    #[serde(skip)]
    pub monitor: Option<HealthMonitor>,
}

/// A pool member.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Member {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub address: String,
    #[serde(default)]
    pub protocol_port: u16,
    #[serde(default)]
    pub monitor_port: Option<u16>,
    #[serde(default, deserialize_with = "null_default")]
    pub subnet_id: String,
}

/// A health monitor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct HealthMonitor {
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub kind: String,
    #[serde(default)]
    pub delay: u32,
    #[serde(default)]
    pub timeout: u32,
    #[serde(default)]
    pub max_retries: u32,
    #[serde(default)]
    pub max_retries_down: u32,
}

/// A load balancer with everything under it that this provider compares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    pub load_balancer: LoadBalancer,
    pub listeners: Vec<Listener>,
    /// With members and monitors filled in.
    pub pools: Vec<Pool>,
}

impl Tree {
    /// The default pool of `listener`: its `default_pool_id`, else a pool naming it (OCCM's
    /// `GetPoolByListener`).
    pub fn pool_of(&self, listener: &Listener) -> Option<&Pool> {
        let default = (!listener.default_pool_id.is_empty())
            .then(|| self.pools.iter().find(|p| p.id == listener.default_pool_id))
            .flatten();
        default.or_else(|| {
            self.pools
                .iter()
                .find(|p| p.listeners.iter().any(|l| l.id == listener.id))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_and_missing_fields_read_as_unset() {
        let lb: LoadBalancer = serde_json::from_value(serde_json::json!({
            "id": "lb1", "name": null, "tags": null, "listeners": [{"id": "l1"}],
            "provisioning_status": "PENDING_UPDATE", "flavor_id": null
        }))
        .unwrap();
        assert_eq!((lb.name.as_str(), lb.tags.len(), lb.listeners.len()), ("", 0, 1));
        assert!(lb.is_pending());
        let listener: Listener = serde_json::from_value(serde_json::json!({
            "id": "l1", "protocol": "HTTP", "protocol_port": 80, "connection_limit": -1,
            "insert_headers": {"X-Forwarded-For": "true"}, "allowed_cidrs": null, "timeout_tcp_inspect": 0
        }))
        .unwrap();
        assert!(listener.inserts_x_forwarded_for());
        assert_eq!(
            (
                listener.connection_limit,
                listener.timeout_tcp_inspect,
                listener.timeout_client_data
            ),
            (Some(-1), Some(0), None)
        );
        let monitor: HealthMonitor = serde_json::from_value(
            serde_json::json!({"id": "m", "type": "HTTP", "delay": 5, "url_path": "/healthz"}),
        )
        .unwrap();
        assert_eq!(
            (monitor.kind.as_str(), monitor.delay, monitor.max_retries),
            ("HTTP", 5, 0)
        );
    }

    #[test]
    fn a_listeners_pool_is_its_default_pool_else_the_pool_naming_it() {
        let pool = |id: &str, listener: &str| Pool {
            id: id.into(),
            listeners: vec![IdOnly { id: listener.into() }],
            ..Pool::default()
        };
        let tree = Tree {
            pools: vec![pool("p1", "l1"), pool("p2", "l2")],
            ..Tree::default()
        };
        let l = |id: &str, default: &str| Listener {
            id: id.into(),
            default_pool_id: default.into(),
            ..Listener::default()
        };
        assert_eq!(tree.pool_of(&l("l1", "p2")).map(|p| p.id.as_str()), Some("p2"));
        assert_eq!(tree.pool_of(&l("l1", "")).map(|p| p.id.as_str()), Some("p1"));
        assert_eq!(tree.pool_of(&l("l3", "gone")).map(|p| p.id.as_str()), None);
    }
}
