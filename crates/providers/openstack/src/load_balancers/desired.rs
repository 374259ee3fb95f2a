//! The listeners, pools, members and health monitors a Service's load balancer should have, as
//! OCCM builds them (`buildListenerCreateOpt`, `buildPoolCreateOpt`, `buildBatchUpdateMemberOpts`,
//! `buildMonitorCreateOpts`, `nodeAddressForLB`; reference §3.6–§3.8), and the status it
//! reports (`createLoadBalancerStatus`, §3.9). Pure: the same tree serves the fully populated
//! create and the comparison with what Octavia reports.

use std::{collections::BTreeMap, net::IpAddr};

use provider::{
    AddressType, LoadBalancerIngress, LoadBalancerNode, LoadBalancerStatus, NodeAddress, Protocol,
    ServiceSpec,
};

use super::{
    names, service_conf,
    service_conf::{Monitor, OctaviaFeatures, ProxyProtocol, ServiceLbConf, Timeouts, node_matches},
};

/// An IP family (a Service's `spec.ipFamilies[0]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// The family of `address`; `None` when it is no IP address.
    pub fn of(address: &str) -> Option<Self> {
        match address.parse::<IpAddr>().ok()? {
            IpAddr::V4(_) => Some(Self::V4),
            IpAddr::V6(_) => Some(Self::V6),
        }
    }
}

/// One listener, with its pool: one per Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// `listener_<i>_<lb name>`.
    pub name: String,
    /// `TCP`, `UDP`, `SCTP`, `HTTP` with `x-forwarded-for`, or `TERMINATED_HTTPS` with TLS.
    pub protocol: &'static str,
    /// The Service port.
    pub protocol_port: u16,
    /// -1: unlimited.
    pub connection_limit: i32,
    /// `[lb name]` when Octavia has tags: marks the listener as this Service's on a shared
    /// load balancer.
    pub tags: Vec<String>,
    /// When Octavia has them.
    pub timeouts: Option<Timeouts>,
    /// `insert_headers: {X-Forwarded-For: "true"}`.
    pub x_forwarded_for: bool,
    /// When Octavia has them.
    pub allowed_cidrs: Option<Vec<String>>,
    /// Its default pool.
    pub pool: Pool,
    /// The Barbican container or secret it terminates TLS with. Last, so that a listener
    /// without TLS keeps its fingerprint ([`super::converged`]).
    pub default_tls_container_ref: Option<String>,
}

/// A listener's default pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// `pool_<i>_<lb name>`.
    pub name: String,
    /// The listener's protocol, `PROXY`/`PROXYV2` with proxy protocol, `HTTP` with
    /// `x-forwarded-for` or TLS.
    pub protocol: &'static str,
    /// `lb_algorithm`.
    pub lb_algorithm: String,
    /// `session_persistence: {type: SOURCE_IP}` (set at creation only, as OCCM does).
    pub source_ip_persistence: bool,
    /// One per selected node with an address, sorted by name.
    pub members: Vec<Member>,
    /// When enabled.
    pub monitor: Option<HealthMonitor>,
}

/// How members are written: Octavia's batch update (OCCM's default), or one call per member
/// (`[LoadBalancer] provider-requires-serial-api-calls`, for providers without the batch call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberCalls {
    Batch,
    /// OCCM's `SeriallyReconcilePoolMembers`: members named `member_<node>_<address>_<port>`,
    /// at the node's first InternalIP (else its first address), compared by address and port.
    Serial,
}

/// The address of a node as a member with [`MemberCalls::Serial`]: its first InternalIP, else
/// its first address of any type (OCCM's serial `getNodeAddressForLB`, which ignores the family).
pub fn serial_node_address(addresses: &[NodeAddress]) -> Option<&str> {
    addresses
        .iter()
        .find(|a| a.kind == AddressType::InternalIP)
        .or_else(|| addresses.first())
        .map(|a| a.address.as_str())
}

/// What the cloud's Octavia takes: its features, its provider (`[LoadBalancer] lb-provider`),
/// how members are written.
#[derive(Debug, Clone, Copy)]
pub struct Octavia<'a> {
    pub features: &'a OctaviaFeatures,
    pub provider: &'a str,
    pub member_calls: MemberCalls,
}

/// A pool member: one node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    /// The node's name.
    pub name: String,
    /// The node's address ([`node_address_for_lb`]).
    pub address: String,
    /// The Service port's node port.
    pub protocol_port: u16,
    /// The member subnet, when known.
    pub subnet_id: Option<String>,
    /// `healthCheckNodePort`, when an HTTP monitor checks it.
    pub monitor_port: Option<u16>,
}

/// A pool's health monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthMonitor {
    /// `monitor_<i>_<lb name>`.
    pub name: String,
    /// `TCP`, `UDP-CONNECT`, `SCTP`, or `HTTP` (`GET /healthz`, expecting 200) on the
    /// members' `monitor_port`.
    pub kind: &'static str,
    /// Delay, timeout and retries.
    pub settings: Monitor,
}

impl HealthMonitor {
    /// Whether this is the HTTP check of `healthCheckNodePort`.
    pub fn is_http(&self) -> bool {
        self.kind == "HTTP"
    }
}

/// OCCM's `nodeAddressForLB`: the first InternalIP of `family`, else the first ExternalIP of
/// it; without a family, the first InternalIP, else the first ExternalIP.
pub fn node_address_for_lb(addresses: &[NodeAddress], family: Option<IpFamily>) -> Option<&str> {
    let of_family = |address: &str| family.is_none() || IpFamily::of(address) == family;
    [AddressType::InternalIP, AddressType::ExternalIP]
        .into_iter()
        .find_map(|kind| {
            addresses
                .iter()
                .find(|a| a.kind == kind && of_family(&a.address))
                .map(|a| a.address.as_str())
        })
}

/// The listener protocol of a Service port (`getListenerProtocol`): TLS first, whatever the
/// port's protocol, then `x-forwarded-for`.
fn listener_protocol(protocol: Protocol, conf: &ServiceLbConf) -> &'static str {
    if conf.tls_container_ref.is_some() {
        return "TERMINATED_HTTPS";
    }
    if conf.x_forwarded_for {
        return "HTTP";
    }
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// The pool protocol (`buildPoolCreateOpt`).
fn pool_protocol(listener: &'static str, conf: &ServiceLbConf) -> &'static str {
    match conf.proxy_protocol {
        Some(ProxyProtocol::V1) => "PROXY",
        Some(ProxyProtocol::V2) => "PROXYV2",
        None if conf.x_forwarded_for || conf.tls_container_ref.is_some() => "HTTP",
        None => listener,
    }
}

/// Whether the port's pool may have an HTTP monitor (`canUseHTTPMonitor`).
fn can_use_http_monitor(protocol: Protocol, features: &OctaviaFeatures, lb_provider: &str) -> bool {
    lb_provider != "ovn" && (protocol != Protocol::Udp || features.http_monitors_on_udp)
}

/// The nodes a Service's members are made of: those its node selector matches.
pub fn member_nodes<'a>(conf: &ServiceLbConf, nodes: &'a [LoadBalancerNode]) -> Vec<&'a LoadBalancerNode> {
    nodes
        .iter()
        .filter(|n| conf.node_selector.is_empty() || node_matches(&conf.node_selector, &n.labels))
        .collect()
}

/// The listeners (each with its pool, members and monitor) for `service`'s ports, in port
/// order, on `nodes` (already filtered by [`member_nodes`]). A node without an address of the
/// family is left out, as OCCM leaves it out; a port without a node port (with
/// `allocateLoadBalancerNodePorts: false`) has no members.
pub fn listeners(
    service: &ServiceSpec,
    conf: &ServiceLbConf,
    octavia: Octavia<'_>,
    lb_name: &str,
    nodes: &[&LoadBalancerNode],
    family: Option<IpFamily>,
) -> Vec<Listener> {
    let Octavia {
        features,
        provider: lb_provider,
        member_calls: calls,
    } = octavia;
    service
        .ports
        .iter()
        .enumerate()
        .map(|(index, port)| {
            let protocol = listener_protocol(port.protocol, conf);
            let http_monitor = conf
                .health_check_node_port
                .filter(|_| can_use_http_monitor(port.protocol, features, lb_provider));
            let mut members: Vec<Member> = if port.node_port == 0 {
                Vec::new()
            } else {
                nodes
                    .iter()
                    .filter_map(|node| match calls {
                        MemberCalls::Batch => {
                            node_address_for_lb(&node.addresses, family).map(|address| Member {
                                name: node.name.clone(),
                                address: address.to_owned(),
                                protocol_port: port.node_port,
                                subnet_id: conf.member_subnet_id.clone(),
                                monitor_port: http_monitor,
                            })
                        }
                        // OCCM's serial member create sends the name, address and port only.
                        MemberCalls::Serial => serial_node_address(&node.addresses).map(|address| Member {
                            name: names::serial_member_name(&node.name, address, port.node_port),
                            address: address.to_owned(),
                            protocol_port: port.node_port,
                            subnet_id: None,
                            monitor_port: None,
                        }),
                    })
                    .collect()
            };
            members.sort();
            let monitor = conf.monitor.map(|settings| HealthMonitor {
                name: names::monitor_name(index, lb_name),
                kind: match (http_monitor, port.protocol) {
                    (Some(_), _) => "HTTP",
                    (None, Protocol::Tcp) => "TCP",
                    (None, Protocol::Udp) => "UDP-CONNECT",
                    (None, Protocol::Sctp) => "SCTP",
                },
                settings,
            });
            Listener {
                name: names::listener_name(index, lb_name),
                protocol,
                protocol_port: port.port,
                connection_limit: conf.connection_limit,
                tags: if features.tags {
                    vec![lb_name.to_owned()]
                } else {
                    Vec::new()
                },
                timeouts: conf.timeouts,
                x_forwarded_for: conf.x_forwarded_for,
                allowed_cidrs: conf.allowed_cidrs.clone(),
                pool: Pool {
                    name: names::pool_name(index, lb_name),
                    protocol: pool_protocol(protocol, conf),
                    lb_algorithm: conf.lb_method.clone(),
                    source_ip_persistence: conf.source_ip_persistence,
                    members,
                    monitor,
                },
                default_tls_container_ref: conf.tls_container_ref.clone(),
            }
        })
        .collect()
}

/// How the status names a PROXY-protocol load balancer (`[LoadBalancer]
/// enable-ingress-hostname`, `ingress-hostname-suffix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressHostname<'a> {
    pub enabled: bool,
    pub suffix: &'a str,
}

/// The Service's status (`createLoadBalancerStatus`): the `hostname` annotation; else, with
/// PROXY protocol and `enable-ingress-hostname`, `<address>.<suffix>` (so kube-proxy does not
/// short-circuit traffic that must carry the PROXY header); else the address.
///
/// OCCM also sets `ipMode: Proxy` for PROXY protocol; the gateway's status has no `ipMode`
/// yet, so such a Service should use `enable-ingress-hostname`.
pub fn status(conf: &ServiceLbConf, hostname: &IngressHostname<'_>, address: &str) -> LoadBalancerStatus {
    let named = |hostname: String| LoadBalancerIngress {
        hostname,
        ..LoadBalancerIngress::default()
    };
    let ingress = if let Some(name) = &conf.hostname {
        named(name.clone())
    } else if conf.proxy_protocol.is_some() && hostname.enabled {
        named(format!("{address}.{}", hostname.suffix))
    } else {
        LoadBalancerIngress {
            ip: address.to_owned(),
            hostname: String::new(),
            // OCCM: traffic that gets a PROXY header must reach the load balancer, also from
            // inside the cluster (kube-proxy does not short-circuit a Proxy address).
            ip_mode: if conf.proxy_protocol.is_some() {
                "Proxy"
            } else {
                "VIP"
            }
            .into(),
        }
    };
    LoadBalancerStatus {
        ingress: vec![ingress],
        ..LoadBalancerStatus::default()
    }
}

/// The annotations OCCM writes back on the Service: the load balancer's ID (its recipe for
/// sharing a load balancer reads it off the first Service) and the address in use (with
/// `enable-ingress-hostname`, the only place the real address shows).
pub fn written_back(lb_id: &str, address: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (service_conf::LOAD_BALANCER_ID.to_owned(), lb_id.to_owned()),
        (service_conf::LOAD_BALANCER_ADDRESS.to_owned(), address.to_owned()),
    ])
}

/// The status of a load balancer at `address` whose Service's settings cannot be read (a
/// refused annotation): the address alone.
pub fn address_status(address: String) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: vec![LoadBalancerIngress {
            ip: address,
            ..LoadBalancerIngress::default()
        }],
        ..LoadBalancerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use provider::{ExternalTrafficPolicy, ServicePort};

    use super::*;
    use crate::{
        cloud_config::LoadBalancerSettings,
        load_balancers::service_conf::{self, resolve},
    };

    fn addr(kind: AddressType, a: &str) -> NodeAddress {
        NodeAddress::new(kind, a)
    }

    // OCCM's Test_nodeAddressForLB.
    #[test]
    fn node_addresses_as_occm_picks_them() {
        use AddressType::{ExternalIP, InternalIP};
        let v6 = "2001:0db8:85a3:0000:0000:8a2e:0370:7334";
        let cases: Vec<(Vec<NodeAddress>, Option<IpFamily>, Option<&str>)> = vec![
            (vec![], Some(IpFamily::V4), None),
            (vec![], Some(IpFamily::V6), None),
            (
                vec![addr(InternalIP, "192.168.1.1")],
                Some(IpFamily::V4),
                Some("192.168.1.1"),
            ),
            (vec![addr(InternalIP, v6)], Some(IpFamily::V6), Some(v6)),
            (
                vec![addr(ExternalIP, "192.168.1.2"), addr(InternalIP, "192.168.1.1")],
                Some(IpFamily::V4),
                Some("192.168.1.1"),
            ),
            (
                vec![
                    addr(ExternalIP, "2001:0db8:85a3:3333:1111:8a2e:9999:8888"),
                    addr(InternalIP, v6),
                ],
                Some(IpFamily::V6),
                Some(v6),
            ),
            (
                vec![addr(InternalIP, "192.168.1.1"), addr(InternalIP, v6)],
                Some(IpFamily::V6),
                Some(v6),
            ),
            (
                vec![
                    addr(ExternalIP, "2009:0db8:85a3:0003:0001:8a2e:0370:9999"),
                    addr(InternalIP, v6),
                    addr(ExternalIP, "2001:0db8:85a3:0000:1111:8a2e:9798:7334"),
                    addr(InternalIP, "192.168.1.1"),
                    addr(ExternalIP, v6),
                ],
                Some(IpFamily::V4),
                Some("192.168.1.1"),
            ),
            (vec![addr(InternalIP, "192.168.1.1")], None, Some("192.168.1.1")),
            (vec![addr(InternalIP, v6)], None, Some(v6)),
            (
                vec![
                    addr(InternalIP, v6),
                    addr(InternalIP, "192.168.0.1"),
                    addr(InternalIP, "2001:0db8:85a3:1111:2222:8a2e:6869:7334"),
                ],
                None,
                Some(v6),
            ),
            // Only an ExternalIP: used. Only a hostname: none.
            (
                vec![addr(AddressType::Hostname, "n1"), addr(ExternalIP, "203.0.113.7")],
                Some(IpFamily::V4),
                Some("203.0.113.7"),
            ),
            (vec![addr(AddressType::Hostname, "n1")], None, None),
        ];
        for (addresses, family, want) in cases {
            assert_eq!(
                node_address_for_lb(&addresses, family),
                want,
                "{addresses:?} {family:?}"
            );
        }
    }

    fn node(name: &str, ip: &str, labels: &[(&str, &str)]) -> LoadBalancerNode {
        LoadBalancerNode {
            name: name.into(),
            provider_id: format!("openstack:///{name}"),
            addresses: vec![addr(AddressType::InternalIP, ip)],
            labels: labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
        }
    }

    fn service(ports: &[(Protocol, u16, u16)], annotations: &[(&str, &str)]) -> ServiceSpec {
        ServiceSpec {
            uid: "uid".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: ports
                .iter()
                .map(|&(protocol, port, node_port)| ServicePort {
                    name: String::new(),
                    protocol,
                    port,
                    node_port,
                })
                .collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect::<BTreeMap<_, _>>(),
            ..ServiceSpec::default()
        }
    }

    const LB: &str = "kube_service_kubernetes_default_web";

    fn build(
        svc: &ServiceSpec,
        features: OctaviaFeatures,
        provider: &str,
        nodes: &[LoadBalancerNode],
    ) -> Vec<Listener> {
        let settings = LoadBalancerSettings {
            member_subnet_id: Some("msub".into()),
            ..LoadBalancerSettings::default()
        };
        let conf = resolve(&settings, &features, svc).expect("resolves");
        let selected = member_nodes(&conf, nodes);
        listeners(
            svc,
            &conf,
            Octavia {
                features: &features,
                provider,
                member_calls: MemberCalls::Batch,
            },
            LB,
            &selected,
            Some(IpFamily::V4),
        )
    }

    fn zed() -> OctaviaFeatures {
        OctaviaFeatures::of(2, 26, "amphora")
    }

    // OCCM's Test_getListenerProtocol, TestBuildListenerCreateOpt, Test_buildPoolCreateOpt.
    #[test]
    fn protocols_of_listeners_and_pools() {
        type Annotations = &'static [(&'static str, &'static str)];
        let nodes = [node("n1", "10.0.0.1", &[])];
        const TLS: &str = "https://kms/v1/containers/c1";
        let cases: [(Protocol, Annotations, &str, &str); 11] = [
            (Protocol::Tcp, &[], "TCP", "TCP"),
            (Protocol::Udp, &[], "UDP", "UDP"),
            (Protocol::Sctp, &[], "SCTP", "SCTP"),
            (
                Protocol::Tcp,
                &[(service_conf::X_FORWARDED_FOR, "true")],
                "HTTP",
                "HTTP",
            ),
            (
                Protocol::Tcp,
                &[(service_conf::PROXY_PROTOCOL, "true")],
                "TCP",
                "PROXY",
            ),
            (
                Protocol::Tcp,
                &[(service_conf::PROXY_PROTOCOL, "v1")],
                "TCP",
                "PROXY",
            ),
            (
                Protocol::Tcp,
                &[(service_conf::PROXY_PROTOCOL, "v2")],
                "TCP",
                "PROXYV2",
            ),
            (
                Protocol::Tcp,
                &[(service_conf::TLS_CONTAINER_REF, TLS)],
                "TERMINATED_HTTPS",
                "HTTP",
            ),
            // TLS whatever the port's protocol, as OCCM's getListenerProtocol.
            (
                Protocol::Udp,
                &[(service_conf::TLS_CONTAINER_REF, TLS)],
                "TERMINATED_HTTPS",
                "HTTP",
            ),
            (
                Protocol::Tcp,
                &[
                    (service_conf::TLS_CONTAINER_REF, TLS),
                    (service_conf::X_FORWARDED_FOR, "true"),
                ],
                "TERMINATED_HTTPS",
                "HTTP",
            ),
            (
                Protocol::Tcp,
                &[
                    (service_conf::TLS_CONTAINER_REF, TLS),
                    (service_conf::PROXY_PROTOCOL, "v2"),
                ],
                "TERMINATED_HTTPS",
                "PROXYV2",
            ),
        ];
        for (protocol, annotations, listener, pool) in cases {
            let built = build(
                &service(&[(protocol, 80, 30080)], annotations),
                zed(),
                "amphora",
                &nodes,
            );
            assert_eq!(
                (built[0].protocol, built[0].pool.protocol),
                (listener, pool),
                "{protocol:?} {annotations:?}"
            );
            let tls = annotations
                .iter()
                .any(|(k, _)| *k == service_conf::TLS_CONTAINER_REF);
            assert_eq!(
                built[0].default_tls_container_ref.is_some(),
                tls,
                "{annotations:?}"
            );
        }
    }

    #[test]
    fn a_listener_per_port_named_by_index_with_occms_defaults() {
        let nodes = [node("n2", "10.0.0.2", &[]), node("n1", "10.0.0.1", &[])];
        let svc = service(&[(Protocol::Tcp, 80, 30080), (Protocol::Udp, 53, 30053)], &[]);
        let built = build(&svc, zed(), "amphora", &nodes);
        assert_eq!(built.len(), 2);
        let l = &built[1];
        assert_eq!(l.name, format!("listener_1_{LB}"));
        assert_eq!(l.pool.name, format!("pool_1_{LB}"));
        assert_eq!((l.protocol_port, l.connection_limit), (53, -1));
        assert_eq!(l.tags, vec![LB.to_owned()]);
        assert_eq!(l.allowed_cidrs, Some(vec!["0.0.0.0/0".to_owned()]));
        assert!(l.timeouts.is_some() && !l.x_forwarded_for);
        assert_eq!(l.pool.lb_algorithm, "ROUND_ROBIN");
        assert_eq!(l.pool.monitor, None);
        // Members sorted by node name, on the node port, on the member subnet.
        let members: Vec<(&str, &str, u16, Option<&str>)> = l
            .pool
            .members
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.address.as_str(),
                    m.protocol_port,
                    m.subnet_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            members,
            vec![
                ("n1", "10.0.0.1", 30053, Some("msub")),
                ("n2", "10.0.0.2", 30053, Some("msub"))
            ]
        );
        // Octavia without tags: untagged listeners.
        let old = build(&svc, OctaviaFeatures::of(2, 4, "amphora"), "amphora", &nodes);
        assert!(old[0].tags.is_empty() && old[0].allowed_cidrs.is_none());
    }

    // OCCM's TestBuildBatchUpdateMemberOpts and TestFilterNodes.
    #[test]
    fn members_skip_unaddressed_and_unselected_nodes_and_ports_without_node_ports() {
        let mut bare = node("bare", "10.0.0.9", &[]);
        bare.addresses.clear();
        let nodes = [
            node("a", "10.0.0.1", &[("pool", "lb")]),
            node("b", "10.0.0.2", &[]),
            bare,
        ];
        let all = build(
            &service(&[(Protocol::Tcp, 80, 30080)], &[]),
            zed(),
            "amphora",
            &nodes,
        );
        let names: Vec<&str> = all[0].pool.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let selected = build(
            &service(
                &[(Protocol::Tcp, 80, 30080)],
                &[(service_conf::NODE_SELECTOR, "pool=lb")],
            ),
            zed(),
            "amphora",
            &nodes,
        );
        assert_eq!(selected[0].pool.members.len(), 1);
        let no_node_port = build(&service(&[(Protocol::Tcp, 80, 0)], &[]), zed(), "amphora", &nodes);
        assert!(no_node_port[0].pool.members.is_empty());
    }

    // OCCM's Test_buildMonitorCreateOpts.
    #[test]
    fn monitors_check_the_health_check_node_port_over_http_where_octavia_can() {
        let nodes = [node("n1", "10.0.0.1", &[])];
        let on = [(service_conf::ENABLE_HEALTH_MONITOR, "true")];
        let mut svc = service(
            &[
                (Protocol::Tcp, 80, 30080),
                (Protocol::Udp, 53, 30053),
                (Protocol::Sctp, 9, 30009),
            ],
            &on,
        );
        let kinds = |ls: &[Listener]| -> Vec<(&'static str, Option<u16>)> {
            ls.iter()
                .map(|l| {
                    (
                        l.pool.monitor.as_ref().expect("monitor").kind,
                        l.pool.members[0].monitor_port,
                    )
                })
                .collect()
        };
        assert_eq!(
            kinds(&build(&svc, zed(), "amphora", &nodes)),
            [("TCP", None), ("UDP-CONNECT", None), ("SCTP", None)]
        );
        svc.external_traffic_policy = ExternalTrafficPolicy::Local;
        svc.health_check_node_port = 32000;
        assert_eq!(
            kinds(&build(&svc, zed(), "amphora", &nodes)),
            [
                ("HTTP", Some(32000)),
                ("HTTP", Some(32000)),
                ("HTTP", Some(32000))
            ]
        );
        // UDP needs 2.16 for an HTTP monitor.
        assert_eq!(
            kinds(&build(
                &svc,
                OctaviaFeatures::of(2, 15, "amphora"),
                "amphora",
                &nodes
            )),
            [
                ("HTTP", Some(32000)),
                ("UDP-CONNECT", None),
                ("HTTP", Some(32000))
            ]
        );
        let monitor = build(&svc, zed(), "amphora", &nodes)[0]
            .pool
            .monitor
            .clone()
            .unwrap();
        assert_eq!(monitor.name, format!("monitor_0_{LB}"));
        assert_eq!(
            monitor.settings,
            Monitor {
                delay: 5,
                timeout: 3,
                max_retries: 1,
                max_retries_down: 3
            }
        );
    }

    // OCCM's TestLbaasV2_createLoadBalancerStatus.
    #[test]
    fn status_as_occm_reports_it() {
        let settings = LoadBalancerSettings::default();
        let conf = |annotations: &[(&str, &str)]| {
            resolve(
                &settings,
                &zed(),
                &service(&[(Protocol::Tcp, 80, 30080)], annotations),
            )
            .unwrap()
        };
        let off = IngressHostname {
            enabled: false,
            suffix: "nip.io",
        };
        let on = IngressHostname {
            enabled: true,
            suffix: "nip.io",
        };
        let ip = |s: &LoadBalancerStatus| {
            let i = &s.ingress[0];
            (i.ip.clone(), i.hostname.clone(), i.ip_mode.clone())
        };
        let (none, vip, proxied) = (String::new(), "VIP".to_owned(), "Proxy".to_owned());
        assert_eq!(
            ip(&status(&conf(&[]), &off, "10.0.0.10")),
            ("10.0.0.10".into(), none.clone(), vip)
        );
        assert_eq!(
            ip(&status(
                &conf(&[(service_conf::HOSTNAME, "lb.example.com")]),
                &on,
                "10.0.0.10"
            )),
            (none.clone(), "lb.example.com".into(), none.clone())
        );
        let proxy = conf(&[(service_conf::PROXY_PROTOCOL, "true")]);
        assert_eq!(
            ip(&status(&proxy, &on, "10.0.0.10")),
            (none.clone(), "10.0.0.10.nip.io".into(), none.clone())
        );
        // PROXY protocol: the address must not be short-circuited inside the cluster.
        assert_eq!(
            ip(&status(&proxy, &off, "10.0.0.10")),
            ("10.0.0.10".into(), none, proxied)
        );
    }
}
