//! Octavia load balancers for `type: LoadBalancer` Services, built as OCCM builds them
//! ([`OpenStackLoadBalancers`]): the decisions here, the calls in [`crate::octavia`] and
//! [`crate::neutron`] (floating IPs, subnets, security groups, ports).
//!
//! - [`names`]: OCCM's names, descriptions and tags.
//! - [`service_conf`]: what a Service asks of its load balancer (annotations over cloud.conf).
//! - [`desired`]: the listeners, pools, members and monitors that follow from it, and the status.
//! - [`observed`]: what Octavia reports (its API answers, read leniently).
//! - [`plan`]: the next Octavia write (at most one per sync), or why none.
//! - [`ownership`]: whose a load balancer is (this cluster's identity tag, another's, none).
//! - [`floating_ips`]: which floating IP a Service gets, step by step between the Neutron reads.
//! - [`floating_subnets`]: a floating IP's subnet chosen by name pattern and tags.
//! - [`converged`]: the fingerprint that spares an unchanged sync the full read.
//! - [`listed`]: the project's load balancers and floating IPs, listed once for a batch of reads.
//! - [`security_groups`]: the Service's security group (`manage-security-groups`).
//! - [`sharing`]: load balancers shared between Services (`load-balancer-id`, `max-shared-lb`).
//! - [`stalls`]: a Service whose load balancer Octavia leaves pending, told to the operator.
//!
//! # A sync never waits for Octavia
//! Every sync reads, makes at most one Octavia write, and answers. While Octavia applies it
//! (`PENDING_*`) the answer is `RetryAfter`, which the service controller requeues after that
//! delay; the next sync plans again from what Octavia reports. A load balancer is converged
//! when a sync plans no write; then its floating IP is settled and the status answered. One that
//! makes no progress for 10 minutes (Octavia leaves it pending) fails its sync, naming it
//! ([`stalls`]): the operator gets a Warning event instead of silence.
//!
//! # Where this differs from OCCM, on purpose
//! - A Service with no nodes gets its load balancer without members (OCCM refuses it), so its
//!   address stays while no node is ready; only detecting the subnet needs a node.
//! - A `load-balancer-id` Octavia no longer knows falls back to the name (OCCM fails forever,
//!   its #2751); a floating IP made for a Service whose load balancer was deleted by hand is
//!   deleted with the Service (OCCM leaks it).
//! - No floating network found is an error naming what to set (OCCM silently makes the Service
//!   internal).

pub mod converged;
pub mod desired;
pub mod floating_ips;
pub mod floating_subnets;
pub mod listed;
pub mod names;
pub mod observed;
pub mod ownership;
pub mod plan;
pub mod security_groups;
pub mod service_conf;
pub mod sharing;
pub mod stalls;
#[cfg(test)]
mod test_support;

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use provider::{
    LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead, LoadBalancerStatus, LoadBalancers,
    ProviderError, Result, ServiceSpec,
};

use crate::{
    client::Client,
    cloud_config::LoadBalancerSettings,
    neutron,
    nodes::provider_id::{PROVIDER_NAME, ProviderIdScheme},
    octavia,
};
use desired::{IngressHostname, IpFamily};
use floating_ips::{OnVip, Release, Requested};
use listed::{Listed, only_one};
use observed::LoadBalancer;
use ownership::Owner;
use plan::{Next, Write};
use service_conf::{FloatingSubnet, OctaviaFeatures, ServiceLbConf};

/// How long a sync waits before asking again after a write, or while Octavia is busy.
pub const PROVISIONING_POLL: Duration = Duration::from_secs(2);

/// The `[LoadBalancer]` settings this provider does not implement, named: any of them switches
/// the load-balancer capability off, with this as its reason (the gateway still serves nodes and
/// routes). Each concerns every load balancer: none could be built as OCCM would build it.
pub fn refused_settings(settings: &LoadBalancerSettings) -> Option<String> {
    let refused = |key: &str, why: &str| Some(format!("[LoadBalancer] {key}: {why}"));
    if !settings.cascade_delete {
        return refused(
            "cascade-delete",
            "false (deleting a load balancer's listeners, pools and members one by one) is not implemented: \
             this provider deletes load balancers with cascade; remove the key, or set it to true, to serve load balancers",
        );
    }
    if settings.default_tls_container_ref.is_some() {
        return refused(
            "default-tls-container-ref",
            "TLS termination (with Barbican) is not implemented yet; remove the key to serve load balancers without it",
        );
    }
    if let Err(e) = floating_subnets::SubnetMatch::parse(
        settings.floating_subnet.as_deref(),
        settings.floating_subnet_tags.as_deref(),
    ) {
        return Some(format!("[LoadBalancer] floating-subnet: {e}"));
    }
    None
}

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

/// Most Services one batched read answers (two list calls, however many).
pub const MAX_READ_BATCH: usize = 500;

/// Octavia load balancers for Services.
pub struct OpenStackLoadBalancers {
    client: Client,
    settings: LoadBalancerSettings,
    features: OctaviaFeatures,
    scheme: ProviderIdScheme,
    /// The external network detected for floating IPs (`None` inside: none exists), once.
    external_network: tokio::sync::OnceCell<Option<String>>,
    /// Octavia's API version, for the logs.
    version: (u32, u32),
    /// Writes made since start (Octavia and Neutron), for tests and figures.
    writes: AtomicU64,
    /// The converges known to hold ([`converged`]).
    verified: provider::converged::Verified,
    /// Member subnets' CIDRs, read once (Neutron never changes a subnet's CIDR).
    subnet_cidrs: Mutex<HashMap<String, String>>,
    /// Services whose load balancer makes no progress ([`stalls`]).
    stalls: stalls::Stalls,
}

/// What a Service asks of its existing load balancer.
struct Asked {
    /// The listeners, with their pools, members and monitors.
    want: Vec<desired::Listener>,
    /// The fingerprint of all of it ([`converged`]).
    fingerprint: String,
    /// Its security group, with `manage-security-groups`.
    security_group: Option<security_groups::Request>,
}

fn wait(message: String) -> ProviderError {
    ProviderError::RetryAfter {
        after: PROVISIONING_POLL,
        message,
    }
}

impl OpenStackLoadBalancers {
    /// Checks the settings and asks Octavia its API version; `None` when the catalog has no
    /// load-balancer endpoint (OCCM then serves no load balancers either).
    ///
    /// # Errors
    /// A refused setting ([`refused_settings`]), or Octavia not answering.
    pub async fn discover(
        client: Client,
        settings: LoadBalancerSettings,
        scheme: ProviderIdScheme,
    ) -> std::result::Result<Option<Self>, ProviderError> {
        if let Some(why) = refused_settings(&settings) {
            return Err(ProviderError::InvalidArgument(why));
        }
        if let Err(e) = client.endpoint(crate::client::Service::LoadBalancer) {
            tracing::warn!(error = %e, "no Octavia in the catalog: load balancers are not served");
            return Ok(None);
        }
        let version = octavia::api_version(&client).await?;
        let features = OctaviaFeatures::of(version.0, version.1, &settings.lb_provider);
        Ok(Some(Self {
            client,
            settings,
            features,
            scheme,
            external_network: tokio::sync::OnceCell::new(),
            version,
            writes: AtomicU64::new(0),
            verified: provider::converged::Verified::new(converged::VERIFY_PERIOD),
            subnet_cidrs: Mutex::new(HashMap::new()),
            stalls: stalls::Stalls::new(stalls::STALL_AFTER),
        }))
    }

    /// What the cloud's Octavia takes, for [`desired::listeners`].
    fn octavia(&self) -> desired::Octavia<'_> {
        desired::Octavia {
            features: &self.features,
            provider: &self.settings.lb_provider,
            member_calls: self.member_calls(),
        }
    }

    /// The converge marker on `lb` that speaks for the Service named `lb_name`: none on a shared
    /// load balancer (it was written before the sharing, by the owner, and is no longer kept up
    /// to date: trusting it could skip a repair).
    fn marker<'a>(lb: &'a LoadBalancer, lb_name: &str) -> Option<&'a str> {
        (!sharing::is_shared(lb, lb_name))
            .then(|| converged::marker(&lb.tags))
            .flatten()
    }

    /// How long a Service's load balancer may make no progress before its sync fails naming it
    /// ([`stalls::STALL_AFTER`] unless set here).
    #[must_use]
    pub fn with_stall_after(mut self, after: Duration) -> Self {
        self.stalls = stalls::Stalls::new(after);
        self
    }

    /// Makes `write` on `lb` for the Service named `lb_name`; the sync's answer: ask again once
    /// Octavia applied it, or (a 409: something under it still pending) once it may be made.
    async fn write_then_wait(
        &self,
        lb_name: &str,
        lb: &LoadBalancer,
        write: &Write,
        want: &[desired::Listener],
    ) -> ProviderError {
        match self.apply(lb, write, want).await {
            Ok(()) => {
                self.stalls.progressed(lb_name);
                after_write(lb, write)
            }
            Err(e) => self.waiting(lb_name, lb, e),
        }
    }

    /// A sync answering "in progress" without a write of its own (`answer`): a failure naming
    /// the load balancer once the Service has made no progress for too long, so that the
    /// operator hears of a load balancer Octavia leaves pending.
    fn waiting(&self, lb_name: &str, lb: &LoadBalancer, answer: ProviderError) -> ProviderError {
        let ProviderError::RetryAfter { message, .. } = &answer else {
            return answer;
        };
        let state = if lb.is_pending() {
            format!("is {}", lb.provisioning_status)
        } else {
            "has a listener, pool or member Octavia still applies".to_owned()
        };
        match self.stalls.stalled(lb_name) {
            None => answer,
            Some(stalled) => ProviderError::Internal(format!(
                "{message}: no progress for {} s. Load balancer {} ({}) {state}; Octavia may be stuck: check its \
                 worker and `openstack loadbalancer status show {}`. The Service is synced again",
                stalled.as_secs(),
                lb.id,
                lb.name,
                lb.id
            )),
        }
    }

    /// How members are written (`provider-requires-serial-api-calls`).
    fn member_calls(&self) -> desired::MemberCalls {
        if self.settings.provider_requires_serial_api_calls {
            desired::MemberCalls::Serial
        } else {
            desired::MemberCalls::Batch
        }
    }

    /// Octavia's API version.
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// What the Service asks, refused before any write when it cannot be done (a floating subnet
    /// pattern that does not compile included).
    fn conf(&self, service: &ServiceSpec) -> Result<ServiceLbConf> {
        let conf = service_conf::resolve(&self.settings, &self.features, service)?;
        Self::subnet_match(&conf)?;
        Ok(conf)
    }

    /// The floating subnet's name pattern and tags, when the subnet is chosen by them.
    fn subnet_match(conf: &ServiceLbConf) -> Result<Option<floating_subnets::SubnetMatch>> {
        match conf.floating.as_ref().map(|f| &f.subnet) {
            Some(FloatingSubnet::Matching { name, tags }) => floating_subnets::SubnetMatch::parse(
                name.as_deref(),
                tags.as_deref(),
            )
            .map(Some)
            .map_err(|e| {
                ProviderError::InvalidArgument(format!(
                    "{e} ({}, {}, or the [LoadBalancer] or [LoadBalancerClass] keys of the same names)",
                    service_conf::FLOATING_SUBNET,
                    service_conf::FLOATING_SUBNET_TAGS
                ))
            }),
            _ => Ok(None),
        }
    }

    /// Whether to make a write now: not in a dry run (the gateway's shadow mode), which
    /// records what would be written instead ([`provider::dry_run::intercept`]). Counts it.
    fn may_write(&self, call: &str, target: &str, request: impl FnOnce() -> String) -> bool {
        let now = provider::dry_run::intercept(PROVIDER_NAME, call, target, request);
        if now {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        now
    }

    /// The Service's load balancer: by the `load-balancer-id` annotation (OCCM writes it on
    /// every Service it serves), else by name, else by OCCM's legacy name. An ID Octavia no
    /// longer knows (the Service was LoadBalancer, then ClusterIP, then LoadBalancer again) falls
    /// back to the name, where OCCM fails on every sync (its #2751).
    async fn find(
        &self,
        id: Option<&str>,
        lb_name: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancer>> {
        if let Some(id) = id
            && let Some(lb) = octavia::get(&self.client, id).await?
            && lb.provisioning_status != "DELETED"
        {
            return Ok(Some(lb));
        }
        for name in [
            lb_name.to_owned(),
            provider::default_load_balancer_name(&service.uid),
        ] {
            let found: Vec<LoadBalancer> = octavia::by_name(&self.client, &name)
                .await?
                .into_iter()
                .filter(|lb| lb.provisioning_status != "DELETED")
                .collect();
            if let Some(lb) = only_one(&name, found)? {
                return Ok(Some(lb));
            }
        }
        Ok(None)
    }

    /// The member subnet when neither the config nor the annotations name one, nor a VIP
    /// network or subnet: the subnet of the first node's address (OCCM's `getSubnetIDForLB`).
    async fn detect_subnet(&self, nodes: &[&LoadBalancerNode], family: Option<IpFamily>) -> Result<String> {
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

    /// The nodes that can be members: OpenStack servers (a node another cloud's provider
    /// initialized, during a migration, has no address Octavia can reach), and nodes without a
    /// providerID yet.
    fn servers(&self, nodes: &[LoadBalancerNode]) -> Vec<LoadBalancerNode> {
        nodes
            .iter()
            .filter(|n| n.provider_id.is_empty() || self.scheme.server_id(&n.provider_id).is_ok())
            .cloned()
            .collect()
    }

    /// The load balancer's family: `spec.ipFamilies`' primary (OCCM's `preferredIPFamily`);
    /// from a client that sends no ipFamilies, `loadBalancerIP`'s, else IPv4.
    fn family(service: &ServiceSpec) -> Option<IpFamily> {
        Some(match service.ip_families.first() {
            Some(provider::IpFamily::V6) => IpFamily::V6,
            Some(provider::IpFamily::V4) => IpFamily::V4,
            None if service.requested_ip.contains(':') => IpFamily::V6,
            None => IpFamily::V4,
        })
    }

    /// Creates the load balancer, fully populated.
    async fn create(
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

    /// Makes one write of `write` on the load balancer whose desired listeners are `want`.
    async fn apply(&self, lb: &LoadBalancer, write: &Write, want: &[desired::Listener]) -> Result<()> {
        let c = &self.client;
        if !self.may_write(&format!("octavia.{}", write.call()), &lb.id, || {
            format!("{write:?}")
        }) {
            return Ok(());
        }
        let r = match write {
            Write::DeleteErrored { id } => octavia::delete_cascade(c, id).await,
            Write::TagLoadBalancer { id, tags } => octavia::set_load_balancer_tags(c, id, tags).await,
            Write::DeletePool { id } => octavia::delete_pool(c, id).await,
            Write::DeleteListener { id } => octavia::delete_listener(c, id).await,
            Write::CreateListener { index } => octavia::create_listener(c, &lb.id, &want[*index]).await,
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
        };
        Ok(r?)
    }

    /// Plans on the existing load balancer and makes the next write; `Ok` when converged.
    async fn converge(
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
        if self
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
                self.security_group(service, asked.security_group.as_ref())
                    .await?;
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
    fn request(
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
            security_groups::request(
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

    /// The Service's security group as `request` asks (made, its rules and member ports set),
    /// or, without `manage-security-groups`, none (one made before is deleted, as OCCM does).
    async fn security_group(
        &self,
        service: &ServiceSpec,
        request: Option<&security_groups::Request>,
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
                neutron::security_groups::create(c, &request.name, &request.description).await?
            }
        };
        let cidr = self.subnet_cidr(&request.member_subnet_id).await?;
        let wanted = security_groups::wanted_rules(request, &cidr);
        let (create, delete) = security_groups::rule_changes(&wanted, &group.security_group_rules);
        for rule in create {
            if self.may_write("neutron.create_security_group_rule", &group.id, || {
                rule.body(&group.id).to_string()
            }) {
                neutron::security_groups::create_rule(c, &group.id, rule).await?;
            }
        }
        for rule in delete {
            if self.may_write("neutron.delete_security_group_rule", &rule.id, || {
                format!("{rule:?}")
            }) {
                neutron::security_groups::delete_rule(c, &rule.id).await?;
            }
        }
        let servers: Vec<&str> = request.members.iter().map(|m| m.server_id.as_str()).collect();
        let ports = neutron::ports::for_security_group(c, &servers, &group.id).await?;
        let edits =
            security_groups::port_edits(&ports, &group.id, &request.members, &request.member_subnet_id);
        for edit in edits {
            if self.may_write("neutron.update_port_security_groups", &edit.port_id, || {
                format!("{:?}", edit.security_groups)
            }) {
                security_groups::edit_port(c, &edit, &group.id).await?;
            }
        }
        Ok(())
    }

    /// Deletes the Service's security group, if there is one: off every port first.
    async fn delete_security_group(&self, service: &ServiceSpec) -> Result<()> {
        let c = &self.client;
        let name = names::security_group_name(&service.uid, &service.namespace, &service.name);
        let Some(group) = neutron::security_groups::find(c, &name).await? else {
            return Ok(());
        };
        let ports = neutron::ports::for_security_group(c, &[], &group.id).await?;
        for edit in security_groups::port_edits(&ports, &group.id, &[], "") {
            if self.may_write("neutron.update_port_security_groups", &edit.port_id, || {
                format!("{:?}", edit.security_groups)
            }) {
                security_groups::edit_port(c, &edit, &group.id).await?;
            }
        }
        if self.may_write("neutron.delete_security_group", &group.id, || name.clone()) {
            neutron::security_groups::delete(c, &group.id).await?;
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

    /// What one Service's read finds among the project's load balancers and floating IPs,
    /// listed once for a whole batch ([`LoadBalancers::read_load_balancers`]).
    fn observe(
        &self,
        cluster: &str,
        read: &LoadBalancerRead,
        listed: &Listed,
    ) -> Result<LoadBalancerObservation> {
        let service = &read.service;
        let lb_name = self.load_balancer_name(cluster, service);
        let id = service
            .annotations
            .get(service_conf::LOAD_BALANCER_ID)
            .filter(|v| !v.is_empty());
        let Some(lb) = listed.find(id.map(String::as_str), &lb_name, service)? else {
            return Ok(match read.ensure_nodes {
                None => LoadBalancerObservation::Absent,
                Some(_) => LoadBalancerObservation::NeedsEnsure,
            });
        };
        let owner = ownership::owner(&lb.tags, &lb.description, cluster, &service.cluster_id);
        let address = listed
            .floating_ip_on(&lb.vip_port_id)
            .map(|f| f.floating_ip_address.clone());
        let Some(nodes) = &read.ensure_nodes else {
            if let Owner::OtherCluster { .. } = owner {
                return Ok(LoadBalancerObservation::Absent);
            }
            let address = address.unwrap_or_else(|| lb.vip_address.clone());
            return Ok(LoadBalancerObservation::Present(match self.conf(service) {
                Ok(conf) => self.status(&conf, &address),
                Err(_) => desired::address_status(address),
            }));
        };
        // An ensure read: converged only when known to be, with its address settled; anything
        // else (a refusal included) is the ensure's to answer.
        let Ok(conf) = self.conf(service) else {
            return Ok(LoadBalancerObservation::NeedsEnsure);
        };
        if matches!(owner, Owner::OtherCluster { .. }) || lb.name != lb_name || lb.is_pending() {
            return Ok(LoadBalancerObservation::NeedsEnsure);
        }
        let asked = self.request(cluster, service, &conf, lb, &lb_name, &self.servers(nodes));
        if !self
            .verified
            .trusted(&lb_name, &lb.id, &asked.fingerprint, Self::marker(lb, &lb_name))
        {
            return Ok(LoadBalancerObservation::NeedsEnsure);
        }
        let settled = if conf.internal || lb.vip_address.contains(':') {
            address.is_none().then(|| lb.vip_address.clone())
        } else {
            address
        };
        Ok(match settled {
            Some(address) => LoadBalancerObservation::Converged(self.status(&conf, &address)),
            None => LoadBalancerObservation::NeedsEnsure,
        })
    }

    /// Remembers the converge of the Service named `lb_name` found by a full read; on a load
    /// balancer of this cluster's, not shared, whose marker is not yet this fingerprint, records
    /// it there too (one tag write, not waited for: the sync answers now; a failed write is made
    /// again by a later sync).
    async fn record_converged(
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
            match self.apply(lb, &write, &[]).await {
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

    /// The address of a converged load balancer: its floating IP (attached or made now), or its
    /// VIP for an internal Service (a floating IP left from when it was external detached, or
    /// deleted when it was made for it).
    async fn address(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        conf: &ServiceLbConf,
        lb: &LoadBalancer,
    ) -> Result<String> {
        let c = &self.client;
        let attached = neutron::floating_ips::on_port(c, &lb.vip_port_id).await?;
        let own_name = self.load_balancer_name(cluster, service);
        match floating_ips::on_vip(
            attached.as_ref(),
            lb,
            &own_name,
            conf.internal,
            conf.keep_floating_ip,
        ) {
            OnVip::Vip { release } => {
                // A dry run records the write in the guard and makes none.
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
                return Ok(lb.vip_address.clone());
            }
            OnVip::Attached(fip) => {
                self.record_identity(cluster, service, lb, fip).await;
                return Ok(fip.floating_ip_address.clone());
            }
            OnVip::Refuse(why) => return Err(ProviderError::InvalidArgument(why)),
            OnVip::Find => {}
        }
        if let Some(address) = &conf.requested_ip {
            let found = neutron::floating_ips::by_address(c, address).await?;
            match floating_ips::requested(found.as_ref(), address) {
                Requested::Create => {}
                Requested::Refuse(why) => return Err(ProviderError::InvalidArgument(why)),
                Requested::Attach(fip) => {
                    if self.may_write("neutron.attach_floatingip", &fip.id, || lb.vip_port_id.clone()) {
                        neutron::floating_ips::attach(c, &fip.id, Some(&lb.vip_port_id)).await?;
                    }
                    return Ok(fip.floating_ip_address.clone());
                }
            }
        }
        let Some(network) = self.external_network(conf).await? else {
            return Err(ProviderError::InvalidArgument(
                floating_ips::NO_EXTERNAL_NETWORK.into(),
            ));
        };
        let subnet = match conf.floating.as_ref().map(|f| &f.subnet) {
            Some(FloatingSubnet::Id(id)) => {
                let of = neutron::subnets::get(c, id).await?.and_then(|s| s.network_id);
                floating_ips::check_floating_subnet(id, of.as_deref(), &network)
                    .map_err(ProviderError::InvalidArgument)?;
                Some(id.as_str())
            }
            _ => None,
        };
        let description = names::floating_ip_description(cluster, &service.namespace, &service.name);
        let new = neutron::floating_ips::NewFloatingIp {
            network_id: &network,
            subnet_id: subnet,
            address: conf.requested_ip.as_deref(),
            port_id: &lb.vip_port_id,
            description: &description,
        };
        if !self.may_write("neutron.create_floatingip", &lb.vip_port_id, || {
            format!("{new:?}")
        }) {
            return Err(wait(format!(
                "dry run: a floating IP would be made for load balancer {}",
                lb.id
            )));
        }
        // OCCM: a pattern or tags choose among the network's subnets, unless an address is asked.
        let spec = Self::subnet_match(conf)?.filter(|_| conf.requested_ip.is_none());
        let Some(spec) = spec else {
            let fip = neutron::floating_ips::create(c, &new).await?;
            self.record_identity(cluster, service, lb, &fip).await;
            return Ok(fip.floating_ip_address);
        };
        let candidates = floating_subnets::matching(c, &network, &spec).await?;
        let mut last = None;
        for subnet in &candidates {
            let on = neutron::floating_ips::NewFloatingIp {
                subnet_id: Some(&subnet.id),
                ..new.clone()
            };
            match neutron::floating_ips::create(c, &on).await {
                Ok(fip) => {
                    self.record_identity(cluster, service, lb, &fip).await;
                    return Ok(fip.floating_ip_address);
                }
                Err(e) => {
                    tracing::info!(subnet = %subnet.id, name = %subnet.name, error = %e,
                        "no floating IP from this subnet: trying the next one that matches");
                    last = Some(e);
                }
            }
        }
        Err(match last {
            None => ProviderError::InvalidArgument(format!(
                "no subnet of the floating network {network} matches the floating subnet {spec} (Neutron shows a \
                 project only the subnets of an external network it owns, or that are shared with it)"
            )),
            Some(e) => {
                tracing::warn!(%network, %spec, error = %e,
                    "no subnet matching the floating subnet gave a floating IP; the last one's error is answered");
                e.into()
            }
        })
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

    fn status(&self, conf: &ServiceLbConf, address: &str) -> LoadBalancerStatus {
        let hostname = IngressHostname {
            enabled: self.settings.enable_ingress_hostname,
            suffix: &self.settings.ingress_hostname_suffix,
        };
        desired::status(conf, &hostname, address)
    }

    /// Writes made since start (Octavia and Neutron).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl LoadBalancers for OpenStackLoadBalancers {
    /// Also for a Service whose annotations this provider refuses: its load balancer (made
    /// before, or by OCCM) is still reported.
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancerStatus>> {
        let conf = self.conf(service).ok();
        let id = service
            .annotations
            .get(service_conf::LOAD_BALANCER_ID)
            .filter(|v| !v.is_empty());
        let lb_name = self.load_balancer_name(cluster, service);
        let Some(lb) = self.find(id.map(String::as_str), &lb_name, service).await? else {
            return Ok(None);
        };
        if let Owner::OtherCluster { .. } =
            ownership::owner(&lb.tags, &lb.description, cluster, &service.cluster_id)
        {
            // Not this Service's: ensuring it says whose it is.
            return Ok(None);
        }
        let address = match neutron::floating_ips::on_port(&self.client, &lb.vip_port_id).await? {
            Some(fip) => fip.floating_ip_address,
            None => lb.vip_address.clone(),
        };
        Ok(Some(match &conf {
            Some(conf) => self.status(conf, &address),
            None => desired::address_status(address),
        }))
    }

    /// OCCM's `kube_service_<cluster>_<namespace>_<name>`.
    fn load_balancer_name(&self, cluster: &str, service: &ServiceSpec) -> String {
        names::load_balancer_name(cluster, &service.namespace, &service.name)
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<LoadBalancerStatus> {
        let conf = self.conf(service)?;
        let nodes = &self.servers(nodes)[..];
        let lb_name = self.load_balancer_name(cluster, service);
        let Some(lb) = self
            .find(conf.load_balancer_id.as_deref(), &lb_name, service)
            .await?
        else {
            let selected = desired::member_nodes(&conf, nodes);
            return self.create(cluster, service, &conf, &lb_name, &selected).await;
        };
        let lb = self
            .converge(cluster, service, &conf, lb, &lb_name, nodes)
            .await?;
        let address = self.address(cluster, service, &conf, &lb).await?;
        Ok(self.status(&conf, &address))
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<()> {
        let conf = self.conf(service)?;
        let lb_name = self.load_balancer_name(cluster, service);
        match self
            .find(conf.load_balancer_id.as_deref(), &lb_name, service)
            .await?
        {
            // The service controller then finds it gone and ensures it again.
            None => Err(ProviderError::InvalidArgument(format!(
                "the load balancer {lb_name} does not exist"
            ))),
            Some(lb) => self
                .converge(cluster, service, &conf, lb, &lb_name, &self.servers(nodes))
                .await
                .map(drop),
        }
    }

    async fn ensure_load_balancer_deleted(&self, cluster: &str, service: &ServiceSpec) -> Result<()> {
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
        let description = names::floating_ip_description(cluster, &service.namespace, &service.name);
        let Some(lb) = self.find(id.as_deref(), &lb_name, service).await? else {
            // Gone (also when deleted by hand): a floating IP made for it and left unattached
            // goes too (OCCM leaks it).
            if !keep {
                for fip in neutron::floating_ips::by_description(&self.client, &description).await? {
                    let whose = ownership::owner(
                        &fip.tags,
                        fip.description.as_deref().unwrap_or_default(),
                        cluster,
                        &service.cluster_id,
                    );
                    if fip.port_id.as_deref().is_none_or(str::is_empty)
                        && !matches!(whose, Owner::OtherCluster { .. })
                        && self.may_write("neutron.delete_floatingip", &fip.id, || {
                            fip.floating_ip_address.clone()
                        })
                    {
                        neutron::floating_ips::delete(&self.client, &fip.id).await?;
                    }
                }
            }
            self.stalls.settled(&lb_name);
            // Also when the load balancer went before (OCCM leaks the group then).
            return self.delete_security_group(service).await;
        };
        if let Owner::OtherCluster { whose } =
            ownership::owner(&lb.tags, &lb.description, cluster, &service.cluster_id)
        {
            tracing::warn!(load_balancer = %lb.id, name = %lb.name, %whose,
                "the deleted Service's load balancer belongs to another cluster: left alone");
            self.stalls.settled(&lb_name);
            // The group, named by this Service's UID, is this Service's whoever the load
            // balancer's is.
            return self.delete_security_group(service).await;
        }
        let own = lb.name == lb_name;
        if !own && !self.features.tags {
            // Another Service's, and no tags to tell what is this one's: never touched.
            return self.delete_security_group(service).await;
        }
        if lb.is_pending() {
            let answer = wait(format!("load balancer {} is {}", lb.id, lb.provisioning_status));
            return Err(self.waiting(&lb_name, &lb, answer));
        }
        let lb = if own && sharing::goes_with(&lb, &lb_name) {
            lb
        } else {
            // Shared, another Service's, or not made for a Service: only what is this
            // Service's leaves it; the last one on a load balancer whose owner went takes it.
            let id = lb.id.clone();
            let tree = octavia::read_tree(&self.client, lb).await?;
            let write = match sharing::next_leave(&tree, &lb_name) {
                sharing::Leave::Done if sharing::last_one_takes_it(&tree, &lb_name) => None,
                sharing::Leave::Done => {
                    self.stalls.settled(&lb_name);
                    return self.delete_security_group(service).await;
                }
                sharing::Leave::DeletePool { id } => Some(Write::DeletePool { id }),
                sharing::Leave::DeleteListener { id } => Some(Write::DeleteListener { id }),
                sharing::Leave::Untag { tags } => Some(Write::TagLoadBalancer { id, tags }),
            };
            if let Some(write) = write {
                tracing::info!(load_balancer = %tree.load_balancer.id, ?write, "leaving a shared load balancer");
                return Err(self
                    .write_then_wait(&lb_name, &tree.load_balancer, &write, &[])
                    .await);
            }
            tree.load_balancer
        };
        if !keep
            && let Some(fip) = neutron::floating_ips::on_port(&self.client, &lb.vip_port_id).await?
            && names::is_created(&fip)
            && self.may_write("neutron.delete_floatingip", &fip.id, || {
                fip.floating_ip_address.clone()
            })
        {
            neutron::floating_ips::delete(&self.client, &fip.id).await?;
        }
        if !self.may_write("octavia.delete_load_balancer", &lb.id, || "cascade=true".into()) {
            return Err(wait(format!("dry run: load balancer {} would be deleted", lb.id)));
        }
        octavia::delete_cascade(&self.client, &lb.id).await?;
        self.stalls.progressed(&lb_name);
        Err(wait(format!("load balancer {} is being deleted", lb.id)))
    }

    /// Every ensure starts with a batched read: an unchanged Service costs no call of its own.
    fn checks_before_ensure(&self) -> bool {
        true
    }

    fn max_read_batch(&self) -> usize {
        MAX_READ_BATCH
    }

    /// Two calls for the whole batch: the project's load balancers and its floating IPs (after
    /// a gateway restart, 200 unchanged Services cost these two calls, where reading each would
    /// cost two per Service).
    async fn read_load_balancers(
        &self,
        cluster: &str,
        reads: &[LoadBalancerRead],
    ) -> Result<Vec<Result<LoadBalancerObservation>>> {
        let (load_balancers, floating_ips) = tokio::try_join!(
            octavia::list_all(&self.client),
            neutron::floating_ips::list_all(&self.client)
        )?;
        let listed = Listed {
            load_balancers,
            floating_ips,
        };
        Ok(reads
            .iter()
            .map(|read| self.observe(cluster, read, &listed))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_is_the_primary_ip_family_else_the_requested_addresses() {
        let family = |families: &[provider::IpFamily], ip: &str| {
            OpenStackLoadBalancers::family(&ServiceSpec {
                ip_families: families.to_vec(),
                requested_ip: ip.into(),
                ..ServiceSpec::default()
            })
        };
        use provider::IpFamily::{V4, V6};
        assert_eq!(family(&[V6, V4], ""), Some(IpFamily::V6));
        assert_eq!(family(&[V4, V6], ""), Some(IpFamily::V4));
        assert_eq!(family(&[], "fd00::5"), Some(IpFamily::V6));
        assert_eq!(family(&[], ""), Some(IpFamily::V4));
    }

    #[test]
    fn settings_refused_at_start_are_named_and_floating_subnet_patterns_are_checked() {
        let ok = LoadBalancerSettings {
            floating_subnet: Some("public-*".into()),
            floating_subnet_tags: Some("&a,b".into()),
            manage_security_groups: true,
            ..LoadBalancerSettings::default()
        };
        assert_eq!(refused_settings(&ok), None);
        let bad = LoadBalancerSettings {
            floating_subnet: Some("~public-(".into()),
            ..LoadBalancerSettings::default()
        };
        assert!(
            refused_settings(&bad).is_some_and(|m| m.contains("floating-subnet") && m.contains("public-("))
        );
        let cascade = LoadBalancerSettings {
            cascade_delete: false,
            ..LoadBalancerSettings::default()
        };
        assert!(refused_settings(&cascade).is_some_and(|m| m.contains("cascade-delete")));
    }

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
