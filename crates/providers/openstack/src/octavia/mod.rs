//! Octavia's v2 API as this provider calls it: reads of a load balancer and what is under it,
//! the request bodies of OCCM's fully populated creates, and the writes of a
//! [`plan::Write`](crate::load_balancers::plan::Write).
//! Every write returns as soon as Octavia accepted it; nothing here waits for `ACTIVE`.
//! What Octavia answers is modelled in [`model`].

pub mod model;

use serde_json::{Map, Value, json};

use self::model::Tree;
use crate::{
    client::{ApiError, Client, Service, absent_ok, path_segment},
    load_balancers::{
        desired::{self, HealthMonitor, Listener, Member, Pool},
        plan::ListenerUpdate,
        service_conf::Timeouts,
    },
};

/// Most pages of a listing read (Octavia pages at 1000 by default).
const MAX_PAGES: usize = 50;

/// The newest Octavia API version the cloud serves (`GET /`: the highest `v2.x` listed;
/// OCCM takes the last entry, which is the same on every Octavia).
pub async fn api_version(client: &Client) -> Result<(u32, u32), ApiError> {
    let answer: Value = client.get_versions(Service::LoadBalancer).send_json().await?;
    let newest = answer
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("id").and_then(Value::as_str))
        .filter_map(parse_version)
        .max();
    newest.ok_or_else(|| {
        ApiError::local(
            Service::LoadBalancer,
            http::Method::GET,
            "/",
            crate::client::ErrorKind::Decode,
            format!("no API version in Octavia's version list: {answer}"),
        )
    })
}

/// `v2.26` → (2, 26); `v2` → (2, 0).
fn parse_version(id: &str) -> Option<(u32, u32)> {
    let rest = id.strip_prefix('v')?;
    let (major, minor) = rest.split_once('.').unwrap_or((rest, "0"));
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The load balancers named `name` (any state).
pub async fn by_name(client: &Client, name: &str) -> Result<Vec<model::LoadBalancer>, ApiError> {
    client
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .query(&[("name", name)])
        .send_paginated("loadbalancers", MAX_PAGES)
        .await
}

/// Every load balancer the project has (a batch of reads looks its Services' up in it).
pub async fn list_all(client: &Client) -> Result<Vec<model::LoadBalancer>, ApiError> {
    client
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .send_paginated("loadbalancers", MAX_PAGES)
        .await
}

/// The load balancer `id`, or `None` when Octavia does not know it.
pub async fn get(client: &Client, id: &str) -> Result<Option<model::LoadBalancer>, ApiError> {
    let path = format!("/lbaas/loadbalancers/{}", path_segment(id));
    absent_ok(
        client
            .get(Service::LoadBalancer, &path)
            .send_json_field("loadbalancer")
            .await,
    )
}

/// `lb` with its listeners, pools, members and monitors: 2 listings, then one member listing
/// per pool and one GET per monitor.
pub async fn read_tree(client: &Client, lb: model::LoadBalancer) -> Result<Tree, ApiError> {
    let by_lb = [("loadbalancer_id", lb.id.as_str())];
    let listeners: Vec<model::Listener> = client
        .get(Service::LoadBalancer, "/lbaas/listeners")
        .query(&by_lb)
        .send_paginated("listeners", MAX_PAGES)
        .await?;
    let mut pools: Vec<model::Pool> = client
        .get(Service::LoadBalancer, "/lbaas/pools")
        .query(&by_lb)
        .send_paginated("pools", MAX_PAGES)
        .await?;
    for pool in &mut pools {
        let path = format!("/lbaas/pools/{}/members", path_segment(&pool.id));
        pool.members = client
            .get(Service::LoadBalancer, &path)
            .send_paginated("members", MAX_PAGES)
            .await?;
        if !pool.healthmonitor_id.is_empty() {
            let path = format!("/lbaas/healthmonitors/{}", path_segment(&pool.healthmonitor_id));
            pool.monitor = absent_ok(
                client
                    .get(Service::LoadBalancer, &path)
                    .send_json_field("healthmonitor")
                    .await,
            )?;
        }
    }
    Ok(Tree {
        load_balancer: lb,
        listeners,
        pools,
    })
}

fn timeouts(body: &mut Map<String, Value>, t: &Timeouts) {
    body.insert("timeout_client_data".into(), json!(t.client_data));
    body.insert("timeout_member_connect".into(), json!(t.member_connect));
    body.insert("timeout_member_data".into(), json!(t.member_data));
    body.insert("timeout_tcp_inspect".into(), json!(t.tcp_inspect));
}

fn x_forwarded_for(on: bool) -> Value {
    if on {
        json!({"X-Forwarded-For": "true"})
    } else {
        json!({})
    }
}

/// A member, as a create or batch-update body.
pub fn member_body(m: &Member) -> Value {
    let mut body = Map::new();
    body.insert("name".into(), json!(m.name));
    body.insert("address".into(), json!(m.address));
    body.insert("protocol_port".into(), json!(m.protocol_port));
    if let Some(subnet) = &m.subnet_id {
        body.insert("subnet_id".into(), json!(subnet));
    }
    if let Some(port) = m.monitor_port {
        body.insert("monitor_port".into(), json!(port));
    }
    Value::Object(body)
}

/// A health monitor, without its pool (inside a pool body, or with `pool_id` added).
pub fn monitor_body(m: &HealthMonitor) -> Map<String, Value> {
    let s = &m.settings;
    let mut body = Map::new();
    body.insert("name".into(), json!(m.name));
    body.insert("type".into(), json!(m.kind));
    body.insert("delay".into(), json!(s.delay));
    body.insert("timeout".into(), json!(s.timeout));
    body.insert("max_retries".into(), json!(s.max_retries));
    body.insert("max_retries_down".into(), json!(s.max_retries_down));
    if m.is_http() {
        body.insert("url_path".into(), json!("/healthz"));
        body.insert("http_method".into(), json!("GET"));
        body.insert("expected_codes".into(), json!("200"));
    }
    body
}

/// A pool with its members and monitor, without its listener.
pub fn pool_body(p: &Pool) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("name".into(), json!(p.name));
    body.insert("protocol".into(), json!(p.protocol));
    body.insert("lb_algorithm".into(), json!(p.lb_algorithm));
    if p.source_ip_persistence {
        body.insert("session_persistence".into(), json!({"type": "SOURCE_IP"}));
    }
    body.insert(
        "members".into(),
        Value::Array(p.members.iter().map(member_body).collect()),
    );
    if let Some(m) = &p.monitor {
        body.insert("healthmonitor".into(), Value::Object(monitor_body(m)));
    }
    body
}

/// A listener with its default pool, without its load balancer.
pub fn listener_body(l: &Listener) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("name".into(), json!(l.name));
    body.insert("protocol".into(), json!(l.protocol));
    body.insert("protocol_port".into(), json!(l.protocol_port));
    body.insert("connection_limit".into(), json!(l.connection_limit));
    if !l.tags.is_empty() {
        body.insert("tags".into(), json!(l.tags));
    }
    if let Some(t) = &l.timeouts {
        timeouts(&mut body, t);
    }
    if l.x_forwarded_for {
        body.insert("insert_headers".into(), x_forwarded_for(true));
    }
    if let Some(cidrs) = &l.allowed_cidrs {
        body.insert("allowed_cidrs".into(), json!(cidrs));
    }
    if let Some(reference) = &l.default_tls_container_ref {
        body.insert("default_tls_container_ref".into(), json!(reference));
    }
    body.insert("default_pool".into(), Value::Object(pool_body(&l.pool)));
    body
}

/// A listener for `POST /lbaas/listeners`: without its default pool. Octavia takes a listener's
/// or a pool's children only inside a load balancer's fully populated create; a listener POST
/// with `default_pool`, or a pool POST with `members`, answers 500 (`'dict' object has no
/// attribute '_sa_instance_state'`, Octavia Zed). The pool, its members and its monitor follow
/// as writes of their own (the plan finds each missing in turn).
pub fn listener_create_body(l: &Listener) -> Map<String, Value> {
    let mut body = listener_body(l);
    body.remove("default_pool");
    body
}

/// A pool for `POST /lbaas/pools`: without members or monitor (see [`listener_create_body`]).
pub fn pool_create_body(p: &Pool) -> Map<String, Value> {
    let mut body = pool_body(p);
    body.remove("members");
    body.remove("healthmonitor");
    body
}

/// Where the VIP goes, and the create-only settings of a new load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewLoadBalancer {
    pub name: String,
    pub description: String,
    pub provider: String,
    pub tags: Vec<String>,
    pub vip_port_id: Option<String>,
    pub vip_subnet_id: Option<String>,
    pub vip_network_id: Option<String>,
    pub vip_address: Option<String>,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
}

/// OCCM's fully populated create: the load balancer with every listener, pool, member and
/// monitor in one call.
pub fn create_body(lb: &NewLoadBalancer, listeners: &[desired::Listener]) -> Value {
    let mut body = Map::new();
    body.insert("name".into(), json!(lb.name));
    body.insert("description".into(), json!(lb.description));
    body.insert("provider".into(), json!(lb.provider));
    if !lb.tags.is_empty() {
        body.insert("tags".into(), json!(lb.tags));
    }
    // OCCM: a VIP port wins; else the subnet and (when known) the network.
    if let Some(port) = &lb.vip_port_id {
        body.insert("vip_port_id".into(), json!(port));
    } else {
        if let Some(subnet) = &lb.vip_subnet_id {
            body.insert("vip_subnet_id".into(), json!(subnet));
        }
        if let Some(network) = &lb.vip_network_id {
            body.insert("vip_network_id".into(), json!(network));
        }
    }
    let optional = [
        ("vip_address", &lb.vip_address),
        ("flavor_id", &lb.flavor_id),
        ("availability_zone", &lb.availability_zone),
    ];
    for (key, value) in optional {
        if let Some(v) = value {
            body.insert(key.into(), json!(v));
        }
    }
    body.insert(
        "listeners".into(),
        Value::Array(
            listeners
                .iter()
                .map(|l| Value::Object(listener_body(l)))
                .collect(),
        ),
    );
    json!({ "loadbalancer": body })
}

/// Creates the load balancer; returns it as Octavia answered (`PENDING_CREATE`).
pub async fn create(client: &Client, body: &Value) -> Result<model::LoadBalancer, ApiError> {
    client
        .post(Service::LoadBalancer, "/lbaas/loadbalancers")
        .json(body)
        .send_json_field("loadbalancer")
        .await
}

/// Deletes the load balancer and everything under it (`cascade=true`). A 404 is success.
pub async fn delete_cascade(client: &Client, id: &str) -> Result<(), ApiError> {
    let path = format!("/lbaas/loadbalancers/{}", path_segment(id));
    ignore_not_found(
        client
            .delete(Service::LoadBalancer, &path)
            .query(&[("cascade", "true")])
            .send_empty()
            .await,
    )
}

/// A delete whose object is already gone succeeded.
fn ignore_not_found(result: Result<(), ApiError>) -> Result<(), ApiError> {
    absent_ok(result).map(drop)
}

/// Sets the load balancer's tags.
pub async fn set_load_balancer_tags(client: &Client, id: &str, tags: &[String]) -> Result<(), ApiError> {
    let path = format!("/lbaas/loadbalancers/{}", path_segment(id));
    client
        .put(Service::LoadBalancer, &path)
        .json(&json!({"loadbalancer": {"tags": tags}}))
        .send_empty()
        .await
}

/// Creates the port's listener, without its pool ([`listener_create_body`]).
pub async fn create_listener(
    client: &Client,
    lb_id: &str,
    listener: &desired::Listener,
) -> Result<(), ApiError> {
    let mut body = listener_create_body(listener);
    body.insert("loadbalancer_id".into(), json!(lb_id));
    client
        .post(Service::LoadBalancer, "/lbaas/listeners")
        .json(&json!({"listener": body}))
        .send_empty()
        .await
}

/// Changes what `update` names on the listener.
pub async fn update_listener(client: &Client, id: &str, update: &ListenerUpdate) -> Result<(), ApiError> {
    let mut body = Map::new();
    if let Some(limit) = update.connection_limit {
        body.insert("connection_limit".into(), json!(limit));
    }
    if let Some(on) = update.x_forwarded_for {
        body.insert("insert_headers".into(), x_forwarded_for(on));
    }
    if let Some(t) = &update.timeouts {
        timeouts(&mut body, t);
    }
    if let Some(cidrs) = &update.allowed_cidrs {
        body.insert("allowed_cidrs".into(), json!(cidrs));
    }
    if let Some(tags) = &update.tags {
        body.insert("tags".into(), json!(tags));
    }
    if let Some(reference) = &update.default_tls_container_ref {
        body.insert("default_tls_container_ref".into(), json!(reference));
    }
    let path = format!("/lbaas/listeners/{}", path_segment(id));
    client
        .put(Service::LoadBalancer, &path)
        .json(&json!({"listener": body}))
        .send_empty()
        .await
}

/// Deletes a listener (its pool first: [`delete_pool`]). A 404 is success.
pub async fn delete_listener(client: &Client, id: &str) -> Result<(), ApiError> {
    let path = format!("/lbaas/listeners/{}", path_segment(id));
    ignore_not_found(client.delete(Service::LoadBalancer, &path).send_empty().await)
}

/// Creates the pool as the listener's default pool, without members or monitor
/// ([`pool_create_body`]).
pub async fn create_pool(client: &Client, listener_id: &str, pool: &Pool) -> Result<(), ApiError> {
    let mut body = pool_create_body(pool);
    body.insert("listener_id".into(), json!(listener_id));
    client
        .post(Service::LoadBalancer, "/lbaas/pools")
        .json(&json!({"pool": body}))
        .send_empty()
        .await
}

/// Sets the pool's algorithm and session persistence.
pub async fn update_pool(client: &Client, id: &str, pool: &Pool) -> Result<(), ApiError> {
    let persistence = if pool.source_ip_persistence {
        json!({"type": "SOURCE_IP"})
    } else {
        Value::Null
    };
    let path = format!("/lbaas/pools/{}", path_segment(id));
    client
        .put(Service::LoadBalancer, &path)
        .json(&json!({"pool": {"lb_algorithm": pool.lb_algorithm, "session_persistence": persistence}}))
        .send_empty()
        .await
}

/// Deletes a pool, with its members and monitor. A 404 is success.
pub async fn delete_pool(client: &Client, id: &str) -> Result<(), ApiError> {
    let path = format!("/lbaas/pools/{}", path_segment(id));
    ignore_not_found(client.delete(Service::LoadBalancer, &path).send_empty().await)
}

/// Replaces the pool's members (Octavia's batch update: one call whatever changed).
pub async fn set_members(client: &Client, pool_id: &str, members: &[Member]) -> Result<(), ApiError> {
    let path = format!("/lbaas/pools/{}/members", path_segment(pool_id));
    let body = json!({"members": members.iter().map(member_body).collect::<Vec<_>>()});
    client
        .put(Service::LoadBalancer, &path)
        .json(&body)
        .send_empty()
        .await
}

/// Creates one member (`provider-requires-serial-api-calls`: no batch update).
pub async fn create_member(client: &Client, pool_id: &str, member: &Member) -> Result<(), ApiError> {
    let path = format!("/lbaas/pools/{}/members", path_segment(pool_id));
    client
        .post(Service::LoadBalancer, &path)
        .json(&json!({"member": member_body(member)}))
        .send_empty()
        .await
}

/// Deletes one member. A 404 is success.
pub async fn delete_member(client: &Client, pool_id: &str, member_id: &str) -> Result<(), ApiError> {
    let path = format!(
        "/lbaas/pools/{}/members/{}",
        path_segment(pool_id),
        path_segment(member_id)
    );
    ignore_not_found(client.delete(Service::LoadBalancer, &path).send_empty().await)
}

/// Creates the pool's monitor.
pub async fn create_monitor(client: &Client, pool_id: &str, monitor: &HealthMonitor) -> Result<(), ApiError> {
    let mut body = monitor_body(monitor);
    body.insert("pool_id".into(), json!(pool_id));
    client
        .post(Service::LoadBalancer, "/lbaas/healthmonitors")
        .json(&json!({"healthmonitor": body}))
        .send_empty()
        .await
}

/// Sets the monitor's name, delay, timeout and retries (its type cannot change).
pub async fn update_monitor(client: &Client, id: &str, monitor: &HealthMonitor) -> Result<(), ApiError> {
    let mut body = monitor_body(monitor);
    body.remove("type");
    let path = format!("/lbaas/healthmonitors/{}", path_segment(id));
    client
        .put(Service::LoadBalancer, &path)
        .json(&json!({"healthmonitor": body}))
        .send_empty()
        .await
}

/// Deletes a monitor. A 404 is success.
pub async fn delete_monitor(client: &Client, id: &str) -> Result<(), ApiError> {
    let path = format!("/lbaas/healthmonitors/{}", path_segment(id));
    ignore_not_found(client.delete(Service::LoadBalancer, &path).send_empty().await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancers::service_conf::Monitor;

    #[test]
    fn a_listener_or_pool_created_alone_carries_no_children() {
        let pool = Pool {
            name: "pool_0_lb".into(),
            protocol: "TCP",
            lb_algorithm: "ROUND_ROBIN".into(),
            source_ip_persistence: false,
            members: vec![Member {
                name: "n1".into(),
                address: "10.0.0.1".into(),
                protocol_port: 30080,
                subnet_id: None,
                monitor_port: None,
            }],
            monitor: Some(HealthMonitor {
                name: "monitor_0_lb".into(),
                kind: "TCP",
                settings: Monitor {
                    delay: 5,
                    timeout: 3,
                    max_retries: 1,
                    max_retries_down: 3,
                },
            }),
        };
        let listener = desired::Listener {
            name: "listener_0_lb".into(),
            protocol: "TCP",
            protocol_port: 80,
            connection_limit: -1,
            tags: vec![],
            timeouts: None,
            x_forwarded_for: false,
            allowed_cidrs: None,
            pool: pool.clone(),
            default_tls_container_ref: None,
        };
        assert!(listener_body(&listener).contains_key("default_pool"));
        assert!(!listener_body(&listener).contains_key("default_tls_container_ref"));
        let alone = listener_create_body(&listener);
        assert!(!alone.contains_key("default_pool") && alone["protocol_port"] == 80);
        let alone = pool_create_body(&pool);
        assert!(!alone.contains_key("members") && !alone.contains_key("healthmonitor"));
        assert_eq!(alone["lb_algorithm"], "ROUND_ROBIN");
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("v2.26"), Some((2, 26)));
        assert_eq!(parse_version("v2"), Some((2, 0)));
        assert_eq!(parse_version("2.1"), None);
        assert_eq!(parse_version("vX"), None);
    }

    #[test]
    fn a_fully_populated_create_carries_every_child() {
        let listener = desired::Listener {
            name: "listener_0_lb".into(),
            protocol: "TCP",
            protocol_port: 80,
            connection_limit: -1,
            tags: vec!["lb".into()],
            timeouts: Some(Timeouts {
                client_data: 1,
                member_connect: 2,
                member_data: 3,
                tcp_inspect: 4,
            }),
            x_forwarded_for: false,
            allowed_cidrs: Some(vec!["0.0.0.0/0".into()]),
            pool: Pool {
                name: "pool_0_lb".into(),
                protocol: "TCP",
                lb_algorithm: "ROUND_ROBIN".into(),
                source_ip_persistence: true,
                members: vec![Member {
                    name: "n1".into(),
                    address: "10.0.0.1".into(),
                    protocol_port: 30080,
                    subnet_id: Some("s".into()),
                    monitor_port: Some(32000),
                }],
                monitor: Some(HealthMonitor {
                    name: "monitor_0_lb".into(),
                    kind: "HTTP",
                    settings: Monitor {
                        delay: 5,
                        timeout: 3,
                        max_retries: 1,
                        max_retries_down: 3,
                    },
                }),
            },
            default_tls_container_ref: Some("https://kms/v1/containers/c1".into()),
        };
        let lb = NewLoadBalancer {
            name: "lb".into(),
            description: "d".into(),
            provider: "amphora".into(),
            tags: vec!["lb".into()],
            vip_subnet_id: Some("vs".into()),
            vip_network_id: Some("vn".into()),
            ..NewLoadBalancer::default()
        };
        let body = create_body(&lb, &[listener]);
        let l = &body["loadbalancer"]["listeners"][0];
        assert_eq!(body["loadbalancer"]["vip_subnet_id"], "vs");
        assert_eq!(body["loadbalancer"]["vip_network_id"], "vn");
        assert!(body["loadbalancer"].get("vip_port_id").is_none());
        assert_eq!(l["timeout_tcp_inspect"], 4);
        assert!(l.get("insert_headers").is_none());
        assert_eq!(l["default_tls_container_ref"], "https://kms/v1/containers/c1");
        assert_eq!(l["default_pool"]["session_persistence"]["type"], "SOURCE_IP");
        assert_eq!(l["default_pool"]["members"][0]["monitor_port"], 32000);
        assert_eq!(l["default_pool"]["healthmonitor"]["url_path"], "/healthz");
        let with_port = NewLoadBalancer {
            vip_port_id: Some("p".into()),
            ..lb
        };
        let body = create_body(&with_port, &[]);
        assert_eq!(body["loadbalancer"]["vip_port_id"], "p");
        assert!(body["loadbalancer"].get("vip_subnet_id").is_none());
    }
}
