//! moto as the AWS provider's tests need it: SDK clients to a running `moto_server`, a VPC laid
//! out the way cloud-provider-aws and EKS clusters are, instances in it, and a census of what a
//! cluster's load balancers left behind. Shared by the provider's tests and the end-to-end tests;
//! never a dependency of a shipped binary.
//!
//! moto's state is global to its process: each user works in its own VPC under its own cluster
//! name, so tests can share one server.

pub mod proxy;
pub mod upstream;

use aws_config::{BehaviorVersion, Region, retry::RetryConfig};
use aws_sdk_ec2::{
    config::Credentials,
    types::{Filter, InstanceType, ResourceType, Tag, TagSpecification},
};
pub use proxy::FaultProxy;

/// Region of every test.
pub const REGION: &str = "us-east-1";
/// Zones of the test subnets.
pub const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];
/// Instance type of test instances.
pub const INSTANCE_TYPE: &str = "t3.medium";
/// An AMI moto knows.
const IMAGE_ID: &str = "ami-12c6146b";

/// SDK clients talking to moto directly (not through a proxy), without retries.
#[derive(Clone)]
pub struct Cloud {
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// ELBv2.
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    /// Classic ELB.
    pub classic: aws_sdk_elasticloadbalancing::Client,
}

impl Cloud {
    /// Clients for the moto at `endpoint` (`http://127.0.0.1:PORT`).
    pub async fn connect(endpoint: &str) -> Self {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
            .retry_config(RetryConfig::disabled())
            .http_client(
                aws_smithy_http_client::Builder::new()
                    .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https(),
            )
            .load()
            .await;
        Self {
            ec2: aws_sdk_ec2::Client::new(&sdk),
            elb: aws_sdk_elasticloadbalancingv2::Client::new(&sdk),
            classic: aws_sdk_elasticloadbalancing::Client::new(&sdk),
        }
    }

    /// A VPC laid out the way cloud-provider-aws and EKS clusters are: an internet gateway; one
    /// public subnet per zone tagged only `kubernetes.io/role/elb=1` and routed to the gateway;
    /// a private subnet tagged `kubernetes.io/role/internal-elb=1` whose route table (tagged for
    /// the cluster) carries the pod routes; the workers' security group tagged for the cluster.
    pub async fn network(&self, cluster: &str) -> Network {
        let tag = format!("kubernetes.io/cluster/{cluster}");
        let tags = |kind: ResourceType, extra: &[(&str, &str)]| {
            let mut spec = TagSpecification::builder().resource_type(kind);
            for (k, v) in extra {
                spec = spec.tags(Tag::builder().key(*k).value(*v).build());
            }
            spec.build()
        };
        let owned = [(tag.as_str(), "owned")];
        let vpc_id = self
            .ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .tag_specifications(tags(ResourceType::Vpc, &owned))
            .send()
            .await
            .expect("CreateVpc")
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("VPC ID")
            .to_owned();
        let gateway = self
            .ec2
            .create_internet_gateway()
            .send()
            .await
            .expect("CreateInternetGateway")
            .internet_gateway()
            .and_then(|g| g.internet_gateway_id())
            .expect("gateway ID")
            .to_owned();
        self.ec2
            .attach_internet_gateway()
            .internet_gateway_id(&gateway)
            .vpc_id(&vpc_id)
            .send()
            .await
            .expect("AttachInternetGateway");
        let route_table = |extra: &'static [(&'static str, &'static str)], owned: bool| {
            let ec2 = self.ec2.clone();
            let vpc_id = vpc_id.clone();
            let tag = tag.clone();
            async move {
                let mut t = TagSpecification::builder().resource_type(ResourceType::RouteTable);
                if owned {
                    t = t.tags(Tag::builder().key(&tag).value("owned").build());
                }
                for (k, v) in extra {
                    t = t.tags(Tag::builder().key(*k).value(*v).build());
                }
                ec2.create_route_table()
                    .vpc_id(vpc_id)
                    .tag_specifications(t.build())
                    .send()
                    .await
                    .expect("CreateRouteTable")
                    .route_table()
                    .and_then(|t| t.route_table_id())
                    .expect("route table ID")
                    .to_owned()
            }
        };
        let public_route_table_id = route_table(&[("Name", "public")], false).await;
        self.ec2
            .create_route()
            .route_table_id(&public_route_table_id)
            .destination_cidr_block("0.0.0.0/0")
            .gateway_id(&gateway)
            .send()
            .await
            .expect("CreateRoute to the internet gateway");
        let route_table_id = route_table(&[("Name", "private")], true).await;
        let subnet = |n: usize, zone: &'static str, role: &'static str| {
            let ec2 = self.ec2.clone();
            let vpc_id = vpc_id.clone();
            async move {
                ec2.create_subnet()
                    .vpc_id(vpc_id)
                    .cidr_block(format!("10.0.{n}.0/24"))
                    .availability_zone(zone)
                    .tag_specifications(
                        TagSpecification::builder()
                            .resource_type(ResourceType::Subnet)
                            .tags(Tag::builder().key(role).value("1").build())
                            .tags(
                                Tag::builder()
                                    .key("Name")
                                    .value(format!("net-{n}-{zone}"))
                                    .build(),
                            )
                            .build(),
                    )
                    .send()
                    .await
                    .expect("CreateSubnet")
                    .subnet()
                    .and_then(|s| s.subnet_id())
                    .expect("subnet ID")
                    .to_owned()
            }
        };
        let mut subnets = Vec::new();
        for (n, zone) in ZONES.iter().enumerate() {
            let id = subnet(n + 1, zone, "kubernetes.io/role/elb").await;
            self.ec2
                .associate_route_table()
                .route_table_id(&public_route_table_id)
                .subnet_id(&id)
                .send()
                .await
                .expect("AssociateRouteTable");
            subnets.push(id);
        }
        let private_subnet = subnet(10, ZONES[0], "kubernetes.io/role/internal-elb").await;
        self.ec2
            .associate_route_table()
            .route_table_id(&route_table_id)
            .subnet_id(&private_subnet)
            .send()
            .await
            .expect("AssociateRouteTable");
        let node_group = self
            .ec2
            .create_security_group()
            .group_name(format!("{cluster}-nodes"))
            .description("the cluster's workers")
            .vpc_id(&vpc_id)
            .tag_specifications(tags(ResourceType::SecurityGroup, &owned))
            .send()
            .await
            .expect("CreateSecurityGroup")
            .group_id()
            .expect("group ID")
            .to_owned();
        Network {
            cluster: cluster.to_owned(),
            vpc_id,
            subnets,
            subnet_cidrs: (1..=ZONES.len()).map(|n| format!("10.0.{n}.0/24")).collect(),
            private_subnet,
            route_table_id,
            public_route_table_id,
            node_group,
        }
    }

    /// Starts an instance in the network's subnet `n`, tagged for the cluster.
    pub async fn run_instance(&self, network: &Network, n: usize) -> Instance {
        let out = self
            .ec2
            .run_instances()
            .image_id(IMAGE_ID)
            .instance_type(InstanceType::from(INSTANCE_TYPE))
            .min_count(1)
            .max_count(1)
            .subnet_id(&network.subnets[n % network.subnets.len()])
            .security_group_ids(&network.node_group)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .tags(
                        Tag::builder()
                            .key(format!("kubernetes.io/cluster/{}", network.cluster))
                            .value("owned")
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .expect("RunInstances");
        let i = out.instances().first().expect("an instance");
        let id = i.instance_id().expect("instance ID").to_owned();
        let zone = i
            .placement()
            .and_then(|p| p.availability_zone())
            .expect("zone")
            .to_owned();
        Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            node_name: i.private_dns_name().expect("private DNS name").to_owned(),
            internal_ip: i.private_ip_address().expect("private IP").to_owned(),
            id,
            zone,
        }
    }

    /// Stops an instance (moto: at once).
    pub async fn stop(&self, instance: &Instance) {
        self.ec2
            .stop_instances()
            .instance_ids(&instance.id)
            .send()
            .await
            .expect("StopInstances");
    }

    /// Terminates an instance (moto: at once; it stays listed as terminated).
    pub async fn terminate(&self, instance: &Instance) {
        self.ec2
            .terminate_instances()
            .instance_ids(&instance.id)
            .send()
            .await
            .expect("TerminateInstances");
    }

    /// Instance IDs registered with the load balancer named `name`, of either type.
    pub async fn backends(&self, name: &str) -> Vec<String> {
        if let Ok(out) = self
            .classic
            .describe_load_balancers()
            .load_balancer_names(name)
            .send()
            .await
        {
            let mut ids: Vec<String> = out
                .load_balancer_descriptions()
                .iter()
                .flat_map(|d| d.instances())
                .filter_map(|i| i.instance_id().map(str::to_owned))
                .collect();
            ids.sort();
            return ids;
        }
        let Ok(lbs) = self.elb.describe_load_balancers().names(name).send().await else {
            return Vec::new();
        };
        let Some(arn) = lbs.load_balancers().first().and_then(|l| l.load_balancer_arn()) else {
            return Vec::new();
        };
        let Ok(groups) = self
            .elb
            .describe_target_groups()
            .load_balancer_arn(arn)
            .send()
            .await
        else {
            return Vec::new();
        };
        let mut ids = Vec::new();
        for g in groups.target_groups() {
            let health = self
                .elb
                .describe_target_health()
                .target_group_arn(g.target_group_arn().unwrap_or_default())
                .send()
                .await
                .expect("DescribeTargetHealth");
            for d in health.target_health_descriptions() {
                if let Some(id) = d.target().and_then(|t| t.id()) {
                    ids.push(id.to_owned());
                }
            }
        }
        ids.sort();
        ids.dedup();
        ids
    }

    /// Everything in the network that a load balancer provider made or changed: load balancers
    /// of both types and target groups in the VPC, its security groups other than the workers'
    /// and the default one, and the workers' ingress rules.
    pub async fn census(&self, network: &Network) -> Census {
        let vpc = Some(network.vpc_id.as_str());
        let classic = self
            .classic
            .describe_load_balancers()
            .send()
            .await
            .expect("DescribeLoadBalancers (classic)")
            .load_balancer_descriptions()
            .iter()
            .filter(|d| d.vpc_id() == vpc)
            .filter_map(|d| d.load_balancer_name().map(str::to_owned))
            .collect();
        let nlbs = self
            .elb
            .describe_load_balancers()
            .send()
            .await
            .expect("DescribeLoadBalancers")
            .load_balancers()
            .iter()
            .filter(|l| l.vpc_id() == vpc)
            .filter_map(|l| l.load_balancer_arn().map(str::to_owned))
            .collect();
        let target_groups = match self.elb.describe_target_groups().send().await {
            Ok(out) => out
                .target_groups()
                .iter()
                .filter(|g| g.vpc_id() == vpc)
                .filter_map(|g| g.target_group_arn().map(str::to_owned))
                .collect(),
            // moto answers TargetGroupNotFound when there is none at all.
            Err(_) => Vec::new(),
        };
        let groups = self
            .ec2
            .describe_security_groups()
            .filters(Filter::builder().name("vpc-id").values(&network.vpc_id).build())
            .send()
            .await
            .expect("DescribeSecurityGroups");
        let mut security_groups = Vec::new();
        let mut node_rules = Vec::new();
        for g in groups.security_groups() {
            let id = g.group_id().unwrap_or_default().to_owned();
            if id == network.node_group {
                for p in g.ip_permissions() {
                    let proto = p.ip_protocol().unwrap_or_default();
                    let ports = format!("{}-{}", p.from_port().unwrap_or(0), p.to_port().unwrap_or(0));
                    for r in p.ip_ranges() {
                        node_rules.push(format!(
                            "{proto} {ports} {} {}",
                            r.cidr_ip().unwrap_or_default(),
                            r.description().unwrap_or_default()
                        ));
                    }
                    for u in p.user_id_group_pairs() {
                        node_rules.push(format!("{proto} {ports} {}", u.group_id().unwrap_or_default()));
                    }
                }
            } else if g.group_name() != Some("default") {
                security_groups.push(format!("{id} {}", g.group_name().unwrap_or_default()));
            }
        }
        node_rules.sort();
        Census {
            classic,
            nlbs,
            target_groups,
            security_groups,
            node_rules,
        }
    }

    /// Instances whose private DNS name is `name`.
    pub async fn instances_named(&self, name: &str) -> usize {
        self.ec2
            .describe_instances()
            .filters(Filter::builder().name("private-dns-name").values(name).build())
            .send()
            .await
            .expect("DescribeInstances")
            .reservations()
            .iter()
            .map(|r| r.instances().len())
            .sum()
    }
}

/// What load balancers left in a network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Census {
    /// Classic ELBs in the VPC, by name.
    pub classic: Vec<String>,
    /// NLBs in the VPC, by ARN.
    pub nlbs: Vec<String>,
    /// Target groups in the VPC, by ARN.
    pub target_groups: Vec<String>,
    /// Security groups of the VPC but the workers' and the default one: `<id> <name>`.
    pub security_groups: Vec<String>,
    /// The workers' group's ingress rules: `<protocol> <from>-<to> <source> [<description>]`.
    pub node_rules: Vec<String>,
}

impl Census {
    /// Nothing left.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A test's network.
#[derive(Debug, Clone)]
pub struct Network {
    /// The cluster it is tagged for.
    pub cluster: String,
    /// VPC.
    pub vpc_id: String,
    /// One public subnet per zone of [`ZONES`].
    pub subnets: Vec<String>,
    /// Their CIDR blocks, in the same order.
    pub subnet_cidrs: Vec<String>,
    /// A private subnet in the first zone.
    pub private_subnet: String,
    /// The private route table, tagged for the cluster (pod routes go there).
    pub route_table_id: String,
    /// The public route table (to the internet gateway).
    pub public_route_table_id: String,
    /// The workers' security group, tagged for the cluster.
    pub node_group: String,
}

/// An instance created by a test.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Instance ID.
    pub id: String,
    /// `aws:///<zone>/<id>`.
    pub provider_id: String,
    /// Private DNS name (the Node name).
    pub node_name: String,
    /// Private IP.
    pub internal_ip: String,
    /// Zone.
    pub zone: String,
}
