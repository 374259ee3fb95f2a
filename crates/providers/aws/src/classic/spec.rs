//! What a Service asks of a Classic ELB: listeners, health check, attributes, policies and
//! security groups, as cloud-provider-aws builds them (`buildListener`,
//! `ensureLoadBalancerHealthCheck`, the attribute annotations, `buildELBSecurityGroupList`).
//! Pure functions only.

use std::collections::BTreeSet;

use ipnet::IpNet;
use provider::{ExternalTrafficPolicy, Protocol, ProviderError, ServiceSpec};

use crate::{
    annotations::{self as a, Notices, PortSet, invalid},
    config::{HealthProbe, LbSettings},
    security_groups::rules::{Rule, Source},
};

/// The ELB policy upstream attaches to backend ports for the proxy protocol.
pub const PROXY_PROTOCOL_POLICY: &str = "k8s-proxyprotocol-enabled";

/// The ELB policy name upstream gives an SSL negotiation policy.
pub fn ssl_negotiation_policy_name(reference: &str) -> String {
    format!("k8s-SSLNegotiationPolicy-{reference}")
}

/// One listener (protocols in lower case, as upstream builds them; ELB answers upper case and
/// listeners compare case-insensitively).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listener {
    /// Front port.
    pub lb_port: u16,
    /// `tcp`, `ssl`, `http` or `https`.
    pub protocol: String,
    /// The node port.
    pub instance_port: u16,
    /// `tcp`, `ssl`, `http` or `https`.
    pub instance_protocol: String,
    /// The ACM or IAM certificate of an SSL/HTTPS listener.
    pub certificate: Option<String>,
}

impl Listener {
    /// Upstream's `elbListenersAreEqual`: protocols and certificate compared case-insensitively.
    pub fn same_as(&self, other: &Self) -> bool {
        self.lb_port == other.lb_port
            && self.instance_port == other.instance_port
            && self.protocol.eq_ignore_ascii_case(&other.protocol)
            && self
                .instance_protocol
                .eq_ignore_ascii_case(&other.instance_protocol)
            && match (&self.certificate, &other.certificate) {
                (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
                (x, y) => x == y,
            }
    }

    /// Whether the listener terminates TLS (its SSL negotiation policy applies).
    pub fn is_tls(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("ssl") || self.protocol.eq_ignore_ascii_case("https")
    }
}

/// A Classic ELB health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `PROTOCOL:port[/path]`, protocol upper case.
    pub target: String,
    /// Healthy threshold.
    pub healthy: i32,
    /// Unhealthy threshold.
    pub unhealthy: i32,
    /// Timeout, seconds.
    pub timeout: i32,
    /// Interval, seconds.
    pub interval: i32,
}

impl HealthCheck {
    /// Whether `actual` is this health check (the target's protocol case aside: ELB answers
    /// upper case).
    pub fn same_as(&self, actual: &Self) -> bool {
        self.target.eq_ignore_ascii_case(&actual.target)
            && self.healthy == actual.healthy
            && self.unhealthy == actual.unhealthy
            && self.timeout == actual.timeout
            && self.interval == actual.interval
    }
}

/// The attributes upstream sets on every Classic ELB, with the annotations' overrides. `None`:
/// not set by the annotations, so whatever AWS has stays (upstream compares the whole struct and
/// rewrites it on every sync because AWS answers fields it never set; only what is set here is
/// compared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Access logs on (default off).
    pub access_log_enabled: bool,
    /// Access log emit interval (5 or 60).
    pub access_log_emit_interval: Option<i32>,
    /// Access log bucket.
    pub access_log_bucket: Option<String>,
    /// Access log prefix.
    pub access_log_prefix: Option<String>,
    /// Connection draining on (default off).
    pub draining_enabled: bool,
    /// Connection draining timeout.
    pub draining_timeout: Option<i32>,
    /// Idle timeout (default 60).
    pub idle_timeout: i32,
    /// Cross-zone load balancing (default off).
    pub cross_zone: bool,
}

/// Which security groups the ELB gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityGroups {
    /// Its own `k8s-elb-<name>` group, whose ingress is exactly these rules.
    Managed {
        /// Per Service port, TCP from each source range; ICMP for path MTU from each.
        ingress: BTreeSet<Rule>,
    },
    /// The cloud config's `ElbSecurityGroup`, shared by every Classic ELB and never modified.
    Shared(String),
    /// `aws-load-balancer-security-groups`: the user's groups, never modified or deleted.
    Given(Vec<String>),
}

/// A Classic ELB as the Service asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSpec {
    /// One per Service port with a node port.
    pub listeners: Vec<Listener>,
    /// The health check.
    pub health_check: HealthCheck,
    /// Attributes.
    pub attributes: Attributes,
    /// `proxy-protocol: "*"`: the proxy protocol policy on every backend port.
    pub proxy_protocol: bool,
    /// `ssl-negotiation-policy`: the policy's reference name.
    pub ssl_negotiation_policy: Option<String>,
    /// The primary group.
    pub security_groups: SecurityGroups,
    /// `extra-security-groups`, appended after the primary one, never modified or deleted.
    pub extra_security_groups: Vec<String>,
}

/// Upstream's `backendProtocolMapping`: the listener protocol for a backend protocol under a
/// certificate.
fn tls_protocol_for(backend: &str) -> Option<&'static str> {
    match backend {
        "https" | "http" => Some("https"),
        "ssl" | "tcp" => Some("ssl"),
        _ => None,
    }
}

/// Upstream's `buildListener`.
fn listener(
    port: &provider::ServicePort,
    annotations: &std::collections::BTreeMap<String, String>,
    ssl_ports: Option<&PortSet>,
) -> Result<Listener, ProviderError> {
    let backend = annotations
        .get(a::BACKEND_PROTOCOL)
        .map(String::as_str)
        .unwrap_or("");
    let certificate = a::non_empty(annotations, a::SSL_CERT);
    // Upstream compares the lower-cased port name with the names as written.
    let covered = PortSet::covers(ssl_ports, port.port, &port.name.to_lowercase());
    let (protocol, instance_protocol, certificate) = match certificate {
        Some(cert) if covered => match backend {
            "" => ("ssl".to_owned(), "tcp".to_owned(), Some(cert.to_owned())),
            b => {
                let front = tls_protocol_for(b).ok_or_else(|| {
                    invalid(format!(
                        "{}={b:?}: invalid backend protocol for the certificate {cert} (http, https, ssl or tcp)",
                        a::BACKEND_PROTOCOL
                    ))
                })?;
                (front.to_owned(), b.to_owned(), Some(cert.to_owned()))
            }
        },
        _ if backend == "http" => ("http".to_owned(), "http".to_owned(), None),
        _ => ("tcp".to_owned(), "tcp".to_owned(), None),
    };
    Ok(Listener {
        lb_port: port.port,
        protocol,
        instance_port: port.node_port,
        instance_protocol,
        certificate,
    })
}

/// Upstream's health check of a Classic ELB (`EnsureLoadBalancer` then
/// `ensureLoadBalancerHealthCheck` and `getExpectedHealthCheck`).
fn health_check(
    settings: &LbSettings,
    service: &ServiceSpec,
    first_node_port: u16,
    notices: &Notices,
) -> Result<HealthCheck, ProviderError> {
    let annotations = &service.annotations;
    let local = service.external_traffic_policy == ExternalTrafficPolicy::Local
        && service.health_check_node_port != 0;
    let (mut protocol, mut port, mut path): (String, u16, String) = if local {
        let port = if annotations.get(a::HC_PORT).map(String::as_str) == Some("traffic-port") {
            first_node_port
        } else {
            service.health_check_node_port
        };
        ("HTTP".into(), port, "/healthz".into())
    } else {
        match &settings.health_probe {
            HealthProbe::Shared { port, path } => ("HTTP".into(), *port, path.clone()),
            HealthProbe::ServiceNodePort => {
                let backend = annotations
                    .get(a::BACKEND_PROTOCOL)
                    .map(|b| b.to_lowercase())
                    .unwrap_or_default();
                let protocol = if backend == "https" || backend == "ssl" {
                    "SSL"
                } else {
                    "TCP"
                };
                (protocol.into(), first_node_port, String::new())
            }
        }
    };
    if let Some(p) = annotations.get(a::HC_PROTOCOL) {
        // Upstream puts the annotation in the target as written; ELB keeps targets upper case,
        // so a lower-case value would be rewritten on every sync. Upper case it, and refuse what
        // ELB cannot check.
        protocol = p.to_uppercase();
        if !matches!(protocol.as_str(), "TCP" | "SSL" | "HTTP" | "HTTPS") {
            return Err(invalid(format!(
                "{}={p:?}: a Classic ELB checks TCP, SSL, HTTP or HTTPS",
                a::HC_PROTOCOL
            )));
        }
    }
    if let Some(p) = annotations.get(a::HC_PORT).filter(|p| *p != "traffic-port") {
        port = p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            invalid(format!(
                "{}={p:?} is not a port number or traffic-port",
                a::HC_PORT
            ))
        })?;
    }
    if matches!(protocol.as_str(), "HTTP" | "HTTPS") {
        if path.is_empty() {
            path = "/".into();
        }
        if let Some(p) = a::non_empty(annotations, a::HC_PATH) {
            path = p.to_owned();
        }
    } else {
        if let Some(p) = a::non_empty(annotations, a::HC_PATH) {
            notices.value_ignored(
                a::HC_PATH,
                p,
                &format!("is read for HTTP and HTTPS health checks only, and this one is {protocol}"),
                "the check has no path",
            );
        }
        path.clear();
    }
    let number = |key: &str, default: i32, min: i32| -> Result<i32, ProviderError> {
        let value = a::int(annotations, key, false)?.unwrap_or(default);
        if value < min {
            return Err(invalid(format!("{key}={value}: must be at least {min}")));
        }
        Ok(value)
    };
    Ok(HealthCheck {
        target: format!("{protocol}:{port}{path}"),
        healthy: number(a::HC_HEALTHY, 2, 2)?,
        unhealthy: number(a::HC_UNHEALTHY, 6, 2)?,
        timeout: number(a::HC_TIMEOUT, 5, 2)?,
        interval: number(a::HC_INTERVAL, 10, 5)?,
    })
}

fn attributes(service: &ServiceSpec) -> Result<Attributes, ProviderError> {
    let an = &service.annotations;
    let string = |key: &str| a::non_empty(an, key).map(str::to_owned);
    Ok(Attributes {
        access_log_enabled: a::bool_or(an, a::ACCESS_LOG_ENABLED, false)?,
        access_log_emit_interval: a::int(an, a::ACCESS_LOG_EMIT_INTERVAL, true)?,
        access_log_bucket: string(a::ACCESS_LOG_BUCKET),
        access_log_prefix: string(a::ACCESS_LOG_PREFIX),
        draining_enabled: a::bool_or(an, a::DRAINING_ENABLED, false)?,
        draining_timeout: a::int(an, a::DRAINING_TIMEOUT, true)?,
        idle_timeout: a::int(an, a::IDLE_TIMEOUT, true)?.unwrap_or(60),
        cross_zone: a::bool_or(an, a::CROSS_ZONE, false)?,
    })
}

/// The managed group's exact ingress (upstream's `EnsureLoadBalancer` with `setupSg`): each
/// Service port over TCP from each source range, and path-MTU ICMP from each.
fn managed_ingress(service: &ServiceSpec, source_ranges: &[IpNet]) -> BTreeSet<Rule> {
    let mut rules = BTreeSet::new();
    for range in source_ranges {
        for port in &service.ports {
            rules.insert(Rule::port(
                &port.protocol.as_k8s_str().to_lowercase(),
                port.port,
                Source::cidr(range),
            ));
        }
        rules.insert(Rule::path_mtu(range));
    }
    rules
}

impl ClassicSpec {
    /// Reads the Classic ELB a Service asks for.
    pub fn parse(
        settings: &LbSettings,
        service: &ServiceSpec,
        source_ranges: &[IpNet],
        notices: &Notices,
    ) -> Result<Self, ProviderError> {
        let annotations = &service.annotations;
        if let Some(p) = service.ports.iter().find(|p| p.protocol != Protocol::Tcp) {
            return Err(invalid(format!(
                "port {:?} is {}: a Classic ELB carries TCP only (set aws-load-balancer-type: nlb for UDP)",
                p.name,
                p.protocol.as_k8s_str()
            )));
        }
        let ssl_ports = a::ssl_ports(annotations, notices);
        let listeners = service
            .ports
            .iter()
            // Upstream skips ports without a node port (with a log line).
            .filter(|p| p.node_port != 0)
            .map(|p| listener(p, annotations, ssl_ports.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = listeners.first() else {
            return Err(invalid(
                "no port of the Service has a nodePort: a Classic ELB forwards to node ports (allocateLoadBalancerNodePorts must not be false)",
            ));
        };
        // Upstream reads the backend protocol for the listeners with a certificate (where an
        // unknown one is refused, above) and for `http`; anything else leaves plain TCP.
        if let Some(b) = annotations.get(a::BACKEND_PROTOCOL)
            && !b.is_empty()
            && tls_protocol_for(b).is_none()
        {
            notices.value_ignored(
                a::BACKEND_PROTOCOL,
                b,
                "is not http, https, ssl or tcp (lower case), and no listener has a certificate to use it with",
                "the listeners are plain TCP",
            );
        }
        let health_check = health_check(settings, service, first.instance_port, notices)?;
        let proxy_protocol = match annotations.get(a::PROXY_PROTOCOL).map(String::as_str) {
            None | Some("") => false,
            Some("*") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "{}={other:?}: the only value supported is \"*\"",
                    a::PROXY_PROTOCOL
                )));
            }
        };
        let given = annotations
            .get(a::SECURITY_GROUPS)
            .map(|v| a::list(v))
            .unwrap_or_default();
        let security_groups = if !given.is_empty() {
            SecurityGroups::Given(given)
        } else if let Some(shared) = &settings.elb_security_group {
            SecurityGroups::Shared(shared.clone())
        } else {
            SecurityGroups::Managed {
                ingress: managed_ingress(service, source_ranges),
            }
        };
        Ok(Self {
            listeners,
            health_check,
            attributes: attributes(service)?,
            proxy_protocol,
            ssl_negotiation_policy: a::non_empty(annotations, a::SSL_NEGOTIATION_POLICY).map(str::to_owned),
            security_groups,
            extra_security_groups: annotations
                .get(a::EXTRA_SECURITY_GROUPS)
                .map(|v| a::list(v))
                .unwrap_or_default(),
        })
    }

    /// The groups in the ELB's order: the primary one (`managed_id` for a managed group), then
    /// the extra ones.
    pub fn group_ids(&self, managed_id: Option<&str>) -> Vec<String> {
        let mut ids: Vec<String> = match &self.security_groups {
            SecurityGroups::Managed { .. } => managed_id.map(str::to_owned).into_iter().collect(),
            SecurityGroups::Shared(id) => vec![id.clone()],
            SecurityGroups::Given(ids) => ids.clone(),
        };
        for extra in &self.extra_security_groups {
            if !ids.contains(extra) {
                ids.push(extra.clone());
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use provider::ServicePort;

    use super::*;

    fn port(name: &str, port: u16, node_port: u16) -> ServicePort {
        ServicePort {
            name: name.into(),
            protocol: Protocol::Tcp,
            port,
            node_port,
        }
    }

    fn service(annotations: &[(&str, &str)]) -> ServiceSpec {
        ServiceSpec {
            uid: "uid".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![port("http", 80, 30080)],
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    fn world() -> Vec<IpNet> {
        vec!["0.0.0.0/0".parse().unwrap()]
    }

    fn spec(s: &ServiceSpec) -> Result<ClassicSpec, ProviderError> {
        ClassicSpec::parse(&LbSettings::default(), s, &world(), &Notices::default())
    }

    /// The reading and the reasons and keys of its notices.
    fn noting(s: &ServiceSpec) -> (Result<ClassicSpec, ProviderError>, Vec<(String, String)>) {
        let notices = Notices::default();
        let got = ClassicSpec::parse(&LbSettings::default(), s, &world(), &notices);
        let keys = notices
            .into_vec()
            .into_iter()
            .map(|n| {
                let key = n
                    .message
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .trim_end_matches(':')
                    .to_owned();
                (n.reason, key)
            })
            .collect();
        (got, keys)
    }

    fn l(
        lb_port: u16,
        protocol: &str,
        instance_port: u16,
        instance_protocol: &str,
        cert: Option<&str>,
    ) -> Listener {
        Listener {
            lb_port,
            protocol: protocol.into(),
            instance_port,
            instance_protocol: instance_protocol.into(),
            certificate: cert.map(Into::into),
        }
    }

    #[test]
    fn listeners_are_upstreams() {
        // Upstream's TestBuildListener rows: (port name, port, backend-protocol, cert, ssl-ports,
        // expected listener or error).
        type Row = (
            &'static str,
            u16,
            &'static str,
            &'static str,
            Option<&'static str>,
            Option<(&'static str, &'static str, bool)>,
        );
        let rows: &[Row] = &[
            ("", 80, "", "", None, Some(("tcp", "tcp", false))),
            ("", 80, "http", "", None, Some(("http", "http", false))),
            ("", 80, "https", "", None, Some(("tcp", "tcp", false))),
            ("", 443, "", "cert", None, Some(("ssl", "tcp", true))),
            ("", 443, "https", "cert", None, Some(("https", "https", true))),
            ("", 443, "http", "cert", None, Some(("https", "http", true))),
            ("", 443, "ssl", "cert", None, Some(("ssl", "ssl", true))),
            ("", 443, "tcp", "cert", None, Some(("ssl", "tcp", true))),
            (
                "",
                443,
                "https",
                "cert",
                Some("*"),
                Some(("https", "https", true)),
            ),
            (
                "",
                443,
                "https",
                "cert",
                Some("443"),
                Some(("https", "https", true)),
            ),
            ("", 80, "https", "cert", Some("443"), Some(("tcp", "tcp", false))),
            ("", 80, "http", "cert", Some("443"), Some(("http", "http", false))),
            (
                "https",
                8443,
                "https",
                "cert",
                Some("https"),
                Some(("https", "https", true)),
            ),
            (
                "HTTPS",
                8443,
                "https",
                "cert",
                Some("https"),
                Some(("https", "https", true)),
            ),
            (
                "web",
                8443,
                "https",
                "cert",
                Some("https,443"),
                Some(("tcp", "tcp", false)),
            ),
        ];
        for (name, lb_port, backend, cert, ssl_ports, want) in rows {
            let mut annotations = BTreeMap::new();
            if !backend.is_empty() {
                annotations.insert(a::BACKEND_PROTOCOL.to_owned(), (*backend).to_owned());
            }
            if !cert.is_empty() {
                annotations.insert(a::SSL_CERT.to_owned(), (*cert).to_owned());
            }
            let ports = PortSet::parse(*ssl_ports);
            let got = listener(&port(name, *lb_port, 30000), &annotations, ports.as_ref());
            let (front, back, tls) = want.unwrap();
            assert_eq!(
                got.unwrap(),
                l(*lb_port, front, 30000, back, tls.then_some("cert")),
                "{name} {lb_port} {backend} {cert} {ssl_ports:?}"
            );
        }
    }

    #[test]
    fn an_unknown_backend_protocol_is_refused_only_where_a_certificate_needs_it() {
        // Upstream's buildListener: refused for a listener with a certificate; elsewhere the
        // listener stays plain TCP (noted).
        let (got, notices) = noting(&service(&[(a::BACKEND_PROTOCOL, "grpc")]));
        assert_eq!(got.unwrap().listeners, vec![l(80, "tcp", 30080, "tcp", None)]);
        assert_eq!(
            notices,
            [(a::VALUE_IGNORED.to_owned(), a::BACKEND_PROTOCOL.to_owned())]
        );
        let (got, _) = noting(&service(&[(a::BACKEND_PROTOCOL, "HTTP"), (a::SSL_CERT, "arn:c")]));
        assert!(got.unwrap_err().to_string().contains(a::BACKEND_PROTOCOL));
        let (got, notices) = noting(&service(&[
            (a::BACKEND_PROTOCOL, "grpc"),
            (a::SSL_CERT, "arn:c"),
            (a::SSL_PORTS, "443"),
        ]));
        assert_eq!(got.unwrap().listeners, vec![l(80, "tcp", 30080, "tcp", None)]);
        assert_eq!(notices.len(), 1, "{notices:?}");
        let (got, notices) = noting(&service(&[(a::BACKEND_PROTOCOL, "http")]));
        assert_eq!(got.unwrap().listeners, vec![l(80, "http", 30080, "http", None)]);
        assert_eq!(notices, []);
    }

    #[test]
    fn only_tcp_ports_with_node_ports() {
        let mut s = service(&[]);
        s.ports.push(ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: 53,
            node_port: 30053,
        });
        assert!(spec(&s).unwrap_err().to_string().contains("TCP only"));
        let mut s = service(&[]);
        s.ports.push(port("pending", 81, 0));
        assert_eq!(spec(&s).unwrap().listeners.len(), 1);
        s.ports.retain(|p| p.node_port == 0);
        assert!(spec(&s).unwrap_err().to_string().contains("nodePort"));
    }

    fn hc(target: &str, healthy: i32, unhealthy: i32, timeout: i32, interval: i32) -> HealthCheck {
        HealthCheck {
            target: target.into(),
            healthy,
            unhealthy,
            timeout,
            interval,
        }
    }

    #[test]
    fn health_checks_are_upstreams() {
        let local = |annotations: &[(&str, &str)]| {
            let mut s = service(annotations);
            s.external_traffic_policy = ExternalTrafficPolicy::Local;
            s.health_check_node_port = 31999;
            s
        };
        let shared = LbSettings {
            health_probe: HealthProbe::Shared {
                port: 10256,
                path: "/healthz".into(),
            },
            ..LbSettings::default()
        };
        type Row = (ServiceSpec, LbSettings, Result<HealthCheck, &'static str>);
        let rows: Vec<Row> = vec![
            (
                service(&[]),
                LbSettings::default(),
                Ok(hc("TCP:30080", 2, 6, 5, 10)),
            ),
            (
                service(&[(a::BACKEND_PROTOCOL, "https")]),
                LbSettings::default(),
                Ok(hc("SSL:30080", 2, 6, 5, 10)),
            ),
            (
                service(&[(a::BACKEND_PROTOCOL, "ssl")]),
                LbSettings::default(),
                Ok(hc("SSL:30080", 2, 6, 5, 10)),
            ),
            (
                local(&[]),
                LbSettings::default(),
                Ok(hc("HTTP:31999/healthz", 2, 6, 5, 10)),
            ),
            (
                local(&[(a::HC_PORT, "traffic-port")]),
                LbSettings::default(),
                Ok(hc("HTTP:30080/healthz", 2, 6, 5, 10)),
            ),
            (
                service(&[]),
                shared.clone(),
                Ok(hc("HTTP:10256/healthz", 2, 6, 5, 10)),
            ),
            (local(&[]), shared, Ok(hc("HTTP:31999/healthz", 2, 6, 5, 10))),
            (
                service(&[
                    (a::HC_PROTOCOL, "http"),
                    (a::HC_PATH, "/ready"),
                    (a::HC_PORT, "8080"),
                ]),
                LbSettings::default(),
                Ok(hc("HTTP:8080/ready", 2, 6, 5, 10)),
            ),
            (
                service(&[(a::HC_PROTOCOL, "HTTPS")]),
                LbSettings::default(),
                Ok(hc("HTTPS:30080/", 2, 6, 5, 10)),
            ),
            (
                local(&[(a::HC_PROTOCOL, "TCP"), (a::HC_PATH, "/x")]),
                LbSettings::default(),
                Ok(hc("TCP:31999", 2, 6, 5, 10)),
            ),
            (
                service(&[
                    (a::HC_HEALTHY, "7"),
                    (a::HC_UNHEALTHY, "3"),
                    (a::HC_TIMEOUT, "6"),
                    (a::HC_INTERVAL, "30"),
                ]),
                LbSettings::default(),
                Ok(hc("TCP:30080", 7, 3, 6, 30)),
            ),
            (
                service(&[(a::HC_HEALTHY, "1")]),
                LbSettings::default(),
                Err(a::HC_HEALTHY),
            ),
            (
                service(&[(a::HC_UNHEALTHY, "1")]),
                LbSettings::default(),
                Err(a::HC_UNHEALTHY),
            ),
            (
                service(&[(a::HC_TIMEOUT, "1")]),
                LbSettings::default(),
                Err(a::HC_TIMEOUT),
            ),
            (
                service(&[(a::HC_INTERVAL, "4")]),
                LbSettings::default(),
                Err(a::HC_INTERVAL),
            ),
            (
                service(&[(a::HC_INTERVAL, "")]),
                LbSettings::default(),
                Err(a::HC_INTERVAL),
            ),
            (
                service(&[(a::HC_PORT, "http")]),
                LbSettings::default(),
                Err(a::HC_PORT),
            ),
            (
                service(&[(a::HC_PROTOCOL, "UDP")]),
                LbSettings::default(),
                Err(a::HC_PROTOCOL),
            ),
        ];
        for (s, settings, want) in rows {
            let got =
                ClassicSpec::parse(&settings, &s, &world(), &Notices::default()).map(|c| c.health_check);
            match want {
                Ok(hc) => assert_eq!(got, Ok(hc), "{:?}", s.annotations),
                Err(named) => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(named)),
                    "{named}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn attributes_default_as_upstream_and_take_the_annotations() {
        let defaults = spec(&service(&[])).unwrap().attributes;
        assert_eq!(
            defaults,
            Attributes {
                access_log_enabled: false,
                access_log_emit_interval: None,
                access_log_bucket: None,
                access_log_prefix: None,
                draining_enabled: false,
                draining_timeout: None,
                idle_timeout: 60,
                cross_zone: false,
            }
        );
        let set = spec(&service(&[
            (a::ACCESS_LOG_ENABLED, "true"),
            (a::ACCESS_LOG_EMIT_INTERVAL, "5"),
            (a::ACCESS_LOG_BUCKET, "logs"),
            (a::ACCESS_LOG_PREFIX, "web"),
            (a::DRAINING_ENABLED, "1"),
            (a::DRAINING_TIMEOUT, "30"),
            (a::IDLE_TIMEOUT, "300"),
            (a::CROSS_ZONE, "TRUE"),
        ]))
        .unwrap()
        .attributes;
        assert_eq!(
            set,
            Attributes {
                access_log_enabled: true,
                access_log_emit_interval: Some(5),
                access_log_bucket: Some("logs".into()),
                access_log_prefix: Some("web".into()),
                draining_enabled: true,
                draining_timeout: Some(30),
                idle_timeout: 300,
                cross_zone: true,
            }
        );
        for key in [
            a::ACCESS_LOG_ENABLED,
            a::ACCESS_LOG_EMIT_INTERVAL,
            a::DRAINING_ENABLED,
            a::DRAINING_TIMEOUT,
            a::IDLE_TIMEOUT,
            a::CROSS_ZONE,
        ] {
            let err = spec(&service(&[(key, "x1")])).unwrap_err();
            assert!(err.to_string().contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn policies_and_security_groups() {
        let s = spec(&service(&[
            (a::PROXY_PROTOCOL, "*"),
            (a::SSL_NEGOTIATION_POLICY, "ELBSecurityPolicy-TLS-1-2-2017-01"),
        ]))
        .unwrap();
        assert!(s.proxy_protocol);
        assert_eq!(
            s.ssl_negotiation_policy.as_deref(),
            Some("ELBSecurityPolicy-TLS-1-2-2017-01")
        );
        assert!(
            spec(&service(&[(a::PROXY_PROTOCOL, "true")]))
                .unwrap_err()
                .to_string()
                .contains(a::PROXY_PROTOCOL)
        );

        let managed = spec(&service(&[(a::EXTRA_SECURITY_GROUPS, "sg-x, sg-y")])).unwrap();
        let SecurityGroups::Managed { ingress } = &managed.security_groups else {
            panic!("{managed:?}")
        };
        let open: IpNet = "0.0.0.0/0".parse().unwrap();
        assert_eq!(
            ingress,
            &BTreeSet::from([Rule::port("tcp", 80, Source::cidr(&open)), Rule::path_mtu(&open)])
        );
        assert_eq!(managed.group_ids(Some("sg-own")), vec!["sg-own", "sg-x", "sg-y"]);

        let given = spec(&service(&[
            (a::SECURITY_GROUPS, "sg-a,sg-b"),
            (a::EXTRA_SECURITY_GROUPS, "sg-b,sg-c"),
        ]))
        .unwrap();
        assert_eq!(given.group_ids(None), vec!["sg-a", "sg-b", "sg-c"]);
        let shared = ClassicSpec::parse(
            &LbSettings {
                elb_security_group: Some("sg-shared".into()),
                ..LbSettings::default()
            },
            &service(&[]),
            &world(),
            &Notices::default(),
        )
        .unwrap();
        assert_eq!(shared.security_groups, SecurityGroups::Shared("sg-shared".into()));
    }
}
