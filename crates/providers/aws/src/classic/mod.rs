//! Classic ELBs: what AWS has ([`ClassicObserved`]) and the calls of a plan, on the Elastic Load
//! Balancing (v1) API. The decisions are in [`spec`] and [`plan`].

pub mod plan;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_elasticloadbalancing::types::{
    AccessLog, ConnectionDraining, ConnectionSettings, CrossZoneLoadBalancing, HealthCheck as SdkHealthCheck,
    Instance, Listener as SdkListener, LoadBalancerAttributes, LoadBalancerDescription, PolicyAttribute, Tag,
};
use provider::{ProviderError, Result};

use self::{
    plan::{ClassicAction, ClassicObserved, ObservedAttributes},
    spec::{HealthCheck, Listener, PROXY_PROTOCOL_POLICY},
};
use crate::{
    AwsProvider,
    errors::{BUSY_RETRY_AFTER, code_of, done_or_already, sdk_error},
    reads::{Described, describe_by_chunks},
    tags::Tags,
    writes::Writes,
};

/// Most names one Classic ELB DescribeTags call takes.
const MAX_TAG_NAMES: usize = 20;

fn internal(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Internal(e.to_string())
}

fn listener_from_sdk(l: &SdkListener) -> Listener {
    let protocol = l.protocol().to_owned();
    let tls = protocol.eq_ignore_ascii_case("ssl") || protocol.eq_ignore_ascii_case("https");
    Listener {
        lb_port: u16::try_from(l.load_balancer_port()).unwrap_or_default(),
        instance_port: u16::try_from(l.instance_port()).unwrap_or_default(),
        instance_protocol: l.instance_protocol().unwrap_or(&protocol).to_owned(),
        // A certificate means something only on an SSL or HTTPS listener.
        certificate: l
            .ssl_certificate_id()
            .filter(|c| tls && !c.is_empty())
            .map(str::to_owned),
        protocol,
    }
}

fn listener_to_sdk(l: &Listener) -> Result<SdkListener> {
    SdkListener::builder()
        .protocol(&l.protocol)
        .load_balancer_port(i32::from(l.lb_port))
        .instance_protocol(&l.instance_protocol)
        .instance_port(i32::from(l.instance_port))
        .set_ssl_certificate_id(l.certificate.clone())
        .build()
        .map_err(internal)
}

fn observed_from_sdk(d: &LoadBalancerDescription) -> ClassicObserved {
    ClassicObserved {
        name: d.load_balancer_name().unwrap_or_default().to_owned(),
        dns_name: d.dns_name().unwrap_or_default().to_owned(),
        scheme: d.scheme().unwrap_or_default().to_owned(),
        vpc_id: d.vpc_id().unwrap_or_default().to_owned(),
        subnets: d.subnets().to_vec(),
        security_groups: d.security_groups().to_vec(),
        listeners: d
            .listener_descriptions()
            .iter()
            .filter_map(|ld| Some((listener_from_sdk(ld.listener()?), ld.policy_names().to_vec())))
            .collect(),
        health_check: d
            .health_check()
            .filter(|h| !h.target().is_empty())
            .map(|h| HealthCheck {
                target: h.target().to_owned(),
                healthy: h.healthy_threshold(),
                unhealthy: h.unhealthy_threshold(),
                timeout: h.timeout(),
                interval: h.interval(),
            }),
        instances: d
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_owned))
            .collect(),
        backend_policies: d
            .backend_server_descriptions()
            .iter()
            .filter_map(|b| Some((u16::try_from(b.instance_port()?).ok()?, b.policy_names().to_vec())))
            .filter(|(_, p)| !p.is_empty())
            .collect(),
        policies: d
            .policies()
            .map(|p| p.other_policies().iter().cloned().collect())
            .unwrap_or_default(),
        attributes: None,
        tags: Tags::new(),
    }
}

fn attributes_to_sdk(a: &spec::Attributes) -> Result<LoadBalancerAttributes> {
    let mut log = AccessLog::builder().enabled(a.access_log_enabled);
    if a.access_log_enabled {
        log = log
            .set_emit_interval(a.access_log_emit_interval)
            .set_s3_bucket_name(a.access_log_bucket.clone())
            .set_s3_bucket_prefix(a.access_log_prefix.clone());
    }
    Ok(LoadBalancerAttributes::builder()
        .access_log(log.build())
        .connection_draining(
            ConnectionDraining::builder()
                .enabled(a.draining_enabled)
                .set_timeout(a.draining_timeout)
                .build(),
        )
        .connection_settings(
            ConnectionSettings::builder()
                .idle_timeout(a.idle_timeout)
                .build()
                .map_err(internal)?,
        )
        .cross_zone_load_balancing(CrossZoneLoadBalancing::builder().enabled(a.cross_zone).build())
        .build())
}

fn classic_tags(tags: &Tags) -> Result<Vec<Tag>> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build().map_err(internal))
        .collect()
}

impl AwsProvider {
    /// The Classic ELB named `name` with its tags, or `None`.
    pub(crate) async fn describe_classic(&self, name: &str) -> Result<Option<ClassicObserved>> {
        let described = match self
            .classic
            .describe_load_balancers()
            .load_balancer_names(name)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if matches!(code_of(&e), Some("LoadBalancerNotFound" | "AccessPointNotFound")) => {
                return Ok(None);
            }
            Err(e) => return Err(sdk_error("DescribeLoadBalancers", &e)),
        };
        let Some(mut observed) = described
            .load_balancer_descriptions()
            .first()
            .map(observed_from_sdk)
        else {
            return Ok(None);
        };
        observed.tags = self
            .classic_tags(&[name.to_owned()])
            .await?
            .remove(name)
            .unwrap_or_default();
        Ok(Some(observed))
    }

    /// The Classic ELBs named `names` with their tags, by name (`None`: no such ELB), in
    /// batches: one DescribeLoadBalancers and one DescribeTags per 20 names, a missing name
    /// answered as its own (see [`crate::reads`]).
    pub(crate) async fn describe_classic_many(
        &self,
        names: &[String],
    ) -> HashMap<String, Result<Option<ClassicObserved>>> {
        let mut described = describe_by_chunks(names, |chunk| async move {
            match self
                .classic
                .describe_load_balancers()
                .set_load_balancer_names(Some(chunk))
                .send()
                .await
            {
                Ok(out) => Described::Found(
                    out.load_balancer_descriptions()
                        .iter()
                        .map(|d| {
                            let o = observed_from_sdk(d);
                            (o.name.clone(), o)
                        })
                        .collect(),
                ),
                Err(e) if matches!(code_of(&e), Some("LoadBalancerNotFound" | "AccessPointNotFound")) => {
                    Described::NotFound
                }
                Err(e) => Described::Failed(sdk_error("DescribeLoadBalancers", &e)),
            }
        })
        .await;
        let found: Vec<String> = names
            .iter()
            .filter(|n| matches!(described.get(*n), Some(Ok(Some(_)))))
            .cloned()
            .collect();
        let mut tags = describe_by_chunks(&found, |chunk| async move {
            match self
                .classic
                .describe_tags()
                .set_load_balancer_names(Some(chunk))
                .send()
                .await
            {
                Ok(resp) => Described::Found(
                    resp.tag_descriptions()
                        .iter()
                        .filter_map(|d| {
                            let tags = d
                                .tags()
                                .iter()
                                .map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned()));
                            Some((d.load_balancer_name()?.to_owned(), tags.collect::<Tags>()))
                        })
                        .collect(),
                ),
                Err(e) if matches!(code_of(&e), Some("LoadBalancerNotFound" | "AccessPointNotFound")) => {
                    Described::NotFound
                }
                Err(e) => Described::Failed(sdk_error("DescribeTags", &e)),
            }
        })
        .await;
        for name in &found {
            if let Some(Ok(Some(observed))) = described.get_mut(name) {
                match tags.remove(name) {
                    Some(Ok(Some(t))) => observed.tags = t,
                    // Deleted between the two calls.
                    Some(Ok(None)) | None => {
                        described.insert(name.clone(), Ok(None));
                    }
                    Some(Err(e)) => {
                        described.insert(name.clone(), Err(e));
                    }
                }
            }
        }
        described
    }

    /// Tags of Classic ELBs by name.
    pub(crate) async fn classic_tags(&self, names: &[String]) -> Result<BTreeMap<String, Tags>> {
        let mut out = BTreeMap::new();
        for chunk in names.chunks(MAX_TAG_NAMES) {
            let resp = match self
                .classic
                .describe_tags()
                .set_load_balancer_names(Some(chunk.to_vec()))
                .send()
                .await
            {
                Ok(resp) => resp,
                // Deleted between the two calls.
                Err(e) if matches!(code_of(&e), Some("LoadBalancerNotFound" | "AccessPointNotFound")) => {
                    continue;
                }
                Err(e) => return Err(sdk_error("DescribeTags", &e)),
            };
            for d in resp.tag_descriptions() {
                if let Some(name) = d.load_balancer_name() {
                    let tags = d
                        .tags()
                        .iter()
                        .map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned()));
                    out.insert(name.to_owned(), tags.collect());
                }
            }
        }
        Ok(out)
    }

    /// The ELB's attributes.
    pub(crate) async fn classic_attributes(&self, name: &str) -> Result<ObservedAttributes> {
        let out = self
            .classic
            .describe_load_balancer_attributes()
            .load_balancer_name(name)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeLoadBalancerAttributes", &e))?;
        let Some(a) = out.load_balancer_attributes() else {
            return Ok(ObservedAttributes::aws_defaults());
        };
        let log = a.access_log();
        let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned);
        Ok(ObservedAttributes {
            access_log_enabled: log.is_some_and(|l| l.enabled()),
            access_log_emit_interval: log.and_then(|l| l.emit_interval()),
            access_log_bucket: non_empty(log.and_then(|l| l.s3_bucket_name())),
            access_log_prefix: non_empty(log.and_then(|l| l.s3_bucket_prefix())),
            draining_enabled: a.connection_draining().is_some_and(|d| d.enabled()),
            draining_timeout: a.connection_draining().and_then(|d| d.timeout()),
            idle_timeout: a.connection_settings().map(|c| c.idle_timeout()),
            cross_zone: a.cross_zone_load_balancing().is_some_and(|c| c.enabled()),
        })
    }

    /// Runs a plan's calls in order; returns the DNS name of a created ELB.
    pub(crate) async fn apply_classic(
        &self,
        w: &mut Writes,
        name: &str,
        actions: &[ClassicAction],
    ) -> Result<Option<String>> {
        let mut dns_name = None;
        for action in actions {
            let op = classic_op(action);
            if !self.before_write(w, op, name, || format!("{action:?}")).await? {
                continue;
            }
            let result = match action {
                ClassicAction::Create {
                    listeners,
                    subnets,
                    security_groups,
                    internal,
                    tags,
                } => {
                    let created = self
                        .classic
                        .create_load_balancer()
                        .load_balancer_name(name)
                        .set_listeners(Some(
                            listeners.iter().map(listener_to_sdk).collect::<Result<_>>()?,
                        ))
                        .set_subnets(Some(subnets.clone()))
                        .set_security_groups(Some(security_groups.clone()))
                        .set_scheme(internal.then(|| "internal".to_owned()))
                        .set_tags(Some(classic_tags(tags)?))
                        .send()
                        .await;
                    match created {
                        Ok(out) => {
                            dns_name = out.dns_name().map(str::to_owned);
                            Ok(())
                        }
                        Err(e) if code_of(&e) == Some("DuplicateLoadBalancerName") => {
                            return Err(ProviderError::RetryAfter {
                                after: BUSY_RETRY_AFTER,
                                message: format!(
                                    "load balancer {name} was created meanwhile; converging it shortly"
                                ),
                            });
                        }
                        Err(e) => Err(sdk_error(op, &e)),
                    }
                }
                ClassicAction::DetachSubnets(subnets) => self
                    .classic
                    .detach_load_balancer_from_subnets()
                    .load_balancer_name(name)
                    .set_subnets(Some(subnets.clone()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::AttachSubnets(subnets) => self
                    .classic
                    .attach_load_balancer_to_subnets()
                    .load_balancer_name(name)
                    .set_subnets(Some(subnets.clone()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::ApplySecurityGroups(groups) => self
                    .classic
                    .apply_security_groups_to_load_balancer()
                    .load_balancer_name(name)
                    .set_security_groups(Some(groups.clone()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::DeleteListeners(ports) => self
                    .classic
                    .delete_load_balancer_listeners()
                    .load_balancer_name(name)
                    .set_load_balancer_ports(Some(ports.iter().map(|p| i32::from(*p)).collect()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::CreateListeners(listeners) => self
                    .classic
                    .create_load_balancer_listeners()
                    .load_balancer_name(name)
                    .set_listeners(Some(
                        listeners.iter().map(listener_to_sdk).collect::<Result<_>>()?,
                    ))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::CreateProxyProtocolPolicy => {
                    self.create_classic_policy(
                        name,
                        PROXY_PROTOCOL_POLICY,
                        "ProxyProtocolPolicyType",
                        "ProxyProtocol",
                        "true",
                    )
                    .await
                }
                ClassicAction::CreateSslNegotiationPolicy {
                    name: policy,
                    reference,
                } => {
                    self.create_classic_policy(
                        name,
                        policy,
                        "SSLNegotiationPolicyType",
                        "Reference-Security-Policy",
                        reference,
                    )
                    .await
                }
                ClassicAction::SetBackendPolicies { port, policies } => self
                    .classic
                    .set_load_balancer_policies_for_backend_server()
                    .load_balancer_name(name)
                    .instance_port(i32::from(*port))
                    .set_policy_names(Some(policies.clone()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::SetListenerPolicies { port, policies } => self
                    .classic
                    .set_load_balancer_policies_of_listener()
                    .load_balancer_name(name)
                    .load_balancer_port(i32::from(*port))
                    .set_policy_names(Some(policies.clone()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::ConfigureHealthCheck(hc) => {
                    let check = SdkHealthCheck::builder()
                        .target(&hc.target)
                        .interval(hc.interval)
                        .timeout(hc.timeout)
                        .healthy_threshold(hc.healthy)
                        .unhealthy_threshold(hc.unhealthy)
                        .build()
                        .map_err(internal)?;
                    self.classic
                        .configure_health_check()
                        .load_balancer_name(name)
                        .health_check(check)
                        .send()
                        .await
                        .map(drop)
                        .map_err(|e| sdk_error(op, &e))
                }
                ClassicAction::ModifyAttributes(attributes) => self
                    .classic
                    .modify_load_balancer_attributes()
                    .load_balancer_name(name)
                    .load_balancer_attributes(attributes_to_sdk(attributes)?)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::AddTags(tags) => self
                    .classic
                    .add_tags()
                    .load_balancer_names(name)
                    .set_tags(Some(classic_tags(tags)?))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::Register(ids) => self
                    .classic
                    .register_instances_with_load_balancer()
                    .load_balancer_name(name)
                    .set_instances(Some(instances(ids)))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| sdk_error(op, &e)),
                ClassicAction::Deregister(ids) => match self
                    .classic
                    .deregister_instances_from_load_balancer()
                    .load_balancer_name(name)
                    .set_instances(Some(instances(ids)))
                    .send()
                    .await
                {
                    Ok(_) => Ok(()),
                    // Already gone (a terminated instance).
                    Err(e) if code_of(&e) == Some("InvalidInstance") => Ok(()),
                    Err(e) => Err(sdk_error(op, &e)),
                },
            };
            result?;
        }
        Ok(dns_name)
    }

    async fn create_classic_policy(
        &self,
        lb: &str,
        policy: &str,
        kind: &str,
        attribute: &str,
        value: &str,
    ) -> Result<()> {
        let result = self
            .classic
            .create_load_balancer_policy()
            .load_balancer_name(lb)
            .policy_name(policy)
            .policy_type_name(kind)
            .policy_attributes(
                PolicyAttribute::builder()
                    .attribute_name(attribute)
                    .attribute_value(value)
                    .build(),
            )
            .send()
            .await;
        done_or_already("CreateLoadBalancerPolicy", result, &["DuplicatePolicyName"])
    }

    /// Deletes the ELB (gone already: fine).
    pub(crate) async fn delete_classic(&self, w: &mut Writes, name: &str) -> Result<()> {
        if !self
            .before_write(w, "DeleteLoadBalancer", name, String::new)
            .await?
        {
            return Ok(());
        }
        let result = self
            .classic
            .delete_load_balancer()
            .load_balancer_name(name)
            .send()
            .await;
        done_or_already(
            "DeleteLoadBalancer",
            result,
            &["LoadBalancerNotFound", "AccessPointNotFound"],
        )
    }
}

fn instances(ids: &[String]) -> Vec<Instance> {
    ids.iter()
        .map(|id| Instance::builder().instance_id(id).build())
        .collect()
}

/// The API call an action makes.
fn classic_op(action: &ClassicAction) -> &'static str {
    match action {
        ClassicAction::Create { .. } => "CreateLoadBalancer",
        ClassicAction::DetachSubnets(_) => "DetachLoadBalancerFromSubnets",
        ClassicAction::AttachSubnets(_) => "AttachLoadBalancerToSubnets",
        ClassicAction::ApplySecurityGroups(_) => "ApplySecurityGroupsToLoadBalancer",
        ClassicAction::DeleteListeners(_) => "DeleteLoadBalancerListeners",
        ClassicAction::CreateListeners(_) => "CreateLoadBalancerListeners",
        ClassicAction::CreateProxyProtocolPolicy | ClassicAction::CreateSslNegotiationPolicy { .. } => {
            "CreateLoadBalancerPolicy"
        }
        ClassicAction::SetBackendPolicies { .. } => "SetLoadBalancerPoliciesForBackendServer",
        ClassicAction::SetListenerPolicies { .. } => "SetLoadBalancerPoliciesOfListener",
        ClassicAction::ConfigureHealthCheck(_) => "ConfigureHealthCheck",
        ClassicAction::ModifyAttributes(_) => "ModifyLoadBalancerAttributes",
        ClassicAction::AddTags(_) => "AddTags",
        ClassicAction::Register(_) => "RegisterInstancesWithLoadBalancer",
        ClassicAction::Deregister(_) => "DeregisterInstancesFromLoadBalancer",
    }
}

/// The security groups of an ELB in upstream's order for "which is the load balancer's group"
/// (`sortELBSecurityGroupList`): annotated `security-groups` first, then the others (the cluster's
/// before the rest), `extra-security-groups` last.
pub fn primary_group(
    groups: &[String],
    annotated: &[String],
    extra: &[String],
    cluster_tagged: &BTreeSet<String>,
) -> Option<String> {
    let rank = |g: &String| {
        let class = if let Some(i) = annotated.iter().position(|a| a == g) {
            i
        } else if let Some(j) = extra.iter().position(|e| e == g) {
            annotated.len() + 1 + j
        } else {
            annotated.len()
        };
        (class, !cluster_tagged.contains(g))
    };
    groups.iter().min_by_key(|g| rank(g)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_balancers_group_is_upstreams_first() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let tagged: BTreeSet<String> = ["sg-tagged".to_owned()].into();
        // Upstream's TestCloud_sortELBSecurityGroupList rows, by their first element.
        assert_eq!(
            primary_group(&s(&["sg-x", "sg-a"]), &s(&["sg-a"]), &[], &tagged).as_deref(),
            Some("sg-a")
        );
        assert_eq!(
            primary_group(&s(&["sg-e", "sg-own"]), &[], &s(&["sg-e"]), &tagged).as_deref(),
            Some("sg-own")
        );
        assert_eq!(
            primary_group(&s(&["sg-other", "sg-tagged"]), &[], &[], &tagged).as_deref(),
            Some("sg-tagged")
        );
        assert_eq!(primary_group(&[], &[], &[], &tagged), None);
    }

    #[test]
    fn certificates_count_only_on_tls_listeners() {
        let tcp = SdkListener::builder()
            .protocol("TCP")
            .load_balancer_port(80)
            .instance_protocol("TCP")
            .instance_port(30080)
            .ssl_certificate_id("None")
            .build()
            .unwrap();
        assert_eq!(listener_from_sdk(&tcp).certificate, None);
        let ssl = SdkListener::builder()
            .protocol("SSL")
            .load_balancer_port(443)
            .instance_port(30443)
            .ssl_certificate_id("arn:cert")
            .build()
            .unwrap();
        let l = listener_from_sdk(&ssl);
        assert_eq!(l.certificate.as_deref(), Some("arn:cert"));
        assert_eq!(l.instance_protocol, "SSL");
    }
}
