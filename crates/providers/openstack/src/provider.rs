//! [`OpenStackProvider`]: what the gateway serves for `--provider openstack`, built from OCCM's
//! `cloud.conf` as OCCM builds its cloud: authenticated at once (a bad credential stops the
//! gateway at start), InstancesV2 always, Routes when `[Route] router-id` is set and Neutron has
//! extra routes, LoadBalancers on Octavia unless `[LoadBalancer] enabled = false` or the catalog
//! has no load-balancer endpoint.

use std::sync::Arc;

use provider::{Instances, LoadBalancers, Provider, ProviderLimits, Routes};

use crate::{
    client::{ApiError, Client},
    cloud_config::OpenStackConfig,
    instances::{IDS_PER_CALL, OpenStackInstances},
    load_balancers::OpenStackLoadBalancers,
    nodes::{AddressOptions, ProviderIdScheme, provider_id::PROVIDER_NAME},
    routes::OpenStackRoutes,
};

/// Why the provider cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Keystone refused us, or an endpoint is missing from the catalog.
    #[error("cannot reach OpenStack: {0}")]
    Connect(#[from] ApiError),
    /// `[Route] router-id` is set but the router or Neutron cannot serve routes.
    #[error("cannot serve routes on router {router}: {reason}")]
    Routes {
        /// The router.
        router: String,
        /// Why.
        reason: provider::ProviderError,
    },
    /// `[LoadBalancer]` asks for what this provider does not implement, or Octavia failed.
    #[error("cannot serve load balancers: {0}")]
    LoadBalancers(provider::ProviderError),
}

/// The OpenStack cloud behind the gateway.
pub struct OpenStackProvider {
    client: Client,
    instances: OpenStackInstances,
    routes: Option<OpenStackRoutes>,
    load_balancers: Option<OpenStackLoadBalancers>,
}

impl OpenStackProvider {
    /// Authenticates with `config`'s credentials and sets up what it asks for.
    ///
    /// # Errors
    /// A credential Keystone refuses, a region or interface without endpoints, a router that
    /// does not exist or a Neutron without extra routes or router tags.
    pub async fn connect(config: &OpenStackConfig) -> Result<Arc<Self>, SetupError> {
        let client = Client::connect(&config.credentials).await?;
        let scheme = ProviderIdScheme {
            region: config.credentials.region.clone(),
            regional: config.regional,
        };
        let addresses = AddressOptions {
            ipv6_support_disabled: config.networking.ipv6_support_disabled,
            public_network_names: config.networking.public_network_names.clone(),
            internal_network_names: config.networking.internal_network_names.clone(),
            address_sort_order: config.networking.address_sort_order.clone(),
        };
        let routes = match &config.route.router_id {
            Some(router) if !router.is_empty() => Some(
                OpenStackRoutes::discover(client.clone(), router.clone(), scheme.clone())
                    .await
                    .map_err(|reason| SetupError::Routes {
                        router: router.clone(),
                        reason,
                    })?,
            ),
            _ => None,
        };
        let load_balancers = if config.load_balancer.enabled {
            OpenStackLoadBalancers::discover(client.clone(), config.load_balancer.clone(), scheme.clone())
                .await
                .map_err(SetupError::LoadBalancers)?
        } else {
            None
        };
        tracing::info!(
            region = %scheme.region,
            regional = scheme.regional,
            routes = routes.is_some(),
            load_balancers = ?load_balancers.as_ref().map(|l| l.version()),
            "OpenStack provider ready"
        );
        Ok(Arc::new(Self {
            instances: OpenStackInstances::new(client.clone(), scheme, addresses),
            client,
            routes,
            load_balancers,
        }))
    }

    /// The client, for its call counts.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Provider for OpenStackProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn limits(&self) -> ProviderLimits {
        ProviderLimits {
            max_instance_batch: IDS_PER_CALL,
        }
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(&self.instances)
    }

    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        self.load_balancers.as_ref().map(|l| l as &dyn LoadBalancers)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.routes.as_ref().map(|r| r as &dyn Routes)
    }

    /// Every write (the routes') asks [`provider::dry_run::intercept`] first.
    fn dry_run(&self) -> bool {
        true
    }
}
