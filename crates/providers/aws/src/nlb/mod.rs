//! Network load balancers: what AWS has and the calls of a plan, on the Elastic Load Balancing
//! v2 API. The decisions are in [`spec`] and [`plan`].

pub mod plan;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, Certificate, LoadBalancer, LoadBalancerAttribute, LoadBalancerSchemeEnum,
    LoadBalancerStateEnum, LoadBalancerTypeEnum, ProtocolEnum, SubnetMapping, Tag, TargetDescription,
    TargetGroupAttribute, TargetHealthReasonEnum, TargetTypeEnum,
};
use provider::{ProviderError, Result};

use self::{
    plan::{ListenerView, NlbAction, NlbObserved, ObservedHealth, TargetGroupView, TgRef},
    spec::{HealthCheck, SubnetPlacement},
};
use crate::{
    AwsProvider,
    errors::{BUSY_RETRY_AFTER, code_of, done_or_already, message_of, sdk_error},
    reads::{Described, describe_by_chunks},
    tags::Tags,
    writes::Writes,
};

/// Most ARNs per ELBv2 DescribeTags call.
const MAX_TAG_ARNS: usize = 20;
/// Targets per RegisterTargets/DeregisterTargets call (as upstream).
const TARGET_CHUNK: usize = 100;

/// An NLB as DescribeLoadBalancers answers it, with its tags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NlbView {
    /// ARN.
    pub arn: String,
    /// DNS name.
    pub dns_name: String,
    /// `provisioning`, `active`, `failed`…
    pub state: String,
    /// Scheme.
    pub scheme: String,
    /// VPC.
    pub vpc_id: String,
    /// Its subnets (one per zone).
    pub subnets: Vec<String>,
    /// Its security groups (none unless made with some).
    pub security_groups: Vec<String>,
    /// Tags.
    pub tags: Tags,
}

impl NlbView {
    fn from_sdk(lb: &LoadBalancer) -> Option<Self> {
        Some(Self {
            arn: lb.load_balancer_arn()?.to_owned(),
            dns_name: lb.dns_name().unwrap_or_default().to_owned(),
            state: lb
                .state()
                .and_then(|s| s.code())
                .map(|c| c.as_str().to_owned())
                .unwrap_or_default(),
            scheme: lb.scheme().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            vpc_id: lb.vpc_id().unwrap_or_default().to_owned(),
            subnets: lb
                .availability_zones()
                .iter()
                .filter_map(|z| z.subnet_id().map(str::to_owned))
                .collect(),
            security_groups: lb.security_groups().to_vec(),
            tags: Tags::new(),
        })
    }

    /// Upstream's `v2toStatus`: the DNS name while active or provisioning.
    pub fn serves(&self) -> bool {
        !self.dns_name.is_empty()
            && (self.state == LoadBalancerStateEnum::Active.as_str()
                || self.state == LoadBalancerStateEnum::Provisioning.as_str())
    }
}

fn elb_tags(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn forward(arn: &str) -> Action {
    Action::builder()
        .r#type(ActionTypeEnum::Forward)
        .target_group_arn(arn)
        .build()
}

fn describe_targets(ids: &[String], port: u16) -> Vec<TargetDescription> {
    ids.iter()
        .map(|id| TargetDescription::builder().id(id).port(i32::from(port)).build())
        .collect()
}

fn group_from_sdk(g: &aws_sdk_elasticloadbalancingv2::types::TargetGroup) -> TargetGroupView {
    TargetGroupView {
        arn: g.target_group_arn().unwrap_or_default().to_owned(),
        name: g.target_group_name().unwrap_or_default().to_owned(),
        port: g.port().and_then(|p| u16::try_from(p).ok()).unwrap_or_default(),
        protocol: g.protocol().map(|p| p.as_str().to_owned()).unwrap_or_default(),
        health: ObservedHealth {
            protocol: g
                .health_check_protocol()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default(),
            port: g.health_check_port().unwrap_or_default().to_owned(),
            path: g.health_check_path().filter(|p| !p.is_empty()).map(str::to_owned),
            interval: g.health_check_interval_seconds().unwrap_or_default(),
            timeout: g.health_check_timeout_seconds(),
            healthy: g.healthy_threshold_count().unwrap_or_default(),
            unhealthy: g.unhealthy_threshold_count().unwrap_or_default(),
        },
        targets: BTreeSet::new(),
        attributes: BTreeMap::new(),
    }
}

/// A target group found by name, with the load balancers it is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedGroup {
    /// The group (its targets not read).
    pub group: TargetGroupView,
    /// ARNs of the load balancers forwarding to it.
    pub load_balancers: Vec<String>,
}

fn op(action: &NlbAction) -> &'static str {
    match action {
        NlbAction::CreateTargetGroup { .. } => "CreateTargetGroup",
        NlbAction::ModifyTargetGroup { .. } => "ModifyTargetGroup",
        NlbAction::Deregister { .. } => "DeregisterTargets",
        NlbAction::Register { .. } => "RegisterTargets",
        NlbAction::ModifyTargetGroupAttributes { .. } => "ModifyTargetGroupAttributes",
        NlbAction::CreateListener { .. } => "CreateListener",
        NlbAction::ModifyListener { .. } => "ModifyListener",
        NlbAction::DeleteListener { .. } => "DeleteListener",
        NlbAction::DeleteTargetGroup { .. } => "DeleteTargetGroup",
        NlbAction::ModifyAttributes(_) => "ModifyLoadBalancerAttributes",
        NlbAction::AddTags(_) => "AddTags",
    }
}

impl AwsProvider {
    /// The NLB named `name` with its tags, or `None`.
    pub(crate) async fn describe_nlb(&self, name: &str) -> Result<Option<NlbView>> {
        let out = match self.elb.describe_load_balancers().names(name).send().await {
            Ok(out) => out,
            Err(e) if code_of(&e) == Some("LoadBalancerNotFound") => return Ok(None),
            Err(e) => return Err(sdk_error("DescribeLoadBalancers", &e)),
        };
        let Some(mut view) = out.load_balancers().first().and_then(NlbView::from_sdk) else {
            return Ok(None);
        };
        view.tags = self
            .elb_tags(std::slice::from_ref(&view.arn))
            .await?
            .remove(&view.arn)
            .unwrap_or_default();
        Ok(Some(view))
    }

    /// The NLBs named `names` with their tags, by name (`None`: no such load balancer), in
    /// batches: one DescribeLoadBalancers and one DescribeTags per 20 names, a missing name
    /// answered as its own (see [`crate::reads`]).
    pub(crate) async fn describe_nlb_many(
        &self,
        names: &[String],
    ) -> HashMap<String, Result<Option<NlbView>>> {
        let mut described = describe_by_chunks(names, |chunk| async move {
            match self
                .elb
                .describe_load_balancers()
                .set_names(Some(chunk))
                .send()
                .await
            {
                Ok(out) => Described::Found(
                    out.load_balancers()
                        .iter()
                        .filter_map(|lb| Some((lb.load_balancer_name()?.to_owned(), NlbView::from_sdk(lb)?)))
                        .collect(),
                ),
                Err(e) if code_of(&e) == Some("LoadBalancerNotFound") => Described::NotFound,
                Err(e) => Described::Failed(sdk_error("DescribeLoadBalancers", &e)),
            }
        })
        .await;
        let arns: HashMap<String, String> = names
            .iter()
            .filter_map(|n| match described.get(n) {
                Some(Ok(Some(view))) => Some((view.arn.clone(), n.clone())),
                _ => None,
            })
            .collect();
        let arn_list: Vec<String> = arns.keys().cloned().collect();
        let tags = describe_by_chunks(&arn_list, |chunk| async move {
            match self
                .elb
                .describe_tags()
                .set_resource_arns(Some(chunk))
                .send()
                .await
            {
                Ok(resp) => Described::Found(
                    resp.tag_descriptions()
                        .iter()
                        .filter_map(|d| {
                            let tags = d.tags().iter().filter_map(|t| {
                                Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned()))
                            });
                            Some((d.resource_arn()?.to_owned(), tags.collect::<Tags>()))
                        })
                        .collect(),
                ),
                Err(e) if code_of(&e) == Some("LoadBalancerNotFound") => Described::NotFound,
                Err(e) => Described::Failed(sdk_error("DescribeTags", &e)),
            }
        })
        .await;
        for (arn, answer) in tags {
            let Some(name) = arns.get(&arn) else { continue };
            match answer {
                Ok(Some(t)) => {
                    if let Some(Ok(Some(view))) = described.get_mut(name) {
                        view.tags = t;
                    }
                }
                // Deleted between the two calls.
                Ok(None) => {
                    described.insert(name.clone(), Ok(None));
                }
                Err(e) => {
                    described.insert(name.clone(), Err(e));
                }
            }
        }
        described
    }

    /// Tags of ELBv2 resources by ARN.
    pub(crate) async fn elb_tags(&self, arns: &[String]) -> Result<HashMap<String, Tags>> {
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
                if let Some(arn) = d.resource_arn() {
                    let tags = d.tags().iter().filter_map(|t| {
                        Some((t.key()?.to_owned(), t.value().unwrap_or_default().to_owned()))
                    });
                    out.insert(arn.to_owned(), tags.collect());
                }
            }
        }
        Ok(out)
    }

    /// Everything of an existing NLB a plan compares: listeners, attached target groups with
    /// their targets (and attributes when `tg_attributes`), unattached groups named `wanted`,
    /// and the load balancer's attributes.
    pub(crate) async fn observe_nlb(
        &self,
        lb: &NlbView,
        wanted: &[String],
        tg_attributes: bool,
    ) -> Result<NlbObserved> {
        let listeners = self.observe_listeners(&lb.arn).await?;
        let mut target_groups = self.target_groups(Some(&lb.arn), None).await?;
        for g in &mut target_groups {
            g.targets = self.targets_of(&g.arn).await?;
            if tg_attributes {
                g.attributes = self.target_group_attributes(&g.arn).await?;
            }
        }
        let mut unattached = Vec::new();
        for name in wanted
            .iter()
            .filter(|n| !target_groups.iter().any(|g| &g.name == *n))
        {
            for mut g in self.target_groups(None, Some(name)).await? {
                if g.port == 0 {
                    continue;
                }
                g.targets = self.targets_of(&g.arn).await?;
                unattached.push(g);
            }
        }
        let attributes = self
            .elb
            .describe_load_balancer_attributes()
            .load_balancer_arn(&lb.arn)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeLoadBalancerAttributes", &e))?
            .attributes()
            .iter()
            .filter_map(|a| Some((a.key()?.to_owned(), a.value().unwrap_or_default().to_owned())))
            .collect();
        Ok(NlbObserved {
            listeners,
            target_groups,
            unattached,
            attributes,
            tags: lb.tags.clone(),
        })
    }

    /// The load balancer's listeners.
    pub(crate) async fn observe_listeners(&self, arn: &str) -> Result<Vec<ListenerView>> {
        let mut out = Vec::new();
        let mut marker = None;
        loop {
            let resp = self
                .elb
                .describe_listeners()
                .load_balancer_arn(arn)
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| sdk_error("DescribeListeners", &e))?;
            for l in resp.listeners() {
                let target_group_arn = l.default_actions().first().and_then(|a| {
                    a.target_group_arn().map(str::to_owned).or_else(|| {
                        a.forward_config()
                            .and_then(|f| f.target_groups().first())
                            .and_then(|t| t.target_group_arn())
                            .map(str::to_owned)
                    })
                });
                out.push(ListenerView {
                    arn: l.listener_arn().unwrap_or_default().to_owned(),
                    port: l.port().and_then(|p| u16::try_from(p).ok()).unwrap_or_default(),
                    protocol: l.protocol().map(|p| p.as_str().to_owned()).unwrap_or_default(),
                    certificates: l
                        .certificates()
                        .iter()
                        .filter_map(|c| c.certificate_arn().map(str::to_owned))
                        .collect(),
                    ssl_policy: l.ssl_policy().filter(|p| !p.is_empty()).map(str::to_owned),
                    target_group_arn,
                });
            }
            marker = resp.next_marker().filter(|m| !m.is_empty()).map(str::to_owned);
            if marker.is_none() {
                return Ok(out);
            }
        }
    }

    /// Target groups of a load balancer, or by name; none found is an empty answer.
    pub(crate) async fn target_groups(
        &self,
        lb_arn: Option<&str>,
        name: Option<&str>,
    ) -> Result<Vec<TargetGroupView>> {
        let mut out = Vec::new();
        let mut marker = None;
        loop {
            let resp = match self
                .elb
                .describe_target_groups()
                .set_load_balancer_arn(lb_arn.map(str::to_owned))
                .set_names(name.map(|n| vec![n.to_owned()]))
                .set_marker(marker)
                .send()
                .await
            {
                Ok(resp) => resp,
                Err(e) if matches!(code_of(&e), Some("TargetGroupNotFound" | "LoadBalancerNotFound")) => {
                    return Ok(out);
                }
                Err(e) => return Err(sdk_error("DescribeTargetGroups", &e)),
            };
            out.extend(resp.target_groups().iter().map(group_from_sdk));
            marker = resp.next_marker().filter(|m| !m.is_empty()).map(str::to_owned);
            if marker.is_none() {
                return Ok(out);
            }
        }
    }

    /// Target groups by name (`None`: no such group), in batches of 20 names per
    /// DescribeTargetGroups, a missing name answered as its own (see [`crate::reads`]).
    pub(crate) async fn target_groups_named_many(
        &self,
        names: &[String],
    ) -> HashMap<String, Result<Option<NamedGroup>>> {
        describe_by_chunks(names, |chunk| async move {
            match self
                .elb
                .describe_target_groups()
                .set_names(Some(chunk))
                .send()
                .await
            {
                // One page: 20 names are well under a page of 400 groups.
                Ok(out) => Described::Found(
                    out.target_groups()
                        .iter()
                        .map(|g| {
                            let named = NamedGroup {
                                group: group_from_sdk(g),
                                load_balancers: g.load_balancer_arns().to_vec(),
                            };
                            (named.group.name.clone(), named)
                        })
                        .collect(),
                ),
                Err(e) if code_of(&e) == Some("TargetGroupNotFound") => Described::NotFound,
                Err(e) => Described::Failed(sdk_error("DescribeTargetGroups", &e)),
            }
        })
        .await
    }

    /// Registered instances, without those being deregistered (upstream's).
    pub(crate) async fn targets_of(&self, arn: &str) -> Result<BTreeSet<String>> {
        let resp = self
            .elb
            .describe_target_health()
            .target_group_arn(arn)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeTargetHealth", &e))?;
        Ok(resp
            .target_health_descriptions()
            .iter()
            .filter(|d| {
                d.target_health().and_then(|h| h.reason())
                    != Some(&TargetHealthReasonEnum::DeregistrationInProgress)
            })
            .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_owned))
            .collect())
    }

    async fn target_group_attributes(&self, arn: &str) -> Result<BTreeMap<String, String>> {
        Ok(self
            .elb
            .describe_target_group_attributes()
            .target_group_arn(arn)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeTargetGroupAttributes", &e))?
            .attributes()
            .iter()
            .filter_map(|a| Some((a.key()?.to_owned(), a.value().unwrap_or_default().to_owned())))
            .collect())
    }

    /// Creates the NLB (upstream's creation request); a name taken meanwhile is retried.
    pub(crate) async fn create_nlb(
        &self,
        w: &mut Writes,
        name: &str,
        internal: bool,
        mappings: &[SubnetPlacement],
        tags: &Tags,
    ) -> Result<NlbView> {
        let request = || format!("network {name} internal={internal} {mappings:?} {tags:?}");
        if !self.before_write(w, "CreateLoadBalancer", name, request).await? {
            // What the call would answer, as far as the rest of the converge needs it.
            return Ok(NlbView {
                arn: format!("(new load balancer {name})"),
                dns_name: String::new(),
                state: "provisioning".into(),
                scheme: if internal { "internal" } else { "internet-facing" }.into(),
                vpc_id: String::new(),
                subnets: mappings.iter().map(|m| m.subnet.clone()).collect(),
                security_groups: Vec::new(),
                tags: tags.clone(),
            });
        }
        let subnet_mappings = mappings
            .iter()
            .map(|m| {
                SubnetMapping::builder()
                    .subnet_id(&m.subnet)
                    .set_allocation_id(m.eip_allocation.clone())
                    .set_private_ipv4_address(m.private_ipv4.clone())
                    .build()
            })
            .collect();
        let created = self
            .elb
            .create_load_balancer()
            .name(name)
            .r#type(LoadBalancerTypeEnum::Network)
            .set_scheme(internal.then_some(LoadBalancerSchemeEnum::Internal))
            .set_subnet_mappings(Some(subnet_mappings))
            .set_tags(Some(elb_tags(tags)))
            .send()
            .await;
        match created {
            Ok(out) => out
                .load_balancers()
                .first()
                .and_then(NlbView::from_sdk)
                .map(|mut v| {
                    v.tags = tags.clone();
                    v
                })
                .ok_or_else(|| {
                    ProviderError::Internal("CreateLoadBalancer answered no load balancer".into())
                }),
            Err(e) if code_of(&e) == Some("DuplicateLoadBalancerName") => Err(ProviderError::RetryAfter {
                after: BUSY_RETRY_AFTER,
                message: format!("load balancer {name} was created meanwhile; converging it shortly"),
            }),
            Err(e) => Err(sdk_error("CreateLoadBalancer", &e)),
        }
    }

    /// Runs a plan's calls in order.
    pub(crate) async fn apply_nlb(&self, w: &mut Writes, lb: &NlbView, actions: &[NlbAction]) -> Result<()> {
        let mut created: HashMap<String, String> = HashMap::new();
        let arn_of = |r: &TgRef, created: &HashMap<String, String>| -> Result<String> {
            match r {
                TgRef::Existing(arn) => Ok(arn.clone()),
                TgRef::New(name) => created
                    .get(name)
                    .cloned()
                    .ok_or_else(|| ProviderError::Internal(format!("target group {name} was not created"))),
            }
        };
        for action in actions {
            let op = op(action);
            if !self
                .before_write(w, op, &lb.arn, || format!("{action:?}"))
                .await?
            {
                if let NlbAction::CreateTargetGroup { name, .. } = action {
                    created.insert(name.clone(), format!("(new target group {name})"));
                }
                continue;
            }
            match action {
                NlbAction::CreateTargetGroup {
                    name,
                    protocol,
                    port,
                    health,
                    tags,
                } => {
                    let arn = self
                        .create_target_group(&lb.vpc_id, name, protocol, *port, health, tags)
                        .await?;
                    created.insert(name.clone(), arn);
                }
                NlbAction::ModifyTargetGroup { arn, health } => {
                    let http = matches!(health.protocol.as_str(), "HTTP" | "HTTPS");
                    self.elb
                        .modify_target_group()
                        .target_group_arn(arn)
                        .health_check_port(health.port.as_elb())
                        .set_health_check_path(if http { health.path.clone() } else { None })
                        .healthy_threshold_count(health.healthy)
                        .unhealthy_threshold_count(health.unhealthy)
                        .set_health_check_timeout_seconds(health.timeout)
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
                NlbAction::Deregister {
                    target_group,
                    instances,
                    port,
                } => {
                    let arn = arn_of(target_group, &created)?;
                    for chunk in instances.chunks(TARGET_CHUNK) {
                        match self
                            .elb
                            .deregister_targets()
                            .target_group_arn(&arn)
                            .set_targets(Some(describe_targets(chunk, *port)))
                            .send()
                            .await
                        {
                            Ok(_) => {}
                            // Already gone (a terminated instance).
                            Err(e) if code_of(&e) == Some("InvalidTarget") => {}
                            Err(e) => return Err(sdk_error(op, &e)),
                        }
                    }
                }
                NlbAction::Register {
                    target_group,
                    instances,
                    port,
                } => {
                    let arn = arn_of(target_group, &created)?;
                    for chunk in instances.chunks(TARGET_CHUNK) {
                        self.elb
                            .register_targets()
                            .target_group_arn(&arn)
                            .set_targets(Some(describe_targets(chunk, *port)))
                            .send()
                            .await
                            .map_err(|e| {
                                if code_of(&e) == Some("InvalidTarget") {
                                    // Stopped between its lookup and now: the next sync sees it.
                                    ProviderError::RetryAfter {
                                        after: BUSY_RETRY_AFTER,
                                        message: format!("RegisterTargets: {}", message_of(&e)),
                                    }
                                } else {
                                    sdk_error(op, &e)
                                }
                            })?;
                    }
                }
                NlbAction::ModifyTargetGroupAttributes {
                    target_group,
                    attributes,
                } => {
                    let arn = arn_of(target_group, &created)?;
                    self.elb
                        .modify_target_group_attributes()
                        .target_group_arn(arn)
                        .set_attributes(Some(
                            attributes
                                .iter()
                                .map(|(k, v)| TargetGroupAttribute::builder().key(k).value(v).build())
                                .collect(),
                        ))
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
                NlbAction::CreateListener {
                    port,
                    protocol,
                    certificate,
                    ssl_policy,
                    target_group,
                    tags,
                } => {
                    let arn = arn_of(target_group, &created)?;
                    self.elb
                        .create_listener()
                        .load_balancer_arn(&lb.arn)
                        .port(i32::from(*port))
                        .protocol(ProtocolEnum::from(protocol.as_str()))
                        .default_actions(forward(&arn))
                        .set_certificates(
                            certificate
                                .as_ref()
                                .map(|c| vec![Certificate::builder().certificate_arn(c).build()]),
                        )
                        .set_ssl_policy(ssl_policy.clone())
                        .set_tags(Some(elb_tags(tags)))
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
                NlbAction::ModifyListener {
                    arn,
                    port,
                    protocol,
                    certificate,
                    ssl_policy,
                    target_group,
                } => {
                    let tg = arn_of(target_group, &created)?;
                    self.elb
                        .modify_listener()
                        .listener_arn(arn)
                        .port(i32::from(*port))
                        .protocol(ProtocolEnum::from(protocol.as_str()))
                        .default_actions(forward(&tg))
                        .set_certificates(
                            certificate
                                .as_ref()
                                .map(|c| vec![Certificate::builder().certificate_arn(c).build()]),
                        )
                        .set_ssl_policy(ssl_policy.clone())
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
                NlbAction::DeleteListener { arn } => {
                    match self.elb.delete_listener().listener_arn(arn).send().await {
                        Ok(_) => {}
                        Err(e) if code_of(&e) == Some("ListenerNotFound") => {}
                        Err(e) => return Err(sdk_error(op, &e)),
                    }
                }
                NlbAction::DeleteTargetGroup { arn } => self.delete_target_group(arn).await?,
                NlbAction::ModifyAttributes(attributes) => {
                    self.elb
                        .modify_load_balancer_attributes()
                        .load_balancer_arn(&lb.arn)
                        .set_attributes(Some(
                            attributes
                                .iter()
                                .map(|(k, v)| LoadBalancerAttribute::builder().key(k).value(v).build())
                                .collect(),
                        ))
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
                NlbAction::AddTags(tags) => {
                    self.elb
                        .add_tags()
                        .resource_arns(&lb.arn)
                        .set_tags(Some(elb_tags(tags)))
                        .send()
                        .await
                        .map_err(|e| sdk_error(op, &e))?;
                }
            }
        }
        Ok(())
    }

    async fn create_target_group(
        &self,
        vpc: &str,
        name: &str,
        protocol: &str,
        port: u16,
        health: &HealthCheck,
        tags: &Tags,
    ) -> Result<String> {
        let http = matches!(health.protocol.as_str(), "HTTP" | "HTTPS");
        let created = self
            .elb
            .create_target_group()
            .name(name)
            .protocol(ProtocolEnum::from(protocol))
            .port(i32::from(port))
            .vpc_id(vpc)
            .target_type(TargetTypeEnum::Instance)
            .health_check_protocol(ProtocolEnum::from(health.protocol.as_str()))
            .health_check_port(health.port.as_elb())
            .set_health_check_path(if http { health.path.clone() } else { None })
            .health_check_interval_seconds(health.interval)
            .set_health_check_timeout_seconds(health.timeout)
            .healthy_threshold_count(health.healthy)
            .unhealthy_threshold_count(health.unhealthy)
            .set_tags(Some(elb_tags(tags)))
            .send()
            .await;
        match created {
            Ok(out) => out
                .target_groups()
                .first()
                .and_then(|g| g.target_group_arn())
                .map(str::to_owned)
                .ok_or_else(|| ProviderError::Internal("CreateTargetGroup answered no target group".into())),
            // Made meanwhile with other settings (a concurrent sync): converge it next time.
            Err(e) if code_of(&e) == Some("DuplicateTargetGroupName") => Err(ProviderError::RetryAfter {
                after: BUSY_RETRY_AFTER,
                message: format!("target group {name} was created meanwhile; converging it shortly"),
            }),
            Err(e) => Err(sdk_error("CreateTargetGroup", &e)),
        }
    }

    /// Deletes a target group. Still attached to a load balancer being deleted: retried shortly.
    pub(crate) async fn delete_target_group(&self, arn: &str) -> Result<()> {
        let result = self.elb.delete_target_group().target_group_arn(arn).send().await;
        done_or_already("DeleteTargetGroup", result, &["TargetGroupNotFound"])
    }

    /// Deletes the NLB (gone already: fine).
    pub(crate) async fn delete_nlb(&self, w: &mut Writes, arn: &str) -> Result<()> {
        if !self
            .before_write(w, "DeleteLoadBalancer", arn, String::new)
            .await?
        {
            return Ok(());
        }
        let result = self
            .elb
            .delete_load_balancer()
            .load_balancer_arn(arn)
            .send()
            .await;
        done_or_already("DeleteLoadBalancer", result, &["LoadBalancerNotFound"])
    }
}
