//! Load balancers shared between Services, as OCCM shares them (reference §3.10): a Service
//! whose `load-balancer-id` names another Service's load balancer joins it with listeners of its
//! own (tagged with its name), and its name among the load balancer's tags. Pure.
//!
//! - Joining needs Octavia's tags (API 2.5), a Service that is not internal (an internal one
//!   would be exposed if the owner became external), and room: at most `max-shared-lb` Services
//!   (the `kube_service_*` tags) on one load balancer. A port another Service listens on is not
//!   taken ([`super::plan`]).
//! - Only the owner (the Service the load balancer is named after) makes its floating IP; the
//!   others use it.
//! - Leaving removes the Service's own listeners (with their pools, members and monitors) and
//!   its tag, one write per sync. The load balancer goes with the last Service when OCCM (or this
//!   provider) made it, also when that last one is not its owner.
//!
//! Where this differs from OCCM: a Service joining keeps the converge marker off the shared load
//! balancer (one tag list shared by several Services, which Octavia writes whole, without a
//! revision check): a converged Service on a shared load balancer is trusted from memory only.

use super::names::SERVICE_PREFIX;
use crate::octavia::model::{LoadBalancer, Tree};

/// The Services a load balancer serves: its `kube_service_*` tags.
pub fn services(tags: &[String]) -> impl Iterator<Item = &str> {
    tags.iter()
        .map(String::as_str)
        .filter(|t| t.starts_with(SERVICE_PREFIX))
}

/// Whether a Service other than `lb_name`'s is on the load balancer (its tags say so, or it is
/// named after another Service).
pub fn is_shared(lb: &LoadBalancer, lb_name: &str) -> bool {
    lb.name != lb_name || services(&lb.tags).any(|s| s != lb_name)
}

/// Why the Service named `lb_name` may not join `lb` (not its own), if it may not.
pub fn refuse_join(
    lb: &LoadBalancer,
    lb_name: &str,
    internal: bool,
    tags_supported: bool,
    max_shared: i64,
) -> Option<String> {
    if !tags_supported {
        return Some(format!(
            "load balancer {} ({}) is another Service's: sharing it needs Octavia's tags (API 2.5), which this cloud's \
             Octavia does not have",
            lb.id, lb.name
        ));
    }
    if internal {
        return Some(format!(
            "an internal Service cannot share a load balancer (load balancer {}, {}): it would be exposed if its owner \
             became external",
            lb.id, lb.name
        ));
    }
    let joined = services(&lb.tags).any(|s| s == lb_name);
    let count = services(&lb.tags).count();
    if !joined && i64::try_from(count).unwrap_or(i64::MAX) >= max_shared {
        return Some(format!(
            "load balancer {} ({}) is already shared by {count} Services, the most [LoadBalancer] max-shared-lb \
             ({max_shared}) allows",
            lb.id, lb.name
        ));
    }
    None
}

/// The next write of a Service leaving a shared load balancer (or one it does not own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leave {
    /// The pool of one of its listeners (members and monitor go with it).
    DeletePool { id: String },
    /// One of its listeners, its pool gone.
    DeleteListener { id: String },
    /// Its name off the load balancer's tags.
    Untag { tags: Vec<String> },
    /// Nothing of it is left on the load balancer.
    Done,
}

/// What the Service named `lb_name` leaves next on `tree`: its listeners (those carrying its
/// name, on whatever port: OCCM also asks for one of the Service's current ports, which leaves a
/// listener of a port dropped before the delete), then its tag.
pub fn next_leave(tree: &Tree, lb_name: &str) -> Leave {
    let listener = tree
        .listeners
        .iter()
        .find(|l| l.tags.iter().any(|t| t == lb_name));
    if let Some(listener) = listener {
        return match tree.pool_of(listener) {
            Some(pool) => Leave::DeletePool { id: pool.id.clone() },
            None => Leave::DeleteListener {
                id: listener.id.clone(),
            },
        };
    }
    let tags = &tree.load_balancer.tags;
    if tags.iter().any(|t| t == lb_name) {
        return Leave::Untag {
            tags: tags.iter().filter(|t| *t != lb_name).cloned().collect(),
        };
    }
    Leave::Done
}

/// Whether the load balancer goes with the Service now leaving it: made for a Service (OCCM's
/// name), and no other Service on it.
pub fn goes_with(lb: &LoadBalancer, lb_name: &str) -> bool {
    lb.name.starts_with(SERVICE_PREFIX) && services(&lb.tags).all(|s| s == lb_name)
}

/// Whether a Service that does not own the load balancer, done leaving it ([`next_leave`]),
/// takes it along: the last one on a load balancer made for a Service whose owner went before,
/// with nothing at all left on it (an owner that never tagged it, an older OCCM's, still has
/// its listeners there).
pub fn last_one_takes_it(tree: &Tree, lb_name: &str) -> bool {
    tree.load_balancer.name != lb_name && goes_with(&tree.load_balancer, lb_name) && tree.listeners.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::octavia::model::{IdOnly, Listener, Pool};

    const OWNER: &str = "kube_service_k_default_owner";
    const JOINER: &str = "kube_service_k_default_joiner";

    fn lb(name: &str, tags: &[&str]) -> LoadBalancer {
        LoadBalancer {
            id: "lb-1".into(),
            name: name.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            provisioning_status: "ACTIVE".into(),
            ..LoadBalancer::default()
        }
    }

    #[test]
    fn joining_needs_tags_an_external_service_and_room() {
        let shared = lb(OWNER, &[OWNER, "kube_cluster_id_x"]);
        assert_eq!(refuse_join(&shared, JOINER, false, true, 2), None);
        assert!(refuse_join(&shared, JOINER, false, false, 2).is_some_and(|m| m.contains("2.5")));
        assert!(refuse_join(&shared, JOINER, true, true, 2).is_some_and(|m| m.contains("internal")));
        // Full: two Services already; one already on it stays.
        let full = lb(OWNER, &[OWNER, "kube_service_k_default_other"]);
        assert!(refuse_join(&full, JOINER, false, true, 2).is_some_and(|m| m.contains("max-shared-lb")));
        let joined = lb(OWNER, &[OWNER, JOINER]);
        assert_eq!(refuse_join(&joined, JOINER, false, true, 2), None);
    }

    #[test]
    fn shared_means_another_services_name_or_tag() {
        assert!(!is_shared(&lb(OWNER, &[OWNER, "cloudgateway_spec_f"]), OWNER));
        assert!(is_shared(&lb(OWNER, &[OWNER, JOINER]), OWNER));
        assert!(is_shared(&lb(OWNER, &[OWNER, JOINER]), JOINER));
        assert!(
            goes_with(&lb(OWNER, &[JOINER]), JOINER),
            "the owner gone, the last one takes it"
        );
        assert!(!goes_with(&lb(OWNER, &[OWNER, JOINER]), JOINER));
        assert!(
            !goes_with(&lb("made-by-hand", &[JOINER]), JOINER),
            "not made for a Service"
        );
        // The last one, its owner gone: only once nothing is left on it.
        let mut tree = Tree {
            load_balancer: lb(OWNER, &[]),
            ..Tree::default()
        };
        assert!(last_one_takes_it(&tree, JOINER));
        assert!(
            !last_one_takes_it(&tree, OWNER),
            "the owner deletes its own as before"
        );
        tree.listeners.push(listener("older-occm", 80, &[], None));
        assert!(
            !last_one_takes_it(&tree, JOINER),
            "an owner that never tagged it is still on it"
        );
    }

    fn listener(id: &str, port: u16, tags: &[&str], pool: Option<&str>) -> Listener {
        Listener {
            id: id.into(),
            protocol: "TCP".into(),
            protocol_port: port,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            default_pool_id: pool.unwrap_or_default().into(),
            ..Listener::default()
        }
    }

    #[test]
    fn leaving_removes_its_listeners_then_its_tag_and_nothing_else() {
        let mut tree = Tree {
            load_balancer: lb(OWNER, &[OWNER, JOINER]),
            listeners: vec![
                listener("owners", 80, &[OWNER], Some("owners-pool")),
                listener("joiners", 8080, &[JOINER], Some("joiners-pool")),
            ],
            pools: vec![
                Pool {
                    id: "owners-pool".into(),
                    listeners: vec![IdOnly { id: "owners".into() }],
                    ..Pool::default()
                },
                Pool {
                    id: "joiners-pool".into(),
                    listeners: vec![IdOnly { id: "joiners".into() }],
                    ..Pool::default()
                },
            ],
        };
        assert_eq!(
            next_leave(&tree, JOINER),
            Leave::DeletePool {
                id: "joiners-pool".into()
            }
        );
        tree.pools.pop();
        tree.listeners[1].default_pool_id = String::new();
        assert_eq!(
            next_leave(&tree, JOINER),
            Leave::DeleteListener { id: "joiners".into() }
        );
        tree.listeners.pop();
        assert_eq!(
            next_leave(&tree, JOINER),
            Leave::Untag {
                tags: vec![OWNER.into()]
            }
        );
        tree.load_balancer.tags = vec![OWNER.into()];
        assert_eq!(next_leave(&tree, JOINER), Leave::Done);
        assert!(!last_one_takes_it(&tree, JOINER), "the owner is still on it");
        // A listener of a port the Service dropped before its delete still goes.
        tree.listeners.push(listener("dropped", 9090, &[JOINER], None));
        assert_eq!(
            next_leave(&tree, JOINER),
            Leave::DeleteListener { id: "dropped".into() }
        );
        tree.listeners.pop();
        // The owner leaving a shared one: its own listener, never the other's.
        tree.listeners.push(listener("joiners", 80, &[JOINER], None));
        assert_eq!(
            next_leave(&tree, OWNER),
            Leave::DeletePool {
                id: "owners-pool".into()
            }
        );
    }
}
