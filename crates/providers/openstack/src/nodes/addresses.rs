//! A node's addresses, exactly as OCCM's `nodeAddresses` lists them (`instances_addresses.go`),
//! and the `address-sort-order` sort.
//!
//! Order (it matters: kubelet and many tools take the first InternalIP):
//! 1. fixed IPs of the server's ACTIVE Neutron ports, in Neutron's order, as InternalIP;
//! 2. `accessIPv4`, then `accessIPv6`, as ExternalIP;
//! 3. metadata `hostname` as Hostname;
//! 4. `server.addresses`, networks sorted by name, each network's entries in Nova's order:
//!    floating → ExternalIP; a `public-network-name` network → ExternalIP, after removing any
//!    earlier entry of the same address; else InternalIP when `internal-network-name` is empty or
//!    lists the network, otherwise the address is dropped and earlier entries of it removed;
//! 5. the stable `address-sort-order` sort, when set.
//!
//! IPv6 is skipped everywhere when `ipv6-support-disabled`; an (address, type) pair is listed
//! once. One deliberate difference: an empty address (only a malformed answer has one) is
//! skipped, where OCCM would list `""`.
//!
//! # Trunk subports
//! OCCM adds the fixed IPs of trunk subports under their network's name (as `fixed` entries after
//! Nova's own), at the cost of one port GET and one network GET per subport. `trunk_details`
//! in the port list carries only subport IDs, no IPs, so some calls are unavoidable; we keep
//! the behaviour but not the cost: [`trunk_subport_ids`] names every subport of a node (or of a
//! whole batch), the caller fetches them with one `GET /ports?id=..&id=..` and their networks
//! with one `GET /networks?id=..`, and [`resolve_trunk_subports`] joins the answers in OCCM's
//! order. A subport or network missing from the answers is skipped, as OCCM skips a failed GET.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};
use provider::{AddressType, NodeAddress};

use crate::{
    neutron::{networks::Network, ports::Port},
    nova::Server,
};

/// The server metadata key whose value becomes a Hostname address (OCCM's `TypeHostName`).
pub const METADATA_HOSTNAME: &str = "hostname";

/// `[Networking]` of cloud.conf, as the address algorithm uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressOptions {
    /// `ipv6-support-disabled`: list no IPv6 address.
    pub ipv6_support_disabled: bool,
    /// `public-network-name` (repeatable): networks whose addresses are ExternalIP.
    pub public_network_names: Vec<String>,
    /// `internal-network-name` (repeatable): when set, only these networks give InternalIP.
    pub internal_network_names: Vec<String>,
    /// `address-sort-order`, already parsed (see [`parse_address_sort_order`]).
    pub address_sort_order: Vec<IpNet>,
}

/// The fixed IPs of one trunk subport, under its network's name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubportAddresses {
    /// Name of the subport's network.
    pub network_name: String,
    /// The subport's fixed IPs, in Neutron's order.
    pub addresses: Vec<String>,
}

/// Every trunk subport ID of `ports`, in order, for one batched port GET.
pub fn trunk_subport_ids(ports: &[Port]) -> Vec<&str> {
    ports
        .iter()
        .filter_map(|p| p.trunk_details.as_ref())
        .flat_map(|t| t.sub_ports.iter())
        .map(|s| s.port_id.as_str())
        .filter(|id| !id.is_empty())
        .collect()
}

/// Joins the parent ports' `trunk_details` with the fetched subports and their networks, in
/// OCCM's order (parent ports, then subports in trunk order). Unknown subports or networks are
/// skipped.
pub fn resolve_trunk_subports(
    parents: &[Port],
    subports: &[Port],
    networks: &[Network],
) -> Vec<SubportAddresses> {
    let port_by_id: BTreeMap<&str, &Port> = subports.iter().map(|p| (p.id.as_str(), p)).collect();
    let net_by_id: BTreeMap<&str, &Network> = networks.iter().map(|n| (n.id.as_str(), n)).collect();
    trunk_subport_ids(parents)
        .into_iter()
        .filter_map(|id| {
            let port = port_by_id.get(id)?;
            let net = net_by_id.get(port.network_id.as_str())?;
            Some(SubportAddresses {
                network_name: net.name.clone(),
                addresses: port.fixed_ips.iter().map(|ip| ip.ip_address.clone()).collect(),
            })
        })
        .collect()
}

/// Go's `net.ParseIP(a).To4() == nil`: anything that is not an IPv4 (or v4-mapped) address,
/// including text that is no IP at all, counts as IPv6.
fn is_ipv6(address: &str) -> bool {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => false,
        Ok(IpAddr::V6(a)) => a.to_ipv4_mapped().is_none(),
        Err(_) => true,
    }
}

/// `addToNodeAddresses`: appends unless the same (address, type) is already listed.
fn add(addrs: &mut Vec<NodeAddress>, kind: AddressType, address: &str) {
    if address.is_empty() || addrs.iter().any(|a| a.kind == kind && a.address == address) {
        return;
    }
    addrs.push(NodeAddress::new(kind, address));
}

/// `removeFromNodeAddresses` with no type: drops every entry of the address.
fn remove(addrs: &mut Vec<NodeAddress>, address: &str) {
    addrs.retain(|a| a.address != address);
}

/// The node's addresses from the server and its ports (no trunk subports).
pub fn node_addresses(server: &Server, ports: &[Port], opts: &AddressOptions) -> Vec<NodeAddress> {
    node_addresses_with_subports(server, ports, &[], opts)
}

/// The node's addresses from the server, its ports and its resolved trunk subports.
pub fn node_addresses_with_subports(
    server: &Server,
    ports: &[Port],
    subports: &[SubportAddresses],
    opts: &AddressOptions,
) -> Vec<NodeAddress> {
    let v6_ok = |a: &str| !opts.ipv6_support_disabled || !is_ipv6(a);
    let mut addrs = Vec::new();

    for port in ports.iter().filter(|p| p.status == "ACTIVE") {
        for ip in &port.fixed_ips {
            if v6_ok(&ip.ip_address) {
                add(&mut addrs, AddressType::InternalIP, &ip.ip_address);
            }
        }
    }

    add(&mut addrs, AddressType::ExternalIP, &server.access_ipv4);
    if !opts.ipv6_support_disabled {
        add(&mut addrs, AddressType::ExternalIP, &server.access_ipv6);
    }
    if let Some(h) = server.metadata.get(METADATA_HOSTNAME) {
        add(&mut addrs, AddressType::Hostname, h);
    }

    // Network name → (address, is floating), sorted by name like OCCM's sort.Strings.
    let mut networks: BTreeMap<&str, Vec<(&str, bool)>> = server
        .addresses
        .iter()
        .map(|(net, entries)| {
            let entries = entries
                .iter()
                .map(|e| (e.addr.as_str(), e.ip_type.as_deref() == Some("floating")))
                .collect();
            (net.as_str(), entries)
        })
        .collect();
    for sub in subports {
        let entries = networks.entry(sub.network_name.as_str()).or_default();
        entries.extend(
            sub.addresses
                .iter()
                .filter(|a| v6_ok(a))
                .map(|a| (a.as_str(), false)),
        );
    }

    let listed = |names: &[String], net: &str| names.iter().any(|n| n == net);
    for (net, entries) in &networks {
        for &(address, floating) in entries {
            if address.is_empty() {
                continue;
            }
            let kind = if floating {
                AddressType::ExternalIP
            } else if listed(&opts.public_network_names, net) {
                // Listed once, as External, even when a port gave it as a fixed IP (PR #1041).
                remove(&mut addrs, address);
                AddressType::ExternalIP
            } else if opts.internal_network_names.is_empty() || listed(&opts.internal_network_names, net) {
                AddressType::InternalIP
            } else {
                // Not an allowed internal network: drop it, also where a port listed it.
                remove(&mut addrs, address);
                continue;
            };
            if v6_ok(address) {
                add(&mut addrs, kind, address);
            }
        }
    }

    sort_node_addresses(&mut addrs, &opts.address_sort_order);
    addrs
}

/// `address-sort-order`: a list of CIDRs split on commas and white space; invalid items are
/// dropped (OCCM warns). Host bits are cleared, as Go's `net.ParseCIDR` returns the network.
pub fn parse_address_sort_order(value: &str) -> Vec<IpNet> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse::<IpNet>().ok())
        .map(|n| n.trunc())
        .collect()
}

/// Go's `IPNet.Contains`: a v4-mapped IPv6 address is an IPv4 address, and so is a v4-mapped
/// IPv6 network of prefix 96 or longer.
fn contains(net: &IpNet, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (net, ip) {
        (IpNet::V6(n), IpAddr::V4(a)) => match n.addr().to_ipv4_mapped() {
            Some(base) if n.prefix_len() >= 96 => {
                Ipv4Net::new(base, n.prefix_len() - 96).is_ok_and(|n4| n4.contains(&a))
            }
            _ => false,
        },
        _ => net.contains(&ip),
    }
}

/// `getSortPriority`: `len - i` for the first CIDR `i` containing the address, 0 when none
/// does or the address is no IP (a Hostname).
pub fn sort_priority(order: &[IpNet], address: &str) -> usize {
    let Ok(ip) = address.parse::<IpAddr>() else {
        return 0;
    };
    order
        .iter()
        .position(|net| contains(net, ip))
        .map_or(0, |i| order.len() - i)
}

/// Go's 16-byte form of an IP, the order OCCM sorts equal priorities by.
fn ip16(address: &str) -> [u8; 16] {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.to_ipv6_mapped().octets(),
        Ok(IpAddr::V6(a)) => a.octets(),
        Err(_) => Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets(),
    }
}

/// `sortNodeAddresses`: a stable sort, higher priority first, equal non-zero priorities by IP
/// bytes ascending; addresses of priority 0 keep their order, after all the others.
pub fn sort_node_addresses(addrs: &mut [NodeAddress], order: &[IpNet]) {
    if order.is_empty() {
        return;
    }
    addrs.sort_by_cached_key(|a| {
        let p = sort_priority(order, &a.address);
        (Reverse(p), if p > 0 { ip16(&a.address) } else { [0; 16] })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neutron::ports::{FixedIp, SubPort, TrunkDetails};
    use AddressType::{ExternalIP as Ext, Hostname as Host, InternalIP as Int};

    const HOSTNAME: &str = "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal";

    /// OCCM's server fixture: `addresses` as given, accessIPv4/v6 set, optional metadata hostname.
    fn server(addresses: &str, hostname: bool) -> Server {
        let metadata = if hostname {
            format!(
                r#"{{"name": "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy", "hostname": "{HOSTNAME}"}}"#
            )
        } else {
            "{}".into()
        };
        let body = format!(
            r#"{{"server": {{"id": "s", "status": "ACTIVE",
                "hostId": "29d3c8c896a45aa4c34e52247875d7fefc3d94bbcc9f622b5d204362",
                "accessIPv4": "50.56.176.99", "accessIPv6": "2001:4800:790e:510:be76:4eff:fe04:82a8",
                "addresses": {addresses}, "metadata": {metadata}}}}}"#
        );
        Server::from_get_body(body.as_bytes()).unwrap()
    }

    /// OCCM's `private` network: fixed 10.0.0.32, floating 50.56.176.36, untyped 10.0.0.31.
    const PRIVATE: &str = r#""private": [
        {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:7c:1b:2b", "version": 4, "addr": "10.0.0.32", "OS-EXT-IPS:type": "fixed"},
        {"version": 4, "addr": "50.56.176.36", "OS-EXT-IPS:type": "floating"},
        {"version": 4, "addr": "10.0.0.31"}]"#;

    fn public_net(name: &str, v4: &str) -> String {
        format!(
            r#""{name}": [{{"version": 4, "addr": "{v4}"}},
                {{"version": 6, "addr": "2001:4800:780e:510:be76:4eff:fe04:84a8"}}]"#
        )
    }

    fn active_port(ips: &[&str]) -> Vec<Port> {
        vec![Port {
            status: "ACTIVE".into(),
            fixed_ips: ips
                .iter()
                .map(|ip| FixedIp {
                    ip_address: (*ip).into(),
                    subnet_id: String::new(),
                })
                .collect(),
            ..Port::default()
        }]
    }

    fn opts(public: &[&str], internal: &[&str], v6_off: bool, order: &str) -> AddressOptions {
        AddressOptions {
            ipv6_support_disabled: v6_off,
            public_network_names: public.iter().map(|s| (*s).into()).collect(),
            internal_network_names: internal.iter().map(|s| (*s).into()).collect(),
            address_sort_order: parse_address_sort_order(order),
        }
    }

    fn want(list: &[(AddressType, &str)]) -> Vec<NodeAddress> {
        list.iter().map(|(k, a)| NodeAddress::new(*k, *a)).collect()
    }

    /// OCCM `TestNodeAddresses`.
    #[test]
    fn occm_test_node_addresses() {
        let srv = server(
            &format!("{{{PRIVATE}, {}}}", public_net("public", "50.56.176.35")),
            true,
        );
        let got = node_addresses(
            &srv,
            &active_port(&["10.0.0.32", "10.0.0.31"]),
            &opts(&["public"], &[], false, ""),
        );
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.32"),
                (Int, "10.0.0.31"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Host, HOSTNAME),
                (Ext, "50.56.176.36"),
                (Ext, "50.56.176.35"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
            ])
        );
    }

    /// OCCM `TestNodeAddressesCustomPublicNetwork`.
    #[test]
    fn occm_test_node_addresses_custom_public_network() {
        let srv = server(
            &format!("{{{PRIVATE}, {}}}", public_net("pub-net", "50.56.176.35")),
            false,
        );
        let got = node_addresses(
            &srv,
            &active_port(&["10.0.0.32", "10.0.0.31"]),
            &opts(&["pub-net"], &[], false, ""),
        );
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.32"),
                (Int, "10.0.0.31"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Ext, "50.56.176.36"),
                (Ext, "50.56.176.35"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
            ])
        );
    }

    /// OCCM `TestNodeAddressesCustomPublicNetworkWithIntersectingFixedIP`.
    #[test]
    fn occm_test_node_addresses_custom_public_network_with_intersecting_fixed_ip() {
        let private = r#""private": [
            {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:7c:1b:2b", "version": 4, "addr": "10.0.0.32", "OS-EXT-IPS:type": "fixed"},
            {"version": 4, "addr": "10.0.0.31"}]"#;
        let srv = server(
            &format!("{{{private}, {}}}", public_net("pub-net", "50.56.176.36")),
            false,
        );
        // 50.56.176.36 is also a port's fixed IP: it must not be listed as InternalIP.
        let ports = active_port(&["10.0.0.32", "10.0.0.31", "50.56.176.36"]);
        let got = node_addresses(&srv, &ports, &opts(&["pub-net"], &[], false, ""));
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.32"),
                (Int, "10.0.0.31"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Ext, "50.56.176.36"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
            ])
        );
    }

    fn three_networks() -> Server {
        let also = r#""also-private": [{"version": 4, "addr": "10.0.0.64"}]"#;
        server(
            &format!("{{{PRIVATE}, {also}, {}}}", public_net("pub-net", "50.56.176.35")),
            false,
        )
    }

    /// OCCM `TestNodeAddressesMultipleCustomInternalNetworks`.
    #[test]
    fn occm_test_node_addresses_multiple_custom_internal_networks() {
        let got = node_addresses(
            &three_networks(),
            &active_port(&["10.0.0.32", "10.0.0.31"]),
            &opts(&[], &["private", "also-private"], false, ""),
        );
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.32"),
                (Int, "10.0.0.31"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Int, "10.0.0.64"),
                (Ext, "50.56.176.36"),
            ])
        );
    }

    /// OCCM `TestNodeAddressesOneInternalNetwork`.
    #[test]
    fn occm_test_node_addresses_one_internal_network() {
        let got = node_addresses(
            &three_networks(),
            &active_port(&["10.0.0.32", "10.0.0.31"]),
            &opts(&[], &["also-private"], false, ""),
        );
        assert_eq!(
            got,
            want(&[
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Int, "10.0.0.64"),
                (Ext, "50.56.176.36"),
            ])
        );
    }

    /// OCCM `TestNodeAddressesIPv6Disabled`.
    #[test]
    fn occm_test_node_addresses_ipv6_disabled() {
        let srv = server(
            &format!("{{{PRIVATE}, {}}}", public_net("public", "50.56.176.35")),
            false,
        );
        let got = node_addresses(
            &srv,
            &active_port(&["10.0.0.32", "10.0.0.31"]),
            &opts(&["public"], &[], true, ""),
        );
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.32"),
                (Int, "10.0.0.31"),
                (Ext, "50.56.176.99"),
                (Ext, "50.56.176.36"),
                (Ext, "50.56.176.35"),
            ])
        );
    }

    /// OCCM `TestNodeAddressesWithAddressSortOrderOptions`.
    #[test]
    fn occm_test_node_addresses_with_address_sort_order_options() {
        let srv = server(
            &format!("{{{PRIVATE}, {}}}", public_net("public", "50.56.176.35")),
            true,
        );
        let o = opts(
            &["public"],
            &[],
            false,
            "10.0.0.0/8, 50.56.176.0/24, 2001:4800::/32",
        );
        let got = node_addresses(&srv, &active_port(&["10.0.0.32", "10.0.0.31"]), &o);
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.31"),
                (Int, "10.0.0.32"),
                (Ext, "50.56.176.35"),
                (Ext, "50.56.176.36"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Host, HOSTNAME),
            ])
        );
    }

    #[test]
    fn ports_not_active_give_nothing_and_duplicates_collapse() {
        let srv = server(
            r#"{"net": [{"addr": "10.0.0.5"}, {"addr": "10.0.0.5"}, {"addr": ""}]}"#,
            false,
        );
        let mut ports = active_port(&["10.0.0.5", "10.0.0.5", ""]);
        ports.extend(active_port(&["10.0.0.9"]).into_iter().map(|p| Port {
            status: "DOWN".into(),
            ..p
        }));
        let got = node_addresses(&srv, &ports, &AddressOptions::default());
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.5"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
            ])
        );
    }

    #[test]
    fn empty_server_gives_no_addresses() {
        assert!(node_addresses(&Server::default(), &[], &AddressOptions::default()).is_empty());
    }

    fn trunk_parent() -> Port {
        Port {
            id: "parent".into(),
            status: "ACTIVE".into(),
            fixed_ips: vec![FixedIp {
                ip_address: "10.0.0.5".into(),
                subnet_id: String::new(),
            }],
            trunk_details: Some(TrunkDetails {
                trunk_id: "t".into(),
                sub_ports: ["sp1", "sp-gone", "sp2"]
                    .into_iter()
                    .map(|id| SubPort {
                        port_id: id.into(),
                        segmentation_type: "vlan".into(),
                        segmentation_id: Some(100),
                    })
                    .collect(),
            }),
            ..Port::default()
        }
    }

    #[test]
    fn trunk_subports_join_in_order_and_skip_unknowns() {
        let parent = trunk_parent();
        assert_eq!(
            trunk_subport_ids(std::slice::from_ref(&parent)),
            ["sp1", "sp-gone", "sp2"]
        );
        let sub = |id: &str, net: &str, ips: &[&str]| Port {
            id: id.into(),
            network_id: net.into(),
            fixed_ips: ips
                .iter()
                .map(|ip| FixedIp {
                    ip_address: (*ip).into(),
                    subnet_id: String::new(),
                })
                .collect(),
            ..Port::default()
        };
        let subports = [
            sub("sp2", "n-vlan200", &["192.168.200.5"]),
            sub("sp1", "n-vlan100", &["192.168.100.5", "fd00:100::5"]),
        ];
        let networks = [
            Network {
                id: "n-vlan100".into(),
                name: "vlan100".into(),
            },
            Network {
                id: "n-vlan200".into(),
                name: "private".into(),
            },
        ];
        let resolved = resolve_trunk_subports(std::slice::from_ref(&parent), &subports, &networks);
        assert_eq!(
            resolved,
            [
                SubportAddresses {
                    network_name: "vlan100".into(),
                    addresses: vec!["192.168.100.5".into(), "fd00:100::5".into()],
                },
                SubportAddresses {
                    network_name: "private".into(),
                    addresses: vec!["192.168.200.5".into()],
                },
            ]
        );

        // Subport IPs come after Nova's own entries of the same network, networks sorted.
        let srv = server(
            r#"{"private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"}]}"#,
            false,
        );
        let o = AddressOptions {
            ipv6_support_disabled: true,
            ..AddressOptions::default()
        };
        let got = node_addresses_with_subports(&srv, &[parent], &resolved, &o);
        assert_eq!(
            got,
            want(&[
                (Int, "10.0.0.5"),
                (Ext, "50.56.176.99"),
                (Int, "192.168.200.5"),
                (Int, "192.168.100.5"),
            ])
        );
    }

    /// OCCM `TestBuildAddressSortOrderList`, 3 cases.
    #[test]
    fn occm_test_build_address_sort_order_list() {
        let v4: IpNet = "192.168.0.0/16".parse().unwrap();
        let v6: IpNet = "2001:4800:790e::/64".parse().unwrap();
        let invalid = "InvalidOption, AnotherInvalidOption";
        let cases = [
            (String::new(), vec![]),
            (invalid.to_owned(), vec![]),
            (format!("{v4}, {invalid}, {v6}"), vec![v4, v6]),
        ];
        for (option, want) in cases {
            assert_eq!(parse_address_sort_order(&option), want, "{option:?}");
        }
        // Host bits cleared, as net.ParseCIDR gives the network; a bad prefix dropped.
        assert_eq!(
            parse_address_sort_order("10.1.2.3/8 10.0.0.0/244,,fd00::1/64"),
            vec![
                "10.0.0.0/8".parse::<IpNet>().unwrap(),
                "fd00::/64".parse().unwrap()
            ]
        );
    }

    /// OCCM `TestGetSortPriority`, 6 cases.
    #[test]
    fn occm_test_get_sort_priority() {
        let list = parse_address_sort_order("192.168.100.0/24, 2001:4800:790e::/64");
        for (address, want) in [
            ("", 0),
            ("some-host.exam.ple", 0),
            ("2001:4800:790e::82a8", 1),
            ("2001:cafe:babe::82a8", 0),
            ("192.168.100.200", 2),
            ("192.168.101.123", 0),
        ] {
            assert_eq!(sort_priority(&list, address), want, "{address:?}");
        }
        // Go treats a v4-mapped address as IPv4.
        assert_eq!(sort_priority(&list, "::ffff:192.168.100.1"), 2);
        assert_eq!(
            sort_priority(&parse_address_sort_order("::ffff:10.0.0.0/104"), "10.1.1.1"),
            1
        );
    }

    fn sort_input() -> Vec<NodeAddress> {
        want(&[
            (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
            (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:84a8"),
            (Int, "192.168.0.1"),
            (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:82a8"),
            (Int, "10.0.0.32"),
            (Int, "172.16.0.1"),
            (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
            (Int, "10.0.0.31"),
            (Int, "50.56.176.37"),
            (Ext, "50.56.176.36"),
            (
                Host,
                "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal",
            ),
            (Ext, "50.56.176.99"),
            (Ext, "50.56.176.35"),
            (
                Host,
                "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.exam.ple",
            ),
        ])
    }

    fn sorted(order: &str) -> Vec<NodeAddress> {
        let mut a = sort_input();
        sort_node_addresses(&mut a, &parse_address_sort_order(order));
        a
    }

    /// OCCM `TestSortNodeAddressesWithAnInvalidCIDR`.
    #[test]
    fn occm_test_sort_node_addresses_with_an_invalid_cidr() {
        assert_eq!(sorted("10.0.0.0/244"), sort_input());
    }

    /// OCCM `TestSortNodeAddressesWithOneIPv4CIDR`.
    #[test]
    fn occm_test_sort_node_addresses_with_one_ipv4_cidr() {
        assert_eq!(
            sorted("10.0.0.0/8"),
            want(&[
                (Int, "10.0.0.31"),
                (Int, "10.0.0.32"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:84a8"),
                (Int, "192.168.0.1"),
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:82a8"),
                (Int, "172.16.0.1"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Int, "50.56.176.37"),
                (Ext, "50.56.176.36"),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal"
                ),
                (Ext, "50.56.176.99"),
                (Ext, "50.56.176.35"),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.exam.ple"
                ),
            ])
        );
    }

    /// OCCM `TestSortNodeAddressesWithOneIPv6CIDR`.
    #[test]
    fn occm_test_sort_node_addresses_with_one_ipv6_cidr() {
        assert_eq!(
            sorted("fd08:1374:fcee:916b::/64"),
            want(&[
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:82a8"),
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:84a8"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
                (Int, "192.168.0.1"),
                (Int, "10.0.0.32"),
                (Int, "172.16.0.1"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (Int, "10.0.0.31"),
                (Int, "50.56.176.37"),
                (Ext, "50.56.176.36"),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal"
                ),
                (Ext, "50.56.176.99"),
                (Ext, "50.56.176.35"),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.exam.ple"
                ),
            ])
        );
    }

    /// OCCM `TestSortNodeAddressesWithMultipleCIDRs`.
    #[test]
    fn occm_test_sort_node_addresses_with_multiple_cidrs() {
        assert_eq!(
            sorted(
                "10.0.0.0/8, 172.16.0.0/16, 192.168.0.0/24, fd08:1374:fcee:916b::/64, 50.56.176.0/24, 2001:cafe:babe::/64"
            ),
            want(&[
                (Int, "10.0.0.31"),
                (Int, "10.0.0.32"),
                (Int, "172.16.0.1"),
                (Int, "192.168.0.1"),
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:82a8"),
                (Int, "fd08:1374:fcee:916b:be76:4eff:fe04:84a8"),
                (Ext, "50.56.176.35"),
                (Ext, "50.56.176.36"),
                (Int, "50.56.176.37"),
                (Ext, "50.56.176.99"),
                (Ext, "2001:4800:780e:510:be76:4eff:fe04:84a8"),
                (Ext, "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal"
                ),
                (
                    Host,
                    "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.exam.ple"
                ),
            ])
        );
    }
}
