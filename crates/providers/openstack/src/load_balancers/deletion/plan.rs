//! What deleting a Service's load balancer does, decided from what Neutron and Octavia answered
//! so far: pure. [`next`] names the next read, or the one thing done: what is deleted (the load
//! balancer whole, by cascade, after the floating IP made for it), what is left (another
//! cluster's load balancer, a shared one's other listeners, a kept or the user's floating IP),
//! or the one write that takes the Service off a shared load balancer.

use crate::{
    load_balancers::{
        names,
        ownership::{self, Owner},
        plan::Write,
        sharing,
    },
    neutron::floating_ips::FloatingIp,
    octavia::model::{LoadBalancer, Tree},
};

/// What the deleted Service is, known before any read.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The name of the Service's own load balancer.
    pub lb_name: &'a str,
    pub cluster: &'a str,
    /// This cluster's identity (empty: none).
    pub cluster_id: &'a str,
    /// `keep-floatingip`: the floating IP made for it outlives the load balancer.
    pub keep_floating_ip: bool,
    /// Whether Octavia takes tags (what tells a shared load balancer's Services apart).
    pub tags_supported: bool,
}

/// What the reads found, each made once and only when [`next`] asks for it (`None`: not read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    /// The Service's load balancer, as found by the first read (always made): `None`, gone.
    pub load_balancer: Option<LoadBalancer>,
    /// With the load balancer gone, the floating IPs bearing the Service's description.
    pub left_floating_ips: Option<Vec<FloatingIp>>,
    /// The load balancer with what is under it, when the Service may only leave it.
    pub tree: Option<Tree>,
    /// The floating IP on the VIP port of the load balancer deleted whole.
    pub vip_floating_ip: Option<Option<FloatingIp>>,
}

/// The next read, or what the delete does (every end but [`Step::Wait`], [`Step::Leave`] and
/// [`Step::Delete`] then deletes the Service's security group, whoever's the load balancer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'a> {
    /// Read the floating IPs bearing the Service's description.
    ReadLeftFloatingIps,
    /// Read what is under this load balancer.
    ReadTree(&'a LoadBalancer),
    /// Read the floating IP on this VIP port.
    ReadVipFloatingIp(&'a str),
    /// The load balancer is gone (also when deleted by hand): these floating IPs made for it and
    /// left unattached go too (OCCM leaks them).
    Gone { floating_ips: Vec<&'a FloatingIp> },
    /// Another cluster's: left alone.
    OtherCluster { lb: &'a LoadBalancer, whose: String },
    /// Another Service's, and no tags to tell what is this one's: never touched.
    Untouched,
    /// Nothing of the Service's is left on the shared load balancer.
    Left,
    /// Octavia is applying a change to it: ask again.
    Wait { lb: &'a LoadBalancer, why: String },
    /// One write taking the Service off the shared load balancer `lb`.
    Leave { lb: &'a LoadBalancer, write: Write },
    /// Delete `lb` whole (cascade), after `floating_ip`, made for it and not kept.
    Delete {
        lb: &'a LoadBalancer,
        floating_ip: Option<&'a FloatingIp>,
    },
}

/// The next step of deleting `asked`'s load balancer, after the reads `reads`.
pub fn next<'a>(asked: &Asked<'_>, reads: &'a Reads) -> Step<'a> {
    let Some(lb) = &reads.load_balancer else {
        return gone(asked, reads);
    };
    if let Owner::OtherCluster { whose } =
        ownership::owner(&lb.tags, &lb.description, asked.cluster, asked.cluster_id)
    {
        return Step::OtherCluster { lb, whose };
    }
    let own = lb.name == asked.lb_name;
    if !own && !asked.tags_supported {
        return Step::Untouched;
    }
    if lb.is_pending() {
        return Step::Wait {
            lb,
            why: format!("load balancer {} is {}", lb.id, lb.provisioning_status),
        };
    }
    let whole = if own && sharing::goes_with(lb, asked.lb_name) {
        lb
    } else {
        // Shared, another Service's, or not made for a Service: only what is this Service's
        // leaves it; the last one on a load balancer whose owner went takes it.
        let Some(tree) = &reads.tree else {
            return Step::ReadTree(lb);
        };
        let on = &tree.load_balancer;
        let write = match sharing::next_leave(tree, asked.lb_name) {
            sharing::Leave::Done if sharing::last_one_takes_it(tree, asked.lb_name) => None,
            sharing::Leave::Done => return Step::Left,
            sharing::Leave::DeletePool { id } => Some(Write::DeletePool { id }),
            sharing::Leave::DeleteListener { id } => Some(Write::DeleteListener { id }),
            sharing::Leave::Untag { tags } => Some(Write::TagLoadBalancer {
                id: lb.id.clone(),
                tags,
            }),
        };
        if let Some(write) = write {
            return Step::Leave { lb: on, write };
        }
        on
    };
    let floating_ip = if asked.keep_floating_ip {
        None
    } else {
        let Some(on_vip) = &reads.vip_floating_ip else {
            return Step::ReadVipFloatingIp(&whole.vip_port_id);
        };
        on_vip.as_ref().filter(|fip| names::is_created(fip))
    };
    Step::Delete {
        lb: whole,
        floating_ip,
    }
}

/// The load balancer is gone: the floating IPs made for it, unattached and not another
/// cluster's, go unless kept.
fn gone<'a>(asked: &Asked<'_>, reads: &'a Reads) -> Step<'a> {
    if asked.keep_floating_ip {
        return Step::Gone {
            floating_ips: Vec::new(),
        };
    }
    let Some(left) = &reads.left_floating_ips else {
        return Step::ReadLeftFloatingIps;
    };
    let floating_ips = left
        .iter()
        .filter(|fip| {
            let whose = ownership::owner(
                &fip.tags,
                fip.description.as_deref().unwrap_or_default(),
                asked.cluster,
                asked.cluster_id,
            );
            fip.port_id.as_deref().is_none_or(str::is_empty) && !matches!(whose, Owner::OtherCluster { .. })
        })
        .collect();
    Step::Gone { floating_ips }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::octavia::model::{IdOnly, Listener, Pool};

    const OWN: &str = "kube_service_k_default_web";
    const OTHER: &str = "kube_service_k_default_other";

    fn lb(name: &str, tags: &[&str], status: &str) -> LoadBalancer {
        LoadBalancer {
            id: "lb-1".into(),
            name: name.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            provisioning_status: status.into(),
            vip_port_id: "vip".into(),
            ..LoadBalancer::default()
        }
    }

    fn fip(id: &str, port: Option<&str>, description: &str, tags: &[&str]) -> FloatingIp {
        FloatingIp {
            id: id.into(),
            port_id: port.map(str::to_owned),
            description: Some(description.into()),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..FloatingIp::default()
        }
    }

    /// What Octavia and Neutron hold, answered to the reads [`next`] asks for.
    struct Cloud {
        load_balancer: Option<LoadBalancer>,
        left: Vec<FloatingIp>,
        listeners: Vec<Listener>,
        pools: Vec<Pool>,
        on_vip: Option<FloatingIp>,
    }

    fn cloud(load_balancer: Option<LoadBalancer>) -> Cloud {
        Cloud {
            load_balancer,
            left: Vec::new(),
            listeners: Vec::new(),
            pools: Vec::new(),
            on_vip: None,
        }
    }

    /// The steps [`next`] takes on `cloud` (its reads, then how it ends), as the executor makes them.
    fn walk(asked: &Asked<'_>, cloud: &Cloud) -> Vec<String> {
        let mut reads = Reads {
            load_balancer: cloud.load_balancer.clone(),
            ..Reads::default()
        };
        let mut steps = Vec::new();
        loop {
            let step = next(asked, &reads);
            let ids = |fips: &[&FloatingIp]| fips.iter().map(|f| f.id.clone()).collect::<Vec<_>>().join(",");
            steps.push(match &step {
                Step::ReadLeftFloatingIps => "read left floating IPs".to_owned(),
                Step::ReadTree(lb) => format!("read tree of {}", lb.id),
                Step::ReadVipFloatingIp(port) => format!("read floating IP on {port}"),
                Step::Gone { floating_ips } => format!("gone, delete [{}]", ids(floating_ips)),
                Step::OtherCluster { whose, .. } => format!("other cluster's: {whose}"),
                Step::Untouched => "untouched".to_owned(),
                Step::Left => "left".to_owned(),
                Step::Wait { why, .. } => format!("wait: {why}"),
                Step::Leave { lb, write } => format!("leave {}: {write:?}", lb.id),
                Step::Delete { lb, floating_ip } => format!(
                    "delete {} after [{}]",
                    lb.id,
                    floating_ip.map(|f| f.id.as_str()).unwrap_or_default()
                ),
            });
            match step {
                Step::ReadLeftFloatingIps => reads.left_floating_ips = Some(cloud.left.clone()),
                Step::ReadTree(lb) => {
                    reads.tree = Some(Tree {
                        load_balancer: lb.clone(),
                        listeners: cloud.listeners.clone(),
                        pools: cloud.pools.clone(),
                    });
                }
                Step::ReadVipFloatingIp(_) => reads.vip_floating_ip = Some(cloud.on_vip.clone()),
                _ => return steps,
            }
            assert!(steps.len() < 10, "a plan that never ends: {steps:?}");
        }
    }

    #[test]
    fn a_delete_reads_only_what_it_needs_deletes_what_is_the_services_and_leaves_the_rest() {
        let asked = Asked {
            lb_name: OWN,
            cluster: "k",
            cluster_id: "id-1",
            keep_floating_ip: false,
            tags_supported: true,
        };
        let kept = Asked {
            keep_floating_ip: true,
            ..asked
        };
        let no_tags = Asked {
            tags_supported: false,
            ..asked
        };
        let made = names::floating_ip_description("k", "default", "web");
        let joined = lb(OTHER, &[OTHER, OWN], "ACTIVE");
        let mine_on_shared = Listener {
            id: "l-mine".into(),
            tags: vec![OWN.into()],
            default_pool_id: "p-mine".into(),
            ..Listener::default()
        };
        let pool = Pool {
            id: "p-mine".into(),
            listeners: vec![IdOnly { id: "l-mine".into() }],
            ..Pool::default()
        };
        // (case, asked, cloud, steps)
        let cases: Vec<(&str, Asked<'_>, Cloud, Vec<&str>)> = vec![
            (
                "gone: the floating IPs made for it, unattached and not another cluster's, go",
                asked,
                Cloud {
                    left: vec![
                        fip("free", None, &made, &[]),
                        fip("unset", Some(""), &made, &[]),
                        fip("attached", Some("port"), &made, &[]),
                        fip("theirs", None, &made, &["kube_cluster_id_id-2"]),
                    ],
                    ..cloud(None)
                },
                vec!["read left floating IPs", "gone, delete [free,unset]"],
            ),
            (
                "gone, kept: nothing read",
                kept,
                cloud(None),
                vec!["gone, delete []"],
            ),
            (
                "another cluster's: left alone",
                asked,
                cloud(Some(lb(OWN, &[OWN, "kube_cluster_id_id-2"], "ACTIVE"))),
                vec!["other cluster's: the cluster with identity id-2"],
            ),
            (
                "another Service's, no tags to tell: untouched",
                no_tags,
                cloud(Some(joined.clone())),
                vec!["untouched"],
            ),
            (
                "pending: wait, before any read",
                asked,
                cloud(Some(lb(OWN, &[OWN], "PENDING_UPDATE"))),
                vec!["wait: load balancer lb-1 is PENDING_UPDATE"],
            ),
            (
                "its own: the floating IP made for it, then the load balancer",
                asked,
                Cloud {
                    on_vip: Some(fip("made", Some("vip"), &made, &[])),
                    ..cloud(Some(lb(OWN, &[OWN], "ACTIVE")))
                },
                vec!["read floating IP on vip", "delete lb-1 after [made]"],
            ),
            (
                "its own, the user's floating IP on it: left",
                asked,
                Cloud {
                    on_vip: Some(fip("users", Some("vip"), "the web site's", &[])),
                    ..cloud(Some(lb(OWN, &[OWN], "ACTIVE")))
                },
                vec!["read floating IP on vip", "delete lb-1 after []"],
            ),
            (
                "its own, keep-floatingip: not read",
                kept,
                cloud(Some(lb(OWN, &[OWN], "ACTIVE"))),
                vec!["delete lb-1 after []"],
            ),
            (
                "joined another's: its pool first",
                asked,
                Cloud {
                    listeners: vec![mine_on_shared.clone()],
                    pools: vec![pool],
                    ..cloud(Some(joined.clone()))
                },
                vec!["read tree of lb-1", "leave lb-1: DeletePool { id: \"p-mine\" }"],
            ),
            (
                "joined another's: its listener once its pool went",
                asked,
                Cloud {
                    listeners: vec![mine_on_shared],
                    ..cloud(Some(joined.clone()))
                },
                vec![
                    "read tree of lb-1",
                    "leave lb-1: DeleteListener { id: \"l-mine\" }",
                ],
            ),
            (
                "joined another's: its tag last",
                asked,
                cloud(Some(joined.clone())),
                vec![
                    "read tree of lb-1",
                    "leave lb-1: TagLoadBalancer { id: \"lb-1\", tags: [\"kube_service_k_default_other\"] }",
                ],
            ),
            (
                "the last one on a load balancer whose owner went: its tag off first",
                asked,
                cloud(Some(lb(OTHER, &[OWN], "ACTIVE"))),
                vec![
                    "read tree of lb-1",
                    "leave lb-1: TagLoadBalancer { id: \"lb-1\", tags: [] }",
                ],
            ),
            (
                "joined another's, nothing of it left: the others' stay",
                asked,
                cloud(Some(lb(OTHER, &[OTHER], "ACTIVE"))),
                vec!["read tree of lb-1", "left"],
            ),
            (
                "the last one on a load balancer whose owner went, untagged, takes it",
                asked,
                Cloud {
                    on_vip: Some(fip("made", Some("vip"), &made, &[])),
                    ..cloud(Some(lb(OTHER, &[], "ACTIVE")))
                },
                vec![
                    "read tree of lb-1",
                    "read floating IP on vip",
                    "delete lb-1 after [made]",
                ],
            ),
            (
                "its own, shared with another: leaves it, the other keeps it",
                asked,
                cloud(Some(lb(OWN, &[OWN, OTHER], "ACTIVE"))),
                vec![
                    "read tree of lb-1",
                    "leave lb-1: TagLoadBalancer { id: \"lb-1\", tags: [\"kube_service_k_default_other\"] }",
                ],
            ),
        ];
        for (case, asked, cloud, want) in &cases {
            assert_eq!(walk(asked, cloud), *want, "{case}");
        }
    }
}
