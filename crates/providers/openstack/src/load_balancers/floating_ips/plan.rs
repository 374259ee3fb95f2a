//! The floating IP of an external Service, decided as OCCM's `ensureFloatingIP` decides it
//! (reference §3.9): the one on the VIP port, else the `loadBalancerIP` claimed, else one made
//! with OCCM's description, which marks it as ours to delete with the load balancer. Pure:
//! [`next`] decides from what Neutron answered so far ([`Reads`]) either the next read or what
//! is done, so the executor makes only the reads a step asks for, in OCCM's order.

use crate::{
    load_balancers::{floating_subnets::SubnetMatch, names},
    neutron::floating_ips::FloatingIp,
    octavia::model::LoadBalancer,
};

/// What the Service asks of its address, known before any read.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The converged load balancer whose address is settled.
    pub lb: &'a LoadBalancer,
    /// The name of the Service's own load balancer (`lb` is another's when shared).
    pub own_name: &'a str,
    pub internal: bool,
    pub keep_floating_ip: bool,
    /// `spec.loadBalancerIP`.
    pub requested_ip: Option<&'a str>,
    /// The floating subnet, when named by ID (`floating-subnet-id`).
    pub subnet_id: Option<&'a str>,
    /// The floating subnet's name pattern and tags, when it is chosen by them.
    pub subnet_match: Option<&'a SubnetMatch>,
}

/// What Neutron answered so far, each read once and only when [`next`] asks for it; `None` is
/// not read yet, `Some(None)` is read and absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    /// The floating IP on the VIP port.
    pub attached: Option<Option<FloatingIp>>,
    /// The floating IP with the requested address.
    pub requested: Option<Option<FloatingIp>>,
    /// The floating network (configured, else detected).
    pub network: Option<Option<String>>,
    /// The network of the floating subnet named by ID (`Some(None)`: no such subnet).
    pub subnet_network: Option<Option<String>>,
}

/// The next read, or what settles the address.
#[derive(Debug, Clone)]
pub enum Step<'a> {
    /// Read the floating IP on the VIP port.
    ReadAttached,
    /// Read the floating IP with this address (`spec.loadBalancerIP`).
    ReadRequested(&'a str),
    /// Read the floating network: the configured one, else the external network detected.
    ReadNetwork,
    /// Read the floating subnet with this ID, for its network.
    ReadSubnet(&'a str),
    /// The address is the VIP; a floating IP left on its port is released first.
    Vip { release: Option<Release<'a>> },
    /// The floating IP on the VIP port is the address (its identity recorded when missing).
    Attached(&'a FloatingIp),
    /// The requested floating IP is free: attached to the VIP port, it is the address.
    Claim(&'a FloatingIp),
    /// Make a floating IP on `network`'s subnet `subnet` (Neutron chooses when `None`); with
    /// `choose`, on the first subnet matching it that gives one.
    Create {
        network: &'a str,
        subnet: Option<&'a str>,
        choose: Option<&'a SubnetMatch>,
    },
    /// Not to be done: the reason, for the Service's Warning event.
    Refuse(String),
}

/// The next step for `asked`, after the reads `reads` (OCCM's order: the VIP port's floating
/// IP, the requested one, the floating network, the floating subnet).
pub fn next<'a>(asked: &Asked<'a>, reads: &'a Reads) -> Step<'a> {
    let Some(attached) = &reads.attached else {
        return Step::ReadAttached;
    };
    match on_vip(
        attached.as_ref(),
        asked.lb,
        asked.own_name,
        asked.internal,
        asked.keep_floating_ip,
    ) {
        OnVip::Vip { release } => return Step::Vip { release },
        OnVip::Attached(fip) => return Step::Attached(fip),
        OnVip::Refuse(why) => return Step::Refuse(why),
        OnVip::Find => {}
    }
    if let Some(address) = asked.requested_ip {
        let Some(found) = &reads.requested else {
            return Step::ReadRequested(address);
        };
        match requested(found.as_ref(), address) {
            Requested::Create => {}
            Requested::Refuse(why) => return Step::Refuse(why),
            Requested::Attach(fip) => return Step::Claim(fip),
        }
    }
    let Some(network) = &reads.network else {
        return Step::ReadNetwork;
    };
    let Some(network) = network else {
        return Step::Refuse(NO_EXTERNAL_NETWORK.into());
    };
    if let Some(id) = asked.subnet_id {
        let Some(of) = &reads.subnet_network else {
            return Step::ReadSubnet(id);
        };
        if let Err(why) = check_floating_subnet(id, of.as_deref(), network) {
            return Step::Refuse(why);
        }
    }
    Step::Create {
        network,
        subnet: asked.subnet_id,
        // OCCM: a pattern or tags choose among the network's subnets, unless an address is asked.
        choose: asked.subnet_match.filter(|_| asked.requested_ip.is_none()),
    }
}

/// The refusal when the floating network has no subnet matching `spec` to try.
pub fn no_matching_subnet(network: &str, spec: &SubnetMatch) -> String {
    format!(
        "no subnet of the floating network {network} matches the floating subnet {spec} (Neutron shows a \
         project only the subnets of an external network it owns, or that are shared with it)"
    )
}

/// What the floating IP on the VIP port (the first read) decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnVip<'a> {
    /// The address is the VIP (an internal Service, or an IPv6 VIP, which takes no floating IP);
    /// a floating IP left on the port from when it was external is released.
    Vip { release: Option<Release<'a>> },
    /// The floating IP on the VIP port is the address.
    Attached(&'a FloatingIp),
    /// None is attached: claim the requested one ([`requested`]) or make one.
    Find,
    /// Not this Service's to make: the reason.
    Refuse(String),
}

/// How a floating IP leaves a VIP port that no longer takes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release<'a> {
    /// Made for the Service (and not `keep-floatingip`): deleted.
    Delete(&'a FloatingIp),
    /// The user's own: only detached.
    Detach(&'a FloatingIp),
}

/// The step after reading the floating IP `attached` to the VIP port of `lb`, the load balancer
/// of the Service whose own load balancer is named `own_name`.
pub fn on_vip<'a>(
    attached: Option<&'a FloatingIp>,
    lb: &LoadBalancer,
    own_name: &str,
    internal: bool,
    keep_floating_ip: bool,
) -> OnVip<'a> {
    if internal || lb.vip_address.contains(':') {
        let release = attached.map(|fip| {
            if names::is_created(fip) && !keep_floating_ip {
                Release::Delete(fip)
            } else {
                Release::Detach(fip)
            }
        });
        return OnVip::Vip { release };
    }
    if let Some(fip) = attached {
        return OnVip::Attached(fip);
    }
    if lb.name != own_name {
        // OCCM: a Service sharing another's load balancer never makes its floating IP.
        return OnVip::Refuse(format!(
            "load balancer {} is shared and has no floating IP: only its owner Service ({}) makes one",
            lb.id, lb.name
        ));
    }
    OnVip::Find
}

/// What the floating IP with the requested `address` (`spec.loadBalancerIP`, read when asked)
/// decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested<'a> {
    /// Free: attached to the VIP port, it is the address.
    Attach(&'a FloatingIp),
    /// Attached elsewhere: the reason.
    Refuse(String),
    /// The project has no such floating IP: one is made with that address.
    Create,
}

/// The step after reading the floating IP with the requested `address`.
pub fn requested<'a>(found: Option<&'a FloatingIp>, address: &str) -> Requested<'a> {
    match found {
        None => Requested::Create,
        Some(fip) if fip.port_id.as_deref().is_some_and(|p| !p.is_empty()) => Requested::Refuse(format!(
            "floating IP {address} (spec.loadBalancerIP) is attached to another port"
        )),
        Some(fip) => Requested::Attach(fip),
    }
}

/// The refusal when no external network is configured or found.
pub const NO_EXTERNAL_NETWORK: &str = "no external network for the Service's floating IP: set [LoadBalancer] \
     floating-network-id or the loadbalancer.openstack.org/floating-network-id annotation, or make the Service \
     internal (service.beta.kubernetes.io/openstack-internal-load-balancer: \"true\")";

/// Whether floating subnet `id`, read as a subnet of network `of` (`None`: no such subnet), may
/// give a floating IP of the floating network `network`.
pub fn check_floating_subnet(id: &str, of: Option<&str>, network: &str) -> Result<(), String> {
    if of == Some(network) {
        Ok(())
    } else {
        Err(format!(
            "floating subnet {id} is not a subnet of the floating network {network}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fip(id: &str, port: Option<&str>, description: &str) -> FloatingIp {
        FloatingIp {
            id: id.into(),
            floating_ip_address: format!("172.24.4.{}", id.len()),
            port_id: port.map(str::to_owned),
            description: Some(description.into()),
            ..FloatingIp::default()
        }
    }

    #[test]
    fn the_floating_ip_on_the_vip_port_decides_first() {
        let made = fip(
            "made",
            Some("vip"),
            &names::floating_ip_description("c", "default", "web"),
        );
        let users = fip("users", Some("vip"), "reserved for the web site");
        let lb = |name: &str, vip: &str| LoadBalancer {
            id: "lb-1".into(),
            name: name.into(),
            vip_address: vip.into(),
            ..LoadBalancer::default()
        };
        let own = lb("own", "10.0.0.5");
        let v6 = lb("own", "fd00::5");
        let shared = lb("other", "10.0.0.5");
        // (case, attached, load balancer, internal, keep-floatingip, step)
        let cases = [
            (
                "internal, none attached",
                None,
                &own,
                true,
                false,
                OnVip::Vip { release: None },
            ),
            (
                "internal, ours attached: deleted",
                Some(&made),
                &own,
                true,
                false,
                OnVip::Vip {
                    release: Some(Release::Delete(&made)),
                },
            ),
            (
                "internal, ours kept: detached",
                Some(&made),
                &own,
                true,
                true,
                OnVip::Vip {
                    release: Some(Release::Detach(&made)),
                },
            ),
            (
                "internal, the user's: detached",
                Some(&users),
                &own,
                true,
                false,
                OnVip::Vip {
                    release: Some(Release::Detach(&users)),
                },
            ),
            (
                "an IPv6 VIP takes none",
                Some(&made),
                &v6,
                false,
                false,
                OnVip::Vip {
                    release: Some(Release::Delete(&made)),
                },
            ),
            (
                "external, attached",
                Some(&users),
                &own,
                false,
                false,
                OnVip::Attached(&users),
            ),
            (
                "external, attached, shared",
                Some(&users),
                &shared,
                false,
                false,
                OnVip::Attached(&users),
            ),
            ("external, none attached", None, &own, false, false, OnVip::Find),
        ];
        for (case, attached, lb, internal, keep, want) in cases {
            assert_eq!(on_vip(attached, lb, "own", internal, keep), want, "{case}");
        }
        match on_vip(None, &shared, "own", false, false) {
            OnVip::Refuse(why) => assert!(why.contains("only its owner Service (other)"), "{why}"),
            other => panic!("a sharer makes no floating IP: {other:?}"),
        }
    }

    #[test]
    fn the_requested_address_is_claimed_only_when_free() {
        let free = fip("free", None, "");
        let unset = fip("unset", Some(""), "");
        let taken = fip("taken", Some("other-port"), "");
        assert_eq!(requested(None, "172.24.4.9"), Requested::Create);
        assert_eq!(requested(Some(&free), "172.24.4.9"), Requested::Attach(&free));
        assert_eq!(requested(Some(&unset), "172.24.4.9"), Requested::Attach(&unset));
        match requested(Some(&taken), "172.24.4.9") {
            Requested::Refuse(why) => assert!(why.contains("172.24.4.9 (spec.loadBalancerIP)"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_floating_subnet_must_be_on_the_floating_network() {
        assert_eq!(check_floating_subnet("s", Some("public"), "public"), Ok(()));
        for of in [Some("private"), None] {
            let why = check_floating_subnet("s", of, "public").unwrap_err();
            assert!(
                why.contains("floating subnet s is not a subnet of the floating network public"),
                "{why}"
            );
        }
    }

    /// What Neutron holds, answered to the reads [`next`] asks for.
    #[derive(Default)]
    struct Cloud {
        attached: Option<FloatingIp>,
        requested: Option<FloatingIp>,
        network: Option<String>,
        subnet_network: Option<String>,
    }

    /// The steps [`next`] takes on `cloud` (the reads, then how it ends), as an executor makes them.
    fn walk(asked: &Asked<'_>, cloud: &Cloud) -> Vec<String> {
        let mut reads = Reads::default();
        let mut steps = Vec::new();
        loop {
            let step = next(asked, &reads);
            steps.push(match &step {
                Step::ReadAttached => "read attached".to_owned(),
                Step::ReadRequested(a) => format!("read requested {a}"),
                Step::ReadNetwork => "read network".to_owned(),
                Step::ReadSubnet(id) => format!("read subnet {id}"),
                Step::Vip { release: None } => "vip".to_owned(),
                Step::Vip {
                    release: Some(Release::Delete(f)),
                } => format!("vip, delete {}", f.id),
                Step::Vip {
                    release: Some(Release::Detach(f)),
                } => format!("vip, detach {}", f.id),
                Step::Attached(f) => format!("attached {}", f.id),
                Step::Claim(f) => format!("claim {}", f.id),
                Step::Create {
                    network,
                    subnet,
                    choose,
                } => format!(
                    "create on {network}, subnet {subnet:?}, choose {:?}",
                    choose.map(ToString::to_string)
                ),
                Step::Refuse(why) => format!("refuse: {why}"),
            });
            match step {
                Step::ReadAttached => reads.attached = Some(cloud.attached.clone()),
                Step::ReadRequested(_) => reads.requested = Some(cloud.requested.clone()),
                Step::ReadNetwork => reads.network = Some(cloud.network.clone()),
                Step::ReadSubnet(_) => reads.subnet_network = Some(cloud.subnet_network.clone()),
                _ => return steps,
            }
            assert!(steps.len() < 10, "a plan that never ends: {steps:?}");
        }
    }

    #[test]
    fn each_read_is_made_only_when_the_next_decision_needs_it_in_occms_order() {
        let own = LoadBalancer {
            id: "lb-1".into(),
            name: "own".into(),
            vip_address: "10.0.0.5".into(),
            ..LoadBalancer::default()
        };
        let shared = LoadBalancer {
            name: "other".into(),
            ..own.clone()
        };
        let pattern = SubnetMatch::parse(Some("public-*"), None).unwrap();
        let external = Asked {
            lb: &own,
            own_name: "own",
            internal: false,
            keep_floating_ip: false,
            requested_ip: None,
            subnet_id: None,
            subnet_match: None,
        };
        let made = fip(
            "made",
            Some("vip"),
            &names::floating_ip_description("c", "default", "web"),
        );
        let free = fip("free", None, "");
        let taken = fip("taken", Some("other-port"), "");
        let public = || Some("public".to_owned());
        let no_network = format!("refuse: {NO_EXTERNAL_NETWORK}");
        // (case, asked, cloud, steps)
        let cases: Vec<(&str, Asked<'_>, Cloud, Vec<&str>)> = vec![
            (
                "internal: the VIP, one read",
                Asked {
                    internal: true,
                    ..external
                },
                Cloud::default(),
                vec!["read attached", "vip"],
            ),
            (
                "internal, ours left attached: deleted",
                Asked {
                    internal: true,
                    ..external
                },
                Cloud {
                    attached: Some(made.clone()),
                    ..Cloud::default()
                },
                vec!["read attached", "vip, delete made"],
            ),
            (
                "attached: no other read",
                external,
                Cloud {
                    attached: Some(free.clone()),
                    ..Cloud::default()
                },
                vec!["read attached", "attached free"],
            ),
            (
                "a sharer with none attached makes none",
                Asked {
                    lb: &shared,
                    ..external
                },
                Cloud::default(),
                vec![
                    "read attached",
                    "refuse: load balancer lb-1 is shared and has no floating IP: only its owner Service (other) makes one",
                ],
            ),
            (
                "the requested address, free: claimed before the network is read",
                Asked {
                    requested_ip: Some("172.24.4.9"),
                    ..external
                },
                Cloud {
                    requested: Some(free.clone()),
                    ..Cloud::default()
                },
                vec!["read attached", "read requested 172.24.4.9", "claim free"],
            ),
            (
                "the requested address, attached elsewhere",
                Asked {
                    requested_ip: Some("172.24.4.9"),
                    ..external
                },
                Cloud {
                    requested: Some(taken),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read requested 172.24.4.9",
                    "refuse: floating IP 172.24.4.9 (spec.loadBalancerIP) is attached to another port",
                ],
            ),
            (
                "the requested address, not the project's: made with it, Neutron's subnet",
                Asked {
                    requested_ip: Some("172.24.4.9"),
                    subnet_match: Some(&pattern),
                    ..external
                },
                Cloud {
                    network: public(),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read requested 172.24.4.9",
                    "read network",
                    "create on public, subnet None, choose None",
                ],
            ),
            (
                "no floating network",
                external,
                Cloud::default(),
                vec!["read attached", "read network", &no_network],
            ),
            (
                "made on the network",
                external,
                Cloud {
                    network: public(),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read network",
                    "create on public, subnet None, choose None",
                ],
            ),
            (
                "made on the subnet named by ID, read after the network",
                Asked {
                    subnet_id: Some("s-1"),
                    ..external
                },
                Cloud {
                    network: public(),
                    subnet_network: public(),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read network",
                    "read subnet s-1",
                    "create on public, subnet Some(\"s-1\"), choose None",
                ],
            ),
            (
                "a subnet named by ID on another network",
                Asked {
                    subnet_id: Some("s-1"),
                    ..external
                },
                Cloud {
                    network: public(),
                    subnet_network: Some("private".into()),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read network",
                    "read subnet s-1",
                    "refuse: floating subnet s-1 is not a subnet of the floating network public",
                ],
            ),
            (
                "made on a subnet chosen by its name",
                Asked {
                    subnet_match: Some(&pattern),
                    ..external
                },
                Cloud {
                    network: public(),
                    ..Cloud::default()
                },
                vec![
                    "read attached",
                    "read network",
                    "create on public, subnet None, choose Some(\"name \\\"public-*\\\"\")",
                ],
            ),
        ];
        for (case, asked, cloud, want) in &cases {
            assert_eq!(walk(asked, cloud), *want, "{case}");
        }
    }

    #[test]
    fn no_matching_subnet_names_the_network_and_the_pattern() {
        let spec = SubnetMatch::parse(Some("public-*"), Some("&a,b")).unwrap();
        let why = no_matching_subnet("net-1", &spec);
        assert!(
            why.contains("floating network net-1") && why.contains("name \"public-*\", tags \"&a,b\""),
            "{why}"
        );
    }
}
