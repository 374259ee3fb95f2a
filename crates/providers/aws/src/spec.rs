//! What a Service asks of AWS: the load balancer type, scheme, client ranges, subnets, tags and
//! backends, read from the Service and its annotations as cloud-provider-aws reads them, then
//! the type-specific part ([`crate::classic::spec`], [`crate::nlb::spec`]). Pure functions only.
//! What upstream reads other than written is noted (see [`crate::annotations`]).

use std::collections::BTreeMap;

use ipnet::IpNet;
use provider::{LoadBalancerNode, ProviderError, ServiceNotice, ServiceSpec};

use crate::{
    annotations::{self as a, Notices, invalid},
    classic::spec::ClassicSpec,
    config::LbSettings,
    naming::load_balancer_name,
    nlb::spec::NetworkSpec,
    tags::{ClusterTagging, LEGACY_CLUSTER_TAG, SERVICE_NAME_TAG, Tags, check_extra_tags},
};

/// How the subnets of a new load balancer are chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubnetChoice {
    /// Upstream's discovery in the cluster's VPC.
    Discover,
    /// `aws-load-balancer-subnets`: subnet IDs and/or Name tags, in the annotation's order.
    Named(Vec<String>),
}

/// The type-specific part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A Classic ELB (no type annotation, or any value but `nlb`).
    Classic(ClassicSpec),
    /// A network load balancer (`aws-load-balancer-type: nlb`).
    Network(NetworkSpec),
}

/// The load balancer a Service asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbSpec {
    /// Upstream's name: `a` + the UID without dashes, 32 characters.
    pub name: String,
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub service_name: String,
    /// `Scheme=internal`; fixed at creation, as upstream.
    pub internal: bool,
    /// Client ranges: `spec.loadBalancerSourceRanges`, else the legacy annotation, else
    /// `0.0.0.0/0`.
    pub source_ranges: Vec<IpNet>,
    /// Subnets of a new load balancer.
    pub subnets: SubnetChoice,
    /// The user's `additional-resource-tags`.
    pub extra_tags: Tags,
    /// Tags of the load balancer, its target groups and listeners.
    pub tags: Tags,
    /// `target-node-labels`: a node must carry every one (an empty value matches any value).
    pub target_node_labels: BTreeMap<String, String>,
    /// Classic or network, and what that type needs.
    pub kind: Kind,
}

impl LbSpec {
    /// Whether this is an NLB.
    pub fn is_network(&self) -> bool {
        matches!(self.kind, Kind::Network(_))
    }

    /// The ELB scheme.
    pub fn scheme(&self) -> &'static str {
        if self.internal {
            "internal"
        } else {
            "internet-facing"
        }
    }

    /// The source ranges are upstream's default (open to the IPv4 world).
    pub fn open_to_the_world(&self) -> bool {
        self.source_ranges == [IpNet::V4(ipnet::Ipv4Net::default())]
    }
}

/// Whether another controller handles the Service's load balancer (upstream's `isLBExternal`).
pub fn implemented_elsewhere(service: &ServiceSpec) -> Option<String> {
    match service.annotations.get(a::TYPE).map(String::as_str) {
        Some(t @ ("external" | "nlb-ip")) => Some(format!(
            "{}={t}: the AWS Load Balancer Controller handles this Service",
            a::TYPE
        )),
        _ => None,
    }
}

/// Upstream's `isNLB`: exactly `nlb` (any other value, or none, is a Classic ELB).
pub fn wants_network(service: &ServiceSpec) -> bool {
    service.annotations.get(a::TYPE).map(String::as_str) == Some("nlb")
}

/// Upstream's reading of `aws-load-balancer-internal`: internal unless empty or exactly `false`
/// (so `False`, `0` and `0.0.0.0/0` are all internal).
pub fn wants_internal(annotations: &BTreeMap<String, String>) -> bool {
    !matches!(
        annotations.get(a::INTERNAL).map(String::as_str),
        None | Some("") | Some("false")
    )
}

/// Notes an `internal` value that reads as false but is not exactly `false`: upstream makes
/// such a load balancer internal.
fn note_internal(annotations: &BTreeMap<String, String>, notices: &Notices) {
    if let Some(v) = annotations.get(a::INTERNAL)
        && v != "false"
        && a::parse_bool(v) == Some(false)
    {
        notices.value_ignored(
            a::INTERNAL,
            v,
            "is not exactly \"false\"",
            "the load balancer is internal (any value but empty or exactly false means internal)",
        );
    }
}

/// Notes a type value upstream reads as a Classic ELB though it likely asks for another type
/// (`NLB`, `alb`): only exactly `nlb` gives an NLB.
fn note_type(annotations: &BTreeMap<String, String>, notices: &Notices) {
    if let Some(v) = annotations.get(a::TYPE)
        && !matches!(v.as_str(), "" | "nlb" | "external" | "nlb-ip")
        && !["clb", "elb", "classic"]
            .iter()
            .any(|c| v.eq_ignore_ascii_case(c))
    {
        notices.value_ignored(
            a::TYPE,
            v,
            "is not nlb (exactly, lower case), external or nlb-ip",
            "a Classic ELB is built",
        );
    }
}

/// The user's `additional-resource-tags` as upstream applies them: the tags it sets itself (the
/// cluster's ownership tag, the Service name, the legacy cluster tag when in use) overwrite the
/// user's, so those are dropped here with a notice.
fn extra_tags(cluster: &ClusterTagging, annotations: &BTreeMap<String, String>, notices: &Notices) -> Tags {
    let Some(value) = annotations.get(a::ADDITIONAL_TAGS) else {
        return Tags::new();
    };
    let mut tags = a::key_value_map_noting(a::ADDITIONAL_TAGS, value, notices);
    let own = cluster.tag_key();
    tags.retain(|k, v| {
        let set_by_provider =
            *k == own || k == SERVICE_NAME_TAG || (cluster.legacy && k == LEGACY_CLUSTER_TAG);
        if set_by_provider {
            notices.value_ignored(
                a::ADDITIONAL_TAGS,
                &format!("{k}={v}"),
                "is a tag the provider sets",
                "the provider's value is used",
            );
        }
        !set_by_provider
    });
    tags
}

/// Upstream's `GetLoadBalancerSourceRanges`.
fn source_ranges(service: &ServiceSpec) -> Result<Vec<IpNet>, ProviderError> {
    let (what, raw): (&str, Vec<String>) = if !service.source_ranges.is_empty() {
        (
            "spec.loadBalancerSourceRanges",
            service
                .source_ranges
                .iter()
                .map(|r| r.trim().to_owned())
                .collect(),
        )
    } else {
        (
            a::LEGACY_SOURCE_RANGES,
            service
                .annotations
                .get(a::LEGACY_SOURCE_RANGES)
                .map(|v| a::list(v))
                .unwrap_or_default(),
        )
    };
    if raw.is_empty() {
        return Ok(vec![IpNet::V4(ipnet::Ipv4Net::default())]);
    }
    let mut ranges = Vec::new();
    for r in raw {
        let net: IpNet = r
            .parse()
            .map_err(|_| invalid(format!("{what}: {r:?} is not a CIDR")))?;
        let net = net.trunc();
        if !ranges.contains(&net) {
            ranges.push(net);
        }
    }
    Ok(ranges)
}

/// Reads the Service as cloud-provider-aws does.
///
/// # Errors
/// `ImplementedElsewhere` for the AWS Load Balancer Controller's Services; `InvalidArgument`
/// naming the field or annotation for everything upstream refuses.
pub fn parse(
    cluster: &ClusterTagging,
    settings: &LbSettings,
    service: &ServiceSpec,
) -> Result<LbSpec, ProviderError> {
    parse_noting(cluster, settings, service).0
}

/// [`parse`], and what it read other than written (see [`crate::annotations`]), also when the
/// Service is refused (what was noted before the refusal). Nothing for the AWS Load Balancer
/// Controller's Services.
pub fn parse_noting(
    cluster: &ClusterTagging,
    settings: &LbSettings,
    service: &ServiceSpec,
) -> (Result<LbSpec, ProviderError>, Vec<ServiceNotice>) {
    let notices = Notices::default();
    let spec = read(cluster, settings, service, &notices);
    (spec, notices.into_vec())
}

fn read(
    cluster: &ClusterTagging,
    settings: &LbSettings,
    service: &ServiceSpec,
    notices: &Notices,
) -> Result<LbSpec, ProviderError> {
    if let Some(why) = implemented_elsewhere(service) {
        return Err(ProviderError::ImplementedElsewhere(why));
    }
    let annotations = &service.annotations;
    let network = wants_network(service);
    let internal = wants_internal(annotations);
    note_type(annotations, notices);
    note_internal(annotations, notices);
    a::check_known(annotations, network, internal, notices)?;
    if service.session_affinity_client_ip {
        return Err(invalid(
            "spec.sessionAffinity ClientIP: AWS load balancers built by this provider do not keep client affinity (as cloud-provider-aws)",
        ));
    }
    if service.ports.is_empty() {
        return Err(invalid("the Service has no ports"));
    }
    if !service.requested_ip.is_empty() {
        return Err(invalid(format!(
            "spec.loadBalancerIP {:?} cannot be specified for an AWS load balancer (AWS assigns its addresses)",
            service.requested_ip
        )));
    }
    let source_ranges = source_ranges(service)?;
    let name = load_balancer_name(&service.uid)?;
    let subnets = match annotations.get(a::SUBNETS) {
        None => SubnetChoice::Discover,
        Some(v) => {
            let named = a::list(v);
            if named.is_empty() {
                return Err(invalid(format!("{}: names no subnet", a::SUBNETS)));
            }
            SubnetChoice::Named(named)
        }
    };
    let extra_tags = extra_tags(cluster, annotations, notices);
    check_extra_tags(&extra_tags, a::ADDITIONAL_TAGS)?;
    let target_node_labels = annotations
        .get(a::TARGET_NODE_LABELS)
        .map(|v| a::key_value_map_noting(a::TARGET_NODE_LABELS, v, notices))
        .unwrap_or_default();
    let kind = if network {
        Kind::Network(NetworkSpec::parse(cluster, settings, service, notices)?)
    } else {
        Kind::Classic(ClassicSpec::parse(settings, service, &source_ranges, notices)?)
    };
    Ok(LbSpec {
        tags: cluster.load_balancer_tags(&service.namespace, &service.name, &extra_tags),
        name,
        namespace: service.namespace.clone(),
        service_name: service.name.clone(),
        internal,
        source_ranges,
        subnets,
        extra_tags,
        target_node_labels,
        kind,
    })
}

/// Upstream's `filterTargetNodes`: with target-node labels, only nodes carrying all of them (an
/// empty value matches any value; a node without labels never matches).
pub fn target_nodes<'a>(
    nodes: &'a [LoadBalancerNode],
    labels: &BTreeMap<String, String>,
) -> Vec<&'a LoadBalancerNode> {
    nodes
        .iter()
        .filter(|n| {
            labels.is_empty()
                || (!n.labels.is_empty()
                    && labels
                        .iter()
                        .all(|(k, v)| n.labels.get(k).is_some_and(|have| v.is_empty() || have == v)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use provider::{Protocol, ServicePort};

    use super::*;

    pub(crate) fn service(annotations: &[(&str, &str)]) -> ServiceSpec {
        ServiceSpec {
            uid: "8a7b3c2d-1111-2222-3333-444455556666".into(),
            namespace: "default".into(),
            name: "web".into(),
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            }],
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    fn blue() -> ClusterTagging {
        ClusterTagging::new("blue", false).unwrap()
    }

    fn parsed(s: &ServiceSpec) -> Result<LbSpec, ProviderError> {
        parse(&blue(), &LbSettings::default(), s)
    }

    #[test]
    fn the_type_annotation_picks_as_upstream() {
        let rows: &[(Option<&str>, &str)] = &[
            (None, "classic"),
            (Some("nlb"), "network"),
            (Some("NLB"), "classic"),
            (Some("clb"), "classic"),
            (Some("elb"), "classic"),
            (Some("alb"), "classic"),
            (Some(""), "classic"),
            (Some("external"), "elsewhere"),
            (Some("nlb-ip"), "elsewhere"),
        ];
        for (value, want) in rows {
            let s = match value {
                Some(v) => service(&[(a::TYPE, v)]),
                None => service(&[]),
            };
            let got = match parsed(&s) {
                Ok(spec) if spec.is_network() => "network",
                Ok(_) => "classic",
                Err(ProviderError::ImplementedElsewhere(_)) => "elsewhere",
                Err(e) => panic!("{value:?}: {e}"),
            };
            assert_eq!(got, *want, "{value:?}");
        }
    }

    #[test]
    fn internal_is_any_non_empty_value_but_exactly_false() {
        let rows = [
            ("true", true),
            ("True", true),
            ("False", true),
            ("0", true),
            ("1", true),
            ("yes", true),
            ("0.0.0.0/0", true),
            ("false", false),
            ("", false),
        ];
        for (value, want) in rows {
            assert_eq!(
                parsed(&service(&[(a::INTERNAL, value)])).unwrap().internal,
                want,
                "{value:?}"
            );
        }
        assert!(!parsed(&service(&[])).unwrap().internal);
    }

    #[test]
    fn source_ranges_come_from_the_spec_then_the_legacy_annotation() {
        let mut s = service(&[(a::LEGACY_SOURCE_RANGES, "10.0.0.0/8, 192.168.1.7/24")]);
        let ranges = |s: &ServiceSpec| -> Vec<String> {
            parsed(s)
                .unwrap()
                .source_ranges
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(ranges(&s), vec!["10.0.0.0/8", "192.168.1.0/24"]);
        s.source_ranges = vec!["1.2.3.4/32".into(), " 2001:db8::/32 ".into()];
        assert_eq!(ranges(&s), vec!["1.2.3.4/32", "2001:db8::/32"]);
        assert_eq!(ranges(&service(&[])), vec!["0.0.0.0/0"]);
        assert!(parsed(&service(&[])).unwrap().open_to_the_world());
        let bad = parsed(&service(&[(a::LEGACY_SOURCE_RANGES, "10.0.0.0/33")])).unwrap_err();
        assert!(bad.to_string().contains(a::LEGACY_SOURCE_RANGES), "{bad}");
        let mut bad = service(&[]);
        bad.source_ranges = vec!["nope".into()];
        assert!(
            parsed(&bad)
                .unwrap_err()
                .to_string()
                .contains("spec.loadBalancerSourceRanges")
        );
    }

    #[test]
    fn what_upstream_refuses_is_an_invalid_argument_naming_it() {
        type Mutation = fn(&mut ServiceSpec);
        let rows: &[(&str, Mutation)] = &[
            ("sessionAffinity", |s| s.session_affinity_client_ip = true),
            ("no ports", |s| s.ports.clear()),
            ("loadBalancerIP", |s| s.requested_ip = "1.2.3.4".into()),
            (a::SUBNETS, |s| {
                s.annotations.insert(a::SUBNETS.into(), " , ".into());
            }),
            (a::ADDITIONAL_TAGS, |s| {
                s.annotations
                    .insert(a::ADDITIONAL_TAGS.into(), "kubernetes.io/cluster/x=owned".into());
            }),
            ("UID", |s| s.uid = "has spaces".into()),
        ];
        for (what, mutate) in rows {
            let mut s = service(&[]);
            mutate(&mut s);
            let got = parsed(&s);
            assert!(
                matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(what)),
                "{what}: {got:?}"
            );
        }
    }

    #[test]
    fn subnets_and_tags_and_target_labels() {
        let spec = parsed(&service(&[
            (a::SUBNETS, "subnet-b, public-a"),
            (a::ADDITIONAL_TAGS, "team=web,cost=42,flag"),
            (a::TARGET_NODE_LABELS, "pool=edge,gpu"),
        ]))
        .unwrap();
        assert_eq!(
            spec.subnets,
            SubnetChoice::Named(vec!["subnet-b".into(), "public-a".into()])
        );
        assert_eq!(spec.extra_tags["flag"], "");
        assert_eq!(spec.tags["team"], "web");
        assert_eq!(spec.tags["kubernetes.io/cluster/blue"], "owned");
        assert_eq!(spec.tags["kubernetes.io/service-name"], "default/web");
        assert_eq!(spec.target_node_labels["gpu"], "");
        assert_eq!(parsed(&service(&[])).unwrap().subnets, SubnetChoice::Discover);
    }

    #[test]
    fn target_nodes_follow_upstreams_filter() {
        let node = |labels: &[(&str, &str)]| LoadBalancerNode {
            name: "n".into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        };
        // Upstream's TestFilterTargetNodes rows: (node labels, annotation, targeted).
        type Labels = &'static [(&'static str, &'static str)];
        let rows: &[(Labels, Option<&str>, bool)] = &[
            (&[("k1", "v1")], None, true),
            (&[("k1", "v1"), ("k2", "v2")], Some("k1=v1,k2=v2"), true),
            (&[("k1", "v1"), ("k2", "v2")], Some("k1,k2"), true),
            (&[("k1", "v1"), ("k2", "v2")], Some("k1=v1,k2=v2,k3=v3"), false),
            (&[("k1", "v1"), ("k2", "v2")], Some("k3"), false),
            (&[("k1", "v1")], Some("k1=v2"), false),
            (&[], Some("k1=v1"), false),
            (&[], None, true),
        ];
        for (labels, annotation, targeted) in rows {
            let wanted = annotation.map(a::key_value_map).unwrap_or_default();
            let nodes = [node(labels)];
            assert_eq!(
                target_nodes(&nodes, &wanted).len() == 1,
                *targeted,
                "{labels:?} {annotation:?}"
            );
        }
    }

    /// One case: a Service with these annotations (on an NLB when `type: nlb` is among them),
    /// what it reads as (a view of the reading) or the refusal's text, and the notices (reason,
    /// key).
    struct Case {
        /// Upstream's test and row, or `ours` for a case of our own.
        from: &'static str,
        annotations: &'static [(&'static str, &'static str)],
        view: fn(&LbSpec) -> String,
        want: Result<&'static str, &'static str>,
        notices: &'static [(&'static str, &'static str)],
        /// The reading before cloud-provider-aws's fallbacks were followed (issue 38): what
        /// the provider answered then, where it differed.
        before: Option<&'static str>,
    }

    fn kind(s: &LbSpec) -> String {
        if s.is_network() { "network" } else { "classic" }.to_owned()
    }

    fn scheme(s: &LbSpec) -> String {
        format!("{} {}", kind(s), s.scheme())
    }

    fn classic(s: &LbSpec) -> &ClassicSpec {
        match &s.kind {
            Kind::Classic(c) => c,
            Kind::Network(_) => panic!("not a Classic ELB: {s:?}"),
        }
    }

    fn network(s: &LbSpec) -> &NetworkSpec {
        match &s.kind {
            Kind::Network(n) => n,
            Kind::Classic(_) => panic!("not an NLB: {s:?}"),
        }
    }

    fn listeners(s: &LbSpec) -> String {
        match &s.kind {
            Kind::Classic(c) => c
                .listeners
                .iter()
                .map(|l| format!("{}:{}->{}", l.lb_port, l.protocol, l.instance_protocol))
                .collect::<Vec<_>>()
                .join(","),
            Kind::Network(n) => n
                .mappings
                .iter()
                .map(|m| format!("{}:{}->{}", m.port, m.protocol, m.target_protocol))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    fn health_check(s: &LbSpec) -> String {
        let h = &classic(s).health_check;
        format!(
            "{} {}/{}/{}/{}",
            h.target, h.healthy, h.unhealthy, h.timeout, h.interval
        )
    }

    fn groups(s: &LbSpec) -> String {
        classic(s).group_ids(Some("sg-own")).join(",")
    }

    fn attributes(s: &LbSpec) -> String {
        let at = &classic(s).attributes;
        format!(
            "idle {} draining {} cross-zone {}",
            at.idle_timeout, at.draining_enabled, at.cross_zone
        )
    }

    fn target_group_attributes(s: &LbSpec) -> String {
        format!("{:?}", network(s).target_group_attributes)
    }

    fn extra_tags(s: &LbSpec) -> String {
        format!("{:?}", s.extra_tags)
    }

    fn node_labels(s: &LbSpec) -> String {
        format!("{:?}", s.target_node_labels)
    }

    fn subnets(s: &LbSpec) -> String {
        format!("{:?}", s.subnets)
    }

    /// The key a notice names: its message opens `annotation KEY: …` or `annotation KEY is …`.
    fn noticed_key(n: &ServiceNotice) -> String {
        n.message
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .trim_end_matches(':')
            .to_owned()
    }

    const NLB: (&str, &str) = (a::TYPE, "nlb");
    const VI: &str = a::VALUE_IGNORED;
    const KI: &str = a::KEY_IGNORED;
    const SUCCESS_CODES: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-success-codes";
    const MISSPELT_INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internel";

    #[rustfmt::skip]
    const CASES: &[Case] = &[
        // TestIsNLB, TestIsLBExternal (aws_loadbalancer_test.go).
        Case { from: "TestIsNLB/NLB annotation provided", annotations: &[NLB], view: kind, want: Ok("network"), notices: &[], before: None },
        Case { from: "TestIsNLB/NLB annotation has invalid value", annotations: &[(a::TYPE, "elb")], view: kind, want: Ok("classic"), notices: &[], before: None },
        Case { from: "TestIsNLB/NLB annotation absent", annotations: &[], view: kind, want: Ok("classic"), notices: &[], before: None },
        Case { from: "TestIsLBExternal/Type NLB-IP", annotations: &[(a::TYPE, "nlb-ip")], view: kind, want: Err("AWS Load Balancer Controller handles"), notices: &[], before: None },
        Case { from: "TestIsLBExternal/Type External", annotations: &[(a::TYPE, "external")], view: kind, want: Err("AWS Load Balancer Controller handles"), notices: &[], before: None },
        Case { from: "ours: only exactly nlb is an NLB", annotations: &[(a::TYPE, "NLB")], view: kind, want: Ok("classic"), notices: &[(VI, a::TYPE)], before: None },
        // TestEnsureLoadBalancerHealthCheck (aws_test.go), on node port 30080.
        Case { from: "TestEnsureLoadBalancerHealthCheck/falls back to HC defaults", annotations: &[], view: health_check, want: Ok("TCP:30080 2/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthy threshold override", annotations: &[(a::HC_HEALTHY, "7")], view: health_check, want: Ok("TCP:30080 7/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/unhealthy threshold override", annotations: &[(a::HC_UNHEALTHY, "7")], view: health_check, want: Ok("TCP:30080 2/7/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/timeout override", annotations: &[(a::HC_TIMEOUT, "7")], view: health_check, want: Ok("TCP:30080 2/6/7/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/interval override", annotations: &[(a::HC_INTERVAL, "7")], view: health_check, want: Ok("TCP:30080 2/6/5/7"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthcheck port override", annotations: &[(a::HC_PORT, "2122")], view: health_check, want: Ok("TCP:2122 2/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthcheck protocol override", annotations: &[(a::HC_PROTOCOL, "HTTP")], view: health_check, want: Ok("HTTP:30080/ 2/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthcheck protocol, port, path override", annotations: &[(a::HC_PROTOCOL, "HTTPS"), (a::HC_PATH, "/healthz"), (a::HC_PORT, "31224")], view: health_check, want: Ok("HTTPS:31224/healthz 2/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthcheck protocol SSL", annotations: &[(a::HC_PROTOCOL, "SSL"), (a::HC_PATH, "/healthz"), (a::HC_PORT, "3124")], view: health_check, want: Ok("SSL:3124 2/6/5/10"), notices: &[(VI, a::HC_PATH)], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/healthcheck port annotation traffic-port", annotations: &[(a::HC_PROTOCOL, "TCP"), (a::HC_PORT, "traffic-port")], view: health_check, want: Ok("TCP:30080 2/6/5/10"), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/validates resulting expected health check", annotations: &[(a::HC_TIMEOUT, "1")], view: health_check, want: Err(a::HC_TIMEOUT), notices: &[], before: None },
        Case { from: "TestEnsureLoadBalancerHealthCheck/handles invalid override values", annotations: &[(a::HC_TIMEOUT, "3.3")], view: health_check, want: Err(a::HC_TIMEOUT), notices: &[], before: None },
        // TestLBExtraSecurityGroupsAnnotation, TestLBSecurityGroupsAnnotation (aws_test.go).
        Case { from: "TestLBExtraSecurityGroupsAnnotation/No extra SG annotation", annotations: &[], view: groups, want: Ok("sg-own"), notices: &[], before: None },
        Case { from: "TestLBExtraSecurityGroupsAnnotation/Empty extra SGs specified", annotations: &[(a::EXTRA_SECURITY_GROUPS, ", ,,")], view: groups, want: Ok("sg-own"), notices: &[], before: None },
        Case { from: "TestLBExtraSecurityGroupsAnnotation/SG specified", annotations: &[(a::EXTRA_SECURITY_GROUPS, "sg-000001")], view: groups, want: Ok("sg-own,sg-000001"), notices: &[], before: None },
        Case { from: "TestLBExtraSecurityGroupsAnnotation/Multiple SGs specified", annotations: &[(a::EXTRA_SECURITY_GROUPS, "sg-000001, sg-000002")], view: groups, want: Ok("sg-own,sg-000001,sg-000002"), notices: &[], before: None },
        Case { from: "TestLBSecurityGroupsAnnotation/SG specified", annotations: &[(a::SECURITY_GROUPS, "sg-000001")], view: groups, want: Ok("sg-000001"), notices: &[], before: None },
        Case { from: "TestLBSecurityGroupsAnnotation/Multiple SGs specified", annotations: &[(a::SECURITY_GROUPS, "sg-000001, sg-000002")], view: groups, want: Ok("sg-000001,sg-000002"), notices: &[], before: None },
        // TestValidateServiceAnnotations (aws_validations_test.go).
        Case { from: "TestValidateServiceAnnotations/CLB with both BYO SG annotations", annotations: &[(a::SECURITY_GROUPS, "sg-byo"), (a::EXTRA_SECURITY_GROUPS, "sg-extra123")], view: groups, want: Ok("sg-byo,sg-extra123"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotations/NLB with BYO SG annotation - should pass validations", annotations: &[NLB, (a::SECURITY_GROUPS, "sg-byo")], view: kind, want: Ok("network"), notices: &[(KI, a::SECURITY_GROUPS)], before: Some("refused: security-groups does not apply to a network load balancer") },
        Case { from: "TestValidateServiceAnnotations/NLB with BYO SG with multiple values", annotations: &[NLB, (a::SECURITY_GROUPS, "sg-123,sg-456")], view: kind, want: Ok("network"), notices: &[(KI, a::SECURITY_GROUPS)], before: Some("refused") },
        Case { from: "TestValidateServiceAnnotations/NLB with BYO extra SG annotation - error", annotations: &[NLB, (a::EXTRA_SECURITY_GROUPS, "sg-byo")], view: kind, want: Err(a::EXTRA_SECURITY_GROUPS), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotations/NLB with both BYO SG annotations - extra SG error still applies", annotations: &[NLB, (a::SECURITY_GROUPS, "sg-byo"), (a::EXTRA_SECURITY_GROUPS, "sg-extra123")], view: kind, want: Err(a::EXTRA_SECURITY_GROUPS), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotations/NLB with target group attributes - success", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=true")], view: target_group_attributes, want: Ok(r#"{"preserve_client_ip.enabled": "true"}"#), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotations/CLB with target group attributes - error", annotations: &[(a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=true")], view: kind, want: Err(a::TARGET_GROUP_ATTRIBUTES), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotations/no annotations - success", annotations: &[], view: kind, want: Ok("classic"), notices: &[], before: None },
        // TestValidateServiceAnnotationTargetGroupAttributes (aws_validations_test.go), on an NLB.
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/empty target group attributes annotation", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "")], view: target_group_attributes, want: Ok("{}"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/valid multiple attributes", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=true,proxy_protocol_v2.enabled=false")], view: target_group_attributes, want: Ok(r#"{"preserve_client_ip.enabled": "true", "proxy_protocol_v2.enabled": "false"}"#), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/duplicate attribute in annotation (last one wins - no error expected)", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=true,preserve_client_ip.enabled=false")], view: target_group_attributes, want: Ok(r#"{"preserve_client_ip.enabled": "false"}"#), notices: &[(VI, a::TARGET_GROUP_ATTRIBUTES)], before: Some("refused: set twice") },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/empty attribute value", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=")], view: target_group_attributes, want: Err("empty"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/invalid preserve_client_ip.enabled value", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=invalid")], view: target_group_attributes, want: Err("true or false"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/unsupported attribute", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "unsupported_attribute=value")], view: target_group_attributes, want: Err("not supported"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/case sensitivity - True should fail", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled=True")], view: target_group_attributes, want: Err("true or false"), notices: &[], before: None },
        Case { from: "TestValidateServiceAnnotationTargetGroupAttributes/whitespace in attribute values should fail", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "preserve_client_ip.enabled= true ")], view: target_group_attributes, want: Err("true or false"), notices: &[], before: None },
        Case { from: "ours: a second = keeps upstream's middle part", annotations: &[NLB, (a::TARGET_GROUP_ATTRIBUTES, "proxy_protocol_v2.enabled=true=1")], view: target_group_attributes, want: Ok(r#"{"proxy_protocol_v2.enabled": "true"}"#), notices: &[(VI, a::TARGET_GROUP_ATTRIBUTES)], before: Some("refused: \"true=1\" must be true or false") },
        // Test_parseStringSliceAnnotation (aws_test.go), through the subnets annotation.
        Case { from: "Test_parseStringSliceAnnotation/single value", annotations: &[(a::SUBNETS, "   value 1 ")], view: subnets, want: Ok(r#"Named(["value 1"])"#), notices: &[], before: None },
        Case { from: "Test_parseStringSliceAnnotation/multiple values", annotations: &[(a::SUBNETS, "subnet-1, subnet-2, My Subnet ")], view: subnets, want: Ok(r#"Named(["subnet-1", "subnet-2", "My Subnet"])"#), notices: &[], before: None },
        Case { from: "Test_parseStringSliceAnnotation/empty value (resolveSubnetNameOrIDs refuses it)", annotations: &[(a::SUBNETS, "")], view: subnets, want: Err(a::SUBNETS), notices: &[], before: None },
        // TestGetKeyValuePropertiesFromAnnotation (aws_test.go), through the tags and labels.
        Case { from: "TestGetKeyValuePropertiesFromAnnotation/spaces", annotations: &[(a::ADDITIONAL_TAGS, " key1=value1 , key2=value2 ")], view: extra_tags, want: Ok(r#"{"key1": "value1", "key2": "value2"}"#), notices: &[], before: None },
        Case { from: "TestGetKeyValuePropertiesFromAnnotation/key only", annotations: &[(a::TARGET_NODE_LABELS, "key1,key2=value2")], view: node_labels, want: Ok(r#"{"key1": "", "key2": "value2"}"#), notices: &[], before: None },
        Case { from: "ours: a second = keeps upstream's middle part", annotations: &[(a::ADDITIONAL_TAGS, "team=web=blue")], view: extra_tags, want: Ok(r#"{"team": "web"}"#), notices: &[(VI, a::ADDITIONAL_TAGS)], before: Some(r#"{"team": "web=blue"}"#) },
        Case { from: "ours: tags upstream sets itself overwrite the user's", annotations: &[(a::ADDITIONAL_TAGS, "kubernetes.io/cluster/blue=shared,kubernetes.io/service-name=x,team=web")], view: extra_tags, want: Ok(r#"{"team": "web"}"#), notices: &[(VI, a::ADDITIONAL_TAGS), (VI, a::ADDITIONAL_TAGS)], before: Some("refused: records ownership") },
        Case { from: "ours: another cluster's ownership tag stays refused", annotations: &[(a::ADDITIONAL_TAGS, "kubernetes.io/cluster/green=owned")], view: extra_tags, want: Err("records ownership"), notices: &[], before: None },
        // Upstream reads these for one type only and ignores them on the other (aws.go
        // EnsureLoadBalancer: the Classic attributes and proxy protocol come after the NLB
        // branch returns; the NLB's subnet mappings are read on its path only).
        Case { from: "ours: proxy-protocol on an NLB", annotations: &[NLB, (a::PROXY_PROTOCOL, "*")], view: listeners, want: Ok("80:TCP->TCP"), notices: &[(KI, a::PROXY_PROTOCOL)], before: Some("refused: does not apply to a network load balancer") },
        Case { from: "ours: Classic attributes on an NLB", annotations: &[NLB, (a::IDLE_TIMEOUT, "300"), (a::DRAINING_ENABLED, "yes"), (a::ACCESS_LOG_EMIT_INTERVAL, "5")], view: kind, want: Ok("network"), notices: &[(KI, a::ACCESS_LOG_EMIT_INTERVAL), (KI, a::DRAINING_ENABLED), (KI, a::IDLE_TIMEOUT)], before: Some("refused") },
        Case { from: "ours: NLB subnet mappings on a Classic ELB", annotations: &[(a::EIP_ALLOCATIONS, "eipalloc-1"), (a::PRIVATE_IPV4, "10.0.0.5")], view: kind, want: Ok("classic"), notices: &[(KI, a::EIP_ALLOCATIONS), (KI, a::PRIVATE_IPV4)], before: Some("refused") },
        Case { from: "ours: the Classic attributes still parse as upstream", annotations: &[(a::IDLE_TIMEOUT, "300"), (a::CROSS_ZONE, "1")], view: attributes, want: Ok("idle 300 draining false cross-zone true"), notices: &[], before: None },
        Case { from: "ours: a bad boolean is refused as upstream refuses it", annotations: &[(a::CROSS_ZONE, "yes")], view: attributes, want: Err(a::CROSS_ZONE), notices: &[], before: None },
        Case { from: "ours: a bad integer is refused as upstream refuses it", annotations: &[(a::IDLE_TIMEOUT, "60s")], view: attributes, want: Err(a::IDLE_TIMEOUT), notices: &[], before: None },
        Case { from: "ours: proxy-protocol other than * is refused as upstream refuses it", annotations: &[(a::PROXY_PROTOCOL, "true")], view: kind, want: Err(a::PROXY_PROTOCOL), notices: &[], before: None },
        // The backend protocol: upstream's buildListener reads it only with a certificate (or
        // `http`); the NLB path only for `ssl`.
        Case { from: "ours: an unknown backend protocol without a certificate", annotations: &[(a::BACKEND_PROTOCOL, "grpc")], view: listeners, want: Ok("80:tcp->tcp"), notices: &[(VI, a::BACKEND_PROTOCOL)], before: Some("refused: a Classic ELB speaks http, https, ssl or tcp") },
        Case { from: "TestBuildListener: Invalid backend protocol with a certificate", annotations: &[(a::BACKEND_PROTOCOL, "grpc"), (a::SSL_CERT, "arn:cert")], view: listeners, want: Err(a::BACKEND_PROTOCOL), notices: &[], before: None },
        Case { from: "ours: an NLB reads only ssl", annotations: &[NLB, (a::BACKEND_PROTOCOL, "SSL"), (a::SSL_CERT, "arn:cert")], view: listeners, want: Ok("80:TLS->TCP"), notices: &[(VI, a::BACKEND_PROTOCOL)], before: Some("refused: one of http, https, ssl or tcp") },
        Case { from: "ours: ssl-ports entries are not trimmed", annotations: &[(a::SSL_CERT, "arn:cert"), (a::SSL_PORTS, "443, 80")], view: listeners, want: Ok("80:tcp->tcp"), notices: &[(VI, a::SSL_PORTS)], before: None },
        // The internal annotation: any value but empty or exactly `false`.
        Case { from: "ours: internal False is internal", annotations: &[(a::INTERNAL, "False")], view: scheme, want: Ok("classic internal"), notices: &[(VI, a::INTERNAL)], before: None },
        Case { from: "ours: internal 0.0.0.0/0 is internal", annotations: &[(a::INTERNAL, "0.0.0.0/0")], view: scheme, want: Ok("classic internal"), notices: &[], before: None },
        // Keys upstream does not read: ignored, and said.
        Case { from: "ours: the AWS Load Balancer Controller's scheme", annotations: &[(a::LBC_SCHEME, "internal")], view: scheme, want: Ok("classic internet-facing"), notices: &[(KI, a::LBC_SCHEME)], before: Some("refused: set aws-load-balancer-internal") },
        Case { from: "ours: the AWS Load Balancer Controller's scheme, agreeing", annotations: &[(a::LBC_SCHEME, "internal"), (a::INTERNAL, "true")], view: scheme, want: Ok("classic internal"), notices: &[], before: None },
        Case { from: "ours: the AWS Load Balancer Controller's IP targets", annotations: &[NLB, (a::LBC_NLB_TARGET_TYPE, "ip")], view: kind, want: Ok("network"), notices: &[(KI, a::LBC_NLB_TARGET_TYPE)], before: Some("refused") },
        Case { from: "ours: the AWS Load Balancer Controller's dualstack", annotations: &[NLB, (a::LBC_IP_ADDRESS_TYPE, "dualstack")], view: kind, want: Ok("network"), notices: &[(KI, a::LBC_IP_ADDRESS_TYPE)], before: Some("refused") },
        Case { from: "ours: another AWS Load Balancer Controller key", annotations: &[(SUCCESS_CODES, "200")], view: kind, want: Ok("classic"), notices: &[(KI, SUCCESS_CODES)], before: Some("refused: not an annotation of cloud-provider-aws") },
        Case { from: "ours: a misspelt key", annotations: &[(MISSPELT_INTERNAL, "true")], view: scheme, want: Ok("classic internet-facing"), notices: &[(KI, MISSPELT_INTERNAL)], before: Some("refused") },
    ];

    #[test]
    fn upstreams_annotation_cases_read_as_upstream_reads_them_and_say_what_is_ignored() {
        let mut changed = 0;
        for case in CASES {
            let s = service(case.annotations);
            let (got, notices) = parse_noting(&blue(), &LbSettings::default(), &s);
            let what = case.from;
            match (&got, case.want) {
                (Ok(spec), Ok(view)) => assert_eq!((case.view)(spec), view, "{what}"),
                (Err(e), Err(named)) => assert!(e.to_string().contains(named), "{what}: {e}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
            let noticed: Vec<(String, String)> = notices
                .iter()
                .map(|n| (n.reason.clone(), noticed_key(n)))
                .collect();
            let want: Vec<(String, String)> = case
                .notices
                .iter()
                .map(|(r, k)| ((*r).to_owned(), (*k).to_owned()))
                .collect();
            assert_eq!(noticed, want, "{what}: {notices:?}");
            for n in &notices {
                assert!(n.message.contains("cloud-provider-aws"), "{what}: {n:?}");
            }
            changed += usize::from(case.before.is_some());
        }
        assert_eq!(changed, 16, "the cases whose reading changed");
    }

    #[test]
    fn shared_probe_mode_overrides_the_nlb_health_check_annotations_and_says_so() {
        let settings = LbSettings {
            health_probe: crate::config::HealthProbe::Shared {
                port: 10256,
                path: "/healthz".into(),
            },
            ..LbSettings::default()
        };
        // An unparsable port is replaced before upstream checks it.
        let s = service(&[NLB, (a::HC_PORT, "http"), (a::HC_PATH, "/ready")]);
        let (got, notices) = parse_noting(&blue(), &settings, &s);
        let spec = got.unwrap();
        let hc = &network(&spec).mappings[0].health_check;
        assert_eq!(
            (hc.protocol.as_str(), hc.port.as_elb()),
            ("HTTP", "10256".to_owned())
        );
        let keys: Vec<String> = notices.iter().map(noticed_key).collect();
        assert_eq!(keys, [a::HC_PORT, a::HC_PATH]);
        let (got, _) = parse_noting(&blue(), &LbSettings::default(), &s);
        assert!(got.unwrap_err().to_string().contains(a::HC_PORT));
    }

    #[test]
    fn notices_are_the_same_for_the_same_service_and_also_come_with_a_refusal() {
        let s = service(&[(SUCCESS_CODES, "200"), (a::PROXY_PROTOCOL, "v2")]);
        let (got, first) = parse_noting(&blue(), &LbSettings::default(), &s);
        assert!(got.unwrap_err().to_string().contains(a::PROXY_PROTOCOL));
        assert_eq!(first.len(), 1);
        assert_eq!(parse_noting(&blue(), &LbSettings::default(), &s).1, first);
    }
}
