//! What a service's network load balancer should look like, and what to change to get there.
//! Pure functions only; [`crate::load_balancers`] does the API calls around them.

use std::collections::{BTreeMap, BTreeSet};

use provider::{ExternalTrafficPolicy, ProviderError, ServiceSpec};

use crate::naming::{
    CLUSTER_TAG_PREFIX, LbProtocol, SERVICE_NAME_TAG, SERVICE_UID_TAG, load_balancer_name, resource_tags,
    target_group_name, validate_cluster_name,
};

/// `nlb` (the only type this provider builds); `external` and `nlb-ip` belong to the AWS Load
/// Balancer Controller.
pub const ANNOTATION_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
/// `true`: an internal (VPC-only) load balancer.
pub const ANNOTATION_INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internal";
/// Comma-separated subnet IDs of a new load balancer.
pub const ANNOTATION_SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";
/// Comma-separated `key=value` tags added to the load balancer and its target groups.
pub const ANNOTATION_ADDITIONAL_TAGS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";

/// kube-proxy's health port (`--healthz-bind-address`), checked for `externalTrafficPolicy: Cluster`.
pub const KUBE_PROXY_HEALTH_PORT: u16 = 10256;
/// Path of both health checks.
pub const HEALTH_CHECK_PATH: &str = "/healthz";

/// An HTTP health check of a target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Node port checked.
    pub port: u16,
    /// Path checked.
    pub path: String,
}

/// One listener and its target group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortMapping {
    /// Front port.
    pub port: u16,
    /// Protocol of the listener and the target group.
    pub protocol: LbProtocol,
    /// Node port the targets are registered on.
    pub node_port: u16,
    /// Deterministic target group name.
    pub target_group: String,
}

/// The wanted load balancer of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbPlan {
    /// Load balancer name.
    pub name: String,
    /// Internal (VPC-only) instead of internet-facing.
    pub internal: bool,
    /// Subnets asked for by annotation; empty: from settings or discovery.
    pub subnets: Vec<String>,
    /// Listeners, by front port.
    pub mappings: Vec<PortMapping>,
    /// Health check of every target group.
    pub health_check: HealthCheck,
    /// Tags of the load balancer and its target groups.
    pub tags: BTreeMap<String, String>,
}

impl LbPlan {
    /// The ELBv2 scheme.
    pub fn scheme(&self) -> &'static str {
        if self.internal {
            "internal"
        } else {
            "internet-facing"
        }
    }
}

fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::InvalidArgument(msg.into())
}

/// Go's `strconv.ParseBool`, which Kubernetes annotations follow.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `key=value,key2=value2` (a value may be empty).
pub fn parse_tags(value: &str) -> Result<BTreeMap<String, String>, ProviderError> {
    let mut tags = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, val) = pair.split_once('=').unwrap_or((pair, ""));
        let key = key.trim();
        if key.is_empty() || key.len() > 128 || val.len() > 256 {
            return Err(invalid(format!("{ANNOTATION_ADDITIONAL_TAGS}: bad tag {pair:?}")));
        }
        if key.starts_with(CLUSTER_TAG_PREFIX) || key == SERVICE_NAME_TAG || key == SERVICE_UID_TAG {
            return Err(invalid(format!(
                "{ANNOTATION_ADDITIONAL_TAGS}: the tag {key:?} is reserved for ownership"
            )));
        }
        tags.insert(key.to_owned(), val.trim().to_owned());
    }
    Ok(tags)
}

/// Whether another controller owns the service's load balancer (as cloud-provider-aws's
/// `isLBExternal`).
pub fn implemented_elsewhere(service: &ServiceSpec) -> Option<String> {
    match service.annotations.get(ANNOTATION_TYPE).map(String::as_str) {
        Some(t @ ("external" | "nlb-ip")) => Some(format!(
            "{ANNOTATION_TYPE}={t}: the AWS Load Balancer Controller handles this service"
        )),
        _ => None,
    }
}

/// The health check cloud-provider-aws gives an NLB: the service's `healthCheckNodePort` at
/// `/healthz` for `externalTrafficPolicy: Local`, otherwise kube-proxy's `10256/healthz`.
pub fn health_check(service: &ServiceSpec) -> HealthCheck {
    let port = match service.external_traffic_policy {
        ExternalTrafficPolicy::Local if service.health_check_node_port != 0 => service.health_check_node_port,
        _ => KUBE_PROXY_HEALTH_PORT,
    };
    HealthCheck {
        port,
        path: HEALTH_CHECK_PATH.to_owned(),
    }
}

/// The listeners of a service: one per front port; TCP and UDP on the same port become one
/// `TCP_UDP` listener (they must then share the node port). Lenient: ports that cannot be served
/// are left out, so that deletion finds what an earlier ensure may have created.
fn mappings_lenient(lb_name: &str, service: &ServiceSpec) -> Vec<PortMapping> {
    let mut by_port: BTreeMap<u16, Vec<(LbProtocol, u16)>> = BTreeMap::new();
    for p in &service.ports {
        if let Some(protocol) = LbProtocol::from_service(p.protocol) {
            by_port.entry(p.port).or_default().push((protocol, p.node_port));
        }
    }
    by_port
        .into_iter()
        .filter_map(|(port, entries)| {
            let (protocol, node_port) = match entries.as_slice() {
                [(protocol, node_port)] => (*protocol, *node_port),
                [(a, na), (b, nb)] if a != b && na == nb => (LbProtocol::TcpUdp, *na),
                _ => return None,
            };
            Some(PortMapping {
                port,
                protocol,
                node_port,
                target_group: target_group_name(lb_name, port, protocol, node_port),
            })
        })
        .collect()
}

/// Target group names the service's current ports give (for cleanup).
pub fn target_group_names(lb_name: &str, service: &ServiceSpec) -> Vec<String> {
    mappings_lenient(lb_name, service)
        .into_iter()
        .map(|m| m.target_group)
        .collect()
}

/// Validates `service` and says what its load balancer must be.
///
/// # Errors
/// `ImplementedElsewhere` for services of the AWS Load Balancer Controller; `InvalidArgument` for
/// what an NLB cannot do (SCTP, `loadBalancerIP`, source ranges, ports without node ports) and for
/// malformed annotations.
pub fn plan_load_balancer(cluster: &str, service: &ServiceSpec) -> Result<LbPlan, ProviderError> {
    if let Some(why) = implemented_elsewhere(service) {
        return Err(ProviderError::ImplementedElsewhere(why));
    }
    validate_cluster_name(cluster)?;
    let annotations = &service.annotations;
    match annotations.get(ANNOTATION_TYPE).map(String::as_str) {
        None | Some("nlb") => {}
        Some(other) => {
            return Err(invalid(format!(
                "{ANNOTATION_TYPE}={other:?}: the aws provider builds network load balancers only \
                 (\"nlb\"; \"external\" and \"nlb-ip\" are left to the AWS Load Balancer Controller)"
            )));
        }
    }
    let internal = match annotations.get(ANNOTATION_INTERNAL).map(String::as_str) {
        None | Some("") => false,
        // The legacy value cloud-provider-aws still honours.
        Some("0.0.0.0/0") => true,
        Some(v) => parse_bool(v).ok_or_else(|| {
            invalid(format!(
                "{ANNOTATION_INTERNAL}={v:?} is not a boolean (true or false)"
            ))
        })?,
    };
    if !service.requested_ip.is_empty() {
        return Err(invalid(format!(
            "spec.loadBalancerIP {:?}: AWS network load balancers get their addresses from AWS \
             and cannot honour a requested IP",
            service.requested_ip
        )));
    }
    if service
        .source_ranges
        .iter()
        .any(|r| r != "0.0.0.0/0" && r != "::/0")
    {
        return Err(invalid(
            "spec.loadBalancerSourceRanges: the aws provider does not restrict client ranges \
             (network load balancers without security groups); restrict them in the nodes' \
             security group",
        ));
    }
    let subnets: Vec<String> = annotations
        .get(ANNOTATION_SUBNETS)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(bad) = subnets.iter().find(|s| !s.starts_with("subnet-")) {
        return Err(invalid(format!(
            "{ANNOTATION_SUBNETS}: {bad:?} is not a subnet ID"
        )));
    }
    let extra_tags = match annotations.get(ANNOTATION_ADDITIONAL_TAGS) {
        Some(v) => parse_tags(v)?,
        None => BTreeMap::new(),
    };
    if service.ports.is_empty() {
        return Err(invalid("the service has no ports"));
    }
    let mut seen = BTreeSet::new();
    let mut by_port: BTreeMap<u16, Vec<(LbProtocol, u16)>> = BTreeMap::new();
    for p in &service.ports {
        let protocol = LbProtocol::from_service(p.protocol).ok_or_else(|| {
            invalid(format!(
                "port {:?}: network load balancers carry TCP and UDP, not {}",
                p.name,
                p.protocol.as_k8s_str()
            ))
        })?;
        if p.node_port == 0 {
            return Err(invalid(format!(
                "port {:?} has no nodePort: instance targets need one (allocateLoadBalancerNodePorts must not be false)",
                p.name
            )));
        }
        if !seen.insert((p.port, protocol)) {
            return Err(invalid(format!(
                "port {} {} appears twice",
                p.port,
                protocol.as_str()
            )));
        }
        by_port.entry(p.port).or_default().push((protocol, p.node_port));
    }
    for (port, entries) in &by_port {
        if let [(_, a), (_, b)] = entries.as_slice()
            && a != b
        {
            return Err(invalid(format!(
                "port {port} is both TCP and UDP with different nodePorts ({a}, {b}); a TCP_UDP \
                 listener needs one nodePort"
            )));
        }
    }
    let name = load_balancer_name(&service.uid)?;
    let mappings = mappings_lenient(&name, service);
    Ok(LbPlan {
        tags: resource_tags(
            cluster,
            &service.namespace,
            &service.name,
            &service.uid,
            &extra_tags,
        ),
        health_check: health_check(service),
        name,
        internal,
        subnets,
        mappings,
    })
}

/// A subnet as subnet discovery sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetView {
    /// Subnet ID.
    pub id: String,
    /// Availability zone.
    pub zone: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// Role tag of subnets for internet-facing load balancers.
pub const ROLE_ELB_TAG: &str = "kubernetes.io/role/elb";
/// Role tag of subnets for internal load balancers.
pub const ROLE_INTERNAL_ELB_TAG: &str = "kubernetes.io/role/internal-elb";

/// One subnet per zone for a new load balancer, among the cluster's subnets: those with the role
/// tag of the scheme first, then the smallest ID (so the choice is stable).
pub fn choose_subnets(subnets: &[SubnetView], internal: bool) -> Vec<String> {
    let role = if internal {
        ROLE_INTERNAL_ELB_TAG
    } else {
        ROLE_ELB_TAG
    };
    let mut best: BTreeMap<&str, &SubnetView> = BTreeMap::new();
    for s in subnets {
        let rank = |s: &SubnetView| (!s.tags.contains_key(role), s.id.clone());
        match best.get(s.zone.as_str()) {
            Some(current) if rank(current) <= rank(s) => {}
            _ => {
                best.insert(&s.zone, s);
            }
        }
    }
    best.values().map(|s| s.id.clone()).collect()
}

/// A listener as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerView {
    /// Listener ARN.
    pub arn: String,
    /// Front port.
    pub port: u16,
    /// Protocol (ELBv2 spelling).
    pub protocol: String,
    /// Target group of the default forward action.
    pub target_group_arn: Option<String>,
}

/// A change to the listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerChange {
    /// Create a listener forwarding to a target group.
    Create {
        /// Front port.
        port: u16,
        /// Protocol.
        protocol: LbProtocol,
        /// Target group ARN.
        target_group_arn: String,
    },
    /// Point an existing listener elsewhere or change its protocol.
    Modify {
        /// Listener ARN.
        arn: String,
        /// Protocol.
        protocol: LbProtocol,
        /// Target group ARN.
        target_group_arn: String,
    },
    /// Delete a listener no port wants.
    Delete {
        /// Listener ARN.
        arn: String,
    },
}

/// The changes that turn `actual` listeners into `wanted` ones (front port, protocol, target
/// group ARN); listeners already right are left alone. Deletions come last.
pub fn diff_listeners(wanted: &[(u16, LbProtocol, String)], actual: &[ListenerView]) -> Vec<ListenerChange> {
    let mut changes = Vec::new();
    let by_port: BTreeMap<u16, &ListenerView> = actual.iter().map(|l| (l.port, l)).collect();
    for (port, protocol, tg) in wanted {
        match by_port.get(port) {
            None => changes.push(ListenerChange::Create {
                port: *port,
                protocol: *protocol,
                target_group_arn: tg.clone(),
            }),
            Some(l) if l.protocol != protocol.as_str() || l.target_group_arn.as_deref() != Some(tg) => {
                changes.push(ListenerChange::Modify {
                    arn: l.arn.clone(),
                    protocol: *protocol,
                    target_group_arn: tg.clone(),
                })
            }
            Some(_) => {}
        }
    }
    let wanted_ports: BTreeSet<u16> = wanted.iter().map(|(p, _, _)| *p).collect();
    for l in actual {
        if !wanted_ports.contains(&l.port) {
            changes.push(ListenerChange::Delete { arn: l.arn.clone() });
        }
    }
    changes
}

/// A target group as it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetGroupView {
    /// ARN.
    pub arn: String,
    /// Name.
    pub name: String,
    /// Health check protocol (ELBv2 spelling).
    pub health_check_protocol: String,
    /// Health check port (`traffic-port` or a number).
    pub health_check_port: String,
    /// Health check path.
    pub health_check_path: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// Whether a target group's health check differs from the wanted one.
pub fn health_check_differs(tg: &TargetGroupView, wanted: &HealthCheck) -> bool {
    tg.health_check_protocol != "HTTP"
        || tg.health_check_port != wanted.port.to_string()
        || tg.health_check_path != wanted.path
}

/// A registered target: an instance on a port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    /// Instance ID.
    pub id: String,
    /// Port.
    pub port: u16,
}

/// Targets to register and to deregister to turn `actual` into `wanted`.
pub fn diff_targets(wanted: &BTreeSet<Target>, actual: &BTreeSet<Target>) -> (Vec<Target>, Vec<Target>) {
    (
        wanted.difference(actual).cloned().collect(),
        actual.difference(wanted).cloned().collect(),
    )
}

#[cfg(test)]
mod tests {
    use provider::{Protocol, ServicePort};

    use super::*;

    const UID: &str = "8a7b3c2d-1111-2222-3333-444455556666";

    fn port(name: &str, protocol: Protocol, port: u16, node_port: u16) -> ServicePort {
        ServicePort {
            name: name.into(),
            protocol,
            port,
            node_port,
        }
    }

    fn svc() -> ServiceSpec {
        ServiceSpec {
            uid: UID.into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![
                port("http", Protocol::Tcp, 80, 30080),
                port("dns", Protocol::Udp, 53, 30053),
            ],
            ..Default::default()
        }
    }

    fn with_annotation(key: &str, value: &str) -> ServiceSpec {
        let mut s = svc();
        s.annotations.insert(key.into(), value.into());
        s
    }

    #[test]
    fn a_plain_service_gets_an_internet_facing_nlb_with_a_listener_per_port() {
        let plan = plan_load_balancer("blue", &svc()).unwrap();
        assert_eq!(plan.name, "a8a7b3c2d11112222333344445555666");
        assert!(!plan.internal);
        assert_eq!(plan.scheme(), "internet-facing");
        let ports: Vec<(u16, LbProtocol, u16)> = plan
            .mappings
            .iter()
            .map(|m| (m.port, m.protocol, m.node_port))
            .collect();
        assert_eq!(
            ports,
            vec![(53, LbProtocol::Udp, 30053), (80, LbProtocol::Tcp, 30080)]
        );
        assert_eq!(
            plan.mappings[1].target_group,
            target_group_name(&plan.name, 80, LbProtocol::Tcp, 30080)
        );
        assert_eq!(
            plan.health_check,
            HealthCheck {
                port: 10256,
                path: "/healthz".into()
            }
        );
        assert_eq!(plan.tags["kubernetes.io/cluster/blue"], "owned");
        assert_eq!(plan.tags["kubernetes.io/service-uid"], UID);
        assert_eq!(plan.tags["kubernetes.io/service-name"], "default/web");
    }

    #[test]
    fn local_traffic_policy_checks_the_health_check_node_port() {
        let mut s = svc();
        s.external_traffic_policy = ExternalTrafficPolicy::Local;
        s.health_check_node_port = 31999;
        assert_eq!(
            health_check(&s),
            HealthCheck {
                port: 31999,
                path: "/healthz".into()
            }
        );
        s.health_check_node_port = 0;
        assert_eq!(health_check(&s).port, 10256);
        s.external_traffic_policy = ExternalTrafficPolicy::Cluster;
        s.health_check_node_port = 31999;
        assert_eq!(health_check(&s).port, 10256);
    }

    #[test]
    fn internal_annotation_is_a_boolean() {
        let cases = [
            ("true", Some(true)),
            ("True", Some(true)),
            ("1", Some(true)),
            ("0.0.0.0/0", Some(true)),
            ("false", Some(false)),
            ("", Some(false)),
            ("maybe", None),
            ("yes", None),
        ];
        for (value, want) in cases {
            let got = plan_load_balancer("blue", &with_annotation(ANNOTATION_INTERNAL, value));
            match want {
                Some(internal) => assert_eq!(got.unwrap().internal, internal, "{value}"),
                None => assert!(
                    matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(ANNOTATION_INTERNAL)),
                    "{value}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn load_balancer_controller_services_are_implemented_elsewhere() {
        for t in ["external", "nlb-ip"] {
            let got = plan_load_balancer("blue", &with_annotation(ANNOTATION_TYPE, t));
            assert!(
                matches!(got, Err(ProviderError::ImplementedElsewhere(_))),
                "{t}: {got:?}"
            );
        }
        assert!(plan_load_balancer("blue", &with_annotation(ANNOTATION_TYPE, "nlb")).is_ok());
        assert!(matches!(
            plan_load_balancer("blue", &with_annotation(ANNOTATION_TYPE, "classic")),
            Err(ProviderError::InvalidArgument(_))
        ));
    }

    #[test]
    fn what_an_nlb_cannot_do_is_an_invalid_argument() {
        type Mutation = fn(&mut ServiceSpec);
        let cases: [(&str, Mutation); 9] = [
            ("loadBalancerIP", |s| s.requested_ip = "10.0.0.9".into()),
            ("loadBalancerSourceRanges", |s| {
                s.source_ranges = vec!["10.0.0.0/8".into()]
            }),
            ("SCTP", |s| s.ports.push(port("sctp", Protocol::Sctp, 9, 30009))),
            ("nodePort", |s| s.ports[0].node_port = 0),
            ("twice", |s| s.ports.push(port("again", Protocol::Tcp, 80, 30081))),
            ("different nodePorts", |s| {
                s.ports.push(port("u", Protocol::Udp, 80, 30081))
            }),
            ("no ports", |s| s.ports.clear()),
            ("subnet ID", |s| {
                s.annotations
                    .insert(ANNOTATION_SUBNETS.into(), "subnet-1,public-a".into());
            }),
            ("reserved", |s| {
                s.annotations.insert(
                    ANNOTATION_ADDITIONAL_TAGS.into(),
                    "kubernetes.io/cluster/x=owned".into(),
                );
            }),
        ];
        for (what, mutate) in cases {
            let mut s = svc();
            mutate(&mut s);
            let got = plan_load_balancer("blue", &s);
            assert!(
                matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(what)),
                "{what}: {got:?}"
            );
        }
        let mut open = svc();
        open.source_ranges = vec!["0.0.0.0/0".into(), "::/0".into()];
        assert!(plan_load_balancer("blue", &open).is_ok());
        assert!(plan_load_balancer("", &svc()).is_err());
    }

    #[test]
    fn tcp_and_udp_on_one_port_share_a_tcp_udp_listener() {
        let mut s = svc();
        s.ports = vec![
            port("dns-tcp", Protocol::Tcp, 53, 30053),
            port("dns", Protocol::Udp, 53, 30053),
        ];
        let plan = plan_load_balancer("blue", &s).unwrap();
        assert_eq!(plan.mappings.len(), 1);
        assert_eq!(plan.mappings[0].protocol, LbProtocol::TcpUdp);
        assert_eq!(plan.mappings[0].node_port, 30053);
    }

    #[test]
    fn annotations_give_subnets_and_tags() {
        let mut s = with_annotation(ANNOTATION_SUBNETS, "subnet-a, subnet-b");
        s.annotations.insert(
            ANNOTATION_ADDITIONAL_TAGS.into(),
            "team=web, cost-center=42,empty=".into(),
        );
        let plan = plan_load_balancer("blue", &s).unwrap();
        assert_eq!(plan.subnets, vec!["subnet-a", "subnet-b"]);
        assert_eq!(plan.tags["team"], "web");
        assert_eq!(plan.tags["cost-center"], "42");
        assert_eq!(plan.tags["empty"], "");
        assert!(parse_tags("=x").is_err());
    }

    #[test]
    fn cleanup_names_cover_the_current_ports() {
        let names = target_group_names("a1", &svc());
        assert_eq!(names.len(), 2);
        assert!(names.contains(&target_group_name("a1", 80, LbProtocol::Tcp, 30080)));
    }

    fn subnet(id: &str, zone: &str, tags: &[&str]) -> SubnetView {
        SubnetView {
            id: id.into(),
            zone: zone.into(),
            tags: tags.iter().map(|t| ((*t).to_owned(), "1".to_owned())).collect(),
        }
    }

    #[test]
    fn one_subnet_per_zone_preferring_the_role_tag() {
        let subnets = [
            subnet("subnet-c", "z1", &[]),
            subnet("subnet-b", "z1", &[ROLE_ELB_TAG]),
            subnet("subnet-a", "z1", &[ROLE_INTERNAL_ELB_TAG]),
            subnet("subnet-e", "z2", &[]),
            subnet("subnet-d", "z2", &[]),
        ];
        assert_eq!(choose_subnets(&subnets, false), vec!["subnet-b", "subnet-d"]);
        assert_eq!(choose_subnets(&subnets, true), vec!["subnet-a", "subnet-d"]);
        assert!(choose_subnets(&[], false).is_empty());
    }

    fn listener(arn: &str, port: u16, protocol: &str, tg: &str) -> ListenerView {
        ListenerView {
            arn: arn.into(),
            port,
            protocol: protocol.into(),
            target_group_arn: Some(tg.into()),
        }
    }

    #[test]
    fn listener_diff_changes_only_what_differs() {
        let wanted = vec![
            (80, LbProtocol::Tcp, "tg-80".to_owned()),
            (53, LbProtocol::Udp, "tg-53".to_owned()),
            (443, LbProtocol::Tcp, "tg-443".to_owned()),
        ];
        let actual = vec![
            listener("l-80", 80, "TCP", "tg-80"),
            listener("l-53", 53, "TCP", "tg-53-old"),
            listener("l-8080", 8080, "TCP", "tg-8080"),
        ];
        assert_eq!(
            diff_listeners(&wanted, &actual),
            vec![
                ListenerChange::Modify {
                    arn: "l-53".into(),
                    protocol: LbProtocol::Udp,
                    target_group_arn: "tg-53".into()
                },
                ListenerChange::Create {
                    port: 443,
                    protocol: LbProtocol::Tcp,
                    target_group_arn: "tg-443".into()
                },
                ListenerChange::Delete { arn: "l-8080".into() },
            ]
        );
        let same = vec![listener("l-80", 80, "TCP", "tg-80")];
        assert!(diff_listeners(&wanted[..1], &same).is_empty());
        assert_eq!(
            diff_listeners(&[], &same),
            vec![ListenerChange::Delete { arn: "l-80".into() }]
        );
    }

    #[test]
    fn target_diff_registers_and_deregisters_the_difference() {
        let t = |id: &str, port: u16| Target { id: id.into(), port };
        let wanted: BTreeSet<Target> = [t("i-1", 30080), t("i-2", 30080)].into();
        let actual: BTreeSet<Target> = [t("i-2", 30080), t("i-3", 30080), t("i-1", 30081)].into();
        let (register, deregister) = diff_targets(&wanted, &actual);
        assert_eq!(register, vec![t("i-1", 30080)]);
        assert_eq!(deregister, vec![t("i-1", 30081), t("i-3", 30080)]);
        let (r, d) = diff_targets(&wanted, &wanted);
        assert!(r.is_empty() && d.is_empty());
    }

    #[test]
    fn health_check_diff() {
        let hc = HealthCheck {
            port: 10256,
            path: "/healthz".into(),
        };
        let tg = TargetGroupView {
            health_check_protocol: "HTTP".into(),
            health_check_port: "10256".into(),
            health_check_path: "/healthz".into(),
            ..Default::default()
        };
        assert!(!health_check_differs(&tg, &hc));
        assert!(health_check_differs(
            &TargetGroupView {
                health_check_port: "traffic-port".into(),
                ..tg.clone()
            },
            &hc
        ));
        assert!(health_check_differs(
            &TargetGroupView {
                health_check_protocol: "TCP".into(),
                ..tg.clone()
            },
            &hc
        ));
        assert!(health_check_differs(
            &TargetGroupView {
                health_check_path: "/".into(),
                ..tg
            },
            &hc
        ));
    }
}
