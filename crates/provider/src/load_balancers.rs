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
    /// The identity of the Service's cluster (the kube-system Namespace's UID), from the
    /// request; empty when the caller did not send it.
    pub cluster_id: String,
    /// `spec.ipFamilies`, the primary first; empty when the caller did not send them.
    pub ip_families: Vec<IpFamily>,
}

/// An IP family of a Service (`spec.ipFamilies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum IpFamily {
    V4,
    V6,
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
    /// Annotations the vendor's CCM writes back on the Service with its status (OpenStack: the
    /// load balancer's ID and address), each under [`LoadBalancers::service_annotation_prefix`];
    /// answered by an ensure, ignored elsewhere.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Something a Service asks that the provider reads other than written, as the vendor's CCM
/// reads it (a value it falls back from, a key it ignores): told once to the Service's owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceNotice {
    /// An UpperCamelCase event reason.
    pub reason: String,
    /// Names the annotation, its value and what is used instead.
    pub message: String,
}

/// One ingress point of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoadBalancerIngress {
    /// IP address, or empty.
    pub ip: String,
    /// DNS name, or empty.
    pub hostname: String,
    /// core/v1 `ipMode` of the IP: `VIP`, `Proxy` (the load balancer rewrites the traffic, so
    /// it must not be short-circuited inside the cluster), or empty (unset: VIP).
    pub ip_mode: String,
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

/// One Service's load-balancer read in a batch ([`LoadBalancers::read_load_balancers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadBalancerRead {
    /// The Service whose load balancer is read.
    pub service: ServiceSpec,
    /// `Some(nodes)` for the check an ensure starts with: whether the load balancer is already
    /// as `service` on `nodes` asks. `None` for a plain get.
    pub ensure_nodes: Option<Vec<LoadBalancerNode>>,
}

/// What a batched read found for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadBalancerObservation {
    /// No load balancer of this cluster's for the Service.
    Absent,
    /// The Service's load balancer exists (a get).
    Present(LoadBalancerStatus),
    /// (ensure reads) The load balancer is known to be exactly as the request asks: the ensure
    /// may answer this status without a write.
    Converged(LoadBalancerStatus),
    /// (ensure reads) The read cannot settle it: a full ensure must run.
    NeedsEnsure,
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

    /// What the provider reads in `service` other than written, as the vendor's CCM reads it
    /// (see [`ServiceNotice`]); the gateway adds it to every ensure's answer. No cloud call, and
    /// the same for the same Service. The default: nothing.
    fn service_notices(&self, cluster: &str, service: &ServiceSpec) -> Vec<ServiceNotice> {
        let _ = (cluster, service);
        Vec::new()
    }

    /// The prefix of every annotation in [`LoadBalancerStatus::annotations`]; empty (the
    /// default): the provider sets none.
    fn service_annotation_prefix(&self) -> &'static str {
        ""
    }

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

    /// Which reads may share one batched provider call: reads whose keys differ go in different
    /// batches (AWS: Classic ELBs and ELBv2 load balancers are read by different APIs). No cloud
    /// call. The default puts every read in one batch.
    fn read_batch_key(&self, cluster: &str, service: &ServiceSpec) -> String {
        let _ = (cluster, service);
        String::new()
    }

    /// Whether an ensure read ([`LoadBalancerRead::ensure_nodes`] set) can answer `Converged`.
    /// When it can, the gateway asks it before every ensure (batched with other Services'
    /// reads) and answers a converged load balancer without a write; when not (the default), an
    /// ensure goes straight to [`Self::ensure_load_balancer`].
    fn checks_before_ensure(&self) -> bool {
        false
    }

    /// Most reads one [`Self::read_load_balancers`] call may carry. The gateway spends one
    /// rate-limit token per call, so a provider that reads one by one (the default) says 1.
    fn max_read_batch(&self) -> usize {
        1
    }

    /// Reads many Services' load balancers at once (at most [`Self::max_read_batch`], all of one
    /// [`Self::read_batch_key`]),
    /// so the gateway can merge concurrent gets and the reads ensures start with into a few cloud
    /// calls (AWS: one DescribeLoadBalancers and one DescribeTags for 20 names; a cloud with
    /// tags on its load balancers: one list filtered by the cluster's tag).
    ///
    /// # Guarantees
    /// Exactly one answer per read, in order. A read's own problem goes in its own entry, never
    /// in its neighbours' (one name not found among 20 is that one's `Absent`). A plain get
    /// answers `Absent` or `Present`; an ensure read answers `Converged` only when an ensure
    /// would change nothing, else `NeedsEnsure` (or an error an ensure would answer too).
    ///
    /// The default reads one by one: a get through [`Self::get_load_balancer`], and an ensure
    /// read answers `NeedsEnsure` without a cloud call (the ensure itself then decides).
    ///
    /// # Errors
    /// The outer error fails the whole batch (the cloud unreachable).
    async fn read_load_balancers(
        &self,
        cluster: &str,
        reads: &[LoadBalancerRead],
    ) -> Result<Vec<Result<LoadBalancerObservation>>> {
        let mut answers = Vec::with_capacity(reads.len());
        for read in reads {
            answers.push(if read.ensure_nodes.is_some() {
                Ok(LoadBalancerObservation::NeedsEnsure)
            } else {
                self.get_load_balancer(cluster, &read.service)
                    .await
                    .map(|status| {
                        status.map_or(LoadBalancerObservation::Absent, LoadBalancerObservation::Present)
                    })
            });
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A provider with only the required methods: services whose UID starts with `x` have no
    /// load balancer, `e` ones fail.
    struct OneByOne(std::sync::Mutex<usize>);

    #[async_trait]
    impl LoadBalancers for OneByOne {
        async fn get_load_balancer(
            &self,
            _: &str,
            service: &ServiceSpec,
        ) -> Result<Option<LoadBalancerStatus>> {
            *self.0.lock().unwrap() += 1;
            match service.uid.chars().next() {
                Some('x') => Ok(None),
                Some('e') => Err(crate::ProviderError::Unavailable(service.uid.clone())),
                _ => Ok(Some(LoadBalancerStatus {
                    ingress: vec![LoadBalancerIngress {
                        ip: String::new(),
                        hostname: format!("{}.lb", service.uid),
                        ip_mode: String::new(),
                    }],
                    ..LoadBalancerStatus::default()
                })),
            }
        }
        async fn ensure_load_balancer(
            &self,
            _: &str,
            _: &ServiceSpec,
            _: &[LoadBalancerNode],
        ) -> Result<LoadBalancerStatus> {
            unreachable!("a read never ensures")
        }
        async fn update_load_balancer(&self, _: &str, _: &ServiceSpec, _: &[LoadBalancerNode]) -> Result<()> {
            unreachable!("a read never updates")
        }
        async fn ensure_load_balancer_deleted(&self, _: &str, _: &ServiceSpec) -> Result<()> {
            unreachable!("a read never deletes")
        }
    }

    #[tokio::test]
    async fn the_default_batch_read_answers_each_read_on_its_own() {
        let p = OneByOne(std::sync::Mutex::new(0));
        let read = |uid: &str, ensure: bool| LoadBalancerRead {
            service: ServiceSpec {
                uid: uid.into(),
                ..Default::default()
            },
            ensure_nodes: ensure.then(Vec::new),
        };
        // (read, what it answers)
        let cases: [(LoadBalancerRead, std::result::Result<Option<&str>, ()>); 4] = [
            (read("a", false), Ok(Some("a.lb"))),
            (read("x", false), Ok(None)),
            (read("e", false), Err(())),
            (read("a", true), Ok(None)), // NeedsEnsure: the ensure decides
        ];
        let reads: Vec<LoadBalancerRead> = cases.iter().map(|(r, _)| r.clone()).collect();
        let answers = p.read_load_balancers("c", &reads).await.unwrap();
        assert_eq!(answers.len(), cases.len());
        for ((read, want), got) in cases.iter().zip(answers) {
            match (want, got) {
                (Ok(Some(host)), Ok(LoadBalancerObservation::Present(s))) => {
                    assert_eq!(s.ingress[0].hostname, *host)
                }
                (Ok(None), Ok(LoadBalancerObservation::Absent)) => assert!(read.ensure_nodes.is_none()),
                (Ok(None), Ok(LoadBalancerObservation::NeedsEnsure)) => assert!(read.ensure_nodes.is_some()),
                (Err(()), Err(crate::ProviderError::Unavailable(uid))) => assert_eq!(uid, "e"),
                (want, got) => panic!("{read:?}: wanted {want:?}, got {got:?}"),
            }
        }
        assert_eq!(*p.0.lock().unwrap(), 3, "an ensure read makes no call by default");
        assert_eq!(p.read_batch_key("c", &read("a", false).service), "");
        assert_eq!(p.max_read_batch(), 1);
        assert!(!p.checks_before_ensure());
    }
}
