//! The provider's settings and how they become SDK clients.

use std::time::Duration;

use aws_config::{BehaviorVersion, ConfigLoader, Region, retry::RetryConfig, timeout::TimeoutConfig};
use aws_smithy_http_client::{
    Builder as HttpClientBuilder,
    tls::{Provider as TlsProvider, rustls_provider::CryptoMode},
};

/// Most instance IDs one DescribeInstances call carries (as cloud-provider-aws batches).
pub const DEFAULT_MAX_INSTANCE_BATCH: usize = 500;
/// Upper bound of [`AwsConfig::max_instance_batch`]: AWS accepts up to 1000 IDs.
pub const MAX_INSTANCE_BATCH_LIMIT: usize = 1000;
/// Default of [`AwsConfig::verify_period`].
pub const DEFAULT_VERIFY_PERIOD: Duration = Duration::from_secs(600);
/// SDK attempts per API call (1 = no SDK retry). Throttling is never retried by the SDK.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// How Classic ELBs and NLBs check `externalTrafficPolicy: Cluster` Services (cloud-config
/// `ClusterServiceLoadBalancerHealthProbeMode`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HealthProbe {
    /// The traffic port (upstream's default, `ServiceNodePort`).
    #[default]
    ServiceNodePort,
    /// kube-proxy's health endpoint on every node (`Shared`): HTTP on `port` at `path`.
    Shared {
        /// Default 10256.
        port: u16,
        /// Default `/healthz`.
        path: String,
    },
}

/// An IP family of node addresses (cloud-config `NodeIPFamilies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    /// `ipv4`: the instance's private and public IPv4 addresses and DNS names.
    V4,
    /// `ipv6`: the IPv6 addresses of the instance's network interfaces.
    V6,
}

/// Load-balancer settings cloud-provider-aws takes from its cloud config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LbSettings {
    /// `ElbSecurityGroup`: one security group every Classic ELB uses instead of its own
    /// `k8s-elb-*` group. Never modified and never deleted.
    pub elb_security_group: Option<String>,
    /// `DisableSecurityGroupIngress`: leave the nodes' security groups alone.
    pub disable_security_group_ingress: bool,
    /// `ClusterServiceLoadBalancerHealthProbeMode` and its port and path.
    pub health_probe: HealthProbe,
}

/// Settings of the AWS provider. Credentials are not among them: they come from the standard AWS
/// chain (environment, shared config/SSO, web identity/IRSA, ECS/EKS Pod Identity, IMDS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsConfig {
    /// AWS region, e.g. `eu-west-1`. Empty: the region of the standard chain (`AWS_REGION`,
    /// profile, IMDS).
    pub region: String,
    /// Endpoint URL for every service (moto in tests, an AWS-compatible cloud); `None`: AWS's own.
    pub endpoint_url: Option<String>,
    /// The VPC route table for pod-CIDR routes. `None`: the one route table tagged
    /// `kubernetes.io/cluster/<cluster>` (as cloud-provider-aws). Either way the table must carry
    /// that tag, or routes are refused.
    pub route_table_id: Option<String>,
    /// The cluster's VPC: where load balancers, their subnets and security groups live. `None`:
    /// the VPC of the Service's backend instances (cloud-provider-aws takes its own instance's).
    pub vpc_id: Option<String>,
    /// Subnets for load balancers when discovery finds none in the VPC (cloud-provider-aws falls
    /// back to its own instance's subnet, or `SubnetID` of its cloud config).
    pub subnet_ids: Vec<String>,
    /// Most instance IDs per DescribeInstances call; default 500.
    pub max_instance_batch: usize,
    /// SDK attempts per API call for network errors and 5xx; default 3. Throttling is never
    /// retried inside the provider: it goes back to the gateway.
    pub max_attempts: u32,
    /// Bound of one API call, retries included; default 30s.
    pub operation_timeout: Duration,
    /// Load-balancer settings of upstream's cloud config.
    pub load_balancers: LbSettings,
    /// The cluster ID of the tags (`kubernetes.io/cluster/<id>`, legacy `KubernetesCluster=<id>`):
    /// cloud-config `KubernetesClusterID`/`KubernetesClusterTag`. `None`: the cluster name
    /// each request carries (the controllers' `--cluster-name`).
    pub cluster_id: Option<String>,
    /// Also write the legacy `KubernetesCluster=<id>` tag (cloud-config `KubernetesClusterTag`).
    /// Resources carrying only the legacy tag are the cluster's either way.
    pub legacy_cluster_tag: bool,
    /// Address families of node addresses, in order (cloud-config `NodeIPFamilies`); default
    /// IPv4 only.
    pub node_ip_families: Vec<IpFamily>,
    /// How long a load balancer found as its Service asks stays trusted: syncs of the unchanged
    /// Service within it read only the load balancer and its tags; after it, one full read
    /// repairs what was changed behind the provider's back. Default 10 minutes.
    pub verify_period: Duration,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            region: String::new(),
            endpoint_url: None,
            route_table_id: None,
            vpc_id: None,
            subnet_ids: Vec::new(),
            max_instance_batch: DEFAULT_MAX_INSTANCE_BATCH,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            operation_timeout: Duration::from_secs(30),
            load_balancers: LbSettings::default(),
            cluster_id: None,
            legacy_cluster_tag: false,
            node_ip_families: vec![IpFamily::V4],
            verify_period: DEFAULT_VERIFY_PERIOD,
        }
    }
}

/// Why the provider could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsSetupError {
    /// A setting is invalid; the message names it.
    #[error("invalid AWS provider setting: {0}")]
    InvalidSetting(String),
    /// Neither the settings nor the standard chain name a region.
    #[error("no AWS region: set the region setting or AWS_REGION")]
    NoRegion,
    /// The standard chain yields no credentials provider.
    #[error("no AWS credentials provider in the standard chain")]
    NoCredentials,
}

impl AwsConfig {
    /// Checks the settings that types cannot; the message names the setting.
    pub fn validate(&self) -> Result<(), AwsSetupError> {
        let invalid = |m: String| Err(AwsSetupError::InvalidSetting(m));
        if let Some(url) = &self.endpoint_url {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                return invalid(format!("endpoint URL {url:?} must be http(s)://host[:port]"));
            }
        }
        if let Some(id) = &self.route_table_id
            && !id.starts_with("rtb-")
        {
            return invalid(format!("route table ID {id:?} must start with rtb-"));
        }
        if let Some(id) = &self.vpc_id
            && !id.starts_with("vpc-")
        {
            return invalid(format!("VPC ID {id:?} must start with vpc-"));
        }
        if let Some(id) = self.subnet_ids.iter().find(|id| !id.starts_with("subnet-")) {
            return invalid(format!("subnet ID {id:?} must start with subnet-"));
        }
        if !(1..=MAX_INSTANCE_BATCH_LIMIT).contains(&self.max_instance_batch) {
            return invalid(format!(
                "max instance batch {} must be between 1 and {MAX_INSTANCE_BATCH_LIMIT}",
                self.max_instance_batch
            ));
        }
        if self.max_attempts == 0 {
            return invalid("max attempts must be at least 1".into());
        }
        if self.operation_timeout.is_zero() {
            return invalid("operation timeout must be positive".into());
        }
        if let Some(id) = &self.cluster_id
            && let Err(e) = crate::tags::ClusterTagging::new(id, self.legacy_cluster_tag)
        {
            return invalid(e.to_string());
        }
        if self.legacy_cluster_tag && self.cluster_id.is_none() {
            return invalid("the legacy cluster tag needs a cluster ID".into());
        }
        if self.node_ip_families.is_empty() {
            return invalid("node IP families must name ipv4, ipv6 or both".into());
        }
        Ok(())
    }

    /// The SDK configuration loader for these settings: the standard credentials chain, rustls
    /// on ring, modest retries and bounded calls. Callers may adjust it (tests set static
    /// credentials) before `load()`.
    pub fn sdk_loader(&self) -> Result<ConfigLoader, AwsSetupError> {
        self.validate()?;
        let http = HttpClientBuilder::new()
            .tls_provider(TlsProvider::Rustls(CryptoMode::Ring))
            .build_https();
        let attempt_timeout = self.operation_timeout.min(Duration::from_secs(20));
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .retry_config(RetryConfig::standard().with_max_attempts(self.max_attempts))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(attempt_timeout)
                    .operation_timeout(self.operation_timeout)
                    .build(),
            );
        if !self.region.is_empty() {
            loader = loader.region(Region::new(self.region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        Ok(loader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        AwsConfig::default().validate().unwrap();
        assert_eq!(AwsConfig::default().max_instance_batch, 500);
    }

    #[test]
    fn bad_settings_are_named() {
        type Mutation = fn(&mut AwsConfig);
        let cases: [(&str, Mutation); 11] = [
            ("endpoint URL", |c| c.endpoint_url = Some("127.0.0.1:5000".into())),
            ("endpoint URL", |c| c.endpoint_url = Some("http://".into())),
            ("route table", |c| c.route_table_id = Some("table-1".into())),
            ("VPC", |c| c.vpc_id = Some("v-1".into())),
            ("subnet", |c| {
                c.subnet_ids = vec!["subnet-1".into(), "sn-2".into()]
            }),
            ("max instance batch", |c| c.max_instance_batch = 0),
            ("max attempts", |c| c.max_attempts = 0),
            ("operation timeout", |c| c.operation_timeout = Duration::ZERO),
            ("cluster ID", |c| c.cluster_id = Some(String::new())),
            ("legacy cluster tag", |c| c.legacy_cluster_tag = true),
            ("node IP families", |c| c.node_ip_families.clear()),
        ];
        for (what, mutate) in cases {
            let mut c = AwsConfig::default();
            mutate(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(what), "{what}: {err}");
        }
        let ok = AwsConfig {
            endpoint_url: Some("http://127.0.0.1:5000".into()),
            ..AwsConfig::default()
        };
        ok.validate().unwrap();
    }
}
