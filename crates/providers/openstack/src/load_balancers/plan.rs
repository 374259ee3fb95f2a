//! The next Octavia write that brings a Service's existing load balancer closer to what the
//! Service asks, or why none is made. Pure.
//!
//! Octavia makes a load balancer immutable (`PENDING_UPDATE`) after every write to it or to
//! anything under it, until its worker has applied the change. OCCM polls for `ACTIVE` after
//! each write, inside the sync, for up to ~271 s (reference §3.13). Here a sync makes at most
//! one Octavia write and returns; the caller answers "in progress, ask again" and the next sync
//! reads what Octavia now reports and plans again. A crash between two writes loses nothing:
//! the plan is always made from what exists.
//!
//! What is compared is what OCCM compares (§3.6–§3.8), so a load balancer OCCM built and left
//! converged plans no write. Where OCCM misses a difference this plan makes the write:
//! - a listener on a port whose protocol changed (`x-forwarded-for` switched) is deleted and
//!   made again; OCCM tries to create the new one beside it, which Octavia refuses, forever;
//! - adding the Service's tag to a listener keeps the listener's other tags (OCCM drops them);
//! - `sessionAffinity` changed after creation is applied (OCCM never applies it);
//! - a member's `monitor_port` is only expected where an HTTP monitor uses it, so the members
//!   of a UDP pool on Octavia < 2.16 (or on ovn) are not re-sent on every sync, as OCCM
//!   re-sends them.

use std::collections::BTreeSet;

use provider::{Protocol, ServicePort};

use super::{
    desired,
    ownership::{self, Owner},
    sharing,
};
use crate::octavia::model::{self as observed, Tree};

/// Why a sync stops without a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The load balancer is as the Service asks.
    Converged,
    /// Octavia is still applying an earlier write: ask again later.
    Wait(String),
    /// The next write.
    Write(Write),
    /// The load balancer cannot be made as asked without taking something that is not this
    /// Service's: the reason, for the Service's Warning event.
    Refuse(String),
}

/// One Octavia write. Indexes are the Service's port indexes (into the desired listeners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// This Service's load balancer is in `ERROR`: delete it (cascade) to make it again.
    DeleteErrored { id: String },
    /// Add the Service's name to the load balancer's tags (every other tag kept).
    TagLoadBalancer { id: String, tags: Vec<String> },
    /// A pool of this Service's that must go: its listener goes, or its protocol changed.
    DeletePool { id: String },
    /// A listener of this Service's that no port asks for (its pool already gone).
    DeleteListener { id: String },
    /// The port's listener (its pool, members and monitor follow as writes of their own:
    /// Octavia takes children only in a load balancer's fully populated create).
    CreateListener { index: usize },
    /// Change what differs on the port's listener.
    UpdateListener {
        id: String,
        index: usize,
        update: ListenerUpdate,
    },
    /// The port's pool under its listener (members and monitor follow).
    CreatePool { listener_id: String, index: usize },
    /// Change the port's pool's algorithm or session persistence.
    UpdatePool { id: String, index: usize },
    /// Replace the port's pool's members (Octavia's batch update).
    SetMembers { pool_id: String, index: usize },
    /// Create one member of the port's pool (serial member calls).
    CreateMember {
        pool_id: String,
        index: usize,
        member: usize,
    },
    /// Delete one member no node asks for (serial member calls).
    DeleteMember { pool_id: String, id: String },
    /// Create the port's pool's monitor.
    CreateMonitor { pool_id: String, index: usize },
    /// Change the monitor's name, delays or retries.
    UpdateMonitor { id: String, index: usize },
    /// A monitor no longer asked for, or of another type (made again after).
    DeleteMonitor { id: String },
}

impl Write {
    /// The Octavia call it makes (the dry run's record, the logs).
    pub fn call(&self) -> &'static str {
        match self {
            Self::DeleteErrored { .. } => "delete_load_balancer",
            Self::TagLoadBalancer { .. } => "update_load_balancer",
            Self::DeletePool { .. } => "delete_pool",
            Self::DeleteListener { .. } => "delete_listener",
            Self::CreateListener { .. } => "create_listener",
            Self::UpdateListener { .. } => "update_listener",
            Self::CreatePool { .. } => "create_pool",
            Self::UpdatePool { .. } => "update_pool",
            Self::SetMembers { .. } => "batch_update_members",
            Self::CreateMember { .. } => "create_member",
            Self::DeleteMember { .. } => "delete_member",
            Self::CreateMonitor { .. } => "create_health_monitor",
            Self::UpdateMonitor { .. } => "update_health_monitor",
            Self::DeleteMonitor { .. } => "delete_health_monitor",
        }
    }

    /// The TLS reference this write hands Octavia, if any (checked in Barbican first).
    pub fn tls_reference<'a>(&'a self, want: &'a [desired::Listener]) -> Option<&'a str> {
        match self {
            Self::CreateListener { index } => want.get(*index)?.default_tls_container_ref.as_deref(),
            Self::UpdateListener { update, .. } => update.default_tls_container_ref.as_deref(),
            _ => None,
        }
    }
}

/// The fields of a listener that differ (`None`: unchanged).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenerUpdate {
    pub connection_limit: Option<i32>,
    pub x_forwarded_for: Option<bool>,
    pub timeouts: Option<super::service_conf::Timeouts>,
    pub allowed_cidrs: Option<Vec<String>>,
    /// The listener's tags with the Service's added.
    pub tags: Option<Vec<String>>,
    /// A new certificate (another Barbican container or secret): one listener write, as OCCM.
    pub default_tls_container_ref: Option<String>,
}

/// The L4 family Octavia keeps listener ports unique in: a second listener on a port of the
/// same family is refused.
fn port_family(listener_protocol: &str) -> &str {
    match listener_protocol {
        "UDP" => "UDP",
        "SCTP" => "SCTP",
        _ => "TCP",
    }
}

fn k8s_family(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// Whether `listener` is the Service's (named `lb_name`): tagged with its name, or untagged on
/// a load balancer it owns (made before listeners were tagged), as OCCM decides.
pub fn is_services_listener(listener: &observed::Listener, lb_name: &str, owner: bool) -> bool {
    listener.tags.iter().any(|t| t == lb_name) || (listener.tags.is_empty() && owner)
}

/// Whether an observed `allowed_cidrs` is what `want` asks: as sets, where no list at all is
/// "everything".
fn same_cidrs(have: &[String], want: &[String]) -> bool {
    let everything = |l: &[String]| l.is_empty() || l.iter().all(|c| c == "0.0.0.0/0" || c == "::/0");
    if everything(have) && everything(want) {
        return true;
    }
    have.iter().collect::<BTreeSet<_>>() == want.iter().collect::<BTreeSet<_>>()
}

fn listener_update(
    have: &observed::Listener,
    want: &desired::Listener,
    lb_name: &str,
) -> Option<ListenerUpdate> {
    let mut update = ListenerUpdate::default();
    if have.connection_limit.unwrap_or(-1) != want.connection_limit {
        update.connection_limit = Some(want.connection_limit);
    }
    if have.inserts_x_forwarded_for() != want.x_forwarded_for {
        update.x_forwarded_for = Some(want.x_forwarded_for);
    }
    if let Some(t) = want.timeouts {
        let same = have.timeout_client_data == Some(t.client_data)
            && have.timeout_member_connect == Some(t.member_connect)
            && have.timeout_member_data == Some(t.member_data)
            && have.timeout_tcp_inspect == Some(t.tcp_inspect);
        if !same {
            update.timeouts = Some(t);
        }
    }
    if let Some(cidrs) = &want.allowed_cidrs
        && !same_cidrs(&have.allowed_cidrs, cidrs)
    {
        update.allowed_cidrs = Some(cidrs.clone());
    }
    if !want.tags.is_empty() && !have.tags.iter().any(|t| t == lb_name) {
        let mut tags = have.tags.clone();
        tags.push(lb_name.to_owned());
        update.tags = Some(tags);
    }
    // Only on a TERMINATED_HTTPS listener: one without TLS has another protocol, and is
    // replaced instead.
    if let Some(reference) = &want.default_tls_container_ref
        && have.default_tls_container_ref != *reference
    {
        update.default_tls_container_ref = Some(reference.clone());
    }
    (update != ListenerUpdate::default()).then_some(update)
}

fn members_differ(have: &[observed::Member], want: &[desired::Member]) -> bool {
    let have: BTreeSet<(&str, &str, u16, Option<u16>)> = have
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.address.as_str(),
                m.protocol_port,
                m.monitor_port,
            )
        })
        .collect();
    let want: BTreeSet<(&str, &str, u16, Option<u16>)> = want
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.address.as_str(),
                m.protocol_port,
                m.monitor_port,
            )
        })
        .collect();
    have != want
}

/// With serial member calls, the next member write (OCCM's `SeriallyReconcilePoolMembers`:
/// members compared by address and port; missing ones made first, then others deleted).
fn serial_member_write(pool: &observed::Pool, want: &[desired::Member], index: usize) -> Option<Write> {
    let same = |have: &observed::Member, want: &desired::Member| {
        have.address == want.address && have.protocol_port == want.protocol_port
    };
    if let Some(member) = want.iter().position(|w| !pool.members.iter().any(|h| same(h, w))) {
        return Some(Write::CreateMember {
            pool_id: pool.id.clone(),
            index,
            member,
        });
    }
    pool.members
        .iter()
        .find(|h| !want.iter().any(|w| same(h, w)))
        .map(|h| Write::DeleteMember {
            pool_id: pool.id.clone(),
            id: h.id.clone(),
        })
}

fn monitor_differs(have: &observed::HealthMonitor, want: &desired::HealthMonitor) -> bool {
    let s = &want.settings;
    have.name != want.name
        || have.delay != s.delay
        || have.timeout != s.timeout
        || have.max_retries != s.max_retries
        || have.max_retries_down != s.max_retries_down
}

/// The next step for the Service (named `lb_name`, with `ports`) on the load balancer `tree`,
/// whose desired listeners are `want` (one per port, from [`desired::listeners`]).
/// `tags_supported`: Octavia ≥ 2.5, where the load balancer carries the Service's name.
pub fn next(
    tree: &Tree,
    want: &[desired::Listener],
    ports: &[ServicePort],
    lb_name: &str,
    tags_supported: bool,
    calls: desired::MemberCalls,
) -> Next {
    let lb = &tree.load_balancer;
    let owner = lb.name == lb_name;
    if lb.is_pending() {
        return Next::Wait(format!("load balancer {} is {}", lb.id, lb.provisioning_status));
    }
    if lb.provisioning_status == "ERROR" {
        let others: Vec<&str> = super::sharing::services(&lb.tags)
            .filter(|s| *s != lb_name)
            .collect();
        return if owner && others.is_empty() {
            Next::Write(Write::DeleteErrored { id: lb.id.clone() })
        } else if owner {
            // Deleting it would take the other Services' listeners along, and their
            // load-balancer-id would name a load balancer that is gone.
            Next::Refuse(format!(
                "load balancer {} ({}) is in ERROR and shared with {}: left as it is; repair it in Octavia \
                 (openstack loadbalancer failover {})",
                lb.id,
                lb.name,
                others.join(", "),
                lb.id
            ))
        } else {
            Next::Refuse(format!(
                "load balancer {} ({}) is in ERROR and is not this Service's own: left as it is",
                lb.id, lb.name
            ))
        };
    }
    if tags_supported && !lb.tags.iter().any(|t| t == lb_name) {
        let mut tags = lb.tags.clone();
        tags.push(lb_name.to_owned());
        return Next::Write(Write::TagLoadBalancer {
            id: lb.id.clone(),
            tags,
        });
    }

    // A port another Service (or someone else) already listens on is not taken.
    for port in ports {
        let taken = tree.listeners.iter().find(|l| {
            l.protocol_port == port.port
                && port_family(&l.protocol) == k8s_family(port.protocol)
                && !is_services_listener(l, lb_name, owner)
        });
        if let Some(l) = taken {
            return Next::Refuse(format!(
                "port {}/{} of load balancer {} is already taken by listener {} ({}), which is not this Service's",
                port.port,
                k8s_family(port.protocol),
                lb.id,
                l.id,
                l.name
            ));
        }
    }

    let matches = |have: &observed::Listener, want: &desired::Listener| {
        have.protocol == want.protocol && have.protocol_port == want.protocol_port
    };
    // What no port asks for goes first (its pool, then it): a port whose protocol changed needs
    // its old listener gone before Octavia takes the new one.
    for have in tree
        .listeners
        .iter()
        .filter(|l| is_services_listener(l, lb_name, owner))
    {
        if !want.iter().any(|w| matches(have, w)) {
            return match tree.pool_of(have) {
                Some(pool) => Next::Write(Write::DeletePool { id: pool.id.clone() }),
                None => Next::Write(Write::DeleteListener { id: have.id.clone() }),
            };
        }
    }

    for (index, w) in want.iter().enumerate() {
        let Some(have) = tree
            .listeners
            .iter()
            .find(|l| is_services_listener(l, lb_name, owner) && matches(l, w))
        else {
            return Next::Write(Write::CreateListener { index });
        };
        if let Some(update) = listener_update(have, w, lb_name) {
            return Next::Write(Write::UpdateListener {
                id: have.id.clone(),
                index,
                update,
            });
        }
        let Some(pool) = tree.pool_of(have) else {
            return Next::Write(Write::CreatePool {
                listener_id: have.id.clone(),
                index,
            });
        };
        if pool.protocol != w.pool.protocol {
            return Next::Write(Write::DeletePool { id: pool.id.clone() });
        }
        let persistence = pool
            .session_persistence
            .as_ref()
            .is_some_and(|p| p.kind == "SOURCE_IP");
        if pool.lb_algorithm != w.pool.lb_algorithm || persistence != w.pool.source_ip_persistence {
            return Next::Write(Write::UpdatePool {
                id: pool.id.clone(),
                index,
            });
        }
        match calls {
            desired::MemberCalls::Batch if members_differ(&pool.members, &w.pool.members) => {
                return Next::Write(Write::SetMembers {
                    pool_id: pool.id.clone(),
                    index,
                });
            }
            desired::MemberCalls::Serial => {
                if let Some(write) = serial_member_write(pool, &w.pool.members, index) {
                    return Next::Write(write);
                }
            }
            desired::MemberCalls::Batch => {}
        }
        match (&pool.monitor, &w.pool.monitor) {
            (None, None) => {}
            (Some(have), None) => return Next::Write(Write::DeleteMonitor { id: have.id.clone() }),
            (None, Some(_)) => {
                return Next::Write(Write::CreateMonitor {
                    pool_id: pool.id.clone(),
                    index,
                });
            }
            (Some(have), Some(want)) if have.kind != want.kind => {
                return Next::Write(Write::DeleteMonitor { id: have.id.clone() });
            }
            (Some(have), Some(want)) if monitor_differs(have, want) => {
                return Next::Write(Write::UpdateMonitor {
                    id: have.id.clone(),
                    index,
                });
            }
            (Some(_), Some(_)) => {}
        }
    }
    Next::Converged
}

/// Why a sync stops before reading what is under the load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// Not this Service's to change: the reason, for the Service's Warning event.
    Refuse(String),
    /// Octavia is working on it: ask again later.
    Wait(String),
}

/// What may be done with the Service's existing load balancer `lb` before anything under it is
/// read: `Some` refusal (another cluster's, OCCM's legacy name, a join sharing forbids) or wait
/// (Octavia is working on it, so there is nothing to plan yet), in that order; `None` to plan.
pub fn before_read(
    lb: &observed::LoadBalancer,
    lb_name: &str,
    legacy_name: &str,
    owner: &Owner,
    join: Join,
) -> Option<Hold> {
    if let Owner::OtherCluster { whose } = owner {
        return Some(Hold::Refuse(format!(
            "load balancer {} ({}) belongs to {whose}, not to this cluster: it is left alone. \
             Give each cluster sharing the project its own --cluster-name",
            lb.id, lb.name
        )));
    }
    if lb.name == legacy_name {
        return Some(Hold::Refuse(format!(
            "load balancer {} has OCCM's legacy name {:?}: this provider serves load balancers named {lb_name:?}; \
             rename it (openstack loadbalancer set --name {lb_name} {})",
            lb.id, lb.name, lb.id
        )));
    }
    if lb.name != lb_name
        && let Some(why) =
            sharing::refuse_join(lb, lb_name, join.internal, join.tags_supported, join.max_shared)
    {
        return Some(Hold::Refuse(why));
    }
    lb.is_pending()
        .then(|| Hold::Wait(format!("load balancer {} is {}", lb.id, lb.provisioning_status)))
}

/// What decides whether a Service may join a load balancer that is not its own
/// ([`sharing::refuse_join`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Join {
    /// The Service is internal.
    pub internal: bool,
    /// Octavia has tags (API 2.5).
    pub tags_supported: bool,
    /// `[LoadBalancer] max-shared-lb`.
    pub max_shared: i64,
}

/// The write to make instead of the planned `write`: an unclaimed load balancer is claimed
/// (this cluster's identity tagged, `cluster_id` non-empty, tags supported) before anything
/// else is written to it; the next sync reads whether the claim held.
pub fn claim_first(
    write: Write,
    lb: &observed::LoadBalancer,
    lb_name: &str,
    owner: &Owner,
    cluster_id: &str,
    tags_supported: bool,
) -> Write {
    if *owner == Owner::Unclaimed && tags_supported && !cluster_id.is_empty() {
        Write::TagLoadBalancer {
            id: lb.id.clone(),
            tags: ownership::claim_tags(&lb.tags, lb_name, cluster_id),
        }
    } else {
        write
    }
}

#[cfg(test)]
mod tests {
    use provider::{AddressType, LoadBalancerNode, NodeAddress, ServiceSpec};

    use super::*;
    use crate::{
        cloud_config::LoadBalancerSettings,
        load_balancers::{
            desired::{IpFamily, listeners, member_nodes},
            service_conf::{self, OctaviaFeatures, resolve},
        },
        octavia::model::{IdOnly, SessionPersistence},
    };

    const LB: &str = "kube_service_kubernetes_default_web";

    fn service(annotations: &[(&str, &str)]) -> ServiceSpec {
        crate::load_balancers::test_support::web_and_dns(annotations)
    }

    fn nodes(n: usize) -> Vec<LoadBalancerNode> {
        (1..=n)
            .map(|i| LoadBalancerNode {
                name: format!("node-{i}"),
                provider_id: format!("openstack:///{i}"),
                addresses: vec![NodeAddress::new(AddressType::InternalIP, format!("10.0.0.{i}"))],
                labels: Default::default(),
            })
            .collect()
    }

    fn want_for(svc: &ServiceSpec, node_count: usize) -> Vec<desired::Listener> {
        want_with(svc, node_count, desired::MemberCalls::Batch)
    }

    fn want_with(
        svc: &ServiceSpec,
        node_count: usize,
        calls: desired::MemberCalls,
    ) -> Vec<desired::Listener> {
        let features = OctaviaFeatures::of(2, 26, "amphora");
        let conf = resolve(&LoadBalancerSettings::default(), &features, svc).unwrap();
        let nodes = nodes(node_count);
        listeners(
            svc,
            &conf,
            desired::Octavia {
                features: &features,
                provider: "amphora",
                member_calls: calls,
            },
            LB,
            &member_nodes(&conf, &nodes),
            Some(IpFamily::V4),
        )
    }

    /// What Octavia reports after a fully populated create of `want`, as OCCM makes it.
    fn built(want: &[desired::Listener]) -> Tree {
        let mut tree = Tree {
            load_balancer: observed::LoadBalancer {
                id: "lb".into(),
                name: LB.into(),
                provisioning_status: "ACTIVE".into(),
                tags: vec![LB.into()],
                ..observed::LoadBalancer::default()
            },
            ..Tree::default()
        };
        for (i, w) in want.iter().enumerate() {
            let t = w.timeouts.unwrap();
            tree.listeners.push(observed::Listener {
                id: format!("l{i}"),
                name: w.name.clone(),
                protocol: w.protocol.into(),
                protocol_port: w.protocol_port,
                connection_limit: Some(w.connection_limit),
                default_pool_id: format!("p{i}"),
                insert_headers: if w.x_forwarded_for {
                    [("X-Forwarded-For".to_owned(), "true".to_owned())].into()
                } else {
                    Default::default()
                },
                timeout_client_data: Some(t.client_data),
                timeout_member_connect: Some(t.member_connect),
                timeout_member_data: Some(t.member_data),
                timeout_tcp_inspect: Some(t.tcp_inspect),
                tags: w.tags.clone(),
                allowed_cidrs: w.allowed_cidrs.clone().unwrap_or_default(),
                default_tls_container_ref: w.default_tls_container_ref.clone().unwrap_or_default(),
            });
            tree.pools.push(observed::Pool {
                id: format!("p{i}"),
                name: w.pool.name.clone(),
                protocol: w.pool.protocol.into(),
                lb_algorithm: w.pool.lb_algorithm.clone(),
                session_persistence: w.pool.source_ip_persistence.then(|| SessionPersistence {
                    kind: "SOURCE_IP".into(),
                }),
                listeners: vec![IdOnly { id: format!("l{i}") }],
                healthmonitor_id: String::new(),
                members: w
                    .pool
                    .members
                    .iter()
                    .enumerate()
                    .map(|(j, m)| observed::Member {
                        id: format!("m{i}{j}"),
                        name: m.name.clone(),
                        address: m.address.clone(),
                        protocol_port: m.protocol_port,
                        monitor_port: m.monitor_port,
                        subnet_id: m.subnet_id.clone().unwrap_or_default(),
                    })
                    .collect(),
                monitor: w.pool.monitor.as_ref().map(|m| observed::HealthMonitor {
                    id: format!("hm{i}"),
                    name: m.name.clone(),
                    kind: m.kind.into(),
                    delay: m.settings.delay,
                    timeout: m.settings.timeout,
                    max_retries: m.settings.max_retries,
                    max_retries_down: m.settings.max_retries_down,
                }),
            });
        }
        tree
    }

    fn plan(tree: &Tree, svc: &ServiceSpec, node_count: usize) -> Next {
        next(
            tree,
            &want_for(svc, node_count),
            &svc.ports,
            LB,
            true,
            desired::MemberCalls::Batch,
        )
    }

    #[test]
    fn what_was_built_as_asked_plans_no_write() {
        for annotations in [
            vec![],
            vec![(service_conf::ENABLE_HEALTH_MONITOR, "true")],
            vec![(service_conf::X_FORWARDED_FOR, "true")],
            vec![
                (service_conf::PROXY_PROTOCOL, "v2"),
                (service_conf::CONNECTION_LIMIT, "100"),
            ],
            vec![(service_conf::TLS_CONTAINER_REF, TLS_A)],
            vec![
                (service_conf::TLS_CONTAINER_REF, TLS_A),
                (service_conf::X_FORWARDED_FOR, "true"),
            ],
        ] {
            let svc = service(&annotations);
            assert_eq!(
                plan(&built(&want_for(&svc, 3)), &svc, 3),
                Next::Converged,
                "{annotations:?}"
            );
        }
    }

    const TLS_A: &str = "https://kms:9311/v1/containers/a";

    // OCCM's ensureOctaviaListener: a changed reference is one listener PUT with it alone; TLS
    // switched on or off changes the protocol, so the listener (and its pool) is made again.
    #[test]
    fn a_new_certificate_is_one_listener_write_and_tls_switched_replaces_the_listener() {
        let with_a = service(&[(service_conf::TLS_CONTAINER_REF, TLS_A)]);
        let tree = built(&want_for(&with_a, 2));
        let with_b = service(&[(service_conf::TLS_CONTAINER_REF, "https://kms:9311/v1/secrets/b")]);
        assert_eq!(
            plan(&tree, &with_b, 2),
            Next::Write(Write::UpdateListener {
                id: "l0".into(),
                update: ListenerUpdate {
                    default_tls_container_ref: Some("https://kms:9311/v1/secrets/b".into()),
                    ..ListenerUpdate::default()
                },
                index: 0,
            })
        );
        let plain = service(&[]);
        assert!(
            matches!(
                plan(&tree, &plain, 2),
                Next::Write(Write::DeletePool { .. } | Write::DeleteListener { .. })
            ),
            "{:?}",
            plan(&tree, &plain, 2)
        );
        let plain_tree = built(&want_for(&plain, 2));
        assert!(
            matches!(
                plan(&plain_tree, &with_a, 2),
                Next::Write(Write::DeletePool { .. } | Write::DeleteListener { .. })
            ),
            "{:?}",
            plan(&plain_tree, &with_a, 2)
        );
    }

    #[test]
    fn an_older_occms_listener_without_allowed_cidrs_is_open_to_everything_already() {
        let svc = service(&[]);
        let mut tree = built(&want_for(&svc, 2));
        for l in &mut tree.listeners {
            l.allowed_cidrs.clear();
        }
        assert_eq!(plan(&tree, &svc, 2), Next::Converged);
    }

    #[test]
    fn a_busy_or_broken_load_balancer() {
        let svc = service(&[]);
        let mut tree = built(&want_for(&svc, 1));
        for status in ["PENDING_CREATE", "PENDING_UPDATE", "PENDING_DELETE"] {
            tree.load_balancer.provisioning_status = status.into();
            assert!(matches!(plan(&tree, &svc, 1), Next::Wait(why) if why.contains(status)));
        }
        tree.load_balancer.provisioning_status = "ERROR".into();
        assert_eq!(
            plan(&tree, &svc, 1),
            Next::Write(Write::DeleteErrored { id: "lb".into() })
        );
        // Shared: deleting it would take the other Services' listeners along.
        tree.load_balancer
            .tags
            .push("kube_service_kubernetes_default_other".into());
        assert!(
            matches!(plan(&tree, &svc, 1), Next::Refuse(why) if why.contains("shared with kube_service_kubernetes_default_other"))
        );
        tree.load_balancer.name = "someone-elses".into();
        assert!(matches!(plan(&tree, &svc, 1), Next::Refuse(why) if why.contains("ERROR")));
    }

    #[test]
    fn node_changes_replace_the_members_of_each_pool() {
        let svc = service(&[]);
        let tree = built(&want_for(&svc, 2));
        assert_eq!(
            plan(&tree, &svc, 3),
            Next::Write(Write::SetMembers {
                pool_id: "p0".into(),
                index: 0
            })
        );
        let mut first_done = tree.clone();
        first_done.pools[0] = built(&want_for(&svc, 3)).pools[0].clone();
        assert_eq!(
            plan(&first_done, &svc, 3),
            Next::Write(Write::SetMembers {
                pool_id: "p1".into(),
                index: 1
            })
        );
    }

    #[test]
    fn a_missing_listener_pool_or_tag_is_made() {
        let svc = service(&[]);
        let want = want_for(&svc, 1);
        let mut tree = built(&want);
        tree.load_balancer.tags = vec!["other".into()];
        assert_eq!(
            plan(&tree, &svc, 1),
            Next::Write(Write::TagLoadBalancer {
                id: "lb".into(),
                tags: vec!["other".into(), LB.into()]
            })
        );
        let mut tree = built(&want);
        tree.listeners.remove(1);
        tree.pools.remove(1);
        assert_eq!(
            plan(&tree, &svc, 1),
            Next::Write(Write::CreateListener { index: 1 })
        );
        let mut tree = built(&want);
        tree.pools.remove(0);
        tree.listeners[0].default_pool_id.clear();
        assert_eq!(
            plan(&tree, &svc, 1),
            Next::Write(Write::CreatePool {
                listener_id: "l0".into(),
                index: 0
            })
        );
    }

    #[test]
    fn listener_settings_are_updated_in_one_write_keeping_other_tags() {
        let svc = service(&[]);
        let mut tree = built(&want_for(&svc, 1));
        tree.listeners[0].connection_limit = Some(5);
        tree.listeners[0].timeout_client_data = Some(1);
        // On a load balancer it does not own, an untagged listener is not the Service's: its
        // port is taken.
        tree.listeners[0].tags.clear();
        tree.load_balancer.name = "shared".into();
        assert!(matches!(plan(&tree, &svc, 1), Next::Refuse(why) if why.contains("port 80/TCP")));
        // On its own load balancer, a listener tagged for others only is not its either (OCCM:
        // a tagged listener belongs to the Services it names).
        tree.load_balancer.name = LB.into();
        tree.listeners[0].tags = vec!["team-a".into()];
        assert!(matches!(plan(&tree, &svc, 1), Next::Refuse(_)));
        tree.listeners[0].tags.clear();
        // Untagged on its own load balancer: this Service's; updated, tag added.
        let Next::Write(Write::UpdateListener { id, index, update }) = plan(&tree, &svc, 1) else {
            panic!()
        };
        assert_eq!((id.as_str(), index), ("l0", 0));
        assert_eq!(update.connection_limit, Some(-1));
        assert_eq!(update.timeouts.map(|t| t.client_data), Some(50_000));
        assert_eq!(update.tags, Some(vec![LB.to_owned()]));
        assert_eq!((update.x_forwarded_for, update.allowed_cidrs), (None, None));
    }

    #[test]
    fn a_port_whose_protocol_changed_gets_a_new_listener_after_the_old_one_goes() {
        let before = service(&[]);
        let after = service(&[(service_conf::X_FORWARDED_FOR, "true")]);
        let mut tree = built(&want_for(&before, 1));
        // TCP:80 and UDP:53 become HTTP:80 and HTTP:53; the old ones go first, pool first.
        assert_eq!(
            plan(&tree, &after, 1),
            Next::Write(Write::DeletePool { id: "p0".into() })
        );
        tree.pools.remove(0);
        tree.listeners[0].default_pool_id.clear();
        assert_eq!(
            plan(&tree, &after, 1),
            Next::Write(Write::DeleteListener { id: "l0".into() })
        );
    }

    #[test]
    fn pools_and_monitors_follow_the_annotations() {
        let plain = service(&[]);
        let mut tree = built(&want_for(&plain, 1));
        let proxy = service(&[(service_conf::PROXY_PROTOCOL, "true")]);
        assert_eq!(
            plan(&tree, &proxy, 1),
            Next::Write(Write::DeletePool { id: "p0".into() })
        );
        let lc = service(&[(service_conf::LB_METHOD, "LEAST_CONNECTIONS")]);
        assert_eq!(
            plan(&tree, &lc, 1),
            Next::Write(Write::UpdatePool {
                id: "p0".into(),
                index: 0
            })
        );
        let mut affinity = plain.clone();
        affinity.session_affinity_client_ip = true;
        assert_eq!(
            plan(&tree, &affinity, 1),
            Next::Write(Write::UpdatePool {
                id: "p0".into(),
                index: 0
            })
        );
        let monitored = service(&[(service_conf::ENABLE_HEALTH_MONITOR, "true")]);
        assert_eq!(
            plan(&tree, &monitored, 1),
            Next::Write(Write::CreateMonitor {
                pool_id: "p0".into(),
                index: 0
            })
        );
        tree = built(&want_for(&monitored, 1));
        assert_eq!(
            plan(&tree, &plain, 1),
            Next::Write(Write::DeleteMonitor { id: "hm0".into() })
        );
        let slower = service(&[
            (service_conf::ENABLE_HEALTH_MONITOR, "true"),
            (service_conf::MONITOR_DELAY, "9"),
        ]);
        assert_eq!(
            plan(&tree, &slower, 1),
            Next::Write(Write::UpdateMonitor {
                id: "hm0".into(),
                index: 0
            })
        );
        tree.pools[0].monitor.as_mut().unwrap().kind = "PING".into();
        assert_eq!(
            plan(&tree, &monitored, 1),
            Next::Write(Write::DeleteMonitor { id: "hm0".into() })
        );
    }

    // OCCM's quirk: with healthCheckNodePort on a UDP pool that cannot have an HTTP monitor,
    // the members are re-sent on every sync. Here they converge.
    #[test]
    fn udp_members_without_an_http_monitor_converge() {
        let mut svc = service(&[(service_conf::ENABLE_HEALTH_MONITOR, "true")]);
        svc.external_traffic_policy = provider::ExternalTrafficPolicy::Local;
        svc.health_check_node_port = 32000;
        let features = OctaviaFeatures::of(2, 15, "amphora");
        let conf = resolve(&LoadBalancerSettings::default(), &features, &svc).unwrap();
        let nodes = nodes(2);
        let want = listeners(
            &svc,
            &conf,
            desired::Octavia {
                features: &features,
                provider: "amphora",
                member_calls: desired::MemberCalls::Batch,
            },
            LB,
            &member_nodes(&conf, &nodes),
            Some(IpFamily::V4),
        );
        assert_eq!(want[1].pool.members[0].monitor_port, None);
        assert_eq!(
            next(
                &built(&want),
                &want,
                &svc.ports,
                LB,
                true,
                desired::MemberCalls::Batch
            ),
            Next::Converged
        );
    }

    /// `provider-requires-serial-api-calls`: OCCM's member names, one member call at a time,
    /// missing ones first, compared by address and port only.
    #[test]
    fn serial_member_calls_create_then_delete_one_member_at_a_time() {
        let svc = service(&[]);
        let serial = desired::MemberCalls::Serial;
        let two = want_with(&svc, 2, serial);
        assert_eq!(two[0].pool.members[0].name, "member_node-1_10.0.0.1_30080");
        assert_eq!(two[0].pool.members[0].subnet_id, None);
        let mut tree = built(&two);
        let step = |tree: &Tree, want: &[desired::Listener]| next(tree, want, &svc.ports, LB, true, serial);
        assert_eq!(step(&tree, &two), Next::Converged);
        // A third node: one create for each port, in turn.
        let three = want_with(&svc, 3, serial);
        assert_eq!(
            step(&tree, &three),
            Next::Write(Write::CreateMember {
                pool_id: "p0".into(),
                index: 0,
                member: 2
            })
        );
        // The first node gone: its member deleted (after any creates).
        let one: Vec<desired::Listener> = want_with(&svc, 1, serial);
        let Next::Write(Write::DeleteMember { pool_id, id }) = step(&tree, &one) else {
            panic!("a delete");
        };
        assert_eq!(pool_id, "p0");
        assert!(
            tree.pools[0]
                .members
                .iter()
                .any(|m| m.id == id && m.address == "10.0.0.2")
        );
        // A member made by the batch mode (its node's name) is the same member: no write.
        for pool in &mut tree.pools {
            for m in &mut pool.members {
                m.name = "node-x".into();
            }
        }
        assert_eq!(step(&tree, &two), Next::Converged);
    }

    // OCCM's TestLbaasV2_checkListenerPorts.
    #[test]
    fn a_port_another_service_listens_on_is_refused() {
        let svc = service(&[]);
        let mut tree = built(&want_for(&svc, 1));
        tree.listeners[0].tags = vec!["kube_service_kubernetes_default_other".into()];
        let Next::Refuse(why) = plan(&tree, &svc, 1) else {
            panic!()
        };
        assert!(why.contains("port 80/TCP") && why.contains("l0"), "{why}");
        // Another Service's listener on another port is left alone, and not deleted.
        tree.listeners[0].protocol_port = 8080;
        assert_eq!(
            plan(&tree, &svc, 1),
            Next::Write(Write::CreateListener { index: 0 })
        );
    }

    #[test]
    fn before_reading_a_load_balancer_its_refusals_come_in_order_then_pending_waits() {
        const LEGACY: &str = "auid";
        let lb = |name: &str, status: &str, tags: &[&str]| observed::LoadBalancer {
            id: "lb-1".into(),
            name: name.into(),
            provisioning_status: status.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..observed::LoadBalancer::default()
        };
        let other = Owner::OtherCluster {
            whose: "cluster b".into(),
        };
        let join = Join {
            internal: false,
            tags_supported: true,
            max_shared: 2,
        };
        let full = ["kube_service_a", "kube_service_b"];
        // (case, load balancer, owner, join, the hold's kind and a piece of its message)
        type Case<'a> = (
            &'a str,
            observed::LoadBalancer,
            &'a Owner,
            Join,
            Option<(&'a str, &'a str)>,
        );
        let cases: [Case<'_>; 8] = [
            ("ours, active", lb(LB, "ACTIVE", &[]), &Owner::Ours, join, None),
            (
                "unclaimed, active",
                lb(LB, "ACTIVE", &[]),
                &Owner::Unclaimed,
                join,
                None,
            ),
            (
                "another cluster's, even pending",
                lb(LB, "PENDING_UPDATE", &[]),
                &other,
                join,
                Some(("refuse", "belongs to cluster b")),
            ),
            (
                "OCCM's legacy name",
                lb(LEGACY, "ACTIVE", &[]),
                &Owner::Ours,
                join,
                Some(("refuse", "legacy name")),
            ),
            (
                "a join without tags",
                lb("kube_service_x", "ACTIVE", &[]),
                &Owner::Ours,
                Join {
                    tags_supported: false,
                    ..join
                },
                Some(("refuse", "needs Octavia's tags")),
            ),
            (
                "a join by an internal Service",
                lb("kube_service_x", "ACTIVE", &[]),
                &Owner::Ours,
                Join {
                    internal: true,
                    ..join
                },
                Some(("refuse", "internal Service")),
            ),
            (
                "a join past max-shared-lb",
                lb("kube_service_x", "ACTIVE", &full),
                &Owner::Ours,
                join,
                Some(("refuse", "max-shared-lb")),
            ),
            (
                "ours, pending",
                lb(LB, "PENDING_UPDATE", &[]),
                &Owner::Ours,
                join,
                Some(("wait", "is PENDING_UPDATE")),
            ),
        ];
        for (case, lb, owner, join, want) in cases {
            let got = before_read(&lb, LB, LEGACY, owner, join);
            match (want, got) {
                (None, None) => {}
                (Some(("refuse", m)), Some(Hold::Refuse(why)))
                | (Some(("wait", m)), Some(Hold::Wait(why))) => {
                    assert!(why.contains(m), "{case}: {why}");
                }
                (want, got) => panic!("{case}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn an_unclaimed_load_balancer_is_claimed_before_any_other_write() {
        let lb = observed::LoadBalancer {
            id: "lb-1".into(),
            tags: vec!["keep".into()],
            ..observed::LoadBalancer::default()
        };
        let planned = Write::DeletePool { id: "p".into() };
        let claim = Write::TagLoadBalancer {
            id: "lb-1".into(),
            tags: ownership::claim_tags(&lb.tags, LB, "cid"),
        };
        // (owner, cluster ID, tags supported, the write made)
        let cases = [
            (Owner::Unclaimed, "cid", true, &claim),
            (Owner::Unclaimed, "", true, &planned),
            (Owner::Unclaimed, "cid", false, &planned),
            (Owner::Ours, "cid", true, &planned),
        ];
        for (owner, cluster_id, tags, want) in cases {
            let got = claim_first(planned.clone(), &lb, LB, &owner, cluster_id, tags);
            assert_eq!(&got, want, "{owner:?}, {cluster_id:?}, tags {tags}");
        }
    }
}
