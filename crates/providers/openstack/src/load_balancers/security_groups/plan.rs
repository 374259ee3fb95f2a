//! What the Service's security group holds and which ports carry it, decided from what Neutron
//! read (the group with its rules, the member subnet's CIDR, the ports): pure. The rule diff
//! compares as OCCM's `getRulesToCreateAndDelete` does; [`super`] makes the calls.

use std::net::IpAddr;

use ipnet::IpNet;
use provider::{LoadBalancerNode, Protocol, ServiceSpec};

use crate::{
    load_balancers::{
        desired::{self, IpFamily},
        names,
    },
    neutron::{
        ports::Port,
        security_groups::{NewRule, Rule},
    },
};

/// A node whose member port gets the group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    /// Its server (the port's `device_id`).
    pub server_id: String,
    /// The address the load balancer sends to (on the member subnet).
    pub address: String,
}

/// What the Service asks of its security group, all of it known without a cloud call (the
/// member subnet's CIDR is read when the group is reconciled). Part of the load balancer's
/// fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub name: String,
    pub description: String,
    /// (Neutron protocol, node port) of every port with a node port.
    pub node_ports: Vec<(&'static str, u16)>,
    /// `spec.healthCheckNodePort`, when set (whether or not a monitor uses it, as OCCM).
    pub health_check_node_port: Option<u16>,
    /// The remote prefixes of the node-port rules: `None`, the member subnet's CIDR; with the
    /// `ovn` provider, which keeps the client's address, the Service's source ranges.
    pub source_ranges: Option<Vec<String>>,
    /// The subnet of the members' addresses.
    pub member_subnet_id: String,
    /// The member nodes, sorted.
    pub members: Vec<Member>,
}

fn neutron_protocol(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// What `service` asks of its group, on `nodes` (the members, already selected), whose
/// servers `server_id` reads from their providerID (a node without one has no port yet).
pub fn request(
    cluster: &str,
    service: &ServiceSpec,
    member_subnet_id: &str,
    source_ranges: Option<Vec<String>>,
    nodes: &[&LoadBalancerNode],
    family: Option<IpFamily>,
    server_id: impl Fn(&str) -> Option<String>,
) -> Request {
    let mut members: Vec<Member> = nodes
        .iter()
        .filter_map(|n| {
            Some(Member {
                server_id: server_id(&n.provider_id)?,
                address: desired::node_address_for_lb(&n.addresses, family)?.to_owned(),
            })
        })
        .collect();
    members.sort();
    members.dedup();
    Request {
        name: names::security_group_name(&service.uid, &service.namespace, &service.name),
        description: names::security_group_description(cluster, &service.namespace, &service.name),
        node_ports: service
            .ports
            .iter()
            .filter(|p| p.node_port != 0)
            .map(|p| (neutron_protocol(p.protocol), p.node_port))
            .collect(),
        health_check_node_port: (service.health_check_node_port != 0)
            .then_some(service.health_check_node_port),
        source_ranges,
        member_subnet_id: member_subnet_id.to_owned(),
        members,
    }
}

fn ethertype_of(prefix: &str) -> &'static str {
    match prefix.parse::<IpNet>() {
        Ok(IpNet::V6(_)) => "IPv6",
        _ => "IPv4",
    }
}

/// The rules `request` asks for, with the member subnet's CIDR `subnet_cidr` (OCCM's wanted
/// rules: the health check node port from the subnet, then each node port from each prefix).
pub fn wanted_rules(request: &Request, subnet_cidr: &str) -> Vec<NewRule> {
    let rule = |protocol, prefix: &str, port| NewRule {
        protocol,
        ethertype: ethertype_of(prefix),
        remote_ip_prefix: prefix.to_owned(),
        port,
    };
    let subnet = [subnet_cidr.to_owned()];
    let prefixes = request.source_ranges.as_deref().unwrap_or(&subnet);
    request
        .health_check_node_port
        .map(|port| rule("tcp", subnet_cidr, port))
        .into_iter()
        .chain(
            request
                .node_ports
                .iter()
                .flat_map(|&(protocol, port)| prefixes.iter().map(move |p| rule(protocol, p, port))),
        )
        .collect()
}

/// Two prefixes naming the same network (`10.0.0.1/24` is `10.0.0.0/24`); no prefix is
/// anywhere of the rule's family.
fn same_prefix(held: Option<&str>, ethertype: &str, wanted: &str) -> bool {
    let anywhere = if ethertype == "IPv6" { "::/0" } else { "0.0.0.0/0" };
    let held = held.unwrap_or(anywhere);
    match (held.parse::<IpNet>(), wanted.parse::<IpNet>()) {
        (Ok(a), Ok(b)) => a.trunc() == b.trunc(),
        _ => held == wanted,
    }
}

/// Whether `rule` is `wanted` (OCCM's `compareSecurityGroupRuleAndCreateOpts`: direction,
/// protocol in any case, ethertype, remote prefix and port range).
fn is(rule: &Rule, wanted: &NewRule) -> bool {
    rule.direction == "ingress"
        && rule
            .protocol
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case(wanted.protocol))
        && rule.ethertype == wanted.ethertype
        && same_prefix(
            rule.remote_ip_prefix.as_deref(),
            &rule.ethertype,
            &wanted.remote_ip_prefix,
        )
        && rule.port_range_min == Some(wanted.port)
        && rule.port_range_max == Some(wanted.port)
}

/// The rules to create and the rules to delete (everything not wanted, the egress rules
/// Neutron puts in a new group included, as OCCM's `getRulesToCreateAndDelete`).
pub fn rule_changes<'a>(wanted: &'a [NewRule], held: &'a [Rule]) -> (Vec<&'a NewRule>, Vec<&'a Rule>) {
    let create = wanted.iter().filter(|w| !held.iter().any(|r| is(r, w))).collect();
    let delete = held.iter().filter(|r| !wanted.iter().any(|w| is(r, w))).collect();
    (create, delete)
}

/// A port's security groups to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortEdit {
    pub port_id: String,
    /// The revision read, for `If-Match` (0: none read).
    pub revision: u64,
    pub security_groups: Vec<String>,
    /// OCCM's older releases tagged a port with the group's ID: removed with the group.
    pub drop_legacy_tag: bool,
}

/// Whether `port` is a member's port: the member's server's, holding its address on the
/// member subnet (OCCM's `isPortMember`).
fn is_member_port(port: &Port, members: &[Member], member_subnet_id: &str) -> bool {
    members.iter().any(|m| {
        m.server_id == port.device_id
            && port.fixed_ips.iter().any(|ip| {
                (member_subnet_id.is_empty() || ip.subnet_id == member_subnet_id)
                    && same_address(&ip.ip_address, &m.address)
            })
    })
}

fn same_address(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The port writes that leave group `group_id` on exactly the member ports among `ports`
/// (each port once, however often listed): added where missing (port security off is left
/// alone), removed from every other port carrying it. With no members, it is removed
/// everywhere (before the group is deleted).
pub fn port_edits(
    ports: &[Port],
    group_id: &str,
    members: &[Member],
    member_subnet_id: &str,
) -> Vec<PortEdit> {
    let mut seen = std::collections::HashSet::new();
    ports
        .iter()
        .filter(|p| seen.insert(p.id.as_str()))
        .filter_map(|port| {
            let has = port.security_groups.iter().any(|g| g == group_id);
            let member = is_member_port(port, members, member_subnet_id);
            let security_groups: Vec<String> = if member && !has && port.port_security_enabled != Some(false)
            {
                port.security_groups
                    .iter()
                    .cloned()
                    .chain([group_id.to_owned()])
                    .collect()
            } else if !member && has {
                port.security_groups
                    .iter()
                    .filter(|g| *g != group_id)
                    .cloned()
                    .collect()
            } else {
                return None;
            };
            Some(PortEdit {
                port_id: port.id.clone(),
                revision: port.revision_number,
                drop_legacy_tag: !member && port.tags.iter().any(|t| t == group_id),
                security_groups,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use provider::{AddressType, ExternalTrafficPolicy, NodeAddress, ServicePort};

    use super::*;
    use crate::neutron::ports::FixedIp;

    fn wanted(protocol: &'static str, prefix: &str, port: u16) -> NewRule {
        NewRule {
            protocol,
            ethertype: ethertype_of(prefix),
            remote_ip_prefix: prefix.into(),
            port,
        }
    }

    fn held(id: &str, protocol: Option<&str>, prefix: Option<&str>, port: Option<u16>) -> Rule {
        Rule {
            id: id.into(),
            direction: "ingress".into(),
            ethertype: prefix.map_or("IPv4", ethertype_of).into(),
            protocol: protocol.map(Into::into),
            port_range_min: port,
            port_range_max: port,
            remote_ip_prefix: prefix.map(Into::into),
        }
    }

    fn ids<'a>(rules: &[&'a Rule]) -> Vec<&'a str> {
        rules.iter().map(|r| r.id.as_str()).collect()
    }

    // OCCM's TestGetRulesToCreateAndDelete, case by case.
    #[test]
    fn rules_to_create_and_delete_as_occm_compares_them() {
        // "Empty elements": nothing either way.
        let (c, d) = rule_changes(&[], &[]);
        assert!(c.is_empty() && d.is_empty());
        // "Removal of default egress SG rules".
        let egress = |id: &str, ethertype: &str| Rule {
            id: id.into(),
            direction: "egress".into(),
            ethertype: ethertype.into(),
            ..Rule::default()
        };
        let w = [wanted("tcp", "10.0.0.0/8", 123)];
        let h = [egress("e4", "IPv4"), egress("e6", "IPv6")];
        let (c, d) = rule_changes(&w, &h);
        assert_eq!((c.len(), ids(&d)), (1, vec!["e4", "e6"]));
        // "Protocol case mismatch": TCP held, tcp wanted: the same rule.
        let h = [held("a", Some("TCP"), Some("10.0.0.0/8"), Some(123))];
        let (c, d) = rule_changes(&w, &h);
        assert!(c.is_empty() && d.is_empty());
        // "Changing a port number".
        let h = [held("a", Some("tcp"), Some("10.0.0.0/8"), Some(124))];
        let (c, d) = rule_changes(&w, &h);
        assert_eq!((c, ids(&d)), (vec![&w[0]], vec!["a"]));
        // A held rule without a protocol (as in OCCM's next cases): not the rule.
        let h = [held("a", None, Some("10.0.0.0/8"), Some(123))];
        let (c, d) = rule_changes(&w, &h);
        assert_eq!((c.len(), ids(&d)), (1, vec!["a"]));
        // "Changing the CIDR".
        let w24 = [wanted("tcp", "10.0.0.0/24", 123)];
        let h = [held("a", Some("tcp"), Some("10.0.0.0/8"), Some(123))];
        let (c, d) = rule_changes(&w24, &h);
        assert_eq!((c, ids(&d)), (vec![&w24[0]], vec!["a"]));
        // "Wiping all rules".
        let h = [
            held("a", Some("tcp"), Some("10.0.0.0/8"), Some(123)),
            held("b", Some("tcp"), Some("10.0.0.0/8"), Some(124)),
            held("c", Some("tcp"), Some("10.0.0.0/8"), Some(125)),
        ];
        let (c, d) = rule_changes(&[], &h);
        assert_eq!((c.len(), ids(&d)), (0, vec!["a", "b", "c"]));
        // "Several rules for an empty group".
        let w3 = [
            wanted("tcp", "10.0.0.0/8", 123),
            wanted("tcp", "10.0.10.0/24", 124),
            wanted("udp", "10.0.12.0/24", 124),
        ];
        let (c, d) = rule_changes(&w3, &[]);
        assert_eq!((c.len(), d.len()), (3, 0));
    }

    #[test]
    fn prefixes_compare_as_networks_and_none_is_anywhere() {
        let w = [
            wanted("tcp", "0.0.0.0/0", 30000),
            wanted("udp", "10.0.0.0/24", 30001),
        ];
        let h = [
            held("any", Some("tcp"), None, Some(30000)),
            held("host-bits", Some("udp"), Some("10.0.0.7/24"), Some(30001)),
        ];
        let (c, d) = rule_changes(&w, &h);
        assert!(c.is_empty() && d.is_empty(), "{c:?} {d:?}");
        // An IPv6 anywhere is not an IPv4 one.
        let w6 = [wanted("tcp", "::/0", 30000)];
        assert_eq!(rule_changes(&w6, &h[..1]).0.len(), 1);
    }

    fn service() -> ServiceSpec {
        let mut svc = crate::load_balancers::test_support::web_and_dns(&[]);
        svc.uid = "uid-1".into();
        svc.ports.push(ServicePort {
            name: "no-node-port".into(),
            protocol: Protocol::Tcp,
            port: 8080,
            node_port: 0,
        });
        svc.external_traffic_policy = ExternalTrafficPolicy::Local;
        svc.health_check_node_port = 32000;
        svc
    }

    fn node(name: &str, provider_id: &str, address: &str) -> LoadBalancerNode {
        LoadBalancerNode {
            name: name.into(),
            provider_id: provider_id.into(),
            addresses: vec![NodeAddress {
                kind: AddressType::InternalIP,
                address: address.into(),
            }],
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn the_request_names_the_group_as_occm_and_takes_node_ports_and_members() {
        let nodes = [
            node("b", "openstack:///srv-b", "10.0.0.12"),
            node("a", "openstack:///srv-a", "10.0.0.11"),
            node("joining", "", "10.0.0.13"),
        ];
        let nodes: Vec<&LoadBalancerNode> = nodes.iter().collect();
        let r = request(
            "kubernetes",
            &service(),
            "subnet-1",
            None,
            &nodes,
            Some(IpFamily::V4),
            |p| p.strip_prefix("openstack:///").map(str::to_owned),
        );
        assert_eq!(r.name, "lb-sg-uid-1-default-web");
        assert_eq!(
            r.description,
            "Security Group for default/web Service LoadBalancer in cluster kubernetes"
        );
        assert_eq!(r.node_ports, vec![("tcp", 30080), ("udp", 30053)]);
        assert_eq!(r.health_check_node_port, Some(32000));
        assert_eq!(
            r.members.iter().map(|m| m.server_id.as_str()).collect::<Vec<_>>(),
            vec!["srv-a", "srv-b"]
        );
        // OCCM's wanted rules: the health check port, then every node port from the subnet.
        assert_eq!(
            wanted_rules(&r, "10.0.0.0/24"),
            vec![
                wanted("tcp", "10.0.0.0/24", 32000),
                wanted("tcp", "10.0.0.0/24", 30080),
                wanted("udp", "10.0.0.0/24", 30053),
            ]
        );
        // ovn: the node ports from every source range, the health check from the subnet.
        let ovn = Request {
            source_ranges: Some(vec!["192.0.2.0/24".into(), "2001:db8::/64".into()]),
            health_check_node_port: None,
            ..r
        };
        assert_eq!(
            wanted_rules(&ovn, "10.0.0.0/24"),
            vec![
                wanted("tcp", "192.0.2.0/24", 30080),
                wanted("tcp", "2001:db8::/64", 30080),
                wanted("udp", "192.0.2.0/24", 30053),
                wanted("udp", "2001:db8::/64", 30053),
            ]
        );
        assert_eq!(wanted("tcp", "2001:db8::/64", 1).ethertype, "IPv6");
    }

    fn port(id: &str, device: &str, subnet: &str, ip: &str, groups: &[&str], security: Option<bool>) -> Port {
        Port {
            id: id.into(),
            device_id: device.into(),
            fixed_ips: vec![FixedIp {
                subnet_id: subnet.into(),
                ip_address: ip.into(),
            }],
            security_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            port_security_enabled: security,
            revision_number: 7,
            ..Port::default()
        }
    }

    #[test]
    fn the_group_goes_on_member_ports_only_and_leaves_departed_nodes() {
        let members = [
            Member {
                server_id: "srv-a".into(),
                address: "10.0.0.11".into(),
            },
            Member {
                server_id: "srv-b".into(),
                address: "10.0.0.12".into(),
            },
        ];
        let mut departed = port(
            "p-gone",
            "srv-gone",
            "subnet-1",
            "10.0.0.9",
            &["default", "sg"],
            Some(true),
        );
        departed.tags = vec!["sg".into()];
        let ports = [
            // A member's port without the group: added, keeping its other groups.
            port("p-a", "srv-a", "subnet-1", "10.0.0.11", &["default"], Some(true)),
            // A member's port on another subnet (a second NIC): left alone.
            port("p-a2", "srv-a", "subnet-2", "10.0.0.11", &["default"], Some(true)),
            // A member's port already carrying it (listed twice: by server and by group).
            port(
                "p-b",
                "srv-b",
                "subnet-1",
                "10.0.0.12",
                &["default", "sg"],
                Some(true),
            ),
            port(
                "p-b",
                "srv-b",
                "subnet-1",
                "10.0.0.12",
                &["default", "sg"],
                Some(true),
            ),
            // A node that left the pool still carrying it: removed (OCCM's #2695).
            departed,
            // Port security off: skipped (OCCM's #2454).
            port("p-off", "srv-a", "subnet-1", "10.0.0.11", &[], Some(false)),
        ];
        let edits = port_edits(&ports, "sg", &members, "subnet-1");
        assert_eq!(
            edits,
            vec![
                PortEdit {
                    port_id: "p-a".into(),
                    revision: 7,
                    security_groups: vec!["default".into(), "sg".into()],
                    drop_legacy_tag: false,
                },
                PortEdit {
                    port_id: "p-gone".into(),
                    revision: 7,
                    security_groups: vec!["default".into()],
                    drop_legacy_tag: true,
                },
            ]
        );
        // No members: removed from every port that carries it, before the group goes.
        let edits = port_edits(&ports, "sg", &[], "subnet-1");
        assert_eq!(
            edits.iter().map(|e| e.port_id.as_str()).collect::<Vec<_>>(),
            vec!["p-b", "p-gone"]
        );
        // Unknown port security (no extension): the group still goes on.
        let unknown = [port("p-u", "srv-a", "subnet-1", "10.0.0.11", &[], None)];
        assert_eq!(port_edits(&unknown, "sg", &members, "subnet-1").len(), 1);
    }
}
