//! What a Service asks of a network load balancer: a listener and target group per port, the
//! health check, TLS, attributes and creation-time subnet mappings, as cloud-provider-aws builds
//! them (`nlbPortMapping`, `buildNLBHealthCheckConfiguration`, `buildTargetGroupName`,
//! `reconcileLBAttributes`, the target-group attribute validation). Pure functions only.

use std::collections::BTreeMap;

use provider::{ExternalTrafficPolicy, Protocol, ProviderError, ServiceSpec};

use crate::{
    annotations::{self as a, Notices, PortSet, invalid},
    config::{HealthProbe, LbSettings},
    naming::{TargetGroupKey, target_group_name},
    tags::ClusterTagging,
};

/// Target group attributes the annotation may set (upstream's list).
pub const PRESERVE_CLIENT_IP: &str = "preserve_client_ip.enabled";
pub const PROXY_PROTOCOL_V2: &str = "proxy_protocol_v2.enabled";

/// ELBv2 attribute keys upstream reconciles on the load balancer.
pub const ATTR_CROSS_ZONE: &str = "load_balancing.cross_zone.enabled";
pub const ATTR_ACCESS_LOGS: &str = "access_logs.s3.enabled";
pub const ATTR_ACCESS_LOGS_BUCKET: &str = "access_logs.s3.bucket";
pub const ATTR_ACCESS_LOGS_PREFIX: &str = "access_logs.s3.prefix";

/// Where the health check connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthPort {
    /// The target's own port (`traffic-port`).
    TrafficPort,
    /// A fixed port.
    Port(u16),
}

impl HealthPort {
    /// ELBv2's spelling.
    pub fn as_elb(&self) -> String {
        match self {
            Self::TrafficPort => "traffic-port".into(),
            Self::Port(p) => p.to_string(),
        }
    }

    /// The port checked on a target registered on `node_port`.
    pub fn resolve(&self, node_port: u16) -> u16 {
        match self {
            Self::TrafficPort => node_port,
            Self::Port(p) => *p,
        }
    }
}

/// A target group health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `TCP`, `HTTP` or `HTTPS`.
    pub protocol: String,
    /// Port.
    pub port: HealthPort,
    /// Path (HTTP and HTTPS only).
    pub path: Option<String>,
    /// Interval, seconds.
    pub interval: i32,
    /// Timeout, seconds; only when annotated (upstream parses the annotation but never sends
    /// it, kubernetes/cloud-provider-aws#822).
    pub timeout: Option<i32>,
    /// Healthy threshold.
    pub healthy: i32,
    /// Unhealthy threshold.
    pub unhealthy: i32,
}

/// One listener and its target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Front port.
    pub port: u16,
    /// Listener protocol: `TCP`, `UDP`, `TCP_UDP` or `TLS`.
    pub protocol: String,
    /// Node port the targets are registered on.
    pub node_port: u16,
    /// Target group protocol: `TCP`, `UDP`, `TCP_UDP` or `TLS`.
    pub target_protocol: String,
    /// The TLS listener's certificate.
    pub certificate: Option<String>,
    /// The TLS listener's policy; `None`: whatever AWS chose (its default), never rewritten.
    pub ssl_policy: Option<String>,
    /// Health check of the target group.
    pub health_check: HealthCheck,
    /// Upstream's target group name.
    pub target_group_name: String,
}

impl Mapping {
    /// Protocols clients reach the node port with (`tcp`, `udp`).
    pub fn client_protocols(&self) -> &'static [&'static str] {
        match self.target_protocol.as_str() {
            "UDP" => &["udp"],
            "TCP_UDP" => &["tcp", "udp"],
            _ => &["tcp"],
        }
    }
}

/// A network load balancer as the Service asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSpec {
    /// One per front port (TCP and UDP on one port share a `TCP_UDP` listener).
    pub mappings: Vec<Mapping>,
    /// Load balancer attributes upstream reconciles (cross zone, access logs).
    pub attributes: BTreeMap<String, String>,
    /// Target group attributes from the annotation (only these are compared and set).
    pub target_group_attributes: BTreeMap<String, String>,
    /// Elastic IP allocations, one per subnet, in subnet order (creation only).
    pub eip_allocations: Vec<String>,
    /// Private IPv4 addresses, one per subnet, in subnet order (creation only).
    pub private_ipv4_addresses: Vec<String>,
}

/// Upstream's `buildNLBHealthCheckConfiguration`.
fn health_check(
    settings: &LbSettings,
    service: &ServiceSpec,
    notices: &Notices,
) -> Result<HealthCheck, ProviderError> {
    let an = &service.annotations;
    let local = service.external_traffic_policy == ExternalTrafficPolicy::Local;
    let mut hc = if local {
        HealthCheck {
            protocol: "HTTP".into(),
            port: HealthPort::Port(service.health_check_node_port),
            path: Some("/healthz".into()),
            interval: 10,
            timeout: None,
            healthy: 2,
            unhealthy: 2,
        }
    } else {
        HealthCheck {
            protocol: "TCP".into(),
            port: HealthPort::TrafficPort,
            path: Some("/".into()),
            interval: 30,
            timeout: None,
            healthy: 3,
            unhealthy: 3,
        }
    };
    if let Some(p) = an.get(a::HC_PROTOCOL) {
        hc.protocol = p.to_uppercase();
    }
    match hc.protocol.as_str() {
        "HTTP" | "HTTPS" => {
            if let Some(path) = an.get(a::HC_PATH) {
                hc.path = Some(path.clone());
            }
        }
        "TCP" => {
            // (Under the shared probe the path is overridden, and noted, below.)
            let shared = !local && matches!(settings.health_probe, HealthProbe::Shared { .. });
            if let Some(p) = a::non_empty(an, a::HC_PATH).filter(|_| !shared) {
                notices.value_ignored(
                    a::HC_PATH,
                    p,
                    "is read for HTTP and HTTPS health checks only, and this one is TCP",
                    "the check has no path",
                );
            }
            hc.path = None;
        }
        other => {
            return Err(invalid(format!(
                "{}={other:?}: a network load balancer checks TCP, HTTP or HTTPS",
                a::HC_PROTOCOL
            )));
        }
    }
    if !local && let HealthProbe::Shared { port, path } = &settings.health_probe {
        // Upstream's shared probe mode overrides the annotations for Cluster Services (an
        // unparsable port included: it is replaced before it is checked).
        for key in [a::HC_PROTOCOL, a::HC_PORT, a::HC_PATH] {
            if let Some(v) = an.get(key) {
                notices.value_ignored(
                    key,
                    v,
                    "is overridden by the cloud config's ClusterServiceLoadBalancerHealthProbeMode = Shared for an externalTrafficPolicy: Cluster Service",
                    &format!("HTTP on port {port} at {path} is checked"),
                );
            }
        }
        hc.protocol = "HTTP".into();
        hc.port = HealthPort::Port(*port);
        hc.path = Some(path.clone());
    } else if let Some(p) = an.get(a::HC_PORT) {
        hc.port = parse_port(p)?;
    }
    if let Some(v) = a::int(an, a::HC_INTERVAL, false)? {
        hc.interval = v;
    }
    hc.timeout = a::int(an, a::HC_TIMEOUT, false)?;
    if let Some(v) = a::int(an, a::HC_HEALTHY, false)? {
        hc.healthy = v;
    }
    if let Some(v) = a::int(an, a::HC_UNHEALTHY, false)? {
        hc.unhealthy = v;
    }
    if let HealthPort::Port(0) = hc.port {
        return Err(invalid(
            "externalTrafficPolicy Local without a healthCheckNodePort: the health check has no port",
        ));
    }
    Ok(hc)
}

fn parse_port(value: &str) -> Result<HealthPort, ProviderError> {
    if value == "traffic-port" {
        return Ok(HealthPort::TrafficPort);
    }
    value
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .map(HealthPort::Port)
        .ok_or_else(|| {
            invalid(format!(
                "{}={value:?} is not a port number or traffic-port",
                a::HC_PORT
            ))
        })
}

/// Upstream's `reconcileLBAttributes` wants: cross zone always explicit, access logs always
/// explicit, bucket and prefix only while logging.
fn attributes(service: &ServiceSpec) -> Result<BTreeMap<String, String>, ProviderError> {
    let an = &service.annotations;
    let mut attrs = BTreeMap::new();
    attrs.insert(
        ATTR_CROSS_ZONE.to_owned(),
        a::bool_or(an, a::CROSS_ZONE, false)?.to_string(),
    );
    let logging = a::bool_or(an, a::ACCESS_LOG_ENABLED, false)?;
    attrs.insert(ATTR_ACCESS_LOGS.to_owned(), logging.to_string());
    if logging {
        let get = |k: &str| an.get(k).cloned().unwrap_or_default();
        attrs.insert(ATTR_ACCESS_LOGS_BUCKET.to_owned(), get(a::ACCESS_LOG_BUCKET));
        attrs.insert(ATTR_ACCESS_LOGS_PREFIX.to_owned(), get(a::ACCESS_LOG_PREFIX));
    }
    Ok(attrs)
}

/// Upstream's `validateServiceAnnotationTargetGroupAttributes`, over its map reading (a key
/// set twice keeps its last value, noted).
fn target_group_attributes(
    service: &ServiceSpec,
    udp: bool,
    notices: &Notices,
) -> Result<BTreeMap<String, String>, ProviderError> {
    let Some(value) = service.annotations.get(a::TARGET_GROUP_ATTRIBUTES) else {
        return Ok(BTreeMap::new());
    };
    let err = |m: String| invalid(format!("{}: {m}", a::TARGET_GROUP_ATTRIBUTES));
    let attrs = a::key_value_map_noting(a::TARGET_GROUP_ATTRIBUTES, value, notices);
    for (key, value) in &attrs {
        if value.is_empty() {
            return Err(err(format!("the value of {key:?} is empty")));
        }
        if key != PRESERVE_CLIENT_IP && key != PROXY_PROTOCOL_V2 {
            return Err(err(format!(
                "{key:?} is not supported (only {PRESERVE_CLIENT_IP} and {PROXY_PROTOCOL_V2})"
            )));
        }
        if value != "true" && value != "false" {
            return Err(err(format!("{key}={value:?} must be true or false")));
        }
        if key == PRESERVE_CLIENT_IP && value == "false" && udp {
            return Err(err(
                "client IP preservation can't be disabled for UDP ports".into()
            ));
        }
    }
    Ok(attrs)
}

/// Where a new NLB sits in one subnet: its Elastic IP or private address, if chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetPlacement {
    /// The subnet.
    pub subnet: String,
    /// The Elastic IP allocation of an internet-facing NLB in that subnet.
    pub eip_allocation: Option<String>,
    /// The private address of an internal NLB in that subnet.
    pub private_ipv4: Option<String>,
}

impl NetworkSpec {
    /// Reads the NLB a Service asks for.
    pub fn parse(
        cluster: &ClusterTagging,
        settings: &LbSettings,
        service: &ServiceSpec,
        notices: &Notices,
    ) -> Result<Self, ProviderError> {
        let an = &service.annotations;
        if let Some(p) = service.ports.iter().find(|p| p.protocol == Protocol::Sctp) {
            return Err(invalid(format!(
                "port {:?} is SCTP: a network load balancer carries TCP and UDP",
                p.name
            )));
        }
        // Upstream reads only `ssl` (TLS targets behind a TLS listener) for an NLB.
        if let Some(b) = an.get(a::BACKEND_PROTOCOL)
            && !matches!(b.as_str(), "" | "tcp" | "ssl")
        {
            notices.value_ignored(
                a::BACKEND_PROTOCOL,
                b,
                "is not read for a network load balancer (only ssl is, for TLS targets)",
                "the targets are TCP",
            );
        }
        let health_check = health_check(settings, service, notices)?;
        let certificate = a::non_empty(an, a::SSL_CERT);
        let ssl_ports = a::ssl_ports(an, notices);
        let ssl_policy = a::non_empty(an, a::SSL_NEGOTIATION_POLICY).map(str::to_owned);
        let tls_targets = an.get(a::BACKEND_PROTOCOL).map(String::as_str) == Some("ssl");

        // Front port → (listener protocol, target protocol, node port, certificate).
        let mut by_port: BTreeMap<u16, (String, String, u16, Option<String>)> = BTreeMap::new();
        // Upstream skips ports without a node port (logged).
        for port in service.ports.iter().filter(|p| p.node_port != 0) {
            let udp = port.protocol == Protocol::Udp;
            // NLBs compare the port name as written.
            let tls =
                !udp && certificate.is_some() && PortSet::covers(ssl_ports.as_ref(), port.port, &port.name);
            let (front, target) = match (udp, tls) {
                (true, _) => ("UDP", "UDP"),
                (false, true) if tls_targets => ("TLS", "TLS"),
                (false, true) => ("TLS", "TCP"),
                (false, false) => ("TCP", "TCP"),
            };
            let cert = tls.then(|| certificate.unwrap_or_default().to_owned());
            match by_port.get_mut(&port.port) {
                None => {
                    by_port.insert(port.port, (front.into(), target.into(), port.node_port, cert));
                }
                // TCP and UDP on one port: one TCP_UDP listener, if they share the node port.
                Some(existing)
                    if existing.2 == port.node_port
                        && matches!((existing.0.as_str(), front), ("TCP", "UDP") | ("UDP", "TCP")) =>
                {
                    existing.0 = "TCP_UDP".into();
                    existing.1 = "TCP_UDP".into();
                }
                Some(existing) => {
                    return Err(invalid(format!(
                        "port {} appears twice ({} and {}); an NLB listener per port can carry TCP and UDP together only on one nodePort and without TLS",
                        port.port,
                        existing.0,
                        port.protocol.as_k8s_str()
                    )));
                }
            }
        }
        if by_port.is_empty() {
            return Err(invalid(
                "no port of the Service has a nodePort: instance targets are registered on node ports (allocateLoadBalancerNodePorts must not be false)",
            ));
        }
        let udp = by_port
            .values()
            .any(|(front, ..)| front == "UDP" || front == "TCP_UDP");
        let mappings = by_port
            .into_iter()
            .map(
                |(port, (protocol, target_protocol, node_port, certificate))| Mapping {
                    target_group_name: target_group_name(&TargetGroupKey {
                        cluster_id: &cluster.id,
                        namespace: &service.namespace,
                        name: &service.name,
                        service_port: port,
                        node_port,
                        protocol: &target_protocol,
                        health_check_protocol: &health_check.protocol,
                        health_check_interval: health_check.interval,
                    }),
                    ssl_policy: certificate.as_ref().and(ssl_policy.clone()),
                    port,
                    protocol,
                    node_port,
                    target_protocol,
                    certificate,
                    health_check: health_check.clone(),
                },
            )
            .collect();
        let list = |key: &str| an.get(key).map(|v| a::list(v)).unwrap_or_default();
        Ok(Self {
            mappings,
            attributes: attributes(service)?,
            target_group_attributes: target_group_attributes(service, udp, notices)?,
            eip_allocations: list(a::EIP_ALLOCATIONS),
            private_ipv4_addresses: list(a::PRIVATE_IPV4),
        })
    }

    /// Subnet mappings of a new NLB: each subnet with its Elastic IP or private address by
    /// position; the counts must match.
    pub fn subnet_mappings(&self, subnets: &[String]) -> Result<Vec<SubnetPlacement>, ProviderError> {
        for (key, values) in [
            (a::EIP_ALLOCATIONS, &self.eip_allocations),
            (a::PRIVATE_IPV4, &self.private_ipv4_addresses),
        ] {
            if !values.is_empty() && values.len() != subnets.len() {
                return Err(invalid(format!(
                    "{key}: {} values for {} subnets ({}); give one per subnet, in subnet order",
                    values.len(),
                    subnets.len(),
                    subnets.join(", ")
                )));
            }
        }
        Ok(subnets
            .iter()
            .enumerate()
            .map(|(i, s)| SubnetPlacement {
                subnet: s.clone(),
                eip_allocation: self.eip_allocations.get(i).cloned(),
                private_ipv4: self.private_ipv4_addresses.get(i).cloned(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use provider::ServicePort;

    use super::*;

    fn port(name: &str, protocol: Protocol, port: u16, node_port: u16) -> ServicePort {
        ServicePort {
            name: name.into(),
            protocol,
            port,
            node_port,
        }
    }

    fn service(annotations: &[(&str, &str)]) -> ServiceSpec {
        ServiceSpec {
            uid: "uid".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![port("http", Protocol::Tcp, 80, 30080)],
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    fn parse(s: &ServiceSpec) -> Result<NetworkSpec, ProviderError> {
        NetworkSpec::parse(
            &ClusterTagging::new("cluster-a", false).unwrap(),
            &LbSettings::default(),
            s,
            &Notices::default(),
        )
    }

    fn hc(
        protocol: &str,
        port: HealthPort,
        path: Option<&str>,
        interval: i32,
        healthy: i32,
        unhealthy: i32,
    ) -> HealthCheck {
        HealthCheck {
            protocol: protocol.into(),
            port,
            path: path.map(Into::into),
            interval,
            timeout: None,
            healthy,
            unhealthy,
        }
    }

    #[test]
    fn health_checks_are_upstreams() {
        let local = |annotations: &[(&str, &str)]| {
            let mut s = service(annotations);
            s.external_traffic_policy = ExternalTrafficPolicy::Local;
            s.health_check_node_port = 32213;
            s
        };
        let shared = LbSettings {
            health_probe: HealthProbe::Shared {
                port: 10256,
                path: "/healthz".into(),
            },
            ..LbSettings::default()
        };
        // Upstream's TestCloud_buildNLBHealthCheckConfiguration rows, and ours.
        let rows: Vec<(ServiceSpec, LbSettings, Result<HealthCheck, &str>)> = vec![
            (
                service(&[]),
                LbSettings::default(),
                Ok(hc("TCP", HealthPort::TrafficPort, None, 30, 3, 3)),
            ),
            (
                local(&[]),
                LbSettings::default(),
                Ok(hc("HTTP", HealthPort::Port(32213), Some("/healthz"), 10, 2, 2)),
            ),
            (
                service(&[
                    (a::HC_PROTOCOL, "http"),
                    (a::HC_PATH, "/healthz"),
                    (a::HC_PORT, "8080"),
                    (a::HC_INTERVAL, "20"),
                    (a::HC_HEALTHY, "4"),
                    (a::HC_UNHEALTHY, "4"),
                ]),
                LbSettings::default(),
                Ok(hc("HTTP", HealthPort::Port(8080), Some("/healthz"), 20, 4, 4)),
            ),
            (
                service(&[(a::HC_PROTOCOL, "HTTPS")]),
                LbSettings::default(),
                Ok(hc("HTTPS", HealthPort::TrafficPort, Some("/"), 30, 3, 3)),
            ),
            (
                local(&[(a::HC_PROTOCOL, "TCP"), (a::HC_PATH, "/x")]),
                LbSettings::default(),
                Ok(hc("TCP", HealthPort::Port(32213), None, 10, 2, 2)),
            ),
            (
                local(&[(a::HC_PORT, "traffic-port")]),
                LbSettings::default(),
                Ok(hc("HTTP", HealthPort::TrafficPort, Some("/healthz"), 10, 2, 2)),
            ),
            (
                service(&[(a::HC_PROTOCOL, "TCP"), (a::HC_PORT, "8080")]),
                shared.clone(),
                Ok(hc("HTTP", HealthPort::Port(10256), Some("/healthz"), 30, 3, 3)),
            ),
            (
                local(&[]),
                shared,
                Ok(hc("HTTP", HealthPort::Port(32213), Some("/healthz"), 10, 2, 2)),
            ),
            (
                service(&[(a::HC_PROTOCOL, "UDP")]),
                LbSettings::default(),
                Err(a::HC_PROTOCOL),
            ),
            (
                service(&[(a::HC_PORT, "a123")]),
                LbSettings::default(),
                Err(a::HC_PORT),
            ),
            (
                service(&[(a::HC_INTERVAL, "x")]),
                LbSettings::default(),
                Err(a::HC_INTERVAL),
            ),
            (
                service(&[(a::HC_HEALTHY, "")]),
                LbSettings::default(),
                Err(a::HC_HEALTHY),
            ),
        ];
        for (s, settings, want) in rows {
            let got = NetworkSpec::parse(
                &ClusterTagging::new("c", false).unwrap(),
                &settings,
                &s,
                &Notices::default(),
            )
            .map(|n| n.mappings[0].health_check.clone());
            match want {
                Ok(hc) => assert_eq!(got, Ok(hc), "{:?}", s.annotations),
                Err(named) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(named)),
                    "{named}: {got:?}"
                ),
            }
        }
        let timed = parse(&service(&[(a::HC_TIMEOUT, "6")])).unwrap();
        assert_eq!(timed.mappings[0].health_check.timeout, Some(6));
    }

    #[test]
    fn tls_follows_the_certificate_and_ssl_ports() {
        let mut s = service(&[
            (a::SSL_CERT, "arn:aws:acm:cert"),
            (a::SSL_PORTS, "443,Admin"),
            (a::SSL_NEGOTIATION_POLICY, "ELBSecurityPolicy-TLS13-1-2-2021-06"),
        ]);
        s.ports = vec![
            port("http", Protocol::Tcp, 80, 30080),
            port("https", Protocol::Tcp, 443, 30443),
            port("Admin", Protocol::Tcp, 9000, 30900),
            port("admin2", Protocol::Tcp, 9001, 30901),
            port("dns", Protocol::Udp, 53, 30053),
        ];
        let spec = parse(&s).unwrap();
        // (port, protocol, target protocol, certificate, TLS policy)
        type Row<'a> = (u16, &'a str, &'a str, Option<&'a str>, Option<&'a str>);
        let summary: Vec<Row> = spec
            .mappings
            .iter()
            .map(|m| {
                (
                    m.port,
                    m.protocol.as_str(),
                    m.target_protocol.as_str(),
                    m.certificate.as_deref(),
                    m.ssl_policy.as_deref(),
                )
            })
            .collect();
        let policy = Some("ELBSecurityPolicy-TLS13-1-2-2021-06");
        assert_eq!(
            summary,
            vec![
                (53, "UDP", "UDP", None, None),
                (80, "TCP", "TCP", None, None),
                (443, "TLS", "TCP", Some("arn:aws:acm:cert"), policy),
                (9000, "TLS", "TCP", Some("arn:aws:acm:cert"), policy),
                (9001, "TCP", "TCP", None, None),
            ]
        );
        s.annotations.insert(a::BACKEND_PROTOCOL.into(), "ssl".into());
        assert_eq!(parse(&s).unwrap().mappings[2].target_protocol, "TLS");
    }

    #[test]
    fn tcp_and_udp_on_one_port_share_a_listener() {
        let mut s = service(&[]);
        s.ports = vec![
            port("dns-tcp", Protocol::Tcp, 53, 30053),
            port("dns", Protocol::Udp, 53, 30053),
        ];
        let spec = parse(&s).unwrap();
        assert_eq!(spec.mappings.len(), 1);
        assert_eq!(spec.mappings[0].protocol, "TCP_UDP");
        assert_eq!(spec.mappings[0].client_protocols(), &["tcp", "udp"]);
        s.ports[1].node_port = 30054;
        assert!(parse(&s).unwrap_err().to_string().contains("port 53"));
        s.ports = vec![port("x", Protocol::Sctp, 9, 30009)];
        assert!(parse(&s).unwrap_err().to_string().contains("SCTP"));
    }

    #[test]
    fn target_group_names_are_upstreams_for_the_mapping() {
        let spec = parse(&service(&[])).unwrap();
        let want = target_group_name(&TargetGroupKey {
            cluster_id: "cluster-a",
            namespace: "default",
            name: "web",
            service_port: 80,
            node_port: 30080,
            protocol: "TCP",
            health_check_protocol: "TCP",
            health_check_interval: 30,
        });
        assert_eq!(spec.mappings[0].target_group_name, want);
    }

    #[test]
    fn attributes_are_upstreams() {
        let plain = parse(&service(&[])).unwrap().attributes;
        assert_eq!(
            plain,
            BTreeMap::from([
                (ATTR_ACCESS_LOGS.to_owned(), "false".to_owned()),
                (ATTR_CROSS_ZONE.to_owned(), "false".to_owned())
            ])
        );
        let logging = parse(&service(&[
            (a::ACCESS_LOG_ENABLED, "true"),
            (a::ACCESS_LOG_BUCKET, "logs"),
            (a::CROSS_ZONE, "true"),
        ]))
        .unwrap()
        .attributes;
        assert_eq!(logging[ATTR_ACCESS_LOGS_BUCKET], "logs");
        assert_eq!(logging[ATTR_ACCESS_LOGS_PREFIX], "");
        assert_eq!(logging[ATTR_CROSS_ZONE], "true");
    }

    #[test]
    fn target_group_attributes_are_validated_as_upstream() {
        // Upstream's TestValidateServiceAnnotationTargetGroupAttributes rows.
        let rows: &[(&str, Option<&str>)] = &[
            ("preserve_client_ip.enabled=true", None),
            (
                "preserve_client_ip.enabled=false,proxy_protocol_v2.enabled=true",
                None,
            ),
            ("preserve_client_ip.enabled=", Some("empty")),
            ("preserve_client_ip.enabled=yes", Some("true or false")),
            ("deregistration_delay.timeout_seconds=30", Some("not supported")),
            // Upstream reads a map: the last value wins (noted here).
            (
                "proxy_protocol_v2.enabled=true,proxy_protocol_v2.enabled=false",
                None,
            ),
            ("preserve_client_ip.enabled=true=1", None),
        ];
        for (value, refusal) in rows {
            let got = parse(&service(&[(a::TARGET_GROUP_ATTRIBUTES, value)]));
            match refusal {
                None => assert!(got.is_ok(), "{value}: {got:?}"),
                Some(why) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(why) && m.contains(a::TARGET_GROUP_ATTRIBUTES)),
                    "{value}: {got:?}"
                ),
            }
        }
        let mut udp = service(&[(a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=false")]);
        udp.ports[0].protocol = Protocol::Udp;
        assert!(parse(&udp).unwrap_err().to_string().contains("UDP"));
    }

    #[test]
    fn eips_and_private_addresses_pair_with_subnets_by_position() {
        let spec = parse(&service(&[(a::EIP_ALLOCATIONS, "eipalloc-1, eipalloc-2")])).unwrap();
        let subnets = vec!["subnet-a".to_owned(), "subnet-b".to_owned()];
        assert_eq!(
            spec.subnet_mappings(&subnets).unwrap(),
            vec![
                SubnetPlacement {
                    subnet: "subnet-a".to_owned(),
                    eip_allocation: Some("eipalloc-1".to_owned()),
                    private_ipv4: None,
                },
                SubnetPlacement {
                    subnet: "subnet-b".to_owned(),
                    eip_allocation: Some("eipalloc-2".to_owned()),
                    private_ipv4: None,
                },
            ]
        );
        let err = spec.subnet_mappings(&subnets[..1]).unwrap_err();
        assert!(err.to_string().contains(a::EIP_ALLOCATIONS), "{err}");
        let ips = parse(&service(&[(a::PRIVATE_IPV4, "10.0.1.5")])).unwrap();
        assert!(ips.subnet_mappings(&subnets).is_err());
    }
}
