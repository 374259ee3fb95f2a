//! The LoadBalancer capability and the service and node views it works on.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{NodeAddress, Result};

/// The parts of a core/v1 Service a load balancer is built from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceSpec {
    /// `metadata.uid`; load balancer names derive from it.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: ExternalTrafficPolicy,
    /// `spec.healthCheckNodePort`; 0 when unset.
    pub health_check_node_port: u16,
    /// `spec.loadBalancerSourceRanges`.
    pub source_ranges: Vec<String>,
    /// `spec.loadBalancerIP`; empty when unset.
    pub requested_ip: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec.sessionAffinity == ClientIP`.
    pub session_affinity_client_ip: bool,
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServicePort {
    /// Port name (may be empty for a single-port service).
    pub name: String,
    /// L4 protocol.
    pub protocol: Protocol,
    /// The load balancer's front port.
    pub port: u16,
    /// The node port traffic is sent to.
    pub node_port: u16,
}

/// L4 protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP
    Tcp,
    /// UDP
    Udp,
    /// SCTP
    Sctp,
}

impl Protocol {
    /// The Kubernetes spelling.
    pub fn as_k8s_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

/// `spec.externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalTrafficPolicy {
    /// Any node forwards (health check on kube-proxy's `:10256/healthz`).
    #[default]
    Cluster,
    /// Only nodes with local endpoints receive traffic (health check on `healthCheckNodePort`).
    Local,
}

/// A backend node of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LoadBalancerNode {
    /// Node name.
    pub name: String,
    /// `spec.providerID`.
    pub provider_id: String,
    /// `status.addresses`.
    pub addresses: Vec<NodeAddress>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

/// core/v1 LoadBalancerStatus.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoadBalancerStatus {
    /// Where the load balancer answers.
    pub ingress: Vec<LoadBalancerIngress>,
}

/// One ingress point of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoadBalancerIngress {
    /// IP address, or empty.
    pub ip: String,
    /// DNS name, or empty.
    pub hostname: String,
}

/// `cloudprovider.DefaultLoadBalancerName`: `"a"` + the service UID without dashes, truncated to
/// 32 bytes. Deterministic, so that ensure is idempotent across crashes.
///
/// A UID is ASCII when it comes from an API server; anything else (it also arrives over gRPC) is
/// cut at the last whole character within 32 bytes rather than inside one.
pub fn default_load_balancer_name(service_uid: &str) -> String {
    let mut name = String::from("a");
    for c in service_uid.chars().filter(|c| *c != '-') {
        if name.len() + c.len_utf8() > 32 {
            break;
        }
        name.push(c);
    }
    name
}

/// cloudprovider.LoadBalancer.
///
/// # Guarantees every implementation gives
/// Every mutating call is idempotent: a repeat after a timeout or a crash converges to the same
/// cloud state and never creates a second load balancer for one service (names derive from the
/// service UID; resources are tagged with the cluster name).
#[async_trait]
pub trait LoadBalancers: Send + Sync {
    /// The load balancer's status, or `None` when it does not exist.
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancerStatus>>;

    /// The name the provider gives the service's load balancer. No cloud call.
    fn load_balancer_name(&self, cluster: &str, service: &ServiceSpec) -> String {
        let _ = cluster;
        default_load_balancer_name(&service.uid)
    }

    /// Creates or updates the load balancer to serve `service` on `nodes`.
    ///
    /// # Errors
    /// `ImplementedElsewhere` when another controller owns the service's load balancer;
    /// `RetryAfter` while the cloud is still provisioning it.
    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<LoadBalancerStatus>;

    /// Updates the backends of an existing load balancer.
    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<()>;

    /// Deletes the load balancer and everything created for it; succeeds when nothing is left.
    /// Never returns `ImplementedElsewhere`.
    async fn ensure_load_balancer_deleted(&self, cluster: &str, service: &ServiceSpec) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::default_load_balancer_name;

    #[test]
    fn default_name_matches_upstream() {
        let cases = [
            (
                "8a7b3c2d-1111-2222-3333-444455556666",
                "a8a7b3c2d111122223333444455556666",
            ),
            ("short", "ashort"),
            ("", "a"),
        ];
        for (uid, want) in cases {
            let want: String = want.chars().take(32).collect();
            assert_eq!(default_load_balancer_name(uid), want, "{uid}");
        }
        assert_eq!(
            default_load_balancer_name("8a7b3c2d-1111-2222-3333-444455556666").len(),
            32
        );
    }

    /// Found by the AWS provider's fuzzing: a UID with a multi-byte character at byte 32 panicked
    /// (a gRPC request could take the gateway down with it).
    #[test]
    fn a_non_ascii_uid_is_cut_between_characters() {
        let uid = format!("{}é", "0".repeat(30));
        let name = default_load_balancer_name(&uid);
        assert_eq!(name, format!("a{}", "0".repeat(30)));
        assert!(default_load_balancer_name(&"ü".repeat(40)).len() <= 32);
    }
}
