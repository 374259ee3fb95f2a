//! OCCM's (openstack-cloud-controller-manager's) calls for a new Service, replayed on the test
//! cloud with its bodies as its code builds them (`pkg/openstack/loadbalancer.go`): a load
//! balancer built as OCCM builds one, for the tests and benches that take one over.
//!
//! - [`build`]: `createOctaviaLoadBalancer` (fully populated: the name, description, provider and
//!   tag; per port a listener with OCCM's connection limit, timeouts and tag, a pool with its
//!   members named by node, a monitor when `enable-health-monitor` is exactly `true`; with
//!   `default-tls-container-ref`, TERMINATED_HTTPS listeners with it and HTTP pools), polled
//!   until ACTIVE, then `ensureFloatingIP` (on the VIP port, with OCCM's description), then the
//!   annotations OCCM writes on the Service.
//! - [`join`]: a Service sharing another's load balancer through `load-balancer-id`.
//! - [`security_group`]: `manage-security-groups`' group, rules and member ports.

use std::time::{Duration, Instant};

use provider::{LoadBalancerNode, Protocol, ServiceSpec};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

use crate::TestCloud;

/// How long OCCM's load balancer may take to become ACTIVE.
const DEADLINE: Duration = Duration::from_secs(90);

/// What OCCM leaves: the load balancer, its floating IP, and the annotations it writes on
/// the Service.
pub struct Built {
    pub id: String,
    pub vip_address: String,
    pub floating_ip: String,
    pub floating_ip_id: String,
}

pub async fn build(
    cloud: &TestCloud,
    client: &Client,
    cluster: &str,
    svc: &mut ServiceSpec,
    nodes: &[LoadBalancerNode],
) -> Built {
    let ids = &cloud.info.ids;
    let name = format!("kube_service_{cluster}_{}_{}", svc.namespace, svc.name);
    let monitors = svc
        .annotations
        .get("loadbalancer.openstack.org/enable-health-monitor")
        .is_some_and(|v| v == "true");
    // TLS (`default-tls-container-ref`): every listener TERMINATED_HTTPS with the reference,
    // every pool HTTP (OCCM's getListenerProtocol and buildPoolCreateOpt).
    let tls = svc
        .annotations
        .get("loadbalancer.openstack.org/default-tls-container-ref")
        .filter(|r| !r.is_empty());
    let (listener_protocol, pool_protocol) = if tls.is_some() {
        ("TERMINATED_HTTPS", "HTTP")
    } else {
        ("TCP", "TCP")
    };
    let listeners: Vec<Value> = svc
        .ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let members = members(cloud, nodes, port.node_port);
            let mut pool = json!({"name": format!("pool_{i}_{name}"), "protocol": pool_protocol,
                                  "lb_algorithm": "ROUND_ROBIN", "members": members});
            if monitors {
                pool["healthmonitor"] = json!({"name": format!("monitor_{i}_{name}"), "type": "TCP",
                    "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3});
            }
            let mut listener = json!({"name": format!("listener_{i}_{name}"), "protocol": listener_protocol,
                   "protocol_port": port.port, "connection_limit": -1, "tags": [name],
                   "timeout_client_data": 50000, "timeout_member_connect": 5000,
                   "timeout_member_data": 50000, "timeout_tcp_inspect": 0,
                   "default_pool": pool});
            if let Some(reference) = tls {
                listener["default_tls_container_ref"] = json!(reference);
            }
            listener
        })
        .collect();
    let body = json!({"loadbalancer": {
        "name": name,
        "description": format!("Kubernetes external service {}/{} from cluster {cluster}", svc.namespace, svc.name),
        "provider": "amphora", "tags": [name], "vip_subnet_id": ids.subnet_private,
        "listeners": listeners}});
    let lb: Value = client
        .post(Service::LoadBalancer, "/lbaas/loadbalancers")
        .json(&body)
        .send_json_field("loadbalancer")
        .await
        .expect("OCCM's create");
    let id = lb["id"].as_str().expect("an id").to_owned();
    let lb = wait_active(client, &id).await;
    let fip: Value = client
        .post(Service::Network, "/floatingips")
        .json(&json!({"floatingip": {
            "floating_network_id": ids.network_public,
            "port_id": lb["vip_port_id"],
            "description": format!("Floating IP for Kubernetes external service {}/{} from cluster {cluster}",
                                   svc.namespace, svc.name)}}))
        .send_json_field("floatingip")
        .await
        .expect("OCCM's floating IP");
    let floating_ip = fip["floating_ip_address"]
        .as_str()
        .expect("an address")
        .to_owned();
    svc.annotations
        .insert("loadbalancer.openstack.org/load-balancer-id".into(), id.clone());
    svc.annotations.insert(
        "loadbalancer.openstack.org/load-balancer-address".into(),
        floating_ip.clone(),
    );
    Built {
        id,
        vip_address: lb["vip_address"].as_str().unwrap_or_default().to_owned(),
        floating_ip,
        floating_ip_id: fip["id"].as_str().unwrap_or_default().to_owned(),
    }
}

/// OCCM's members of a pool on `node_port`: named by node, on the member subnet.
fn members(cloud: &TestCloud, nodes: &[LoadBalancerNode], node_port: u16) -> Vec<Value> {
    let subnet = &cloud.info.ids.subnet_private;
    nodes
        .iter()
        .map(|n| {
            json!({"address": n.addresses[0].address, "protocol_port": node_port,
                   "name": n.name, "subnet_id": subnet})
        })
        .collect()
}

/// OCCM's `WaitActiveAndGetLoadBalancer`, after each of its writes.
async fn wait_active(client: &Client, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let lb: Value = client
            .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .send_json_field("loadbalancer")
            .await
            .expect("OCCM's poll");
        if lb["provisioning_status"] == "ACTIVE" {
            return lb;
        }
        assert!(start.elapsed() < DEADLINE, "OCCM's load balancer ACTIVE: {lb}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// OCCM's `EnsureLoadBalancer` for a Service whose `load-balancer-id` names another
/// Service's load balancer (§3.10): per port a listener named and tagged after this Service,
/// its pool, its members (the load balancer waited for after each write), then this
/// Service's name added to the load balancer's tags; the owner's floating IP is used.
pub async fn join(
    cloud: &TestCloud,
    client: &Client,
    cluster: &str,
    svc: &ServiceSpec,
    lb_id: &str,
    nodes: &[LoadBalancerNode],
) {
    let name = format!("kube_service_{cluster}_{}_{}", svc.namespace, svc.name);
    for (i, port) in svc.ports.iter().enumerate() {
        let listener: Value = client
            .post(Service::LoadBalancer, "/lbaas/listeners")
            .json(&json!({"listener": {
                "name": format!("listener_{i}_{name}"), "protocol": "TCP", "protocol_port": port.port,
                "loadbalancer_id": lb_id, "connection_limit": -1, "tags": [name],
                "timeout_client_data": 50000, "timeout_member_connect": 5000,
                "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}))
            .send_json_field("listener")
            .await
            .expect("OCCM's listener");
        wait_active(client, lb_id).await;
        let pool: Value = client
            .post(Service::LoadBalancer, "/lbaas/pools")
            .json(&json!({"pool": {
                "name": format!("pool_{i}_{name}"), "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                "listener_id": listener["id"]}}))
            .send_json_field("pool")
            .await
            .expect("OCCM's pool");
        wait_active(client, lb_id).await;
        let members = members(cloud, nodes, port.node_port);
        client
            .put(
                Service::LoadBalancer,
                &format!("/lbaas/pools/{}/members", pool["id"].as_str().expect("a pool id")),
            )
            .json(&json!({"members": members}))
            .send_empty()
            .await
            .expect("OCCM's members");
        wait_active(client, lb_id).await;
    }
    let lb = wait_active(client, lb_id).await;
    let mut tags = lb["tags"].as_array().cloned().unwrap_or_default();
    tags.push(json!(name));
    client
        .put(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{lb_id}"))
        .json(&json!({"loadbalancer": {"tags": tags}}))
        .send_empty()
        .await
        .expect("OCCM's tag");
    wait_active(client, lb_id).await;
}

/// OCCM's `ensureAndUpdateOctaviaSecurityGroup` for a new Service (`manage-security-groups`):
/// the group made, the member subnet read, OCCM's rules made from its CIDR (the health
/// check node port, then each node port), Neutron's default egress rules deleted, the group
/// added to each node's member port. Returns the group's ID.
pub async fn security_group(
    cloud: &TestCloud,
    client: &Client,
    cluster: &str,
    svc: &ServiceSpec,
    nodes: &[LoadBalancerNode],
) -> String {
    let ids = &cloud.info.ids;
    let group: Value = client
        .post(Service::Network, "/security-groups")
        .json(&json!({"security_group": {
            "name": format!("lb-sg-{}-{}-{}", svc.uid, svc.namespace, svc.name),
            "description": format!("Security Group for {}/{} Service LoadBalancer in cluster {cluster}",
                                   svc.namespace, svc.name)}}))
        .send_json_field("security_group")
        .await
        .expect("OCCM's group");
    let id = group["id"].as_str().expect("an id").to_owned();
    let subnet: Value = client
        .get(Service::Network, &format!("/subnets/{}", ids.subnet_private))
        .send_json_field("subnet")
        .await
        .expect("OCCM's subnet read");
    let health_check = (svc.health_check_node_port != 0).then_some(("tcp", svc.health_check_node_port));
    let node_ports = svc.ports.iter().filter(|p| p.node_port != 0).map(|p| {
        let protocol = match p.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        };
        (protocol, p.node_port)
    });
    for (protocol, port) in health_check.into_iter().chain(node_ports) {
        client
            .post(Service::Network, "/security-group-rules")
            .json(&json!({"security_group_rule": {
                "security_group_id": id, "direction": "ingress", "ethertype": "IPv4",
                "protocol": protocol, "port_range_min": port, "port_range_max": port,
                "remote_ip_prefix": subnet["cidr"]}}))
            .send_empty()
            .await
            .expect("OCCM's rule");
    }
    for rule in group["security_group_rules"].as_array().into_iter().flatten() {
        client
            .delete(
                Service::Network,
                &format!(
                    "/security-group-rules/{}",
                    rule["id"].as_str().expect("a rule id")
                ),
            )
            .send_empty()
            .await
            .expect("OCCM deletes the default rules");
    }
    for node in nodes {
        let server = node.provider_id.trim_start_matches("openstack:///");
        let ports: Value = client
            .get(Service::Network, "/ports")
            .query(&[("device_id", server)])
            .send_json()
            .await
            .expect("OCCM's port listing");
        for port in ports["ports"].as_array().into_iter().flatten() {
            let holds = port["fixed_ips"].as_array().into_iter().flatten().any(|ip| {
                ip["ip_address"] == node.addresses[0].address.as_str()
                    && ip["subnet_id"] == ids.subnet_private.as_str()
            });
            if port["port_security_enabled"] != true || !holds {
                continue;
            }
            let mut groups = port["security_groups"].as_array().cloned().unwrap_or_default();
            groups.push(json!(id));
            client
                .put(
                    Service::Network,
                    &format!("/ports/{}", port["id"].as_str().expect("a port id")),
                )
                .json(&json!({"port": {"security_groups": groups}}))
                .send_empty()
                .await
                .expect("OCCM's port update");
        }
    }
    id
}
