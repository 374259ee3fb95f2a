//! Neutron's v2.0 API as this provider calls it, one module per resource: its model (what
//! Neutron answers, read as [`crate::lenient`] says) and its calls. No decisions here: the
//! capabilities ([`crate::instances`], [`crate::routes`], [`crate::load_balancers`]) decide and
//! call these for their I/O.

pub mod floating_ips;
pub mod networks;
pub mod ports;
pub mod routers;
pub mod security_groups;
pub mod subnets;

use serde::Deserialize;

use crate::client::{ApiError, Client, Service};

/// The aliases of Neutron's extensions (`GET /extensions`): what the cloud offers.
pub async fn extension_aliases(client: &Client) -> Result<Vec<String>, ApiError> {
    #[derive(Deserialize)]
    struct Body {
        extensions: Vec<Extension>,
    }
    #[derive(Deserialize)]
    struct Extension {
        alias: String,
    }
    let body: Body = client.get(Service::Network, "/extensions").send_json().await?;
    Ok(body.extensions.into_iter().map(|e| e.alias).collect())
}
