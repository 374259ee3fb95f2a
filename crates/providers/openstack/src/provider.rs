//! [`OpenStackProvider`]: what the gateway serves for `--provider openstack`, built from OCCM's
//! `cloud.conf` as OCCM builds its cloud: authenticated at once (a bad credential, or a catalog
//! without Nova, stops the gateway at start: it could serve nothing), InstancesV2 always, Routes
//! when `[Route] router-id` is set and Neutron has extra routes, LoadBalancers on Octavia unless
//! `[LoadBalancer] enabled = false` or the catalog has no load-balancer endpoint.
//!
//! A setting or a cloud that stops one capability switches that capability off alone, with its
//! reason ([`Provider::switched_off`]): a router Neutron does not know or cannot tag, a
//! `[LoadBalancer]` setting this provider does not implement. A transient failure while setting
//! a capability up (Neutron or Octavia unreachable, throttled) still stops the start: the
//! restart is the retry, where switching the capability off would last until the next restart.

use std::sync::Arc;

use provider::{
    Capability, Instances, LoadBalancers, Provider, ProviderError, ProviderLimits, Routes, SwitchedOff,
};

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
    /// Neutron failed, for now, while the routes of `router` were set up.
    #[error("cannot set up routes on router {router}: {reason}")]
    Routes {
        /// The router.
        router: String,
        /// Why.
        reason: ProviderError,
    },
    /// Octavia failed, for now, while load balancers were set up.
    #[error("cannot set up load balancers: {0}")]
    LoadBalancers(ProviderError),
}

/// A capability's set-up failure: switches it off with the error as its reason, unless the
/// failure is transient (the cloud unreachable or throttling us), which stops the start.
fn switch_off(error: ProviderError) -> Result<String, ProviderError> {
    match error {
        ProviderError::Unavailable(_) | ProviderError::Throttled { .. } => Err(error),
        ProviderError::NotImplemented(m)
        | ProviderError::InvalidArgument(m)
        | ProviderError::Internal(m)
        | ProviderError::InstanceNotFound(m)
        | ProviderError::ImplementedElsewhere(m)
        | ProviderError::QuotaExceeded(m)
        | ProviderError::RetryAfter { message: m, .. } => Ok(m),
    }
}

/// The OpenStack cloud behind the gateway.
pub struct OpenStackProvider {
    client: Client,
    instances: OpenStackInstances,
    routes: Option<OpenStackRoutes>,
    load_balancers: Option<OpenStackLoadBalancers>,
    /// The capabilities switched off, with why.
    switched_off: SwitchedOff,
}

impl OpenStackProvider {
    /// Authenticates with `config`'s credentials and sets up what it asks for; a capability
    /// that cannot be served is switched off with its reason.
    ///
    /// # Errors
    /// A credential Keystone refuses, a region or interface without endpoints (no Nova: nothing
    /// could be served), or Neutron or Octavia failing transiently while being set up.
    pub async fn connect(config: &OpenStackConfig) -> Result<Arc<Self>, SetupError> {
        let client = Client::connect(&config.credentials).await?;
        // The region the client settled on: the file's, or the catalog's only one.
        let region = client.credentials().region.clone();
        if config.credentials.region.is_empty() {
            tracing::warn!(
                region = %region,
                "[Global] region is not set: using the only region of the Keystone catalog, {region:?} (set it in cloud.conf to silence this)"
            );
        }
        let scheme = ProviderIdScheme {
            region,
            regional: config.regional,
        };
        let addresses = AddressOptions {
            ipv6_support_disabled: config.networking.ipv6_support_disabled,
            public_network_names: config.networking.public_network_names.clone(),
            internal_network_names: config.networking.internal_network_names.clone(),
            address_sort_order: config.networking.address_sort_order.clone(),
        };
        // What the file's settings switched off already (e.g. `lb-version`).
        let mut switched_off = config.switched_off.clone();
        let routes = match &config.route.router_id {
            Some(router) if !router.is_empty() => {
                match OpenStackRoutes::discover(client.clone(), router.clone(), scheme.clone()).await {
                    Ok(routes) => Some(routes),
                    Err(e) => {
                        let reason = switch_off(e).map_err(|reason| SetupError::Routes {
                            router: router.clone(),
                            reason,
                        })?;
                        switched_off.insert(
                            Capability::Routes,
                            format!("[Route] router-id {router}: {reason}"),
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        let load_balancers =
            if config.load_balancer.enabled && !switched_off.contains_key(&Capability::LoadBalancers) {
                match OpenStackLoadBalancers::discover(
                    client.clone(),
                    config.load_balancer.clone(),
                    scheme.clone(),
                )
                .await
                {
                    Ok(lbs) => lbs,
                    Err(e) => {
                        let reason = switch_off(e).map_err(SetupError::LoadBalancers)?;
                        switched_off.insert(Capability::LoadBalancers, reason);
                        None
                    }
                }
            } else {
                None
            };
        tracing::info!(
            region = %scheme.region,
            regional = scheme.regional,
            routes = routes.is_some(),
            load_balancers = ?load_balancers.as_ref().map(|l| l.version()),
            switched_off = switched_off.len(),
            "OpenStack provider ready"
        );
        Ok(Arc::new(Self {
            instances: OpenStackInstances::new(client.clone(), scheme, addresses),
            client,
            routes,
            load_balancers,
            switched_off,
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

    fn switched_off(&self) -> SwitchedOff {
        self.switched_off.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A setting or a missing cloud feature switches the capability off; a cloud that fails
    /// for now stops the start (a restart retries it).
    #[test]
    fn what_a_set_up_failure_does() {
        for (error, off) in [
            (ProviderError::NotImplemented("no tags".into()), Some("no tags")),
            (
                ProviderError::InvalidArgument("no router".into()),
                Some("no router"),
            ),
            (ProviderError::Internal("odd answer".into()), Some("odd answer")),
            (ProviderError::Unavailable("503".into()), None),
            (
                ProviderError::Throttled {
                    retry_after: Some(Duration::from_secs(1)),
                    message: "429".into(),
                },
                None,
            ),
        ] {
            assert_eq!(switch_off(error.clone()).ok().as_deref(), off, "{error:?}");
        }
    }
}
