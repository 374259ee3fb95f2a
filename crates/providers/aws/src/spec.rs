//! What a Service asks of AWS: the load balancer type, scheme, client ranges, subnets, tags and
//! backends, read from the Service and its annotations as cloud-provider-aws reads them, then
//! the type-specific part ([`crate::classic::spec`], [`crate::nlb::spec`]). Pure functions only.

use std::collections::BTreeMap;

use ipnet::IpNet;
use provider::{LoadBalancerNode, ProviderError, ServiceSpec};

use crate::{
    annotations::{self as a, invalid},
    classic::spec::ClassicSpec,
    config::LbSettings,
    naming::load_balancer_name,
    nlb::spec::NetworkSpec,
    tags::{ClusterTagging, Tags, check_extra_tags},
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
/// naming the field or annotation for everything upstream refuses, for annotations this provider
/// does not read, and for values it cannot parse.
pub fn parse(
    cluster: &ClusterTagging,
    settings: &LbSettings,
    service: &ServiceSpec,
) -> Result<LbSpec, ProviderError> {
    if let Some(why) = implemented_elsewhere(service) {
        return Err(ProviderError::ImplementedElsewhere(why));
    }
    let annotations = &service.annotations;
    let network = wants_network(service);
    let internal = wants_internal(annotations);
    a::check_known(annotations, network, internal)?;
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
    let extra_tags = annotations
        .get(a::ADDITIONAL_TAGS)
        .map(|v| a::key_value_map(v))
        .unwrap_or_default();
    check_extra_tags(&extra_tags, a::ADDITIONAL_TAGS)?;
    let target_node_labels = annotations
        .get(a::TARGET_NODE_LABELS)
        .map(|v| a::key_value_map(v))
        .unwrap_or_default();
    let kind = if network {
        Kind::Network(NetworkSpec::parse(cluster, settings, service)?)
    } else {
        Kind::Classic(ClassicSpec::parse(settings, service, &source_ranges)?)
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
}
