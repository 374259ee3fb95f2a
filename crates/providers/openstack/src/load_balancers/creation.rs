//! A Service's load balancer made: its VIP subnet detected when nothing names one, then one
//! fully populated create (the load balancer alone with serial member calls), through the
//! dry-run guard. Octavia builds it; the syncs after it converge it ([`super::converge`]).

use provider::{LoadBalancerNode, LoadBalancerStatus, ProviderError, Result, ServiceSpec};

use super::{
    OpenStackLoadBalancers, desired, desired::IpFamily, names, ownership, service_conf::ServiceLbConf, wait,
};
use crate::{neutron, octavia};

impl OpenStackLoadBalancers {
    /// The member subnet when neither the config nor the annotations name one, nor a VIP
    /// network or subnet: the subnet of the first node's address (OCCM's `getSubnetIDForLB`).
    pub(super) async fn detect_subnet(
        &self,
        nodes: &[&LoadBalancerNode],
        family: Option<IpFamily>,
    ) -> Result<String> {
        let no_subnet = || {
            ProviderError::InvalidArgument(
                "no subnet for the load balancer: set [LoadBalancer] subnet-id (or network-id), or the \
                 loadbalancer.openstack.org/subnet-id annotation"
                    .into(),
            )
        };
        let node = nodes.first().ok_or_else(no_subnet)?;
        let address = desired::node_address_for_lb(&node.addresses, family).ok_or_else(no_subnet)?;
        let server = self
            .scheme
            .server_id(&node.provider_id)
            .map_err(|e| ProviderError::InvalidArgument(format!("node {}: {e}", node.name)))?;
        neutron::ports::subnet_of_address(&self.client, server, address)
            .await?
            .ok_or_else(no_subnet)
    }

    /// Creates the load balancer, fully populated.
    pub(super) async fn create(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        conf: &ServiceLbConf,
        lb_name: &str,
        nodes: &[&LoadBalancerNode],
    ) -> Result<LoadBalancerStatus> {
        let family = Self::family(service);
        let mut conf = conf.clone();
        let mut vip_subnet = conf.vip_subnet_id.clone();
        if conf.vip_network_id.is_none() && vip_subnet.is_none() && conf.vip_port_id.is_none() {
            let detected = self.detect_subnet(nodes, family).await?;
            vip_subnet = Some(detected.clone());
            conf.member_subnet_id.get_or_insert(detected);
        }
        if let Some(reference) = &conf.tls_container_ref {
            self.check_tls_reference(reference).await?;
        }
        let want = desired::listeners(service, &conf, self.octavia(), lb_name, nodes, family);
        let new = octavia::NewLoadBalancer {
            name: lb_name.to_owned(),
            description: names::load_balancer_description(cluster, &service.namespace, &service.name),
            provider: self.settings.lb_provider.clone(),
            tags: match (self.features.tags, service.cluster_id.as_str()) {
                (false, _) => Vec::new(),
                (true, "") => vec![lb_name.to_owned()],
                (true, id) => vec![lb_name.to_owned(), ownership::identity_tag(id)],
            },
            vip_port_id: conf.vip_port_id.clone(),
            vip_subnet_id: vip_subnet,
            vip_network_id: conf.vip_network_id.clone(),
            // OCCM: loadBalancerIP is the VIP only for an internal (or IPv6) Service.
            vip_address: conf
                .requested_ip
                .clone()
                .filter(|_| conf.internal || family == Some(IpFamily::V6)),
            flavor_id: conf.flavor_id.clone(),
            availability_zone: conf.availability_zone.clone(),
        };
        // Serial calls: the load balancer alone; the syncs after it add the rest, one call each.
        let body = match self.member_calls() {
            desired::MemberCalls::Batch => octavia::create_body(&new, &want),
            desired::MemberCalls::Serial => octavia::create_body(&new, &[]),
        };
        if !self.may_write("octavia.create_load_balancer", lb_name, || body.to_string()) {
            return Err(wait(format!("dry run: load balancer {lb_name} would be created")));
        }
        let lb = octavia::create(&self.client, &body).await?;
        self.stalls.progressed(lb_name);
        tracing::info!(service = %format!("{}/{}", service.namespace, service.name), load_balancer = %lb.id, "Octavia load balancer created");
        Err(wait(format!(
            "load balancer {} ({lb_name}) is being created",
            lb.id
        )))
    }
}
