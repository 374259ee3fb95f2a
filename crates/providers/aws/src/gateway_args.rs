//! AWS as the gateway runs it (`cloud-gateway --provider aws`): the `--aws-*` flags, the
//! `--cloud-config` file (cloud-provider-aws's, read by [`crate::cloud_config`]) under them, and
//! their [`Registration`]. Credentials come only from the standard AWS chain of the process.

use std::{path::Path, time::Duration};

use provider::registration::{Built, CloudConfig, Registration, SetupError};

use crate::{AwsConfig, AwsProvider, config::IpFamily};

/// AWS's entry in the gateway's provider list.
pub static REGISTRATION: AwsRegistration = AwsRegistration;

/// See [`REGISTRATION`].
pub struct AwsRegistration;

#[async_trait::async_trait]
impl Registration for AwsRegistration {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn about(&self) -> &'static str {
        "Amazon Web Services: EC2 instances, Classic ELBs and NLBs, VPC routes (or an AWS-compatible endpoint)."
    }

    fn cloud_config(&self) -> CloudConfig {
        CloudConfig::Optional(
            "cloud-provider-aws's cloud-config (gcfg INI: [Global], [ServiceOverride \"n\"]), optional; \
             the --aws-* flags given explicitly override its values",
        )
    }

    fn flags(&self, command: clap::Command) -> clap::Command {
        <AwsArgs as clap::Args>::augment_args(command.next_help_heading("AWS options"))
    }

    async fn build(
        &self,
        flags: &clap::ArgMatches,
        cloud_config: Option<&Path>,
    ) -> Result<Built, SetupError> {
        let args = <AwsArgs as clap::FromArgMatches>::from_arg_matches(flags)?;
        let (config, notices) = args.config(cloud_config)?;
        let aws = AwsProvider::new(config)
            .await
            .map_err(|e| format!("cannot set up AWS: {e}"))?;
        Ok(Built {
            notices,
            ..Built::provider(aws)
        })
    }
}

/// Settings of AWS (`--provider aws`). Credentials come only from the standard AWS chain
/// (environment, profile, web identity, instance metadata) of the gateway's process.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// Region; the standard chain's when unset.
    #[arg(long = "aws-region", env = "AWS_REGION")]
    pub region: Option<String>,
    /// Endpoint URL for EC2 and ELBv2 (an AWS-compatible cloud, or moto in tests).
    #[arg(long = "aws-endpoint-url", env = "AWS_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// Route table for pod-CIDR routes; the table tagged `kubernetes.io/cluster/<cluster>` when unset.
    #[arg(long = "aws-route-table-id")]
    pub route_table_id: Option<String>,
    /// The cluster's VPC (narrows subnet discovery and lookups by name).
    #[arg(long = "aws-vpc-id")]
    pub vpc_id: Option<String>,
    /// Subnets for new load balancers, comma-separated; discovered by tags when unset.
    #[arg(long = "aws-subnet-ids", value_delimiter = ',')]
    pub subnet_ids: Vec<String>,
    /// Instance IDs per DescribeInstances call.
    #[arg(long = "aws-max-instance-batch", default_value_t = 500)]
    pub max_instance_batch: usize,
    /// SDK attempts per call for network errors and 5xx (throttling is never retried there).
    #[arg(long = "aws-max-attempts", default_value_t = 3)]
    pub max_attempts: u32,
    /// Bound of one AWS API call, retries included.
    #[arg(long = "aws-operation-timeout", default_value = "30s", value_parser = humantime::parse_duration)]
    pub operation_timeout: Duration,
    /// How long a load balancer found as its Service asks is trusted: within it, a sync of the
    /// unchanged Service reads only the load balancer and its tags; `0s` reads everything on
    /// every sync, as cloud-provider-aws does.
    #[arg(long = "aws-load-balancer-verify-period", default_value = "10m", value_parser = humantime::parse_duration)]
    pub verify_period: Duration,
    /// The cluster ID of AWS tags (`kubernetes.io/cluster/<id>`), as cloud-provider-aws's
    /// `KubernetesClusterID`; the controllers' `--cluster-name` when unset.
    #[arg(long = "aws-cluster-id")]
    pub cluster_id: Option<String>,
    /// Also tag new resources `KubernetesCluster=<id>`, as cloud-provider-aws does when its cloud
    /// config sets `KubernetesClusterTag` (clusters older than the `kubernetes.io/cluster/` key).
    /// Needs --aws-cluster-id. Resources carrying only the legacy tag are the cluster's either way.
    #[arg(long = "aws-legacy-cluster-tag", requires = "cluster_id")]
    pub legacy_cluster_tag: bool,
    /// Address families of node addresses, in order, comma-separated: `ipv4`, `ipv6`,
    /// `ipv4,ipv6` or `ipv6,ipv4` (cloud-provider-aws's `NodeIPFamilies`: IPv6-only and
    /// dual-stack nodes). Overrides the cloud-config file's; unset: the file's, else `ipv4`.
    #[arg(long = "aws-node-ip-families", value_delimiter = ',', value_enum)]
    pub node_ip_families: Vec<NodeIpFamily>,
}

/// An address family of node addresses, as cloud-provider-aws's `NodeIPFamilies` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeIpFamily {
    /// The private and public IPv4 addresses and DNS names.
    Ipv4,
    /// The IPv6 addresses of the instance's network interfaces.
    Ipv6,
}

impl NodeIpFamily {
    fn family(self) -> IpFamily {
        match self {
            Self::Ipv4 => IpFamily::V4,
            Self::Ipv6 => IpFamily::V6,
        }
    }
}

impl AwsArgs {
    /// The provider settings: the cloud-config file's (if any) under the flags given, and what
    /// the file has that has no effect (logged once by [`Args::provider`]).
    pub fn config(
        &self,
        cloud_config: Option<&Path>,
    ) -> Result<(AwsConfig, Vec<String>), crate::cloud_config::CloudConfigError> {
        let (mut config, mut notices) = match cloud_config {
            Some(path) => {
                let file = crate::cloud_config::read(path)?;
                let config = file.to_aws_config().map_err(|mut e| {
                    e.path = Some(path.display().to_string());
                    e
                })?;
                (config, file.notices().iter().map(ToString::to_string).collect())
            }
            None => (AwsConfig::default(), Vec::new()),
        };
        if let Some(region) = &self.region {
            config.region = region.clone();
        }
        if let Some(url) = &self.endpoint_url {
            if !config.service_endpoints.is_empty() {
                notices.push(format!(
                    "--aws-endpoint-url {url} replaces the file's [ServiceOverride] endpoints"
                ));
                config.service_endpoints.clear();
            }
            config.endpoint_url = Some(url.clone());
        }
        if self.route_table_id.is_some() {
            config.route_table_id = self.route_table_id.clone();
        }
        if self.vpc_id.is_some() {
            config.vpc_id = self.vpc_id.clone();
        }
        if !self.subnet_ids.is_empty() {
            config.subnet_ids = self.subnet_ids.clone();
        }
        if self.cluster_id.is_some() {
            config.cluster_id = self.cluster_id.clone();
        }
        config.legacy_cluster_tag |= self.legacy_cluster_tag;
        config.max_instance_batch = self.max_instance_batch;
        config.max_attempts = self.max_attempts;
        config.operation_timeout = self.operation_timeout;
        config.verify_period = self.verify_period;
        if !self.node_ip_families.is_empty() {
            config.node_ip_families = self.node_ip_families.iter().map(|f| f.family()).collect();
        }
        Ok((config, notices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpFamily::{V4, V6};

    fn parse(argv: &[&str]) -> Result<AwsArgs, clap::Error> {
        provider::registration::parse_flags(argv)
    }

    fn cloud_config_file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn aws_flags_parse() {
        let args = parse(&[
            "--aws-region",
            "eu-west-1",
            "--aws-endpoint-url",
            "http://127.0.0.1:5000",
            "--aws-subnet-ids",
            "subnet-a,subnet-b",
        ])
        .unwrap();
        let (config, _) = args.config(None).unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.subnet_ids, ["subnet-a", "subnet-b"]);
        assert_eq!(config.max_instance_batch, 500);
        assert_eq!((config.cluster_id, config.legacy_cluster_tag), (None, false));

        let args = parse(&["--aws-cluster-id=prod-1", "--aws-legacy-cluster-tag"]).unwrap();
        let (config, _) = args.config(None).unwrap();
        assert_eq!(config.cluster_id.as_deref(), Some("prod-1"));
        assert!(config.legacy_cluster_tag);
        let err = parse(&["--aws-legacy-cluster-tag"]).unwrap_err();
        assert!(err.to_string().contains("--aws-cluster-id"), "{err}");
    }

    #[test]
    fn aws_node_ip_families_parse_in_order() {
        let families = |flag: Option<&str>| {
            let argv: Vec<&str> = flag.into_iter().collect();
            parse(&argv).map(|a| a.config(None).unwrap().0.node_ip_families)
        };
        assert_eq!(families(None).unwrap(), [V4], "upstream's default");
        assert_eq!(families(Some("--aws-node-ip-families=ipv6")).unwrap(), [V6]);
        assert_eq!(
            families(Some("--aws-node-ip-families=ipv4,ipv6")).unwrap(),
            [V4, V6]
        );
        assert_eq!(
            families(Some("--aws-node-ip-families=ipv6,ipv4")).unwrap(),
            [V6, V4]
        );
        let err = families(Some("--aws-node-ip-families=ipv4,inet6")).unwrap_err();
        assert!(err.to_string().contains("inet6"), "{err}");
    }

    #[test]
    fn the_cloud_config_is_read_and_explicit_flags_override_it() {
        let file = cloud_config_file(
            "[Global]\nRegion = eu-west-1\nVPC = vpc-file\nSubnetID = subnet-file\nKubernetesClusterTag = old\n\
             ElbSecurityGroup = sg-shared\nNodeIPFamilies = ipv6\nUnknownKey = 1\n\
             [ServiceOverride \"1\"]\nService = ec2\nRegion = eu-west-1\nURL = https://ec2.internal\nSigningRegion = eu-west-1\n",
        );
        let path = Some(file.path());
        let (config, notices) = parse(&[]).unwrap().config(path).unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.vpc_id.as_deref(), Some("vpc-file"));
        assert_eq!(config.subnet_ids, ["subnet-file"]);
        assert_eq!(
            (config.cluster_id.as_deref(), config.legacy_cluster_tag),
            (Some("old"), true)
        );
        assert_eq!(
            config.load_balancers.elb_security_group.as_deref(),
            Some("sg-shared")
        );
        assert_eq!(config.node_ip_families, [V6]);
        assert_eq!(config.service_endpoints.len(), 1);
        assert_eq!(config.max_instance_batch, 500);
        assert_eq!(notices.len(), 1);
        assert!(notices[0].contains("line 8: [Global] UnknownKey"), "{notices:?}");

        let args = parse(&[
            "--aws-region=us-east-2",
            "--aws-vpc-id=vpc-flag",
            "--aws-subnet-ids=subnet-a,subnet-b",
            "--aws-cluster-id=new",
            "--aws-endpoint-url=http://127.0.0.1:5000",
            "--aws-max-instance-batch=100",
        ])
        .unwrap();
        let (config, notices) = args.config(path).unwrap();
        assert_eq!(config.region, "us-east-2");
        assert_eq!(config.vpc_id.as_deref(), Some("vpc-flag"));
        assert_eq!(config.subnet_ids, ["subnet-a", "subnet-b"]);
        // The flag's ID, still with the file's legacy tag.
        assert_eq!(
            (config.cluster_id.as_deref(), config.legacy_cluster_tag),
            (Some("new"), true)
        );
        assert_eq!(config.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
        assert!(config.service_endpoints.is_empty());
        assert!(
            notices
                .iter()
                .any(|n| n.contains("replaces the file's [ServiceOverride]")),
            "{notices:?}"
        );
        // Settings the file does not have keep the flags' defaults.
        assert_eq!(config.max_instance_batch, 100);
        assert_eq!(
            config.load_balancers.elb_security_group.as_deref(),
            Some("sg-shared")
        );
    }

    #[tokio::test]
    async fn a_malformed_or_refused_cloud_config_stops_start_up_naming_file_line_and_key() {
        let flags = <AwsArgs as clap::Args>::augment_args(clap::Command::new("cloud-gateway"))
            .get_matches_from(["cloud-gateway"]);
        for (text, needle) in [
            (
                "[Global]\nRegion = eu-west-1\nDisableSecurityGroupIngress = maybe\n",
                "line 3, [Global] DisableSecurityGroupIngress",
            ),
            (
                "[Global]\nRegion = eu-west-1\n\n\nNLBSecurityGroupMode = Managed\n",
                "line 5, [Global] NLBSecurityGroupMode",
            ),
            ("[Global\n", "line 1"),
        ] {
            let file = cloud_config_file(text);
            let path = file.path().to_str().unwrap();
            let err = REGISTRATION
                .build(&flags, Some(file.path()))
                .await
                .err()
                .expect("refused")
                .to_string();
            assert!(err.contains(path) && err.contains(needle), "{err}");
        }
        let err = REGISTRATION
            .build(&flags, Some(Path::new("/nonexistent/cloud.conf")))
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("/nonexistent/cloud.conf") && err.contains("cannot read it"),
            "{err}"
        );
    }
}
