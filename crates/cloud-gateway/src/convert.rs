//! Wire types ↔ provider types. Everything a client sends is validated here, so providers only
//! ever see well-formed values and a bad request gets a clear INVALID_ARGUMENT.

use std::collections::BTreeMap;

use gateway_api::{error::GatewayError, v1 as pb};
use provider::{
    AddressType, ExternalTrafficPolicy, InstanceInfo, InstanceMetadata, IpFamily, LoadBalancerIngress,
    LoadBalancerNode, LoadBalancerStatus, NodeAddress, NodeRef, Protocol, ProviderError, Route, ServicePort,
    ServiceSpec,
};

type Result<T> = std::result::Result<T, GatewayError>;

fn invalid(msg: impl Into<String>) -> GatewayError {
    GatewayError::InvalidArgument(msg.into())
}

/// Maps a provider error onto the contract's typed error.
pub fn provider_error(err: ProviderError) -> GatewayError {
    match err {
        ProviderError::InstanceNotFound(m) => GatewayError::InstanceNotFound(m),
        ProviderError::NotImplemented(m) => GatewayError::NotImplemented(m),
        ProviderError::ImplementedElsewhere(m) => GatewayError::ImplementedElsewhere(m),
        ProviderError::RetryAfter { after, message } => GatewayError::RetryAfter { after, message },
        ProviderError::Throttled { retry_after, message } => GatewayError::Throttled { retry_after, message },
        ProviderError::QuotaExceeded(m) => GatewayError::QuotaExceeded(m),
        ProviderError::InvalidArgument(m) => GatewayError::InvalidArgument(m),
        ProviderError::Unavailable(m) => GatewayError::Unavailable(m),
        ProviderError::Internal(m) => GatewayError::Internal(m),
    }
}

/// A required cluster name.
pub fn cluster_name(name: &str) -> Result<&str> {
    if name.is_empty() {
        return Err(invalid("cluster_name is required"));
    }
    Ok(name)
}

/// An optional cluster identity: empty, or a Kubernetes UID's characters (letters, digits,
/// `-`), at most 64, so that a provider can put it in a tag or a name as it is.
pub fn cluster_id(id: &str) -> Result<&str> {
    if id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(invalid(format!(
            "cluster_id {id:?}: at most 64 letters, digits and '-' (the kube-system Namespace's UID)"
        )));
    }
    Ok(id)
}

/// A node reference: at least one of name and provider ID.
pub fn node_ref(node: Option<pb::NodeRef>) -> Result<NodeRef> {
    let node = node.ok_or_else(|| invalid("node is required"))?;
    if node.name.is_empty() && node.provider_id.is_empty() {
        return Err(invalid("node needs a name or a provider_id"));
    }
    Ok(NodeRef {
        name: node.name,
        provider_id: node.provider_id,
    })
}

fn address_type(kind: i32) -> Result<AddressType> {
    match pb::AddressType::try_from(kind) {
        Ok(pb::AddressType::Hostname) => Ok(AddressType::Hostname),
        Ok(pb::AddressType::InternalIp) => Ok(AddressType::InternalIP),
        Ok(pb::AddressType::ExternalIp) => Ok(AddressType::ExternalIP),
        Ok(pb::AddressType::InternalDns) => Ok(AddressType::InternalDNS),
        Ok(pb::AddressType::ExternalDns) => Ok(AddressType::ExternalDNS),
        Ok(pb::AddressType::Unspecified) | Err(_) => Err(invalid(format!("unknown address type {kind}"))),
    }
}

fn address_type_to_pb(kind: AddressType) -> pb::AddressType {
    match kind {
        AddressType::Hostname => pb::AddressType::Hostname,
        AddressType::InternalIP => pb::AddressType::InternalIp,
        AddressType::ExternalIP => pb::AddressType::ExternalIp,
        AddressType::InternalDNS => pb::AddressType::InternalDns,
        AddressType::ExternalDNS => pb::AddressType::ExternalDns,
    }
}

fn addresses(addrs: Vec<pb::NodeAddress>) -> Result<Vec<NodeAddress>> {
    addrs
        .into_iter()
        .map(|a| {
            Ok(NodeAddress {
                kind: address_type(a.r#type)?,
                address: a.address,
            })
        })
        .collect()
}

fn addresses_to_pb(addrs: &[NodeAddress]) -> Vec<pb::NodeAddress> {
    addrs
        .iter()
        .map(|a| pb::NodeAddress {
            r#type: address_type_to_pb(a.kind) as i32,
            address: a.address.clone(),
        })
        .collect()
}

/// Instance metadata for the wire.
pub fn metadata_to_pb(m: &InstanceMetadata) -> pb::InstanceMetadata {
    pb::InstanceMetadata {
        provider_id: m.provider_id.clone(),
        instance_type: m.instance_type.clone(),
        addresses: addresses_to_pb(&m.addresses),
        zone: m.zone.clone(),
        region: m.region.clone(),
        additional_labels: m
            .additional_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// A found instance for the wire.
pub fn found_to_pb(info: &InstanceInfo) -> pb::FoundInstance {
    pb::FoundInstance {
        metadata: Some(metadata_to_pb(&info.metadata)),
        shutdown: info.shutdown,
    }
}

fn port_number(value: i32, what: &str, allow_zero: bool) -> Result<u16> {
    match u16::try_from(value) {
        Ok(0) if allow_zero => Ok(0),
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(format!("{what} {value} is out of range"))),
    }
}

/// A service, validated.
pub fn service(service: Option<pb::Service>) -> Result<ServiceSpec> {
    let svc = service.ok_or_else(|| invalid("service is required"))?;
    if svc.uid.is_empty() {
        return Err(invalid(
            "service.uid is required: load balancer names derive from it",
        ));
    }
    if svc.name.is_empty() || svc.namespace.is_empty() {
        return Err(invalid("service.namespace and service.name are required"));
    }
    let ports = svc
        .ports
        .into_iter()
        .map(|p| {
            let protocol = match pb::Protocol::try_from(p.protocol) {
                Ok(pb::Protocol::Tcp) => Protocol::Tcp,
                Ok(pb::Protocol::Udp) => Protocol::Udp,
                Ok(pb::Protocol::Sctp) => Protocol::Sctp,
                Ok(pb::Protocol::Unspecified) | Err(_) => {
                    return Err(invalid(format!(
                        "port {:?}: unknown protocol {}",
                        p.name, p.protocol
                    )));
                }
            };
            Ok(ServicePort {
                protocol,
                port: port_number(p.port, "port", false)?,
                node_port: port_number(p.node_port, "nodePort", true)?,
                name: p.name,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let external_traffic_policy = match pb::ExternalTrafficPolicy::try_from(svc.external_traffic_policy) {
        Ok(pb::ExternalTrafficPolicy::Local) => ExternalTrafficPolicy::Local,
        Ok(pb::ExternalTrafficPolicy::Cluster | pb::ExternalTrafficPolicy::Unspecified) => {
            ExternalTrafficPolicy::Cluster
        }
        Err(_) => {
            return Err(invalid(format!(
                "unknown externalTrafficPolicy {}",
                svc.external_traffic_policy
            )));
        }
    };
    for range in &svc.load_balancer_source_ranges {
        range
            .parse::<ipnet::IpNet>()
            .map_err(|_| invalid(format!("loadBalancerSourceRanges: {range:?} is not a CIDR")))?;
    }
    if svc.ip_families.len() > 2 {
        return Err(invalid(format!(
            "ipFamilies: {} families, at most 2",
            svc.ip_families.len()
        )));
    }
    let ip_families = svc
        .ip_families
        .iter()
        .map(|f| match pb::IpFamily::try_from(*f) {
            Ok(pb::IpFamily::Ipv4) => Ok(IpFamily::V4),
            Ok(pb::IpFamily::Ipv6) => Ok(IpFamily::V6),
            _ => Err(invalid(format!("ipFamilies: unknown family {f}"))),
        })
        .collect::<Result<Vec<_>>>()?;
    if !svc.load_balancer_ip.is_empty() && svc.load_balancer_ip.parse::<std::net::IpAddr>().is_err() {
        return Err(invalid(format!(
            "loadBalancerIP {:?} is not an IP address",
            svc.load_balancer_ip
        )));
    }
    Ok(ServiceSpec {
        cluster_id: String::new(),
        uid: svc.uid,
        namespace: svc.namespace,
        name: svc.name,
        ports,
        external_traffic_policy,
        health_check_node_port: port_number(svc.health_check_node_port, "healthCheckNodePort", true)?,
        source_ranges: svc.load_balancer_source_ranges,
        requested_ip: svc.load_balancer_ip,
        annotations: svc.annotations.into_iter().collect::<BTreeMap<_, _>>(),
        session_affinity_client_ip: svc.session_affinity_client_ip,
        ip_families,
    })
}

/// Backend nodes, validated.
pub fn lb_nodes(nodes: Vec<pb::LoadBalancerNode>) -> Result<Vec<LoadBalancerNode>> {
    nodes
        .into_iter()
        .map(|n| {
            if n.name.is_empty() {
                return Err(invalid("every load balancer node needs a name"));
            }
            Ok(LoadBalancerNode {
                name: n.name,
                provider_id: n.provider_id,
                addresses: addresses(n.addresses)?,
                labels: n.labels.into_iter().collect(),
            })
        })
        .collect()
}

/// A load balancer status for the wire.
pub fn lb_status_to_pb(status: &LoadBalancerStatus) -> pb::LoadBalancerStatus {
    pb::LoadBalancerStatus {
        ingress: status
            .ingress
            .iter()
            .map(
                |LoadBalancerIngress {
                     ip,
                     hostname,
                     ip_mode,
                 }| pb::LoadBalancerIngress {
                    ip: ip.clone(),
                    hostname: hostname.clone(),
                    ip_mode: ip_mode.clone(),
                },
            )
            .collect(),
    }
}

/// An ensure's answer: the status, the annotations the provider sets with it (only those under
/// its own prefix: a provider's slip never reaches another's keys), and its notices.
pub fn ensured_to_pb(
    status: &LoadBalancerStatus,
    notices: Vec<provider::ServiceNotice>,
    prefix: &str,
) -> pb::EnsureLoadBalancerResponse {
    pb::EnsureLoadBalancerResponse {
        status: Some(lb_status_to_pb(status)),
        service_annotations: status
            .annotations
            .iter()
            .filter(|(key, _)| !prefix.is_empty() && key.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        notices: notices
            .into_iter()
            .map(|n| pb::ServiceNotice {
                reason: n.reason,
                message: n.message,
            })
            .collect(),
    }
}

/// A route, validated. `for_create` also requires a target node.
pub fn route(route: Option<pb::Route>, for_create: bool) -> Result<Route> {
    let r = route.ok_or_else(|| invalid("route is required"))?;
    r.destination_cidr.parse::<ipnet::IpNet>().map_err(|_| {
        invalid(format!(
            "route destination {:?} is not a CIDR",
            r.destination_cidr
        ))
    })?;
    if for_create && r.target_node.is_empty() {
        return Err(invalid("route.target_node is required"));
    }
    Ok(Route {
        name: r.name,
        target_node: r.target_node,
        destination_cidr: r.destination_cidr,
        blackhole: r.blackhole,
        target_node_addresses: addresses(r.target_node_addresses)?,
        target_provider_id: r.target_provider_id,
    })
}

/// A route for the wire.
pub fn route_to_pb(r: &Route) -> pb::Route {
    pb::Route {
        name: r.name.clone(),
        target_node: r.target_node.clone(),
        destination_cidr: r.destination_cidr.clone(),
        blackhole: r.blackhole,
        target_node_addresses: addresses_to_pb(&r.target_node_addresses),
        target_provider_id: r.target_provider_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_id_is_empty_or_fits_a_tag() {
        for (id, ok) in [
            ("", true),
            ("0f3c2b5e-8a1d-4c6e-9b7a-2d4f6e8a0c1b", true),
            (&"a".repeat(64), true),
            (&"a".repeat(65), false),
            ("kube system", false),
            ("a,b", false),
            ("a/b", false),
            ("ü", false),
        ] {
            assert_eq!(cluster_id(id).is_ok(), ok, "{id:?}");
        }
    }

    fn good_service() -> pb::Service {
        pb::Service {
            uid: "u-1".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![pb::ServicePort {
                name: "http".into(),
                protocol: pb::Protocol::Tcp as i32,
                port: 80,
                node_port: 30080,
            }],
            external_traffic_policy: pb::ExternalTrafficPolicy::Local as i32,
            health_check_node_port: 32000,
            load_balancer_source_ranges: vec!["10.0.0.0/8".into()],
            load_balancer_ip: String::new(),
            annotations: [("a".to_string(), "b".to_string())].into(),
            session_affinity_client_ip: false,
            ip_families: vec![pb::IpFamily::Ipv4 as i32],
        }
    }

    #[test]
    fn a_good_service_converts() {
        let svc = service(Some(good_service())).unwrap();
        assert_eq!(svc.ports[0].node_port, 30080);
        assert_eq!(svc.external_traffic_policy, ExternalTrafficPolicy::Local);
        assert_eq!(svc.health_check_node_port, 32000);
        assert_eq!(svc.ip_families, vec![IpFamily::V4]);
    }

    #[test]
    fn bad_services_are_invalid_arguments_naming_the_field() {
        type Mutation = fn(&mut pb::Service);
        let cases: [(&str, Mutation); 11] = [
            ("uid", |s| s.uid.clear()),
            ("name", |s| s.name.clear()),
            ("protocol", |s| s.ports[0].protocol = 99),
            ("protocol", |s| s.ports[0].protocol = 0),
            ("port", |s| s.ports[0].port = 70000),
            ("nodePort", |s| s.ports[0].node_port = -1),
            ("externalTrafficPolicy", |s| s.external_traffic_policy = 7),
            ("loadBalancerSourceRanges", |s| {
                s.load_balancer_source_ranges = vec!["nope".into()]
            }),
            ("loadBalancerIP", |s| s.load_balancer_ip = "300.1.1.1".into()),
            ("ipFamilies", |s| s.ip_families = vec![0]),
            ("ipFamilies", |s| s.ip_families = vec![1, 2, 1]),
        ];
        for (field, mutate) in cases {
            let mut svc = good_service();
            mutate(&mut svc);
            match service(Some(svc)) {
                Err(GatewayError::InvalidArgument(msg)) => assert!(msg.contains(field), "{field}: {msg}"),
                other => panic!("{field}: expected InvalidArgument, got {other:?}"),
            }
        }
        assert!(matches!(service(None), Err(GatewayError::InvalidArgument(_))));
    }

    #[test]
    fn node_refs_need_a_name_or_provider_id() {
        assert!(
            node_ref(Some(pb::NodeRef {
                name: "n".into(),
                provider_id: String::new()
            }))
            .is_ok()
        );
        assert!(
            node_ref(Some(pb::NodeRef {
                name: String::new(),
                provider_id: "sim://z/i".into()
            }))
            .is_ok()
        );
        assert!(node_ref(Some(pb::NodeRef::default())).is_err());
        assert!(node_ref(None).is_err());
    }

    #[test]
    fn routes_need_a_cidr_and_on_create_a_target() {
        let r = |cidr: &str, target: &str| {
            Some(pb::Route {
                destination_cidr: cidr.into(),
                target_node: target.into(),
                ..Default::default()
            })
        };
        assert!(route(r("10.244.1.0/24", "n1"), true).is_ok());
        assert!(route(r("10.244.1.0/24", ""), false).is_ok());
        assert!(route(r("10.244.1.0/24", ""), true).is_err());
        assert!(route(r("10.244.1.0", "n1"), true).is_err());
        let bad_addr = Some(pb::Route {
            destination_cidr: "10.0.0.0/24".into(),
            target_node: "n".into(),
            target_node_addresses: vec![pb::NodeAddress {
                r#type: 42,
                address: "x".into(),
            }],
            ..Default::default()
        });
        assert!(route(bad_addr, true).is_err());
        // The target's provider ID crosses the gateway both ways.
        let with_id = pb::Route {
            destination_cidr: "10.244.1.0/24".into(),
            target_node: "node-a".into(),
            target_provider_id: "aws:///us-east-1a/i-0abc".into(),
            ..Default::default()
        };
        let converted = route(Some(with_id.clone()), true).unwrap();
        assert_eq!(converted.target_provider_id, "aws:///us-east-1a/i-0abc");
        assert_eq!(route_to_pb(&converted), with_id);
    }

    #[test]
    fn every_provider_error_maps_to_its_contract_twin() {
        use std::time::Duration;
        let cases = [
            (
                ProviderError::InstanceNotFound("x".into()),
                GatewayError::InstanceNotFound("x".into()),
            ),
            (
                ProviderError::NotImplemented("x".into()),
                GatewayError::NotImplemented("x".into()),
            ),
            (
                ProviderError::ImplementedElsewhere("x".into()),
                GatewayError::ImplementedElsewhere("x".into()),
            ),
            (
                ProviderError::RetryAfter {
                    after: Duration::from_secs(3),
                    message: "x".into(),
                },
                GatewayError::RetryAfter {
                    after: Duration::from_secs(3),
                    message: "x".into(),
                },
            ),
            (
                ProviderError::Throttled {
                    retry_after: None,
                    message: "x".into(),
                },
                GatewayError::Throttled {
                    retry_after: None,
                    message: "x".into(),
                },
            ),
            (
                ProviderError::QuotaExceeded("x".into()),
                GatewayError::QuotaExceeded("x".into()),
            ),
            (
                ProviderError::InvalidArgument("x".into()),
                GatewayError::InvalidArgument("x".into()),
            ),
            (
                ProviderError::Unavailable("x".into()),
                GatewayError::Unavailable("x".into()),
            ),
            (
                ProviderError::Internal("x".into()),
                GatewayError::Internal("x".into()),
            ),
        ];
        for (from, want) in cases {
            assert_eq!(provider_error(from), want);
        }
    }
}
