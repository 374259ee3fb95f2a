//! Cluster identity and the tags that say what belongs to the cluster, as cloud-provider-aws
//! writes and reads them (its `tags.go`). Pure functions only.
//!
//! A resource is the cluster's when it carries `kubernetes.io/cluster/<id>` (value `owned`: made
//! for the cluster, deletable; `shared`: usable, never deleted), or the legacy
//! `KubernetesCluster=<id>` of clusters set up before that key existed.

use std::collections::BTreeMap;

use provider::ProviderError;

/// Tag key prefix of the cluster tag.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// The legacy cluster tag key; its value is the cluster ID.
pub const LEGACY_CLUSTER_TAG: &str = "KubernetesCluster";
/// Cluster tag value of resources made for the cluster.
pub const OWNED: &str = "owned";
/// Cluster tag value of resources the cluster may use but not delete.
pub const SHARED: &str = "shared";
/// `<namespace>/<name>` of the Service a load balancer serves.
pub const SERVICE_NAME_TAG: &str = "kubernetes.io/service-name";
/// Subnet role tags (only the key's presence counts).
pub const ROLE_ELB_TAG: &str = "kubernetes.io/role/elb";
pub const ROLE_INTERNAL_ELB_TAG: &str = "kubernetes.io/role/internal-elb";

/// Most characters AWS allows in a tag key and a tag value.
pub const MAX_TAG_KEY: usize = 128;
pub const MAX_TAG_VALUE: usize = 256;

/// Tags as a map.
pub type Tags = BTreeMap<String, String>;

/// Who the cluster is to AWS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTagging {
    /// The cluster ID: the value of the legacy tag and the suffix of the cluster tag key.
    pub id: String,
    /// Also write the legacy `KubernetesCluster` tag (clusters set up with it).
    pub legacy: bool,
}

impl ClusterTagging {
    /// The identity of cluster `id`; refuses an ID that cannot be a tag key.
    pub fn new(id: &str, legacy: bool) -> Result<Self, ProviderError> {
        if id.is_empty() || CLUSTER_TAG_PREFIX.len() + id.len() > MAX_TAG_KEY {
            return Err(ProviderError::InvalidArgument(format!(
                "cluster ID {id:?} must be 1 to {} characters (it becomes the tag key {CLUSTER_TAG_PREFIX}<id>)",
                MAX_TAG_KEY - CLUSTER_TAG_PREFIX.len()
            )));
        }
        Ok(Self {
            id: id.to_owned(),
            legacy,
        })
    }

    /// `kubernetes.io/cluster/<id>`.
    pub fn tag_key(&self) -> String {
        format!("{CLUSTER_TAG_PREFIX}{}", self.id)
    }

    /// The cluster's: the cluster tag with any value, or the legacy tag with the ID.
    pub fn has_cluster_tag(&self, tags: &Tags) -> bool {
        tags.contains_key(&self.tag_key()) || tags.get(LEGACY_CLUSTER_TAG) == Some(&self.id)
    }

    /// Made for the cluster: the cluster tag `owned`, or the legacy tag with the ID.
    pub fn is_owned(&self, tags: &Tags) -> bool {
        tags.get(&self.tag_key()).map(String::as_str) == Some(OWNED)
            || tags.get(LEGACY_CLUSTER_TAG) == Some(&self.id)
    }

    /// Tagged for some other cluster and not for this one.
    pub fn belongs_to_other_cluster(&self, tags: &Tags) -> bool {
        !self.has_cluster_tag(tags) && !Self::has_no_cluster_tag(tags)
    }

    /// No cluster tag of any cluster (subnets without one are usable by every cluster).
    pub fn has_no_cluster_tag(tags: &Tags) -> bool {
        !tags.keys().any(|k| k.starts_with(CLUSTER_TAG_PREFIX)) && !tags.contains_key(LEGACY_CLUSTER_TAG)
    }

    /// Upstream's `buildTags(owned, extra)`: `extra` plus the cluster tag (and the legacy one).
    pub fn owned_tags(&self, extra: &Tags) -> Tags {
        let mut tags = extra.clone();
        tags.insert(self.tag_key(), OWNED.to_owned());
        if self.legacy {
            tags.insert(LEGACY_CLUSTER_TAG.to_owned(), self.id.clone());
        }
        tags
    }

    /// The tags of a load balancer (and its target groups and listeners): the user's extra tags,
    /// the Service's name and the cluster tag.
    pub fn load_balancer_tags(&self, namespace: &str, name: &str, extra: &Tags) -> Tags {
        let mut tags = extra.clone();
        tags.insert(SERVICE_NAME_TAG.to_owned(), format!("{namespace}/{name}"));
        self.owned_tags(&tags)
    }
}

/// Refuses extra tags that would overwrite the ownership tags or that AWS refuses.
pub fn check_extra_tags(tags: &Tags, annotation: &str) -> Result<(), ProviderError> {
    for (key, value) in tags {
        if key.len() > MAX_TAG_KEY || value.len() > MAX_TAG_VALUE || key.starts_with("aws:") {
            return Err(ProviderError::InvalidArgument(format!(
                "{annotation}: tag {key:?} is not a valid AWS tag (key of 1 to {MAX_TAG_KEY} characters not starting with \"aws:\", value of at most {MAX_TAG_VALUE})"
            )));
        }
        if key.starts_with(CLUSTER_TAG_PREFIX) || key == LEGACY_CLUSTER_TAG || key == SERVICE_NAME_TAG {
            return Err(ProviderError::InvalidArgument(format!(
                "{annotation}: the tag {key:?} records ownership and is set by the provider"
            )));
        }
    }
    Ok(())
}

/// Tags from SDK-like pairs.
pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>) -> Tags {
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((k?.to_owned(), v.unwrap_or_default().to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn cluster_tags_as_upstream_reads_them() {
        let blue = ClusterTagging::new("blue", false).unwrap();
        // (tags, has cluster tag, owned, no cluster tag at all)
        type Tags = &'static [(&'static str, &'static str)];
        let rows: &[(Tags, bool, bool, bool)] = &[
            (&[("kubernetes.io/cluster/blue", "owned")], true, true, false),
            (&[("kubernetes.io/cluster/blue", "shared")], true, false, false),
            (&[("kubernetes.io/cluster/blue", "")], true, false, false),
            (&[("KubernetesCluster", "blue")], true, true, false),
            (&[("KubernetesCluster", "green")], false, false, false),
            (&[("kubernetes.io/cluster/green", "owned")], false, false, false),
            (&[("Name", "x")], false, false, true),
            (&[], false, false, true),
        ];
        for (t, tagged, owned, none) in rows {
            let t = tags(t);
            assert_eq!(blue.has_cluster_tag(&t), *tagged, "{t:?}");
            assert_eq!(blue.is_owned(&t), *owned, "{t:?}");
            assert_eq!(ClusterTagging::has_no_cluster_tag(&t), *none, "{t:?}");
        }
    }

    #[test]
    fn owned_tags_carry_the_cluster_and_the_legacy_tag_when_asked() {
        let extra = tags(&[("team", "web")]);
        let modern = ClusterTagging::new("blue", false).unwrap();
        assert_eq!(
            modern.load_balancer_tags("default", "web", &extra),
            tags(&[
                ("team", "web"),
                ("kubernetes.io/service-name", "default/web"),
                ("kubernetes.io/cluster/blue", "owned")
            ])
        );
        let legacy = ClusterTagging::new("blue", true).unwrap();
        assert_eq!(legacy.owned_tags(&Tags::new())["KubernetesCluster"], "blue");
        assert!(ClusterTagging::new("", false).is_err());
        assert!(ClusterTagging::new(&"x".repeat(107), false).is_err());
        assert!(ClusterTagging::new(&"x".repeat(106), false).is_ok());
    }

    #[test]
    fn extra_tags_cannot_claim_ownership() {
        assert!(check_extra_tags(&tags(&[("team", "web"), ("empty", "")]), "a").is_ok());
        for bad in [
            "kubernetes.io/cluster/x",
            "KubernetesCluster",
            "kubernetes.io/service-name",
            "aws:x",
        ] {
            let err = check_extra_tags(&tags(&[(bad, "v")]), "the-annotation").unwrap_err();
            assert!(err.to_string().contains("the-annotation"), "{bad}: {err}");
        }
        assert!(check_extra_tags(&tags(&[("k", &"v".repeat(257))]), "a").is_err());
    }
}
