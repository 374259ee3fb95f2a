//! The floating IP of an external Service, decided as OCCM's `ensureFloatingIP` decides it
//! (reference §3.9): the one on the VIP port, else the `loadBalancerIP` claimed, else one made
//! with OCCM's description, which marks it as ours to delete with the load balancer. Pure: each
//! step decides on what the Neutron read before it returned, so the load balancers' `address`
//! makes only the reads a step asks for, in OCCM's order.

use super::{names, observed::LoadBalancer};
use crate::neutron::floating_ips::FloatingIp;

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
}
