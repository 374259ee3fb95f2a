//! The AWS provider's load balancers against moto, in a VPC laid out the way cloud-provider-aws
//! and EKS clusters are (see `support::Cloud::network`): Classic ELBs by default, NLBs on
//! request, their security groups and the nodes' rules, what an unchanged sync costs, and that
//! deleting a Service leaves nothing made for it. Every AWS call goes through a recording proxy.
//! Needs `scripts/moto/setup.sh`.
//!
//! Where moto differs from AWS (it never runs health checks, answers a Classic listener's instance
//! protocol as its front protocol, cannot modify a listener to TLS or UDP, and has only standard
//! zones), the planners' unit tests cover the behaviour instead.

mod support;

use std::collections::BTreeMap;

use provider::{
    ExternalTrafficPolicy, LoadBalancerNode, LoadBalancerObservation, LoadBalancerRead, LoadBalancers,
    Protocol, ProviderError, ServicePort, ServiceSpec,
};
use provider_aws::{annotations as a, converged::MARKER_TAG};
use support::{Harness, Instance};

/// An IAM server certificate: moto checks ACM certificates exist, not IAM ones.
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/web";

fn uid(n: u32) -> String {
    format!("5e3a{n:04x}-1b2c-4d5e-8f90-0123456789ab")
}

fn port(name: &str, protocol: Protocol, port: u16, node_port: u16) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol,
        port,
        node_port,
    }
}

fn service(n: u32, annotations: &[(&str, &str)]) -> ServiceSpec {
    ServiceSpec {
        uid: uid(n),
        namespace: "default".into(),
        name: format!("web-{n}"),
        ports: vec![port("http", Protocol::Tcp, 80, 30080)],
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}

fn lb_node(i: &Instance) -> LoadBalancerNode {
    LoadBalancerNode {
        name: i.node_name.clone(),
        provider_id: i.provider_id.clone(),
        ..Default::default()
    }
}

/// The exact calls a sync made.
fn calls(h: &Harness) -> Vec<String> {
    h.proxy.actions()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_annotations_gets_a_classic_elb_with_its_group_and_the_nodes_rule() {
    let h = Harness::start("classic", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let b = h.cloud.run_instance(&h.network, 1).await;
    let svc = service(1, &[]);
    let name = h.provider.load_balancer_name(&cluster, &svc);

    let status = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a), lb_node(&b)])
        .await
        .expect("ensure");
    let described = h
        .cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await
        .expect("a Classic ELB");
    let elb = &described.load_balancer_descriptions()[0];
    assert_eq!(status.ingress[0].hostname, elb.dns_name().unwrap());
    assert_eq!(elb.scheme(), Some("internet-facing"));
    let mut subnets = elb.subnets().to_vec();
    subnets.sort();
    let mut public = h.network.subnets.clone();
    public.sort();
    assert_eq!(
        subnets, public,
        "the public subnets, one per zone, found untagged by cluster"
    );
    let listener = elb.listener_descriptions()[0].listener().unwrap();
    assert_eq!(
        (
            listener.protocol(),
            listener.load_balancer_port(),
            listener.instance_port()
        ),
        ("TCP", 80, 30080)
    );
    assert_eq!(elb.health_check().unwrap().target(), "TCP:30080");
    assert_eq!(h.cloud.backends(&name).await, {
        let mut v = vec![a.id.clone(), b.id.clone()];
        v.sort();
        v
    });
    // Its own group: exactly the Service's port and path-MTU ICMP from anywhere, tagged owned.
    let census = h.cloud.census(&h.network).await;
    let own = elb.security_groups()[0].clone();
    assert_eq!(census.security_groups, vec![format!("{own} k8s-elb-{name}")]);
    let group = h
        .cloud
        .ec2
        .describe_security_groups()
        .group_ids(&own)
        .send()
        .await
        .expect("the ELB's group");
    let group = &group.security_groups()[0];
    assert!(
        group
            .tags()
            .iter()
            .any(|t| t.key() == Some(&format!("kubernetes.io/cluster/{cluster}"))
                && t.value() == Some("owned"))
    );
    assert_eq!(
        group.description(),
        Some(format!("Security group for Kubernetes ELB {name} (default/web-1)").as_str())
    );
    let mut ingress: Vec<String> = group
        .ip_permissions()
        .iter()
        .flat_map(|p| {
            p.ip_ranges().iter().map(move |r| {
                format!(
                    "{} {}-{} {}",
                    p.ip_protocol().unwrap_or_default(),
                    p.from_port().unwrap_or_default(),
                    p.to_port().unwrap_or_default(),
                    r.cidr_ip().unwrap_or_default()
                )
            })
        })
        .collect();
    ingress.sort();
    assert_eq!(ingress, vec!["icmp 3-4 0.0.0.0/0", "tcp 80-80 0.0.0.0/0"]);
    // The nodes' group admits all traffic from it.
    assert_eq!(census.node_rules, vec![format!("-1 0-0 {own}")]);

    // Unchanged: two reads, no write (upstream: 9 reads and a write).
    h.proxy.reset_counts();
    let again = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a), lb_node(&b)])
        .await
        .expect("ensure again");
    assert_eq!(again, status);
    assert_eq!(calls(&h), vec!["DescribeLoadBalancers", "DescribeTags"]);

    // A node leaves: deregistered, nothing else touched.
    h.proxy.reset_counts();
    h.provider
        .update_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("update");
    assert_eq!(h.cloud.backends(&name).await, vec![a.id.clone()]);
    assert_eq!(
        h.proxy.writes(),
        vec!["DeregisterInstancesFromLoadBalancer"],
        "the change alone: the fingerprint does not cover the members"
    );

    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(
        h.cloud.census(&h.network).await.is_empty(),
        "{:?}",
        h.cloud.census(&h.network).await
    );
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_read_of_a_converged_load_balancer_writes_nothing() {
    // Upstream rewrites a Classic ELB's attributes on every sync (it compares AWS's whole answer
    // with a struct it never filled), an NLB's HTTP health checks and TLS policies too. With the
    // fast path off, every sync reads everything: still no write.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let h = Harness::start("fullread", |c| c.verify_period = std::time::Duration::ZERO).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let classic = service(2, &[(a::IDLE_TIMEOUT, "120"), (a::ADDITIONAL_TAGS, "team=web")]);
    let mut nlb = service(
        3,
        &[
            (a::TYPE, "nlb"),
            (a::SSL_CERT, CERT),
            (a::SSL_PORTS, "443"),
            (a::HC_PROTOCOL, "http"),
            (a::HC_PATH, "/ready"),
        ],
    );
    nlb.ports.push(port("https", Protocol::Tcp, 443, 30443));
    nlb.external_traffic_policy = ExternalTrafficPolicy::Local;
    nlb.health_check_node_port = 31999;
    for svc in [&classic, &nlb] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("ensure");
        h.proxy.reset_counts();
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("ensure again");
        assert_eq!(
            h.proxy.writes(),
            Vec::<String>::new(),
            "{}: {:?}",
            svc.name,
            calls(&h)
        );
        eprintln!(
            "full read of an unchanged {}: {} calls: {:?}",
            svc.name,
            calls(&h).len(),
            calls(&h)
        );
    }
    for svc in [&classic, &nlb] {
        h.provider
            .ensure_load_balancer_deleted(&cluster, svc)
            .await
            .expect("delete");
    }
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nlb_with_source_ranges_gets_exactly_those_rules_and_tls_on_one_port() {
    let h = Harness::start("nlb", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let mut svc = service(4, &[(a::TYPE, "nlb"), (a::SSL_CERT, CERT), (a::SSL_PORTS, "443")]);
    svc.ports.push(port("https", Protocol::Tcp, 443, 30443));
    svc.source_ranges = vec!["203.0.113.0/24".into()];
    let name = h.provider.load_balancer_name(&cluster, &svc);
    let status = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");

    let lb = h
        .cloud
        .elb
        .describe_load_balancers()
        .names(&name)
        .send()
        .await
        .expect("an NLB");
    let lb = &lb.load_balancers()[0];
    assert_eq!(status.ingress[0].hostname, lb.dns_name().unwrap());
    let listeners = h
        .cloud
        .elb
        .describe_listeners()
        .load_balancer_arn(lb.load_balancer_arn().unwrap())
        .send()
        .await
        .expect("listeners");
    let mut summary: Vec<(i32, String, Option<String>)> = listeners
        .listeners()
        .iter()
        .map(|l| {
            (
                l.port().unwrap(),
                l.protocol().unwrap().as_str().to_owned(),
                l.certificates()
                    .first()
                    .and_then(|c| c.certificate_arn())
                    .map(str::to_owned),
            )
        })
        .collect();
    summary.sort();
    assert_eq!(
        summary,
        vec![(80, "TCP".into(), None), (443, "TLS".into(), Some(CERT.into()))]
    );
    // Target groups named as upstream names them.
    let census = h.cloud.census(&h.network).await;
    assert_eq!(census.target_groups.len(), 2);
    let groups = h
        .cloud
        .elb
        .describe_target_groups()
        .load_balancer_arn(lb.load_balancer_arn().unwrap())
        .send()
        .await
        .expect("groups");
    for g in groups.target_groups() {
        assert!(
            g.target_group_name().unwrap().starts_with("k8s-default-web4-"),
            "{g:?}"
        );
    }
    // Clients from the source range on both node ports, health checks from the subnets,
    // path MTU from the range: nothing else.
    let client = format!("kubernetes.io/rule/nlb/client={name}");
    let health = format!("kubernetes.io/rule/nlb/health={name}");
    let mut want = vec![
        format!("icmp 3-4 203.0.113.0/24 kubernetes.io/rule/nlb/mtu"),
        format!("tcp 30080-30080 203.0.113.0/24 {client}"),
        format!("tcp 30443-30443 203.0.113.0/24 {client}"),
    ];
    for cidr in ["10.0.1.0/24", "10.0.2.0/24"] {
        want.push(format!("tcp 30080-30080 {cidr} {health}"));
        want.push(format!("tcp 30443-30443 {cidr} {health}"));
    }
    want.sort();
    assert_eq!(census.node_rules, want);

    // Unchanged: two reads, no write (upstream: 11 reads and a ModifyListener for TLS).
    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure again");
    assert_eq!(calls(&h), vec!["DescribeLoadBalancers", "DescribeTags"]);

    // Source ranges change: only the rules follow.
    svc.source_ranges = vec!["198.51.100.0/24".into()];
    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("new ranges");
    let rules = h.cloud.census(&h.network).await.node_rules;
    assert!(rules.iter().any(|r| r.contains("198.51.100.0/24")), "{rules:?}");
    assert!(!rules.iter().any(|r| r.contains("203.0.113.0/24")), "{rules:?}");
    assert!(
        h.proxy
            .writes()
            .iter()
            .all(|w| w.contains("SecurityGroup") || w == "AddTags"),
        "{:?}",
        h.proxy.writes()
    );

    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(
        h.cloud.census(&h.network).await.is_empty(),
        "{:?}",
        h.cloud.census(&h.network).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_load_balancers_prefer_the_private_subnet_of_each_zone() {
    let h = Harness::start("internal", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    // Upstream's reading: any value but exactly "false" is internal.
    let svc = service(5, &[(a::INTERNAL, "False")]);
    let name = h.provider.load_balancer_name(&cluster, &svc);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    let described = h
        .cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await
        .expect("described");
    let elb = &described.load_balancer_descriptions()[0];
    assert_eq!(elb.scheme(), Some("internal"));
    let mut subnets = elb.subnets().to_vec();
    subnets.sort();
    let mut want = vec![h.network.private_subnet.clone(), h.network.subnets[1].clone()];
    want.sort();
    assert_eq!(
        subnets, want,
        "zone a: the internal-elb subnet; zone b: the only one"
    );
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_subnets_bring_your_own_groups_and_extra_groups_are_used_untouched() {
    let h = Harness::start("byo", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let group = |name: &str| {
        let ec2 = h.cloud.ec2.clone();
        let vpc = h.network.vpc_id.clone();
        let name = name.to_owned();
        async move {
            ec2.create_security_group()
                .group_name(name)
                .description("the user's")
                .vpc_id(vpc)
                .send()
                .await
                .expect("a user group")
                .group_id()
                .unwrap()
                .to_owned()
        }
    };
    let byo = group("users-lb").await;
    let extra = group("users-extra").await;
    let svc = service(
        6,
        &[
            (a::SECURITY_GROUPS, &byo),
            (a::EXTRA_SECURITY_GROUPS, &extra),
            (a::SUBNETS, "net-2-us-east-1b"),
        ],
    );
    let name = h.provider.load_balancer_name(&cluster, &svc);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    let described = h
        .cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await
        .expect("described");
    let elb = &described.load_balancer_descriptions()[0];
    assert_eq!(elb.security_groups(), [byo.clone(), extra.clone()]);
    assert_eq!(
        elb.subnets(),
        [h.network.subnets[1].clone()],
        "found by its Name tag"
    );
    let census = h.cloud.census(&h.network).await;
    assert!(
        !census.security_groups.iter().any(|g| g.contains("k8s-elb")),
        "{census:?}"
    );
    assert_eq!(
        census.node_rules,
        vec![format!("-1 0-0 {byo}")],
        "the nodes admit the load balancer's group"
    );
    for g in [&byo, &extra] {
        let d = h
            .cloud
            .ec2
            .describe_security_groups()
            .group_ids(g)
            .send()
            .await
            .expect("group");
        assert!(
            d.security_groups()[0].ip_permissions().is_empty(),
            "the user's group is not modified"
        );
    }
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    let census = h.cloud.census(&h.network).await;
    assert_eq!(census.node_rules, Vec::<String>::new());
    assert_eq!(
        census.security_groups.len(),
        2,
        "the user's groups stay: {census:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_an_unchanged_sync_trusts_the_marker_and_a_changed_one_reads_again() {
    let h = Harness::start("restart", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(7, &[(a::TYPE, "nlb")]);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    let restarted = h.fresh_provider(|_| {}).await;
    h.proxy.reset_counts();
    restarted
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("after restart");
    // The marker holds; an NLB's targets are not in its description, so they are read once.
    assert_eq!(
        calls(&h),
        vec![
            "DescribeLoadBalancers",
            "DescribeTags",
            "DescribeTargetGroups",
            "DescribeTargetHealth"
        ]
    );
    h.proxy.reset_counts();
    restarted
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("again");
    assert_eq!(calls(&h), vec!["DescribeLoadBalancers", "DescribeTags"]);
    // A node change the restarted provider makes writes no marker, so the first provider (with
    // its own memory of the old members) must read the targets on the next node change.
    let b = h.cloud.run_instance(&h.network, 1).await;
    restarted
        .update_load_balancer(&cluster, &svc, &[lb_node(&a), lb_node(&b)])
        .await
        .expect("update");
    h.proxy.reset_counts();
    h.provider
        .update_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("back");
    assert!(
        h.proxy.writes().contains(&"DeregisterTargets".to_owned()),
        "{:?}",
        calls(&h)
    );
    let name = h.provider.load_balancer_name(&cluster, &svc);
    assert_eq!(h.cloud.backends(&name).await, vec![a.id.clone()]);
    restarted
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_change_writes_only_the_members_never_a_tag_and_its_reads_are_batched() {
    let h = Harness::start("members", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let b = h.cloud.run_instance(&h.network, 1).await;
    // 4 Classic ELBs and 4 NLBs, each on its own node port.
    let services: Vec<ServiceSpec> = (0..8)
        .map(|i| {
            let annotations: &[(&str, &str)] = if i % 2 == 1 { &[(a::TYPE, "nlb")] } else { &[] };
            let mut s = service(60 + i, annotations);
            s.ports[0].node_port = 30600 + i as u16;
            s
        })
        .collect();
    for s in &services {
        h.provider
            .ensure_load_balancer(&cluster, s, &[lb_node(&a)])
            .await
            .expect("ensure");
    }
    let update_all = |nodes: Vec<LoadBalancerNode>| {
        let (h, cluster, services) = (&h, &cluster, &services);
        async move {
            let updates = services
                .iter()
                .map(|s| h.provider.update_load_balancer(cluster, s, &nodes));
            for result in futures::future::join_all(updates).await {
                result.expect("update");
            }
        }
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };

    // A node joins: one register per load balancer, nothing else written.
    h.proxy.reset_counts();
    update_all(vec![lb_node(&a), lb_node(&b)]).await;
    assert_eq!(
        sorted(h.proxy.writes()),
        sorted(
            [
                vec!["RegisterInstancesWithLoadBalancer".to_owned(); 4],
                vec!["RegisterTargets".to_owned(); 4]
            ]
            .concat()
        ),
        "a backends-only update writes no tag"
    );
    // Each kind's first read goes alone, the others wait for it and go together (the NLBs'
    // target groups arrive as their descriptions do: at most one alone, then the rest); an
    // NLB's target health is one call per target group.
    let reads = |action: &str| h.proxy.count(action);
    assert!(reads("DescribeLoadBalancers") <= 4, "{:?}", calls(&h));
    assert!(reads("DescribeTags") <= 4, "{:?}", calls(&h));
    assert!(reads("DescribeTargetGroups") <= 3, "{:?}", calls(&h));
    assert_eq!(reads("DescribeTargetHealth"), 4, "{:?}", calls(&h));
    assert_eq!(
        reads("DescribeInstances"),
        1,
        "the joining node described once for the 8 load balancers: {:?}",
        calls(&h)
    );
    for s in &services {
        let name = h.provider.load_balancer_name(&cluster, s);
        assert_eq!(
            h.cloud.backends(&name).await,
            sorted(vec![a.id.clone(), b.id.clone()])
        );
    }

    // A node leaves: one deregister per load balancer.
    h.proxy.reset_counts();
    update_all(vec![lb_node(&b)]).await;
    assert_eq!(
        sorted(h.proxy.writes()),
        sorted(
            [
                vec!["DeregisterInstancesFromLoadBalancer".to_owned(); 4],
                vec!["DeregisterTargets".to_owned(); 4]
            ]
            .concat()
        )
    );

    // The Service syncs that follow, on this replica and after a restart, change nothing.
    let restarted = h.fresh_provider(|_| {}).await;
    h.proxy.reset_counts();
    for p in [&h.provider, &restarted] {
        for s in &services {
            p.ensure_load_balancer(&cluster, s, &[lb_node(&b)])
                .await
                .expect("ensure");
        }
    }
    assert_eq!(h.proxy.writes(), Vec::<String>::new());
    for s in &services {
        h.provider
            .ensure_load_balancer_deleted(&cluster, s)
            .await
            .expect("delete");
    }
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_converge_is_never_trusted() {
    let h = Harness::start("interrupt", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(8, &[]);
    let name = h.provider.load_balancer_name(&cluster, &svc);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    // A converge that died after its first write left the marker at "converging".
    h.cloud
        .classic
        .add_tags()
        .load_balancer_names(&name)
        .tags(
            aws_sdk_elasticloadbalancing::types::Tag::builder()
                .key(MARKER_TAG)
                .value("converging")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("tag");
    let fresh = h.fresh_provider(|_| {}).await;
    h.proxy.reset_counts();
    fresh
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    assert!(calls(&h).len() > 2, "a full read: {:?}", calls(&h));
    assert_eq!(
        h.proxy.writes(),
        vec!["AddTags"],
        "only the marker, so every replica trusts it again"
    );
    let another = h.fresh_provider(|_| {}).await;
    h.proxy.reset_counts();
    another
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    assert_eq!(calls(&h), vec!["DescribeLoadBalancers", "DescribeTags"]);
    fresh
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_is_refused_and_deletion_cleans_up_whatever_type_exists() {
    let h = Harness::start("retype", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let mut svc = service(9, &[]);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    svc.annotations.insert(a::TYPE.into(), "nlb".into());
    h.proxy.reset_counts();
    let err = h
        .provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidArgument(m) if m.contains(a::TYPE)),
        "{err:?}"
    );
    assert_eq!(h.proxy.writes(), Vec::<String>::new());
    // Deleting with the annotation now saying nlb still removes the Classic ELB and its group.
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(
        h.cloud.census(&h.network).await.is_empty(),
        "{:?}",
        h.cloud.census(&h.network).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_cleans_up_even_when_the_load_balancer_is_already_gone() {
    let h = Harness::start("gone", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let classic = service(10, &[]);
    let mut nlb = service(11, &[(a::TYPE, "nlb")]);
    nlb.source_ranges = vec!["192.0.2.0/24".into()];
    for svc in [&classic, &nlb] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("ensure");
    }
    // Someone deleted both load balancers by hand: upstream then returns at once and leaks the
    // group, the target groups and the nodes' rules.
    let classic_name = h.provider.load_balancer_name(&cluster, &classic);
    h.cloud
        .classic
        .delete_load_balancer()
        .load_balancer_name(&classic_name)
        .send()
        .await
        .expect("delete ELB");
    let nlb_name = h.provider.load_balancer_name(&cluster, &nlb);
    let arn = h
        .cloud
        .elb
        .describe_load_balancers()
        .names(&nlb_name)
        .send()
        .await
        .expect("NLB")
        .load_balancers()[0]
        .load_balancer_arn()
        .unwrap()
        .to_owned();
    h.cloud
        .elb
        .delete_load_balancer()
        .load_balancer_arn(arn)
        .send()
        .await
        .expect("delete NLB");
    let left = h.cloud.census(&h.network).await;
    assert!(
        !left.security_groups.is_empty() && !left.target_groups.is_empty() && !left.node_rules.is_empty()
    );
    for svc in [&classic, &nlb] {
        h.provider
            .ensure_load_balancer_deleted(&cluster, svc)
            .await
            .expect("delete");
    }
    assert!(
        h.cloud.census(&h.network).await.is_empty(),
        "{:?}",
        h.cloud.census(&h.network).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_rule_two_nlbs_need_stays_until_neither_needs_it() {
    let h = Harness::start("shared", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    // Both check kube-proxy's port; source ranges make the health rules necessary.
    let shared = |n: u32| {
        let mut s = service(n, &[(a::TYPE, "nlb"), (a::HC_PORT, "10256")]);
        s.ports[0].node_port = 30000 + n as u16;
        s.source_ranges = vec!["192.0.2.0/24".into()];
        s
    };
    let (first, second) = (shared(12), shared(13));
    for svc in [&first, &second] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("ensure");
    }
    let health_10256 = |rules: &[String]| rules.iter().filter(|r| r.starts_with("tcp 10256-10256 ")).count();
    assert_eq!(
        health_10256(&h.cloud.census(&h.network).await.node_rules),
        2,
        "one per subnet CIDR"
    );
    h.provider
        .ensure_load_balancer_deleted(&cluster, &first)
        .await
        .expect("delete the first");
    let rules = h.cloud.census(&h.network).await.node_rules;
    assert_eq!(health_10256(&rules), 2, "the second still needs them: {rules:?}");
    let second_name = h.provider.load_balancer_name(&cluster, &second);
    assert!(
        rules
            .iter()
            .filter(|r| r.starts_with("tcp 10256-10256 "))
            .all(|r| r.ends_with(&format!("health={second_name}"))),
        "handed over: {rules:?}"
    );
    h.provider
        .ensure_load_balancer_deleted(&cluster, &second)
        .await
        .expect("delete the second");
    assert!(
        h.cloud.census(&h.network).await.is_empty(),
        "{:?}",
        h.cloud.census(&h.network).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_unknown_and_unlabelled_nodes_are_left_out() {
    let h = Harness::start("targets", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let up = h.cloud.run_instance(&h.network, 0).await;
    let down = h.cloud.run_instance(&h.network, 1).await;
    h.cloud.stop(&down).await;
    let by_name = h.cloud.run_instance(&h.network, 1).await;
    let unlabelled = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(14, &[(a::TARGET_NODE_LABELS, "pool=web")]);
    let labelled = |i: &Instance, provider_id: bool| LoadBalancerNode {
        name: i.node_name.clone(),
        provider_id: if provider_id {
            i.provider_id.clone()
        } else {
            String::new()
        },
        labels: BTreeMap::from([("pool".to_owned(), "web".to_owned())]),
        ..Default::default()
    };
    let nodes = [
        labelled(&up, true),
        labelled(&down, true),
        labelled(&by_name, false),
        lb_node(&unlabelled),
        LoadBalancerNode {
            name: "elsewhere".into(),
            provider_id: "gce://p/z/n".into(),
            labels: BTreeMap::from([("pool".to_owned(), "web".to_owned())]),
            ..Default::default()
        },
    ];
    h.provider
        .ensure_load_balancer(&cluster, &svc, &nodes)
        .await
        .expect("ensure");
    let name = h.provider.load_balancer_name(&cluster, &svc);
    let mut want = vec![up.id.clone(), by_name.id.clone()];
    want.sort();
    assert_eq!(h.cloud.backends(&name).await, want);
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed_name_their_cause_and_touch_nothing() {
    let h = Harness::start("refusals", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let elsewhere = service(15, &[(a::TYPE, "external")]);
    h.proxy.reset_counts();
    assert!(matches!(
        h.provider
            .ensure_load_balancer(&cluster, &elsewhere, &[lb_node(&a)])
            .await,
        Err(ProviderError::ImplementedElsewhere(_))
    ));
    assert!(matches!(
        h.provider
            .update_load_balancer(&cluster, &elsewhere, &[lb_node(&a)])
            .await,
        Err(ProviderError::ImplementedElsewhere(_))
    ));
    assert_eq!(
        h.provider
            .get_load_balancer(&cluster, &elsewhere)
            .await
            .expect("get"),
        None
    );
    let mut udp_classic = service(16, &[]);
    udp_classic.ports[0].protocol = Protocol::Udp;
    let mut with_ip = service(17, &[]);
    with_ip.requested_ip = "10.0.0.10".into();
    // What cloud-provider-aws refuses (what it ignores is built: see
    // `what_upstream_ignores_is_built_and_its_notices_answered`).
    let rows: Vec<(ServiceSpec, &str)> = vec![
        (service(18, &[(a::PROXY_PROTOCOL, "v2")]), a::PROXY_PROTOCOL),
        (
            service(19, &[(a::TYPE, "nlb"), (a::EXTRA_SECURITY_GROUPS, "sg-1")]),
            a::EXTRA_SECURITY_GROUPS,
        ),
        (service(20, &[(a::CROSS_ZONE, "yes")]), a::CROSS_ZONE),
        (
            service(
                21,
                &[(a::TARGET_GROUP_ATTRIBUTES, "proxy_protocol_v2.enabled=true")],
            ),
            a::TARGET_GROUP_ATTRIBUTES,
        ),
        (service(22, &[(a::HC_INTERVAL, "2")]), a::HC_INTERVAL),
        (service(23, &[(a::SUBNETS, "no-such-subnet")]), a::SUBNETS),
        (udp_classic, "TCP only"),
        (with_ip, "loadBalancerIP"),
    ];
    for (svc, named) in &rows {
        let got = h
            .provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await;
        assert!(
            matches!(&got, Err(ProviderError::InvalidArgument(m)) if m.contains(named)),
            "{named}: {got:?}"
        );
    }
    assert_eq!(h.proxy.writes(), Vec::<String>::new());
    h.provider
        .ensure_load_balancer_deleted(&cluster, &elsewhere)
        .await
        .expect("delete");
}

/// Issue 38: a Service cloud-provider-aws serves (ignoring or falling back on some of its
/// annotations) is served, and the provider answers what it read other than written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_upstream_ignores_is_built_and_its_notices_answered() {
    const SUCCESS_CODES: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-success-codes";
    let h = Harness::start("ignored", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let nlb = service(
        40,
        &[
            (a::TYPE, "nlb"),
            (a::PROXY_PROTOCOL, "*"),
            (a::IDLE_TIMEOUT, "300"),
            (a::LBC_SCHEME, "internal"),
            (SUCCESS_CODES, "200-399"),
            (a::ADDITIONAL_TAGS, "team=web=blue"),
        ],
    );
    let classic = service(
        41,
        &[(a::BACKEND_PROTOCOL, "grpc"), (a::EIP_ALLOCATIONS, "eipalloc-1")],
    );
    for svc in [&nlb, &classic] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("a Service upstream serves is built");
    }

    let lbs = h
        .cloud
        .elb
        .describe_load_balancers()
        .names(h.provider.load_balancer_name(&cluster, &nlb))
        .send()
        .await
        .expect("NLB");
    let lb = &lbs.load_balancers()[0];
    // Upstream does not read the AWS Load Balancer Controller's scheme: the NLB is
    // internet-facing (created without a scheme, which moto then answers as "None").
    assert_ne!(lb.scheme().map(|s| s.as_str()), Some("internal"));
    let tags = h
        .cloud
        .elb
        .describe_tags()
        .resource_arns(lb.load_balancer_arn().unwrap())
        .send()
        .await
        .expect("tags");
    let team = tags.tag_descriptions()[0]
        .tags()
        .iter()
        .find(|t| t.key() == Some("team"))
        .and_then(|t| t.value().map(str::to_owned));
    assert_eq!(
        team.as_deref(),
        Some("web"),
        "upstream keeps the part before a second ="
    );
    let d = h
        .cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(h.provider.load_balancer_name(&cluster, &classic))
        .send()
        .await
        .expect("ELB");
    let listener = d.load_balancer_descriptions()[0].listener_descriptions()[0]
        .listener()
        .unwrap()
        .clone();
    assert_eq!((listener.protocol(), listener.instance_port()), ("TCP", 30080));

    let keys = |svc: &ServiceSpec| -> Vec<(String, String)> {
        h.provider
            .service_notices(&cluster, svc)
            .into_iter()
            .map(|n| {
                let key = n.message.split_whitespace().nth(1).unwrap_or_default();
                (n.reason.clone(), key.trim_end_matches(':').to_owned())
            })
            .collect()
    };
    let pair = |r: &str, k: &str| (r.to_owned(), k.to_owned());
    assert_eq!(
        keys(&nlb),
        vec![
            pair(a::KEY_IGNORED, a::IDLE_TIMEOUT),
            pair(a::KEY_IGNORED, SUCCESS_CODES),
            pair(a::KEY_IGNORED, a::PROXY_PROTOCOL),
            pair(a::KEY_IGNORED, a::LBC_SCHEME),
            pair(a::VALUE_IGNORED, a::ADDITIONAL_TAGS),
        ]
    );
    assert_eq!(
        keys(&classic),
        vec![
            pair(a::KEY_IGNORED, a::EIP_ALLOCATIONS),
            pair(a::VALUE_IGNORED, a::BACKEND_PROTOCOL),
        ]
    );
    assert_eq!(keys(&service(42, &[])), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_of_someone_else_is_never_touched() {
    let h = Harness::start("foreign", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(24, &[]);
    let name = h.provider.load_balancer_name(&cluster, &svc);
    // Same name, no cluster tag: someone else's.
    h.cloud
        .classic
        .create_load_balancer()
        .load_balancer_name(&name)
        .listeners(
            aws_sdk_elasticloadbalancing::types::Listener::builder()
                .protocol("TCP")
                .load_balancer_port(80)
                .instance_port(30080)
                .build()
                .unwrap(),
        )
        .set_subnets(Some(h.network.subnets.clone()))
        .send()
        .await
        .expect("a foreign load balancer");
    assert_eq!(
        h.provider.get_load_balancer(&cluster, &svc).await.expect("get"),
        None
    );
    h.proxy.reset_counts();
    assert!(matches!(
        h.provider.ensure_load_balancer(&cluster, &svc, &[lb_node(&a)]).await,
        Err(ProviderError::InvalidArgument(m)) if m.contains("not tagged")
    ));
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete leaves it alone");
    assert_eq!(h.proxy.writes(), Vec::<String>::new());
    assert!(
        h.cloud
            .classic
            .describe_load_balancers()
            .load_balancer_names(&name)
            .send()
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_group_left_by_a_crash_is_reused() {
    let h = Harness::start("crash", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let mut svc = service(25, &[(a::TYPE, "nlb")]);
    svc.ports.push(port("dns", Protocol::Udp, 53, 30053));
    // An earlier attempt created the port-80 group with upstream's name and died.
    let spec = provider_aws::nlb::spec::NetworkSpec::parse(
        &provider_aws::tags::ClusterTagging::new(&cluster, false).unwrap(),
        &Default::default(),
        &svc,
        &Default::default(),
    )
    .unwrap();
    let m = spec.mappings.iter().find(|m| m.port == 80).unwrap();
    h.cloud
        .elb
        .create_target_group()
        .name(&m.target_group_name)
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .port(30080)
        .vpc_id(&h.network.vpc_id)
        .target_type(aws_sdk_elasticloadbalancingv2::types::TargetTypeEnum::Instance)
        .health_check_protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .health_check_interval_seconds(30)
        .tags(
            aws_sdk_elasticloadbalancingv2::types::Tag::builder()
                .key(format!("kubernetes.io/cluster/{cluster}"))
                .value("owned")
                .build(),
        )
        .send()
        .await
        .expect("a leftover target group");
    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    assert_eq!(h.proxy.count("CreateTargetGroup"), 1, "only the UDP group is new");
    assert_eq!(h.cloud.census(&h.network).await.target_groups.len(), 2);
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_classic_annotation_lands_and_the_next_full_read_writes_nothing() {
    let h = Harness::start("classic-all", |c| c.verify_period = std::time::Duration::ZERO).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let mut svc = service(
        26,
        &[
            (a::SSL_CERT, CERT),
            (a::SSL_PORTS, "443"),
            (a::BACKEND_PROTOCOL, "ssl"),
            (a::SSL_NEGOTIATION_POLICY, "ELBSecurityPolicy-TLS-1-2-2017-01"),
            (a::PROXY_PROTOCOL, "*"),
            (a::DRAINING_ENABLED, "true"),
            (a::DRAINING_TIMEOUT, "30"),
            (a::IDLE_TIMEOUT, "300"),
            (a::CROSS_ZONE, "true"),
            (a::ACCESS_LOG_ENABLED, "true"),
            (a::ACCESS_LOG_BUCKET, "logs"),
            (a::ACCESS_LOG_PREFIX, "web"),
            (a::ACCESS_LOG_EMIT_INTERVAL, "5"),
            (a::HC_HEALTHY, "3"),
            (a::HC_UNHEALTHY, "4"),
            (a::HC_TIMEOUT, "6"),
            (a::HC_INTERVAL, "20"),
            (a::ADDITIONAL_TAGS, "team=web,cost=42"),
        ],
    );
    svc.ports.push(port("https", Protocol::Tcp, 443, 30443));
    let name = h.provider.load_balancer_name(&cluster, &svc);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");

    let d = h
        .cloud
        .classic
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await
        .expect("ELB");
    let elb = &d.load_balancer_descriptions()[0];
    let mut listeners: Vec<(i32, String, String, Vec<String>)> = elb
        .listener_descriptions()
        .iter()
        .map(|ld| {
            let l = ld.listener().unwrap();
            (
                l.load_balancer_port(),
                l.protocol().to_owned(),
                l.ssl_certificate_id().unwrap_or_default().to_owned(),
                ld.policy_names().to_vec(),
            )
        })
        .collect();
    listeners.sort();
    assert_eq!(
        listeners[0].1, "TCP",
        "port 80 is not in ssl-ports: plain TCP, as upstream"
    );
    let tls = listeners.iter().find(|l| l.0 == 443).expect("443");
    assert_eq!((tls.1.as_str(), tls.2.as_str()), ("SSL", CERT));
    assert_eq!(
        tls.3,
        vec!["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01".to_owned()]
    );
    let backends: Vec<(i32, Vec<String>)> = elb
        .backend_server_descriptions()
        .iter()
        .map(|b| (b.instance_port().unwrap(), b.policy_names().to_vec()))
        .collect();
    assert!(
        backends
            .iter()
            .all(|(_, p)| p == &["k8s-proxyprotocol-enabled".to_owned()]),
        "{backends:?}"
    );
    assert_eq!(backends.len(), 2);
    let hc = elb.health_check().unwrap();
    assert_eq!(
        (
            hc.target(),
            hc.healthy_threshold(),
            hc.unhealthy_threshold(),
            hc.timeout(),
            hc.interval()
        ),
        ("SSL:30080", 3, 4, 6, 20)
    );
    let attrs = h
        .cloud
        .classic
        .describe_load_balancer_attributes()
        .load_balancer_name(&name)
        .send()
        .await
        .expect("attributes");
    let attrs = attrs.load_balancer_attributes().unwrap();
    assert!(attrs.cross_zone_load_balancing().unwrap().enabled());
    assert_eq!(attrs.connection_settings().unwrap().idle_timeout(), 300);
    let draining = attrs.connection_draining().unwrap();
    assert_eq!((draining.enabled(), draining.timeout()), (true, Some(30)));
    let log = attrs.access_log().unwrap();
    assert_eq!(
        (
            log.enabled(),
            log.s3_bucket_name(),
            log.s3_bucket_prefix(),
            log.emit_interval()
        ),
        (true, Some("logs"), Some("web"), Some(5))
    );
    let tags = h
        .cloud
        .classic
        .describe_tags()
        .load_balancer_names(&name)
        .send()
        .await
        .expect("tags");
    let tags: BTreeMap<String, String> = tags.tag_descriptions()[0]
        .tags()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(tags.get("team").map(String::as_str), Some("web"));
    assert_eq!(
        tags.get("kubernetes.io/service-name").map(String::as_str),
        Some("default/web-26")
    );

    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("again");
    assert_eq!(h.proxy.writes(), Vec::<String>::new(), "{:?}", calls(&h));
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_nlb_annotation_lands_and_the_next_full_read_writes_nothing() {
    let h = Harness::start("nlb-all", |c| c.verify_period = std::time::Duration::ZERO).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(
        27,
        &[
            (a::TYPE, "nlb"),
            (a::INTERNAL, "true"),
            (a::CROSS_ZONE, "true"),
            (a::ACCESS_LOG_ENABLED, "true"),
            (a::ACCESS_LOG_BUCKET, "logs"),
            (a::ACCESS_LOG_PREFIX, "api"),
            (a::HC_PROTOCOL, "HTTP"),
            (a::HC_PATH, "/ready"),
            (a::HC_PORT, "8080"),
            (a::HC_INTERVAL, "10"),
            (a::HC_TIMEOUT, "6"),
            (a::HC_HEALTHY, "2"),
            (a::HC_UNHEALTHY, "5"),
            (a::TARGET_GROUP_ATTRIBUTES, "proxy_protocol_v2.enabled=true"),
            (a::ADDITIONAL_TAGS, "team=api"),
        ],
    );
    let name = h.provider.load_balancer_name(&cluster, &svc);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    let lbs = h
        .cloud
        .elb
        .describe_load_balancers()
        .names(&name)
        .send()
        .await
        .expect("NLB");
    let lb = &lbs.load_balancers()[0];
    assert_eq!(lb.scheme().map(|s| s.as_str()), Some("internal"));
    let arn = lb.load_balancer_arn().unwrap();
    let attrs: BTreeMap<String, String> = h
        .cloud
        .elb
        .describe_load_balancer_attributes()
        .load_balancer_arn(arn)
        .send()
        .await
        .expect("attributes")
        .attributes()
        .iter()
        .map(|a| {
            (
                a.key().unwrap().to_owned(),
                a.value().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(attrs["load_balancing.cross_zone.enabled"], "true");
    assert_eq!(attrs["access_logs.s3.enabled"], "true");
    assert_eq!(attrs["access_logs.s3.bucket"], "logs");
    assert_eq!(attrs["access_logs.s3.prefix"], "api");
    let groups = h
        .cloud
        .elb
        .describe_target_groups()
        .load_balancer_arn(arn)
        .send()
        .await
        .expect("groups");
    let g = &groups.target_groups()[0];
    assert_eq!(
        (
            g.health_check_protocol().map(|p| p.as_str()),
            g.health_check_path(),
            g.health_check_port(),
            g.health_check_interval_seconds(),
            g.health_check_timeout_seconds(),
            g.healthy_threshold_count(),
            g.unhealthy_threshold_count()
        ),
        (
            Some("HTTP"),
            Some("/ready"),
            Some("8080"),
            Some(10),
            Some(6),
            Some(2),
            Some(5)
        )
    );
    let tg_attrs: BTreeMap<String, String> = h
        .cloud
        .elb
        .describe_target_group_attributes()
        .target_group_arn(g.target_group_arn().unwrap())
        .send()
        .await
        .expect("group attributes")
        .attributes()
        .iter()
        .map(|a| {
            (
                a.key().unwrap().to_owned(),
                a.value().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(tg_attrs["proxy_protocol_v2.enabled"], "true");

    h.proxy.reset_counts();
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("again");
    assert_eq!(h.proxy.writes(), Vec::<String>::new(), "{:?}", calls(&h));
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("delete");
    assert!(h.cloud.census(&h.network).await.is_empty());
}

/// What a converge left, as counts (IDs and names differ between Services).
fn shape(c: &aws_fixture::Census) -> (usize, usize, usize, usize, usize) {
    (
        c.classic.len(),
        c.nlbs.len(),
        c.target_groups.len(),
        c.security_groups.len(),
        c.node_rules.len(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_write_then_a_restart_converges_without_duplicates() {
    let h = Harness::start("crash-any", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let b = h.cloud.run_instance(&h.network, 1).await;
    let mut n = 100;
    for kind in ["classic", "nlb"] {
        let make = |n: u32| {
            let mut s = if kind == "nlb" {
                service(n, &[(a::TYPE, "nlb")])
            } else {
                service(n, &[])
            };
            s.ports[0].node_port = 30000 + n as u16;
            s.source_ranges = vec!["198.51.100.0/24".into()];
            s
        };
        // A clean converge: its writes, and what it leaves.
        let probe = make(n);
        n += 1;
        h.proxy.reset_counts();
        h.provider
            .ensure_load_balancer(&cluster, &probe, &[lb_node(&a)])
            .await
            .expect("probe");
        let writes = h.proxy.writes().len();
        let want = shape(&h.cloud.census(&h.network).await);
        h.provider
            .ensure_load_balancer_deleted(&cluster, &probe)
            .await
            .expect("delete probe");
        assert!(writes >= 5, "{kind}: {:?}", h.proxy.writes());
        for nth in 1..=writes {
            for landed in [false, true] {
                let svc = make(n);
                n += 1;
                h.proxy.crash_at_write(nth, landed);
                let crashed = h
                    .provider
                    .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
                    .await;
                h.proxy.heal();
                assert!(
                    crashed.is_err(),
                    "{kind} write {nth} (landed {landed}): {crashed:?}"
                );
                // The gateway restarts: nothing remembered.
                let restarted = h.fresh_provider(|_| {}).await;
                restarted
                    .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
                    .await
                    .unwrap_or_else(|e| panic!("{kind} after a crash at write {nth} (landed {landed}): {e}"));
                h.proxy.reset_counts();
                restarted
                    .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
                    .await
                    .expect("converged");
                assert_eq!(
                    h.proxy.writes(),
                    Vec::<String>::new(),
                    "{kind} write {nth} landed {landed}"
                );
                let census = h.cloud.census(&h.network).await;
                assert_eq!(
                    shape(&census),
                    want,
                    "{kind} write {nth} landed {landed}: {census:?}"
                );
                restarted
                    .ensure_load_balancer_deleted(&cluster, &svc)
                    .await
                    .expect("delete");
                assert!(
                    h.cloud.census(&h.network).await.is_empty(),
                    "{kind} write {nth} landed {landed}"
                );
            }
        }
        // A node change (b replaces a): only its member writes, each crashed at in turn; the
        // next update, by a restarted provider, finishes it from what AWS lists.
        let probe = make(n);
        n += 1;
        h.provider
            .ensure_load_balancer(&cluster, &probe, &[lb_node(&a)])
            .await
            .expect("probe");
        h.proxy.reset_counts();
        h.provider
            .update_load_balancer(&cluster, &probe, &[lb_node(&b)])
            .await
            .expect("probe update");
        let writes = h.proxy.writes();
        assert_eq!(
            writes.len(),
            2,
            "{kind}: a register and a deregister, no tag: {writes:?}"
        );
        h.provider
            .ensure_load_balancer_deleted(&cluster, &probe)
            .await
            .expect("delete probe");
        for nth in 1..=writes.len() {
            for landed in [false, true] {
                let svc = make(n);
                n += 1;
                let name = h.provider.load_balancer_name(&cluster, &svc);
                h.provider
                    .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
                    .await
                    .expect("ensure");
                h.proxy.crash_at_write(nth, landed);
                let crashed = h
                    .provider
                    .update_load_balancer(&cluster, &svc, &[lb_node(&b)])
                    .await;
                h.proxy.heal();
                assert!(
                    crashed.is_err(),
                    "{kind} update write {nth} (landed {landed}): {crashed:?}"
                );
                let restarted = h.fresh_provider(|_| {}).await;
                h.proxy.reset_counts();
                restarted
                    .update_load_balancer(&cluster, &svc, &[lb_node(&b)])
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{kind} after a crash at update write {nth} (landed {landed}): {e}")
                    });
                assert!(
                    !h.proxy.writes().contains(&"AddTags".to_owned()),
                    "{kind} update write {nth} landed {landed}: {:?}",
                    h.proxy.writes()
                );
                assert_eq!(
                    h.cloud.backends(&name).await,
                    vec![b.id.clone()],
                    "{kind} update write {nth} landed {landed}"
                );
                h.proxy.reset_counts();
                for provider in [&restarted, &h.provider] {
                    provider
                        .update_load_balancer(&cluster, &svc, &[lb_node(&b)])
                        .await
                        .expect("converged");
                    provider
                        .ensure_load_balancer(&cluster, &svc, &[lb_node(&b)])
                        .await
                        .expect("converged");
                }
                assert_eq!(
                    h.proxy.writes(),
                    Vec::<String>::new(),
                    "{kind} update write {nth} landed {landed}"
                );
                restarted
                    .ensure_load_balancer_deleted(&cluster, &svc)
                    .await
                    .expect("delete");
                assert!(
                    h.cloud.census(&h.network).await.is_empty(),
                    "{kind} update write {nth} landed {landed}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_still_in_use_keeps_the_deletion_pending_until_the_next_try() {
    let h = Harness::start("in-use", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let svc = service(28, &[]);
    h.provider
        .ensure_load_balancer(&cluster, &svc, &[lb_node(&a)])
        .await
        .expect("ensure");
    // AWS holds a deleted ELB's group for a while (its network interfaces go later).
    h.proxy.fail("DeleteSecurityGroup", "DependencyViolation");
    let started = std::time::Instant::now();
    let pending = h.provider.ensure_load_balancer_deleted(&cluster, &svc).await;
    assert!(
        matches!(pending, Err(ProviderError::RetryAfter { .. })),
        "{pending:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "no worker blocked (upstream: up to 10 minutes)"
    );
    assert_eq!(h.cloud.census(&h.network).await.security_groups.len(), 1);
    h.proxy.heal();
    h.provider
        .ensure_load_balancer_deleted(&cluster, &svc)
        .await
        .expect("the next try");
    assert!(h.cloud.census(&h.network).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_read_scans_the_region_or_the_account() {
    let h = Harness::start("scoped", |c| c.verify_period = std::time::Duration::ZERO).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let classic = service(29, &[]);
    let nlb = service(30, &[(a::TYPE, "nlb")]);
    h.proxy.reset_counts();
    for svc in [&classic, &nlb] {
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("ensure");
        h.provider
            .ensure_load_balancer(&cluster, svc, &[lb_node(&a)])
            .await
            .expect("full read");
        h.provider
            .ensure_load_balancer_deleted(&cluster, svc)
            .await
            .expect("delete");
    }
    let bodies = h.proxy.bodies();
    let mut seen = 0;
    for body in &bodies {
        let scoped = match body.split('&').find_map(|kv| kv.strip_prefix("Action=")) {
            // Upstream: DescribeSecurityGroups without a filter on every sync.
            Some("DescribeSecurityGroups") => body.contains("Filter.") || body.contains("GroupId."),
            // Upstream: DescribeInstances without a filter on every cache miss.
            Some("DescribeInstances") => body.contains("InstanceId.") || body.contains("Filter."),
            _ => continue,
        };
        seen += 1;
        assert!(scoped, "an unscoped read: {body}");
    }
    assert!(seen > 5, "{bodies:?}");
}

/// Ensures `services` (concurrently, a few at a time) and returns the provider a restarted
/// gateway would have: nothing remembered.
async fn made_then_restarted(
    h: &Harness,
    services: &[ServiceSpec],
    nodes: &[LoadBalancerNode],
) -> std::sync::Arc<provider_aws::AwsProvider> {
    let cluster = h.cluster().to_owned();
    for chunk in services.chunks(5) {
        let mut ensures = tokio::task::JoinSet::new();
        for s in chunk {
            let (p, cluster, s, nodes) = (h.provider.clone(), cluster.clone(), s.clone(), nodes.to_vec());
            ensures.spawn(async move { p.ensure_load_balancer(&cluster, &s, &nodes).await });
        }
        for made in ensures.join_all().await {
            made.expect("ensure");
        }
    }
    h.fresh_provider(|_| {}).await
}

fn get_read(svc: &ServiceSpec) -> LoadBalancerRead {
    LoadBalancerRead {
        service: svc.clone(),
        ensure_nodes: None,
    }
}

/// The test: a batch of reads for 20 Services where one has no load balancer answers 19
/// load balancers and one not-found, for both types, in one DescribeTags each and few
/// DescribeLoadBalancers (AWS fails the whole call for one missing name; moto's ELBv2 leaves the
/// missing name out instead, its Classic ELB fails as AWS does). Then the 19 Services' ensures,
/// unchanged after a restart, are all answered converged by one DescribeLoadBalancers and one
/// DescribeTags per type: ceil(N/20) each, where one by one they cost N each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_20_reads_with_one_missing_answers_19_load_balancers_and_one_not_found() {
    let h = Harness::start("batch-reads", |_| {}).await;
    let cluster = h.cluster().to_owned();
    let a = h.cloud.run_instance(&h.network, 0).await;
    let nodes = [lb_node(&a)];
    for (kind, annotations) in [("classic", vec![]), ("nlb", vec![(a::TYPE, "nlb")])] {
        let base = if kind == "nlb" { 300 } else { 200 };
        let services: Vec<ServiceSpec> = (0..20).map(|n| service(base + n, &annotations)).collect();
        // The 8th has no load balancer: never ensured.
        let missing = &services[7];
        let made: Vec<ServiceSpec> = services
            .iter()
            .filter(|s| s.uid != missing.uid)
            .cloned()
            .collect();
        let restarted = made_then_restarted(&h, &made, &nodes).await;
        assert_eq!(restarted.max_read_batch(), 20);
        assert!(
            services
                .iter()
                .all(|s| restarted.read_batch_key(&cluster, s) == kind),
            "{kind}: one batch key"
        );

        h.proxy.reset_counts();
        let reads: Vec<LoadBalancerRead> = services.iter().map(get_read).collect();
        let answers = restarted
            .read_load_balancers(&cluster, &reads)
            .await
            .expect("the batch");
        let describes = h.proxy.count("DescribeLoadBalancers");
        let tags = h.proxy.count("DescribeTags");
        // One missing among 20 is found by halving: at most 11 calls (1 when the cloud leaves
        // it out), and the 19 found share one DescribeTags.
        assert!((1..=11).contains(&describes), "{kind}: {:?}", calls(&h));
        assert_eq!(tags, 1, "{kind}: {:?}", calls(&h));
        assert!(h.proxy.writes().is_empty());
        println!("{kind}: 20 reads, 1 missing: {describes} DescribeLoadBalancers, {tags} DescribeTags");

        assert_eq!(answers.len(), 20);
        for (svc, answer) in services.iter().zip(&answers) {
            let answer = answer.as_ref().expect("no read fails");
            if svc.uid == missing.uid {
                assert_eq!(
                    *answer,
                    LoadBalancerObservation::Absent,
                    "{kind}: the missing one"
                );
                continue;
            }
            let one = h
                .provider
                .get_load_balancer(&cluster, svc)
                .await
                .expect("get one")
                .expect("exists");
            assert_eq!(
                *answer,
                LoadBalancerObservation::Present(one),
                "{kind}: {}",
                svc.name
            );
        }
        // The unchanged ensures' checks: all converged, one call of each kind for the 19.
        h.proxy.reset_counts();
        let checks: Vec<LoadBalancerRead> = made
            .iter()
            .map(|s| LoadBalancerRead {
                service: s.clone(),
                ensure_nodes: Some(nodes.to_vec()),
            })
            .collect();
        let mut answers = restarted
            .read_load_balancers(&cluster, &checks)
            .await
            .expect("the batch");
        if kind == "nlb" {
            // An NLB's targets are not in its description: after a restart its ensure reads
            // them once (its marker covers everything else), and from then on the check holds.
            for (svc, answer) in made.iter().zip(&answers) {
                assert!(
                    matches!(answer, Ok(LoadBalancerObservation::NeedsEnsure)),
                    "{kind}: {}: {answer:?}",
                    svc.name
                );
            }
            h.proxy.reset_counts();
            for s in &made {
                restarted
                    .ensure_load_balancer(&cluster, s, &nodes)
                    .await
                    .expect("ensure");
            }
            assert!(h.proxy.writes().is_empty(), "{:?}", calls(&h));
            assert_eq!(h.proxy.count("DescribeTargetHealth"), made.len());
            h.proxy.reset_counts();
            answers = restarted
                .read_load_balancers(&cluster, &checks)
                .await
                .expect("the batch");
        }
        for (svc, answer) in made.iter().zip(answers) {
            assert!(
                matches!(answer, Ok(LoadBalancerObservation::Converged(_))),
                "{kind}: {}: {answer:?}",
                svc.name
            );
        }
        assert_eq!(
            calls(&h),
            ["DescribeLoadBalancers", "DescribeTags"],
            "{kind}: ceil(19/20) of each"
        );
        // A changed request (another node set) is not converged: the ensure decides.
        let b = h.cloud.run_instance(&h.network, 1).await;
        let changed = LoadBalancerRead {
            service: made[0].clone(),
            ensure_nodes: Some(vec![lb_node(&a), lb_node(&b)]),
        };
        let answer = restarted
            .read_load_balancers(&cluster, &[changed])
            .await
            .expect("read");
        assert!(
            matches!(answer[..], [Ok(LoadBalancerObservation::NeedsEnsure)]),
            "{answer:?}"
        );
        for s in &made {
            restarted
                .ensure_load_balancer_deleted(&cluster, s)
                .await
                .expect("delete");
        }
    }
}
