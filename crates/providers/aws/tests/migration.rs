//! Adoption of what cloud-provider-aws built (issue 21): the AWS state made call for call as
//! upstream makes it (`aws_fixture::upstream`), then this provider converging the same
//! Services. Every AWS call goes through a recording proxy: converging makes **no** write and
//! keeps each DNS name; a changed Service is changed in place; a deleted one leaves nothing
//! upstream had made for it, and nothing else is touched. Needs `scripts/moto/setup.sh`.

mod support;

use aws_fixture::upstream::{self, Identity, Port};
use provider::{LoadBalancerNode, LoadBalancers, Protocol, Routes, ServicePort, ServiceSpec};
use provider_aws::annotations as a;
use support::{Harness, Instance};

/// An IAM server certificate: moto checks ACM certificates exist, not IAM ones.
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/web";

fn uid(n: u32) -> String {
    format!("7a1b{n:04x}-1b2c-4d5e-8f90-0123456789ab")
}

/// The Service as upstream saw it, and as it reaches this provider.
fn service(n: u32, ports: &[Port], nlb: bool) -> (upstream::Service, ServiceSpec) {
    let tls = ports.iter().any(|p| p.tls);
    let up = upstream::Service {
        uid: uid(n),
        namespace: "shop".into(),
        name: format!("front-{n}"),
        ports: ports.to_vec(),
        source_ranges: Vec::new(),
        ssl_cert: tls.then(|| CERT.to_owned()),
    };
    let mut annotations = std::collections::BTreeMap::new();
    if nlb {
        annotations.insert(a::TYPE.to_owned(), "nlb".to_owned());
    }
    if tls {
        annotations.insert(a::SSL_CERT.to_owned(), CERT.to_owned());
        let tls_ports: Vec<String> = ports
            .iter()
            .filter(|p| p.tls)
            .map(|p| p.port.to_string())
            .collect();
        annotations.insert(a::SSL_PORTS.to_owned(), tls_ports.join(","));
    }
    let ours = ServiceSpec {
        uid: up.uid.clone(),
        namespace: up.namespace.clone(),
        name: up.name.clone(),
        ports: ports
            .iter()
            .map(|p| ServicePort {
                name: format!("p{}", p.port),
                protocol: Protocol::Tcp,
                port: p.port,
                node_port: p.node_port,
            })
            .collect(),
        annotations,
        ..Default::default()
    };
    (up, ours)
}

fn port(port: u16, node_port: u16) -> Port {
    Port {
        port,
        node_port,
        tls: false,
    }
}

fn nodes(instances: &[Instance]) -> Vec<LoadBalancerNode> {
    instances
        .iter()
        .map(|i| LoadBalancerNode {
            name: i.node_name.clone(),
            provider_id: i.provider_id.clone(),
            ..Default::default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_elb_and_nlbs_built_by_upstream_are_adopted_without_a_write() {
    let h = Harness::start("adopt", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let id = Identity {
        cluster_id: cluster.clone(),
        legacy: false,
    };
    let instances = [
        h.cloud.run_instance(&h.network, 0).await,
        h.cloud.run_instance(&h.network, 1).await,
    ];
    let (clb_up, clb) = service(1, &[port(80, 30180), port(443, 30543)], false);
    let (nlb_up, nlb) = service(
        2,
        &[
            port(80, 30280),
            Port {
                port: 443,
                node_port: 30643,
                tls: true,
            },
        ],
        true,
    );
    let (plain_up, plain) = service(3, &[port(8080, 30380)], true);
    let built = [
        h.cloud
            .classic_as_upstream(&h.network, &id, &clb_up, &instances)
            .await,
        h.cloud
            .nlb_as_upstream(&h.network, &id, &nlb_up, &instances)
            .await,
        h.cloud
            .nlb_as_upstream(&h.network, &id, &plain_up, &instances)
            .await,
    ];
    let before = h.cloud.census(&h.network).await;
    h.proxy.reset_counts();

    for (svc, b) in [&clb, &nlb, &plain].into_iter().zip(&built) {
        let status = h
            .provider
            .ensure_load_balancer(&cluster, svc, &nodes(&instances))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        assert_eq!(status.ingress[0].hostname, b.dns_name, "{}", svc.name);
        assert_eq!(
            h.proxy.writes(),
            Vec::<String>::new(),
            "{}: {:?}",
            svc.name,
            h.proxy.bodies()
        );
    }
    assert_eq!(h.cloud.census(&h.network).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_adoption_a_port_change_is_made_in_place_and_a_deletion_removes_what_upstream_made() {
    let h = Harness::start("adopt-edit", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let id = Identity {
        cluster_id: cluster.clone(),
        legacy: false,
    };
    let instances = [h.cloud.run_instance(&h.network, 0).await];
    let (clb_up, clb) = service(11, &[port(80, 31180)], false);
    let (nlb_up, mut nlb) = service(12, &[port(80, 31280), port(81, 31281)], true);
    let clb_built = h
        .cloud
        .classic_as_upstream(&h.network, &id, &clb_up, &instances)
        .await;
    let nlb_built = h
        .cloud
        .nlb_as_upstream(&h.network, &id, &nlb_up, &instances)
        .await;
    for svc in [&clb, &nlb] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &nodes(&instances))
            .await
            .expect("adopted");
    }
    assert_eq!(h.proxy.writes(), Vec::<String>::new());

    // One port moves: the same NLB, the same hostname, the other port's target group kept.
    nlb.ports[1].port = 8081;
    nlb.ports[1].node_port = 31299;
    let status = h
        .provider
        .ensure_load_balancer(&cluster, &nlb, &nodes(&instances))
        .await
        .expect("port change");
    assert_eq!(status.ingress[0].hostname, nlb_built.dns_name);
    assert!(!h.proxy.writes().is_empty());
    let arn = nlb_built.arn.as_deref().expect("ARN");
    let groups = h
        .cloud
        .elb
        .describe_target_groups()
        .load_balancer_arn(arn)
        .send()
        .await
        .expect("target groups");
    let arns: Vec<&str> = groups
        .target_groups()
        .iter()
        .filter_map(|g| g.target_group_arn())
        .collect();
    assert!(arns.contains(&nlb_built.target_groups[0].as_str()), "{arns:?}");
    assert_eq!(arns.len(), 2, "{arns:?}");
    let listeners = h
        .cloud
        .elb
        .describe_listeners()
        .load_balancer_arn(arn)
        .send()
        .await
        .expect("listeners");
    let mut ports: Vec<i32> = listeners.listeners().iter().filter_map(|l| l.port()).collect();
    ports.sort();
    assert_eq!(ports, [80, 8081]);
    // The node rules follow the node ports: 31299 in, 31281 out.
    let rules = h.cloud.census(&h.network).await.node_rules;
    assert!(
        rules.iter().any(|r| r.starts_with("tcp 31299-31299 0.0.0.0/0")),
        "{rules:?}"
    );
    assert!(
        !rules.iter().any(|r| r.starts_with("tcp 31281-31281")),
        "{rules:?}"
    );

    // The Classic ELB's Service goes: its ELB, group and node rule go, nothing else.
    let before = h.cloud.census(&h.network).await;
    h.provider
        .ensure_load_balancer_deleted(&cluster, &clb)
        .await
        .expect("deleted");
    assert_eq!(
        h.cloud.census(&h.network).await,
        before.without_classic(&clb_built)
    );
}

/// A cluster set up before `kubernetes.io/cluster/<id>`: its nodes and their group carry only
/// `KubernetesCluster=<id>`, upstream runs with `KubernetesClusterTag` (both tags on what it
/// makes), and the cluster ID is not the controllers' `--cluster-name`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_tagged_cluster_is_adopted_by_its_cluster_id_and_cleaned_up() {
    let h = Harness::start("adopt-legacy", |_| {}).await;
    let cluster_id = h.cluster().to_owned();
    let provider = h
        .fresh_provider(|c| {
            c.cluster_id = Some(cluster_id.clone());
            c.legacy_cluster_tag = true;
        })
        .await;
    let instances = [h.cloud.run_instance(&h.network, 0).await];
    let mut resources: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    resources.push(h.network.node_group.clone());
    h.cloud.tag_legacy_only(&resources, &cluster_id).await;
    let id = Identity {
        cluster_id: cluster_id.clone(),
        legacy: true,
    };
    let (clb_up, clb) = service(21, &[port(80, 32180)], false);
    let (nlb_up, nlb) = service(22, &[port(80, 32280)], true);
    let clb_built = h
        .cloud
        .classic_as_upstream(&h.network, &id, &clb_up, &instances)
        .await;
    let nlb_built = h
        .cloud
        .nlb_as_upstream(&h.network, &id, &nlb_up, &instances)
        .await;
    h.proxy.reset_counts();

    // The controllers' default --cluster-name, not the cluster ID.
    for (svc, b) in [(&clb, &clb_built), (&nlb, &nlb_built)] {
        let status = provider
            .ensure_load_balancer("kubernetes", svc, &nodes(&instances))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", svc.name));
        assert_eq!(status.ingress[0].hostname, b.dns_name);
    }
    assert_eq!(h.proxy.writes(), Vec::<String>::new(), "{:?}", h.proxy.bodies());

    let before = h.cloud.census(&h.network).await;
    provider
        .ensure_load_balancer_deleted("kubernetes", &clb)
        .await
        .expect("deleted");
    assert_eq!(
        h.cloud.census(&h.network).await,
        before.without_classic(&clb_built)
    );
    provider
        .ensure_load_balancer_deleted("kubernetes", &nlb)
        .await
        .expect("deleted");
    let after = h.cloud.census(&h.network).await;
    assert!(
        after.classic.is_empty() && after.nlbs.is_empty() && after.target_groups.is_empty(),
        "{after:?}"
    );
    assert_eq!(
        after.node_rules,
        Vec::<String>::new(),
        "upstream's NLB rules revoked"
    );
}

/// The calls of a dry run's woulds.
fn calls_of(woulds: &[provider::dry_run::Would]) -> Vec<&str> {
    woulds.iter().map(|w| w.call.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_makes_no_write_and_lists_every_write_the_real_call_would_make() {
    let h = Harness::start("dry-run", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let id = Identity {
        cluster_id: cluster.clone(),
        legacy: false,
    };
    let instances = [h.cloud.run_instance(&h.network, 0).await];
    let (clb_up, clb) = service(31, &[port(80, 31380)], false);
    let (nlb_up, mut nlb) = service(32, &[port(80, 31480)], true);
    h.cloud
        .classic_as_upstream(&h.network, &id, &clb_up, &instances)
        .await;
    h.cloud
        .nlb_as_upstream(&h.network, &id, &nlb_up, &instances)
        .await;
    let before = h.cloud.census(&h.network).await;
    h.proxy.reset_counts();

    // Adopted as it stands: nothing would change.
    for svc in [&clb, &nlb] {
        let (status, woulds) =
            provider::dry_run::scope(h.provider.ensure_load_balancer(&cluster, svc, &nodes(&instances)))
                .await;
        assert!(!status.expect("ensure").ingress.is_empty());
        assert_eq!(woulds, [], "{}", svc.name);
    }

    // A port change: what would change, and nothing changed.
    nlb.ports[0].node_port = 31481;
    let (status, woulds) = provider::dry_run::scope(h.provider.ensure_load_balancer(
        &cluster,
        &nlb,
        &nodes(&instances),
    ))
    .await;
    status.expect("dry-run ensure");
    let calls = calls_of(&woulds);
    for call in [
        "CreateTargetGroup",
        "RegisterTargets",
        "ModifyListener",
        "AuthorizeSecurityGroupIngress",
    ] {
        assert!(calls.contains(&call), "{call} in {calls:?}");
    }
    assert!(woulds.iter().all(|w| w.provider == "aws"));

    // A new Service: its creation, down to the rules on its group-to-be.
    let (_, new) = service(33, &[port(443, 31580)], false);
    let (status, woulds) = provider::dry_run::scope(h.provider.ensure_load_balancer(
        &cluster,
        &new,
        &nodes(&instances),
    ))
    .await;
    assert_eq!(status.expect("dry-run creation"), Default::default());
    let calls = calls_of(&woulds);
    assert_eq!(
        &calls[..2],
        ["CreateSecurityGroup", "AuthorizeSecurityGroupIngress"],
        "{calls:?}"
    );
    assert!(calls.contains(&"CreateLoadBalancer"), "{calls:?}");
    assert!(
        woulds
            .iter()
            .any(|w| w.call == "CreateLoadBalancer" && w.request.contains("(new security group k8s-elb-")),
        "{woulds:?}"
    );

    // A deletion: what would go, and nothing went.
    let (done, woulds) =
        provider::dry_run::scope(h.provider.ensure_load_balancer_deleted(&cluster, &clb)).await;
    done.expect("dry-run deletion");
    let calls = calls_of(&woulds);
    for call in [
        "RevokeSecurityGroupIngress",
        "DeleteLoadBalancer",
        "DeleteSecurityGroup",
    ] {
        assert!(calls.contains(&call), "{call} in {calls:?}");
    }

    assert_eq!(h.proxy.writes(), Vec::<String>::new());
    assert_eq!(h.cloud.census(&h.network).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_routes_lists_the_route_calls_and_changes_no_table() {
    let h = Harness::start("dry-run-routes", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let target = h.cloud.run_instance(&h.network, 0).await;
    let route = provider::Route {
        target_node: target.node_name.clone(),
        target_provider_id: target.provider_id.clone(),
        destination_cidr: "100.96.9.0/24".into(),
        ..provider::Route::default()
    };
    let (created, woulds) = provider::dry_run::scope(h.provider.create_route(&cluster, "uid", &route)).await;
    created.expect("dry-run create");
    assert_eq!(calls_of(&woulds), ["ModifyInstanceAttribute", "CreateRoute"]);
    assert!(woulds[1].request.contains(&target.id), "{woulds:?}");
    assert!(h.provider.list_routes(&cluster).await.expect("list").is_empty());

    h.provider
        .create_route(&cluster, "uid", &route)
        .await
        .expect("create");
    let (again, woulds) = provider::dry_run::scope(h.provider.create_route(&cluster, "uid", &route)).await;
    again.expect("dry-run of a route that exists");
    assert_eq!(woulds, [], "nothing to change");
    let (deleted, woulds) = provider::dry_run::scope(h.provider.delete_route(&cluster, &route)).await;
    deleted.expect("dry-run delete");
    assert_eq!(calls_of(&woulds), ["DeleteRoute"]);
    assert_eq!(h.provider.list_routes(&cluster).await.expect("list").len(), 1);
    assert_eq!(
        h.proxy.writes(),
        ["ModifyInstanceAttribute", "CreateRoute"],
        "only the real create reached AWS"
    );
}
