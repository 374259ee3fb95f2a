//! Names and IDs: provider IDs, instance IDs, and the names cloud-provider-aws gives load
//! balancers, target groups and security groups. Pure functions only.

use provider::{ProviderError, default_load_balancer_name};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The provider name and the scheme of its provider IDs.
pub const PROVIDER_NAME: &str = "aws";

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

/// Keeps the letters and digits of a name (upstream's `[^[:alnum:]]` removal).
fn alphanumeric(s: &str) -> String {
    s.chars().filter(char::is_ascii_alphanumeric).collect()
}

/// `k8s-<namespace:8>-<name:8>-<hash:10>`, the shape of upstream's generated names.
fn k8s_name(namespace: &str, name: &str, hex: &str) -> String {
    let cut = |s: String, n: usize| s.chars().take(n).collect::<String>();
    format!(
        "k8s-{}-{}-{}",
        cut(alphanumeric(namespace), 8),
        cut(alphanumeric(name), 8),
        &hex[..10]
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What an NLB target group is built from; each of these is fixed for the life of a target group
/// (or, for the health check, upstream recreates the group when it changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetGroupKey<'a> {
    /// The cluster ID (the cluster tag's, not `--cluster-name`).
    pub cluster_id: &'a str,
    /// Service namespace.
    pub namespace: &'a str,
    /// Service name.
    pub name: &'a str,
    /// The listener's front port.
    pub service_port: u16,
    /// The node port targets are registered on.
    pub node_port: u16,
    /// Target protocol (`TCP`, `UDP`, `TLS`, `TCP_UDP`).
    pub protocol: &'a str,
    /// Health check protocol (`TCP`, `HTTP`, `HTTPS`).
    pub health_check_protocol: &'a str,
    /// Health check interval in seconds.
    pub health_check_interval: i32,
}

/// Upstream's `buildTargetGroupName`: `k8s-<ns:8>-<name:8>-<first 10 hex of SHA-1>` over the
/// plain concatenation of cluster ID, namespace, name, service port, node port, target protocol,
/// target type (`instance`), health check protocol and interval. The same name, so target groups
/// cloud-provider-aws made are this provider's too.
pub fn target_group_name(key: &TargetGroupKey<'_>) -> String {
    let mut hasher = Sha1::new();
    for part in [
        key.cluster_id,
        key.namespace,
        key.name,
        &key.service_port.to_string(),
        &key.node_port.to_string(),
        key.protocol,
        "instance",
        key.health_check_protocol,
        &key.health_check_interval.to_string(),
    ] {
        hasher.update(part.as_bytes());
    }
    k8s_name(key.namespace, key.name, &hex(&hasher.finalize()))
}

/// The security group upstream makes for a Classic ELB: `k8s-elb-<load balancer name>`.
pub fn classic_security_group_name(lb_name: &str) -> String {
    format!("k8s-elb-{lb_name}")
}

/// The description of that security group.
pub fn classic_security_group_description(lb_name: &str, namespace: &str, name: &str) -> String {
    format!("Security group for Kubernetes ELB {lb_name} ({namespace}/{name})")
}

/// Upstream's managed NLB security group name (`NLBSecurityGroupMode = Managed`):
/// `k8s-<ns:8>-<name:8>-<first 10 hex of SHA-256(cluster name, name, namespace, UID)>`.
pub fn nlb_security_group_name(cluster_name: &str, namespace: &str, name: &str, uid: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [cluster_name, name, namespace, uid] {
        hasher.update(part.as_bytes());
    }
    k8s_name(namespace, name, &hex(&hasher.finalize()))
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
    fn target_group_names_are_upstreams() {
        // Upstream's TestBuildTargetGroupName rows (target type instance; its empty health check
        // config hashes as "" and "0").
        let base = TargetGroupKey {
            cluster_id: "cluster-a",
            namespace: "default",
            name: "service-a",
            service_port: 80,
            node_port: 8080,
            protocol: "TCP",
            health_check_protocol: "",
            health_check_interval: 0,
        };
        let rows: &[(TargetGroupKey<'_>, &str)] = &[
            (base.clone(), "k8s-default-servicea-7fa2e07508"),
            (
                TargetGroupKey {
                    cluster_id: "cluster-b",
                    ..base.clone()
                },
                "k8s-default-servicea-719ee635da",
            ),
            (
                TargetGroupKey {
                    namespace: "another",
                    ..base.clone()
                },
                "k8s-another-servicea-f66e09847d",
            ),
            (
                TargetGroupKey {
                    name: "service-b",
                    ..base.clone()
                },
                "k8s-default-serviceb-196c19c881",
            ),
            (
                TargetGroupKey {
                    service_port: 9090,
                    ..base.clone()
                },
                "k8s-default-servicea-06876706cb",
            ),
            (
                TargetGroupKey {
                    node_port: 9090,
                    ..base.clone()
                },
                "k8s-default-servicea-119f844ec0",
            ),
            (
                TargetGroupKey {
                    protocol: "UDP",
                    ..base.clone()
                },
                "k8s-default-servicea-3868761686",
            ),
        ];
        for (key, want) in rows {
            assert_eq!(target_group_name(key), *want, "{key:?}");
        }
        let long = TargetGroupKey {
            namespace: "kube-system-long",
            name: "my.very-long_service",
            ..base
        };
        let name = target_group_name(&long);
        assert!(name.starts_with("k8s-kubesyst-myverylo-"), "{name}");
        assert_eq!(name.len(), 32);
    }

    #[test]
    fn security_group_names_are_upstreams() {
        assert_eq!(classic_security_group_name("a123"), "k8s-elb-a123");
        assert_eq!(
            classic_security_group_description("a123", "default", "web"),
            "Security group for Kubernetes ELB a123 (default/web)"
        );
        let name = nlb_security_group_name("kubernetes", "default", "web-svc", "uid-1");
        assert!(name.starts_with("k8s-default-websvc-"), "{name}");
        assert_eq!(name.len(), "k8s-default-websvc-".len() + 10);
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
}
