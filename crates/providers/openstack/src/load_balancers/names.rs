//! The names, descriptions and tags OCCM gives what it builds for a Service (reference §3.2),
//! so that load balancers built by OCCM and by this provider are the same objects. Pure.
//!
//! OCCM cuts every name to 255 bytes (`Sprintf255`); Go slices bytes and may cut inside a
//! character. Kubernetes names are ASCII, so that never happens for a name built from a real
//! Service; for anything else this module cuts at the last whole character instead.

/// Every load balancer OCCM creates is named with this prefix; one without it is not OCCM's.
pub const SERVICE_PREFIX: &str = "kube_service_";

/// Octavia's and Neutron's limit on names, descriptions and tags.
pub const MAX_LEN: usize = 255;

/// What marks a floating IP as created by OCCM (its description starts with it; OCCM matches it
/// anywhere in the description, as this module does).
pub const FLOATING_IP_MARKER: &str = "Floating IP for Kubernetes external service";

/// `s` cut to [`MAX_LEN`] bytes, at a character boundary.
pub fn cut_255(mut s: String) -> String {
    if s.len() > MAX_LEN {
        let mut end = MAX_LEN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// OCCM's `GetLoadBalancerName`: `kube_service_<cluster>_<namespace>_<name>`. Also the tag that
/// marks the load balancer and its listeners as this Service's.
pub fn load_balancer_name(cluster: &str, namespace: &str, name: &str) -> String {
    cut_255(format!("{SERVICE_PREFIX}{cluster}_{namespace}_{name}"))
}

/// The listener of the Service's `index`-th port.
pub fn listener_name(index: usize, lb_name: &str) -> String {
    cut_255(format!("listener_{index}_{lb_name}"))
}

/// The pool of the Service's `index`-th port.
pub fn pool_name(index: usize, lb_name: &str) -> String {
    cut_255(format!("pool_{index}_{lb_name}"))
}

/// The health monitor of the Service's `index`-th port.
pub fn monitor_name(index: usize, lb_name: &str) -> String {
    cut_255(format!("monitor_{index}_{lb_name}"))
}

/// How OCCM's load-balancer descriptions begin.
pub const LOAD_BALANCER_DESCRIPTION_PREFIX: &str = "Kubernetes external service ";

/// The load balancer's description.
pub fn load_balancer_description(cluster: &str, namespace: &str, name: &str) -> String {
    cut_255(format!(
        "{LOAD_BALANCER_DESCRIPTION_PREFIX}{namespace}/{name} from cluster {cluster}"
    ))
}

/// The description of a floating IP OCCM creates for the Service: its ownership marker.
pub fn floating_ip_description(cluster: &str, namespace: &str, name: &str) -> String {
    cut_255(format!(
        "{FLOATING_IP_MARKER} {namespace}/{name} from cluster {cluster}"
    ))
}

/// Whether a floating IP's description says OCCM (or this provider) created it: only such a
/// floating IP is deleted with its load balancer; one the user made (`loadBalancerIP`) is kept.
pub fn is_created_floating_ip(description: &str) -> bool {
    description.contains(FLOATING_IP_MARKER)
}

/// [`is_created_floating_ip`] of a floating IP as Neutron lists it.
pub fn is_created(fip: &crate::neutron::floating_ips::FloatingIp) -> bool {
    is_created_floating_ip(fip.description.as_deref().unwrap_or(""))
}

/// A member's name with `provider-requires-serial-api-calls` (OCCM's
/// `SeriallyReconcilePoolMembers`): `member_<node>_<address>_<nodePort>`.
pub fn serial_member_name(node: &str, address: &str, node_port: u16) -> String {
    cut_255(format!("member_{node}_{address}_{node_port}"))
}

/// The security group of `manage-security-groups`: `lb-sg-<uid>-<namespace>-<name>`.
pub fn security_group_name(uid: &str, namespace: &str, name: &str) -> String {
    cut_255(format!("lb-sg-{uid}-{namespace}-{name}"))
}

/// The security group's description.
pub fn security_group_description(cluster: &str, namespace: &str, name: &str) -> String {
    cut_255(format!(
        "Security Group for {namespace}/{name} Service LoadBalancer in cluster {cluster}"
    ))
}

/// The cluster name inside an OCCM object name (`[<prefix>]kube_service_<cluster>_<ns>[_<name>]`),
/// as OCCM's `getClusterName` reads it: everything between `kube_service_` and the last one or
/// two `_`-separated parts. A cluster name with `_` in it is read whole when the name is whole;
/// when the name was cut at 255 bytes inside the namespace, such a cluster name loses its last
/// part, as OCCM's does. `None` when the name has no such shape.
pub fn cluster_of(object_name: &str) -> Option<&str> {
    let start = object_name.find(SERVICE_PREFIX)? + SERVICE_PREFIX.len();
    let rest = &object_name[start..];
    // OCCM's regex `kube_service_(.+?)_[^_]+(_[^_]+)?$`: the shortest non-empty cluster whose
    // remainder is one or two non-empty `_`-parts.
    rest.match_indices('_')
        .map(|(i, _)| i)
        .filter(|&i| i > 0)
        .find_map(|i| {
            let tail: Vec<&str> = rest[i + 1..].split('_').collect();
            let fits = (1..=2).contains(&tail.len()) && tail.iter().all(|part| !part.is_empty());
            fits.then(|| &rest[..i])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // OCCM's TestLbaasV2_GetLoadBalancerName.
    #[test]
    fn load_balancer_names_as_occm_names_them() {
        let long_name = "a-longer-valid-name-for-the-load-balance-name-to-test-if-the-length-of-value-is-longer-than-required-maximum-length-random-addition-hardcode-number-to-make-it-above-length-255-at-the-end-yeah-so-the-rest-is-additional-input";
        let cases = [
            (
                ("my-valid-cluster", "valid-cluster-namespace", "valid-name"),
                "kube_service_my-valid-cluster_valid-cluster-namespace_valid-name".to_owned(),
            ),
            (
                ("a-longer-valid-cluster", "a-longer-valid-cluster-namespace", long_name),
                "kube_service_a-longer-valid-cluster_a-longer-valid-cluster-namespace_a-longer-valid-name-for-the-load-balance-name-to-test-if-the-length-of-value-is-longer-than-required-maximum-length-random-addition-hardcode-number-to-make-it-above-length-255-at-the-end".to_owned(),
            ),
            (("", "", ""), "kube_service___".to_owned()),
        ];
        for ((cluster, namespace, name), want) in cases {
            assert_eq!(load_balancer_name(cluster, namespace, name), want);
        }
    }

    // OCCM's Test_getSecurityGroupName.
    #[test]
    fn security_group_names_as_occm_names_them() {
        assert_eq!(
            security_group_name("12345", "security-group-namespace", "security-group-name"),
            "lb-sg-12345-security-group-namespace-security-group-name"
        );
        let long = "security-group-longer-test-service-name-with-more-than-255-byte-this-test-should-be-longer-than-255-i-need-that-ijiojohoo-afhwefkbfk-jwebfwbifwbewifobiu-efbiobfoiqwebi-the-end-e-end-pardon-the-long-string-i-really-apologize-if-this-is-a-bad-thing-to-do";
        assert_eq!(
            security_group_name(
                "12345678-90ab-cdef-0123-456789abcdef",
                "security-group-longer-test-namespace",
                long
            ),
            "lb-sg-12345678-90ab-cdef-0123-456789abcdef-security-group-longer-test-namespace-security-group-longer-test-service-name-with-more-than-255-byte-this-test-should-be-longer-than-255-i-need-that-ijiojohoo-afhwefkbfk-jwebfwbifwbewifobiu-efbiobfoiqwebi-the-end"
        );
        assert_eq!(security_group_name("", "", ""), "lb-sg---");
    }

    #[test]
    fn children_and_descriptions_as_occm_writes_them() {
        let lb = load_balancer_name("kubernetes", "default", "web");
        assert_eq!(
            listener_name(0, &lb),
            "listener_0_kube_service_kubernetes_default_web"
        );
        assert_eq!(pool_name(1, &lb), "pool_1_kube_service_kubernetes_default_web");
        assert_eq!(
            monitor_name(2, &lb),
            "monitor_2_kube_service_kubernetes_default_web"
        );
        assert_eq!(
            load_balancer_description("kubernetes", "default", "web"),
            "Kubernetes external service default/web from cluster kubernetes"
        );
        let fip = floating_ip_description("kubernetes", "default", "web");
        assert_eq!(
            fip,
            "Floating IP for Kubernetes external service default/web from cluster kubernetes"
        );
        assert!(is_created_floating_ip(&fip));
        assert!(!is_created_floating_ip("reserved for the web site"));
        assert!(!is_created_floating_ip(""));
        assert_eq!(
            security_group_description("kubernetes", "default", "web"),
            "Security Group for default/web Service LoadBalancer in cluster kubernetes"
        );
    }

    // OCCM's TestDecomposeLBName.
    #[test]
    fn the_cluster_inside_a_name_is_read_as_occm_reads_it() {
        let cut = cut_255(format!(
            "listener_kube_service_kubernetes_namespace{}_name",
            "foo".repeat(100)
        ));
        let cases: [(&str, Option<&str>); 7] = [
            ("kube_service_kubernetes_namespace_name", Some("kubernetes")),
            (
                "listener_kube_service_kubernetes_namespace_name",
                Some("kubernetes"),
            ),
            (
                "listener_kube_service_kubernetes_123_namespace_name",
                Some("kubernetes_123"),
            ),
            ("FOOBAR", None),
            (&cut, Some("kubernetes")),
            ("kube_service___", None),
            ("kube_service_c_ns", Some("c")),
        ];
        for (name, want) in cases {
            assert_eq!(cluster_of(name), want, "{name}");
        }
    }

    #[test]
    fn a_name_is_cut_at_a_character_boundary() {
        let name = load_balancer_name("c", "ns", &"é".repeat(200));
        assert!(
            name.len() <= MAX_LEN && name.len() >= MAX_LEN - 1,
            "{}",
            name.len()
        );
        assert!(name.ends_with('é'));
    }
}
