//! Neutron's routers (`/routers`): the model (extra routes, tags, revision) and the calls on
//! them. Which routes are whose is decided in [`crate::routes::plan`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::client::{ApiError, Client, Service, path_segment};

/// One extra route of a router, as Neutron lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExtraRoute {
    /// The destination CIDR.
    pub destination: String,
    /// The next hop: a node's address.
    pub nexthop: String,
}

impl ExtraRoute {
    /// A route of `destination` via `nexthop`.
    pub fn new(destination: impl Into<String>, nexthop: impl Into<String>) -> Self {
        Self {
            destination: destination.into(),
            nexthop: nexthop.into(),
        }
    }
}

/// What a router GET tells about routes: its extra routes, tags and revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Router {
    /// The router's ID.
    #[serde(default)]
    pub id: String,
    /// Its extra routes, in Neutron's order.
    #[serde(default)]
    pub routes: Vec<ExtraRoute>,
    /// Its tags (`standard-attr-tag`).
    #[serde(default)]
    pub tags: BTreeSet<String>,
    /// Its revision (`standard-attr-revisions`), for an `If-Match` write.
    #[serde(default)]
    pub revision_number: u64,
}

fn path(router_id: &str) -> String {
    format!("/routers/{router_id}")
}

fn tag_path(router_id: &str, tag: &str) -> String {
    format!("/routers/{router_id}/tags/{}", path_segment(tag))
}

/// The router `router_id`. (The ID goes into the path as configured.)
pub async fn get(client: &Client, router_id: &str) -> Result<Router, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        router: Router,
    }
    let body: Body = client.get(Service::Network, &path(router_id)).send_json().await?;
    Ok(body.router)
}

/// Adds `tag` to the router (Neutron answers 201 for a tag it has).
pub async fn add_tag(client: &Client, router_id: &str, tag: &str) -> Result<(), ApiError> {
    client
        .put(Service::Network, &tag_path(router_id, tag))
        .send_empty()
        .await
}

/// Removes `tag` from the router.
pub async fn remove_tag(client: &Client, router_id: &str, tag: &str) -> Result<(), ApiError> {
    client
        .delete(Service::Network, &tag_path(router_id, tag))
        .send_empty()
        .await
}

/// The body of a route write: `routes` as the router's (whole or atomic) route list.
pub fn routes_body(routes: &[ExtraRoute]) -> Value {
    json!({"router": {"routes": routes}})
}

/// `add_extraroutes` (`add`) or `remove_extraroutes` with `body` ([`routes_body`]), both
/// idempotent in Neutron (`extraroute-atomic`).
pub async fn edit_extraroutes(
    client: &Client,
    router_id: &str,
    add: bool,
    body: &Value,
) -> Result<(), ApiError> {
    let call = if add {
        "add_extraroutes"
    } else {
        "remove_extraroutes"
    };
    client
        .put(Service::Network, &format!("{}/{call}", path(router_id)))
        .json(body)
        .send_empty()
        .await
}

/// Writes the router's whole route list (`body`, [`routes_body`]), with `If-Match` on
/// `revision` when given.
pub async fn set_routes(
    client: &Client,
    router_id: &str,
    body: &Value,
    revision: Option<u64>,
) -> Result<(), ApiError> {
    let mut request = client.put(Service::Network, &path(router_id)).json(body);
    if let Some(revision) = revision {
        request = request.header("If-Match", &format!("revision_number={revision}"));
    }
    request.send_empty().await
}
