//! Test objects in one line each.

use std::collections::BTreeMap;

use controller_kit::gateway::{Instance, InstanceMetadata};
use k8s_openapi::{
    api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus,
        Service, ServicePort, ServiceSpec, ServiceStatus, Taint,
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, Time},
        util::intstr::IntOrString,
    },
    jiff::Timestamp,
};

/// A Node as kubelet registers it, changed one field at a time.
#[derive(Debug, Clone)]
pub struct NodeBuilder(Node);

impl NodeBuilder {
    /// A node named `name` with no taints, no conditions, no addresses.
    pub fn new(name: &str) -> Self {
        Self(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        })
    }

    /// With `spec.providerID`.
    pub fn provider_id(mut self, id: &str) -> Self {
        self.spec().provider_id = Some(id.into());
        self
    }

    /// With a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// With an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// With a `NoSchedule` taint `key` (value `true`, as kubelet sets the uninitialized one).
    pub fn taint(mut self, key: &str) -> Self {
        self.spec().taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        self
    }

    /// With exactly these taints' keys (all `NoSchedule`); `&[]` removes them all.
    pub fn taints(mut self, keys: &[&str]) -> Self {
        self.spec().taints = Some(Vec::new());
        keys.iter().fold(self, |node, key| node.taint(key))
    }

    /// With a `Ready` condition, `True` or `False`.
    pub fn ready(mut self, ready: bool) -> Self {
        let status = self.status();
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        });
        self
    }

    /// With these `(type, address)` pairs as `status.addresses`.
    pub fn addresses(mut self, addresses: &[(&str, &str)]) -> Self {
        self.status().addresses = Some(addresses.iter().map(|(t, a)| address(t, a)).collect());
        self
    }

    /// With `metadata.uid`.
    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    /// With these `spec.podCIDRs` (and `spec.podCIDR`, the first, as the API server keeps it).
    pub fn pod_cidrs(mut self, cidrs: &[&str]) -> Self {
        let spec = self.spec();
        spec.pod_cidr = cidrs.first().map(|c| (*c).to_owned());
        spec.pod_cidrs = Some(cidrs.iter().map(|c| (*c).to_owned()).collect());
        self
    }

    /// With a condition `type_` (replacing one of that type) of `status` and `reason`.
    pub fn condition(mut self, type_: &str, status: &str, reason: &str) -> Self {
        let conditions = self.status().conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_);
        conditions.push(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..Default::default()
        });
        self
    }

    /// Being deleted (`metadata.deletionTimestamp` set).
    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        self
    }

    /// The node.
    pub fn build(self) -> Node {
        self.0
    }

    fn spec(&mut self) -> &mut NodeSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    fn status(&mut self) -> &mut NodeStatus {
        self.0.status.get_or_insert_with(Default::default)
    }
}

/// A Service in `default`, as upstream's tests make them: type LoadBalancer, one TCP port 80
/// (node port 30080), uid `uid-<name>`; changed one field at a time.
#[derive(Debug, Clone)]
pub struct ServiceBuilder(Service);

impl ServiceBuilder {
    /// A LoadBalancer Service named `name`.
    pub fn new(name: &str) -> Self {
        Self(Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    node_port: Some(30080),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        })
    }

    /// In namespace `ns`.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.metadata.namespace = Some(ns.into());
        self
    }

    /// With `metadata.uid`.
    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    /// Without `metadata.uid` (as sent to the API server, which assigns one).
    pub fn without_uid(mut self) -> Self {
        self.0.metadata.uid = None;
        self
    }

    /// Of type `type_` (`ClusterIP`, `NodePort`, `LoadBalancer`).
    pub fn type_(mut self, type_: &str) -> Self {
        self.spec().type_ = Some(type_.into());
        self
    }

    /// With `spec.loadBalancerClass`.
    pub fn class(mut self, class: &str) -> Self {
        self.spec().load_balancer_class = Some(class.into());
        self
    }

    /// With exactly these `(protocol, port, nodePort)` ports, named `p0`, `p1`, … when several.
    pub fn ports(mut self, ports: &[(&str, i32, i32)]) -> Self {
        let several = ports.len() > 1;
        self.spec().ports = Some(
            ports
                .iter()
                .enumerate()
                .map(|(i, (protocol, port, node_port))| ServicePort {
                    name: several.then(|| format!("p{i}")),
                    protocol: Some((*protocol).into()),
                    port: *port,
                    node_port: Some(*node_port),
                    ..Default::default()
                })
                .collect(),
        );
        self
    }

    /// With the first port's `targetPort`.
    pub fn target_port(mut self, target: IntOrString) -> Self {
        if let Some(port) = self.spec().ports.as_mut().and_then(|p| p.first_mut()) {
            port.target_port = Some(target);
        }
        self
    }

    /// With the first port's `appProtocol`.
    pub fn app_protocol(mut self, protocol: &str) -> Self {
        if let Some(port) = self.spec().ports.as_mut().and_then(|p| p.first_mut()) {
            port.app_protocol = Some(protocol.into());
        }
        self
    }

    /// With an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// With the load-balancer cleanup finalizer.
    pub fn finalizer(mut self) -> Self {
        self.0
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push("service.kubernetes.io/load-balancer-cleanup".into());
        self
    }

    /// With another finalizer.
    pub fn other_finalizer(mut self, name: &str) -> Self {
        self.0
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(name.into());
        self
    }

    /// Being deleted.
    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        self
    }

    /// With `spec.externalTrafficPolicy`.
    pub fn external_traffic_policy(mut self, policy: &str) -> Self {
        self.spec().external_traffic_policy = Some(policy.into());
        self
    }

    /// With `spec.healthCheckNodePort`.
    pub fn health_check_node_port(mut self, port: i32) -> Self {
        self.spec().health_check_node_port = Some(port);
        self
    }

    /// With `spec.externalIPs`.
    pub fn external_ips(mut self, ips: &[&str]) -> Self {
        self.spec().external_ips = Some(ips.iter().map(|s| (*s).into()).collect());
        self
    }

    /// With `spec.loadBalancerIP`.
    pub fn load_balancer_ip(mut self, ip: &str) -> Self {
        self.spec().load_balancer_ip = Some(ip.into());
        self
    }

    /// With `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(mut self, ranges: &[&str]) -> Self {
        self.spec().load_balancer_source_ranges = Some(ranges.iter().map(|s| (*s).into()).collect());
        self
    }

    /// With `spec.ipFamilies`.
    pub fn ip_families(mut self, families: &[&str]) -> Self {
        self.spec().ip_families = Some(families.iter().map(|s| (*s).into()).collect());
        self
    }

    /// With `spec.sessionAffinity`.
    pub fn session_affinity(mut self, affinity: &str) -> Self {
        self.spec().session_affinity = Some(affinity.into());
        self
    }

    /// With these IPs as `status.loadBalancer.ingress`.
    pub fn ingress(mut self, ips: &[&str]) -> Self {
        self.0.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    ips.iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some((*ip).into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        });
        self
    }

    /// The Service.
    pub fn build(self) -> Service {
        self.0
    }

    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }
}

/// A node address.
pub fn address(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

/// A running instance as the cloud describes it, changed one field at a time.
#[derive(Debug, Clone)]
pub struct InstanceBuilder(Instance);

impl InstanceBuilder {
    /// A running `sim.large` in `zone-a` of `region-1` with provider ID `provider_id`.
    pub fn new(provider_id: &str) -> Self {
        Self(Instance {
            metadata: InstanceMetadata {
                provider_id: provider_id.into(),
                instance_type: "sim.large".into(),
                addresses: Vec::new(),
                zone: "zone-a".into(),
                region: "region-1".into(),
                additional_labels: BTreeMap::new(),
            },
            shutdown: false,
        })
    }

    /// With an address.
    pub fn address(mut self, type_: &str, addr: &str) -> Self {
        self.0.metadata.addresses.push(address(type_, addr));
        self
    }

    /// With an additional label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.additional_labels.insert(key.into(), value.into());
        self
    }

    /// Powered off.
    pub fn shut_down(mut self) -> Self {
        self.0.shutdown = true;
        self
    }

    /// The instance.
    pub fn build(self) -> Instance {
        self.0
    }

    /// Its metadata alone.
    pub fn metadata(self) -> InstanceMetadata {
        self.0.metadata
    }
}
