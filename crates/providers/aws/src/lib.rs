//! The AWS provider, a drop-in for cloud-provider-aws: EC2 instances, Classic ELBs (the default
//! type) and network load balancers with their security groups, and pod-CIDR routes in a VPC
//! route table, on the official AWS SDK for Rust.
//!
//! # Layout
//! Split by AWS service; each has a pure planner (what AWS has + what the Service asks → the
//! calls to make), table-tested, and a thin executor over the SDK.
//! - [`config`]: [`AwsConfig`], validated once, and the SDK configuration built from it;
//!   [`cloud_config`]: upstream's `--cloud-config` file read into it; [`sdk_overrides`]: its
//!   assumed role and per-service endpoints in the SDK clients.
//! - [`naming`], [`tags`]: provider IDs and upstream's names; the cluster's tags and ownership.
//! - [`errors`]: AWS error codes → [`provider::ProviderError`]; the retry classifier that leaves
//!   throttling to the gateway.
//! - [`instances`]: batched, definite instance lookups (EC2).
//! - [`annotations`], [`spec`]: the Service and its `aws-load-balancer-*` annotations, read as
//!   upstream reads them.
//! - [`subnets`]: upstream's subnet discovery, over a cached view of the VPC (EC2).
//! - [`security_groups`]: the load balancer's group and the nodes' rules (EC2).
//! - [`classic`]: Classic ELBs (Elastic Load Balancing).
//! - [`nlb`]: network load balancers (Elastic Load Balancing v2).
//! - [`load_balancers`]: the LoadBalancer capability over all of the above; [`converged`]: when a
//!   sync may skip the full read; [`writes`]: every write, counted and marked.
//! - [`routes`]: pod-CIDR routes in a VPC route table (EC2).
//! - [`zones`]: zone IDs and types, described once (EC2).
//! - [`gateway_args`]: the `--aws-*` flags and the provider's registration with the gateway.

pub mod annotations;
pub mod classic;
pub mod cloud_config;
pub mod coalesce;
pub mod config;
pub mod converged;
pub mod errors;
pub mod gateway_args;
pub mod instances;
pub mod load_balancers;
pub mod naming;
pub mod nlb;
pub mod reads;
pub mod routes;
pub mod sdk_overrides;
pub mod security_groups;
pub mod spec;
pub mod subnets;
pub mod tags;
mod writes;
pub mod zones;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use aws_config::SdkConfig;
use provider::{Instances, LoadBalancers, Provider, ProviderLimits, Routes};

pub use config::{AwsConfig, AwsSetupError};

use crate::errors::NeverRetryThrottling;

/// What the provider keeps between calls.
#[derive(Debug, Default)]
struct Caches {
    /// A VPC's subnets and route tables ([`subnets::NETWORK_TTL`]).
    network: Mutex<HashMap<String, (Instant, Arc<subnets::Network>)>>,
    /// Zone name → zone ID and type, for the process's life ([`zones`]).
    zones: Mutex<zones::ZoneCache>,
    /// Held while the zones are described, so concurrent callers make one call.
    zones_describing: tokio::sync::Mutex<()>,
    /// Instances described for load balancers ([`instances::INSTANCE_TTL`]).
    instances: Mutex<HashMap<String, (Instant, instances::InstanceView)>>,
    /// Held while missing instances are described, so that load balancers updated at once for
    /// the same joining nodes make one call, not one each.
    instances_describing: tokio::sync::Mutex<()>,
}

/// The AWS provider. Cheap to share: the SDK clients pool their connections.
pub struct AwsProvider {
    config: AwsConfig,
    region: String,
    ec2: aws_sdk_ec2::Client,
    elb: aws_sdk_elasticloadbalancingv2::Client,
    classic: aws_sdk_elasticloadbalancing::Client,
    caches: Caches,
    verified: converged::Verified,
    /// Load balancers whose members this process made or found as a request's nodes ask (the
    /// fingerprint does not cover them): an NLB's target health is read only when this does
    /// not know.
    members: converged::Verified,
    batched: Batched,
}

/// Concurrent syncs' reads of their own load balancer, merged (see [`coalesce`]).
struct Batched {
    classic_lbs: coalesce::Coalescer<classic::plan::ClassicObserved>,
    network_lbs: coalesce::Coalescer<nlb::NlbView>,
    target_groups: coalesce::Coalescer<nlb::NamedGroup>,
}

impl Default for Batched {
    fn default() -> Self {
        Self {
            classic_lbs: coalesce::Coalescer::new(reads::MAX_NAMES),
            network_lbs: coalesce::Coalescer::new(reads::MAX_NAMES),
            target_groups: coalesce::Coalescer::new(reads::MAX_NAMES),
        }
    }
}

impl std::fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsProvider")
            .field("region", &self.region)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AwsProvider {
    /// Builds the provider with credentials from the standard AWS chain. Makes no API call:
    /// a cloud that is unreachable at start-up shows in the first calls' errors.
    pub async fn new(config: AwsConfig) -> Result<Arc<Self>, AwsSetupError> {
        let sdk = config.sdk_loader()?.load().await;
        Self::with_sdk_config(config, &sdk)
    }

    /// Builds the provider on an already loaded SDK configuration, e.g. one from
    /// [`AwsConfig::sdk_loader`] with static credentials (tests) or a custom chain (embedding).
    pub fn with_sdk_config(config: AwsConfig, sdk: &SdkConfig) -> Result<Arc<Self>, AwsSetupError> {
        config.validate()?;
        let region = match sdk.region() {
            Some(r) if !r.as_ref().is_empty() => r.as_ref().to_owned(),
            _ => return Err(AwsSetupError::NoRegion),
        };
        if sdk.credentials_provider().is_none() {
            return Err(AwsSetupError::NoCredentials);
        }
        // cloud-config RoleARN: every client calls with the assumed role's credentials, got
        // with the chain's (upstream: STS in the provider's region, the same for all clients).
        let assumed = match &config.role_arn {
            Some(role) => Some(
                sdk_overrides::AssumeRole::new(sdk, &region, role, config.source_arn.as_deref())
                    .map_err(AwsSetupError::InvalidSetting)?
                    .shared(),
            ),
            None => None,
        };
        // cloud-config [ServiceOverride]: a fixed endpoint for a service in this region.
        let endpoint =
            |service| sdk_overrides::endpoint_resolver(&config.service_endpoints, service, &region);
        let mut ec2 = aws_sdk_ec2::config::Builder::from(sdk).retry_classifier(NeverRetryThrottling);
        let mut elb =
            aws_sdk_elasticloadbalancingv2::config::Builder::from(sdk).retry_classifier(NeverRetryThrottling);
        let mut classic =
            aws_sdk_elasticloadbalancing::config::Builder::from(sdk).retry_classifier(NeverRetryThrottling);
        if let Some(creds) = &assumed {
            ec2.set_credentials_provider(Some(creds.clone()));
            elb.set_credentials_provider(Some(creds.clone()));
            classic.set_credentials_provider(Some(creds.clone()));
        }
        if let Some(resolver) = endpoint(config::AwsService::Ec2) {
            ec2.set_endpoint_resolver(Some(resolver));
        }
        if let Some(resolver) = endpoint(config::AwsService::Elbv2) {
            elb.set_endpoint_resolver(Some(resolver));
        }
        if let Some(resolver) = endpoint(config::AwsService::Elb) {
            classic.set_endpoint_resolver(Some(resolver));
        }
        let (ec2, elb, classic) = (ec2.build(), elb.build(), classic.build());
        Ok(Arc::new(Self {
            verified: converged::Verified::new(config.verify_period),
            members: converged::Verified::new(config.verify_period),
            batched: Batched::default(),
            config,
            region,
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            elb: aws_sdk_elasticloadbalancingv2::Client::from_conf(elb),
            classic: aws_sdk_elasticloadbalancing::Client::from_conf(classic),
            caches: Caches::default(),
        }))
    }

    /// The region the provider works in.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The settings the provider runs with.
    pub fn config(&self) -> &AwsConfig {
        &self.config
    }
}

impl Provider for AwsProvider {
    fn name(&self) -> &str {
        naming::PROVIDER_NAME
    }

    fn limits(&self) -> ProviderLimits {
        ProviderLimits {
            max_instance_batch: self.config.max_instance_batch,
        }
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }

    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        Some(self)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }

    fn dry_run(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::config::Credentials;
    use provider::{NodeRef, ProviderError};

    use super::*;

    async fn provider(config: AwsConfig) -> Arc<AwsProvider> {
        let sdk = config
            .sdk_loader()
            .expect("valid settings")
            .credentials_provider(Credentials::new("a", "b", None, None, "test"))
            .load()
            .await;
        AwsProvider::with_sdk_config(config, &sdk).expect("provider")
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable_not_a_panic() {
        // HTTPS: builds the rustls (ring) connector, then fails to connect to the discard port.
        let p = provider(AwsConfig {
            region: "us-east-1".into(),
            endpoint_url: Some("https://127.0.0.1:9".into()),
            max_attempts: 1,
            ..AwsConfig::default()
        })
        .await;
        assert_eq!(p.name(), "aws");
        assert_eq!(p.limits().max_instance_batch, 500);
        assert!(p.instances().is_some() && p.load_balancers().is_some() && p.routes().is_some());
        let err = p
            .lookup_instances(&[NodeRef::new("n", "aws:///us-east-1a/i-0123456789abcdef0")])
            .await
            .unwrap_err();
        assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn invalid_settings_are_refused_at_setup() {
        let err = AwsProvider::new(AwsConfig {
            max_instance_batch: 0,
            ..AwsConfig::default()
        })
        .await
        .unwrap_err();
        assert!(matches!(err, AwsSetupError::InvalidSetting(_)), "{err}");
    }
}
