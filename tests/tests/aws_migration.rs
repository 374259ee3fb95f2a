//! Moving a live cluster off cloud-provider-aws, end to end through the real binaries (issue 21):
//! moto holds the load balancers exactly as cloud-provider-aws built them
//! (`aws_fixture::upstream`, in its legacy tagging mode, under a cluster ID that is not the
//! controllers' `--cluster-name`), the cluster holds the Services as upstream left them (its
//! finalizer, its ingress hostnames). Every AWS call of the gateway goes through a recording
//! proxy.
//!
//! First the shadow run: the gateway and the four controllers in `--dry-run` make no write to
//! AWS or to the API server and plan no change; one Service edited is exactly one planned change.
//! Then the gateway and the service controller take over for real: **no** AWS write while
//! converging, every hostname unchanged; a port change is made in place; a deletion removes what
//! upstream had made for that Service and nothing else.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use aws_fixture::{
    Cloud, FaultProxy, Network,
    upstream::{self, Identity, Port},
};
use e2e::{
    Cluster, ClusterSpec, MOTO_ENV, aws_gateway_args, binary, counter, http_get, ingress_hostname,
    shadow::{json_of, leases, writes, written_since},
    start_moto, wait_for,
};
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

/// The cluster ID of upstream's cloud config; the controllers keep their default
/// `--cluster-name` (`kubernetes`).
const CLUSTER_ID: &str = "prod-east";
/// An IAM server certificate (moto checks ACM certificates exist, not IAM ones).
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/web";
/// Upstream's service-controller finalizer.
const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// Upstream's view of a Service the API server holds.
fn as_upstream(s: &Service) -> upstream::Service {
    let tls = s
        .annotations()
        .get("service.beta.kubernetes.io/aws-load-balancer-ssl-ports")
        .cloned()
        .unwrap_or_default();
    upstream::Service {
        uid: s.uid().expect("uid"),
        namespace: s.namespace().expect("namespace"),
        name: s.name_any(),
        ports: s
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .iter()
            .map(|p| Port {
                port: p.port as u16,
                node_port: p.node_port.expect("a node port") as u16,
                tls: tls.split(',').any(|t| t == p.port.to_string()),
            })
            .collect(),
        source_ranges: Vec::new(),
        ssl_cert: s
            .annotations()
            .get("service.beta.kubernetes.io/aws-load-balancer-ssl-cert")
            .cloned(),
    }
}

/// Waits until the gateway has answered `at_least` successful ensures.
async fn ensured(cluster: &Cluster, at_least: u64) {
    let http = cluster.gateway_http;
    wait_for(
        &format!("{at_least} load balancers ensured"),
        Duration::from_secs(60),
        || async move {
            let (_, metrics) = http_get(http, "/metrics").await?;
            let n = counter(
                &metrics,
                "cloudgateway_provider_calls_total",
                &[("operation", "ensure_load_balancer"), ("outcome", "success")],
            );
            (n >= at_least).then_some(())
        },
    )
    .await;
}

/// `api`'s first port number set to `port`.
async fn set_first_port(services: &Api<Service>, api: &Service, port: i32) {
    let mut ports = api.spec.as_ref().and_then(|s| s.ports.clone()).expect("ports");
    ports[0].port = port;
    services
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "ports": ports } })),
        )
        .await
        .expect("port change");
}

/// The shadow run beside the state upstream left: the gateway (on AWS through `proxy`) and the
/// four controllers in `--dry-run` write nothing to AWS or the API server (their own `-dry-run`
/// Leases aside) and plan nothing; `api`'s port edited is exactly one planned change, of its
/// load balancer, with the AWS calls it would make. The edit is undone before returning, and the
/// dry-run controllers are stopped.
async fn shadow_run(
    cluster: &mut Cluster,
    args: &[String],
    env: &[(&str, &str)],
    proxy: &FaultProxy,
    services: &Api<Service>,
    api: &Service,
) {
    let mut dry = args.to_vec();
    dry.push("--dry-run".into());
    cluster.swap_gateway(&binary("cloud-gateway"), &dry, env).await;
    proxy.reset_counts();
    let real_leases = leases(cluster).await;
    let before = writes(cluster).await;
    let shadow: Vec<usize> = [
        (
            "cloud-node-controller",
            vec!["--node-status-update-frequency", "2s"],
        ),
        (
            "cloud-node-lifecycle-controller",
            vec!["--node-monitor-period", "1s"],
        ),
        ("service-lb-controller", vec![]),
        ("node-route-controller", vec!["--cluster-cidr", "100.96.0.0/16"]),
    ]
    .into_iter()
    .map(|(name, mut flags)| {
        flags.push("--dry-run");
        cluster.start_controller(name, &format!("{name}-dry-run"), &flags)
    })
    .collect();
    let ports: Vec<(String, std::net::SocketAddr)> = shadow
        .iter()
        .map(|&i| {
            (
                cluster.procs[i].name.clone(),
                cluster.procs[i].http.expect("side port"),
            )
        })
        .collect();
    let gateway = cluster.gateway_http;
    wait_for("the shadow's first passes", Duration::from_secs(60), || async {
        let names = leases(cluster).await;
        let held = [
            "cloud-node-controller",
            "cloud-node-lifecycle-controller",
            "node-route-controller",
        ]
        .iter()
        .all(|c| names.contains_key(&format!("{c}-dry-run")));
        let (_, metrics) = http_get(gateway, "/metrics").await?;
        let calls = |method: &str| counter(&metrics, "cloudgateway_grpc_calls_total", &[("method", method)]);
        (held
            && calls("EnsureLoadBalancer") >= 3
            && calls("ListRoutes") >= 1
            && calls("BatchLookupInstances") >= 1)
            .then_some(())
    })
    .await;
    for (name, port) in &ports {
        let listed = json_of(*port, "/dry-run").await.expect("/dry-run");
        assert_eq!(
            listed["total"], 0,
            "{name} planned changes beside upstream: {listed}"
        );
    }
    let woulds = json_of(gateway, "/dry-run").await.expect("gateway /dry-run");
    assert_eq!(woulds["total"], 0, "the gateway would write: {woulds}");
    assert_eq!(proxy.writes(), Vec::<String>::new(), "{:?}", proxy.bodies());
    assert_eq!(written_since(&before, &writes(cluster).await), BTreeMap::new());

    // One Service edited: exactly that change is planned, with the AWS calls it would make.
    set_first_port(services, api, 8080).await;
    let service_lb = ports
        .iter()
        .find(|(name, _)| name == "service-lb-controller-dry-run")
        .map(|(_, port)| *port)
        .expect("service-lb-controller");
    let planned = wait_for("the edit planned", Duration::from_secs(60), || async move {
        let listed = json_of(service_lb, "/dry-run").await?;
        (listed["total"].as_u64() >= Some(1)).then_some(listed)
    })
    .await;
    assert_eq!(planned["total"], 1, "{planned}");
    let change = &planned["planned"][0];
    assert_eq!(change["kind"], "load_balancer", "{change}");
    assert_eq!(change["object"], "Service/default/api", "{change}");
    let calls: Vec<&str> = change["change"]["woulds"]
        .as_array()
        .expect("the woulds")
        .iter()
        .filter_map(|w| w["call"].as_str())
        .collect();
    assert!(
        calls.contains(&"CreateListener") || calls.contains(&"ModifyListener"),
        "{calls:?}"
    );
    for (name, port) in ports
        .iter()
        .filter(|(name, _)| name != "service-lb-controller-dry-run")
    {
        let listed = json_of(*port, "/dry-run").await.expect("/dry-run");
        assert_eq!(listed["total"], 0, "{name}: {listed}");
    }
    assert_eq!(proxy.writes(), Vec::<String>::new(), "{:?}", proxy.bodies());
    let mut allowed = BTreeMap::new();
    allowed.insert("services".to_owned(), 1);
    assert_eq!(
        written_since(&before, &writes(cluster).await),
        allowed,
        "only the test's own edit"
    );
    let now = leases(cluster).await;
    for (name, version) in &real_leases {
        assert_eq!(now.get(name), Some(version), "the real lease {name} was written");
    }

    set_first_port(services, api, 80).await;
    for i in shadow {
        cluster.procs[i].stop(Duration::from_secs(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_of_cloud_provider_aws_are_taken_over_without_a_write() {
    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let cloud = Arc::new(Cloud::connect(&format!("http://{moto}")).await);
    let network: Network = cloud.network(CLUSTER_ID).await;
    let a = cloud.run_instance(&network, 0).await;
    let b = cloud.run_instance(&network, 1).await;
    // One node tagged the legacy way only, as in clusters older than kubernetes.io/cluster/.
    cloud
        .tag_legacy_only(std::slice::from_ref(&a.id), CLUSTER_ID)
        .await;
    let proxy = FaultProxy::start(&format!("http://{moto}")).await;

    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let args = aws_gateway_args(
        &proxy.endpoint,
        &network.vpc_id,
        &["--aws-cluster-id", CLUSTER_ID, "--aws-legacy-cluster-tag"],
    );
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args, &MOTO_ENV)
        .await;
    let node_controller = cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    for i in [&a, &b] {
        cluster.register_node(&i.node_name, true).await;
    }
    cluster.nodes_initialized(2, "aws://").await;

    // The Services as cloud-provider-aws served them: a Classic ELB, a TLS NLB, a plain NLB.
    let services = cluster.services("default");
    let web = cluster.create_lb_service("default", "web", json!({})).await;
    let api = cluster
        .create_lb_service(
            "default",
            "api",
            json!({
                "metadata": { "annotations": {
                    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                    "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": CERT,
                    "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "443",
                }},
                "spec": { "ports": [
                    { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                    { "name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP" },
                ]},
            }),
        )
        .await;
    let cache = cluster
        .create_lb_service(
            "default",
            "cache",
            json!({
                "metadata": { "annotations": {
                    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
                }},
                "spec": { "ports": [{ "name": "redis", "port": 6379, "targetPort": 6379, "protocol": "TCP" }]},
            }),
        )
        .await;
    let id = Identity {
        cluster_id: CLUSTER_ID.into(),
        legacy: true,
    };
    let backends = [a.clone(), b.clone()];
    let web_built = cloud
        .classic_as_upstream(&network, &id, &as_upstream(&web), &backends)
        .await;
    let api_built = cloud
        .nlb_as_upstream(&network, &id, &as_upstream(&api), &backends)
        .await;
    let cache_built = cloud
        .nlb_as_upstream(&network, &id, &as_upstream(&cache), &backends)
        .await;
    for (name, built) in [("web", &web_built), ("api", &api_built), ("cache", &cache_built)] {
        services
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "finalizers": [FINALIZER] } })),
            )
            .await
            .expect("upstream's finalizer");
        services
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "status": { "loadBalancer": { "ingress": [{ "hostname": built.dns_name }] } } }),
                ),
            )
            .await
            .expect("upstream's ingress");
    }
    let before = cloud.census(&network).await;
    cluster.procs[node_controller].stop(Duration::from_secs(10)).await;

    // First the shadow run: the gateway and every controller in --dry-run.
    shadow_run(&mut cluster, &args, &MOTO_ENV, &proxy, &services, &api).await;
    assert_eq!(
        cloud.census(&network).await,
        before,
        "the shadow run changed nothing"
    );

    // The service controller takes over: every load balancer ensured, not one AWS write.
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args, &MOTO_ENV)
        .await;
    proxy.reset_counts();
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    ensured(&cluster, 3).await;
    assert_eq!(proxy.writes(), Vec::<String>::new(), "{:?}", proxy.bodies());
    assert_eq!(cloud.census(&network).await, before);
    for (name, built) in [("web", &web_built), ("api", &api_built), ("cache", &cache_built)] {
        let s = services.get(name).await.expect("service");
        assert_eq!(
            ingress_hostname(&s).as_deref(),
            Some(built.dns_name.as_str()),
            "{name}"
        );
        assert_eq!(s.finalizers(), [FINALIZER], "{name}");
    }

    // api's port 80 becomes 8080: the same NLB changes in place, its hostname stays.
    set_first_port(&services, &api, 8080).await;
    let arn = api_built.arn.clone().expect("ARN");
    let listener_ports = || {
        let cloud = cloud.clone();
        let arn = arn.clone();
        async move {
            let out = cloud
                .elb
                .describe_listeners()
                .load_balancer_arn(arn)
                .send()
                .await
                .ok()?;
            let mut ports: Vec<i32> = out.listeners().iter().filter_map(|l| l.port()).collect();
            ports.sort();
            Some(ports)
        }
    };
    wait_for("api's listener on 8080", Duration::from_secs(60), || async {
        listener_ports().await.filter(|p| *p == [443, 8080])
    })
    .await;
    let s = services.get("api").await.expect("api");
    assert_eq!(ingress_hostname(&s).as_deref(), Some(api_built.dns_name.as_str()));
    let census = cloud.census(&network).await;
    assert_eq!(census.nlbs, before.nlbs, "the same NLBs");
    assert_eq!(
        census.target_groups, before.target_groups,
        "the node ports did not change"
    );

    // web is deleted: its ELB, group and node rule go, nothing else; the Service goes.
    let before = cloud.census(&network).await;
    proxy.reset_counts();
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let want = before.without_classic(&web_built);
    wait_for("web's ELB and its group gone", Duration::from_secs(60), || {
        let cloud = cloud.clone();
        let network = network.clone();
        let want = want.clone();
        async move { (cloud.census(&network).await == want).then_some(()) }
    })
    .await;
    wait_for("the Service gone", Duration::from_secs(30), || {
        let services = services.clone();
        async move { matches!(services.get_opt("web").await, Ok(None)).then_some(()) }
    })
    .await;
    // Every write of the deletion named web's ELB or its group.
    let group = web_built.security_group.as_deref().expect("group");
    let writes: Vec<String> = proxy
        .bodies()
        .into_iter()
        .filter(|b| {
            !["Action=Describe", "Action=Get", "Action=List"]
                .iter()
                .any(|r| b.starts_with(r))
        })
        .collect();
    assert!(!writes.is_empty());
    for w in &writes {
        assert!(
            w.contains(&web_built.name) || w.contains(group),
            "a write beyond web: {w}"
        );
    }
    cluster.stop().await;
}
