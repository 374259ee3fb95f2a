//! End-to-end: service-lb-controller replicas share the Services through shard leases; a replica
//! killed mid-run is replaced without any load balancer created twice, leaked, or synced by two
//! replicas at once.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use e2e::{
    Cluster, ClusterSpec,
    chaos::services::{Work, overlaps, start_replica, work_of},
    ingress_ips, wait_for,
};
use futures::StreamExt;
use k8s_openapi::{api::core::v1::Service, jiff::Timestamp};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams},
};
use serde_json::json;

const SERVICES: usize = 200;

/// The test's Services (not the API server's own `kubernetes` Service).
fn ours(services: Vec<Service>) -> Vec<Service> {
    services
        .into_iter()
        .filter(|s| s.name_any().starts_with("svc-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_services_and_survive_a_kill_without_duplicates_leaks_or_overlaps() {
    let nodes = ["node-a", "node-b", "node-c"];
    let spec = ClusterSpec::with_instances(&nodes).with_gateway_limits(200);
    let mut cluster = Cluster::start(spec).await;
    for node in nodes {
        cluster.register_node(node, true).await;
    }
    let mut replicas: Vec<(String, usize)> = Vec::new();
    for name in ["r1", "r2", "r3"] {
        replicas.push((name.to_owned(), start_replica(&mut cluster, name)));
    }
    // The shards are split between the three before the Services come.
    wait_for(
        "16 shards split over three replicas",
        Duration::from_secs(30),
        || {
            let cluster = &cluster;
            let replicas = replicas.clone();
            async move {
                let mut owned = Vec::new();
                for (_, index) in &replicas {
                    let body = e2e::http_get(cluster.procs[*index].http?, "/metrics").await?.1;
                    let line = body
                        .lines()
                        .find(|l| l.starts_with("service_lb_controller_shards_owned "))?;
                    owned.push(line.rsplit(' ').next()?.parse::<u32>().ok()?);
                }
                (owned.iter().sum::<u32>() == 16 && owned.iter().all(|n| *n >= 5)).then_some(())
            }
        },
    )
    .await;

    let services = cluster.services("default");
    let names: Vec<String> = (0..SERVICES).map(|i| format!("svc-{i:03}")).collect();
    futures::stream::iter(&names)
        .for_each_concurrent(16, |name| {
            let cluster = &cluster;
            async move {
                cluster.create_lb_service("default", name, json!({})).await;
            }
        })
        .await;
    let provisioned = |cluster: &Cluster| {
        let services = cluster.services("default");
        async move {
            let list = services.list(&ListParams::default()).await.ok()?.items;
            Some(list.iter().filter(|s| !ingress_ips(s).is_empty()).count())
        }
    };
    wait_for(
        "a third of the Services provisioned",
        Duration::from_secs(60),
        || async { provisioned(&cluster).await.filter(|n| *n >= SERVICES / 3) },
    )
    .await;

    // Kill r2 mid-run, without a chance to release anything; a fourth replica joins.
    let r2 = replicas[1].1;
    cluster.procs[r2].kill().await;
    let killed_at = Timestamp::now();
    replicas.push(("r4".to_owned(), start_replica(&mut cluster, "r4")));

    wait_for("every Service provisioned", Duration::from_secs(120), || async {
        provisioned(&cluster).await.filter(|n| *n == SERVICES)
    })
    .await;
    let info = cluster.sim(&["info"]).await;
    assert_eq!(
        info["load_balancers_created"], SERVICES,
        "a load balancer was created twice: {info}"
    );

    // A quarter of the Services deleted across the replicas: exactly their load balancers go.
    let deleted: BTreeSet<&String> = names.iter().step_by(4).collect();
    for name in &deleted {
        services.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let remaining = SERVICES - deleted.len();
    wait_for("the deleted Services gone", Duration::from_secs(60), || {
        let services = services.clone();
        async move {
            let left = ours(services.list(&ListParams::default()).await.ok()?.items).len();
            (left == remaining).then_some(())
        }
    })
    .await;
    let live = ours(services.list(&ListParams::default()).await.unwrap().items);
    let by_uid: BTreeMap<String, &Service> = live.iter().map(|s| (s.uid().unwrap(), s)).collect();
    let lbs = cluster.load_balancers().await;
    assert_eq!(lbs.len(), live.len(), "leaked or missing load balancers");
    for lb in &lbs {
        let uid = lb["service_uid"].as_str().unwrap();
        let service = by_uid
            .get(uid)
            .unwrap_or_else(|| panic!("load balancer of no live Service: {lb}"));
        assert_eq!(
            ingress_ips(service),
            vec![lb["ip"].as_str().unwrap().to_owned()],
            "{lb}"
        );
    }
    let info = cluster.sim(&["info"]).await;
    assert_eq!(info["load_balancers_created"], SERVICES, "{info}");

    // Who synced what, when: never two replicas on one Service at once.
    let mut work: BTreeMap<String, Vec<Work>> = BTreeMap::new();
    let mut synced_by: BTreeMap<String, usize> = BTreeMap::new();
    for (name, index) in &replicas {
        let killed = (*index == r2).then_some(killed_at);
        let items = work_of(name, &cluster.procs[*index].log(), killed).unwrap_or_else(|e| panic!("{e}"));
        for (service, mut items) in items {
            *synced_by.entry(name.clone()).or_default() += items.len();
            work.entry(service).or_default().append(&mut items);
        }
    }
    let overlapping = overlaps(&work);
    assert!(overlapping.is_empty(), "{overlapping:#?}");
    for (name, _) in &replicas {
        assert!(
            synced_by.get(name).copied().unwrap_or(0) > 0,
            "{name} did no work: {synced_by:?}"
        );
    }
    eprintln!("syncs per replica: {synced_by:?}");
    cluster.stop().await;
}
