//! Network load balancers: the ELBv2 calls around [`crate::plan`].
//!
//! A service gets one NLB named after its UID, one target group per listener (deterministic name,
//! instance targets on the node port) and one listener per front port. Everything is tagged
//! `kubernetes.io/cluster/<cluster>=owned` plus the service's name and UID; nothing without the
//! cluster tag is ever changed or deleted. Ensure and update converge: they read what exists and
//! change only what differs, so a retry after a crash finishes the job without duplicates.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter;
use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, LoadBalancer, LoadBalancerSchemeEnum, LoadBalancerTypeEnum, ProtocolEnum, Tag,
    TargetDescription, TargetGroup, TargetHealthStateEnum, TargetTypeEnum,
};
use provider::{
    LoadBalancerIngress, LoadBalancerNode, LoadBalancerStatus, LoadBalancers, NodeRef, ProviderError, Result,
    ServiceSpec,
};

use crate::{
    AwsProvider,
    errors::{code_of, sdk_error},
    instances::{NodeKey, node_key},
    naming::{cluster_tag_key, load_balancer_name, tagged_for_cluster},
    plan::{
        LbPlan, ListenerChange, ListenerView, PortMapping, SubnetView, Target, TargetGroupView,
        choose_subnets, diff_listeners, diff_targets, health_check_differs, plan_load_balancer,
        target_group_names,
    },
};

/// Most ARNs per ELBv2 DescribeTags call.
const MAX_TAG_ARNS: usize = 20;
/// Targets per RegisterTargets/DeregisterTargets call (as cloud-provider-aws).
const TARGET_CHUNK: usize = 100;
/// Health check timing of the target groups (NLB defaults for HTTP checks).
const HEALTH_INTERVAL_SECONDS: i32 = 10;
const HEALTH_TIMEOUT_SECONDS: i32 = 6;
const HEALTH_THRESHOLD: i32 = 2;

/// A load balancer as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbView {
    /// ARN.
    pub arn: String,
    /// DNS name (the service's ingress hostname).
    pub dns_name: String,
    /// `internal` or `internet-facing`.
    pub scheme: String,
    /// VPC.
    pub vpc_id: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

impl LbView {
    fn from_sdk(lb: &LoadBalancer, tags: BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            arn: lb.load_balancer_arn()?.to_owned(),
            dns_name: lb.dns_name().unwrap_or_default().to_owned(),
            scheme: lb.scheme().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            vpc_id: lb.vpc_id().unwrap_or_default().to_owned(),
            tags,
        })
    }

    fn owned_by(&self, cluster: &str) -> bool {
        tagged_for_cluster(self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())), cluster)
    }

    /// The service status: the DNS name as a hostname.
    pub fn status(&self) -> Result<LoadBalancerStatus> {
        if self.dns_name.is_empty() {
            return Err(ProviderError::RetryAfter {
                after: std::time::Duration::from_secs(10),
                message: format!("load balancer {} has no DNS name yet", self.arn),
            });
        }
        Ok(LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: String::new(),
                hostname: self.dns_name.clone(),
            }],
        })
    }
}

fn tg_view(tg: &TargetGroup, tags: BTreeMap<String, String>) -> Option<TargetGroupView> {
    Some(TargetGroupView {
        arn: tg.target_group_arn()?.to_owned(),
        name: tg.target_group_name().unwrap_or_default().to_owned(),
        health_check_protocol: tg
            .health_check_protocol()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        health_check_port: tg.health_check_port().unwrap_or_default().to_owned(),
        health_check_path: tg.health_check_path().unwrap_or_default().to_owned(),
        tags,
    })
}

fn elb_tags(pairs: &BTreeMap<String, String>) -> Vec<Tag> {
    pairs
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn owned(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tagged_for_cluster(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())), cluster)
}

fn not_ours(what: &str, name: &str, cluster: &str) -> ProviderError {
    ProviderError::InvalidArgument(format!(
        "{what} {name} exists but is not tagged {}; refusing to touch it",
        cluster_tag_key(cluster)
    ))
}

impl AwsProvider {
    /// Tags of ELBv2 resources by ARN.
    async fn elb_tags_of(&self, arns: &[String]) -> Result<HashMap<String, BTreeMap<String, String>>> {
        let mut out = HashMap::new();
        for chunk in arns.chunks(MAX_TAG_ARNS) {
            let resp = self
                .elb
                .describe_tags()
                .set_resource_arns(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| sdk_error("DescribeTags", &e))?;
            for d in resp.tag_descriptions() {
                let Some(arn) = d.resource_arn() else { continue };
                let tags = d
                    .tags()
                    .iter()
                    .filter_map(|t| Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned())))
                    .collect();
                out.insert(arn.to_owned(), tags);
            }
        }
        Ok(out)
    }

    /// The load balancer named `name`, whoever owns it.
    pub(crate) async fn find_load_balancer(&self, name: &str) -> Result<Option<LbView>> {
        let resp = match self.elb.describe_load_balancers().names(name).send().await {
            Ok(resp) => resp,
            Err(e) if code_of(&e) == Some("LoadBalancerNotFound") => return Ok(None),
            Err(e) => return Err(sdk_error("DescribeLoadBalancers", &e)),
        };
        let Some(lb) = resp.load_balancers().first() else {
            return Ok(None);
        };
        let Some(arn) = lb.load_balancer_arn() else {
            return Ok(None);
        };
        let mut tags = self.elb_tags_of(&[arn.to_owned()]).await?;
        Ok(LbView::from_sdk(lb, tags.remove(arn).unwrap_or_default()))
    }

    /// Subnets for a new load balancer: the annotation's, else the settings', else discovered.
    async fn subnets_for(&self, cluster: &str, plan: &LbPlan) -> Result<Vec<String>> {
        if !plan.subnets.is_empty() {
            return Ok(plan.subnets.clone());
        }
        if !self.config.subnet_ids.is_empty() {
            return Ok(self.config.subnet_ids.clone());
        }
        let mut request = self.ec2.describe_subnets().filters(
            Filter::builder()
                .name("tag-key")
                .values(cluster_tag_key(cluster))
                .build(),
        );
        if let Some(vpc) = &self.config.vpc_id {
            request = request.filters(Filter::builder().name("vpc-id").values(vpc).build());
        }
        let resp = request
            .send()
            .await
            .map_err(|e| sdk_error("DescribeSubnets", &e))?;
        let subnets: Vec<SubnetView> = resp
            .subnets()
            .iter()
            .filter_map(|s| {
                Some(SubnetView {
                    id: s.subnet_id()?.to_owned(),
                    zone: s.availability_zone().unwrap_or_default().to_owned(),
                    tags: s
                        .tags()
                        .iter()
                        .filter_map(|t| Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned())))
                        .collect(),
                })
            })
            .collect();
        let chosen = choose_subnets(&subnets, plan.internal);
        if chosen.is_empty() {
            return Err(ProviderError::InvalidArgument(format!(
                "no subnets for the load balancer: tag subnets {} (and {} or {}), set the provider's \
                 subnet IDs, or annotate the service with {}",
                cluster_tag_key(cluster),
                crate::plan::ROLE_ELB_TAG,
                crate::plan::ROLE_INTERNAL_ELB_TAG,
                crate::plan::ANNOTATION_SUBNETS
            )));
        }
        Ok(chosen)
    }

    async fn create_load_balancer(&self, cluster: &str, plan: &LbPlan) -> Result<LbView> {
        let subnets = self.subnets_for(cluster, plan).await?;
        let created = self
            .elb
            .create_load_balancer()
            .name(&plan.name)
            .r#type(LoadBalancerTypeEnum::Network)
            .scheme(LoadBalancerSchemeEnum::from(plan.scheme()))
            .set_subnets(Some(subnets))
            .set_tags(Some(elb_tags(&plan.tags)))
            .send()
            .await;
        match created {
            Ok(resp) => resp
                .load_balancers()
                .first()
                .and_then(|lb| LbView::from_sdk(lb, plan.tags.clone()))
                .ok_or_else(|| {
                    ProviderError::Internal("CreateLoadBalancer returned no load balancer".into())
                }),
            // Someone (an earlier attempt) created it meanwhile: use it if it is ours.
            Err(e) if code_of(&e) == Some("DuplicateLoadBalancerName") => {
                match self.find_load_balancer(&plan.name).await? {
                    Some(lb) if lb.owned_by(cluster) => Ok(lb),
                    Some(_) => Err(not_ours("load balancer", &plan.name, cluster)),
                    None => Err(ProviderError::RetryAfter {
                        after: std::time::Duration::from_secs(2),
                        message: format!("load balancer {} is being created or deleted", plan.name),
                    }),
                }
            }
            Err(e) => Err(sdk_error("CreateLoadBalancer", &e)),
        }
    }

    async fn listeners_of(&self, lb_arn: &str) -> Result<Vec<ListenerView>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let resp = self
                .elb
                .describe_listeners()
                .load_balancer_arn(lb_arn)
                .set_marker(marker.take())
                .send()
                .await
                .map_err(|e| sdk_error("DescribeListeners", &e))?;
            for l in resp.listeners() {
                let (Some(arn), Some(port)) = (l.listener_arn(), l.port()) else {
                    continue;
                };
                let target_group_arn = l.default_actions().first().and_then(|a| {
                    a.target_group_arn().map(str::to_owned).or_else(|| {
                        a.forward_config()
                            .and_then(|f| f.target_groups().first())
                            .and_then(|t| t.target_group_arn())
                            .map(str::to_owned)
                    })
                });
                out.push(ListenerView {
                    arn: arn.to_owned(),
                    port: u16::try_from(port).unwrap_or_default(),
                    protocol: l.protocol().map(|p| p.as_str().to_owned()).unwrap_or_default(),
                    target_group_arn,
                });
            }
            match resp.next_marker() {
                Some(m) if !m.is_empty() => marker = Some(m.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// Target groups the load balancer's listeners use, with their tags.
    async fn target_groups_of(&self, lb_arn: &str) -> Result<Vec<TargetGroupView>> {
        let mut groups = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let resp = match self
                .elb
                .describe_target_groups()
                .load_balancer_arn(lb_arn)
                .set_marker(marker.take())
                .send()
                .await
            {
                Ok(resp) => resp,
                // moto answers TargetGroupNotFound when the load balancer has none.
                Err(e) if matches!(code_of(&e), Some("LoadBalancerNotFound" | "TargetGroupNotFound")) => {
                    break;
                }
                Err(e) => return Err(sdk_error("DescribeTargetGroups", &e)),
            };
            groups.extend(resp.target_groups().iter().cloned());
            match resp.next_marker() {
                Some(m) if !m.is_empty() => marker = Some(m.to_owned()),
                _ => break,
            }
        }
        self.with_tags(&groups).await
    }

    async fn with_tags(&self, groups: &[TargetGroup]) -> Result<Vec<TargetGroupView>> {
        let arns: Vec<String> = groups
            .iter()
            .filter_map(|g| g.target_group_arn().map(str::to_owned))
            .collect();
        let mut tags = if arns.is_empty() {
            HashMap::new()
        } else {
            self.elb_tags_of(&arns).await?
        };
        Ok(groups
            .iter()
            .filter_map(|g| {
                let t = g
                    .target_group_arn()
                    .and_then(|a| tags.remove(a))
                    .unwrap_or_default();
                tg_view(g, t)
            })
            .collect())
    }

    /// The target group named `name`, whoever owns it.
    async fn target_group_named(&self, name: &str) -> Result<Option<TargetGroupView>> {
        match self.elb.describe_target_groups().names(name).send().await {
            Ok(resp) => Ok(self.with_tags(resp.target_groups()).await?.into_iter().next()),
            Err(e) if code_of(&e) == Some("TargetGroupNotFound") => Ok(None),
            Err(e) => Err(sdk_error("DescribeTargetGroups", &e)),
        }
    }

    /// The mapping's target group, found (attached or by name) or created, with the wanted
    /// health check.
    async fn ensure_target_group(
        &self,
        cluster: &str,
        plan: &LbPlan,
        mapping: &PortMapping,
        vpc_id: &str,
        attached: &[TargetGroupView],
    ) -> Result<TargetGroupView> {
        let found = match attached.iter().find(|g| g.name == mapping.target_group) {
            Some(g) => Some(g.clone()),
            None => self.target_group_named(&mapping.target_group).await?,
        };
        let hc = &plan.health_check;
        if let Some(group) = found {
            if !owned(&group.tags, cluster) {
                return Err(not_ours("target group", &group.name, cluster));
            }
            if health_check_differs(&group, hc) {
                self.elb
                    .modify_target_group()
                    .target_group_arn(&group.arn)
                    .health_check_protocol(ProtocolEnum::Http)
                    .health_check_port(hc.port.to_string())
                    .health_check_path(&hc.path)
                    .send()
                    .await
                    .map_err(|e| sdk_error("ModifyTargetGroup", &e))?;
            }
            return Ok(group);
        }
        let created = self
            .elb
            .create_target_group()
            .name(&mapping.target_group)
            .protocol(ProtocolEnum::from(mapping.protocol.as_str()))
            .port(i32::from(mapping.node_port))
            .vpc_id(vpc_id)
            .target_type(TargetTypeEnum::Instance)
            .health_check_enabled(true)
            .health_check_protocol(ProtocolEnum::Http)
            .health_check_port(hc.port.to_string())
            .health_check_path(&hc.path)
            .health_check_interval_seconds(HEALTH_INTERVAL_SECONDS)
            .health_check_timeout_seconds(HEALTH_TIMEOUT_SECONDS)
            .healthy_threshold_count(HEALTH_THRESHOLD)
            .unhealthy_threshold_count(HEALTH_THRESHOLD)
            .set_tags(Some(elb_tags(&plan.tags)))
            .send()
            .await
            .map_err(|e| sdk_error("CreateTargetGroup", &e))?;
        created
            .target_groups()
            .first()
            .and_then(|g| tg_view(g, plan.tags.clone()))
            .ok_or_else(|| ProviderError::Internal("CreateTargetGroup returned no target group".into()))
    }

    /// Registered targets that count (draining ones are on their way out).
    async fn targets_of(&self, tg_arn: &str) -> Result<BTreeSet<Target>> {
        let resp = self
            .elb
            .describe_target_health()
            .target_group_arn(tg_arn)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeTargetHealth", &e))?;
        Ok(resp
            .target_health_descriptions()
            .iter()
            .filter(|d| d.target_health().and_then(|h| h.state()) != Some(&TargetHealthStateEnum::Draining))
            .filter_map(|d| {
                let t = d.target()?;
                Some(Target {
                    id: t.id()?.to_owned(),
                    port: t.port().and_then(|p| u16::try_from(p).ok()).unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn register(&self, tg_arn: &str, targets: &[Target]) -> std::result::Result<(), ProviderError> {
        for chunk in targets.chunks(TARGET_CHUNK) {
            self.elb
                .register_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(descriptions(chunk)))
                .send()
                .await
                .map_err(|e| {
                    if code_of(&e) == Some("InvalidTarget") {
                        ProviderError::InvalidArgument(format!(
                            "InvalidTarget: {}",
                            crate::errors::message_of(&e)
                        ))
                    } else {
                        sdk_error("RegisterTargets", &e)
                    }
                })?;
        }
        Ok(())
    }

    /// Makes the target group's targets exactly `wanted`.
    async fn sync_targets(&self, tg_arn: &str, wanted: &BTreeSet<Target>) -> Result<()> {
        let actual = self.targets_of(tg_arn).await?;
        let (register, deregister) = diff_targets(wanted, &actual);
        if !register.is_empty() {
            match self.register(tg_arn, &register).await {
                Ok(()) => {}
                // Only running instances can be registered: drop the others and try once more.
                Err(ProviderError::InvalidArgument(why)) if why.starts_with("InvalidTarget") => {
                    let ids: Vec<String> = register.iter().map(|t| t.id.clone()).collect();
                    let described = self.describe_instance_ids(&ids).await?;
                    let running: Vec<Target> = register
                        .iter()
                        .filter(|t| described.found.get(&t.id).is_some_and(|i| i.state == "running"))
                        .cloned()
                        .collect();
                    tracing::info!(
                        skipped = register.len() - running.len(),
                        "registering only running instances as targets"
                    );
                    self.register(tg_arn, &running).await?;
                }
                Err(e) => return Err(e),
            }
        }
        for chunk in deregister.chunks(TARGET_CHUNK) {
            match self
                .elb
                .deregister_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(descriptions(chunk)))
                .send()
                .await
            {
                Ok(_) => {}
                // Already gone (e.g. a terminated instance).
                Err(e) if code_of(&e) == Some("InvalidTarget") => {}
                Err(e) => return Err(sdk_error("DeregisterTargets", &e)),
            }
        }
        Ok(())
    }

    /// Instance IDs of the backend nodes: from provider IDs, or by node name.
    async fn backend_instances(&self, nodes: &[LoadBalancerNode]) -> Result<BTreeSet<String>> {
        let mut ids = BTreeSet::new();
        let mut by_name = Vec::new();
        for node in nodes {
            match node_key(&NodeRef::new(node.name.clone(), node.provider_id.clone())) {
                NodeKey::Id(id) => {
                    ids.insert(id);
                }
                NodeKey::Name(_) => by_name.push(NodeRef::by_name(node.name.clone())),
                NodeKey::Invalid(e) => {
                    tracing::warn!(node = %node.name, error = %e, "node left out of the load balancer")
                }
            }
        }
        if !by_name.is_empty() {
            for (node, found) in by_name.iter().zip(self.resolve_nodes(&by_name).await?) {
                match found {
                    Ok(instance) => {
                        ids.insert(instance.id);
                    }
                    Err(e) => {
                        tracing::warn!(node = %node.name, error = %e, "node left out of the load balancer")
                    }
                }
            }
        }
        Ok(ids)
    }

    /// Brings the load balancer of `service` to the plan. `create`: create it when missing
    /// (ensure); otherwise a missing one is an error (update).
    async fn converge(
        &self,
        cluster: &str,
        service: &ServiceSpec,
        nodes: &[LoadBalancerNode],
        create: bool,
    ) -> Result<LoadBalancerStatus> {
        let plan = plan_load_balancer(cluster, service)?;
        let lb = match self.find_load_balancer(&plan.name).await? {
            Some(lb) if !lb.owned_by(cluster) => return Err(not_ours("load balancer", &plan.name, cluster)),
            Some(lb) if lb.scheme != plan.scheme() => {
                // An NLB's scheme is fixed at creation: replace it.
                tracing::info!(lb = %plan.name, from = %lb.scheme, to = plan.scheme(), "replacing the load balancer to change its scheme");
                self.delete_everything(cluster, &lb, &[]).await?;
                self.create_load_balancer(cluster, &plan).await?
            }
            Some(lb) => lb,
            None if create => self.create_load_balancer(cluster, &plan).await?,
            None => {
                return Err(ProviderError::InvalidArgument(format!(
                    "load balancer {} does not exist; ensure it first",
                    plan.name
                )));
            }
        };
        let missing_tags: BTreeMap<String, String> = plan
            .tags
            .iter()
            .filter(|(k, v)| lb.tags.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !missing_tags.is_empty() {
            self.elb
                .add_tags()
                .resource_arns(&lb.arn)
                .set_tags(Some(elb_tags(&missing_tags)))
                .send()
                .await
                .map_err(|e| sdk_error("AddTags", &e))?;
        }

        let instances = self.backend_instances(nodes).await?;
        let attached = self.target_groups_of(&lb.arn).await?;
        let mut wanted_listeners = Vec::new();
        for mapping in &plan.mappings {
            let group = self
                .ensure_target_group(cluster, &plan, mapping, &lb.vpc_id, &attached)
                .await?;
            let targets: BTreeSet<Target> = instances
                .iter()
                .map(|id| Target {
                    id: id.clone(),
                    port: mapping.node_port,
                })
                .collect();
            self.sync_targets(&group.arn, &targets).await?;
            wanted_listeners.push((mapping.port, mapping.protocol, group.arn));
        }

        let listeners = self.listeners_of(&lb.arn).await?;
        for change in diff_listeners(&wanted_listeners, &listeners) {
            self.apply_listener_change(&lb.arn, change).await?;
        }

        let wanted_groups: BTreeSet<&str> = plan.mappings.iter().map(|m| m.target_group.as_str()).collect();
        for group in attached
            .iter()
            .filter(|g| !wanted_groups.contains(g.name.as_str()))
        {
            if owned(&group.tags, cluster) {
                self.delete_target_group(&group.arn).await?;
            }
        }
        lb.status()
    }

    async fn apply_listener_change(&self, lb_arn: &str, change: ListenerChange) -> Result<()> {
        let forward = |tg: &str| {
            Action::builder()
                .r#type(ActionTypeEnum::Forward)
                .target_group_arn(tg)
                .build()
        };
        match change {
            ListenerChange::Create {
                port,
                protocol,
                target_group_arn,
            } => {
                self.elb
                    .create_listener()
                    .load_balancer_arn(lb_arn)
                    .port(i32::from(port))
                    .protocol(ProtocolEnum::from(protocol.as_str()))
                    .default_actions(forward(&target_group_arn))
                    .send()
                    .await
                    .map_err(|e| sdk_error("CreateListener", &e))?;
            }
            ListenerChange::Modify {
                arn,
                protocol,
                target_group_arn,
            } => {
                self.elb
                    .modify_listener()
                    .listener_arn(arn)
                    .protocol(ProtocolEnum::from(protocol.as_str()))
                    .default_actions(forward(&target_group_arn))
                    .send()
                    .await
                    .map_err(|e| sdk_error("ModifyListener", &e))?;
            }
            ListenerChange::Delete { arn } => self.delete_listener(&arn).await?,
        }
        Ok(())
    }

    async fn delete_listener(&self, arn: &str) -> Result<()> {
        match self.elb.delete_listener().listener_arn(arn).send().await {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("ListenerNotFound") => Ok(()),
            Err(e) => Err(sdk_error("DeleteListener", &e)),
        }
    }

    async fn delete_target_group(&self, arn: &str) -> Result<()> {
        match self.elb.delete_target_group().target_group_arn(arn).send().await {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("TargetGroupNotFound") => Ok(()),
            Err(e) => Err(sdk_error("DeleteTargetGroup", &e)),
        }
    }

    /// Deletes the load balancer's listeners, the cluster's target groups it used plus those
    /// named in `more_groups`, then the load balancer. Listeners first, so the groups are free;
    /// groups before the load balancer, so a retry still finds them through it.
    async fn delete_everything(
        &self,
        cluster: &str,
        lb: &LbView,
        more_groups: &[TargetGroupView],
    ) -> Result<()> {
        let groups = self.target_groups_of(&lb.arn).await?;
        for listener in self.listeners_of(&lb.arn).await? {
            self.delete_listener(&listener.arn).await?;
        }
        let mut done = BTreeSet::new();
        for group in groups.iter().chain(more_groups) {
            if owned(&group.tags, cluster) && done.insert(group.arn.clone()) {
                self.delete_target_group(&group.arn).await?;
            }
        }
        match self
            .elb
            .delete_load_balancer()
            .load_balancer_arn(&lb.arn)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("LoadBalancerNotFound") => Ok(()),
            Err(e) => Err(sdk_error("DeleteLoadBalancer", &e)),
        }
    }
}

fn descriptions(targets: &[Target]) -> Vec<TargetDescription> {
    targets
        .iter()
        .map(|t| {
            TargetDescription::builder()
                .id(&t.id)
                .port(i32::from(t.port))
                .build()
        })
        .collect()
}

#[async_trait]
impl LoadBalancers for AwsProvider {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &ServiceSpec,
    ) -> Result<Option<LoadBalancerStatus>> {
        let Ok(name) = load_balancer_name(&service.uid) else {
            return Ok(None);
        };
        match self.find_load_balancer(&name).await? {
            Some(lb) if lb.owned_by(cluster) => lb.status().map(Some),
            _ => Ok(None),
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

    async fn ensure_load_balancer_deleted(&self, cluster: &str, service: &ServiceSpec) -> Result<()> {
        // Whatever the annotations say now: deletion never answers ImplementedElsewhere.
        let Ok(name) = load_balancer_name(&service.uid) else {
            return Ok(());
        };
        // Target groups an interrupted ensure may have created before any listener used them.
        let mut loose = Vec::new();
        for group_name in target_group_names(&name, service) {
            if let Some(group) = self.target_group_named(&group_name).await? {
                loose.push(group);
            }
        }
        match self.find_load_balancer(&name).await? {
            Some(lb) if lb.owned_by(cluster) => self.delete_everything(cluster, &lb, &loose).await,
            Some(_) => {
                tracing::warn!(lb = %name, "a load balancer with the service's name exists but is not the cluster's; left alone");
                Ok(())
            }
            None => {
                for group in loose.iter().filter(|g| owned(&g.tags, cluster)) {
                    self.delete_target_group(&group.arn).await?;
                }
                Ok(())
            }
        }
    }
}
