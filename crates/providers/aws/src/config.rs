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

/// An AWS service the provider calls (for per-service endpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AwsService {
    /// EC2: instances, subnets, security groups, route tables.
    Ec2,
    /// Elastic Load Balancing (Classic ELBs).
    Elb,
    /// Elastic Load Balancing v2 (NLBs).
    Elbv2,
}

impl AwsService {
    /// The services a cloud-config `[ServiceOverride]` `Service` names, compared without case:
    /// the AWS SDK v2 service IDs upstream matches today (`EC2`, `Elastic Load Balancing`,
    /// `Elastic Load Balancing v2`), the endpoint prefixes of the SDK v1 era (`ec2`,
    /// `elasticloadbalancing`, which was both ELB APIs) and the short names `elb`, `elbv2`.
    /// Empty for a service the provider never calls (`s3`, `kms`, `ec2imds`, ...).
    pub fn from_override_name(name: &str) -> Vec<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "ec2" => vec![Self::Ec2],
            "elastic load balancing" | "elb" => vec![Self::Elb],
            "elastic load balancing v2" | "elbv2" => vec![Self::Elbv2],
            "elasticloadbalancing" => vec![Self::Elb, Self::Elbv2],
            _ => Vec::new(),
        }
    }

    /// A name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ec2 => "EC2",
            Self::Elb => "Elastic Load Balancing",
            Self::Elbv2 => "Elastic Load Balancing v2",
        }
    }

    /// The SigV4 signing name AWS expects.
    pub fn signing_name(self) -> &'static str {
        match self {
            Self::Ec2 => "ec2",
            Self::Elb | Self::Elbv2 => "elasticloadbalancing",
        }
    }
}

/// The endpoint of one service in one region (cloud-config `[ServiceOverride]`): calls to
/// `service` go to `url`, signed for `signing_region` (and `signing_name`), when the provider
/// works in `region`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    /// The service.
    pub service: AwsService,
    /// The provider's region this applies in.
    pub region: String,
    /// `http(s)://host[:port][/path]`.
    pub url: String,
    /// The region requests are signed for.
    pub signing_region: String,
    /// The SigV4 signing name; `None`: the service's own ([`AwsService::signing_name`]).
    pub signing_name: Option<String>,
}

impl ServiceEndpoint {
    /// Checks the URL; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        check_url(&self.url)
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace) => Ok(()),
        _ => Err(format!("endpoint URL {url:?} must be http(s)://host[:port]")),
    }
}

/// The account of an IAM role ARN (`arn:PARTITION:iam::ACCOUNT:role/NAME`), as upstream reads it
/// for the `x-amz-source-account` header; the message says what is wrong.
pub fn role_account(arn: &str) -> Result<&str, String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", partition, service, _region, account, resource]
            if !partition.is_empty() && !service.is_empty() && !resource.is_empty() =>
        {
            Ok(account)
        }
        _ => Err(format!(
            "{arn:?} is not an ARN (arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE, e.g. arn:aws:iam::123456789012:role/ccm)"
        )),
    }
}

/// Why `pattern` is not a valid regular expression, if it is not.
pub fn topology_pattern_error(pattern: &str) -> Option<String> {
    regex::Regex::new(pattern)
        .err()
        .map(|e| format!("{pattern:?} is not a valid regular expression: {e}"))
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
    /// An IAM role to assume (STS AssumeRole) for every call, with the standard chain's
    /// credentials (cloud-config `RoleARN`).
    pub role_arn: Option<String>,
    /// Sent as `x-amz-source-arn` on the AssumeRole call, for the role's trust policy
    /// (`aws:SourceArn`, confused-deputy protection); cloud-config `SourceARN`. Needs
    /// `role_arn`. The role's account always goes as `x-amz-source-account`, as upstream.
    pub source_arn: Option<String>,
    /// Endpoints of single services in given regions (cloud-config `[ServiceOverride]`). Those
    /// of the provider's region win over `endpoint_url` for their service.
    pub service_endpoints: Vec<ServiceEndpoint>,
    /// Instance types whose topology the node controller may wait for (cloud-config
    /// `SupportedTopologyInstanceTypePattern`), a regular expression. Stored and validated; the
    /// provider does not read instance topology yet, so it has no effect.
    pub supported_topology_instance_type_pattern: Option<String>,
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
            role_arn: None,
            source_arn: None,
            service_endpoints: Vec::new(),
            supported_topology_instance_type_pattern: None,
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
            check_url(url).map_err(AwsSetupError::InvalidSetting)?;
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
        if let Some(role) = &self.role_arn
            && let Err(e) = role_account(role)
        {
            return invalid(format!("role ARN: {e}"));
        }
        if self.source_arn.is_some() && self.role_arn.is_none() {
            return invalid("the source ARN is sent only when assuming a role: it needs a role ARN".into());
        }
        for e in &self.service_endpoints {
            if let Err(m) = e.validate() {
                return invalid(format!("{} endpoint in {}: {m}", e.service.name(), e.region));
            }
            if e.region.is_empty() || e.signing_region.is_empty() {
                return invalid(format!(
                    "{} endpoint {}: region and signing region must be set",
                    e.service.name(),
                    e.url
                ));
            }
        }
        if let Some(pattern) = &self.supported_topology_instance_type_pattern
            && let Some(e) = topology_pattern_error(pattern)
        {
            return invalid(format!("supported topology instance type pattern: {e}"));
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
        let cases: [(&str, Mutation); 16] = [
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
            ("role ARN", |c| c.role_arn = Some("ccm-role".into())),
            ("source ARN", |c| {
                c.source_arn = Some("arn:aws:eks:eu-west-1:1:cluster/c".into())
            }),
            ("EC2 endpoint", |c| {
                c.service_endpoints.push(ServiceEndpoint {
                    service: AwsService::Ec2,
                    region: "eu-west-1".into(),
                    url: "ec2.example".into(),
                    signing_region: "eu-west-1".into(),
                    signing_name: None,
                })
            }),
            ("signing region", |c| {
                c.service_endpoints.push(ServiceEndpoint {
                    service: AwsService::Elb,
                    region: "eu-west-1".into(),
                    url: "https://elb.example".into(),
                    signing_region: String::new(),
                    signing_name: None,
                })
            }),
            ("topology", |c| {
                c.supported_topology_instance_type_pattern = Some("^(p4d".into())
            }),
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

    #[test]
    fn role_accounts_and_override_names() {
        assert_eq!(
            role_account("arn:aws:iam::123456789012:role/ccm"),
            Ok("123456789012")
        );
        assert_eq!(role_account("arn:aws-cn:iam::1:role/a/b:c"), Ok("1"));
        for bad in [
            "",
            "role/ccm",
            "arn:aws:iam::1",
            "arn::iam::1:role/x",
            "arn:aws:iam::1:",
        ] {
            assert!(role_account(bad).is_err(), "{bad}");
        }
        assert_eq!(AwsService::from_override_name("EC2"), [AwsService::Ec2]);
        assert_eq!(AwsService::from_override_name(" ec2 "), [AwsService::Ec2]);
        assert_eq!(
            AwsService::from_override_name("Elastic Load Balancing"),
            [AwsService::Elb]
        );
        assert_eq!(
            AwsService::from_override_name("Elastic Load Balancing v2"),
            [AwsService::Elbv2]
        );
        assert_eq!(
            AwsService::from_override_name("elasticloadbalancing"),
            [AwsService::Elb, AwsService::Elbv2]
        );
        assert!(AwsService::from_override_name("s3").is_empty());
        assert!(AwsService::from_override_name("KMS").is_empty());
    }
}
