//! Neutron's networks (`/networks`): the model and the calls.

use serde::Deserialize;
use serde_json::Value;

use crate::{
    client::{ApiError, Client, Service},
    lenient::{ModelError, lenient, lenient_vec, page},
};

/// Most pages of a network or subnet listing.
const MAX_PAGES: usize = 50;
/// Most pages of the external network's detection.
const DETECT_MAX_PAGES: usize = 20;

/// A Neutron network.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Network {
    /// Network UUID.
    #[serde(deserialize_with = "lenient")]
    pub id: String,
    /// Network name; what `public-network-name` and `internal-network-name` refer to.
    #[serde(deserialize_with = "lenient")]
    pub name: String,
}

/// One page of `GET /v2.0/networks`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct NetworkPage {
    /// The networks on this page.
    #[serde(deserialize_with = "lenient_vec")]
    pub networks: Vec<Network>,
}

impl NetworkPage {
    /// Reads `GET /v2.0/networks`.
    ///
    /// # Errors
    /// [`ModelError`] when the body has no `networks` array.
    pub fn from_body(body: &[u8]) -> Result<Self, ModelError> {
        page(body, "networks")
    }
}

/// The networks `query` selects (`id=…`, repeated for an OR), every page.
pub async fn list(client: &Client, query: &[(&str, &str)]) -> provider::Result<Vec<Network>> {
    crate::lenient::list(
        client,
        Service::Network,
        "/networks",
        query,
        "networks",
        MAX_PAGES,
    )
    .await
}

/// OCCM's `GetFloatingNetworkID`: the first external network (`router:external`) with an IPv4
/// subnet, or `None`.
pub async fn detect_external(client: &Client) -> Result<Option<String>, ApiError> {
    /// Only the ID, which an external network must have.
    #[derive(Deserialize)]
    struct Id {
        id: String,
    }
    let networks: Vec<Id> = client
        .get(Service::Network, "/networks")
        .query(&[("router:external", "true")])
        .send_paginated("networks", DETECT_MAX_PAGES)
        .await?;
    for network in networks {
        let subnets: Vec<Value> = client
            .get(Service::Network, "/subnets")
            .query(&[("network_id", network.id.as_str()), ("ip_version", "4")])
            .send_paginated("subnets", DETECT_MAX_PAGES)
            .await?;
        if !subnets.is_empty() {
            return Ok(Some(network.id));
        }
    }
    Ok(None)
}
