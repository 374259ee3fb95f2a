//! Neutron's security groups and their rules (`/security-groups`, `/security-group-rules`): the
//! models and the calls. Which rules a Service's group holds, and which ports carry it, is
//! decided in [`crate::load_balancers::security_groups::plan`].

use serde::Deserialize;
use serde_json::json;

use crate::client::{ApiError, Client, Service, absent_ok, path_segment};

const MAX_PAGES: usize = 20;

/// An ingress rule to create: one protocol and port from one remote prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRule {
    pub protocol: &'static str,
    pub ethertype: &'static str,
    pub remote_ip_prefix: String,
    pub port: u16,
}

impl NewRule {
    /// The body of the rule's create call in group `group_id`.
    pub fn body(&self, group_id: &str) -> serde_json::Value {
        json!({"security_group_rule": {
            "security_group_id": group_id,
            "direction": "ingress",
            "ethertype": self.ethertype,
            "protocol": self.protocol,
            "port_range_min": self.port,
            "port_range_max": self.port,
            "remote_ip_prefix": self.remote_ip_prefix,
        }})
    }
}

/// A rule the group holds, as Neutron lists it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Rule {
    pub id: String,
    pub direction: String,
    pub ethertype: String,
    pub protocol: Option<String>,
    pub port_range_min: Option<u16>,
    pub port_range_max: Option<u16>,
    pub remote_ip_prefix: Option<String>,
}

/// A security group, with its rules.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Group {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub security_group_rules: Vec<Rule>,
}

/// The group named `name`, with its rules (one call); more than one is an error naming them.
pub async fn find(client: &Client, name: &str) -> Result<Option<Group>, provider::ProviderError> {
    let found: Vec<Group> = client
        .get(Service::Network, "/security-groups")
        .query(&[("name", name)])
        .send_paginated("security_groups", MAX_PAGES)
        .await?;
    let mut found: Vec<Group> = found.into_iter().filter(|g| g.name == name).collect();
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(provider::ProviderError::InvalidArgument(format!(
            "{} security groups are named {name}: {}; delete all but one",
            found.len(),
            found.iter().map(|g| g.id.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Creates the group (Neutron adds its default egress rules).
pub async fn create(client: &Client, name: &str, description: &str) -> Result<Group, ApiError> {
    client
        .post(Service::Network, "/security-groups")
        .json(&json!({"security_group": {"name": name, "description": description}}))
        .send_json_field("security_group")
        .await
}

/// Creates a rule; a 409 (the rule exists) is success, as OCCM takes it.
pub async fn create_rule(client: &Client, group_id: &str, rule: &NewRule) -> Result<(), ApiError> {
    match client
        .post(Service::Network, "/security-group-rules")
        .json(&rule.body(group_id))
        .send_empty()
        .await
    {
        Err(e) if e.is_conflict() => Ok(()),
        other => other,
    }
}

/// Deletes a rule; a 404 is success.
pub async fn delete_rule(client: &Client, rule_id: &str) -> Result<(), ApiError> {
    let path = format!("/security-group-rules/{}", path_segment(rule_id));
    absent_ok(client.delete(Service::Network, &path).send_empty().await).map(drop)
}

/// Deletes the group; a 404 is success.
pub async fn delete(client: &Client, group_id: &str) -> Result<(), ApiError> {
    let path = format!("/security-groups/{}", path_segment(group_id));
    absent_ok(client.delete(Service::Network, &path).send_empty().await).map(drop)
}
