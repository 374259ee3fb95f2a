//! The LoadBalancer capability: a Service's Classic ELB or NLB, its security groups and the
//! nodes' rules, converged as cloud-provider-aws converges them, from [`crate::spec`] through the
//! planners of [`crate::classic`], [`crate::nlb`] and [`crate::security_groups`].
//!
//! Each sync first reads the load balancer and its tags; see [`crate::converged`] for when that
//! is enough. Deletion cleans up from what exists in AWS, whatever the Service's annotations say
//! now: a load balancer of either type with the Service's name, its target groups, its security
//! group, and the nodes' rules for it, also when the load balancer itself is already gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter;
use provider::{
    LoadBalancerIngress, LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead, LoadBalancerStatus,
    LoadBalancers, NodeRef, ProviderError, Result, ServiceSpec,
};

use crate::{
    AwsProvider, annotations as a,
    classic::{
        plan::{ClassicDesired, ClassicObserved, instance_actions, plan as plan_classic},
        primary_group,
        spec::{ClassicSpec, SecurityGroups},
    },
    converged::{CONVERGING, MARKER_TAG, fingerprint},
    instances::{InstanceView, NodeKey, node_key},
    naming::{classic_security_group_description, classic_security_group_name, load_balancer_name},
    nlb::{
        NlbView,
        plan::{NlbAction, NlbDesired, NlbObserved, plan as plan_nlb, plan_targets},
        spec::NetworkSpec,
    },
    security_groups::rules::{
        GroupView, NLB_HEALTH, NlbNeeds, Rule, RuleChanges, Source, classic_node_rules, exact_ingress,
        nlb_node_rules, node_group_of,
    },
    spec::{self, Kind, LbSpec, SubnetChoice},
    subnets::{self, Network},
    tags::{ClusterTagging, Tags},
    writes::{Marked, Writes},
};

/// How long a deletion waits before trying again to delete a security group AWS still holds
/// (a deleted load balancer releases its network interfaces after a while).
const GROUP_IN_USE_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// The backends of a load balancer: the target nodes' instances that exist, by ID.
type Backends = BTreeMap<String, InstanceView>;

fn not_ours(what: &str, name: &str, tagging: &ClusterTagging) -> ProviderError {
    ProviderError::InvalidArgument(format!(
        "{what} {name} exists but is not tagged {}; refusing to touch it",
        tagging.tag_key()
    ))
}

fn hostname(dns_name: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: vec![LoadBalancerIngress {
            ip: String::new(),
            hostname: dns_name.to_owned(),
            ip_mode: String::new(),
        }],
        ..LoadBalancerStatus::default()
    }
}

fn nlb_status(lb: &NlbView) -> Result<LoadBalancerStatus> {
    if lb.serves() {
        return Ok(hostname(&lb.dns_name));
    }
    if lb.state == "failed" {
        return Err(ProviderError::Internal(format!(
            "network load balancer {} is in state failed",
            lb.arn
        )));
    }
    Err(ProviderError::RetryAfter {
        after: std::time::Duration::from_secs(10),
        message: format!(
            "network load balancer {} is {} without a DNS name yet",
            lb.arn, lb.state
        ),
    })
}

/// The marker a load balancer carries, if it is a fingerprint (not `converging`).
fn fingerprint_marker(tags: &Tags) -> Option<&str> {
    tags.get(MARKER_TAG)
        .map(String::as_str)
        .filter(|m| *m != CONVERGING)
}

/// One converge's request, parsed.
struct Request<'a> {
    tagging: ClusterTagging,
    spec: LbSpec,
    /// The target nodes.
    targets: Vec<&'a LoadBalancerNode>,
    /// What the load balancer is built from, its members aside.
    fingerprint: String,
    /// The target nodes as the request names them (the members' memory key).
    members: String,
    /// The target nodes' instance IDs, when every one names its instance (no lookup needed).
    node_ids: Option<BTreeSet<String>>,
    /// An UpdateLoadBalancer (the nodes changed): the members are read from AWS, never taken
    /// from memory, since another replica may have changed them without a trace on the load
    /// balancer.
    node_change: bool,
}

/// The key of a request's members: its target nodes as the request names them (no AWS call).
fn members_key(targets: &[&LoadBalancerNode]) -> String {
    let mut nodes: Vec<String> = targets
        .iter()
        .map(|n| format!("{}={}", n.name, n.provider_id))
        .collect();
    nodes.sort();
    fingerprint(&[&nodes.join(",")])
}

/// The target nodes' instance IDs without a lookup; `None` when a node has to be found by name.
/// A node whose provider ID is not an AWS one is never a member (left out with a warning later).
fn node_instance_ids(targets: &[&LoadBalancerNode]) -> Option<BTreeSet<String>> {
    let mut ids = BTreeSet::new();
    for node in targets {
        match node_key(&NodeRef::new(node.name.clone(), node.provider_id.clone())) {
            NodeKey::Id(id) => {
                ids.insert(id);
            }
            NodeKey::Name(_) => return None,
            NodeKey::Invalid(_) => {}
        }
    }
    Some(ids)
}

/// Whether the registered members are exactly the nodes' instances (then a node change has
/// nothing to do: no instance lookup needed).
fn members_are(node_ids: Option<&BTreeSet<String>>, registered: &BTreeSet<String>) -> bool {
    node_ids.is_some_and(|ids| ids == registered)
}

/// The backends as members: every one wanted, the running ones registrable.
fn members_of(backends: &Backends) -> (BTreeSet<String>, BTreeSet<String>) {
    (
        backends.keys().cloned().collect(),
        backends
            .values()
            .filter(|i| i.state == "running")
            .map(|i| i.id.clone())
            .collect(),
    )
}

/// What an NLB needs on the nodes' groups: its clients on the node ports, its health checks from
/// its subnets.
fn nlb_needs(spec: &LbSpec, n: &NetworkSpec, network: &Network, lb: &NlbView) -> Result<NlbNeeds> {
    Ok(NlbNeeds {
        client_ports: n.mappings.iter().fold(BTreeMap::new(), |mut acc, m| {
            for p in m.client_protocols() {
                acc.entry((*p).to_owned())
                    .or_insert_with(BTreeSet::new)
                    .insert(m.node_port);
            }
            acc
        }),
        health_ports: n
            .mappings
            .iter()
            .map(|m| m.health_check.port.resolve(m.node_port))
            .collect(),
        client_cidrs: spec.source_ranges.clone(),
        health_cidrs: subnets::cidrs_of(network, &lb.subnets)?,
    })
}

impl AwsProvider {
    /// The cluster as its tags know it: the configured cluster ID, else the request's cluster.
    pub(crate) fn tagging(&self, cluster: &str) -> Result<ClusterTagging> {
        let id = self.config.cluster_id.as_deref().unwrap_or(cluster);
        ClusterTagging::new(id, self.config.legacy_cluster_tag)
    }

    /// The target nodes' instances that exist.
    async fn backends(&self, targets: &[&LoadBalancerNode]) -> Result<Backends> {
        let mut ids = Vec::new();
        let mut by_name = Vec::new();
        for node in targets {
            match node_key(&NodeRef::new(node.name.clone(), node.provider_id.clone())) {
                NodeKey::Id(id) => ids.push(id),
                NodeKey::Name(name) => by_name.push(NodeRef::by_name(name)),
                NodeKey::Invalid(e) => {
                    tracing::warn!(node = %node.name, error = %e, "node left out of the load balancer")
                }
            }
        }
        let mut backends: Backends = self
            .instances_cached(&ids)
            .await?
            .into_iter()
            .filter(|(_, i)| i.exists())
            .collect();
        if !by_name.is_empty() {
            for (node, found) in by_name.iter().zip(self.resolve_nodes(&by_name).await?) {
                match found {
                    Ok(i) if i.exists() => {
                        backends.insert(i.id.clone(), i);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(node = %node.name, error = %e, "node left out of the load balancer")
                    }
                }
            }
        }
        Ok(backends)
    }

    /// The fingerprint of a request: the Service as parsed and the provider settings that shape
    /// a load balancer; not its members (see [`crate::converged`]). No AWS call.
    fn request_fingerprint(&self, spec: &LbSpec) -> String {
        fingerprint(&[
            &format!("{spec:?}"),
            &format!(
                "{:?}/{:?}/{:?}",
                self.config.vpc_id, self.config.subnet_ids, self.config.load_balancers
            ),
        ])
    }

    /// Parses a converge's request.
    fn request<'a>(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &'a [LoadBalancerNode],
        node_change: bool,
    ) -> Result<Request<'a>> {
        let tagging = self.tagging(cluster)?;
        let spec = spec::parse(&tagging, &self.config.load_balancers, service)?;
        let targets = spec::target_nodes(nodes, &spec.target_node_labels);
        Ok(Request {
            fingerprint: self.request_fingerprint(&spec),
            members: members_key(&targets),
            node_ids: node_instance_ids(&targets),
            node_change,
            tagging,
            spec,
            targets,
        })
    }

    /// The cluster's VPC: configured, else the load balancer's, else the backends'.
    fn cluster_vpc(&self, lb_vpc: Option<&str>, backends: &Backends) -> Result<String> {
        if let Some(vpc) = &self.config.vpc_id {
            return Ok(vpc.clone());
        }
        if let Some(vpc) = lb_vpc.filter(|v| !v.is_empty()) {
            return Ok(vpc.to_owned());
        }
        let vpcs: BTreeSet<&str> = backends
            .values()
            .map(|i| i.vpc_id.as_str())
            .filter(|v| !v.is_empty())
            .collect();
        match vpcs.into_iter().collect::<Vec<_>>().as_slice() {
            [one] => Ok((*one).to_owned()),
            [] => Err(ProviderError::InvalidArgument(
                "cannot tell the cluster's VPC: the load balancer has no backend instance; set the provider's VPC (--aws-vpc-id)".into(),
            )),
            many => Err(ProviderError::InvalidArgument(format!(
                "the backend instances are in several VPCs ({}); set the provider's VPC (--aws-vpc-id)",
                many.join(", ")
            ))),
        }
    }

    /// Subnets of a new (or, for a Classic ELB, every) converge.
    fn lb_subnets(&self, network: &Network, tagging: &ClusterTagging, spec: &LbSpec) -> Result<Vec<String>> {
        let found = match &spec.subnets {
            SubnetChoice::Named(named) => subnets::resolve_named(network, named, a::SUBNETS)?,
            SubnetChoice::Discover => subnets::discover(network, tagging, spec.internal)?,
        };
        if !found.is_empty() {
            return Ok(found);
        }
        if !self.config.subnet_ids.is_empty() {
            tracing::warn!(lb = %spec.name, "no subnet found by discovery; using the configured subnets");
            return Ok(self.config.subnet_ids.clone());
        }
        Err(ProviderError::InvalidArgument(format!(
            "could not find any suitable subnets for creating the ELB in VPC {}: {} subnets need a route to an internet gateway; subnets must carry {} or no cluster tag; prefer them with {} ({} for internal load balancers), or name them with {}",
            network.vpc_id,
            spec.scheme(),
            tagging.tag_key(),
            crate::tags::ROLE_ELB_TAG,
            crate::tags::ROLE_INTERNAL_ELB_TAG,
            a::SUBNETS
        )))
    }

    /// Before creating the Service's load balancer: `create` false (an update) has nothing to
    /// update, and the other type must not exist.
    async fn may_create(&self, spec: &LbSpec, tagging: &ClusterTagging, create: bool) -> Result<()> {
        self.refuse_type_change(spec, tagging).await?;
        if !create {
            return Err(ProviderError::InvalidArgument(format!(
                "load balancer {} does not exist; ensure it first",
                spec.name
            )));
        }
        Ok(())
    }

    /// Refuses to build one type while the Service has a load balancer of the other (upstream
    /// v1.36 refuses from the ingress hostname; before, it leaked the old one).
    async fn refuse_type_change(&self, spec: &LbSpec, tagging: &ClusterTagging) -> Result<()> {
        let (other, owned) = if spec.is_network() {
            let lb = self.describe_classic(&spec.name).await?;
            (
                "a Classic ELB",
                lb.is_some_and(|l| tagging.has_cluster_tag(&l.tags)),
            )
        } else {
            let lb = self.describe_nlb(&spec.name).await?;
            (
                "a network load balancer",
                lb.is_some_and(|l| tagging.has_cluster_tag(&l.tags)),
            )
        };
        if owned {
            return Err(ProviderError::InvalidArgument(format!(
                "cannot change {} after creation: the Service has {other} ({}); delete and re-create the Service to change its type",
                a::TYPE,
                spec.name
            )));
        }
        Ok(())
    }

    /// Converges the Service's load balancer; `create`: make it when missing.
    async fn converge(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
        create: bool,
    ) -> Result<LoadBalancerStatus> {
        let r = self.request(cluster, service, nodes, !create)?;
        let result = match &r.spec.kind {
            Kind::Classic(c) => self.converge_classic(&r, c, create).await,
            Kind::Network(n) => self.converge_nlb(&r, n, create).await,
        };
        if result.is_err() {
            self.verified.forget(&r.spec.name);
            self.members.forget(&r.spec.name);
        }
        result
    }

    async fn converge_classic(
        &self,
        r: &Request<'_>,
        c: &ClassicSpec,
        create: bool,
    ) -> Result<LoadBalancerStatus> {
        let (tagging, spec, targets) = (&r.tagging, &r.spec, r.targets.as_slice());
        let name = spec.name.as_str();
        let mut observed = self.describe_classic_batched(name).await?;
        if let Some(o) = &observed {
            if !tagging.has_cluster_tag(&o.tags) {
                return Err(not_ours("load balancer", name, tagging));
            }
            if self.verified.trusted(
                name,
                &o.dns_name,
                &r.fingerprint,
                o.tags.get(MARKER_TAG).map(String::as_str),
            ) {
                return self.classic_members(r, c, o).await;
            }
        } else {
            self.may_create(spec, tagging, create).await?;
        }
        let backends = &self.backends(targets).await?;
        let vpc = self.cluster_vpc(observed.as_ref().map(|o| o.vpc_id.as_str()), backends)?;
        let network = self.network(&vpc).await?;
        let subnets = self.lb_subnets(&network, tagging, spec)?;
        let marked = observed
            .as_ref()
            .filter(|o| fingerprint_marker(&o.tags).is_some())
            .map(|_| Marked::Classic(name.to_owned()));
        let mut w = Writes::for_marked(marked);

        // The ELB's own group: found by name in the VPC, made when missing, its cluster tag
        // repaired, its ingress exactly the Service's ports from the source ranges.
        let own = match &c.security_groups {
            SecurityGroups::Managed { ingress } => {
                let group_name = classic_security_group_name(name);
                let group = match self.group_named(&group_name, &vpc).await? {
                    Some(g) => g,
                    None => {
                        let description =
                            classic_security_group_description(name, &spec.namespace, &spec.service_name);
                        self.create_group(
                            &mut w,
                            &group_name,
                            &description,
                            &vpc,
                            &tagging.owned_tags(&spec.extra_tags),
                        )
                        .await?
                    }
                };
                match group.tags.get(&tagging.tag_key()).map(String::as_str) {
                    Some(crate::tags::OWNED) => {}
                    None if !tagging.has_cluster_tag(&group.tags) => {
                        self.tag_group(&mut w, &group.id, &tagging.owned_tags(&Tags::new()))
                            .await?;
                    }
                    None => {}
                    Some(other) => {
                        return Err(ProviderError::InvalidArgument(format!(
                            "security group {} ({group_name}) is tagged {}={other}, not owned: refusing to manage it",
                            group.id,
                            tagging.tag_key()
                        )));
                    }
                }
                let changes = exact_ingress(ingress, &group);
                if !changes.is_empty() {
                    self.change_rules(&mut w, &group.id, &changes).await?;
                }
                Some(group.id)
            }
            SecurityGroups::Shared(_) | SecurityGroups::Given(_) => None,
        };
        let groups = c.group_ids(own.as_deref());

        if let Some(o) = &mut observed {
            o.attributes = Some(self.classic_attributes(name).await?);
        }
        let desired = ClassicDesired {
            name,
            spec: c,
            internal: spec.internal,
            subnets,
            security_groups: groups.clone(),
            instances: members_of(backends).0,
            registrable: members_of(backends).1,
            tags: spec.tags.clone(),
        };
        let actions = plan_classic(&desired, observed.as_ref());
        tracing::debug!(lb = %name, ?observed, ?actions, "classic load balancer plan");
        let created_dns = self.apply_classic(&mut w, name, &actions).await?;
        let dns_name = created_dns
            .or_else(|| observed.as_ref().map(|o| o.dns_name.clone()))
            .unwrap_or_default();

        // A replaced group that was the ELB's own goes (upstream v1.36, #1208).
        if let Some(o) = &observed {
            let replaced: BTreeSet<String> = o
                .security_groups
                .iter()
                .filter(|g| !groups.contains(g))
                .cloned()
                .collect();
            for group in self.groups_by_id(&replaced).await? {
                if group.name == classic_security_group_name(name) && tagging.is_owned(&group.tags) {
                    self.remove_group(&mut w, &group, &vpc).await?;
                }
            }
        }

        if !self.config.load_balancers.disable_security_group_ingress {
            self.converge_classic_node_rules(&mut w, tagging, c, &groups, backends, &vpc)
                .await?;
        }
        self.finish(
            &mut w,
            r,
            &dns_name,
            observed.as_ref().map(|o| &o.tags),
            Marked::Classic(name.to_owned()),
        )
        .await?;
        if dns_name.is_empty() && provider::dry_run::active() {
            // A dry run of a creation: there is nothing to serve yet.
            return Ok(LoadBalancerStatus::default());
        }
        if dns_name.is_empty() {
            return Err(ProviderError::RetryAfter {
                after: std::time::Duration::from_secs(10),
                message: format!("load balancer {name} has no DNS name yet"),
            });
        }
        Ok(hostname(&dns_name))
    }

    /// The Service's Classic ELB through the batch of concurrent syncs' reads.
    async fn describe_classic_batched(&self, name: &str) -> Result<Option<ClassicObserved>> {
        self.batched
            .classic_lbs
            .read(
                name,
                |names| async move { self.describe_classic_many(&names).await },
            )
            .await
    }

    /// The Service's NLB through the batch of concurrent syncs' reads.
    async fn describe_nlb_batched(&self, name: &str) -> Result<Option<NlbView>> {
        self.batched
            .network_lbs
            .read(name, |names| async move { self.describe_nlb_many(&names).await })
            .await
    }

    /// A Classic ELB whose fingerprint holds: only its members may differ, and they are in the
    /// description just read. A node change is its register and deregister calls (and the nodes'
    /// rule when a joining node has another group), never a tag.
    async fn classic_members(
        &self,
        r: &Request<'_>,
        c: &ClassicSpec,
        o: &ClassicObserved,
    ) -> Result<LoadBalancerStatus> {
        let name = r.spec.name.as_str();
        if !members_are(r.node_ids.as_ref(), &o.instances) {
            let backends = &self.backends(&r.targets).await?;
            let (instances, registrable) = members_of(backends);
            let mut w = Writes::default();
            let actions = instance_actions(&instances, &registrable, &o.instances);
            self.apply_classic(&mut w, name, &actions).await?;
            if !self.config.load_balancers.disable_security_group_ingress {
                let vpc = self.cluster_vpc(Some(&o.vpc_id), backends)?;
                self.converge_classic_node_rules(&mut w, &r.tagging, c, &o.security_groups, backends, &vpc)
                    .await?;
            }
            if w.count > 0 {
                tracing::info!(lb = %name, writes = w.count, "load balancer members updated");
            }
        }
        if !provider::dry_run::active() {
            self.members.record(name, &o.dns_name, &r.members, None);
        }
        Ok(hostname(&o.dns_name))
    }

    /// An NLB whose fingerprint holds: only its targets may differ. Its target groups are found
    /// by the names the Service gives them (in batches across syncs) and their targets read,
    /// unless this process knows them as these nodes ask (not on a node change). `None`: a group is not where the
    /// fingerprint says (adopted under another name, deleted behind our back): read everything.
    async fn nlb_members(
        &self,
        r: &Request<'_>,
        n: &NetworkSpec,
        lb: &NlbView,
    ) -> Result<Option<LoadBalancerStatus>> {
        let name = r.spec.name.as_str();
        if !r.node_change && self.members.trusted(name, &lb.arn, &r.members, None) {
            return nlb_status(lb).map(Some);
        }
        let mut groups = Vec::with_capacity(n.mappings.len());
        for m in &n.mappings {
            let found = self
                .batched
                .target_groups
                .read(&m.target_group_name, |names| async move {
                    self.target_groups_named_many(&names).await
                })
                .await?;
            match found {
                Some(g) if g.load_balancers.contains(&lb.arn) => {
                    let mut group = g.group;
                    group.targets = self.targets_of(&group.arn).await?;
                    groups.push(group);
                }
                _ => return Ok(None),
            }
        }
        if !groups
            .iter()
            .all(|g| members_are(r.node_ids.as_ref(), &g.targets))
        {
            let backends = &self.backends(&r.targets).await?;
            let (instances, registrable) = members_of(backends);
            let desired = NlbDesired {
                spec: n,
                instances,
                registrable,
                tags: r.spec.tags.clone(),
            };
            let Some(actions) = plan_targets(&desired, &groups) else {
                return Ok(None);
            };
            let mut w = Writes::default();
            self.apply_nlb(&mut w, lb, &actions).await?;
            if !self.config.load_balancers.disable_security_group_ingress {
                let vpc = self.cluster_vpc(Some(&lb.vpc_id), backends)?;
                let network = self.network(&vpc).await?;
                let needs = nlb_needs(&r.spec, n, &network, lb)?;
                self.converge_nlb_node_rules(
                    &mut w,
                    &r.tagging,
                    name,
                    Some(&needs),
                    backends,
                    &vpc,
                    Some(&lb.arn),
                )
                .await?;
            }
            if w.count > 0 {
                tracing::info!(lb = %name, writes = w.count, "load balancer members updated");
            }
        }
        if !provider::dry_run::active() {
            self.members.record(name, &lb.arn, &r.members, None);
        }
        nlb_status(lb).map(Some)
    }

    /// After a full converge: the marker set when anything it covers changed, and the converge
    /// (with its members) remembered.
    async fn finish(
        &self,
        w: &mut Writes,
        r: &Request<'_>,
        identity: &str,
        tags_before: Option<&Tags>,
        marked: Marked,
    ) -> Result<()> {
        let (name, fp) = (r.spec.name.as_str(), r.fingerprint.as_str());
        let marker = tags_before.and_then(|t| t.get(MARKER_TAG)).map(String::as_str);
        // An interrupted converge left `converging`: this full read found nothing left to
        // change, so the fingerprint goes back on and every replica trusts it again.
        if w.covered > 0 || marker == Some(CONVERGING) {
            self.set_marker(&marked, fp).await?;
            if provider::dry_run::active() {
                // Nothing was changed: the load balancer is still as it was read.
                return Ok(());
            }
            self.verified.record(name, identity, fp, Some(fp));
        } else {
            self.verified.record(name, identity, fp, marker);
        }
        // A dry run's member writes were not made.
        if w.count == 0 || !provider::dry_run::active() {
            self.members.record(name, identity, &r.members, None);
        }
        Ok(())
    }

    /// The groups of the backends' instances and whether each is the cluster's.
    async fn node_groups(
        &self,
        tagging: &ClusterTagging,
        backends: &Backends,
        more: &BTreeSet<String>,
    ) -> Result<(Vec<GroupView>, BTreeSet<String>, BTreeSet<String>)> {
        let mut ids: BTreeSet<String> = backends
            .values()
            .flat_map(|i| i.security_groups.iter().cloned())
            .collect();
        ids.extend(more.iter().cloned());
        let groups = self.groups_by_id(&ids).await?;
        let tagged: BTreeSet<String> = groups
            .iter()
            .filter(|g| tagging.has_cluster_tag(&g.tags))
            .map(|g| g.id.clone())
            .collect();
        let mut wanted = BTreeSet::new();
        for i in backends.values() {
            match node_group_of(&i.id, &i.security_groups, &tagged) {
                Ok(Some(g)) => {
                    wanted.insert(g);
                }
                Ok(None) => {
                    tracing::warn!(instance = %i.id, "instance without security group: no rule for it")
                }
                Err(e) => return Err(ProviderError::InvalidArgument(e)),
            }
        }
        Ok((groups, tagged, wanted))
    }

    async fn converge_classic_node_rules(
        &self,
        w: &mut Writes,
        tagging: &ClusterTagging,
        c: &ClassicSpec,
        groups: &[String],
        backends: &Backends,
        vpc: &str,
    ) -> Result<()> {
        let (views, tagged, wanted) = self
            .node_groups(tagging, backends, &groups.iter().cloned().collect())
            .await?;
        let annotated = match &c.security_groups {
            SecurityGroups::Given(g) => g.clone(),
            _ => Vec::new(),
        };
        let Some(lb_group) = primary_group(groups, &annotated, &c.extra_security_groups, &tagged) else {
            return Err(ProviderError::Internal(
                "the load balancer has no security group".into(),
            ));
        };
        let mut candidates: BTreeMap<String, GroupView> =
            views.into_iter().map(|g| (g.id.clone(), g)).collect();
        for g in self.groups_referencing(&lb_group, vpc).await? {
            candidates.entry(g.id.clone()).or_insert(g);
        }
        let shared = self.config.load_balancers.elb_security_group.as_deref() == Some(lb_group.as_str());
        let flagged: Vec<(GroupView, bool)> = candidates
            .into_values()
            .filter(|g| g.id != lb_group)
            .map(|g| {
                let t = tagging.has_cluster_tag(&g.tags);
                (g, t)
            })
            .collect();
        for (group, changes) in classic_node_rules(&lb_group, &wanted, &flagged, false, shared) {
            self.change_rules(w, &group, &changes).await?;
        }
        Ok(())
    }

    async fn converge_nlb(
        &self,
        r: &Request<'_>,
        n: &NetworkSpec,
        create: bool,
    ) -> Result<LoadBalancerStatus> {
        let (tagging, spec, targets) = (&r.tagging, &r.spec, r.targets.as_slice());
        let name = spec.name.as_str();
        let existing = self.describe_nlb_batched(name).await?;
        if let Some(lb) = &existing {
            if !tagging.has_cluster_tag(&lb.tags) {
                return Err(not_ours("load balancer", name, tagging));
            }
            if self.verified.trusted(
                name,
                &lb.arn,
                &r.fingerprint,
                lb.tags.get(MARKER_TAG).map(String::as_str),
            ) && let Some(status) = self.nlb_members(r, n, lb).await?
            {
                return Ok(status);
            }
            if lb.scheme != spec.scheme() {
                tracing::warn!(lb = %name, has = %lb.scheme, asked = spec.scheme(), "the scheme of a load balancer is fixed at creation (as cloud-provider-aws); delete and re-create the Service to change it");
            }
        } else {
            self.may_create(spec, tagging, create).await?;
        }
        let backends = &self.backends(targets).await?;
        let vpc = self.cluster_vpc(existing.as_ref().map(|l| l.vpc_id.as_str()), backends)?;
        let network = self.network(&vpc).await?;
        let marked = existing
            .as_ref()
            .filter(|l| fingerprint_marker(&l.tags).is_some())
            .map(|l| Marked::Network(l.arn.clone()));
        let mut w = Writes::for_marked(marked);
        let wanted_names: Vec<String> = n.mappings.iter().map(|m| m.target_group_name.clone()).collect();
        let (lb, observed, tags_before) = match existing {
            Some(lb) => {
                let observed = self
                    .observe_nlb(&lb, &wanted_names, !n.target_group_attributes.is_empty())
                    .await?;
                let tags = lb.tags.clone();
                (lb, observed, Some(tags))
            }
            None => {
                // Subnets, scheme, Elastic IPs and private addresses are set at creation only.
                let subnets = self.lb_subnets(&network, tagging, spec)?;
                let mappings = n.subnet_mappings(&subnets)?;
                let mut lb = self
                    .create_nlb(&mut w, name, spec.internal, &mappings, &spec.tags)
                    .await?;
                if lb.vpc_id.is_empty() {
                    // A dry run's stand-in for the NLB it would create.
                    lb.vpc_id = vpc.clone();
                }
                let mut observed = NlbObserved::new_load_balancer(spec.tags.clone());
                // Groups an interrupted earlier try left behind.
                for wanted in &wanted_names {
                    observed
                        .unattached
                        .extend(self.target_groups(None, Some(wanted)).await?);
                }
                (lb, observed, None)
            }
        };
        let desired = NlbDesired {
            spec: n,
            instances: members_of(backends).0,
            registrable: members_of(backends).1,
            tags: spec.tags.clone(),
        };
        let actions = plan_nlb(&desired, &observed);
        tracing::debug!(lb = %name, ?observed, ?actions, "network load balancer plan");
        self.apply_nlb(&mut w, &lb, &actions).await?;

        if !self.config.load_balancers.disable_security_group_ingress {
            let needs = nlb_needs(spec, n, &network, &lb)?;
            self.converge_nlb_node_rules(&mut w, tagging, name, Some(&needs), backends, &vpc, Some(&lb.arn))
                .await?;
        }
        self.finish(
            &mut w,
            r,
            &lb.arn,
            tags_before.as_ref(),
            Marked::Network(lb.arn.clone()),
        )
        .await?;
        if lb.dns_name.is_empty() && provider::dry_run::active() {
            // A dry run of a creation: there is nothing to serve yet.
            return Ok(LoadBalancerStatus::default());
        }
        nlb_status(&lb)
    }

    /// The NLB client, health and MTU rules on the nodes' groups: the backends' groups and every
    /// group of the cluster in the VPC (where stale rules may be).
    #[allow(clippy::too_many_arguments)]
    async fn converge_nlb_node_rules(
        &self,
        w: &mut Writes,
        tagging: &ClusterTagging,
        lb_name: &str,
        needs: Option<&NlbNeeds>,
        backends: &Backends,
        vpc: &str,
        lb_arn: Option<&str>,
    ) -> Result<()> {
        let (views, _, wanted) = self.node_groups(tagging, backends, &BTreeSet::new()).await?;
        let mut work: BTreeMap<String, GroupView> = self
            .cluster_groups(tagging, Some(vpc))
            .await?
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        for g in views.into_iter().filter(|g| wanted.contains(&g.id)) {
            work.entry(g.id.clone()).or_insert(g);
        }
        let mut others: Option<BTreeMap<Rule, String>> = None;
        for group in work.values() {
            let want = if wanted.contains(&group.id) { needs } else { None };
            let mut changes = nlb_node_rules(lb_name, want, group, &BTreeMap::new());
            if changes
                .revoke
                .iter()
                .any(|r| is_health_rule_of(&r.description, lb_name))
            {
                if others.is_none() {
                    others = Some(self.health_rules_other_nlbs_need(vpc, lb_arn).await?);
                }
                changes = nlb_node_rules(lb_name, want, group, others.as_ref().expect("just set"));
            }
            if !changes.is_empty() {
                self.change_rules(w, &group.id, &changes).await?;
            }
        }
        Ok(())
    }

    /// The cluster's groups (in `vpc` when known): tagged with the cluster tag, or with the
    /// legacy one (recognised whether or not this cluster still writes it, as upstream). One call:
    /// either key, then the legacy tag's value checked here.
    async fn cluster_groups(&self, tagging: &ClusterTagging, vpc: Option<&str>) -> Result<Vec<GroupView>> {
        let keys = Filter::builder()
            .name("tag-key")
            .values(tagging.tag_key())
            .values(crate::tags::LEGACY_CLUSTER_TAG)
            .build();
        let vpc_filter = vpc.map(|v| Filter::builder().name("vpc-id").values(v).build());
        let groups = self
            .groups_where(std::iter::once(keys).chain(vpc_filter).collect())
            .await?;
        Ok(groups
            .into_iter()
            .filter(|g| tagging.has_cluster_tag(&g.tags))
            .collect())
    }

    /// Health rules other NLBs of the VPC need: an NLB whose target group checks port P needs
    /// (tcp, P, C) for each CIDR C of its subnets. Read only when this NLB is about to revoke a
    /// health rule (EC2 keeps one rule for several NLBs needing it, with the first one's
    /// description).
    async fn health_rules_other_nlbs_need(
        &self,
        vpc: &str,
        ours: Option<&str>,
    ) -> Result<BTreeMap<Rule, String>> {
        let mut by_lb: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
        let mut marker = None;
        loop {
            let resp = self
                .elb
                .describe_target_groups()
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| crate::errors::sdk_error("DescribeTargetGroups", &e))?;
            for g in resp.target_groups() {
                if g.vpc_id() != Some(vpc) {
                    continue;
                }
                let port = match g.health_check_port() {
                    Some("traffic-port") | None => g.port().and_then(|p| u16::try_from(p).ok()),
                    Some(p) => p.parse().ok(),
                };
                for lb in g.load_balancer_arns().iter().filter(|a| Some(a.as_str()) != ours) {
                    if let Some(port) = port {
                        by_lb.entry(lb.clone()).or_default().insert(port);
                    }
                }
            }
            marker = resp.next_marker().filter(|m| !m.is_empty()).map(str::to_owned);
            if marker.is_none() {
                break;
            }
        }
        let mut out = BTreeMap::new();
        let network = self.network(vpc).await?;
        let arns: Vec<String> = by_lb.keys().cloned().collect();
        for chunk in arns.chunks(20) {
            let resp = self
                .elb
                .describe_load_balancers()
                .set_load_balancer_arns(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| crate::errors::sdk_error("DescribeLoadBalancers", &e))?;
            for lb in resp.load_balancers() {
                let (Some(arn), Some(name)) = (lb.load_balancer_arn(), lb.load_balancer_name()) else {
                    continue;
                };
                let subnets: Vec<String> = lb
                    .availability_zones()
                    .iter()
                    .filter_map(|z| z.subnet_id().map(str::to_owned))
                    .collect();
                let Ok(cidrs) = subnets::cidrs_of(&network, &subnets) else {
                    continue;
                };
                for port in by_lb.get(arn).into_iter().flatten() {
                    for cidr in &cidrs {
                        out.insert(Rule::port("tcp", *port, Source::cidr(cidr)), name.to_owned());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Revokes every rule admitting `group`, then deletes it.
    async fn remove_group(&self, w: &mut Writes, group: &GroupView, vpc: &str) -> Result<()> {
        let rule = Rule::all_from_group(&group.id);
        for referencing in self.groups_referencing(&group.id, vpc).await? {
            let stale: Vec<_> = referencing
                .ingress
                .iter()
                .filter(|r| r.rule.source == rule.source)
                .cloned()
                .collect();
            self.change_rules(
                w,
                &referencing.id,
                &RuleChanges {
                    revoke: stale,
                    ..RuleChanges::default()
                },
            )
            .await?;
        }
        self.delete_group(w, &group.id).await.map_err(|e| match e {
            ProviderError::RetryAfter { message, .. } => ProviderError::RetryAfter {
                after: GROUP_IN_USE_RETRY,
                message,
            },
            other => other,
        })
    }

    /// Deletes what exists for the Service, of either type.
    async fn delete_everything(&self, cluster: &str, service: &ServiceSpec) -> Result<()> {
        let tagging = self.tagging(cluster)?;
        let Ok(name) = load_balancer_name(&service.uid) else {
            return Ok(());
        };
        self.verified.forget(&name);
        let mut w = Writes::default();
        let mut vpc = self.config.vpc_id.clone();

        if let Some(lb) = self.describe_classic(&name).await? {
            if !tagging.has_cluster_tag(&lb.tags) {
                tracing::warn!(lb = %name, "a Classic ELB with the Service's name is not the cluster's; left alone");
            } else {
                let vpc_id = vpc.get_or_insert_with(|| lb.vpc_id.clone()).clone();
                let groups = self
                    .groups_by_id(&lb.security_groups.iter().cloned().collect())
                    .await?;
                let tagged: BTreeSet<String> = groups
                    .iter()
                    .filter(|g| tagging.has_cluster_tag(&g.tags))
                    .map(|g| g.id.clone())
                    .collect();
                let annotated = service
                    .annotations
                    .get(a::SECURITY_GROUPS)
                    .map(|v| a::list(v))
                    .unwrap_or_default();
                let extra = service
                    .annotations
                    .get(a::EXTRA_SECURITY_GROUPS)
                    .map(|v| a::list(v))
                    .unwrap_or_default();
                let shared = self.config.load_balancers.elb_security_group.clone();
                if let Some(lb_group) = primary_group(&lb.security_groups, &annotated, &extra, &tagged)
                    && !self.config.load_balancers.disable_security_group_ingress
                {
                    // Upstream's buildSecurityGroupsToDelete: the cluster's, never the shared or
                    // an annotated one.
                    let deleting = tagged.contains(&lb_group)
                        && shared.as_deref() != Some(lb_group.as_str())
                        && !annotated.contains(&lb_group)
                        && !extra.contains(&lb_group);
                    let referencing: Vec<(GroupView, bool)> = self
                        .groups_referencing(&lb_group, &vpc_id)
                        .await?
                        .into_iter()
                        .map(|g| {
                            let t = tagging.has_cluster_tag(&g.tags);
                            (g, t)
                        })
                        .collect();
                    let is_shared = shared.as_deref() == Some(lb_group.as_str());
                    for (group, changes) in
                        classic_node_rules(&lb_group, &BTreeSet::new(), &referencing, deleting, is_shared)
                    {
                        self.change_rules(&mut w, &group, &changes).await?;
                    }
                }
                self.delete_classic(&mut w, &name).await?;
            }
        }
        // The ELB's own group, found by name even when the ELB is already gone (upstream leaks
        // it then, kubernetes/kubernetes#79994).
        let group_name = classic_security_group_name(&name);
        let mut name_filter = vec![Filter::builder().name("group-name").values(&group_name).build()];
        if let Some(v) = &vpc {
            name_filter.push(Filter::builder().name("vpc-id").values(v).build());
        }
        for group in self.groups_where(name_filter).await? {
            if tagging.is_owned(&group.tags)
                && self.config.load_balancers.elb_security_group.as_deref() != Some(group.id.as_str())
            {
                self.remove_group(&mut w, &group, &group.vpc_id).await?;
            }
        }

        if let Some(lb) = self.describe_nlb(&name).await? {
            if !tagging.has_cluster_tag(&lb.tags) {
                tracing::warn!(lb = %name, "a network load balancer with the Service's name is not the cluster's; left alone");
            } else {
                vpc.get_or_insert_with(|| lb.vpc_id.clone());
                // Listeners first, so the target groups are free to go before the load balancer
                // (upstream deletes the load balancer first, and a target group still held by it
                // fails; a retry then no longer finds the groups through it).
                let groups = self.target_groups(Some(&lb.arn), None).await?;
                let listeners: Vec<NlbAction> = self
                    .observe_listeners(&lb.arn)
                    .await?
                    .into_iter()
                    .map(|l| NlbAction::DeleteListener { arn: l.arn })
                    .chain(
                        groups
                            .into_iter()
                            .map(|g| NlbAction::DeleteTargetGroup { arn: g.arn }),
                    )
                    .collect();
                self.apply_nlb(&mut w, &lb, &listeners).await?;
                self.delete_nlb(&mut w, &lb.arn).await?;
            }
        }
        // Target groups an interrupted ensure left attached to nothing.
        if let Ok(n) = NetworkSpec::parse(
            &tagging,
            &self.config.load_balancers,
            service,
            &crate::annotations::Notices::default(),
        ) {
            for m in &n.mappings {
                for g in self.target_groups(None, Some(&m.target_group_name)).await? {
                    let tags = self.elb_tags(std::slice::from_ref(&g.arn)).await?;
                    if tags.get(&g.arn).is_some_and(|t| tagging.has_cluster_tag(t))
                        && self
                            .before_write(&mut w, "DeleteTargetGroup", &g.arn, String::new)
                            .await?
                    {
                        self.delete_target_group(&g.arn).await?;
                    }
                }
            }
        }
        // The NLB's rules on the nodes' groups, whatever the annotation says now (upstream
        // decides by the annotation at deletion time and leaks them, kubernetes/kubernetes#95042).
        if !self.config.load_balancers.disable_security_group_ingress {
            let groups = self.cluster_groups(&tagging, vpc.as_deref()).await?;
            let ours = [
                format!("{}={name}", crate::security_groups::rules::NLB_CLIENT),
                format!("{NLB_HEALTH}={name}"),
            ];
            if groups
                .iter()
                .any(|g| g.ingress.iter().any(|r| ours.contains(&r.description)))
            {
                let vpc_id = vpc.clone().unwrap_or_else(|| groups[0].vpc_id.clone());
                let mut others: Option<BTreeMap<Rule, String>> = None;
                for group in &groups {
                    let mut changes = nlb_node_rules(&name, None, group, &BTreeMap::new());
                    if changes
                        .revoke
                        .iter()
                        .any(|r| is_health_rule_of(&r.description, &name))
                    {
                        if others.is_none() {
                            others = Some(self.health_rules_other_nlbs_need(&vpc_id, None).await?);
                        }
                        changes = nlb_node_rules(&name, None, group, others.as_ref().expect("just set"));
                    }
                    if !changes.is_empty() {
                        self.change_rules(&mut w, &group.id, &changes).await?;
                    }
                }
            }
        }
        if w.count > 0 {
            tracing::info!(lb = %name, writes = w.count, "deleted the load balancer and what was made for it");
        }
        Ok(())
    }
}

/// What a read in a batch asks, once the request is parsed.
enum ReadPlan {
    /// Answered without a cloud call.
    Done(Result<LoadBalancerObservation>),
    /// A Classic ELB's (`check` set for an ensure read).
    Classic { name: String, check: Option<Check> },
    /// An NLB's.
    Network { name: String, check: Option<Check> },
}

/// What an ensure read compares.
struct Check {
    fingerprint: String,
    members: String,
    node_ids: Option<BTreeSet<String>>,
}

impl AwsProvider {
    /// What a read asks: its load balancer's type and name, and for an ensure read the request's
    /// fingerprint. A request the ensure would refuse (or hand elsewhere) needs the ensure to say
    /// so: `NeedsEnsure` without a call.
    fn read_plan(&self, tagging: &ClusterTagging, read: &LoadBalancerRead) -> ReadPlan {
        let service = &read.service;
        let unread = || {
            ReadPlan::Done(Ok(if read.ensure_nodes.is_some() {
                LoadBalancerObservation::NeedsEnsure
            } else {
                LoadBalancerObservation::Absent
            }))
        };
        if spec::implemented_elsewhere(service).is_some() {
            return unread();
        }
        let Some(nodes) = &read.ensure_nodes else {
            let Ok(name) = load_balancer_name(&service.uid) else {
                return unread();
            };
            return if spec::wants_network(service) {
                ReadPlan::Network { name, check: None }
            } else {
                ReadPlan::Classic { name, check: None }
            };
        };
        let Ok(spec) = spec::parse(tagging, &self.config.load_balancers, service) else {
            return unread();
        };
        let targets = spec::target_nodes(nodes, &spec.target_node_labels);
        let check = Some(Check {
            fingerprint: self.request_fingerprint(&spec),
            members: members_key(&targets),
            node_ids: node_instance_ids(&targets),
        });
        match spec.kind {
            Kind::Classic(_) => ReadPlan::Classic {
                name: spec.name,
                check,
            },
            Kind::Network(_) => ReadPlan::Network {
                name: spec.name,
                check,
            },
        }
    }

    /// [`LoadBalancers::read_load_balancers`]: the Classic ELBs and the NLBs asked for, each
    /// type described in batches of 20, then each read answered as a get or as the fingerprint
    /// check [`Self::converge`] starts with (the same trust, so an ensure after `NeedsEnsure`
    /// decides exactly as it would have).
    async fn read_many(
        &self,
        cluster: &str,
        reads: &[LoadBalancerRead],
    ) -> Result<Vec<Result<LoadBalancerObservation>>> {
        let tagging = self.tagging(cluster)?;
        let plans: Vec<ReadPlan> = reads.iter().map(|r| self.read_plan(&tagging, r)).collect();
        let classic_names: Vec<String> = plans
            .iter()
            .filter_map(|p| match p {
                ReadPlan::Classic { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let network_names: Vec<String> = plans
            .iter()
            .filter_map(|p| match p {
                ReadPlan::Network { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let classic = if classic_names.is_empty() {
            HashMap::new()
        } else {
            self.describe_classic_many(&classic_names).await
        };
        let network = if network_names.is_empty() {
            HashMap::new()
        } else {
            self.describe_nlb_many(&network_names).await
        };
        let missing = |name: &str| ProviderError::Internal(format!("load balancer {name} was not read"));
        Ok(plans
            .into_iter()
            .map(|plan| match plan {
                ReadPlan::Done(answer) => answer,
                ReadPlan::Classic { name, check } => {
                    let found = classic
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| Err(missing(&name)))?;
                    Ok(match (found, check) {
                        (Some(lb), check) if tagging.has_cluster_tag(&lb.tags) => match check {
                            None => LoadBalancerObservation::Present(hostname(&lb.dns_name)),
                            // Its members are in the description: compared, not remembered.
                            Some(ck)
                                if self.verified.trusted(
                                    &name,
                                    &lb.dns_name,
                                    &ck.fingerprint,
                                    lb.tags.get(MARKER_TAG).map(String::as_str),
                                ) && members_are(ck.node_ids.as_ref(), &lb.instances) =>
                            {
                                LoadBalancerObservation::Converged(hostname(&lb.dns_name))
                            }
                            Some(_) => LoadBalancerObservation::NeedsEnsure,
                        },
                        (_, None) => LoadBalancerObservation::Absent,
                        (_, Some(_)) => LoadBalancerObservation::NeedsEnsure,
                    })
                }
                ReadPlan::Network { name, check } => {
                    let found = network
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| Err(missing(&name)))?;
                    match (found, check) {
                        (Some(lb), check) if tagging.has_cluster_tag(&lb.tags) => match check {
                            None => nlb_status(&lb).map(LoadBalancerObservation::Present),
                            // Its targets are not in the description: trusted only as this
                            // process made or found them; else the ensure reads them.
                            Some(ck)
                                if self.verified.trusted(
                                    &name,
                                    &lb.arn,
                                    &ck.fingerprint,
                                    lb.tags.get(MARKER_TAG).map(String::as_str),
                                ) && self.members.trusted(&name, &lb.arn, &ck.members, None) =>
                            {
                                nlb_status(&lb).map(LoadBalancerObservation::Converged)
                            }
                            Some(_) => Ok(LoadBalancerObservation::NeedsEnsure),
                        },
                        (_, None) => Ok(LoadBalancerObservation::Absent),
                        (_, Some(_)) => Ok(LoadBalancerObservation::NeedsEnsure),
                    }
                }
            })
            .collect())
    }
}

/// Whether a rule's description makes it one of `lb`'s health rules.
fn is_health_rule_of(description: &str, lb: &str) -> bool {
    description == format!("{NLB_HEALTH}={lb}")
}

#[async_trait]
impl LoadBalancers for AwsProvider {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancerStatus>> {
        if spec::implemented_elsewhere(service).is_some() {
            return Ok(None);
        }
        let tagging = self.tagging(cluster)?;
        let Ok(name) = load_balancer_name(&service.uid) else {
            return Ok(None);
        };
        if spec::wants_network(service) {
            match self.describe_nlb(&name).await? {
                Some(lb) if tagging.has_cluster_tag(&lb.tags) => nlb_status(&lb).map(Some),
                _ => Ok(None),
            }
        } else {
            match self.describe_classic(&name).await? {
                Some(lb) if tagging.has_cluster_tag(&lb.tags) => Ok(Some(hostname(&lb.dns_name))),
                _ => Ok(None),
            }
        }
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<LoadBalancerStatus> {
        self.converge(cluster, service, nodes, true).await
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
    ) -> Result<()> {
        self.converge(cluster, service, nodes, false).await.map(|_| ())
    }

    /// What cloud-provider-aws reads in the Service other than written (see
    /// [`crate::annotations`]).
    fn service_notices(&self, cluster: &str, service: &ServiceSpec) -> Vec<provider::ServiceNotice> {
        match self.tagging(cluster) {
            Ok(tagging) => spec::parse_noting(&tagging, &self.config.load_balancers, service).1,
            Err(_) => Vec::new(),
        }
    }

    fn read_batch_key(&self, _cluster: &str, service: &ServiceSpec) -> String {
        // Classic ELBs and NLBs are described by different APIs.
        if spec::wants_network(service) {
            "nlb"
        } else {
            "classic"
        }
        .to_owned()
    }

    fn checks_before_ensure(&self) -> bool {
        // A zero verify period trusts nothing: every ensure reads everything, so a check
        // first would only read twice.
        !self.config.verify_period.is_zero()
    }

    fn max_read_batch(&self) -> usize {
        crate::reads::MAX_NAMES
    }

    async fn read_load_balancers(
        &self,
        cluster: &str,
        reads: &[LoadBalancerRead],
    ) -> Result<Vec<Result<LoadBalancerObservation>>> {
        self.read_many(cluster, reads).await
    }

    async fn ensure_load_balancer_deleted(&self, cluster: &str, service: &ServiceSpec) -> Result<()> {
        // Whatever the annotations say now: deletion never answers ImplementedElsewhere, and an
        // ELB of ours with the Service's name goes even if the Service now asks for the AWS Load
        // Balancer Controller (its load balancers are named otherwise).
        self.delete_everything(cluster, service).await
    }
}
