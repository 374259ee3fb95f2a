//! The floating IP of an external Service, as OCCM's `ensureFloatingIP` and
//! `deleteFIPIfCreatedByProvider` handle it (reference §3.9, §3.15): found on the VIP port, or
//! the `loadBalancerIP` claimed, or one created with OCCM's description, which marks it as ours
//! to delete with the load balancer.

use serde::Deserialize;
use serde_json::{Value, json};

use super::names;
use crate::client::{ApiError, Client, Service, absent_ok, path_segment};

const MAX_PAGES: usize = 20;

/// A Neutron floating IP.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct FloatingIp {
    pub id: String,
    #[serde(default)]
    pub floating_ip_address: String,
    #[serde(default)]
    pub port_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub floating_network_id: String,
    /// This provider tags what it creates with the cluster's identity.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl FloatingIp {
    /// Whether OCCM (or this provider) created it for a Service, so it goes with the load
    /// balancer (unless `keep-floatingip`); a floating IP the user made is only detached.
    pub fn is_created(&self) -> bool {
        names::is_created_floating_ip(self.description.as_deref().unwrap_or(""))
    }
}

async fn list(client: &Client, filter: &[(&str, &str)]) -> Result<Vec<FloatingIp>, ApiError> {
    client
        .get(Service::Network, "/floatingips")
        .query(filter)
        .send_paginated("floatingips", MAX_PAGES)
        .await
}

/// Every floating IP the project has (a batch of reads finds its Services' addresses in it).
pub async fn list_all(client: &Client) -> Result<Vec<FloatingIp>, ApiError> {
    list(client, &[]).await
}

/// The floating IP on `port_id` (the VIP port), if any.
pub async fn on_port(client: &Client, port_id: &str) -> Result<Option<FloatingIp>, ApiError> {
    Ok(list(client, &[("port_id", port_id)]).await?.into_iter().next())
}

/// The floating IP with `address`, if the project has it.
pub async fn by_address(client: &Client, address: &str) -> Result<Option<FloatingIp>, ApiError> {
    Ok(list(client, &[("floating_ip_address", address)])
        .await?
        .into_iter()
        .next())
}

/// The floating IPs whose description is exactly `description` (what was created for one
/// Service, found again after its load balancer went).
pub async fn by_description(client: &Client, description: &str) -> Result<Vec<FloatingIp>, ApiError> {
    Ok(list(client, &[("description", description)])
        .await?
        .into_iter()
        .filter(|f| f.description.as_deref() == Some(description))
        .collect())
}

/// Attaches `fip` to `port_id` (or detaches it with `None`).
pub async fn attach(client: &Client, fip_id: &str, port_id: Option<&str>) -> Result<(), ApiError> {
    let path = format!("/floatingips/{}", path_segment(fip_id));
    client
        .put(Service::Network, &path)
        .json(&json!({"floatingip": {"port_id": port_id}}))
        .send_empty()
        .await
}

/// What a new floating IP is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFloatingIp<'a> {
    pub network_id: &'a str,
    pub subnet_id: Option<&'a str>,
    pub address: Option<&'a str>,
    pub port_id: &'a str,
    pub description: &'a str,
}

/// Creates a floating IP on the VIP port.
pub async fn create(client: &Client, new: &NewFloatingIp<'_>) -> Result<FloatingIp, ApiError> {
    let mut body = serde_json::Map::new();
    body.insert("floating_network_id".into(), json!(new.network_id));
    body.insert("port_id".into(), json!(new.port_id));
    body.insert("description".into(), json!(new.description));
    if let Some(subnet) = new.subnet_id {
        body.insert("subnet_id".into(), json!(subnet));
    }
    if let Some(address) = new.address {
        body.insert("floating_ip_address".into(), json!(address));
    }
    client
        .post(Service::Network, "/floatingips")
        .json(&json!({"floatingip": body}))
        .send_json_field("floatingip")
        .await
}

/// Adds `tag` to a floating IP (Neutron's tag API: the create call takes no tags here).
pub async fn tag(client: &Client, fip_id: &str, tag: &str) -> Result<(), ApiError> {
    let path = format!("/floatingips/{}/tags/{}", path_segment(fip_id), path_segment(tag));
    client.put(Service::Network, &path).send_empty().await
}

/// Deletes a floating IP. A 404 is success.
pub async fn delete(client: &Client, fip_id: &str) -> Result<(), ApiError> {
    let path = format!("/floatingips/{}", path_segment(fip_id));
    absent_ok(client.delete(Service::Network, &path).send_empty().await).map(drop)
}

/// OCCM's `GetFloatingNetworkID`: the first external network (`router:external`) with an IPv4
/// subnet, or `None`. Called once per gateway run (OCCM: on every sync).
pub async fn detect_external_network(client: &Client) -> Result<Option<String>, ApiError> {
    #[derive(Deserialize)]
    struct Network {
        id: String,
    }
    let networks: Vec<Network> = client
        .get(Service::Network, "/networks")
        .query(&[("router:external", "true")])
        .send_paginated("networks", MAX_PAGES)
        .await?;
    for network in networks {
        let subnets: Vec<Value> = client
            .get(Service::Network, "/subnets")
            .query(&[("network_id", network.id.as_str()), ("ip_version", "4")])
            .send_paginated("subnets", MAX_PAGES)
            .await?;
        if !subnets.is_empty() {
            return Ok(Some(network.id));
        }
    }
    Ok(None)
}

/// The subnet `subnet_id`'s network, to check a floating subnet belongs to the floating network
/// (OCCM: one subnet GET).
pub async fn subnet_network(client: &Client, subnet_id: &str) -> Result<Option<String>, ApiError> {
    let path = format!("/subnets/{}", path_segment(subnet_id));
    let subnet: Option<Value> = absent_ok(
        client
            .get(Service::Network, &path)
            .send_json_field("subnet")
            .await,
    )?;
    Ok(subnet.and_then(|s| s["network_id"].as_str().map(str::to_owned)))
}

/// The subnet of the node's port that holds `address` (OCCM's `getSubnetIDForLB`, used when
/// neither a VIP network nor a subnet is configured): one port listing for the server.
pub async fn subnet_of_address(
    client: &Client,
    server_id: &str,
    address: &str,
) -> Result<Option<String>, ApiError> {
    let ports: Vec<Value> = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", server_id)])
        .send_paginated("ports", MAX_PAGES)
        .await?;
    Ok(ports
        .iter()
        .flat_map(|p| p["fixed_ips"].as_array().into_iter().flatten())
        .find(|ip| ip["ip_address"].as_str() == Some(address))
        .and_then(|ip| ip["subnet_id"].as_str())
        .map(str::to_owned))
}
