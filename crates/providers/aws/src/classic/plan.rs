//! The calls that bring a Classic ELB where its Service wants it: a pure function of what AWS
//! has and what the Service asks for (upstream's `ensureLoadBalancer` and the steps after it).
//!
//! Where upstream writes on every sync, this plans no call: attributes compare only what the
//! Service sets (upstream compares AWS's whole answer with a struct it never fills, so it
//! rewrites them every time), policies are created once and set only where missing, tags are
//! added only when missing.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    classic::spec::{
        Attributes, ClassicSpec, HealthCheck, Listener, PROXY_PROTOCOL_POLICY, ssl_negotiation_policy_name,
    },
    tags::Tags,
};

/// A Classic ELB as AWS describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicObserved {
    /// Name.
    pub name: String,
    /// DNS name (the Service's ingress hostname).
    pub dns_name: String,
    /// `internal` or `internet-facing`.
    pub scheme: String,
    /// VPC.
    pub vpc_id: String,
    /// Subnets.
    pub subnets: Vec<String>,
    /// Security groups, in the ELB's order.
    pub security_groups: Vec<String>,
    /// Listeners with the policies set on each.
    pub listeners: Vec<(Listener, Vec<String>)>,
    /// Health check.
    pub health_check: Option<HealthCheck>,
    /// Registered instances.
    pub instances: BTreeSet<String>,
    /// Policies on backend (instance) ports.
    pub backend_policies: BTreeMap<u16, Vec<String>>,
    /// The ELB's own policies (`Policies.OtherPolicies`).
    pub policies: BTreeSet<String>,
    /// Attributes (read separately; `None` until read).
    pub attributes: Option<ObservedAttributes>,
    /// Tags.
    pub tags: Tags,
}

/// Attributes as AWS answers them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedAttributes {
    /// Access logs on.
    pub access_log_enabled: bool,
    /// Emit interval.
    pub access_log_emit_interval: Option<i32>,
    /// Bucket.
    pub access_log_bucket: Option<String>,
    /// Prefix.
    pub access_log_prefix: Option<String>,
    /// Draining on.
    pub draining_enabled: bool,
    /// Draining timeout.
    pub draining_timeout: Option<i32>,
    /// Idle timeout.
    pub idle_timeout: Option<i32>,
    /// Cross zone.
    pub cross_zone: bool,
}

impl ObservedAttributes {
    /// What a Classic ELB made through the API starts with.
    pub fn aws_defaults() -> Self {
        Self {
            idle_timeout: Some(60),
            ..Self::default()
        }
    }

    /// Whether these are `wanted`, comparing only what the Service sets.
    pub fn satisfy(&self, wanted: &Attributes) -> bool {
        let optional = |want: &Option<i32>, have: &Option<i32>| want.is_none() || want == have;
        let optional_s = |want: &Option<String>, have: &Option<String>| {
            want.is_none() || want.as_deref().unwrap_or_default() == have.as_deref().unwrap_or_default()
        };
        self.access_log_enabled == wanted.access_log_enabled
            && (!wanted.access_log_enabled
                || (optional(&wanted.access_log_emit_interval, &self.access_log_emit_interval)
                    && optional_s(&wanted.access_log_bucket, &self.access_log_bucket)
                    && optional_s(&wanted.access_log_prefix, &self.access_log_prefix)))
            && self.draining_enabled == wanted.draining_enabled
            && optional(&wanted.draining_timeout, &self.draining_timeout)
            && self.idle_timeout == Some(wanted.idle_timeout)
            && self.cross_zone == wanted.cross_zone
    }
}

/// Everything the plan needs besides what AWS has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicDesired<'a> {
    /// Name.
    pub name: &'a str,
    /// The Classic part of the Service's spec.
    pub spec: &'a ClassicSpec,
    /// Internal scheme (creation only).
    pub internal: bool,
    /// Subnets (upstream re-discovers them on every sync and attaches or detaches).
    pub subnets: Vec<String>,
    /// Security groups, in order.
    pub security_groups: Vec<String>,
    /// Instances that should be registered (the target nodes' instances that exist).
    pub instances: BTreeSet<String>,
    /// Of those, the ones that may be registered now (running).
    pub registrable: BTreeSet<String>,
    /// Tags the ELB must carry (added when missing; never removed).
    pub tags: Tags,
}

/// One call to the Classic ELB API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassicAction {
    /// CreateLoadBalancer.
    Create {
        /// Listeners.
        listeners: Vec<Listener>,
        /// Subnets.
        subnets: Vec<String>,
        /// Security groups.
        security_groups: Vec<String>,
        /// `Scheme=internal`.
        internal: bool,
        /// Tags.
        tags: Tags,
    },
    /// DetachLoadBalancerFromSubnets.
    DetachSubnets(Vec<String>),
    /// AttachLoadBalancerToSubnets.
    AttachSubnets(Vec<String>),
    /// ApplySecurityGroupsToLoadBalancer.
    ApplySecurityGroups(Vec<String>),
    /// DeleteLoadBalancerListeners.
    DeleteListeners(Vec<u16>),
    /// CreateLoadBalancerListeners.
    CreateListeners(Vec<Listener>),
    /// CreateLoadBalancerPolicy `k8s-proxyprotocol-enabled`.
    CreateProxyProtocolPolicy,
    /// CreateLoadBalancerPolicy `k8s-SSLNegotiationPolicy-<reference>`.
    CreateSslNegotiationPolicy {
        /// Policy name.
        name: String,
        /// AWS's predefined policy it references.
        reference: String,
    },
    /// SetLoadBalancerPoliciesForBackendServer.
    SetBackendPolicies {
        /// Instance port.
        port: u16,
        /// Policies.
        policies: Vec<String>,
    },
    /// SetLoadBalancerPoliciesOfListener.
    SetListenerPolicies {
        /// Front port.
        port: u16,
        /// Policies.
        policies: Vec<String>,
    },
    /// ConfigureHealthCheck.
    ConfigureHealthCheck(HealthCheck),
    /// ModifyLoadBalancerAttributes.
    ModifyAttributes(Attributes),
    /// AddTags.
    AddTags(Tags),
    /// RegisterInstancesWithLoadBalancer.
    Register(Vec<String>),
    /// DeregisterInstancesFromLoadBalancer.
    Deregister(Vec<String>),
}

/// The calls, in upstream's order. `observed`: `None` when the ELB does not exist yet.
pub fn plan(d: &ClassicDesired<'_>, observed: Option<&ClassicObserved>) -> Vec<ClassicAction> {
    let mut actions = Vec::new();
    let empty = ClassicObserved::default();
    let o = match observed {
        None => {
            actions.push(ClassicAction::Create {
                listeners: d.spec.listeners.clone(),
                subnets: d.subnets.clone(),
                security_groups: d.security_groups.clone(),
                internal: d.internal,
                tags: d.tags.clone(),
            });
            &empty
        }
        Some(o) => o,
    };
    let exists = observed.is_some();

    // Subnets and security groups.
    if exists {
        let wanted: BTreeSet<&String> = d.subnets.iter().collect();
        let actual: BTreeSet<&String> = o.subnets.iter().collect();
        let detach: Vec<String> = actual.difference(&wanted).map(|s| (*s).clone()).collect();
        let attach: Vec<String> = wanted.difference(&actual).map(|s| (*s).clone()).collect();
        if !detach.is_empty() {
            actions.push(ClassicAction::DetachSubnets(detach));
        }
        if !attach.is_empty() {
            actions.push(ClassicAction::AttachSubnets(attach));
        }
        let wanted: BTreeSet<&String> = d.security_groups.iter().collect();
        let actual: BTreeSet<&String> = o.security_groups.iter().collect();
        if wanted != actual {
            actions.push(ClassicAction::ApplySecurityGroups(d.security_groups.clone()));
        }
    }

    // Listeners: upstream's syncElbListeners (a changed listener is deleted by port and
    // created again).
    let created: Vec<Listener> = if exists {
        let mut matched = vec![false; d.spec.listeners.len()];
        let mut removals = Vec::new();
        for (actual, _) in &o.listeners {
            match d
                .spec
                .listeners
                .iter()
                .enumerate()
                .find(|(i, want)| !matched[*i] && want.same_as(actual))
            {
                Some((i, _)) => matched[i] = true,
                None => removals.push(actual.lb_port),
            }
        }
        let created: Vec<Listener> = d
            .spec
            .listeners
            .iter()
            .zip(&matched)
            .filter(|(_, m)| !**m)
            .map(|(l, _)| l.clone())
            .collect();
        if !removals.is_empty() {
            actions.push(ClassicAction::DeleteListeners(removals));
        }
        if !created.is_empty() {
            actions.push(ClassicAction::CreateListeners(created.clone()));
        }
        created
    } else {
        d.spec.listeners.clone()
    };

    // Proxy protocol: the policy once, then on every backend port whose state differs; other
    // policies on a port are kept.
    if d.spec.proxy_protocol && !o.policies.contains(PROXY_PROTOCOL_POLICY) {
        actions.push(ClassicAction::CreateProxyProtocolPolicy);
    }
    let wanted_ports: BTreeSet<u16> = d.spec.listeners.iter().map(|l| l.instance_port).collect();
    for port in &wanted_ports {
        let current = o.backend_policies.get(port).cloned().unwrap_or_default();
        let has = current.iter().any(|p| p == PROXY_PROTOCOL_POLICY);
        if has != d.spec.proxy_protocol {
            let mut policies: Vec<String> = current
                .into_iter()
                .filter(|p| p != PROXY_PROTOCOL_POLICY)
                .collect();
            if d.spec.proxy_protocol {
                policies.push(PROXY_PROTOCOL_POLICY.to_owned());
            }
            actions.push(ClassicAction::SetBackendPolicies {
                port: *port,
                policies,
            });
        }
    }
    for (port, policies) in &o.backend_policies {
        if !wanted_ports.contains(port) && policies.iter().any(|p| p == PROXY_PROTOCOL_POLICY) {
            actions.push(ClassicAction::SetBackendPolicies {
                port: *port,
                policies: policies
                    .iter()
                    .filter(|p| *p != PROXY_PROTOCOL_POLICY)
                    .cloned()
                    .collect(),
            });
        }
    }

    // SSL negotiation policy: created once, set on each TLS listener that lacks it.
    if let Some(reference) = &d.spec.ssl_negotiation_policy {
        let name = ssl_negotiation_policy_name(reference);
        if !o.policies.contains(&name) {
            actions.push(ClassicAction::CreateSslNegotiationPolicy {
                name: name.clone(),
                reference: reference.clone(),
            });
        }
        for want in d.spec.listeners.iter().filter(|l| l.is_tls()) {
            let fresh = created.iter().any(|c| c.lb_port == want.lb_port);
            let current = o
                .listeners
                .iter()
                .find(|(l, _)| l.lb_port == want.lb_port)
                .map(|(_, p)| p.as_slice())
                .unwrap_or_default();
            if fresh || !current.contains(&name) {
                actions.push(ClassicAction::SetListenerPolicies {
                    port: want.lb_port,
                    policies: vec![name.clone()],
                });
            }
        }
    }

    if !o
        .health_check
        .as_ref()
        .is_some_and(|hc| d.spec.health_check.same_as(hc))
    {
        actions.push(ClassicAction::ConfigureHealthCheck(d.spec.health_check.clone()));
    }
    let attributes = o
        .attributes
        .clone()
        .unwrap_or_else(ObservedAttributes::aws_defaults);
    if !attributes.satisfy(&d.spec.attributes) {
        actions.push(ClassicAction::ModifyAttributes(d.spec.attributes.clone()));
    }
    if exists {
        let missing: Tags = d
            .tags
            .iter()
            .filter(|(k, v)| o.tags.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !missing.is_empty() {
            actions.push(ClassicAction::AddTags(missing));
        }
    }
    actions.extend(instance_actions(&d.instances, &d.registrable, &o.instances));
    actions
}

/// The calls that make the registered instances the wanted ones (a node change needs no
/// other): `registrable` (running) ones of `instances` registered, the unwanted taken out; a
/// wanted one that is stopped is neither.
pub fn instance_actions(
    instances: &BTreeSet<String>,
    registrable: &BTreeSet<String>,
    registered: &BTreeSet<String>,
) -> Vec<ClassicAction> {
    let mut actions = Vec::new();
    let register: Vec<String> = registrable
        .iter()
        .filter(|i| instances.contains(*i) && !registered.contains(*i))
        .cloned()
        .collect();
    let deregister: Vec<String> = registered
        .iter()
        .filter(|i| !instances.contains(*i))
        .cloned()
        .collect();
    if !register.is_empty() {
        actions.push(ClassicAction::Register(register));
    }
    if !deregister.is_empty() {
        actions.push(ClassicAction::Deregister(deregister));
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classic::spec::SecurityGroups;

    fn listener(lb_port: u16, protocol: &str, instance_port: u16, cert: Option<&str>) -> Listener {
        Listener {
            lb_port,
            protocol: protocol.into(),
            instance_port,
            instance_protocol: if protocol == "ssl" {
                "tcp".into()
            } else {
                protocol.into()
            },
            certificate: cert.map(Into::into),
        }
    }

    fn hc() -> HealthCheck {
        HealthCheck {
            target: "TCP:30080".into(),
            healthy: 2,
            unhealthy: 6,
            timeout: 5,
            interval: 10,
        }
    }

    fn attrs() -> Attributes {
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
    }

    fn spec() -> ClassicSpec {
        ClassicSpec {
            listeners: vec![listener(80, "tcp", 30080, None)],
            health_check: hc(),
            attributes: attrs(),
            proxy_protocol: false,
            ssl_negotiation_policy: None,
            security_groups: SecurityGroups::Managed {
                ingress: BTreeSet::new(),
            },
            extra_security_groups: vec![],
        }
    }

    fn tags() -> Tags {
        [("kubernetes.io/cluster/blue".to_owned(), "owned".to_owned())].into()
    }

    fn desired(spec: &ClassicSpec) -> ClassicDesired<'_> {
        ClassicDesired {
            name: "a1",
            spec,
            internal: false,
            subnets: vec!["subnet-a".into(), "subnet-b".into()],
            security_groups: vec!["sg-elb".into()],
            instances: ["i-1".to_owned(), "i-2".to_owned()].into(),
            registrable: ["i-1".to_owned(), "i-2".to_owned()].into(),
            tags: tags(),
        }
    }

    /// The ELB exactly as `desired(spec())` wants it, as AWS answers it (upper-case protocols,
    /// AWS's defaults among the attributes, more tags than asked for).
    fn converged() -> ClassicObserved {
        let mut tags = tags();
        tags.insert("kubernetes.io/service-name".into(), "default/web".into());
        ClassicObserved {
            name: "a1".into(),
            dns_name: "a1-1.us-east-1.elb.amazonaws.com".into(),
            scheme: "internet-facing".into(),
            vpc_id: "vpc-1".into(),
            subnets: vec!["subnet-b".into(), "subnet-a".into()],
            security_groups: vec!["sg-elb".into()],
            listeners: vec![(
                Listener {
                    lb_port: 80,
                    protocol: "TCP".into(),
                    instance_port: 30080,
                    instance_protocol: "TCP".into(),
                    certificate: None,
                },
                vec![],
            )],
            health_check: Some(hc()),
            instances: ["i-1".to_owned(), "i-2".to_owned()].into(),
            backend_policies: BTreeMap::new(),
            policies: BTreeSet::new(),
            attributes: Some(ObservedAttributes {
                // AWS answers a draining timeout it was never given (upstream's DeepEqual trap).
                draining_timeout: Some(300),
                ..ObservedAttributes::aws_defaults()
            }),
            tags,
        }
    }

    #[test]
    fn an_unchanged_elb_needs_no_call() {
        let s = spec();
        assert_eq!(plan(&desired(&s), Some(&converged())), vec![]);
    }

    #[test]
    fn a_new_elb_is_created_with_its_health_check_and_instances() {
        let s = spec();
        let actions = plan(&desired(&s), None);
        assert_eq!(
            actions,
            vec![
                ClassicAction::Create {
                    listeners: s.listeners.clone(),
                    subnets: vec!["subnet-a".into(), "subnet-b".into()],
                    security_groups: vec!["sg-elb".into()],
                    internal: false,
                    tags: tags(),
                },
                ClassicAction::ConfigureHealthCheck(hc()),
                ClassicAction::Register(vec!["i-1".into(), "i-2".into()]),
            ]
        );
    }

    #[test]
    fn each_difference_is_one_call() {
        type Row = (
            &'static str,
            fn(&mut ClassicSpec, &mut ClassicObserved),
            Vec<ClassicAction>,
        );
        let rows: Vec<Row> = vec![
            (
                "a subnet to attach and one to detach",
                |_, o| o.subnets = vec!["subnet-a".into(), "subnet-old".into()],
                vec![
                    ClassicAction::DetachSubnets(vec!["subnet-old".into()]),
                    ClassicAction::AttachSubnets(vec!["subnet-b".into()]),
                ],
            ),
            (
                "security groups differ",
                |_, o| o.security_groups = vec!["sg-other".into()],
                vec![ClassicAction::ApplySecurityGroups(vec!["sg-elb".into()])],
            ),
            (
                "a listener's node port changed: deleted by port, created again",
                |s, _| s.listeners[0].instance_port = 30081,
                vec![
                    ClassicAction::DeleteListeners(vec![80]),
                    ClassicAction::CreateListeners(vec![listener(80, "tcp", 30081, None)]),
                ],
            ),
            (
                "a port added",
                |s, _| s.listeners.push(listener(443, "tcp", 30443, None)),
                vec![ClassicAction::CreateListeners(vec![listener(
                    443, "tcp", 30443, None,
                )])],
            ),
            (
                "the health check differs",
                |s, _| s.health_check.interval = 30,
                vec![ClassicAction::ConfigureHealthCheck(HealthCheck {
                    interval: 30,
                    ..hc()
                })],
            ),
            (
                "the idle timeout annotated",
                |s, _| s.attributes.idle_timeout = 300,
                vec![ClassicAction::ModifyAttributes(Attributes {
                    idle_timeout: 300,
                    ..attrs()
                })],
            ),
            (
                "an extra tag",
                |_, o| {
                    o.tags.remove("kubernetes.io/cluster/blue");
                },
                vec![ClassicAction::AddTags(tags())],
            ),
            (
                "an instance to register and one to deregister",
                |_, o| o.instances = ["i-1".to_owned(), "i-gone".to_owned()].into(),
                vec![
                    ClassicAction::Register(vec!["i-2".into()]),
                    ClassicAction::Deregister(vec!["i-gone".into()]),
                ],
            ),
        ];
        for (what, mutate, want) in rows {
            let mut s = spec();
            let mut o = converged();
            mutate(&mut s, &mut o);
            assert_eq!(plan(&desired(&s), Some(&o)), want, "{what}");
        }
    }

    #[test]
    fn the_scheme_is_never_changed_after_creation() {
        let s = spec();
        let mut d = desired(&s);
        d.internal = true;
        assert_eq!(plan(&d, Some(&converged())), vec![]);
    }

    #[test]
    fn a_node_change_is_at_most_one_register_and_one_deregister() {
        let set = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<BTreeSet<String>>();
        let list = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
        // (wanted, of those running, registered, calls)
        type Row = (
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
        );
        let rows: &[(Row, Vec<ClassicAction>)] = &[
            ((&["i-1"], &["i-1"], &["i-1"]), vec![]),
            (
                (&["i-1", "i-2", "i-3"], &["i-1", "i-2", "i-3"], &["i-1"]),
                vec![ClassicAction::Register(list(&["i-2", "i-3"]))],
            ),
            (
                (&["i-2"], &["i-2"], &["i-1"]),
                vec![
                    ClassicAction::Register(list(&["i-2"])),
                    ClassicAction::Deregister(list(&["i-1"])),
                ],
            ),
            // Stopped and wanted: neither registered nor taken out.
            ((&["i-1", "i-2"], &["i-1"], &["i-1"]), vec![]),
            ((&["i-1", "i-2"], &["i-1"], &["i-1", "i-2"]), vec![]),
            (
                (&[], &[], &["i-1"]),
                vec![ClassicAction::Deregister(list(&["i-1"]))],
            ),
        ];
        for ((wanted, running, registered), want) in rows {
            assert_eq!(
                &instance_actions(&set(wanted), &set(running), &set(registered)),
                want,
                "{wanted:?} {running:?} {registered:?}"
            );
        }
    }

    #[test]
    fn a_stopped_instance_is_neither_registered_nor_taken_out() {
        let s = spec();
        let mut d = desired(&s);
        d.instances.insert("i-stopped".into());
        d.registrable.remove("i-2");
        let mut o = converged();
        o.instances.insert("i-stopped".into());
        o.instances.remove("i-2");
        assert_eq!(plan(&d, Some(&o)), vec![]);
    }

    #[test]
    fn proxy_protocol_is_created_once_and_set_where_missing() {
        let mut s = spec();
        s.proxy_protocol = true;
        let o = converged();
        assert_eq!(
            plan(&desired(&s), Some(&o)),
            vec![
                ClassicAction::CreateProxyProtocolPolicy,
                ClassicAction::SetBackendPolicies {
                    port: 30080,
                    policies: vec![PROXY_PROTOCOL_POLICY.into()]
                },
            ]
        );
        let mut done = converged();
        done.policies.insert(PROXY_PROTOCOL_POLICY.into());
        done.backend_policies
            .insert(30080, vec![PROXY_PROTOCOL_POLICY.into()]);
        assert_eq!(
            plan(&desired(&s), Some(&done)),
            vec![],
            "upstream creates the policy on every sync"
        );
        // Turned off: taken off the port, other policies kept.
        done.backend_policies
            .insert(30080, vec!["custom".into(), PROXY_PROTOCOL_POLICY.into()]);
        done.backend_policies
            .insert(31000, vec![PROXY_PROTOCOL_POLICY.into()]);
        assert_eq!(
            plan(&desired(&spec()), Some(&done)),
            vec![
                ClassicAction::SetBackendPolicies {
                    port: 30080,
                    policies: vec!["custom".into()]
                },
                ClassicAction::SetBackendPolicies {
                    port: 31000,
                    policies: vec![]
                },
            ]
        );
    }

    #[test]
    fn the_ssl_policy_is_created_once_and_set_on_tls_listeners_that_lack_it() {
        let mut s = spec();
        s.listeners = vec![
            listener(443, "ssl", 30443, Some("arn:cert")),
            listener(80, "tcp", 30080, None),
        ];
        s.ssl_negotiation_policy = Some("ELBSecurityPolicy-2016-08".into());
        let name = "k8s-SSLNegotiationPolicy-ELBSecurityPolicy-2016-08".to_owned();
        let mut o = converged();
        o.listeners.push((
            Listener {
                lb_port: 443,
                protocol: "SSL".into(),
                instance_port: 30443,
                instance_protocol: "TCP".into(),
                certificate: Some("arn:cert".into()),
            },
            vec![],
        ));
        assert_eq!(
            plan(&desired(&s), Some(&o)),
            vec![
                ClassicAction::CreateSslNegotiationPolicy {
                    name: name.clone(),
                    reference: "ELBSecurityPolicy-2016-08".into()
                },
                ClassicAction::SetListenerPolicies {
                    port: 443,
                    policies: vec![name.clone()]
                },
            ]
        );
        o.policies.insert(name.clone());
        o.listeners[1].1 = vec![name];
        assert_eq!(
            plan(&desired(&s), Some(&o)),
            vec![],
            "upstream sets it on every sync"
        );
    }

    #[test]
    fn attributes_compare_only_what_the_service_sets() {
        let o = ObservedAttributes {
            access_log_enabled: true,
            access_log_emit_interval: Some(60),
            access_log_bucket: Some("logs".into()),
            access_log_prefix: Some(String::new()),
            draining_enabled: true,
            draining_timeout: Some(300),
            idle_timeout: Some(60),
            cross_zone: false,
        };
        let want = Attributes {
            access_log_enabled: true,
            access_log_bucket: Some("logs".into()),
            draining_enabled: true,
            ..attrs()
        };
        assert!(o.satisfy(&want));
        assert!(!o.satisfy(&Attributes {
            draining_timeout: Some(30),
            ..want.clone()
        }));
        assert!(!o.satisfy(&Attributes {
            access_log_bucket: Some("other".into()),
            ..want.clone()
        }));
        assert!(!o.satisfy(&Attributes {
            cross_zone: true,
            ..want
        }));
    }
}
