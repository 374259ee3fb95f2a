//! AWS state exactly as cloud-provider-aws (v1.36, `pkg/providers/v1`) builds it for a Service:
//! the same calls in the same order with the same parameters, names, descriptions and tags, so
//! a migration test starts from what a cluster moving off cloud-provider-aws really has.
//!
//! Written from the behaviour upstream documents and its call sequences
//! (`shared/reference/cloud-provider-aws.md` §2, §3, §6), independently of the provider under
//! test: a name or a hash computed here is not taken from the code it checks.

use aws_sdk_ec2::types::{IpPermission, IpRange, UserIdGroupPair};
use aws_sdk_elasticloadbalancing::types::{
    AccessLog, ConnectionDraining, ConnectionSettings, CrossZoneLoadBalancing, HealthCheck,
    Instance as ElbInstance, Listener as ClassicListener, LoadBalancerAttributes, Tag as ClassicTag,
};
use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, Certificate, LoadBalancerTypeEnum, ProtocolEnum, SubnetMapping,
    Tag as NetworkTag, TargetDescription, TargetTypeEnum,
};
use sha1::{Digest, Sha1};

use crate::{Census, Cloud, Instance, Network};

/// Who the cluster is in upstream's tags.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `KubernetesClusterID` (or `KubernetesClusterTag`).
    pub cluster_id: String,
    /// Legacy mode (`KubernetesClusterTag` set): `KubernetesCluster=<id>` written as well.
    pub legacy: bool,
}

impl Identity {
    /// Upstream's `buildTags(owned, extra)`.
    fn owned_tags(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let mut tags = extra.to_vec();
        tags.push((
            format!("kubernetes.io/cluster/{}", self.cluster_id),
            "owned".into(),
        ));
        if self.legacy {
            tags.push(("KubernetesCluster".into(), self.cluster_id.clone()));
        }
        tags
    }

    /// A load balancer's (and its target groups' and listeners') tags.
    fn load_balancer_tags(&self, svc: &Service) -> Vec<(String, String)> {
        self.owned_tags(&[(
            "kubernetes.io/service-name".into(),
            format!("{}/{}", svc.namespace, svc.name),
        )])
    }
}

/// One Service port.
#[derive(Debug, Clone, Copy)]
pub struct Port {
    /// `port`.
    pub port: u16,
    /// `nodePort`.
    pub node_port: u16,
    /// Listed in `aws-load-balancer-ssl-ports` (with `aws-load-balancer-ssl-cert` set): a TLS
    /// listener on an NLB.
    pub tls: bool,
}

/// A `type: LoadBalancer` Service as upstream reads it (policy Cluster, TCP).
#[derive(Debug, Clone)]
pub struct Service {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.ports`.
    pub ports: Vec<Port>,
    /// `spec.loadBalancerSourceRanges`; empty means `0.0.0.0/0`.
    pub source_ranges: Vec<String>,
    /// `aws-load-balancer-ssl-cert`.
    pub ssl_cert: Option<String>,
}

impl Service {
    /// `cloudprovider.DefaultLoadBalancerName`: `a` + the UID without dashes, cut to 32.
    pub fn load_balancer_name(&self) -> String {
        let mut name: String = format!("a{}", self.uid).chars().filter(|c| *c != '-').collect();
        name.truncate(32);
        name
    }

    fn client_cidrs(&self) -> Vec<String> {
        if self.source_ranges.is_empty() {
            vec!["0.0.0.0/0".into()]
        } else {
            self.source_ranges.clone()
        }
    }
}

/// What upstream made for a Service.
#[derive(Debug, Clone)]
pub struct Built {
    /// The load balancer's name.
    pub name: String,
    /// Its DNS name: the Service's ingress hostname.
    pub dns_name: String,
    /// The Classic ELB's own security group.
    pub security_group: Option<String>,
    /// The NLB's ARN.
    pub arn: Option<String>,
    /// The NLB's target groups, by ARN.
    pub target_groups: Vec<String>,
}

impl Census {
    /// This census without what one Service's Classic ELB made: the ELB, its group and the
    /// node rule from that group.
    pub fn without_classic(&self, built: &Built) -> Census {
        let group = built.security_group.as_deref().expect("the ELB's group");
        let mut c = self.clone();
        c.classic.retain(|n| *n != built.name);
        c.security_groups.retain(|g| !g.starts_with(group));
        c.node_rules.retain(|r| !r.ends_with(group));
        c
    }
}

/// Upstream's `buildTargetGroupName`: `k8s-<ns:8>-<name:8>-<10 hex of SHA-1>` over the cluster
/// ID, namespace, name, port, node port, target protocol, target type, health-check protocol
/// and interval, concatenated without separators.
pub fn target_group_name(
    cluster_id: &str,
    svc: &Service,
    port: Port,
    protocol: &str,
    health_protocol: &str,
    interval: i32,
) -> String {
    let mut h = Sha1::new();
    h.update(
        format!(
            "{cluster_id}{}{}{}{}{protocol}instance{health_protocol}{interval}",
            svc.namespace, svc.name, port.port, port.node_port
        )
        .as_bytes(),
    );
    let hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let clean =
        |s: &str, n: usize| -> String { s.chars().filter(|c| c.is_ascii_alphanumeric()).take(n).collect() };
    format!(
        "k8s-{}-{}-{}",
        clean(&svc.namespace, 8),
        clean(&svc.name, 8),
        &hash[..10]
    )
}

impl Cloud {
    /// Tags `resources` for cluster `cluster_id` only the legacy way (`KubernetesCluster=<id>`,
    /// no `kubernetes.io/cluster/<id>`), as clusters older than that key have them.
    pub async fn tag_legacy_only(&self, resources: &[String], cluster_id: &str) {
        self.ec2
            .delete_tags()
            .set_resources(Some(resources.to_vec()))
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(format!("kubernetes.io/cluster/{cluster_id}"))
                    .build(),
            )
            .send()
            .await
            .expect("DeleteTags");
        self.ec2
            .create_tags()
            .set_resources(Some(resources.to_vec()))
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key("KubernetesCluster")
                    .value(cluster_id)
                    .build(),
            )
            .send()
            .await
            .expect("CreateTags");
    }

    /// A Classic ELB as upstream's `ensureLoadBalancer` makes it for `svc` on `instances` (all in
    /// the network's node group), in the public subnets.
    pub async fn classic_as_upstream(
        &self,
        network: &Network,
        id: &Identity,
        svc: &Service,
        instances: &[Instance],
    ) -> Built {
        let name = svc.load_balancer_name();
        // ensureSecurityGroup: by name in the VPC, then its cluster tags.
        let group = self
            .ec2
            .create_security_group()
            .group_name(format!("k8s-elb-{name}"))
            .description(format!(
                "Security group for Kubernetes ELB {name} ({}/{})",
                svc.namespace, svc.name
            ))
            .vpc_id(&network.vpc_id)
            .send()
            .await
            .expect("CreateSecurityGroup")
            .group_id()
            .expect("group ID")
            .to_owned();
        let mut tagging = self.ec2.create_tags().resources(&group);
        for (k, v) in id.owned_tags(&[]) {
            tagging = tagging.tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build());
        }
        tagging.send().await.expect("CreateTags");
        // setSecurityGroupIngress: each port from each source range, and ICMP 3/4.
        let ranges: Vec<IpRange> = svc
            .client_cidrs()
            .iter()
            .map(|c| IpRange::builder().cidr_ip(c).build())
            .collect();
        let mut permissions: Vec<IpPermission> = svc
            .ports
            .iter()
            .map(|p| {
                IpPermission::builder()
                    .ip_protocol("tcp")
                    .from_port(i32::from(p.port))
                    .to_port(i32::from(p.port))
                    .set_ip_ranges(Some(ranges.clone()))
                    .build()
            })
            .collect();
        permissions.push(
            IpPermission::builder()
                .ip_protocol("icmp")
                .from_port(3)
                .to_port(4)
                .set_ip_ranges(Some(ranges.clone()))
                .build(),
        );
        self.ec2
            .authorize_security_group_ingress()
            .group_id(&group)
            .set_ip_permissions(Some(permissions))
            .send()
            .await
            .expect("AuthorizeSecurityGroupIngress (ELB group)");

        let mut create = self
            .classic
            .create_load_balancer()
            .load_balancer_name(&name)
            .set_subnets(Some(network.subnets.clone()))
            .security_groups(&group);
        for p in &svc.ports {
            create = create.listeners(
                ClassicListener::builder()
                    .protocol("tcp")
                    .load_balancer_port(i32::from(p.port))
                    .instance_protocol("tcp")
                    .instance_port(i32::from(p.node_port))
                    .build()
                    .expect("listener"),
            );
        }
        for (k, v) in id.load_balancer_tags(svc) {
            create = create.tags(ClassicTag::builder().key(k).value(v).build().expect("tag"));
        }
        let dns_name = create
            .send()
            .await
            .expect("CreateLoadBalancer (classic)")
            .dns_name()
            .expect("DNS name")
            .to_owned();
        // Attributes: the full desired struct.
        self.classic
            .modify_load_balancer_attributes()
            .load_balancer_name(&name)
            .load_balancer_attributes(
                LoadBalancerAttributes::builder()
                    .access_log(AccessLog::builder().enabled(false).build())
                    .connection_draining(ConnectionDraining::builder().enabled(false).build())
                    .connection_settings(
                        ConnectionSettings::builder()
                            .idle_timeout(60)
                            .build()
                            .expect("settings"),
                    )
                    .cross_zone_load_balancing(CrossZoneLoadBalancing::builder().enabled(false).build())
                    .build(),
            )
            .send()
            .await
            .expect("ModifyLoadBalancerAttributes");
        let first = svc.ports.first().expect("a port");
        self.classic
            .configure_health_check()
            .load_balancer_name(&name)
            .health_check(
                HealthCheck::builder()
                    .target(format!("TCP:{}", first.node_port))
                    .healthy_threshold(2)
                    .unhealthy_threshold(6)
                    .timeout(5)
                    .interval(10)
                    .build()
                    .expect("health check"),
            )
            .send()
            .await
            .expect("ConfigureHealthCheck");
        // updateInstanceSecurityGroupsForLoadBalancer: all traffic from the ELB's group.
        self.ec2
            .authorize_security_group_ingress()
            .group_id(&network.node_group)
            .ip_permissions(
                IpPermission::builder()
                    .ip_protocol("-1")
                    .user_id_group_pairs(UserIdGroupPair::builder().group_id(&group).build())
                    .build(),
            )
            .send()
            .await
            .expect("AuthorizeSecurityGroupIngress (node group)");
        let mut register = self
            .classic
            .register_instances_with_load_balancer()
            .load_balancer_name(&name);
        for i in instances {
            register = register.instances(ElbInstance::builder().instance_id(&i.id).build());
        }
        register.send().await.expect("RegisterInstancesWithLoadBalancer");
        Built {
            name,
            dns_name,
            security_group: Some(group),
            arn: None,
            target_groups: Vec::new(),
        }
    }

    /// An NLB as upstream's `ensureLoadBalancerv2` makes it for `svc` on `instances`, in the
    /// public subnets, and its node rules in the network's node group.
    pub async fn nlb_as_upstream(
        &self,
        network: &Network,
        id: &Identity,
        svc: &Service,
        instances: &[Instance],
    ) -> Built {
        let name = svc.load_balancer_name();
        let tags: Vec<NetworkTag> = id
            .load_balancer_tags(svc)
            .into_iter()
            .map(|(k, v)| NetworkTag::builder().key(k).value(v).build())
            .collect();
        let mut create = self
            .elb
            .create_load_balancer()
            .name(&name)
            .r#type(LoadBalancerTypeEnum::Network)
            .set_tags(Some(tags.clone()));
        for s in &network.subnets {
            create = create.subnet_mappings(SubnetMapping::builder().subnet_id(s).build());
        }
        let lb = create.send().await.expect("CreateLoadBalancer (network)");
        let lb = lb.load_balancers().first().expect("the NLB");
        let arn = lb.load_balancer_arn().expect("ARN").to_owned();
        let dns_name = lb.dns_name().expect("DNS name").to_owned();
        let mut target_groups = Vec::new();
        for p in &svc.ports {
            // createListenerV2: the target group (Cluster policy: TCP traffic-port every 30 s,
            // 3/3), its targets, then the listener.
            let tg = self
                .elb
                .create_target_group()
                .name(target_group_name(&id.cluster_id, svc, *p, "TCP", "TCP", 30))
                .protocol(ProtocolEnum::Tcp)
                .port(i32::from(p.node_port))
                .vpc_id(&network.vpc_id)
                .target_type(TargetTypeEnum::Instance)
                .health_check_protocol(ProtocolEnum::Tcp)
                .health_check_port("traffic-port")
                .health_check_interval_seconds(30)
                .healthy_threshold_count(3)
                .unhealthy_threshold_count(3)
                .set_tags(Some(tags.clone()))
                .send()
                .await
                .expect("CreateTargetGroup");
            let tg_arn = tg.target_groups()[0]
                .target_group_arn()
                .expect("target group ARN")
                .to_owned();
            let mut register = self.elb.register_targets().target_group_arn(&tg_arn);
            for i in instances {
                register = register.targets(
                    TargetDescription::builder()
                        .id(&i.id)
                        .port(i32::from(p.node_port))
                        .build(),
                );
            }
            register.send().await.expect("RegisterTargets");
            let mut listener = self
                .elb
                .create_listener()
                .load_balancer_arn(&arn)
                .port(i32::from(p.port))
                .default_actions(
                    Action::builder()
                        .r#type(ActionTypeEnum::Forward)
                        .target_group_arn(&tg_arn)
                        .build(),
                )
                .set_tags(Some(tags.clone()));
            listener = match (&svc.ssl_cert, p.tls) {
                (Some(cert), true) => listener
                    .protocol(ProtocolEnum::Tls)
                    .certificates(Certificate::builder().certificate_arn(cert).build()),
                _ => listener.protocol(ProtocolEnum::Tcp),
            };
            listener.send().await.expect("CreateListener");
            target_groups.push(tg_arn);
        }
        // updateInstanceSecurityGroupsForNLB: client rules on the node ports from the source
        // ranges; health rules from the subnets' CIDRs unless the clients are everyone on the
        // same ports; then the MTU rules for every client CIDR.
        let client_cidrs = svc.client_cidrs();
        let described = |what: &str| format!("kubernetes.io/rule/nlb/{what}={name}");
        let rule = |node_port: u16, cidr: &str, what: &str| {
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(i32::from(node_port))
                .to_port(i32::from(node_port))
                .ip_ranges(
                    IpRange::builder()
                        .cidr_ip(cidr)
                        .description(described(what))
                        .build(),
                )
                .build()
        };
        let mut permissions = Vec::new();
        for p in &svc.ports {
            permissions.extend(client_cidrs.iter().map(|c| rule(p.node_port, c, "client")));
        }
        if client_cidrs != ["0.0.0.0/0"] {
            for p in &svc.ports {
                permissions.extend(
                    network
                        .subnet_cidrs
                        .iter()
                        .map(|c| rule(p.node_port, c, "health")),
                );
            }
        }
        for c in &client_cidrs {
            permissions.push(
                IpPermission::builder()
                    .ip_protocol("icmp")
                    .from_port(3)
                    .to_port(4)
                    .ip_ranges(
                        IpRange::builder()
                            .cidr_ip(c)
                            .description("kubernetes.io/rule/nlb/mtu")
                            .build(),
                    )
                    .build(),
            );
        }
        // Upstream authorizes what the group lacks; EC2 tells rules apart without their
        // descriptions, so a rule another NLB already added (the MTU rule) is kept as it is.
        for permission in permissions {
            let out = self
                .ec2
                .authorize_security_group_ingress()
                .group_id(&network.node_group)
                .ip_permissions(permission)
                .send()
                .await;
            if let Err(e) = out {
                let duplicate = e
                    .as_service_error()
                    .and_then(|s| aws_sdk_ec2::error::ProvideErrorMetadata::code(s))
                    == Some("InvalidPermission.Duplicate");
                assert!(duplicate, "AuthorizeSecurityGroupIngress (NLB node rules): {e:?}");
            }
        }
        Built {
            name,
            dns_name,
            security_group: None,
            arn: Some(arn),
            target_groups,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_upstreams() {
        let svc = Service {
            uid: "5e3a0001-1b2c-4d5e-8f90-0123456789ab".into(),
            namespace: "default".into(),
            name: "web-app.v2".into(),
            ports: vec![],
            source_ranges: vec![],
            ssl_cert: None,
        };
        assert_eq!(svc.load_balancer_name(), "a5e3a00011b2c4d5e8f900123456789a");
        let tg = target_group_name(
            "c",
            &svc,
            Port {
                port: 80,
                node_port: 30080,
                tls: false,
            },
            "TCP",
            "TCP",
            30,
        );
        assert!(tg.starts_with("k8s-default-webappv2-"), "{tg}");
        assert_eq!(tg.len(), "k8s-default-webappv2-".len() + 10);
        // A row of upstream's TestBuildTargetGroupName (its empty health check hashes as "", 0).
        let svc = Service {
            namespace: "default".into(),
            name: "service-a".into(),
            ..svc
        };
        let port = Port {
            port: 80,
            node_port: 8080,
            tls: false,
        };
        assert_eq!(
            target_group_name("cluster-a", &svc, port, "TCP", "", 0),
            "k8s-default-servicea-7fa2e07508"
        );
    }
}
