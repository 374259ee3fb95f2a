//! The calls that bring a network load balancer where its Service wants it: a pure function of
//! what AWS has and what the Service asks for (upstream's `ensureLoadBalancerv2`,
//! `ensureTargetGroup`, `reconcileLBAttributes`, `reconcileTargetGroupsAttributes`).
//!
//! Differences from upstream, each a fault its users reported:
//! - listeners are matched by port, so a port gaining TLS modifies its listener (upstream keys
//!   them by port and protocol and fails with `DuplicateListener`);
//! - a target group is found by name among all of them before one is created, so returning to an
//!   earlier configuration reuses it (upstream: `DuplicateTargetGroupName`);
//! - a target group is also recognised by what it serves (node port, protocol, health check
//!   protocol and interval), whatever cluster ID its name was hashed with;
//! - health checks compare the target group's actual path (upstream compares with an empty
//!   request and rewrites every HTTP check on every sync), both thresholds, and the timeout when
//!   annotated (upstream never sends it);
//! - a TLS listener's policy is compared only when the Service names one (AWS fills in its
//!   default, which upstream then rewrites on every sync).

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    nlb::spec::{HealthCheck, Mapping, NetworkSpec},
    tags::Tags,
};

/// A target group's health check as AWS answers it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedHealth {
    /// Protocol.
    pub protocol: String,
    /// Port (`traffic-port` or a number).
    pub port: String,
    /// Path.
    pub path: Option<String>,
    /// Interval.
    pub interval: i32,
    /// Timeout.
    pub timeout: Option<i32>,
    /// Healthy threshold.
    pub healthy: i32,
    /// Unhealthy threshold.
    pub unhealthy: i32,
}

/// A target group as AWS describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetGroupView {
    /// ARN.
    pub arn: String,
    /// Name.
    pub name: String,
    /// Target port (the node port).
    pub port: u16,
    /// Protocol.
    pub protocol: String,
    /// Health check.
    pub health: ObservedHealth,
    /// Registered instances (draining ones excluded).
    pub targets: BTreeSet<String>,
    /// Attributes (only read when the Service sets some).
    pub attributes: BTreeMap<String, String>,
}

/// A listener as AWS describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenerView {
    /// ARN.
    pub arn: String,
    /// Port.
    pub port: u16,
    /// Protocol.
    pub protocol: String,
    /// Certificate ARNs.
    pub certificates: Vec<String>,
    /// TLS policy.
    pub ssl_policy: Option<String>,
    /// The default action's target group.
    pub target_group_arn: Option<String>,
}

/// What the NLB has, beyond the load balancer itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NlbObserved {
    /// Listeners.
    pub listeners: Vec<ListenerView>,
    /// The target groups attached to it.
    pub target_groups: Vec<TargetGroupView>,
    /// Target groups with a wanted name that are attached to nothing (left by an interrupted
    /// sync, or by a configuration the Service had before).
    pub unattached: Vec<TargetGroupView>,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// Tags of the load balancer.
    pub tags: Tags,
}

impl NlbObserved {
    /// What a new NLB has: nothing, and AWS's default attributes.
    pub fn new_load_balancer(tags: Tags) -> Self {
        Self {
            attributes: [
                ("load_balancing.cross_zone.enabled".to_owned(), "false".to_owned()),
                ("access_logs.s3.enabled".to_owned(), "false".to_owned()),
            ]
            .into(),
            tags,
            ..Self::default()
        }
    }
}

/// Everything the plan needs besides what AWS has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlbDesired<'a> {
    /// The NLB part of the Service's spec.
    pub spec: &'a NetworkSpec,
    /// Instances that should be targets (the target nodes' instances that exist).
    pub instances: BTreeSet<String>,
    /// Of those, the ones that may be registered now (running).
    pub registrable: BTreeSet<String>,
    /// Tags of the load balancer, new target groups and listeners.
    pub tags: Tags,
}

/// A target group in a plan: one that exists, or one the plan creates (by name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TgRef {
    /// ARN of an existing group.
    Existing(String),
    /// Name of a group created earlier in the plan.
    New(String),
}

/// One call to the ELBv2 API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlbAction {
    /// CreateTargetGroup (instance targets).
    CreateTargetGroup {
        /// Name.
        name: String,
        /// Protocol.
        protocol: String,
        /// Port (the node port).
        port: u16,
        /// Health check.
        health: HealthCheck,
        /// Tags.
        tags: Tags,
    },
    /// ModifyTargetGroup (health check port, path, thresholds, timeout).
    ModifyTargetGroup {
        /// ARN.
        arn: String,
        /// The health check to set.
        health: HealthCheck,
    },
    /// DeregisterTargets.
    Deregister {
        /// Group.
        target_group: TgRef,
        /// Instances.
        instances: Vec<String>,
        /// Their port.
        port: u16,
    },
    /// RegisterTargets.
    Register {
        /// Group.
        target_group: TgRef,
        /// Instances.
        instances: Vec<String>,
        /// Their port.
        port: u16,
    },
    /// ModifyTargetGroupAttributes.
    ModifyTargetGroupAttributes {
        /// Group.
        target_group: TgRef,
        /// Attributes to set.
        attributes: BTreeMap<String, String>,
    },
    /// CreateListener.
    CreateListener {
        /// Port.
        port: u16,
        /// Protocol.
        protocol: String,
        /// TLS certificate.
        certificate: Option<String>,
        /// TLS policy.
        ssl_policy: Option<String>,
        /// Forward to.
        target_group: TgRef,
        /// Tags.
        tags: Tags,
    },
    /// ModifyListener.
    ModifyListener {
        /// ARN.
        arn: String,
        /// Port.
        port: u16,
        /// Protocol.
        protocol: String,
        /// TLS certificate.
        certificate: Option<String>,
        /// TLS policy.
        ssl_policy: Option<String>,
        /// Forward to.
        target_group: TgRef,
    },
    /// DeleteListener.
    DeleteListener {
        /// ARN.
        arn: String,
    },
    /// DeleteTargetGroup.
    DeleteTargetGroup {
        /// ARN.
        arn: String,
    },
    /// ModifyLoadBalancerAttributes.
    ModifyAttributes(BTreeMap<String, String>),
    /// AddTags on the load balancer.
    AddTags(Tags),
}

/// The existing group a mapping uses, if any: the attached one with its name, else an attached
/// one serving the same (node port, protocol, health check protocol and interval), else an
/// unattached one with its name.
fn find_group<'a>(m: &Mapping, o: &'a NlbObserved, used: &BTreeSet<&str>) -> Option<&'a TargetGroupView> {
    let free = |g: &&TargetGroupView| !used.contains(g.arn.as_str());
    let serves = |g: &&TargetGroupView| {
        g.port == m.node_port
            && g.protocol.eq_ignore_ascii_case(&m.target_protocol)
            && g.health.protocol.eq_ignore_ascii_case(&m.health_check.protocol)
            && g.health.interval == m.health_check.interval
    };
    o.target_groups
        .iter()
        .filter(free)
        .find(|g| g.name == m.target_group_name)
        .or_else(|| o.target_groups.iter().filter(free).find(serves))
        .or_else(|| {
            o.unattached
                .iter()
                .filter(free)
                .find(|g| g.name == m.target_group_name && serves(g))
        })
}

/// Whether a group's health check is the wanted one (what ModifyTargetGroup can change).
fn health_matches(have: &ObservedHealth, want: &HealthCheck) -> bool {
    let http = matches!(want.protocol.as_str(), "HTTP" | "HTTPS");
    have.port == want.port.as_elb()
        && have.healthy == want.healthy
        && have.unhealthy == want.unhealthy
        && (!http || have.path == want.path)
        && want.timeout.is_none_or(|t| have.timeout == Some(t))
}

/// The calls that make `g`'s targets the wanted instances, deregistering first (upstream
/// v1.36's order): `registrable` (running) ones added, unwanted ones taken out; a wanted one that
/// is stopped is neither.
fn target_changes(d: &NlbDesired<'_>, m: &Mapping, g: &TargetGroupView, r: &TgRef) -> Vec<NlbAction> {
    let mut actions = Vec::new();
    let deregister: Vec<String> = g
        .targets
        .iter()
        .filter(|i| !d.instances.contains(*i))
        .cloned()
        .collect();
    if !deregister.is_empty() {
        actions.push(NlbAction::Deregister {
            target_group: r.clone(),
            instances: deregister,
            port: m.node_port,
        });
    }
    let register: Vec<String> = d
        .registrable
        .iter()
        .filter(|i| d.instances.contains(*i) && !g.targets.contains(*i))
        .cloned()
        .collect();
    if !register.is_empty() {
        actions.push(NlbAction::Register {
            target_group: r.clone(),
            instances: register,
            port: m.node_port,
        });
    }
    actions
}

/// A node change on an NLB whose fingerprint holds: only each mapping's targets change.
/// `groups` are the target groups attached to it by the names the mappings give them, with
/// their targets; `None` when a mapping has no such group (then the full plan decides).
pub fn plan_targets(d: &NlbDesired<'_>, groups: &[TargetGroupView]) -> Option<Vec<NlbAction>> {
    let mut actions = Vec::new();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for m in &d.spec.mappings {
        let g = groups
            .iter()
            .find(|g| g.name == m.target_group_name && !used.contains(g.arn.as_str()))?;
        used.insert(&g.arn);
        actions.extend(target_changes(d, m, g, &TgRef::Existing(g.arn.clone())));
    }
    Some(actions)
}

/// The calls for an existing NLB (a new one: plan against [`NlbObserved::new_load_balancer`]).
pub fn plan(d: &NlbDesired<'_>, o: &NlbObserved) -> Vec<NlbAction> {
    let mut groups = Vec::new();
    let mut listeners = Vec::new();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for m in &d.spec.mappings {
        let tg = match find_group(m, o, &used) {
            Some(g) => {
                used.insert(&g.arn);
                let r = TgRef::Existing(g.arn.clone());
                if !health_matches(&g.health, &m.health_check) {
                    groups.push(NlbAction::ModifyTargetGroup {
                        arn: g.arn.clone(),
                        health: m.health_check.clone(),
                    });
                }
                groups.extend(target_changes(d, m, g, &r));
                let attributes: BTreeMap<String, String> = d
                    .spec
                    .target_group_attributes
                    .iter()
                    .filter(|(k, v)| g.attributes.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !attributes.is_empty() {
                    groups.push(NlbAction::ModifyTargetGroupAttributes {
                        target_group: r.clone(),
                        attributes,
                    });
                }
                r
            }
            None => {
                let r = TgRef::New(m.target_group_name.clone());
                groups.push(NlbAction::CreateTargetGroup {
                    name: m.target_group_name.clone(),
                    protocol: m.target_protocol.clone(),
                    port: m.node_port,
                    health: m.health_check.clone(),
                    tags: d.tags.clone(),
                });
                let register: Vec<String> = d.registrable.intersection(&d.instances).cloned().collect();
                if !register.is_empty() {
                    groups.push(NlbAction::Register {
                        target_group: r.clone(),
                        instances: register,
                        port: m.node_port,
                    });
                }
                if !d.spec.target_group_attributes.is_empty() {
                    groups.push(NlbAction::ModifyTargetGroupAttributes {
                        target_group: r.clone(),
                        attributes: d.spec.target_group_attributes.clone(),
                    });
                }
                r
            }
        };
        match o.listeners.iter().find(|l| l.port == m.port) {
            None => listeners.push(NlbAction::CreateListener {
                port: m.port,
                protocol: m.protocol.clone(),
                certificate: m.certificate.clone(),
                ssl_policy: m.ssl_policy.clone(),
                target_group: tg,
                tags: d.tags.clone(),
            }),
            Some(l) => {
                let tls = m.protocol == "TLS";
                let forwards =
                    matches!(&tg, TgRef::Existing(arn) if l.target_group_arn.as_ref() == Some(arn));
                // A TLS policy means nothing on a TCP or UDP listener (moto reports one anyway).
                let tls_differs = if tls {
                    l.certificates.first() != m.certificate.as_ref()
                        || m.ssl_policy
                            .as_ref()
                            .is_some_and(|p| l.ssl_policy.as_ref() != Some(p))
                } else {
                    !l.certificates.is_empty()
                };
                if !l.protocol.eq_ignore_ascii_case(&m.protocol) || !forwards || tls_differs {
                    listeners.push(NlbAction::ModifyListener {
                        arn: l.arn.clone(),
                        port: m.port,
                        protocol: m.protocol.clone(),
                        certificate: m.certificate.clone(),
                        ssl_policy: m.ssl_policy.clone(),
                        target_group: tg,
                    });
                }
            }
        }
    }
    let ports: BTreeSet<u16> = d.spec.mappings.iter().map(|m| m.port).collect();
    for l in o.listeners.iter().filter(|l| !ports.contains(&l.port)) {
        listeners.push(NlbAction::DeleteListener { arn: l.arn.clone() });
    }
    let mut actions = groups;
    actions.extend(listeners);
    for g in o.target_groups.iter().filter(|g| !used.contains(g.arn.as_str())) {
        actions.push(NlbAction::DeleteTargetGroup { arn: g.arn.clone() });
    }
    // An attribute AWS leaves out is at its default, which for these is off.
    let attributes: BTreeMap<String, String> = d
        .spec
        .attributes
        .iter()
        .filter(|(k, v)| o.attributes.get(*k).map_or("false", String::as_str) != v.as_str())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !attributes.is_empty() {
        actions.push(NlbAction::ModifyAttributes(attributes));
    }
    let missing: Tags = d
        .tags
        .iter()
        .filter(|(k, v)| o.tags.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !missing.is_empty() {
        actions.push(NlbAction::AddTags(missing));
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nlb::spec::HealthPort;

    fn hc() -> HealthCheck {
        HealthCheck {
            protocol: "TCP".into(),
            port: HealthPort::TrafficPort,
            path: None,
            interval: 30,
            timeout: None,
            healthy: 3,
            unhealthy: 3,
        }
    }

    fn mapping(port: u16, node_port: u16) -> Mapping {
        Mapping {
            port,
            protocol: "TCP".into(),
            node_port,
            target_protocol: "TCP".into(),
            certificate: None,
            ssl_policy: None,
            health_check: hc(),
            target_group_name: format!("k8s-default-web-{port:010}"),
        }
    }

    fn spec() -> NetworkSpec {
        NetworkSpec {
            mappings: vec![mapping(80, 30080)],
            attributes: [
                ("load_balancing.cross_zone.enabled".to_owned(), "false".to_owned()),
                ("access_logs.s3.enabled".to_owned(), "false".to_owned()),
            ]
            .into(),
            target_group_attributes: BTreeMap::new(),
            eip_allocations: vec![],
            private_ipv4_addresses: vec![],
        }
    }

    fn tags() -> Tags {
        [("kubernetes.io/cluster/blue".to_owned(), "owned".to_owned())].into()
    }

    fn desired(spec: &NetworkSpec) -> NlbDesired<'_> {
        NlbDesired {
            spec,
            instances: ["i-1".to_owned(), "i-2".to_owned()].into(),
            registrable: ["i-1".to_owned(), "i-2".to_owned()].into(),
            tags: tags(),
        }
    }

    fn group(arn: &str, name: &str, port: u16) -> TargetGroupView {
        TargetGroupView {
            arn: arn.into(),
            name: name.into(),
            port,
            protocol: "TCP".into(),
            health: ObservedHealth {
                protocol: "TCP".into(),
                port: "traffic-port".into(),
                path: None,
                interval: 30,
                // AWS answers a timeout it was never given.
                timeout: Some(10),
                healthy: 3,
                unhealthy: 3,
            },
            targets: ["i-1".to_owned(), "i-2".to_owned()].into(),
            attributes: BTreeMap::new(),
        }
    }

    fn converged() -> NlbObserved {
        NlbObserved {
            listeners: vec![ListenerView {
                arn: "l-80".into(),
                port: 80,
                protocol: "TCP".into(),
                certificates: vec![],
                ssl_policy: None,
                target_group_arn: Some("tg-80".into()),
            }],
            target_groups: vec![group("tg-80", "k8s-default-web-0000000080", 30080)],
            unattached: vec![],
            attributes: [
                ("load_balancing.cross_zone.enabled".to_owned(), "false".to_owned()),
                ("access_logs.s3.enabled".to_owned(), "false".to_owned()),
                ("deletion_protection.enabled".to_owned(), "false".to_owned()),
            ]
            .into(),
            tags: tags(),
        }
    }

    #[test]
    fn an_unchanged_nlb_needs_no_call() {
        let s = spec();
        assert_eq!(plan(&desired(&s), &converged()), vec![]);
    }

    #[test]
    fn a_new_nlb_gets_a_group_and_a_listener_per_port() {
        let s = spec();
        let actions = plan(&desired(&s), &NlbObserved::new_load_balancer(tags()));
        let new = TgRef::New("k8s-default-web-0000000080".into());
        assert_eq!(
            actions,
            vec![
                NlbAction::CreateTargetGroup {
                    name: "k8s-default-web-0000000080".into(),
                    protocol: "TCP".into(),
                    port: 30080,
                    health: hc(),
                    tags: tags(),
                },
                NlbAction::Register {
                    target_group: new.clone(),
                    instances: vec!["i-1".into(), "i-2".into()],
                    port: 30080,
                },
                NlbAction::CreateListener {
                    port: 80,
                    protocol: "TCP".into(),
                    certificate: None,
                    ssl_policy: None,
                    target_group: new,
                    tags: tags(),
                },
            ]
        );
    }

    #[test]
    fn a_port_gaining_tls_modifies_its_listener() {
        let mut s = spec();
        s.mappings[0].protocol = "TLS".into();
        s.mappings[0].certificate = Some("arn:cert".into());
        assert_eq!(
            plan(&desired(&s), &converged()),
            vec![NlbAction::ModifyListener {
                arn: "l-80".into(),
                port: 80,
                protocol: "TLS".into(),
                certificate: Some("arn:cert".into()),
                ssl_policy: None,
                target_group: TgRef::Existing("tg-80".into()),
            }],
            "upstream tries CreateListener on port 80 again: DuplicateListener"
        );
        // Converged TLS with AWS's default policy: not rewritten.
        let mut o = converged();
        o.listeners[0].protocol = "TLS".into();
        o.listeners[0].certificates = vec!["arn:cert".into()];
        o.listeners[0].ssl_policy = Some("ELBSecurityPolicy-2016-08".into());
        assert_eq!(
            plan(&desired(&s), &o),
            vec![],
            "upstream rewrites AWS's default policy every sync"
        );
        s.mappings[0].ssl_policy = Some("ELBSecurityPolicy-TLS13-1-2-2021-06".into());
        assert!(matches!(
            plan(&desired(&s), &o).as_slice(),
            [NlbAction::ModifyListener { .. }]
        ));
    }

    #[test]
    fn health_checks_compare_what_the_group_has() {
        let mut s = spec();
        s.mappings[0].health_check = HealthCheck {
            protocol: "HTTP".into(),
            port: HealthPort::Port(31000),
            path: Some("/healthz".into()),
            interval: 10,
            timeout: None,
            healthy: 2,
            unhealthy: 2,
        };
        let mut o = converged();
        o.target_groups[0].health = ObservedHealth {
            protocol: "HTTP".into(),
            port: "31000".into(),
            path: Some("/healthz".into()),
            interval: 10,
            timeout: Some(6),
            healthy: 2,
            unhealthy: 2,
        };
        assert_eq!(
            plan(&desired(&s), &o),
            vec![],
            "upstream modifies every HTTP check on every sync"
        );
        for mutate in [
            (|h: &mut ObservedHealth| h.path = Some("/".into())) as fn(&mut ObservedHealth),
            |h| h.unhealthy = 3,
            |h| h.port = "traffic-port".into(),
        ] {
            let mut o2 = o.clone();
            mutate(&mut o2.target_groups[0].health);
            assert_eq!(
                plan(&desired(&s), &o2),
                vec![NlbAction::ModifyTargetGroup {
                    arn: "tg-80".into(),
                    health: s.mappings[0].health_check.clone()
                }]
            );
        }
        s.mappings[0].health_check.timeout = Some(8);
        assert_eq!(plan(&desired(&s), &o).len(), 1, "an annotated timeout is applied");
    }

    #[test]
    fn a_changed_health_protocol_replaces_the_group_and_an_earlier_one_is_reused() {
        let mut s = spec();
        s.mappings[0].health_check.protocol = "HTTP".into();
        s.mappings[0].health_check.path = Some("/".into());
        s.mappings[0].target_group_name = "k8s-default-web-http".into();
        let mut o = converged();
        let actions = plan(&desired(&s), &o);
        assert!(
            matches!(&actions[0], NlbAction::CreateTargetGroup { name, .. } if name == "k8s-default-web-http")
        );
        assert!(actions.contains(&NlbAction::DeleteTargetGroup { arn: "tg-80".into() }));
        // The group of that configuration still exists (an interrupted sync, or an earlier
        // change): reused, not created again (upstream: DuplicateTargetGroupName).
        let mut earlier = group("tg-http", "k8s-default-web-http", 30080);
        earlier.health.protocol = "HTTP".into();
        earlier.health.path = Some("/".into());
        earlier.targets.clear();
        o.unattached.push(earlier);
        let actions = plan(&desired(&s), &o);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, NlbAction::CreateTargetGroup { .. })),
            "{actions:?}"
        );
        assert!(actions.contains(&NlbAction::Register {
            target_group: TgRef::Existing("tg-http".into()),
            instances: vec!["i-1".into(), "i-2".into()],
            port: 30080
        }));
        assert!(actions.iter().any(|a| matches!(a, NlbAction::ModifyListener { target_group: TgRef::Existing(t), .. } if t == "tg-http")));
    }

    #[test]
    fn a_group_named_for_another_cluster_id_is_adopted_by_what_it_serves() {
        let s = spec();
        let mut o = converged();
        o.target_groups[0].name = "k8s-default-web-ffffffffff".into();
        assert_eq!(plan(&desired(&s), &o), vec![]);
    }

    #[test]
    fn ports_come_and_go() {
        let mut s = spec();
        s.mappings = vec![mapping(443, 30443)];
        let actions = plan(&desired(&s), &converged());
        assert!(matches!(
            &actions[0],
            NlbAction::CreateTargetGroup { port: 30443, .. }
        ));
        assert!(actions.contains(&NlbAction::DeleteListener { arn: "l-80".into() }));
        assert_eq!(
            actions.last(),
            Some(&NlbAction::DeleteTargetGroup { arn: "tg-80".into() })
        );
    }

    #[test]
    fn targets_follow_the_nodes_and_stopped_ones_are_neither_added_nor_removed() {
        let s = spec();
        let mut d = desired(&s);
        d.instances = ["i-1".to_owned(), "i-3".to_owned(), "i-stopped".to_owned()].into();
        d.registrable = ["i-1".to_owned(), "i-3".to_owned()].into();
        let r = TgRef::Existing("tg-80".into());
        assert_eq!(
            plan(&d, &converged()),
            vec![
                NlbAction::Deregister {
                    target_group: r.clone(),
                    instances: vec!["i-2".into()],
                    port: 30080
                },
                NlbAction::Register {
                    target_group: r,
                    instances: vec!["i-3".into()],
                    port: 30080
                },
            ]
        );
    }

    #[test]
    fn a_node_change_plans_only_targets_and_gives_up_on_a_group_not_found_by_name() {
        let mut s = spec();
        s.mappings.push(mapping(443, 30443));
        let mut d = desired(&s);
        d.instances = ["i-1".to_owned(), "i-3".to_owned()].into();
        d.registrable = d.instances.clone();
        let g80 = group("tg-80", "k8s-default-web-0000000080", 30080);
        let g443 = group("tg-443", "k8s-default-web-0000000443", 30443);
        let changes = |arn: &str, port: u16| {
            let r = TgRef::Existing(arn.into());
            vec![
                NlbAction::Deregister {
                    target_group: r.clone(),
                    instances: vec!["i-2".into()],
                    port,
                },
                NlbAction::Register {
                    target_group: r,
                    instances: vec!["i-3".into()],
                    port,
                },
            ]
        };
        // (groups found by name, calls)
        let rows: Vec<(Vec<TargetGroupView>, Option<Vec<NlbAction>>)> = vec![
            (
                vec![g80.clone(), g443.clone()],
                Some([changes("tg-80", 30080), changes("tg-443", 30443)].concat()),
            ),
            // Order of the answer does not matter.
            (
                vec![g443.clone(), g80.clone()],
                Some([changes("tg-80", 30080), changes("tg-443", 30443)].concat()),
            ),
            // A port's group is missing (or adopted under another name): the full plan.
            (vec![g80.clone()], None),
            (vec![], None),
        ];
        for (groups, want) in rows {
            assert_eq!(plan_targets(&d, &groups), want, "{groups:?}");
        }
        // Unchanged members: nothing.
        let mut same = desired(&s);
        same.instances = ["i-1".to_owned(), "i-2".to_owned()].into();
        assert_eq!(plan_targets(&same, &[g80, g443]), Some(vec![]));
    }

    #[test]
    fn a_tcp_listener_reported_with_a_policy_is_left_alone_and_absent_attributes_are_off() {
        let s = spec();
        let mut o = converged();
        o.listeners[0].ssl_policy = Some("ELBSecurityPolicy-2016-08".into());
        o.attributes.remove("access_logs.s3.enabled");
        assert_eq!(plan(&desired(&s), &o), vec![]);
        // A certificate left on a listener that is TCP now: cleared.
        o.listeners[0].certificates = vec!["arn:old".into()];
        assert!(matches!(
            plan(&desired(&s), &o).as_slice(),
            [NlbAction::ModifyListener {
                certificate: None,
                ..
            }]
        ));
    }

    #[test]
    fn attributes_set_only_what_differs() {
        let mut s = spec();
        s.attributes
            .insert("load_balancing.cross_zone.enabled".into(), "true".into());
        s.target_group_attributes
            .insert("proxy_protocol_v2.enabled".into(), "true".into());
        let mut o = converged();
        o.target_groups[0]
            .attributes
            .insert("proxy_protocol_v2.enabled".into(), "false".into());
        o.target_groups[0]
            .attributes
            .insert("preserve_client_ip.enabled".into(), "true".into());
        assert_eq!(
            plan(&desired(&s), &o),
            vec![
                NlbAction::ModifyTargetGroupAttributes {
                    target_group: TgRef::Existing("tg-80".into()),
                    attributes: [("proxy_protocol_v2.enabled".to_owned(), "true".to_owned())].into()
                },
                NlbAction::ModifyAttributes(
                    [("load_balancing.cross_zone.enabled".to_owned(), "true".to_owned())].into()
                ),
            ]
        );
    }

    #[test]
    fn missing_tags_are_added() {
        let s = spec();
        let mut o = converged();
        o.tags.clear();
        assert_eq!(plan(&desired(&s), &o), vec![NlbAction::AddTags(tags())]);
    }
}
