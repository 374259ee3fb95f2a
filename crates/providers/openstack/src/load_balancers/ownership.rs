//! Whose a load balancer is: this cluster's, nobody's yet, or another cluster's.
//!
//! Clusters that share a project also share OCCM's names when their `--cluster-name` is the same
//! (OCCM's default, `kubernetes`, often is): OCCM then adopts, changes and deletes the other
//! cluster's load balancers (its #1371, #2004, #2571, #3102). Here a load balancer records the
//! identity of the cluster that made or took it (the kube-system Namespace's UID, which the
//! service controller sends) as the tag `kube_cluster_id_<uid>`:
//! - one that records another identity is never changed or deleted; the Service is told whose it
//!   is;
//! - one that records none (made by OCCM, or before the identity was known) is claimed with one
//!   tag write just before the first write this provider would make to it, and worked on only
//!   once a later read shows the claim held (two clusters claiming at once: the last tag write
//!   wins, the other sees it and stops). Taking it over unchanged writes nothing;
//! - one whose description names another cluster (found by a `load-balancer-id` annotation) is
//!   another cluster's too.

use super::names;

/// The tag that records a cluster's identity.
pub const CLUSTER_ID_TAG_PREFIX: &str = "kube_cluster_id_";

/// The tag recording `cluster_id`.
pub fn identity_tag(cluster_id: &str) -> String {
    format!("{CLUSTER_ID_TAG_PREFIX}{cluster_id}")
}

/// Whose a load balancer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// It records this cluster's identity.
    Ours,
    /// It records no identity: this cluster may claim it.
    Unclaimed,
    /// It records another identity, or its description names another cluster.
    OtherCluster {
        /// What says so: the other identity, or the cluster its description names.
        whose: String,
    },
}

/// Whose the load balancer (or floating IP) with `tags` and `description` is, seen from the cluster named
/// `cluster` with identity `cluster_id` (empty: unknown; then one recording any identity is
/// another's, since this cluster cannot show it is its own).
pub fn owner(tags: &[String], description: &str, cluster: &str, cluster_id: &str) -> Owner {
    let recorded: Vec<&str> = tags
        .iter()
        .filter_map(|t| t.strip_prefix(CLUSTER_ID_TAG_PREFIX))
        .collect();
    if let Some(other) = recorded.iter().find(|id| **id != cluster_id) {
        return Owner::OtherCluster {
            whose: format!("the cluster with identity {other}"),
        };
    }
    if let Some(named) = described_cluster(description)
        && named != cluster
    {
        return Owner::OtherCluster {
            whose: format!("cluster {named:?} (its description)"),
        };
    }
    if recorded.is_empty() {
        Owner::Unclaimed
    } else {
        Owner::Ours
    }
}

/// The cluster a description OCCM writes on a load balancer or a floating IP names
/// (`... from cluster <name>`); `None` for any other description (one a user wrote says nothing
/// about whose it is).
fn described_cluster(description: &str) -> Option<&str> {
    let (service, cluster) = description.rsplit_once(" from cluster ")?;
    (service.starts_with(names::LOAD_BALANCER_DESCRIPTION_PREFIX)
        || service.starts_with(names::FLOATING_IP_MARKER))
    .then_some(cluster)
}

/// The tags that claim a load balancer now tagged `tags` for this cluster: every tag kept, the
/// Service's name (`lb_name`, as OCCM tags it) and the identity added when missing.
pub fn claim_tags(tags: &[String], lb_name: &str, cluster_id: &str) -> Vec<String> {
    let mut claimed = tags.to_vec();
    for tag in [lb_name.to_owned(), identity_tag(cluster_id)] {
        if !claimed.contains(&tag) {
            claimed.push(tag);
        }
    }
    claimed
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6a1f0c2e-0000-4000-8000-000000000001";
    const OTHER: &str = "6a1f0c2e-0000-4000-8000-000000000002";

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn whose_a_load_balancer_is() {
        let ours = identity_tag(ID);
        let theirs = identity_tag(OTHER);
        let occm = "Kubernetes external service default/web from cluster kubernetes";
        let other_name = "Kubernetes external service default/web from cluster prod";
        let other = |whose: &str| Owner::OtherCluster { whose: whose.into() };
        for (tags, description, cluster_id, want) in [
            // OCCM made it under this cluster's name: ours to claim.
            (
                tags(&["kube_service_kubernetes_default_web"]),
                occm,
                ID,
                Owner::Unclaimed,
            ),
            (tags(&[]), "", ID, Owner::Unclaimed),
            (tags(&["x", &ours]), occm, ID, Owner::Ours),
            // Another cluster under the same name claimed it.
            (
                tags(&[&theirs]),
                occm,
                ID,
                other(&format!("the cluster with identity {OTHER}")),
            ),
            // Claimed twice (two clusters raced): another's tag is there, so not ours alone.
            (
                tags(&[&ours, &theirs]),
                occm,
                ID,
                other(&format!("the cluster with identity {OTHER}")),
            ),
            // This cluster's identity unknown: anything claimed is not provably ours.
            (
                tags(&[&ours]),
                occm,
                "",
                other(&format!("the cluster with identity {ID}")),
            ),
            (tags(&[]), occm, "", Owner::Unclaimed),
            // The description names another cluster (a load-balancer-id naming its LB).
            (
                tags(&[]),
                other_name,
                ID,
                other("cluster \"prod\" (its description)"),
            ),
            // A description a user wrote says nothing.
            (tags(&[]), "made by hand from cluster prod", ID, Owner::Unclaimed),
            // Floating IPs: OCCM's description, this provider's identity tag.
            (
                tags(&[]),
                "Floating IP for Kubernetes external service default/web from cluster prod",
                ID,
                other("cluster \"prod\" (its description)"),
            ),
            (
                tags(&[&theirs]),
                "Floating IP for Kubernetes external service default/web from cluster kubernetes",
                ID,
                other(&format!("the cluster with identity {OTHER}")),
            ),
        ] {
            assert_eq!(
                owner(&tags, description, "kubernetes", cluster_id),
                want,
                "{tags:?} {description:?} {cluster_id:?}"
            );
        }
    }

    #[test]
    fn a_claim_keeps_every_tag_and_adds_what_is_missing() {
        let ours = identity_tag(ID);
        assert_eq!(claim_tags(&tags(&["a"]), "lb", ID), tags(&["a", "lb", &ours]));
        assert_eq!(
            claim_tags(&tags(&["lb", "a"]), "lb", ID),
            tags(&["lb", "a", &ours])
        );
        assert_eq!(claim_tags(&tags(&["lb", &ours]), "lb", ID), tags(&["lb", &ours]));
    }
}
