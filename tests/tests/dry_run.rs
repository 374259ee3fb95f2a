//! End-to-end shadow mode: on a cluster the real controllers converged, the gateway and every
//! controller in `--dry-run` make zero writes to the API server (their own `-dry-run` Leases
//! aside; the real Leases untouched) and plan zero changes; one Service edited (a port changed)
//! is exactly one planned change, of that Service's load balancer, and the cloud is unchanged.

use std::{collections::BTreeMap, time::Duration};

use e2e::{
    Cluster, ClusterSpec, binary, counter, http_get, ingress_ips,
    shadow::{json_of, leases, writes, written_since},
    wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const CLUSTER_CIDR: &str = "10.244.0.0/16";
const NODES: [(&str, &str); 2] = [("node-a", "10.244.1.0/24"), ("node-b", "10.244.2.0/24")];

/// The four controllers with the flags of this test (short periods, so a dry-run replica's
/// first passes come soon), labelled `<binary><suffix>`.
fn start_controllers(cluster: &mut Cluster, suffix: &str, extra: &[&str]) -> Vec<usize> {
    let with =
        |own: &[&'static str]| -> Vec<String> { own.iter().chain(extra).map(|s| (*s).to_owned()).collect() };
    let controllers: [(&str, Vec<String>); 4] = [
        (
            "cloud-node-controller",
            with(&["--node-status-update-frequency", "2s"]),
        ),
        (
            "cloud-node-lifecycle-controller",
            with(&["--node-monitor-period", "1s"]),
        ),
        ("service-lb-controller", with(&[])),
        (
            "node-route-controller",
            with(&[
                "--cluster-cidr",
                CLUSTER_CIDR,
                "--route-reconciliation-period",
                "2s",
            ]),
        ),
    ];
    controllers
        .iter()
        .map(|(name, args)| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cluster.start_controller(name, &format!("{name}{suffix}"), &args)
        })
        .collect()
}

fn converged(node: &Node) -> bool {
    let spec = node.spec.clone().unwrap_or_default();
    let initialized = spec.provider_id.is_some()
        && !spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized");
    let routed = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
        });
    initialized && routed
}

#[tokio::test]
async fn beside_a_converged_cluster_dry_run_writes_nothing_and_plans_exactly_the_edit() {
    let names: Vec<&str> = NODES.iter().map(|(n, _)| *n).collect();
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&names).with_gateway_limits(100)).await;
    for (name, cidr) in NODES {
        cluster.register_node(name, true).await;
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        cluster
            .nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("pod CIDR");
    }
    cluster.create_lb_service("default", "web", json!({})).await;

    // The real controllers converge the cluster, then stop (releasing their leases).
    let real = start_controllers(&mut cluster, "", &[]);
    let services = cluster.services("default");
    wait_for(
        "the real controllers to converge",
        Duration::from_secs(90),
        || {
            let (nodes, services, cluster) = (cluster.nodes(), services.clone(), &cluster);
            async move {
                let all = nodes.list(&ListParams::default()).await.ok()?;
                let web = services.get_opt("web").await.ok()??;
                // The load balancer serves every node by its providerID: the host sync after
                // the nodes initialized has landed too.
                let lbs = cluster.try_load_balancers().await?;
                let backends = lbs.first()?.get("backends")?.as_array()?.clone();
                let backends = backends
                    .iter()
                    .filter(|b| b["provider_id"].as_str().is_some_and(|p| !p.is_empty()))
                    .count();
                (all.items.len() == NODES.len()
                    && all.items.iter().all(converged)
                    && !ingress_ips(&web).is_empty()
                    && web.finalizers().len() == 1
                    && backends == NODES.len())
                .then_some(())
            }
        },
    )
    .await;
    let routes = cluster.sim(&["routes", "list"]).await;
    assert_eq!(routes.as_array().map(Vec::len), Some(NODES.len()), "{routes}");
    for index in real {
        cluster.procs[index].stop(Duration::from_secs(10)).await;
    }
    let lbs_before = cluster.load_balancers().await;

    // The gateway in dry-run too, on the same cloud.
    let state = cluster.dir.path().join("cloud-state.json").display().to_string();
    let inventory = cluster.dir.path().join("inventory.yaml").display().to_string();
    let gateway_args: Vec<String> = [
        "--simulator-inventory",
        &inventory,
        "--simulator-state",
        &state,
        "--simulator-no-fsync",
        "--insecure-plaintext",
        "--instance-cache-ttl",
        "0s",
        "--dry-run",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args, &[])
        .await;
    let real_leases = leases(&cluster).await;
    assert!(
        real_leases.keys().all(|name| !name.contains("-dry-run")),
        "{real_leases:?}"
    );
    let before = writes(&cluster).await;

    let shadow = start_controllers(&mut cluster, "-dry-run", &["--dry-run"]);
    let side_ports: Vec<(String, std::net::SocketAddr)> = shadow
        .iter()
        .map(|&i| {
            (
                cluster.procs[i].name.clone(),
                cluster.procs[i].http.expect("side port"),
            )
        })
        .collect();
    // Each has been through the cluster: its leader (or shard) leases are held, and the gateway
    // saw the calls of its first passes (every write call answered in dry-run).
    let gateway_http = cluster.gateway_http;
    wait_for(
        "the dry-run controllers' first passes",
        Duration::from_secs(60),
        || {
            let cluster = &cluster;
            async move {
                let names = leases(cluster).await;
                let held = [
                    "cloud-node-controller-dry-run",
                    "cloud-node-lifecycle-controller-dry-run",
                    "node-route-controller-dry-run",
                ]
                .iter()
                .all(|l| names.contains_key(*l))
                    && names
                        .keys()
                        .any(|n| n.starts_with("service-lb-controller-dry-run-shard-"));
                let (_, metrics) = http_get(gateway_http, "/metrics").await?;
                let calls =
                    |method: &str| counter(&metrics, "cloudgateway_grpc_calls_total", &[("method", method)]);
                let gateway = json_of(gateway_http, "/dry-run").await?;
                (held
                    && gateway["calls"].as_u64() >= Some(1)
                    && calls("ListRoutes") >= 1
                    && calls("BatchLookupInstances") >= 1)
                    .then_some(())
            }
        },
    )
    .await;
    // A route controller resync and a node address refresh more after that: still nothing.
    let passes = |metrics: &str| {
        (
            counter(
                metrics,
                "cloudgateway_grpc_calls_total",
                &[("method", "ListRoutes")],
            ),
            counter(
                metrics,
                "cloudgateway_grpc_calls_total",
                &[("method", "BatchLookupInstances")],
            ),
        )
    };
    let (_, metrics) = http_get(gateway_http, "/metrics").await.expect("gateway metrics");
    let (routes_seen, lookups_seen) = passes(&metrics);
    wait_for(
        "another resync of routes and addresses",
        Duration::from_secs(30),
        || async move {
            let (_, metrics) = http_get(gateway_http, "/metrics").await?;
            let (routes, lookups) = passes(&metrics);
            (routes > routes_seen && lookups > lookups_seen).then_some(())
        },
    )
    .await;

    for (name, port) in &side_ports {
        let listed = json_of(*port, "/dry-run").await.expect("/dry-run");
        assert_eq!(listed["dry_run"], true, "{name}");
        assert_eq!(
            listed["total"], 0,
            "{name} planned changes on a converged cluster: {listed}; before: {lbs_before:?}"
        );
        let (_, metrics) = http_get(*port, "/metrics").await.expect("metrics");
        assert_eq!(
            counter(&metrics, "ccm_dry_run_planned_changes_total", &[]),
            0,
            "{name}"
        );
    }
    let gateway = json_of(gateway_http, "/dry-run").await.expect("gateway /dry-run");
    assert_eq!(gateway["total"], 0, "the gateway would write nothing: {gateway}");
    assert_eq!(written_since(&before, &writes(&cluster).await), BTreeMap::new());
    let now = leases(&cluster).await;
    for (name, version) in &real_leases {
        assert_eq!(now.get(name), Some(version), "the real lease {name} was written");
    }
    assert!(
        now.keys()
            .filter(|n| !real_leases.contains_key(*n))
            .all(|n| n.contains("-dry-run")),
        "{now:?}"
    );

    // One Service edited: its port.
    let edit =
        json!({"spec": {"ports": [{"name": "http", "port": 8081, "targetPort": 8080, "protocol": "TCP"}]}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit the Service");
    let before = writes(&cluster).await;
    let service_lb = side_ports
        .iter()
        .find(|(name, _)| name == "service-lb-controller-dry-run")
        .map(|(_, port)| *port)
        .expect("service-lb-controller");
    let planned = wait_for("the edit to be planned", Duration::from_secs(60), || async move {
        let listed = json_of(service_lb, "/dry-run").await?;
        (listed["total"].as_u64() >= Some(1)).then_some(listed)
    })
    .await;
    assert_eq!(planned["total"], 1, "{planned}");
    let change = &planned["planned"][0];
    assert_eq!(change["kind"], "load_balancer");
    assert_eq!(change["object"], "Service/default/web");
    let woulds = change["change"]["woulds"].as_array().expect("the woulds");
    assert_eq!(woulds.len(), 1, "{change}");
    assert_eq!(woulds[0]["call"], "ensure_load_balancer");
    assert!(
        woulds[0]["request"].as_str().unwrap_or_default().contains("8081"),
        "{change}"
    );
    let (_, metrics) = http_get(service_lb, "/metrics").await.expect("metrics");
    assert_eq!(
        counter(
            &metrics,
            "ccm_dry_run_planned_changes_total",
            &[("controller", "service-lb-controller"), ("kind", "load_balancer")]
        ),
        1
    );
    for (name, port) in side_ports.iter().filter(|(_, port)| *port != service_lb) {
        let listed = json_of(*port, "/dry-run").await.expect("/dry-run");
        assert_eq!(listed["total"], 0, "{name}: {listed}");
    }
    assert_eq!(written_since(&before, &writes(&cluster).await), BTreeMap::new());
    assert_eq!(
        cluster.load_balancers().await,
        lbs_before,
        "the cloud is unchanged"
    );
    cluster.stop().await;
}

/// A real controller answered from a plan (a `--dry-run` gateway still serving, as while a
/// rollout switches a shadow install to the real one) must not act on it: a Service deleted
/// meanwhile keeps its finalizer and its load balancer until a gateway that writes answers.
#[tokio::test]
async fn a_real_controller_never_acts_on_an_answer_from_a_dry_run_gateway() {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&["node-a"]).with_gateway_limits(100)).await;
    cluster.register_node("node-a", true).await;
    cluster.start_controller("cloud-node-controller", "cloud-node-controller", &[]);
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    cluster.create_lb_service("default", "web", json!({})).await;
    let services = cluster.services("default");
    wait_for("web provisioned", Duration::from_secs(60), || {
        let services = services.clone();
        async move {
            let web = services.get_opt("web").await.ok()??;
            (!ingress_ips(&web).is_empty()).then_some(())
        }
    })
    .await;
    let lbs = cluster.load_balancers().await;
    assert_eq!(lbs.len(), 1, "{lbs:?}");

    // The gateway restarts in --dry-run on the same cloud; the Service is deleted.
    let state = cluster.dir.path().join("cloud-state.json").display().to_string();
    let inventory = cluster.dir.path().join("inventory.yaml").display().to_string();
    let args = |dry: bool| -> Vec<String> {
        let mut args: Vec<String> = [
            "--simulator-inventory",
            &inventory,
            "--simulator-state",
            &state,
            "--simulator-no-fsync",
            "--insecure-plaintext",
            "--instance-cache-ttl",
            "0s",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if dry {
            args.push("--dry-run".into());
        }
        args
    };
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args(true), &[])
        .await;
    services.delete("web", &Default::default()).await.expect("delete");
    let gateway = cluster.gateway_http;
    wait_for(
        "the deletion answered from a plan, twice",
        Duration::from_secs(60),
        || async move {
            let listed = json_of(gateway, "/dry-run").await?;
            let deletions = listed["woulds"]
                .as_array()?
                .iter()
                .filter(|w| w["call"] == "delete_load_balancer")
                .count();
            (deletions >= 2).then_some(())
        },
    )
    .await;
    let web = services
        .get_opt("web")
        .await
        .expect("get")
        .expect("web still there");
    assert_eq!(web.finalizers(), ["service.kubernetes.io/load-balancer-cleanup"]);

    // A gateway that writes: the deletion goes through.
    cluster
        .swap_gateway(&binary("cloud-gateway"), &args(false), &[])
        .await;
    wait_for("web gone", Duration::from_secs(60), || {
        let services = services.clone();
        async move { matches!(services.get_opt("web").await, Ok(None)).then_some(()) }
    })
    .await;
    assert_eq!(cluster.load_balancers().await, Vec::<serde_json::Value>::new());
    cluster.stop().await;
}
