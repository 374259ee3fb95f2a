//! Neutron's floating IPs (`/floatingips`): the model and the calls. Which floating IP a Service
//! gets, and whether it is deleted with its load balancer, is decided in
//! [`crate::load_balancers`].

use serde::Deserialize;
use serde_json::json;

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
