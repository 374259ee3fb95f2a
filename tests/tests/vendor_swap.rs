//! End-to-end: the gateway is swapped for another vendor's at the same address while the
//! controllers run (the simulator's, then AWS's on moto, then a gateway written in Python):
//! no controller restarts, no sync fails
//! visibly during the handover, new nodes and Services land at the new vendor, and what the old
//! vendor still holds is reported, never deleted or re-created behind the operator's back.

use std::time::{Duration, Instant};

use e2e::{
    Cluster, ClusterSpec, binary, ec2_query, http_get, ingress_ips, start_moto, wait_for, wait_ingress_ip,
    wait_service, xml_value,
};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::api::DeleteParams;
use serde_json::json;

const ACCESS_KEY_ID: &str = "AKIAEXAMPLESWAP00001";
const SECRET_ACCESS_KEY: &str = "swap-test-secret-access-key";

fn hostname_or_ip(service: &Service) -> Option<String> {
    let ingress = service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .clone();
    ingress.hostname.or(ingress.ip)
}

async fn warnings(cluster: &Cluster) -> Vec<Event> {
    cluster
        .events("default")
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_is_swapped_for_another_vendor_under_running_controllers() {
    // The AWS side first: a VPC with a subnet in two zones and an instance for a node to come.
    let moto_dir = tempfile::tempdir().unwrap();
    let (_moto, moto) = start_moto(moto_dir.path()).await;
    let vpc = xml_value(
        &ec2_query(moto, &[("Action", "CreateVpc"), ("CidrBlock", "10.1.0.0/16")]).await,
        "vpcId",
    )
    .expect("a VPC");
    let mut subnets = Vec::new();
    for (cidr, zone) in [("10.1.1.0/24", "us-east-1a"), ("10.1.2.0/24", "us-east-1b")] {
        let answer = ec2_query(
            moto,
            &[
                ("Action", "CreateSubnet"),
                ("VpcId", &vpc),
                ("CidrBlock", cidr),
                ("AvailabilityZone", zone),
            ],
        )
        .await;
        subnets.push(xml_value(&answer, "subnetId").expect("a subnet"));
    }
    let run = ec2_query(
        moto,
        &[
            ("Action", "RunInstances"),
            ("ImageId", "ami-12c6146b"),
            ("MinCount", "1"),
            ("MaxCount", "1"),
            ("InstanceType", "t3.medium"),
            ("SubnetId", &subnets[0]),
        ],
    )
    .await;
    let aws_instance = xml_value(&run, "instanceId").expect("an instance");

    // The cluster, on the simulator, with every controller running.
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["sim-a", "sim-b"])).await;
    for node in ["sim-a", "sim-b"] {
        cluster.register_node(node, true).await;
    }
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller(
        "cloud-node-lifecycle-controller",
        "cloud-node-lifecycle-controller",
        &["--node-monitor-period", "1s"],
    );
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let controllers = [
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "service-lb-controller",
    ];
    let pids = cluster.pids(&controllers);
    let nodes = cluster.nodes();
    let services = cluster.services("default");
    for node in ["sim-a", "sim-b"] {
        wait_for(
            &format!("{node} initialized by the simulator"),
            Duration::from_secs(60),
            || {
                let nodes = nodes.clone();
                async move {
                    let id = nodes.get(node).await.ok()?.spec?.provider_id?;
                    id.starts_with("simulator://").then_some(())
                }
            },
        )
        .await;
    }
    cluster.create_lb_service("default", "before", json!({})).await;
    let before = wait_ingress_ip(&services, "before", "before provisioned by the simulator").await;
    let before_ip = ingress_ips(&before);

    // The swap: the simulator's gateway goes (SIGTERM, as a rollout), AWS's comes at the same
    // address. A Service created while no gateway answers must come through unscathed.
    let handover = Instant::now();
    cluster.stop_gateway().await;
    cluster.create_lb_service("default", "during", json!({})).await;
    let args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "aws",
        "--aws-region",
        "us-east-1",
        "--aws-endpoint-url",
        &format!("http://{moto}"),
        "--aws-vpc-id",
        &vpc,
        "--aws-subnet-ids",
        &subnets.join(","),
        "--aws-max-attempts",
        "1",
    ]
    .map(str::to_owned)
    .to_vec();
    let env = [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    cluster.swap_gateway(&binary("cloud-gateway"), &args, &env).await;

    // New machines join from AWS; new Services get load balancers in moto (Classic ELBs, the
    // AWS default).
    cluster.register_node(&aws_instance, true).await;
    cluster.create_lb_service("default", "after", json!({})).await;
    let aws_id = wait_for(
        "the new node initialized from AWS",
        Duration::from_secs(60),
        || {
            let nodes = nodes.clone();
            let name = aws_instance.clone();
            async move {
                nodes
                    .get(&name)
                    .await
                    .ok()?
                    .spec?
                    .provider_id
                    .filter(|id| id.starts_with("aws://"))
            }
        },
    )
    .await;
    assert!(aws_id.ends_with(&aws_instance), "{aws_id}");
    for name in ["during", "after"] {
        let service = wait_service(&services, name, &format!("{name} provisioned at AWS"), |s| {
            hostname_or_ip(s).is_some()
        })
        .await;
        let ingress = hostname_or_ip(&service).unwrap();
        assert!(
            !before_ip.contains(&ingress),
            "{name} must not get a simulator address: {ingress}"
        );
    }
    let lbs = moto_load_balancer_names(moto).await;
    assert_eq!(
        lbs.len(),
        2,
        "one load balancer each for during and after, none for before: {lbs:?}"
    );

    // What the simulator still holds is reported: a Warning and a metric for `before`, whose
    // status keeps the simulator's address; nothing was deleted or re-created for it.
    wait_for(
        "before reported as held by the former provider",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            async move {
                warnings(cluster)
                    .await
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("LoadBalancerAtFormerProvider")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("before")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    let lb_metrics = cluster.metrics_of("service-lb-controller").await;
    assert!(
        lb_metrics.contains(
            "service_lb_controller_load_balancer_at_former_provider{namespace=\"default\",name=\"before\",provider=\"simulator\"} 1"
        ),
        "{lb_metrics}"
    );
    assert!(
        lb_metrics.contains("gateway_provider_info{provider=\"aws\"} 1"),
        "{lb_metrics}"
    );
    assert_eq!(ingress_ips(&services.get("before").await.unwrap()), before_ip);

    // A node of the former vendor going NotReady is not deleted: AWS answers "not mine", never
    // "not found", for a simulator provider ID.
    cluster.set_ready("sim-b", false).await;
    let lifecycle_passes = Instant::now();
    while lifecycle_passes.elapsed() < Duration::from_secs(4) {
        assert!(
            nodes.get_opt("sim-b").await.unwrap().is_some(),
            "a former vendor's node was deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // No controller restarted, and no sync failed visibly through the handover.
    cluster.assert_not_restarted(&controllers, &pids);
    let failed: Vec<String> = warnings(&cluster)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
        .map(|e| format!("{:?}: {:?}", e.regarding.and_then(|r| r.name), e.note))
        .collect();
    assert!(
        failed.is_empty(),
        "a sync failed visibly during the handover ({:?} ago): {failed:?}",
        handover.elapsed()
    );

    // And again, for a gateway written by someone else (Python, its own in-memory cloud): the
    // same controllers, still not restarted, follow it too.
    let python =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/python-gateway/run.sh");
    let inventory = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/python-gateway/inventory.yaml");
    let python_args = ["--inventory".to_owned(), inventory.display().to_string()];
    cluster
        .swap_gateway_with(&python, ["--listen", "--admin-listen"], &python_args, &[])
        .await;
    cluster.register_node("py-worker-1", true).await;
    cluster.create_lb_service("default", "python", json!({})).await;
    wait_for(
        "py-worker-1 initialized from the Python gateway",
        Duration::from_secs(60),
        || {
            let nodes = nodes.clone();
            async move {
                let id = nodes.get("py-worker-1").await.ok()?.spec?.provider_id?;
                id.starts_with("pycloud://").then_some(())
            }
        },
    )
    .await;
    let service = wait_ingress_ip(&services, "python", "python provisioned by the Python gateway").await;
    let python_ip = ingress_ips(&service)[0].clone();
    assert!(
        python_ip.starts_with("198.51.100."),
        "an address of pycloud's pool: {python_ip}"
    );
    for (name, pid) in controllers.iter().zip(&pids) {
        assert_eq!(
            cluster.procs[cluster.proc_index(name)].id(),
            Some(*pid),
            "{name} restarted"
        );
    }

    // Deleting `before`: its finalizer goes (the Service is not held forever), and the load
    // balancer left at the simulator is reported and counted, not silently forgotten.
    services.delete("before", &DeleteParams::default()).await.unwrap();
    wait_for("before deleted", Duration::from_secs(30), || {
        let services = services.clone();
        async move { services.get_opt("before").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let lb_metrics = cluster.metrics_of("service-lb-controller").await;
    assert!(
        lb_metrics.contains("service_lb_controller_orphaned_load_balancers_total{provider=\"simulator\"} 1"),
        "{lb_metrics}"
    );
    cluster.stop().await;
}

/// The names of moto's load balancers, Classic and ELBv2.
async fn moto_load_balancer_names(moto: std::net::SocketAddr) -> Vec<String> {
    let data = http_get(moto, "/moto-api/data.json")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    let data: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
    ["elb", "elbv2"]
        .iter()
        .filter_map(|api| data[api]["FakeLoadBalancer"].as_array())
        .flatten()
        .filter_map(|lb| lb["name"].as_str().map(str::to_owned))
        .collect()
}
