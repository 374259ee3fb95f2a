//! The floating IP of a converged load balancer: [`plan`] decides from what Neutron answered
//! so far; this module makes the reads it asks for and then its one write (through the dry-run
//! guard).

pub mod plan;

use provider::{LoadBalancers, ProviderError, Result, ServiceSpec};

use super::{
    OpenStackLoadBalancers, floating_subnets, names,
    ownership::{self, Owner},
    service_conf::{FloatingSubnet, ServiceLbConf},
    wait,
};
use crate::{neutron, octavia::model::LoadBalancer};
use plan::{Release, Step};

impl OpenStackLoadBalancers {
    /// The address of a converged load balancer: its floating IP (attached or made now), or its
    /// VIP for an internal Service (a floating IP left from when it was external detached, or
    /// deleted when it was made for it).
    pub(super) async fn address(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        conf: &ServiceLbConf,
        lb: &LoadBalancer,
    ) -> Result<String> {
        let c = &self.client;
        let own_name = self.load_balancer_name(cluster, service);
        // Checked by `conf` before: this parses again what compiled there.
        let subnet_match = Self::subnet_match(conf)?;
        let asked = plan::Asked {
            lb,
            own_name: &own_name,
            internal: conf.internal,
            keep_floating_ip: conf.keep_floating_ip,
            requested_ip: conf.requested_ip.as_deref(),
            subnet_id: match conf.floating.as_ref().map(|f| &f.subnet) {
                Some(FloatingSubnet::Id(id)) => Some(id),
                _ => None,
            },
            subnet_match: subnet_match.as_ref(),
        };
        let mut reads = plan::Reads::default();
        loop {
            match plan::next(&asked, &reads) {
                Step::ReadAttached => {
                    reads.attached = Some(neutron::floating_ips::on_port(c, &lb.vip_port_id).await?);
                }
                Step::ReadRequested(address) => {
                    reads.requested = Some(neutron::floating_ips::by_address(c, address).await?);
                }
                Step::ReadNetwork => reads.network = Some(self.external_network(conf).await?),
                Step::ReadSubnet(id) => {
                    let of = neutron::subnets::get(c, id).await?.and_then(|s| s.network_id);
                    reads.subnet_network = Some(of);
                }
                Step::Refuse(why) => return Err(ProviderError::InvalidArgument(why)),
                Step::Vip { release } => {
                    self.release(release).await?;
                    return Ok(lb.vip_address.clone());
                }
                Step::Attached(fip) => {
                    self.record_identity(cluster, service, lb, fip).await;
                    return Ok(fip.floating_ip_address.clone());
                }
                Step::Claim(fip) => {
                    if self.may_write("neutron.attach_floatingip", &fip.id, || lb.vip_port_id.clone()) {
                        neutron::floating_ips::attach(c, &fip.id, Some(&lb.vip_port_id)).await?;
                    }
                    return Ok(fip.floating_ip_address.clone());
                }
                Step::Create {
                    network,
                    subnet,
                    choose,
                } => {
                    let description =
                        names::floating_ip_description(cluster, &service.namespace, &service.name);
                    let new = neutron::floating_ips::NewFloatingIp {
                        network_id: network,
                        subnet_id: subnet,
                        address: conf.requested_ip.as_deref(),
                        port_id: &lb.vip_port_id,
                        description: &description,
                    };
                    let fip = self.create_floating_ip(lb, &new, choose).await?;
                    self.record_identity(cluster, service, lb, &fip).await;
                    return Ok(fip.floating_ip_address);
                }
            }
        }
    }

    /// Releases a floating IP from a VIP port that takes none; a dry run records the write in
    /// the guard and makes none.
    async fn release(&self, release: Option<Release<'_>>) -> Result<()> {
        let c = &self.client;
        match release {
            Some(Release::Delete(fip))
                if self.may_write("neutron.delete_floatingip", &fip.id, || {
                    fip.floating_ip_address.clone()
                }) =>
            {
                neutron::floating_ips::delete(c, &fip.id).await?;
            }
            Some(Release::Detach(fip))
                if self.may_write("neutron.detach_floatingip", &fip.id, || {
                    fip.floating_ip_address.clone()
                }) =>
            {
                neutron::floating_ips::attach(c, &fip.id, None).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Makes `new`; with `choose`, on the first subnet of its network matching it that gives
    /// one (OCCM tries them in Neutron's order), the last one's error answered when none does.
    async fn create_floating_ip(
        &self,
        lb: &LoadBalancer,
        new: &neutron::floating_ips::NewFloatingIp<'_>,
        choose: Option<&floating_subnets::SubnetMatch>,
    ) -> Result<neutron::floating_ips::FloatingIp> {
        let c = &self.client;
        if !self.may_write("neutron.create_floatingip", &lb.vip_port_id, || {
            format!("{new:?}")
        }) {
            return Err(wait(format!(
                "dry run: a floating IP would be made for load balancer {}",
                lb.id
            )));
        }
        let Some(spec) = choose else {
            return Ok(neutron::floating_ips::create(c, new).await?);
        };
        let network = new.network_id;
        let candidates = floating_subnets::matching(c, network, spec).await?;
        let mut last = None;
        for subnet in &candidates {
            let on = neutron::floating_ips::NewFloatingIp {
                subnet_id: Some(&subnet.id),
                ..new.clone()
            };
            match neutron::floating_ips::create(c, &on).await {
                Ok(fip) => return Ok(fip),
                Err(e) => {
                    tracing::info!(subnet = %subnet.id, name = %subnet.name, error = %e,
                        "no floating IP from this subnet: trying the next one that matches");
                    last = Some(e);
                }
            }
        }
        Err(match last {
            None => ProviderError::InvalidArgument(plan::no_matching_subnet(network, spec)),
            Some(e) => {
                tracing::warn!(%network, %spec, error = %e,
                    "no subnet matching the floating subnet gave a floating IP; the last one's error is answered");
                e.into()
            }
        })
    }

    /// The floating network: the configured one, else the external network detected once.
    async fn external_network(&self, conf: &ServiceLbConf) -> Result<Option<String>> {
        if let Some(network) = conf.floating.as_ref().and_then(|f| f.network_id.clone()) {
            return Ok(Some(network));
        }
        let detected = self
            .external_network
            .get_or_try_init(|| neutron::networks::detect_external(&self.client))
            .await?;
        Ok(detected.clone())
    }

    /// Records this cluster's identity on the floating IP made for the Service once its load
    /// balancer records it (made by this provider, or claimed before a change): a Service of
    /// another cluster under the same cluster name, deleted, then never takes it (OCCM's
    /// description alone would say it is that Service's too). One tag write, once; a failure is
    /// logged and the next sync tries again.
    async fn record_identity(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        lb: &LoadBalancer,
        fip: &neutron::floating_ips::FloatingIp,
    ) {
        let tag = ownership::identity_tag(&service.cluster_id);
        if service.cluster_id.is_empty()
            || !names::is_created(fip)
            || fip.tags.contains(&tag)
            || lb.name != self.load_balancer_name(cluster, service)
            || ownership::owner(&lb.tags, &lb.description, cluster, &service.cluster_id) != Owner::Ours
            || !self.may_write("neutron.tag_floatingip", &fip.id, || tag.clone())
        {
            return;
        }
        if let Err(e) = neutron::floating_ips::tag(&self.client, &fip.id, &tag).await {
            tracing::info!(floating_ip = %fip.id, error = %e,
                "recording the cluster's identity on the floating IP failed; a later sync records it");
        }
    }
}
