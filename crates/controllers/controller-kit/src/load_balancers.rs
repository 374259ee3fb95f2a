//! The cloud's load balancers as the service controller sees them: a trait over the gateway's
//! `LoadBalancers` service (a fake in tests), taking Kubernetes Services and answering
//! Kubernetes statuses. The protobuf types stop here.

use std::collections::BTreeMap;

use gateway_api::v1 as pb;
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, NodeAddress, Service, ServicePort,
};

use crate::gateway::{GatewayClient, GatewayError, address_type_to_pb, with_timeout};

/// A backend of a load balancer: a node as the cloud needs to know it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BackendNode {
    /// `metadata.name`.
    pub name: String,
    /// `spec.providerID`, empty when unset.
    pub provider_id: String,
    /// `status.addresses`.
    pub addresses: Vec<NodeAddress>,
    /// `metadata.labels` (providers may choose backends by label).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// What an ensure answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ensured {
    /// The load balancer's status.
    pub status: LoadBalancerStatus,
    /// Annotations the provider sets on the Service with the status, each under its
    /// [`ServingProvider::annotation_prefix`] (the controller checks it again).
    pub annotations: BTreeMap<String, String>,
    /// What the provider read in the Service other than written, and what it used instead.
    pub notices: Vec<Notice>,
}

impl From<LoadBalancerStatus> for Ensured {
    fn from(status: LoadBalancerStatus) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }
}

/// Something the provider reads in a Service other than written (a value its vendor's CCM falls
/// back from, a key it ignores), for a Warning event on the Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Notice {
    /// The event's reason.
    pub reason: String,
    /// The event's note.
    pub message: String,
}

/// cloudprovider.LoadBalancer, over the gateway. Every call is idempotent: the load balancer's
/// name derives from the Service's UID, so a repeat after a crash never creates a second one.
#[async_trait::async_trait]
pub trait CloudLoadBalancers: Send + Sync {
    /// The load balancer's status, `None` when it does not exist.
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, GatewayError>;

    /// Creates or updates the load balancer for `service` over `nodes`.
    ///
    /// # Errors
    /// `ImplementedElsewhere` (leave the Service alone), `RetryAfter` (provisioning; ask again
    /// after exactly that delay), `InvalidArgument` (the Service asks for what the cloud cannot
    /// do), or a transient error.
    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError>;

    /// [`CloudLoadBalancers::ensure_load_balancer`] for a Service that shows no sign of a load
    /// balancer yet (no status, no cleanup finalizer before this sync): the gateway is told so
    /// ([`gateway_api::NO_LOAD_BALANCER_YET_HEADER`]) and may skip the read an ensure starts
    /// with, which could only find nothing. By default, a plain ensure.
    async fn ensure_new_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        self.ensure_load_balancer(cluster, service, nodes).await
    }

    /// Replaces the backends of the existing load balancer.
    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<(), GatewayError>;

    /// Deletes the load balancer; succeeds when there is none.
    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<(), GatewayError>;

    /// Which provider the cloud behind this client serves now, asked of it: the last answer's
    /// may predate a swap of the gateway for another vendor's. While no gateway answers (a
    /// swap under way), this waits, as every call does. `None` when this cloud does not say.
    async fn current_provider(&self) -> Result<Option<String>, GatewayError> {
        Ok(None)
    }

    /// [`CloudLoadBalancers::current_provider`], and whether that provider serves load balancers
    /// at all (its capabilities), asked in one question. A provider without them holds none and
    /// makes none: every load-balancer call to it fails (UNIMPLEMENTED). By default, the provider
    /// `current_provider` names, taken to serve them.
    async fn serving_provider(&self) -> Result<ServingProvider, GatewayError> {
        Ok(ServingProvider {
            name: self.current_provider().await?,
            load_balancers: true,
            annotation_prefix: String::new(),
        })
    }
}

/// The provider behind the gateway now, as it answers when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingProvider {
    /// Its name; `None` when the cloud does not say.
    pub name: Option<String>,
    /// Whether it serves load balancers (its capabilities).
    pub load_balancers: bool,
    /// The prefix of the Service annotations it sets (its capabilities); empty: none.
    pub annotation_prefix: String,
}

impl GatewayClient {
    /// EnsureLoadBalancer, with [`gateway_api::NO_LOAD_BALANCER_YET_HEADER`] when
    /// `no_load_balancer_yet`.
    async fn ensure(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
        no_load_balancer_yet: bool,
    ) -> Result<Ensured, GatewayError> {
        let request = pb::EnsureLoadBalancerRequest {
            cluster_name: cluster.to_owned(),
            service: Some(service_to_pb(service)?),
            cluster_id: self.cluster_id.clone(),
            nodes: nodes.iter().map(node_to_pb).collect(),
        };
        let answer = self
            .write_call(
                "EnsureLoadBalancer",
                KIND,
                &service_object(service),
                || summary(service, Some(nodes)),
                |timeout| {
                    let mut c = self.load_balancers.clone();
                    let mut request = self.write_request(request.clone(), timeout);
                    if no_load_balancer_yet {
                        request.metadata_mut().insert(
                            gateway_api::NO_LOAD_BALANCER_YET_HEADER,
                            tonic::metadata::MetadataValue::from_static("true"),
                        );
                    }
                    async move { c.ensure_load_balancer(request).await }
                },
            )
            .await?;
        // Dry-run with a gateway that cannot dry-run: not sent; the load balancer as it is.
        let Some(answer) = answer else {
            return Ok(self
                .get_load_balancer(cluster, service)
                .await?
                .unwrap_or_default()
                .into());
        };
        // Upstream refuses a nil status ("service status returned by EnsureLoadBalancer is nil").
        let status = answer.status.ok_or_else(|| {
            GatewayError::Internal("the gateway answered EnsureLoadBalancer without a status".into())
        })?;
        Ok(Ensured {
            status: status_from_pb(status),
            annotations: answer.service_annotations.into_iter().collect(),
            notices: answer
                .notices
                .into_iter()
                .map(|n| Notice {
                    reason: n.reason,
                    message: n.message,
                })
                .collect(),
        })
    }
}

#[async_trait::async_trait]
impl CloudLoadBalancers for GatewayClient {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, GatewayError> {
        let request = pb::GetLoadBalancerRequest {
            cluster_name: cluster.to_owned(),
            service: Some(service_to_pb(service)?),
            cluster_id: self.cluster_id.clone(),
        };
        let answer = self
            .with_retries("GetLoadBalancer", |timeout| {
                let mut c = self.load_balancers.clone();
                let request = with_timeout(request.clone(), timeout);
                async move { c.get_load_balancer(request).await }
            })
            .await?
            .into_inner();
        Ok(answer
            .exists
            .then(|| status_from_pb(answer.status.unwrap_or_default())))
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        self.ensure(cluster, service, nodes, false).await
    }

    async fn ensure_new_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<Ensured, GatewayError> {
        self.ensure(cluster, service, nodes, true).await
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[BackendNode],
    ) -> Result<(), GatewayError> {
        let request = pb::UpdateLoadBalancerRequest {
            cluster_name: cluster.to_owned(),
            service: Some(service_to_pb(service)?),
            cluster_id: self.cluster_id.clone(),
            nodes: nodes.iter().map(node_to_pb).collect(),
        };
        self.write_call(
            "UpdateLoadBalancer",
            KIND,
            &service_object(service),
            || summary(service, Some(nodes)),
            |timeout| {
                let mut c = self.load_balancers.clone();
                let request = self.write_request(request.clone(), timeout);
                async move { c.update_load_balancer(request).await }
            },
        )
        .await?;
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> Result<(), GatewayError> {
        let request = pb::EnsureLoadBalancerDeletedRequest {
            cluster_name: cluster.to_owned(),
            service: Some(service_to_pb(service)?),
            cluster_id: self.cluster_id.clone(),
        };
        self.write_call(
            "EnsureLoadBalancerDeleted",
            KIND,
            &service_object(service),
            || summary(service, None),
            |timeout| {
                let mut c = self.load_balancers.clone();
                let request = self.write_request(request.clone(), timeout);
                async move { c.ensure_load_balancer_deleted(request).await }
            },
        )
        .await?;
        Ok(())
    }

    async fn current_provider(&self) -> Result<Option<String>, GatewayError> {
        Ok(self.serving_provider().await?.name)
    }

    async fn serving_provider(&self) -> Result<ServingProvider, GatewayError> {
        let caps = self.capabilities().await?;
        if !caps.provider_name.is_empty() {
            self.provider().observe(&caps.provider_name);
        }
        Ok(ServingProvider {
            name: Some(caps.provider_name).filter(|n| !n.is_empty()),
            load_balancers: caps.load_balancers,
            annotation_prefix: caps.service_annotation_prefix,
        })
    }
}

/// The planned-change kind of every load-balancer write call in dry-run.
const KIND: &str = "load_balancer";

/// How a planned change names a Service.
fn service_object(service: &Service) -> String {
    crate::dry_run::object_name(
        "Service",
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A load-balancer write call's request as a planned change shows it when the call is not sent
/// (deterministic: the same request reads the same).
fn summary(service: &Service, nodes: Option<&[BackendNode]>) -> serde_json::Value {
    let spec = service.spec.clone().unwrap_or_default();
    let ports: Vec<serde_json::Value> = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(|p| {
            serde_json::json!({
                "name": p.name, "protocol": p.protocol, "port": p.port, "nodePort": p.node_port,
            })
        })
        .collect();
    let mut nodes: Option<Vec<&str>> = nodes.map(|n| n.iter().map(|n| n.name.as_str()).collect());
    if let Some(nodes) = &mut nodes {
        nodes.sort_unstable();
    }
    serde_json::json!({
        "uid": service.metadata.uid,
        "ports": ports,
        "annotations": service.metadata.annotations,
        "nodes": nodes,
    })
}

/// The parts of a Service a load balancer is built from.
///
/// # Errors
/// `InvalidArgument` for what the contract cannot carry (a port protocol other than TCP, UDP
/// or SCTP, a port number out of range): the Service can never be served as it is.
pub fn service_to_pb(service: &Service) -> Result<pb::Service, GatewayError> {
    let meta = &service.metadata;
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(port_to_pb)
        .collect::<Result<Vec<_>, _>>()?;
    let policy = match spec.external_traffic_policy.as_deref() {
        Some("Local") => pb::ExternalTrafficPolicy::Local,
        _ => pb::ExternalTrafficPolicy::Cluster,
    };
    Ok(pb::Service {
        uid: meta.uid.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        ports,
        external_traffic_policy: policy.into(),
        health_check_node_port: spec.health_check_node_port.unwrap_or(0),
        load_balancer_source_ranges: spec.load_balancer_source_ranges.unwrap_or_default(),
        load_balancer_ip: spec.load_balancer_ip.unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default().into_iter().collect(),
        session_affinity_client_ip: spec.session_affinity.as_deref() == Some("ClientIP"),
        // The API server only holds these two; anything else would be refused by the gateway.
        ip_families: spec
            .ip_families
            .unwrap_or_default()
            .iter()
            .map(|f| match f.as_str() {
                "IPv6" => pb::IpFamily::Ipv6,
                "IPv4" => pb::IpFamily::Ipv4,
                _ => pb::IpFamily::Unspecified,
            } as i32)
            .collect(),
    })
}

fn port_to_pb(port: &ServicePort) -> Result<pb::ServicePort, GatewayError> {
    let protocol = match port.protocol.as_deref().unwrap_or("TCP") {
        "TCP" => pb::Protocol::Tcp,
        "UDP" => pb::Protocol::Udp,
        "SCTP" => pb::Protocol::Sctp,
        other => {
            return Err(GatewayError::InvalidArgument(format!(
                "port {} has protocol {other:?}; a load balancer serves TCP, UDP or SCTP",
                port.port
            )));
        }
    };
    let in_range = |n: i32| (0..=65535).contains(&n);
    if !in_range(port.port) || !in_range(port.node_port.unwrap_or(0)) {
        return Err(GatewayError::InvalidArgument(format!(
            "port {} (nodePort {}) is out of range",
            port.port,
            port.node_port.unwrap_or(0)
        )));
    }
    Ok(pb::ServicePort {
        name: port.name.clone().unwrap_or_default(),
        protocol: protocol.into(),
        port: port.port,
        node_port: port.node_port.unwrap_or(0),
    })
}

fn node_to_pb(node: &BackendNode) -> pb::LoadBalancerNode {
    pb::LoadBalancerNode {
        name: node.name.clone(),
        provider_id: node.provider_id.clone(),
        addresses: node
            .addresses
            .iter()
            .map(|a| pb::NodeAddress {
                r#type: address_type_to_pb(&a.type_).into(),
                address: a.address.clone(),
            })
            .collect(),
        labels: node.labels.clone().into_iter().collect(),
    }
}

fn status_from_pb(status: pb::LoadBalancerStatus) -> LoadBalancerStatus {
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    LoadBalancerStatus {
        ingress: Some(
            status
                .ingress
                .into_iter()
                .map(|i| LoadBalancerIngress {
                    ip_mode: non_empty(i.ip_mode).filter(|_| !i.ip.is_empty()),
                    ip: non_empty(i.ip),
                    hostname: non_empty(i.hostname),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;
    use kube::api::ObjectMeta;

    use super::*;

    fn service(ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(ports),
                external_traffic_policy: Some("Local".into()),
                health_check_node_port: Some(31000),
                session_affinity: Some("ClientIP".into()),
                ip_families: Some(vec!["IPv6".into(), "IPv4".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn port(protocol: &str, port: i32, node_port: i32) -> ServicePort {
        ServicePort {
            protocol: Some(protocol.into()),
            port,
            node_port: Some(node_port),
            ..Default::default()
        }
    }

    #[test]
    fn a_service_becomes_the_contracts_view_of_it() {
        let pb = service_to_pb(&service(vec![port("UDP", 53, 30053)])).unwrap();
        assert_eq!(
            (pb.uid.as_str(), pb.namespace.as_str(), pb.name.as_str()),
            ("u-1", "shop", "web")
        );
        assert_eq!(pb.ports[0].protocol, i32::from(pb::Protocol::Udp));
        assert_eq!((pb.ports[0].port, pb.ports[0].node_port), (53, 30053));
        assert_eq!(
            pb.external_traffic_policy,
            i32::from(pb::ExternalTrafficPolicy::Local)
        );
        assert_eq!(pb.health_check_node_port, 31000);
        assert!(pb.session_affinity_client_ip);
        assert_eq!(
            pb.ip_families,
            vec![i32::from(pb::IpFamily::Ipv6), i32::from(pb::IpFamily::Ipv4)]
        );
    }

    #[test]
    fn what_the_contract_cannot_carry_is_an_invalid_argument() {
        for bad in [
            port("HTTP", 80, 30080),
            port("TCP", 70000, 30080),
            port("TCP", 80, -1),
        ] {
            let err = service_to_pb(&service(vec![bad.clone()])).unwrap_err();
            assert!(
                matches!(err, GatewayError::InvalidArgument(_)),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn empty_ingress_fields_are_absent_not_empty_strings() {
        let status = status_from_pb(pb::LoadBalancerStatus {
            ingress: vec![
                pb::LoadBalancerIngress {
                    ip: "203.0.113.7".into(),
                    hostname: String::new(),
                    ip_mode: String::new(),
                },
                pb::LoadBalancerIngress {
                    ip: "203.0.113.8".into(),
                    hostname: String::new(),
                    ip_mode: "Proxy".into(),
                },
            ],
        });
        let ingress = status.ingress.unwrap();
        assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.7"));
        assert_eq!((&ingress[0].hostname, &ingress[0].ip_mode), (&None, &None));
        assert_eq!(
            ingress[1].ip_mode.as_deref(),
            Some("Proxy"),
            "the provider's ipMode is written"
        );
    }
}
