//! Deleting a Service's load balancer: [`plan`] decides from what the reads found; this module
//! makes the reads it asks for, then its writes (through the dry-run guard), and last deletes the
//! Service's security group, also when the load balancer went before (OCCM leaks the group then).

pub mod plan;

use provider::{LoadBalancers, Result, ServiceSpec};

use super::{OpenStackLoadBalancers, names, service_conf, wait};
use crate::{neutron, octavia};
use plan::Step;

impl OpenStackLoadBalancers {
    /// `ensure_load_balancer_deleted`: one step of it per sync, as for an ensure.
    pub(super) async fn delete(&self, cluster: &str, service: &ServiceSpec) -> Result<()> {
        let c = &self.client;
        // A Service being deleted may carry annotations that no longer resolve: only what finds
        // the load balancer and the floating IP is read here.
        let keep = service
            .annotations
            .get(service_conf::KEEP_FLOATING_IP)
            .is_some_and(|v| v == "true");
        let id = service
            .annotations
            .get(service_conf::LOAD_BALANCER_ID)
            .filter(|v| !v.is_empty())
            .cloned();
        let lb_name = self.load_balancer_name(cluster, service);
        let asked = plan::Asked {
            lb_name: &lb_name,
            cluster,
            cluster_id: &service.cluster_id,
            keep_floating_ip: keep,
            tags_supported: self.features.tags,
        };
        let mut reads = plan::Reads {
            load_balancer: self.find(id.as_deref(), &lb_name, service).await?,
            ..plan::Reads::default()
        };
        loop {
            match plan::next(&asked, &reads) {
                Step::ReadLeftFloatingIps => {
                    let description =
                        names::floating_ip_description(cluster, &service.namespace, &service.name);
                    let found = neutron::floating_ips::by_description(c, &description).await?;
                    reads.left_floating_ips = Some(found);
                }
                Step::ReadTree(lb) => reads.tree = Some(octavia::read_tree(c, lb.clone()).await?),
                Step::ReadVipFloatingIp(port) => {
                    reads.vip_floating_ip = Some(neutron::floating_ips::on_port(c, port).await?);
                }
                Step::Gone { floating_ips } => {
                    for fip in floating_ips {
                        if self.may_write("neutron.delete_floatingip", &fip.id, || {
                            fip.floating_ip_address.clone()
                        }) {
                            neutron::floating_ips::delete(c, &fip.id).await?;
                        }
                    }
                    self.stalls.settled(&lb_name);
                    return self.delete_security_group(service).await;
                }
                Step::OtherCluster { lb, whose } => {
                    tracing::warn!(load_balancer = %lb.id, name = %lb.name, %whose,
                        "the deleted Service's load balancer belongs to another cluster: left alone");
                    self.stalls.settled(&lb_name);
                    // The group, named by this Service's UID, is this Service's whoever the load
                    // balancer's is.
                    return self.delete_security_group(service).await;
                }
                Step::Untouched => return self.delete_security_group(service).await,
                Step::Left => {
                    self.stalls.settled(&lb_name);
                    return self.delete_security_group(service).await;
                }
                Step::Wait { lb, why } => return Err(self.waiting(&lb_name, lb, wait(why))),
                Step::Leave { lb, write } => {
                    tracing::info!(load_balancer = %lb.id, ?write, "leaving a shared load balancer");
                    return Err(self.write_then_wait(&lb_name, lb, &write, &[]).await);
                }
                Step::Delete { lb, floating_ip } => {
                    if let Some(fip) = floating_ip
                        && self.may_write("neutron.delete_floatingip", &fip.id, || {
                            fip.floating_ip_address.clone()
                        })
                    {
                        neutron::floating_ips::delete(c, &fip.id).await?;
                    }
                    if !self.may_write("octavia.delete_load_balancer", &lb.id, || "cascade=true".into()) {
                        return Err(wait(format!("dry run: load balancer {} would be deleted", lb.id)));
                    }
                    octavia::delete_cascade(c, &lb.id).await?;
                    self.stalls.progressed(&lb_name);
                    return Err(wait(format!("load balancer {} is being deleted", lb.id)));
                }
            }
        }
    }
}
