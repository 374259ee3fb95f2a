//! Names, IDs and tags: provider IDs, instance IDs, load balancer and target group names, and the
//! ownership tags. Pure functions only.

use std::collections::BTreeMap;

use provider::{Protocol, ProviderError, default_load_balancer_name};
use sha2::{Digest, Sha256};

/// The provider name and the scheme of its provider IDs.
pub const PROVIDER_NAME: &str = "aws";

/// Tag key prefix marking a resource as the cluster's (`kubernetes.io/cluster/<name>`), as
/// cloud-provider-aws does. The value is `owned` (created by us) or `shared` (created by someone
/// else, usable by the cluster).
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// Value of the cluster tag on resources this provider creates.
pub const OWNED: &str = "owned";
/// Tag with `<namespace>/<name>` of the service a load balancer serves (as cloud-provider-aws).
pub const SERVICE_NAME_TAG: &str = "kubernetes.io/service-name";
/// Tag with the UID of the service a load balancer serves.
pub const SERVICE_UID_TAG: &str = "kubernetes.io/service-uid";

/// Most characters AWS allows in a tag key.
const MAX_TAG_KEY: usize = 128;

/// The cluster tag key for `cluster`.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("{CLUSTER_TAG_PREFIX}{cluster}")
}

/// Checks that `cluster` can be used in a tag key.
pub fn validate_cluster_name(cluster: &str) -> Result<(), ProviderError> {
    let key_len = CLUSTER_TAG_PREFIX.len() + cluster.len();
    if cluster.is_empty() || key_len > MAX_TAG_KEY {
        return Err(ProviderError::InvalidArgument(format!(
            "cluster name {cluster:?} must be 1 to {} characters (it becomes the tag key {CLUSTER_TAG_PREFIX}<cluster>)",
            MAX_TAG_KEY - CLUSTER_TAG_PREFIX.len()
        )));
    }
    Ok(())
}

/// Whether tags mark a resource as belonging to `cluster` (`owned` or `shared`).
pub fn tagged_for_cluster<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>, cluster: &str) -> bool {
    let key = cluster_tag_key(cluster);
    tags.into_iter().any(|(k, _)| k == key)
}

/// Whether tags mark a resource as belonging to some cluster other than `cluster` (and not to
/// `cluster` itself).
pub fn tagged_for_other_cluster<'a>(
    tags: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    cluster: &str,
) -> bool {
    !tagged_for_cluster(tags.clone(), cluster)
        && tags.into_iter().any(|(k, _)| k.starts_with(CLUSTER_TAG_PREFIX))
}

/// Whether `id` looks like an EC2 instance ID (`i-` and 1 to 32 letters or digits; AWS uses 8 or
/// 17 hex digits, AWS-compatible clouds may differ).
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|rest| {
        !rest.is_empty() && rest.len() <= 32 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// The instance ID a node name stands for: the ID itself (kops names nodes so) or the EC2
/// resource-name hostname `<id>.<region>.compute.internal` (`<id>.ec2.internal` in us-east-1).
/// Such a node is found by ID, as cloud-provider-aws does: a bare ID is never a private DNS name.
///
/// As cloud-provider-aws, the ID is what comes before the first dot; stricter than it, that must
/// be `i-` and lowercase hex digits, so names like `i-gateway` stay names. IP-based names
/// (`ip-10-0-0-1.ec2.internal`) and other names: `None`.
pub fn instance_id_in_node_name(name: &str) -> Option<&str> {
    let id = name.split('.').next()?;
    id.strip_prefix("i-")
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(id)
}

/// The provider ID of an instance: `aws:///<zone>/<instance-id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("{PROVIDER_NAME}:///{zone}/{instance_id}")
}

/// The instance ID in a provider ID.
///
/// Accepts what cloud-provider-aws accepts: `aws:///<zone>/<id>`, `aws:////<id>`, `aws:///<id>`,
/// `aws://<zone>/<id>` and a bare `<id>`.
pub fn instance_id_from_provider_id(provider_id: &str) -> Result<String, ProviderError> {
    let invalid = |why: &str| {
        ProviderError::InvalidArgument(format!(
            "provider ID {provider_id:?} {why}; expected aws:///<zone>/<instance-id>"
        ))
    };
    let path = match provider_id.split_once("://") {
        Some((PROVIDER_NAME, rest)) => rest,
        Some((scheme, _)) => return Err(invalid(&format!("has the scheme {scheme:?}, not \"aws\""))),
        None => provider_id,
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [id] | [_, id] if is_instance_id(id) => Ok((*id).to_owned()),
        [] => Err(invalid("names no instance")),
        _ => Err(invalid("does not name an EC2 instance")),
    }
}

/// The load balancer name of a service: upstream's `a` + UID without dashes, 32 characters.
pub fn load_balancer_name(service_uid: &str) -> Result<String, ProviderError> {
    let name = default_load_balancer_name(service_uid);
    let valid = name.len() > 1
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.ends_with('-');
    if !valid {
        return Err(ProviderError::InvalidArgument(format!(
            "service UID {service_uid:?} gives the load balancer name {name:?}, which AWS refuses \
             (letters, digits and inner hyphens only)"
        )));
    }
    Ok(name)
}

/// The protocol of a listener and its target group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LbProtocol {
    /// TCP
    Tcp,
    /// UDP
    Udp,
    /// TCP and UDP on one port (a service with both protocols on the same port).
    TcpUdp,
}

impl LbProtocol {
    /// The ELBv2 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::TcpUdp => "TCP_UDP",
        }
    }

    /// Parses the ELBv2 spelling; other protocols (TLS, HTTP...) are not ours.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "TCP_UDP" => Some(Self::TcpUdp),
            _ => None,
        }
    }

    /// From a service port's protocol; NLBs carry no SCTP.
    pub fn from_service(protocol: Protocol) -> Option<Self> {
        match protocol {
            Protocol::Tcp => Some(Self::Tcp),
            Protocol::Udp => Some(Self::Udp),
            Protocol::Sctp => None,
        }
    }
}

/// The target group name for one listener of a load balancer: `k8s-` + 28 hex digits of a hash
/// of the load balancer name, front port, protocol and node port (32 characters, the ELBv2
/// limit). Deterministic, so a retry after a crash finds the group it created before; a change of
/// protocol or node port gives a new group (ELBv2 cannot change those of a group).
pub fn target_group_name(lb_name: &str, port: u16, protocol: LbProtocol, node_port: u16) -> String {
    let digest = Sha256::digest(format!("{lb_name}/{port}/{}/{node_port}", protocol.as_str()).as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("k8s-{}", &hex[..28])
}

/// Tags every resource created for a service carries.
pub fn resource_tags(
    cluster: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags = extra.clone();
    tags.insert(cluster_tag_key(cluster), OWNED.to_owned());
    tags.insert(SERVICE_NAME_TAG.to_owned(), format!("{namespace}/{name}"));
    tags.insert(SERVICE_UID_TAG.to_owned(), uid.to_owned());
    tags
}

/// Instance IDs quoted in an EC2 error message, e.g. `The instance IDs 'i-1, i-2' do not exist`.
pub fn instance_ids_in_message(message: &str) -> Vec<String> {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| is_instance_id(word))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_parse_like_cloud_provider_aws() {
        let ok = [
            ("aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"),
            ("aws:////i-0123456789abcdef0", "i-0123456789abcdef0"),
            ("aws:///i-12345678", "i-12345678"),
            ("aws://us-east-1a/i-12345678", "i-12345678"),
            ("i-12345678", "i-12345678"),
            // An empty segment is no segment.
            ("aws:///us-east-1a/i-12345678/", "i-12345678"),
        ];
        for (input, want) in ok {
            assert_eq!(
                instance_id_from_provider_id(input).as_deref(),
                Ok(want),
                "{input}"
            );
        }
        let bad = [
            "",
            "aws://",
            "aws:///us-east-1a/",
            "aws:///us-east-1a/vol-123",
            "aws:///a/b/i-123",
            "gce://project/zone/name",
            "aws:///us-east-1a/i-",
            "aws:///us-east-1a/i-1234$678",
        ];
        for input in bad {
            let parsed = instance_id_from_provider_id(input);
            assert!(
                matches!(parsed, Err(ProviderError::InvalidArgument(_))),
                "{input}: {parsed:?}"
            );
        }
    }

    #[test]
    fn node_names_that_are_instance_ids_or_resource_names_give_the_id() {
        let cases = [
            ("i-0123456789abcdef0", Some("i-0123456789abcdef0")),
            ("i-12345678", Some("i-12345678")),
            // Resource-name hostnames: `<id>.<region>.compute.internal`, `<id>.ec2.internal`.
            (
                "i-0123456789abcdef0.eu-west-1.compute.internal",
                Some("i-0123456789abcdef0"),
            ),
            ("i-0123456789abcdef0.ec2.internal", Some("i-0123456789abcdef0")),
            // IP-based names are private DNS names.
            ("ip-10-0-0-1.ec2.internal", None),
            ("ip-10-0-0-1.eu-west-1.compute.internal", None),
            ("ip-10-0-0-1", None),
            // Not `i-` and hex digits.
            ("i-gateway", None),
            ("i-0ABC", None),
            ("i-", None),
            ("i-.ec2.internal", None),
            ("node-i-0123abcd", None),
            ("worker-1", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(instance_id_in_node_name(name), want, "{name:?}");
        }
    }

    #[test]
    fn provider_id_round_trips() {
        let id = provider_id("eu-west-1b", "i-0abc");
        assert_eq!(id, "aws:///eu-west-1b/i-0abc");
        assert_eq!(instance_id_from_provider_id(&id).as_deref(), Ok("i-0abc"));
    }

    #[test]
    fn load_balancer_names_are_upstreams() {
        assert_eq!(
            load_balancer_name("8a7b3c2d-1111-2222-3333-444455556666").as_deref(),
            Ok("a8a7b3c2d11112222333344445555666")
        );
        assert!(load_balancer_name("uid with spaces").is_err());
        assert!(load_balancer_name("").is_err());
    }

    #[test]
    fn target_group_names_are_deterministic_and_fit() {
        let a = target_group_name("a8a7b3c2d11112222333344445555666", 80, LbProtocol::Tcp, 30080);
        assert_eq!(
            a,
            target_group_name("a8a7b3c2d11112222333344445555666", 80, LbProtocol::Tcp, 30080)
        );
        assert_eq!(a.len(), 32);
        assert!(a.starts_with("k8s-"));
        let variants = [
            target_group_name("a8a7b3c2d11112222333344445555666", 81, LbProtocol::Tcp, 30080),
            target_group_name("a8a7b3c2d11112222333344445555666", 80, LbProtocol::Udp, 30080),
            target_group_name("a8a7b3c2d11112222333344445555666", 80, LbProtocol::Tcp, 30081),
            target_group_name("a8a7b3c2d111122223333444455556667", 80, LbProtocol::Tcp, 30080),
        ];
        for v in variants {
            assert_ne!(a, v);
        }
    }

    #[test]
    fn cluster_tags_decide_ownership() {
        let ours = [("kubernetes.io/cluster/blue", "owned"), ("Name", "x")];
        let shared = [("kubernetes.io/cluster/blue", "shared")];
        let theirs = [("kubernetes.io/cluster/green", "owned")];
        let none = [("Name", "x")];
        assert!(tagged_for_cluster(ours, "blue"));
        assert!(tagged_for_cluster(shared, "blue"));
        assert!(!tagged_for_cluster(theirs, "blue"));
        assert!(!tagged_for_cluster(none, "blue"));
        assert!(tagged_for_other_cluster(theirs, "blue"));
        assert!(!tagged_for_other_cluster(ours, "blue"));
        assert!(!tagged_for_other_cluster(none, "blue"));
        assert!(validate_cluster_name("blue").is_ok());
        assert!(validate_cluster_name("").is_err());
        assert!(validate_cluster_name(&"x".repeat(107)).is_err());
        assert!(validate_cluster_name(&"x".repeat(106)).is_ok());
    }

    #[test]
    fn instance_ids_are_found_in_error_messages() {
        let cases = [
            (
                "The instance ID 'i-0123456789abcdef0' does not exist",
                vec!["i-0123456789abcdef0"],
            ),
            (
                "The instance IDs 'i-0123456789abcdef0, i-12345678' do not exist",
                vec!["i-0123456789abcdef0", "i-12345678"],
            ),
            ("Invalid id: \"i-zz\" (expecting \"i-...\")", vec!["i-zz"]),
            (
                "The instance ID '['i-1234abcd', 'i-5678abcd']' does not exist",
                vec!["i-1234abcd", "i-5678abcd"],
            ),
            ("nothing here", vec![]),
        ];
        for (message, want) in cases {
            assert_eq!(instance_ids_in_message(message), want, "{message}");
        }
    }

    #[test]
    fn resource_tags_carry_cluster_and_service() {
        let extra = BTreeMap::from([("team".to_owned(), "web".to_owned())]);
        let tags = resource_tags("blue", "default", "web", "uid-1", &extra);
        assert_eq!(tags["kubernetes.io/cluster/blue"], "owned");
        assert_eq!(tags["kubernetes.io/service-name"], "default/web");
        assert_eq!(tags["kubernetes.io/service-uid"], "uid-1");
        assert_eq!(tags["team"], "web");
    }
}
