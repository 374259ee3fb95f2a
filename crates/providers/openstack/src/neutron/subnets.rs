//! Neutron's subnets (`/subnets`): the model and the calls.

use serde::Deserialize;

use crate::client::{ApiError, Client, Service, absent_ok, path_segment};

const MAX_PAGES: usize = 20;

/// A Neutron subnet, as far as the load balancers read it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Subnet {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its network.
    #[serde(default)]
    pub network_id: Option<String>,
    /// Its CIDR.
    #[serde(default)]
    pub cidr: Option<String>,
}

/// The subnets of `network_id`, narrowed by a Neutron tag filter (`tags`, `tags-any`,
/// `not-tags`, `not-tags-any`) when given, in Neutron's order (one call).
pub async fn of_network(
    client: &Client,
    network_id: &str,
    tag_filter: Option<(&'static str, String)>,
) -> Result<Vec<Subnet>, ApiError> {
    let mut query = vec![("network_id", network_id.to_owned())];
    query.extend(tag_filter);
    client
        .get(Service::Network, "/subnets")
        .query(&query)
        .send_paginated("subnets", MAX_PAGES)
        .await
}

/// The subnet `subnet_id`; `None` when Neutron does not have it.
pub async fn get(client: &Client, subnet_id: &str) -> Result<Option<Subnet>, ApiError> {
    let path = format!("/subnets/{}", path_segment(subnet_id));
    absent_ok(
        client
            .get(Service::Network, &path)
            .send_json_field("subnet")
            .await,
    )
}
