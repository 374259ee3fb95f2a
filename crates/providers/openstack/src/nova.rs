//! Nova's compute API as this provider calls it (microversion 2.47 for server reads): the server
//! and flavor models, read leniently ([`crate::lenient`]), and the calls. Which server is a
//! Node's, and what the Node is told, is decided in [`crate::nodes`]; [`crate::instances`] and
//! [`crate::routes`] orchestrate.
//!
//! `addresses` is kept as a sorted map: OCCM sorts network names before using them, and the order
//! that matters, Nova's order of entries within a network, is a JSON array and survives as is.

use std::collections::BTreeMap;

use provider::ProviderError;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::{
    client::{ApiError, Client, Service, path_segment},
    lenient::{Link, ModelError, envelope, lenient, lenient_string_map, lenient_vec, malformed, next_href},
};

/// The Nova microversion of server reads: 2.47 embeds the flavor's name in the server.
pub const SERVER_MICROVERSION: &str = "2.47";
/// Most pages one listing may take (1000 items a page by Nova's default).
const MAX_PAGES: usize = 50;

/// Nova's `addresses`: network name → entries, each network's entries in Nova's order.
fn lenient_addresses<'de, D>(d: D) -> Result<BTreeMap<String, Vec<ServerAddress>>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(d)? {
        // A repeated network name keeps its last value, as Go's map decoding does.
        Value::Object(m) => m
            .into_iter()
            .map(|(net, entries)| {
                let entries = match entries {
                    Value::Array(items) => items
                        .into_iter()
                        .filter(Value::is_object)
                        .filter_map(|i| serde_json::from_value(i).ok())
                        .collect(),
                    _ => Vec::new(),
                };
                (net, entries)
            })
            .collect(),
        _ => BTreeMap::new(),
    })
}

/// A Nova server (`GET /servers/{id}` or one item of `GET /servers/detail`), microversion 2.1.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Server {
    /// Server UUID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// Display name; what a Node without providerID is matched on.
    #[serde(deserialize_with = "lenient")]
    pub name: String,
    /// Nova status (`ACTIVE`, `SHUTOFF`, ...).
    #[serde(deserialize_with = "lenient")]
    pub status: String,
    /// `OS-EXT-AZ:availability_zone`; the zone label comes from it.
    #[serde(rename = "OS-EXT-AZ:availability_zone", deserialize_with = "lenient")]
    pub availability_zone: String,
    /// The flavor as embedded in the server.
    #[serde(deserialize_with = "lenient")]
    pub flavor: ServerFlavor,
    /// Network name → addresses on it.
    #[serde(deserialize_with = "lenient_addresses")]
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
    /// `accessIPv4`; empty when unset.
    #[serde(rename = "accessIPv4", deserialize_with = "lenient")]
    pub access_ipv4: String,
    /// `accessIPv6`; empty when unset.
    #[serde(rename = "accessIPv6", deserialize_with = "lenient")]
    pub access_ipv6: String,
    /// User metadata (string values only); key `hostname` yields a Hostname address.
    #[serde(deserialize_with = "lenient_string_map")]
    pub metadata: BTreeMap<String, String>,
}

/// `server.flavor`: `{id, links}` before microversion 2.47, `{original_name, ...}` from it on.
/// Presence matters (OCCM tries `original_name` only when present), hence the options.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ServerFlavor {
    /// Flavor ID (microversion < 2.47).
    #[serde(deserialize_with = "lenient")]
    pub id: Option<String>,
    /// Flavor name at boot time (microversion >= 2.47).
    #[serde(deserialize_with = "lenient")]
    pub original_name: Option<String>,
}

/// One entry of `server.addresses[network]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ServerAddress {
    /// The IP address.
    #[serde(deserialize_with = "lenient")]
    pub addr: String,
    /// 4 or 6 (informational; OCCM decides the family from the address itself).
    #[serde(deserialize_with = "lenient")]
    pub version: Option<u8>,
    /// `OS-EXT-IPS:type`: `fixed`, `floating`, or absent.
    #[serde(rename = "OS-EXT-IPS:type", deserialize_with = "lenient")]
    pub ip_type: Option<String>,
}

/// One page of `GET /servers/detail`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ServerPage {
    /// The servers on this page.
    #[serde(deserialize_with = "lenient_vec")]
    pub servers: Vec<Server>,
    /// Paging links; a `next` link means the list is not complete yet.
    #[serde(deserialize_with = "lenient_vec")]
    pub servers_links: Vec<Link>,
}

impl ServerPage {
    /// The URL of the next page, if the list continues.
    pub fn next(&self) -> Option<&str> {
        next_href(&self.servers_links)
    }
}

/// A Nova flavor (`GET /flavors/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Flavor {
    /// Flavor ID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// Flavor name; the instance type when it is a valid label value.
    #[serde(deserialize_with = "lenient")]
    pub name: String,
}

impl Server {
    /// Reads the body of `GET /servers/{id}`.
    ///
    /// # Errors
    /// [`ModelError`] when the body is not `{"server": {...}}` or the server has no id.
    pub fn from_get_body(body: &[u8]) -> Result<Self, ModelError> {
        let s: Self = envelope(body, "server")?;
        if s.id.is_empty() {
            return Err(ModelError::MissingId { what: "server" });
        }
        Ok(s)
    }
}

impl ServerPage {
    /// Reads one page of `GET /servers/detail`.
    ///
    /// # Errors
    /// [`ModelError`] when the body has no `servers` array, or when any item is not an object
    /// with an id: a server we cannot identify must not silently vanish from the list.
    pub fn from_body(body: &[u8]) -> Result<Self, ModelError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| malformed("servers", e))?;
        let items_ok = v.get("servers").and_then(Value::as_array).map(|items| {
            items.iter().all(|i| {
                i.get("id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| !id.is_empty())
            })
        });
        match items_ok {
            None => Err(ModelError::Malformed {
                what: "servers",
                message: "no `servers` array".into(),
            }),
            Some(false) => Err(ModelError::MissingId { what: "server" }),
            Some(true) => serde_json::from_value(v).map_err(|e| malformed("servers", e)),
        }
    }
}

impl Flavor {
    /// Reads the body of `GET /flavors/{id}`.
    ///
    /// # Errors
    /// [`ModelError`] when the body is not `{"flavor": {...}}` or the flavor has no id.
    pub fn from_get_body(body: &[u8]) -> Result<Self, ModelError> {
        let f: Self = envelope(body, "flavor")?;
        if f.id.is_empty() {
            return Err(ModelError::MissingId { what: "flavor" });
        }
        Ok(f)
    }
}

/// Every server whose name matches `filter` (a Nova name regex), with its details; one that
/// cannot be read, or has no id, fails the listing (a server left out would read as "not found").
pub async fn servers_detail_named(client: &Client, filter: &str) -> provider::Result<Vec<Server>> {
    let items: Vec<Value> = client
        .get(Service::Compute, "/servers/detail")
        .query(&[("name", filter)])
        .microversion(SERVER_MICROVERSION)
        .send_paginated("servers", MAX_PAGES)
        .await?;
    items.into_iter().map(decode_server).collect()
}

fn decode_server(item: Value) -> provider::Result<Server> {
    let server: Server = serde_json::from_value(item)
        .map_err(|e| ProviderError::Internal(format!("a server of Nova's listing: {e}")))?;
    if server.id.is_empty() {
        return Err(ProviderError::Internal(
            "a server of Nova's listing has no id".into(),
        ));
    }
    Ok(server)
}

/// The server `id` with its details; `None` when Nova says it does not exist (404).
pub async fn server(client: &Client, id: &str) -> provider::Result<Option<Server>> {
    let answer = client
        .get(Service::Compute, &format!("/servers/{}", path_segment(id)))
        .microversion(SERVER_MICROVERSION)
        .send()
        .await;
    match answer {
        Ok(response) => Server::from_get_body(response.body())
            .map(Some)
            .map_err(|e| ProviderError::Internal(format!("Nova's server {id}: {e}"))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The flavor `id`; `None` when Nova does not have it or its answer cannot be read.
pub async fn flavor(client: &Client, id: &str) -> Result<Option<Flavor>, ApiError> {
    match client
        .get(Service::Compute, &format!("/flavors/{}", path_segment(id)))
        .send()
        .await
    {
        Ok(response) => Ok(Flavor::from_get_body(response.body()).ok()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every flavor, with its details.
pub async fn flavors(client: &Client) -> provider::Result<Vec<Flavor>> {
    crate::lenient::list(
        client,
        Service::Compute,
        "/flavors/detail",
        &[],
        "flavors",
        MAX_PAGES,
    )
    .await
}

/// The server `id` without microversion (its name is all a caller reads); `None` on a 404.
/// (The ID goes into the path as Nova listed it.)
pub async fn server_v21(client: &Client, id: &str) -> Result<Option<Server>, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        server: Server,
    }
    match client
        .get(Service::Compute, &format!("/servers/{id}"))
        .send_json::<Body>()
        .await
    {
        Ok(body) => Ok(Some(body.server)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The project's servers, IDs and names only (`GET /servers`), up to `max_pages` pages.
pub async fn servers(client: &Client, max_pages: usize) -> Result<Vec<Server>, ApiError> {
    client
        .get(Service::Compute, "/servers")
        .send_paginated("servers", max_pages)
        .await
}

/// The servers whose name matches `filter` (IDs and names only), up to `max_pages` pages.
pub async fn servers_named(client: &Client, filter: &str, max_pages: usize) -> Result<Vec<Server>, ApiError> {
    client
        .get(Service::Compute, "/servers")
        .query(&[("name", filter)])
        .send_paginated("servers", max_pages)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neutron::networks::NetworkPage;

    /// Nova's documented example answer (trimmed), microversion 2.1.
    const SERVER: &str = r#"{"server": {
        "id": "9168b536-cd40-4630-b43f-b259807c6e87",
        "name": "new-server-test",
        "status": "ACTIVE",
        "OS-EXT-AZ:availability_zone": "nova",
        "OS-EXT-STS:vm_state": "active",
        "accessIPv4": "1.2.3.4",
        "accessIPv6": "80fe::",
        "addresses": {
            "private": [
                {"addr": "192.168.1.30", "OS-EXT-IPS-MAC:mac_addr": "aa:bb:cc:dd:ee:ff",
                 "OS-EXT-IPS:type": "fixed", "version": 4},
                {"addr": "172.24.4.3", "OS-EXT-IPS:type": "floating", "version": 4}
            ],
            "b-net": [{"addr": "10.0.0.5", "version": 4}]
        },
        "flavor": {"id": "1", "links": [{"href": "http://x/flavors/1", "rel": "bookmark"}]},
        "metadata": {"My Server Name": "Apache1", "hostname": "web.example"},
        "tags": []
    }}"#;

    #[test]
    fn reads_a_nova_server() {
        let s = Server::from_get_body(SERVER.as_bytes()).unwrap();
        assert_eq!(s.id, "9168b536-cd40-4630-b43f-b259807c6e87");
        assert_eq!(s.name, "new-server-test");
        assert_eq!(s.status, "ACTIVE");
        assert_eq!(s.availability_zone, "nova");
        assert_eq!(s.access_ipv4, "1.2.3.4");
        assert_eq!(s.access_ipv6, "80fe::");
        assert_eq!(s.flavor.id.as_deref(), Some("1"));
        assert_eq!(s.flavor.original_name, None);
        assert_eq!(s.metadata["hostname"], "web.example");
        let private: Vec<_> = s.addresses["private"].iter().map(|a| a.addr.as_str()).collect();
        assert_eq!(
            private,
            ["192.168.1.30", "172.24.4.3"],
            "Nova's order within a network"
        );
        assert_eq!(s.addresses["private"][1].ip_type.as_deref(), Some("floating"));
        assert_eq!(s.addresses["b-net"][0].ip_type, None);
        let nets: Vec<_> = s.addresses.keys().map(String::as_str).collect();
        assert_eq!(nets, ["b-net", "private"], "networks sorted, as OCCM sorts them");
    }

    #[test]
    fn odd_fields_take_defaults() {
        let body = br#"{"server": {"id": "x", "name": null, "status": 3, "accessIPv4": null,
            "OS-EXT-AZ:availability_zone": null, "flavor": "weird",
            "addresses": {"a": [{"addr": 5}, "junk", {"addr": "10.0.0.1", "OS-EXT-IPS:type": null}], "b": {}},
            "metadata": {"hostname": "h", "n": 1}}}"#;
        let s = Server::from_get_body(body).unwrap();
        assert_eq!(s.name, "");
        assert_eq!(s.status, "");
        assert_eq!(s.flavor, ServerFlavor::default());
        assert_eq!(s.addresses["a"].len(), 2);
        assert_eq!(s.addresses["a"][0].addr, "");
        assert_eq!(s.addresses["a"][1].addr, "10.0.0.1");
        assert!(s.addresses["b"].is_empty());
        assert_eq!(s.metadata.len(), 1);
    }

    #[test]
    fn flavor_at_2_47() {
        let body = br#"{"server": {"id": "x", "flavor": {"original_name": "m1.small", "vcpus": 1}}}"#;
        let s = Server::from_get_body(body).unwrap();
        assert_eq!(s.flavor.original_name.as_deref(), Some("m1.small"));
        assert_eq!(s.flavor.id, None);
    }

    #[test]
    fn server_page_and_links() {
        let body = br#"{"servers": [{"id": "a", "name": "n"}],
            "servers_links": [{"rel": "next", "href": "http://nova/servers/detail?marker=a"}]}"#;
        let p = ServerPage::from_body(body).unwrap();
        assert_eq!(p.servers.len(), 1);
        assert_eq!(p.next(), Some("http://nova/servers/detail?marker=a"));
        let p = ServerPage::from_body(br#"{"servers": []}"#).unwrap();
        assert_eq!(p.next(), None);
    }

    #[test]
    fn reads_flavor_and_networks() {
        let f = Flavor::from_get_body(br#"{"flavor": {"id": "1", "name": "m1.tiny", "ram": 512}}"#).unwrap();
        assert_eq!((f.id.as_str(), f.name.as_str()), ("1", "m1.tiny"));
        let n = NetworkPage::from_body(br#"{"networks": [{"id": "n1", "name": "vlan100"}]}"#).unwrap();
        assert_eq!(n.networks[0].name, "vlan100");
    }
}
