//! Neutron's ports (`/ports`): the one port model and the calls on it.
//!
//! The model is lenient ([`crate::lenient`]): node initialization reads a server's ports and must
//! not fail on an extension it never saw. The calls whose caller writes part of a port back whole
//! (a route's allowed address pair, a Service's security group) read it through
//! [`Strict`], so that a value that cannot be read fails the read instead of vanishing from
//! the write.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    client::{ApiError, Client, Service, absent_ok, path_segment},
    lenient::{Link, ModelError, Strict, lenient, lenient_vec, next_href, page},
};

/// A Neutron port, with the extensions read here.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Port {
    /// Port UUID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// The server (or other device) the port is bound to.
    #[serde(deserialize_with = "lenient")]
    pub device_id: String,
    /// `compute:<zone>` for a server's port, `network:…` for Neutron's own.
    #[serde(deserialize_with = "lenient")]
    pub device_owner: String,
    /// `ACTIVE`, `DOWN`, `BUILD`...; only ACTIVE ports give a node addresses.
    #[serde(deserialize_with = "lenient")]
    pub status: String,
    /// Network UUID.
    #[serde(deserialize_with = "lenient")]
    pub network_id: String,
    /// Fixed IPs, in Neutron's order.
    #[serde(deserialize_with = "lenient_vec")]
    pub fixed_ips: Vec<FixedIp>,
    /// Allowed address pairs (a route's nexthop port gets one for the pod CIDR).
    #[serde(deserialize_with = "lenient_vec")]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// `port_security_enabled`; `None` when the extension is absent.
    #[serde(deserialize_with = "lenient")]
    pub port_security_enabled: Option<bool>,
    /// Its revision (`standard-attr-revisions`), for an `If-Match` write.
    #[serde(deserialize_with = "lenient")]
    pub revision_number: u64,
    /// Its security groups' IDs.
    #[serde(deserialize_with = "lenient_vec")]
    pub security_groups: Vec<String>,
    /// Its tags (`standard-attr-tag`).
    #[serde(deserialize_with = "lenient_vec")]
    pub tags: Vec<String>,
    /// `trunk_details` when this port is a trunk's parent.
    #[serde(deserialize_with = "lenient")]
    pub trunk_details: Option<TrunkDetails>,
}

impl Port {
    /// Whether a server owns the port (Nova's `compute:*` owners), not a router or DHCP.
    pub fn is_servers(&self) -> bool {
        self.device_owner.starts_with("compute:") && !self.device_id.is_empty()
    }
}

/// One fixed IP of a port.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct FixedIp {
    /// The address.
    #[serde(deserialize_with = "lenient")]
    pub ip_address: String,
    /// Its subnet.
    #[serde(deserialize_with = "lenient")]
    pub subnet_id: String,
}

/// One allowed address pair of a port. Written back whole, so it has no default address: a
/// pair without one is not read (and refuses a [`Strict`] read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressPair {
    /// An address or CIDR the port may send from.
    #[serde(deserialize_with = "lenient")]
    pub ip_address: String,
    /// Its MAC, when given (OCCM adds pairs without one; none means the port's own).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub mac_address: Option<String>,
}

/// `trunk_details` of a parent port (Neutron's trunk extension).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct TrunkDetails {
    /// Trunk UUID.
    #[serde(deserialize_with = "lenient")]
    pub trunk_id: String,
    /// Its subports. Neutron lists no IPs here: those need the subport itself.
    #[serde(deserialize_with = "lenient_vec")]
    pub sub_ports: Vec<SubPort>,
}

/// One subport of a trunk.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct SubPort {
    /// The subport's own port UUID.
    #[serde(deserialize_with = "lenient")]
    pub port_id: String,
    /// `vlan`, ...
    #[serde(deserialize_with = "lenient")]
    pub segmentation_type: String,
    /// VLAN ID.
    #[serde(deserialize_with = "lenient")]
    pub segmentation_id: Option<u32>,
}

/// One page of `GET /v2.0/ports`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct PortPage {
    /// The ports on this page.
    #[serde(deserialize_with = "lenient_vec")]
    pub ports: Vec<Port>,
    /// Paging links (only when the caller asked with `limit`).
    #[serde(deserialize_with = "lenient_vec")]
    pub ports_links: Vec<Link>,
}

impl PortPage {
    /// The URL of the next page, if the list continues.
    pub fn next(&self) -> Option<&str> {
        next_href(&self.ports_links)
    }

    /// Reads one page of `GET /v2.0/ports`; items that are not objects are dropped.
    ///
    /// # Errors
    /// [`ModelError`] when the body has no `ports` array.
    pub fn from_body(body: &[u8]) -> Result<Self, ModelError> {
        page(body, "ports")
    }
}

/// Most pages of a port listing for a batch of servers (1000 ports a page by default).
const MAX_PAGES: usize = 50;
/// Most pages of a port listing of the load balancers' calls.
const LB_MAX_PAGES: usize = 20;

/// The ports `query` selects (`device_id=…`, `id=…`, repeated for an OR), every page.
pub async fn list(client: &Client, query: &[(&str, &str)]) -> provider::Result<Vec<Port>> {
    crate::lenient::list(client, Service::Network, "/ports", query, "ports", MAX_PAGES).await
}

/// The ports of device `device_id` (a server), up to `max_pages` pages.
pub async fn of_device(client: &Client, device_id: &str, max_pages: usize) -> Result<Vec<Port>, ApiError> {
    client
        .get(Service::Network, "/ports")
        .query(&[("device_id", device_id)])
        .send_paginated("ports", max_pages)
        .await
}

#[derive(Deserialize)]
struct StrictPorts {
    ports: Vec<Strict<Port>>,
}

fn strict(ports: StrictPorts) -> Vec<Port> {
    ports.ports.into_iter().map(|p| p.0).collect()
}

/// The ports holding any of `addresses` (`fixed_ips=ip_address=…`, which Neutron ORs), read
/// strictly, in one call (no paging).
pub async fn holding(client: &Client, addresses: &[&String]) -> Result<Vec<Port>, ApiError> {
    let query: Vec<(&str, String)> = addresses
        .iter()
        .map(|a| ("fixed_ips", format!("ip_address={a}")))
        .collect();
    let body: StrictPorts = client
        .get(Service::Network, "/ports")
        .query(&query)
        .send_json()
        .await?;
    Ok(strict(body))
}

/// The ports of device `device_id` (a router's interfaces and gateway), in one call.
pub async fn of_device_once(client: &Client, device_id: &str) -> Result<Vec<Port>, ApiError> {
    let body: StrictPorts = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", device_id.to_owned())])
        .send_json()
        .await?;
    Ok(strict(body))
}

/// The port `id`, read strictly. (The ID goes into the path as Neutron listed it.)
pub async fn get(client: &Client, id: &str) -> Result<Port, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        port: Strict<Port>,
    }
    let body: Body = client
        .get(Service::Network, &format!("/ports/{id}"))
        .send_json()
        .await?;
    Ok(body.port.0)
}

/// The body that sets a port's allowed address pairs.
pub fn pairs_body(pairs: &[AddressPair]) -> Value {
    json!({"port": {"allowed_address_pairs": pairs}})
}

/// Writes `body` ([`pairs_body`]) to port `id`, with `If-Match` on `revision` when given.
pub async fn set_allowed_address_pairs(
    client: &Client,
    id: &str,
    body: &Value,
    revision: Option<u64>,
) -> Result<(), ApiError> {
    let mut request = client.put(Service::Network, &format!("/ports/{id}")).json(body);
    if let Some(revision) = revision {
        request = request.header("If-Match", &format!("revision_number={revision}"));
    }
    request.send_empty().await
}

/// Servers per port listing: each adds ~47 bytes to the URL, which HTTP fronts cap at 4–8 KiB.
const SERVERS_PER_LISTING: usize = 40;

/// The ports carrying security group `group_id`, then the ports of `servers` (one listing per
/// 40 of them), read strictly: their security groups are written back whole.
pub async fn for_security_group(
    client: &Client,
    servers: &[&str],
    group_id: &str,
) -> Result<Vec<Port>, ApiError> {
    let mut ports: Vec<Strict<Port>> = client
        .get(Service::Network, "/ports")
        .query(&[("security_groups", group_id)])
        .send_paginated("ports", LB_MAX_PAGES)
        .await?;
    for chunk in servers.chunks(SERVERS_PER_LISTING) {
        let filter: Vec<(&str, &str)> = chunk.iter().map(|s| ("device_id", *s)).collect();
        ports.extend(
            client
                .get(Service::Network, "/ports")
                .query(&filter)
                .send_paginated::<Strict<Port>>("ports", LB_MAX_PAGES)
                .await?,
        );
    }
    Ok(ports.into_iter().map(|p| p.0).collect())
}

/// Writes port `id`'s security groups (`If-Match` on `revision` when not 0); `None` when the
/// port is gone.
pub async fn set_security_groups(
    client: &Client,
    id: &str,
    security_groups: &[String],
    revision: u64,
) -> Result<Option<()>, ApiError> {
    let path = format!("/ports/{}", path_segment(id));
    let mut request = client
        .put(Service::Network, &path)
        .json(&json!({"port": {"security_groups": security_groups}}));
    if revision > 0 {
        request = request.header("If-Match", &format!("revision_number={revision}"));
    }
    absent_ok(request.send_empty().await)
}

/// Removes `tag` from port `id`; one already gone is fine.
pub async fn remove_tag(client: &Client, id: &str, tag: &str) -> Result<(), ApiError> {
    let path = format!("/ports/{}/tags/{}", path_segment(id), path_segment(tag));
    absent_ok(client.delete(Service::Network, &path).send_empty().await).map(drop)
}

/// The subnet of the server's port that holds `address` (one port listing for the server).
pub async fn subnet_of_address(
    client: &Client,
    server_id: &str,
    address: &str,
) -> Result<Option<String>, ApiError> {
    let ports = of_device(client, server_id, LB_MAX_PAGES).await?;
    Ok(ports
        .iter()
        .flat_map(|p| &p.fixed_ips)
        .find(|ip| ip.ip_address == address)
        .map(|ip| ip.subnet_id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_neutron_ports_with_trunk_details() {
        let body = br#"{"ports": [{
            "id": "p1", "device_id": "srv", "status": "ACTIVE", "network_id": "n1",
            "fixed_ips": [{"ip_address": "10.0.0.5", "subnet_id": "s1"}, {"ip_address": "fd00::5", "subnet_id": "s2"}],
            "allowed_address_pairs": [{"ip_address": "10.244.1.0/24", "mac_address": "fa:16:3e:00:00:01"}],
            "port_security_enabled": true,
            "trunk_details": {"trunk_id": "t1", "sub_ports": [
                {"segmentation_id": 100, "port_id": "sp1", "segmentation_type": "vlan", "mac_address": "fa:16:3e:00:00:02"}]},
            "binding:vif_type": "ovs"
        }, {"id": "p2", "status": "DOWN", "trunk_details": null}]}"#;
        let p = PortPage::from_body(body).unwrap();
        assert_eq!(p.ports.len(), 2);
        let a = &p.ports[0];
        assert_eq!(a.fixed_ips[1].ip_address, "fd00::5");
        assert_eq!(a.allowed_address_pairs[0].ip_address, "10.244.1.0/24");
        assert_eq!(a.port_security_enabled, Some(true));
        let t = a.trunk_details.as_ref().unwrap();
        assert_eq!(t.sub_ports[0].port_id, "sp1");
        assert_eq!(t.sub_ports[0].segmentation_id, Some(100));
        assert_eq!(p.ports[1].trunk_details, None);
        assert_eq!(p.ports[1].port_security_enabled, None);
    }
}
