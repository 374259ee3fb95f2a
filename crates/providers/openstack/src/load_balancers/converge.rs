//! A Service's existing load balancer brought to what it asks: the converge marker trusted, else
//! the tree read, [`super::plan`] asked for the next write, and that one write made (through the
//! dry-run guard). A converged load balancer's security group is set here too, and its converge
//! recorded.

use std::time::Duration;

use provider::{LoadBalancerNode, ProviderError, Result, ServiceSpec};

use super::{
    OpenStackLoadBalancers, converged, desired,
    desired::IpFamily,
    ownership::{self, Owner},
    plan::{self, Next, Write},
    security_groups, service_conf,
    service_conf::ServiceLbConf,
    sharing, wait,
};
use crate::octavia::{self, model::LoadBalancer};

/// What a sync answers after making `write` to `lb`: ask again once Octavia has applied it;
/// for a load balancer in ERROR deleted to be made again, a failure (Internal: not retried within
/// the call, as Unavailable would be, which would then see the delete under way and answer
/// RETRY_AFTER), so that the Service gets a Warning event naming the load balancer and what is
/// done with it, and is synced again after the first backoff step.
fn after_write(lb: &LoadBalancer, write: &Write) -> ProviderError {
    match write {
        Write::DeleteErrored { id } => ProviderError::Internal(format!(
            "load balancer {id} ({}) is in ERROR: deleted (cascade); it is made again once Octavia has removed it",
            lb.name
        )),
        _ => wait(format!(
            "load balancer {} is being updated ({})",
            lb.id,
            write.call()
        )),
    }
}

/// What a Service asks of its existing load balancer.
pub(super) struct Asked {
    /// The listeners, with their pools, members and monitors.
    pub(super) want: Vec<desired::Listener>,
    /// The fingerprint of all of it ([`converged`]).
    pub(super) fingerprint: String,
    /// Its security group, with `manage-security-groups`.
    pub(super) security_group: Option<security_groups::plan::Request>,
}

impl OpenStackLoadBalancers {
    /// The converge marker on `lb` that speaks for the Service named `lb_name`: none on a shared
    /// load balancer (it was written before the sharing, by the owner, and is no longer kept up
    /// to date: trusting it could skip a repair).
    pub(super) fn marker<'a>(lb: &'a LoadBalancer, lb_name: &str) -> Option<&'a str> {
        (!sharing::is_shared(lb, lb_name))
            .then(|| converged::marker(&lb.tags))
            .flatten()
    }

    /// Makes `write` on `lb` for the Service named `lb_name`; the sync's answer: ask again once
    /// Octavia applied it, or (a 409: something under it still pending) once it may be made.
    pub(super) async fn write_then_wait(
        &self,
        lb_name: &str,
        lb: &LoadBalancer,
        write: &Write,
        want: &[desired::Listener],
    ) -> ProviderError {
        match self.apply(lb_name, lb, write, want).await {
            Ok(()) => {
                self.stalls.progressed(lb_name);
                after_write(lb, write)
            }
            Err(e) => self.waiting(lb_name, lb, e),
        }
    }

    /// Makes one write of `write` on the load balancer whose desired listeners are `want`.
    pub(super) async fn apply(
        &self,
        lb_name: &str,
        lb: &LoadBalancer,
        write: &Write,
        want: &[desired::Listener],
    ) -> Result<()> {
        let c = &self.client;
        if let Some(reference) = write.tls_reference(want) {
            self.check_tls_reference(reference).await?;
        }
        if !self.may_write(&format!("octavia.{}", write.call()), &lb.id, || {
            format!("{write:?}")
        }) {
            return Ok(());
        }
        let r = self
            .unanswered
            .watch(lb_name, async {
                match write {
                    Write::DeleteErrored { id } => octavia::delete_cascade(c, id).await,
                    Write::TagLoadBalancer { id, tags } => octavia::set_load_balancer_tags(c, id, tags).await,
                    Write::DeletePool { id } => octavia::delete_pool(c, id).await,
                    Write::DeleteListener { id } => octavia::delete_listener(c, id).await,
                    Write::CreateListener { index } => {
                        octavia::create_listener(c, &lb.id, &want[*index]).await
                    }
                    Write::UpdateListener { id, update, .. } => octavia::update_listener(c, id, update).await,
                    Write::CreatePool { listener_id, index } => {
                        octavia::create_pool(c, listener_id, &want[*index].pool).await
                    }
                    Write::UpdatePool { id, index } => octavia::update_pool(c, id, &want[*index].pool).await,
                    Write::SetMembers { pool_id, index } => {
                        octavia::set_members(c, pool_id, &want[*index].pool.members).await
                    }
                    Write::CreateMember {
                        pool_id,
                        index,
                        member,
                    } => octavia::create_member(c, pool_id, &want[*index].pool.members[*member]).await,
                    Write::DeleteMember { pool_id, id } => octavia::delete_member(c, pool_id, id).await,
                    Write::CreateMonitor { pool_id, index } => match &want[*index].pool.monitor {
                        Some(m) => octavia::create_monitor(c, pool_id, m).await,
                        None => Ok(()),
                    },
                    Write::UpdateMonitor { id, index } => match &want[*index].pool.monitor {
                        Some(m) => octavia::update_monitor(c, id, m).await,
                        None => Ok(()),
                    },
                    Write::DeleteMonitor { id } => octavia::delete_monitor(c, id).await,
                }
            })
            .await;
        Ok(r?)
    }

    /// Plans on the existing load balancer and makes the next write; `Ok` when converged.
    pub(super) async fn converge(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        conf: &ServiceLbConf,
        lb: LoadBalancer,
        lb_name: &str,
        nodes: &[LoadBalancerNode],
    ) -> Result<LoadBalancer> {
        let owner = ownership::owner(&lb.tags, &lb.description, cluster, &service.cluster_id);
        let legacy_name = provider::default_load_balancer_name(&service.uid);
        let join = plan::Join {
            internal: conf.internal,
            tags_supported: self.features.tags,
            max_shared: self.settings.max_shared_lb,
        };
        match plan::before_read(&lb, lb_name, &legacy_name, &owner, join) {
            None => {}
            // Nothing to plan while Octavia works: no need to read what is under it.
            Some(plan::Hold::Wait(why)) => return Err(self.waiting(lb_name, &lb, wait(why))),
            Some(plan::Hold::Refuse(why)) => return Err(ProviderError::InvalidArgument(why)),
        }
        let asked = self.request(cluster, service, conf, &lb, lb_name, nodes);
        let (want, fingerprint) = (&asked.want, &asked.fingerprint);
        let marker = Self::marker(&lb, lb_name).map(str::to_owned);
        // A write that may still land leaves nothing to trust: read it all.
        if self.unanswered.pending(lb_name).is_none()
            && self
                .verified
                .trusted(lb_name, &lb.id, fingerprint, marker.as_deref())
        {
            return Ok(lb);
        }
        let tree = octavia::read_tree(&self.client, lb).await?;
        let next = plan::next(
            &tree,
            want,
            &service.ports,
            lb_name,
            self.features.tags,
            self.member_calls(),
        );
        if !matches!(next, Next::Converged) {
            self.verified.forget(lb_name);
        }
        match next {
            Next::Converged => {
                self.stalls.settled(lb_name);
                self.security_group(lb_name, service, asked.security_group.as_ref())
                    .await?;
                if let Some(left) = self.unanswered.pending(lb_name) {
                    self.verified.forget(lb_name);
                    return Err(late_write_may_land(&tree.load_balancer, left));
                }
                self.record_converged(
                    &tree.load_balancer,
                    lb_name,
                    owner,
                    fingerprint,
                    marker.as_deref(),
                )
                .await;
                Ok(tree.load_balancer)
            }
            Next::Wait(why) => Err(self.waiting(lb_name, &tree.load_balancer, wait(why))),
            Next::Refuse(why) => Err(ProviderError::InvalidArgument(why)),
            Next::Write(write) => {
                let write = plan::claim_first(
                    write,
                    &tree.load_balancer,
                    lb_name,
                    &owner,
                    &service.cluster_id,
                    self.features.tags,
                );
                tracing::info!(load_balancer = %tree.load_balancer.id, ?write, "Octavia write");
                Err(self
                    .write_then_wait(lb_name, &tree.load_balancer, &write, want)
                    .await)
            }
        }
    }

    /// What the Service asks of its existing load balancer `lb`.
    pub(super) fn request(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        conf: &ServiceLbConf,
        lb: &LoadBalancer,
        lb_name: &str,
        nodes: &[LoadBalancerNode],
    ) -> Asked {
        let mut conf = conf.clone();
        if conf.member_subnet_id.is_none() && !lb.vip_subnet_id.is_empty() {
            // Nothing configured: the subnet detected at creation is the VIP's.
            conf.member_subnet_id = Some(lb.vip_subnet_id.clone());
        }
        let selected = desired::member_nodes(&conf, nodes);
        // An existing load balancer keeps its VIP's family (one made before ipFamilies were
        // sent, or before the Service's primary family changed, has members of that family).
        let family = IpFamily::of(&lb.vip_address).or_else(|| Self::family(service));
        let want = desired::listeners(service, &conf, self.octavia(), lb_name, &selected, family);
        let security_group = self.settings.manage_security_groups.then(|| {
            let source_ranges = service_conf::security_group_holds_source_ranges(&self.settings)
                .then(|| service_conf::source_ranges(service, family == Some(IpFamily::V6)).ok())
                .flatten();
            security_groups::plan::request(
                cluster,
                service,
                conf.member_subnet_id.as_deref().unwrap_or_default(),
                source_ranges,
                &selected,
                family,
                |provider_id| self.scheme.server_id(provider_id).ok().map(str::to_owned),
            )
        });
        let fingerprint =
            converged::fingerprint(lb_name, &conf, &want, &self.features, security_group.as_ref());
        Asked {
            want,
            fingerprint,
            security_group,
        }
    }

    /// Remembers the converge of the Service named `lb_name` found by a full read; on a load
    /// balancer of this cluster's, not shared, whose marker is not yet this fingerprint, records
    /// it there too (one tag write, not waited for: the sync answers now; a failed write is made
    /// again by a later sync).
    pub(super) async fn record_converged(
        &self,
        lb: &LoadBalancer,
        lb_name: &str,
        owner: Owner,
        fingerprint: &str,
        marker: Option<&str>,
    ) {
        if owner == Owner::Ours
            && self.features.tags
            && marker != Some(fingerprint)
            && !sharing::is_shared(lb, lb_name)
        {
            let write = Write::TagLoadBalancer {
                id: lb.id.clone(),
                tags: converged::with_marker(&lb.tags, fingerprint),
            };
            match self.apply(lb_name, lb, &write, &[]).await {
                Ok(()) => {
                    let marker = Some(fingerprint);
                    self.verified.record(lb_name, &lb.id, fingerprint, marker);
                }
                Err(e) => tracing::info!(load_balancer = %lb.id, error = %e,
                    "recording the converge on the load balancer failed; a later sync records it"),
            }
            return;
        }
        self.verified.record(lb_name, &lb.id, fingerprint, marker);
    }
}

/// The answer to a sync that found the load balancer as asked while a write of an earlier one,
/// never answered, may still land ([`super::unanswered`]): asked again (a full read each time)
/// until it cannot.
fn late_write_may_land(lb: &LoadBalancer, left: Duration) -> ProviderError {
    ProviderError::RetryAfter {
        after: left.min(LATE_WRITE_RECHECK),
        message: format!(
            "load balancer {} is as asked, but a write of an earlier sync got no answer and may still \
             land for {} s: checked again before the converge is recorded",
            lb.id,
            left.as_secs()
        ),
    }
}

/// How often a Service with a write that may still land is read again.
const LATE_WRITE_RECHECK: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancers::PROVISIONING_POLL;

    #[test]
    fn a_write_is_answered_with_retry_after_and_an_errored_load_balancer_with_a_warning() {
        let lb = LoadBalancer {
            id: "lb-1".into(),
            name: "kube_service_k_default_web".into(),
            provisioning_status: "ERROR".into(),
            ..LoadBalancer::default()
        };
        match after_write(&lb, &Write::DeleteErrored { id: "lb-1".into() }) {
            ProviderError::Internal(m) => assert!(
                m.contains("lb-1") && m.contains("kube_service_k_default_web") && m.contains("made again"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let tag = Write::TagLoadBalancer {
            id: "lb-1".into(),
            tags: vec![],
        };
        assert!(matches!(
            after_write(&lb, &tag),
            ProviderError::RetryAfter { after, .. } if after == PROVISIONING_POLL
        ));
    }
}
