//! Octavia load balancers for `type: LoadBalancer` Services, built as OCCM builds them
//! ([`OpenStackLoadBalancers`]): the decisions here, the calls in [`crate::octavia`] and
//! [`crate::neutron`] (floating IPs, subnets, security groups, ports).
//!
//! - [`names`]: OCCM's names, descriptions and tags.
//! - [`service_conf`]: what a Service asks of its load balancer (annotations over cloud.conf).
//! - [`desired`]: the listeners, pools, members and monitors that follow from it, and the status.
//! - [`plan`]: the next Octavia write (at most one per sync), or why none; `converge` makes it on
//!   an existing load balancer, `creation` makes a new one.
//! - [`ownership`]: whose a load balancer is (this cluster's identity tag, another's, none).
//! - [`floating_ips`]: which floating IP a Service gets: a pure plan between the Neutron reads,
//!   and its calls.
//! - [`floating_subnets`]: a floating IP's subnet chosen by name pattern and tags.
//! - [`deletion`]: what deleting a Service's load balancer deletes and leaves: a pure plan, and
//!   its calls.
//! - [`converged`]: the fingerprint that spares an unchanged sync the full read.
//! - [`listed`]: the project's load balancers and floating IPs, listed once for a batch of reads.
//! - [`security_groups`]: the Service's security group (`manage-security-groups`): a pure rule
//!   and port diff, and its calls.
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

mod converge;
pub mod converged;
mod creation;
pub mod deletion;
pub mod desired;
pub mod floating_ips;
pub mod floating_subnets;
pub mod listed;
pub mod names;
pub mod ownership;
pub mod plan;
pub mod security_groups;
pub mod service_conf;
pub mod sharing;
pub mod stalls;
#[cfg(test)]
mod test_support;
pub mod unanswered;

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
    octavia::{self, model::LoadBalancer},
};
use desired::{IngressHostname, IpFamily};
use listed::{Listed, only_one};
use ownership::Owner;
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
    if let Err(e) = floating_subnets::SubnetMatch::parse(
        settings.floating_subnet.as_deref(),
        settings.floating_subnet_tags.as_deref(),
    ) {
        return Some(format!("[LoadBalancer] floating-subnet: {e}"));
    }
    None
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
    /// Services with a write that may still land ([`unanswered`]).
    unanswered: unanswered::UnansweredWrites,
    /// TLS references Barbican was asked about and has ([`Self::check_tls_reference`]).
    tls_checked: Mutex<std::collections::HashSet<String>>,
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
        let late_window = client.request_timeout() * unanswered::LATE_WRITE_WINDOWS;
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
            unanswered: unanswered::UnansweredWrites::new(late_window),
            tls_checked: Mutex::default(),
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

    /// How long a Service's load balancer may make no progress before its sync fails naming it
    /// ([`stalls::STALL_AFTER`] unless set here).
    #[must_use]
    pub fn with_stall_after(mut self, after: Duration) -> Self {
        self.stalls = stalls::Stalls::new(after);
        self
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
        if conf.tls_container_ref.is_some()
            && let Err(e) = self.client.endpoint(crate::client::Service::KeyManager)
        {
            // OCCM: "keymanager client is not initialized"; every other Service is served.
            return Err(ProviderError::InvalidArgument(format!(
                "TLS termination (annotation {} or [LoadBalancer] default-tls-container-ref) needs Barbican, the \
                 key manager Octavia reads the certificate from: {}",
                service_conf::TLS_CONTAINER_REF,
                e.message
            )));
        }
        Ok(conf)
    }

    /// Checks in Barbican, once per reference, a TLS reference about to be written (OCCM checks
    /// it on every sync; an unchanged Service costs no Barbican call here). Only with
    /// `container-store = barbican`, as OCCM.
    async fn check_tls_reference(&self, reference: &str) -> Result<()> {
        if self.settings.container_store != "barbican"
            || self.tls_checked.lock().is_ok_and(|c| c.contains(reference))
        {
            return Ok(());
        }
        let named = crate::barbican::TlsRef::parse(reference).map_err(ProviderError::InvalidArgument)?;
        crate::barbican::check(&self.client, reference, &named).await?;
        if let Ok(mut checked) = self.tls_checked.lock() {
            checked.insert(reference.to_owned());
        }
        Ok(())
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
                Ok(conf) => self.status(&conf, lb, &address),
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
            Some(address) => LoadBalancerObservation::Converged(self.status(&conf, lb, &address)),
            None => LoadBalancerObservation::NeedsEnsure,
        })
    }

    /// The status, with the annotations OCCM writes back beside it: the load balancer's ID and
    /// the address in use.
    fn status(&self, conf: &ServiceLbConf, lb: &LoadBalancer, address: &str) -> LoadBalancerStatus {
        let hostname = IngressHostname {
            enabled: self.settings.enable_ingress_hostname,
            suffix: &self.settings.ingress_hostname_suffix,
        };
        LoadBalancerStatus {
            annotations: desired::written_back(&lb.id, address),
            ..desired::status(conf, &hostname, address)
        }
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
            Some(conf) => self.status(conf, &lb, &address),
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
        Ok(self.status(&conf, &lb, &address))
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
        self.delete(cluster, service).await
    }

    /// What OCCM reads in the Service other than written (see [`service_conf`]).
    fn service_notices(&self, _cluster: &str, service: &ServiceSpec) -> Vec<provider::ServiceNotice> {
        service_conf::resolve_noting(&self.settings, &self.features, service).1
    }

    /// OCCM's: `load-balancer-id` and `load-balancer-address` are written back.
    fn service_annotation_prefix(&self) -> &'static str {
        service_conf::PREFIX
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
}
