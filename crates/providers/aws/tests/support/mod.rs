//! Test support: one `moto_server` per test process, a fault-injecting proxy per test, and the
//! cloud-side setup a test needs (a VPC with subnets in two zones, a route table, instances),
//! done with the SDK directly against moto.
//!
//! moto's state is global to its process, so tests never reset it: each test works in its own
//! VPC under its own cluster name, and they run in parallel against one server.
#![allow(dead_code)]

pub mod proxy;

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use aws_config::{BehaviorVersion, Region, retry::RetryConfig};
use aws_sdk_ec2::{
    config::Credentials,
    types::{Filter, InstanceType, ResourceType, Tag, TagSpecification},
};
use provider_aws::{AwsConfig, AwsProvider};

pub use proxy::FaultProxy;

/// Region of every test.
pub const REGION: &str = "us-east-1";
/// Zones of the test subnets.
pub const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];
/// Instance type of test instances.
pub const INSTANCE_TYPE: &str = "t3.medium";
/// An AMI moto knows.
const IMAGE_ID: &str = "ami-12c6146b";
/// How long moto may take to start.
const MOTO_START_DEADLINE: Duration = Duration::from_secs(60);

/// A running moto and the watchdog that kills it when this process ends.
struct Moto {
    endpoint: String,
    _server: Child,
    _watchdog: Child,
    _watchdog_stdin: ChildStdin,
}

static MOTO: OnceLock<Result<Mutex<Moto>, String>> = OnceLock::new();

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Where `moto_server` is: `$MOTO_SERVER`, else `$MOTO_VENV/bin/moto_server`, else the venv that
/// `scripts/moto/setup.sh` creates.
fn moto_binary() -> Result<PathBuf, String> {
    let path = match (std::env::var_os("MOTO_SERVER"), std::env::var_os("MOTO_VENV")) {
        (Some(server), _) => PathBuf::from(server),
        (None, Some(venv)) => PathBuf::from(venv).join("bin/moto_server"),
        (None, None) => workspace_root().join(".venv-moto/bin/moto_server"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "moto_server not found at {}: run scripts/moto/setup.sh (make test-deps)",
            path.display()
        ))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Whether moto answers HTTP on `port`.
fn answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

fn start_moto() -> Result<Mutex<Moto>, String> {
    let binary = moto_binary()?;
    let mut last_error = String::new();
    for _ in 0..3 {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("moto-{port}.log"));
        let log_file = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let mut server = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        // The watchdog reads its stdin, which only this process holds: when the test process
        // ends (even killed), the pipe closes, `read` returns, and moto is killed.
        let mut watchdog = Command::new("sh")
            .args(["-c", "read -r _ ; kill \"$1\" 2>/dev/null", "moto-watchdog"])
            .arg(server.id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start the moto watchdog: {e}"))?;
        let watchdog_stdin = watchdog.stdin.take().ok_or("watchdog stdin")?;
        let deadline = Instant::now() + MOTO_START_DEADLINE;
        loop {
            if answers(port) {
                return Ok(Mutex::new(Moto {
                    endpoint: format!("http://127.0.0.1:{port}"),
                    _server: server,
                    _watchdog: watchdog,
                    _watchdog_stdin: watchdog_stdin,
                }));
            }
            if let Ok(Some(status)) = server.try_wait() {
                last_error = format!(
                    "moto_server exited with {status} (log: {}): {}",
                    log.display(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                break;
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                last_error = format!(
                    "moto_server did not answer within {MOTO_START_DEADLINE:?} (log: {})",
                    log.display()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(watchdog_stdin);
        let _ = watchdog.wait();
        let _ = server.wait();
    }
    Err(last_error)
}

/// The endpoint of this process's moto, started on first use. Panics with the setup hint when
/// moto is not installed.
pub fn moto_endpoint() -> String {
    match MOTO.get_or_init(start_moto) {
        Ok(moto) => moto.lock().expect("moto lock").endpoint.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A cluster name no other test of this process uses.
pub fn unique_cluster(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An SDK configuration for moto at `endpoint` with static credentials, built like the
/// provider's own (so tests go through the same HTTP client, retry and timeout settings).
pub async fn sdk_config(config: &AwsConfig) -> aws_config::SdkConfig {
    config
        .sdk_loader()
        .expect("valid settings")
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .load()
        .await
}

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
    /// Clients for this process's moto.
    pub async fn connect() -> Self {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(moto_endpoint())
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

    /// ELBv2 resources (load balancers and target groups) tagged for `cluster`.
    pub async fn tagged_resources(&self, cluster: &str) -> (Vec<String>, Vec<String>) {
        let lbs: Vec<String> = self
            .elb
            .describe_load_balancers()
            .send()
            .await
            .expect("DescribeLoadBalancers")
            .load_balancers()
            .iter()
            .filter_map(|l| l.load_balancer_arn().map(str::to_owned))
            .collect();
        let tgs: Vec<String> = match self.elb.describe_target_groups().send().await {
            Ok(out) => out
                .target_groups()
                .iter()
                .filter_map(|g| g.target_group_arn().map(str::to_owned))
                .collect(),
            Err(_) => Vec::new(),
        };
        let key = format!("kubernetes.io/cluster/{cluster}");
        let lbs = self.tagged_with(&lbs, &key).await;
        let tgs = self.tagged_with(&tgs, &key).await;
        (lbs, tgs)
    }

    async fn tagged_with(&self, arns: &[String], key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for chunk in arns.chunks(20) {
            let tags = self
                .elb
                .describe_tags()
                .set_resource_arns(Some(chunk.to_vec()))
                .send()
                .await
                .expect("DescribeTags");
            for d in tags.tag_descriptions() {
                if d.tags().iter().any(|t| t.key() == Some(key)) {
                    out.push(d.resource_arn().unwrap_or_default().to_owned());
                }
            }
        }
        out
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
    /// of both types tagged for the cluster, target groups tagged for it, security groups other
    /// than the workers' (and the VPC's default), and the workers' ingress rules.
    pub async fn census(&self, network: &Network) -> Census {
        let (nlbs, target_groups) = self.tagged_resources(&network.cluster).await;
        let key = format!("kubernetes.io/cluster/{}", network.cluster);
        let names: Vec<String> = self
            .classic
            .describe_load_balancers()
            .send()
            .await
            .expect("DescribeLoadBalancers (classic)")
            .load_balancer_descriptions()
            .iter()
            .filter_map(|d| d.load_balancer_name().map(str::to_owned))
            .collect();
        let mut classic = Vec::new();
        for chunk in names.chunks(20) {
            let tags = self
                .classic
                .describe_tags()
                .set_load_balancer_names(Some(chunk.to_vec()))
                .send()
                .await
                .expect("DescribeTags (classic)");
            for d in tags.tag_descriptions() {
                if d.tags().iter().any(|t| t.key() == key) {
                    classic.push(d.load_balancer_name().unwrap_or_default().to_owned());
                }
            }
        }
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

/// What a cluster's load balancers left in its network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Census {
    /// Classic ELBs tagged for the cluster, by name.
    pub classic: Vec<String>,
    /// NLBs tagged for the cluster, by ARN.
    pub nlbs: Vec<String>,
    /// Target groups tagged for the cluster, by ARN.
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

/// A provider on moto through a fault proxy, configured for `network`.
pub struct Harness {
    /// The provider under test.
    pub provider: Arc<AwsProvider>,
    /// The proxy in front of moto.
    pub proxy: FaultProxy,
    /// Direct clients.
    pub cloud: Cloud,
    /// The test's network.
    pub network: Network,
    /// The provider's settings.
    pub config: AwsConfig,
}

impl Harness {
    /// A fresh cluster, network and provider; `tune` adjusts the provider settings.
    pub async fn start(prefix: &str, tune: impl FnOnce(&mut AwsConfig)) -> Self {
        let cloud = Cloud::connect().await;
        let network = cloud.network(&unique_cluster(prefix)).await;
        let proxy = FaultProxy::start(&moto_endpoint()).await;
        let mut config = AwsConfig {
            region: REGION.into(),
            endpoint_url: Some(proxy.endpoint.clone()),
            route_table_id: Some(network.route_table_id.clone()),
            vpc_id: Some(network.vpc_id.clone()),
            subnet_ids: Vec::new(),
            // Failures fast: the SDK's retries are tested by the SDK.
            max_attempts: 1,
            ..AwsConfig::default()
        };
        tune(&mut config);
        let sdk = sdk_config(&config).await;
        let provider = AwsProvider::with_sdk_config(config.clone(), &sdk).expect("provider");
        Self {
            provider,
            proxy,
            cloud,
            network,
            config,
        }
    }

    /// Another provider with the same settings and nothing remembered: a restarted gateway, or
    /// another replica.
    pub async fn fresh_provider(&self, tune: impl FnOnce(&mut AwsConfig)) -> Arc<AwsProvider> {
        let mut config = self.config.clone();
        tune(&mut config);
        let sdk = sdk_config(&config).await;
        AwsProvider::with_sdk_config(config, &sdk).expect("provider")
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.network.cluster
    }
}
