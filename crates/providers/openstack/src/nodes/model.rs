//! Serde views of what Nova and Neutron answer: only the fields the node decisions read.
//!
//! Every field is lenient: absent, `null` or of the wrong JSON type, it takes its default instead
//! of failing the whole answer (a cloud with an extension we never saw must not stop node
//! initialization). Only what we cannot do without fails, as a [`ModelError`]: a body that is not
//! JSON, and a server without an `id` in a list (skipping it could turn "exists" into "not found",
//! and a not-found deletes the Node).
//!
//! `addresses` is kept as a sorted map: OCCM sorts network names before using them, and the order
//! that matters, Nova's order of entries within a network, is a JSON array and survives as is.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The body is not the JSON document expected (not JSON, or the wrong top-level shape).
    #[error("malformed {what} answer: {message}")]
    Malformed {
        /// Which answer (`server`, `servers`, `ports`, ...).
        what: &'static str,
        /// The parser's complaint.
        message: String,
    },
    /// An object that must carry an `id` has none.
    #[error("{what} without an id in the answer")]
    MissingId {
        /// Which object (`server`, `flavor`, ...).
        what: &'static str,
    },
}

/// Reads any JSON value into `T`, falling back to `T::default()` when it does not fit.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

/// A JSON array read item by item: items that do not fit `T` are dropped, not the whole list.
fn lenient_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| serde_json::from_value(i).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// A string map keeping only the string values (Nova metadata is string → string).
fn lenient_string_map<'de, D>(d: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => m
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    })
}

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

/// A link of a paged list (`servers_links`, `ports_links`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Link {
    /// `next`, `previous`, `self`...
    #[serde(deserialize_with = "lenient")]
    pub rel: String,
    /// The URL.
    #[serde(deserialize_with = "lenient")]
    pub href: String,
}

fn next_href(links: &[Link]) -> Option<&str> {
    links
        .iter()
        .find(|l| l.rel == "next" && !l.href.is_empty())
        .map(|l| l.href.as_str())
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

/// A Neutron port (`GET /v2.0/ports?device_id=<server>`), with the extensions we read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Port {
    /// Port UUID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// The server (or other device) the port is bound to.
    #[serde(deserialize_with = "lenient")]
    pub device_id: String,
    /// `ACTIVE`, `DOWN`, `BUILD`...; only ACTIVE ports give addresses.
    #[serde(deserialize_with = "lenient")]
    pub status: String,
    /// Network UUID.
    #[serde(deserialize_with = "lenient")]
    pub network_id: String,
    /// Fixed IPs, in Neutron's order.
    #[serde(deserialize_with = "lenient_vec")]
    pub fixed_ips: Vec<FixedIp>,
    /// Allowed address pairs (route targets need them).
    #[serde(deserialize_with = "lenient_vec")]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// `port_security_enabled`; `None` when the extension is absent.
    #[serde(deserialize_with = "lenient")]
    pub port_security_enabled: Option<bool>,
    /// `trunk_details` when this port is a trunk's parent.
    #[serde(deserialize_with = "lenient")]
    pub trunk_details: Option<TrunkDetails>,
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

/// One allowed address pair of a port.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct AddressPair {
    /// An IP or a CIDR.
    #[serde(deserialize_with = "lenient")]
    pub ip_address: String,
    /// MAC address; empty means the port's own.
    #[serde(deserialize_with = "lenient")]
    pub mac_address: String,
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

/// A Neutron network (`GET /v2.0/networks`), for the names of trunk subports' networks.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Network {
    /// Network UUID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// Network name; what `public-network-name` and `internal-network-name` refer to.
    #[serde(deserialize_with = "lenient")]
    pub name: String,
}

/// One page of `GET /v2.0/networks`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct NetworkPage {
    /// The networks on this page.
    #[serde(deserialize_with = "lenient_vec")]
    pub networks: Vec<Network>,
}

fn malformed(what: &'static str, e: serde_json::Error) -> ModelError {
    ModelError::Malformed {
        what,
        message: e.to_string(),
    }
}

/// Reads `{"<key>": <object>}`: an absent key or a non-object is malformed.
fn envelope<T: DeserializeOwned>(body: &[u8], key: &'static str) -> Result<T, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(key, e))?;
    match v {
        Value::Object(mut m) => match m.remove(key) {
            Some(inner @ Value::Object(_)) => serde_json::from_value(inner).map_err(|e| malformed(key, e)),
            _ => Err(ModelError::Malformed {
                what: key,
                message: format!("no `{key}` object"),
            }),
        },
        _ => Err(ModelError::Malformed {
            what: key,
            message: "not a JSON object".into(),
        }),
    }
}

/// Reads a list page, insisting that the list key is present and an array: a page without it
/// must not read as "no servers", which would mean "not found".
fn page<T: DeserializeOwned>(body: &[u8], key: &'static str) -> Result<T, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(key, e))?;
    if !v.get(key).is_some_and(Value::is_array) {
        return Err(ModelError::Malformed {
            what: key,
            message: format!("no `{key}` array"),
        });
    }
    serde_json::from_value(v).map_err(|e| malformed(key, e))
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

impl PortPage {
    /// Reads one page of `GET /v2.0/ports`; items that are not objects are dropped.
    ///
    /// # Errors
    /// [`ModelError`] when the body has no `ports` array.
    pub fn from_body(body: &[u8]) -> Result<Self, ModelError> {
        page(body, "ports")
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

impl NetworkPage {
    /// Reads `GET /v2.0/networks`.
    ///
    /// # Errors
    /// [`ModelError`] when the body has no `networks` array.
    pub fn from_body(body: &[u8]) -> Result<Self, ModelError> {
        page(body, "networks")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn refusals() {
        assert!(Server::from_get_body(b"not json").is_err());
        assert!(Server::from_get_body(b"[]").is_err());
        assert!(Server::from_get_body(br#"{"servers": []}"#).is_err());
        assert_eq!(
            Server::from_get_body(br#"{"server": {"name": "a"}}"#),
            Err(ModelError::MissingId { what: "server" })
        );
        assert!(
            ServerPage::from_body(br#"{}"#).is_err(),
            "no list is not an empty list"
        );
        assert!(ServerPage::from_body(br#"{"servers": null}"#).is_err());
        assert_eq!(
            ServerPage::from_body(br#"{"servers": [{"id": "a"}, {"name": "b"}]}"#),
            Err(ModelError::MissingId { what: "server" })
        );
        assert!(PortPage::from_body(br#"{"port": {}}"#).is_err());
        assert!(Flavor::from_get_body(br#"{"flavor": {"name": "x"}}"#).is_err());
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

    #[test]
    fn reads_flavor_and_networks() {
        let f = Flavor::from_get_body(br#"{"flavor": {"id": "1", "name": "m1.tiny", "ram": 512}}"#).unwrap();
        assert_eq!((f.id.as_str(), f.name.as_str()), ("1", "m1.tiny"));
        let n = NetworkPage::from_body(br#"{"networks": [{"id": "n1", "name": "vlan100"}]}"#).unwrap();
        assert_eq!(n.networks[0].name, "vlan100");
    }
}
