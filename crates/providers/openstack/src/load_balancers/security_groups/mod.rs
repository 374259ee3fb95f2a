//! The security group of `[LoadBalancer] manage-security-groups`, as OCCM's
//! `loadbalancer_sg.go` makes it (reference §3.11): one group per Service named
//! `lb-sg-<uid>-<namespace>-<name>`, holding one ingress rule per node port (and the health
//! check node port) from the member subnet, added to the member port of every member node.
//! The group is this Service's by its name: the Service's UID is in it, so no other cluster's
//! Service can name the same group.
//!
//! # Where this differs from OCCM, on purpose
//! - The group is removed from the ports of nodes that are no longer members (OCCM leaves it
//!   there: its #2695), and deleted with the Service also when the load balancer is already
//!   gone (OCCM returns before reaching it and leaks the group).
//! - A converged Service costs no call here: what the group is built from is in the load
//!   balancer's fingerprint ([`super::converged`]). A full read costs three: the group by name
//!   (its rules come with it), the member nodes' ports (one listing per 40 nodes) and the ports
//!   carrying the group; the member subnet's CIDR is read once per process (Neutron never changes it). OCCM
//!   makes 3 + one port listing per node on every sync.
//! - A port is written with `If-Match` on the revision read, so a concurrent change to its
//!   security groups is never lost (OCCM's TODO): a 412 makes the sync ask again.
//! - A port whose port security is unknown (no `port-security` extension) still gets the group
//!   (OCCM skips it, so the feature does nothing on such a cloud); only ports with port
//!   security off are skipped, as OCCM skips them (its #2454).
//! - A rule's ethertype follows its remote prefix (OCCM: the member subnet's, which Neutron
//!   refuses for a source range of the other family), and an absent remote prefix reads as
//!   "anywhere" of its family.
//!
//! [`plan`] decides; this module reads and makes its writes, each through the dry-run guard.

pub mod plan;

use std::{collections::HashMap, sync::Mutex};

use provider::{ProviderError, Result, ServiceSpec};

use super::{OpenStackLoadBalancers, names};
use crate::{
    client::{ApiError, Client},
    neutron::{self, ports},
};
use plan::{PortEdit, Request};

impl OpenStackLoadBalancers {
    /// The Service's security group as `request` asks (made, its rules and member ports set),
    /// or, without `manage-security-groups`, none (one made before is deleted, as OCCM does).
    /// Its writes are watched under `lb_name` ([`super::unanswered`]).
    pub(super) async fn security_group(
        &self,
        lb_name: &str,
        service: &ServiceSpec,
        request: Option<&Request>,
    ) -> Result<()> {
        let Some(request) = request else {
            return self.delete_security_group(service).await;
        };
        let c = &self.client;
        let group = match neutron::security_groups::find(c, &request.name).await? {
            Some(group) => group,
            None => {
                if !self.may_write("neutron.create_security_group", &request.name, || {
                    request.description.clone()
                }) {
                    return Ok(());
                }
                self.unanswered
                    .watch(
                        lb_name,
                        neutron::security_groups::create(c, &request.name, &request.description),
                    )
                    .await?
            }
        };
        let cidr = self.subnet_cidr(&request.member_subnet_id).await?;
        let wanted = plan::wanted_rules(request, &cidr);
        let (create, delete) = plan::rule_changes(&wanted, &group.security_group_rules);
        for rule in create {
            if self.may_write("neutron.create_security_group_rule", &group.id, || {
                rule.body(&group.id).to_string()
            }) {
                self.unanswered
                    .watch(lb_name, neutron::security_groups::create_rule(c, &group.id, rule))
                    .await?;
            }
        }
        for rule in delete {
            if self.may_write("neutron.delete_security_group_rule", &rule.id, || {
                format!("{rule:?}")
            }) {
                self.unanswered
                    .watch(lb_name, neutron::security_groups::delete_rule(c, &rule.id))
                    .await?;
            }
        }
        let servers: Vec<&str> = request.members.iter().map(|m| m.server_id.as_str()).collect();
        let ports = ports::for_security_group(c, &servers, &group.id).await?;
        let edits = plan::port_edits(&ports, &group.id, &request.members, &request.member_subnet_id);
        self.edit_ports(lb_name, &edits, &group.id).await
    }

    /// Deletes the Service's security group, if there is one: off every port first.
    pub(super) async fn delete_security_group(&self, service: &ServiceSpec) -> Result<()> {
        let c = &self.client;
        let name = names::security_group_name(&service.uid, &service.namespace, &service.name);
        let Some(group) = neutron::security_groups::find(c, &name).await? else {
            return Ok(());
        };
        let ports = ports::for_security_group(c, &[], &group.id).await?;
        // Watched under the group's name: a Service being deleted has no converge to trust.
        self.edit_ports(&name, &plan::port_edits(&ports, &group.id, &[], ""), &group.id)
            .await?;
        if self.may_write("neutron.delete_security_group", &group.id, || name.clone()) {
            neutron::security_groups::delete(c, &group.id).await?;
        }
        Ok(())
    }

    /// Makes the port writes `edits` of group `group_id`, in order, watched under `key`.
    async fn edit_ports(&self, key: &str, edits: &[PortEdit], group_id: &str) -> Result<()> {
        for edit in edits {
            if self.may_write("neutron.update_port_security_groups", &edit.port_id, || {
                format!("{:?}", edit.security_groups)
            }) {
                self.unanswered
                    .watch(key, edit_port(&self.client, edit, group_id))
                    .await?;
            }
        }
        Ok(())
    }

    /// The member subnet's CIDR, read once.
    async fn subnet_cidr(&self, subnet_id: &str) -> Result<String> {
        let cached = |m: &Mutex<HashMap<String, String>>| {
            m.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(subnet_id)
                .cloned()
        };
        if let Some(cidr) = cached(&self.subnet_cidrs) {
            return Ok(cidr);
        }
        let cidr = match subnet_id {
            "" => None,
            id => neutron::subnets::get(&self.client, id).await?.and_then(|s| s.cidr),
        }
        .ok_or_else(|| {
            ProviderError::InvalidArgument(format!(
                "the member subnet {subnet_id:?} does not exist: the security group's rules are made from its CIDR"
            ))
        })?;
        self.subnet_cidrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(subnet_id.to_owned(), cidr.clone());
        Ok(cidr)
    }
}

/// Writes a port's security groups, then drops the legacy tag when asked; a port gone
/// meanwhile needs nothing.
async fn edit_port(client: &Client, edit: &PortEdit, group_id: &str) -> std::result::Result<(), ApiError> {
    if ports::set_security_groups(client, &edit.port_id, &edit.security_groups, edit.revision)
        .await?
        .is_some()
        && edit.drop_legacy_tag
    {
        ports::remove_tag(client, &edit.port_id, group_id).await?;
    }
    Ok(())
}
