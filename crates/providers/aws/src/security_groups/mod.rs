//! Security groups: the EC2 calls around [`rules`]. Reads are always scoped (by ID, by name in
//! the VPC, by reference, by the cluster tag in the VPC), never the whole region as upstream's
//! `getTaggedSecurityGroups` reads it on every sync.

pub mod rules;

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{
    Filter, IpPermission, IpRange, Ipv6Range, PrefixListId, ResourceType, SecurityGroup, Tag,
    TagSpecification, UserIdGroupPair,
};
use provider::{ProviderError, Result};

use self::rules::{DescribedRule, GroupView, Rule, RuleChanges, Source};
use crate::{
    AwsProvider,
    errors::{BUSY_RETRY_AFTER, code_of, sdk_error},
    tags::{Tags, from_pairs},
    writes::Writes,
};

/// A group's ingress, one rule per source (EC2 groups several sources under one permission).
fn ungroup(permissions: &[IpPermission]) -> Vec<DescribedRule> {
    let mut out = Vec::new();
    for p in permissions {
        let protocol = p.ip_protocol().unwrap_or("-1");
        let rule = |source: Source| Rule::normalized(protocol, p.from_port(), p.to_port(), source);
        for r in p.ip_ranges() {
            if let Some(c) = r.cidr_ip() {
                out.push(DescribedRule::new(
                    rule(Source::Ipv4(c.to_owned())),
                    r.description().unwrap_or_default(),
                ));
            }
        }
        for r in p.ipv6_ranges() {
            if let Some(c) = r.cidr_ipv6() {
                out.push(DescribedRule::new(
                    rule(Source::Ipv6(c.to_owned())),
                    r.description().unwrap_or_default(),
                ));
            }
        }
        for g in p.user_id_group_pairs() {
            if let Some(id) = g.group_id() {
                out.push(DescribedRule::new(
                    rule(Source::Group(id.to_owned())),
                    g.description().unwrap_or_default(),
                ));
            }
        }
        for l in p.prefix_list_ids() {
            if let Some(id) = l.prefix_list_id() {
                out.push(DescribedRule::new(
                    rule(Source::PrefixList(id.to_owned())),
                    l.description().unwrap_or_default(),
                ));
            }
        }
    }
    out
}

/// A group as the planners see it.
pub fn view(g: &SecurityGroup) -> GroupView {
    GroupView {
        id: g.group_id().unwrap_or_default().to_owned(),
        name: g.group_name().unwrap_or_default().to_owned(),
        vpc_id: g.vpc_id().unwrap_or_default().to_owned(),
        tags: from_pairs(g.tags().iter().map(|t| (t.key(), t.value()))),
        ingress: ungroup(g.ip_permissions()),
    }
}

/// One permission per rule (never grouped: revoking part of a grouped rule is ambiguous).
fn permission(r: &DescribedRule) -> IpPermission {
    let mut p = IpPermission::builder().ip_protocol(&r.rule.protocol);
    if r.rule.protocol != "-1" {
        p = p.from_port(r.rule.from_port).to_port(r.rule.to_port);
    }
    let description = (!r.description.is_empty()).then(|| r.description.clone());
    match &r.rule.source {
        Source::Ipv4(c) => p.ip_ranges(IpRange::builder().cidr_ip(c).set_description(description).build()),
        Source::Ipv6(c) => p.ipv6_ranges(
            Ipv6Range::builder()
                .cidr_ipv6(c)
                .set_description(description)
                .build(),
        ),
        Source::Group(g) => p.user_id_group_pairs(
            UserIdGroupPair::builder()
                .group_id(g)
                .set_description(description)
                .build(),
        ),
        Source::PrefixList(l) => p.prefix_list_ids(
            PrefixListId::builder()
                .prefix_list_id(l)
                .set_description(description)
                .build(),
        ),
    }
    .build()
}

fn ec2_tags(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

impl AwsProvider {
    /// Groups matching `filters`, all pages.
    pub(crate) async fn groups_where(&self, filters: Vec<Filter>) -> Result<Vec<GroupView>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let resp = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters.clone()))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error("DescribeSecurityGroups", &e))?;
            out.extend(resp.security_groups().iter().map(view));
            token = resp.next_token().filter(|t| !t.is_empty()).map(str::to_owned);
            if token.is_none() {
                return Ok(out);
            }
        }
    }

    /// Groups by ID (those that do not exist are left out).
    pub(crate) async fn groups_by_id(&self, ids: &BTreeSet<String>) -> Result<Vec<GroupView>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The group-id filter, unlike GroupIds, answers only the existing groups.
        self.groups_where(vec![
            Filter::builder()
                .name("group-id")
                .set_values(Some(ids.iter().cloned().collect()))
                .build(),
        ])
        .await
    }

    /// The group named `name` in `vpc`.
    pub(crate) async fn group_named(&self, name: &str, vpc: &str) -> Result<Option<GroupView>> {
        let mut found = self
            .groups_where(vec![
                Filter::builder().name("group-name").values(name).build(),
                Filter::builder().name("vpc-id").values(vpc).build(),
            ])
            .await?;
        Ok(if found.is_empty() {
            None
        } else {
            Some(found.remove(0))
        })
    }

    /// Groups with a rule whose source is group `source` (in `vpc`).
    pub(crate) async fn groups_referencing(&self, source: &str, vpc: &str) -> Result<Vec<GroupView>> {
        self.groups_where(vec![
            Filter::builder()
                .name("ip-permission.group-id")
                .values(source)
                .build(),
            Filter::builder().name("vpc-id").values(vpc).build(),
        ])
        .await
    }

    /// Creates a group; an existing one of that name (a race, or an interrupted earlier try) is
    /// returned instead.
    pub(crate) async fn create_group(
        &self,
        w: &mut Writes,
        name: &str,
        description: &str,
        vpc: &str,
        tags: &Tags,
    ) -> Result<GroupView> {
        let request = || format!("{name} in {vpc}: {description} {tags:?}");
        if !self.before_write(w, "CreateSecurityGroup", name, request).await? {
            return Ok(GroupView {
                id: format!("(new security group {name})"),
                name: name.to_owned(),
                vpc_id: vpc.to_owned(),
                tags: tags.clone(),
                ingress: Vec::new(),
            });
        }
        let created = self
            .ec2
            .create_security_group()
            .group_name(name)
            .description(description)
            .vpc_id(vpc)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::SecurityGroup)
                    .set_tags(Some(ec2_tags(tags)))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(out) => Ok(GroupView {
                id: out.group_id().unwrap_or_default().to_owned(),
                name: name.to_owned(),
                vpc_id: vpc.to_owned(),
                tags: tags.clone(),
                ingress: Vec::new(),
            }),
            Err(e) if code_of(&e) == Some("InvalidGroup.Duplicate") => self
                .group_named(name, vpc)
                .await?
                .ok_or_else(|| ProviderError::RetryAfter {
                    after: BUSY_RETRY_AFTER,
                    message: format!("security group {name} is being created or deleted"),
                }),
            Err(e) => Err(sdk_error("CreateSecurityGroup", &e)),
        }
    }

    /// Adds tags to a group.
    pub(crate) async fn tag_group(&self, w: &mut Writes, id: &str, tags: &Tags) -> Result<()> {
        if !self
            .before_write(w, "CreateTags", id, || format!("{tags:?}"))
            .await?
        {
            return Ok(());
        }
        self.ec2
            .create_tags()
            .resources(id)
            .set_tags(Some(ec2_tags(tags)))
            .send()
            .await
            .map_err(|e| sdk_error("CreateTags", &e))?;
        Ok(())
    }

    /// Applies rule changes to a group: revocations first, as upstream.
    pub(crate) async fn change_rules(
        &self,
        w: &mut Writes,
        group: &str,
        changes: &RuleChanges,
    ) -> Result<()> {
        if !changes.revoke.is_empty()
            && self
                .before_write(w, "RevokeSecurityGroupIngress", group, || {
                    format!("{:?}", changes.revoke)
                })
                .await?
        {
            match self.revoke(group, &changes.revoke).await {
                Ok(()) => {}
                // One rule already gone fails the whole call: revoke them one by one.
                Err((code, _)) if code == "InvalidPermission.NotFound" => {
                    for rule in &changes.revoke {
                        match self.revoke(group, std::slice::from_ref(rule)).await {
                            Ok(()) => {}
                            Err((code, _)) if code == "InvalidPermission.NotFound" => {}
                            Err((_, e)) => return Err(e),
                        }
                    }
                }
                Err((code, _)) if code == "InvalidGroup.NotFound" => {}
                Err((_, e)) => return Err(e),
            }
        }
        if !changes.authorize.is_empty()
            && self
                .before_write(w, "AuthorizeSecurityGroupIngress", group, || {
                    format!("{:?}", changes.authorize)
                })
                .await?
        {
            match self
                .ec2
                .authorize_security_group_ingress()
                .group_id(group)
                .set_ip_permissions(Some(changes.authorize.iter().map(permission).collect()))
                .send()
                .await
            {
                Ok(_) => {}
                // Already there (a concurrent sync): what was wanted.
                Err(e) if code_of(&e) == Some("InvalidPermission.Duplicate") => {}
                Err(e) => return Err(sdk_error("AuthorizeSecurityGroupIngress", &e)),
            }
        }
        if !changes.relabel.is_empty()
            && self
                .before_write(w, "UpdateSecurityGroupRuleDescriptionsIngress", group, || {
                    format!("{:?}", changes.relabel)
                })
                .await?
        {
            self.ec2
                .update_security_group_rule_descriptions_ingress()
                .group_id(group)
                .set_ip_permissions(Some(changes.relabel.iter().map(permission).collect()))
                .send()
                .await
                .map_err(|e| sdk_error("UpdateSecurityGroupRuleDescriptionsIngress", &e))?;
        }
        Ok(())
    }

    /// Revokes rules; on failure, the error code with the typed error.
    async fn revoke(
        &self,
        group: &str,
        rules: &[DescribedRule],
    ) -> std::result::Result<(), (String, ProviderError)> {
        self.ec2
            .revoke_security_group_ingress()
            .group_id(group)
            .set_ip_permissions(Some(rules.iter().map(permission).collect()))
            .send()
            .await
            .map(drop)
            .map_err(|e| {
                (
                    code_of(&e).unwrap_or_default().to_owned(),
                    sdk_error("RevokeSecurityGroupIngress", &e),
                )
            })
    }

    /// Deletes a group. Still in use (a load balancer being deleted holds it for a while):
    /// `RetryAfter`, so the Service keeps its finalizer and the deletion is tried again on the
    /// next sync, instead of a worker blocked for up to 10 minutes as upstream's is.
    pub(crate) async fn delete_group(&self, w: &mut Writes, id: &str) -> Result<()> {
        if !self
            .before_write(w, "DeleteSecurityGroup", id, String::new)
            .await?
        {
            return Ok(());
        }
        match self.ec2.delete_security_group().group_id(id).send().await {
            Ok(_) => Ok(()),
            Err(e) if code_of(&e) == Some("InvalidGroup.NotFound") => Ok(()),
            Err(e) if code_of(&e) == Some("DependencyViolation") => Err(ProviderError::RetryAfter {
                after: BUSY_RETRY_AFTER,
                message: format!("security group {id} is still in use; deleting it again shortly"),
            }),
            Err(e) => Err(sdk_error("DeleteSecurityGroup", &e)),
        }
    }
}
