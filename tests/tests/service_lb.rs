//! End-to-end: service-lb-controller as processes against fake-apiserver and cloud-gateway on
//! the simulator.

use std::{collections::BTreeSet, time::Duration};

use e2e::{Cluster, ClusterSpec, ingress_ips, wait_for};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

async fn cluster_with_nodes(nodes: &[&str], gateway_args: &[&str]) -> Cluster {
    let mut spec = ClusterSpec::with_instances(nodes);
    spec.gateway_args = gateway_args.iter().map(|s| (*s).to_owned()).collect();
    let cluster = Cluster::start(spec).await;
    for node in nodes {
        cluster.register_node(node, true).await;
    }
    cluster
}

/// The simulator's load balancer of the Service with `uid`, if any.
async fn load_balancer_of(cluster: &Cluster, uid: &str) -> Option<Value> {
    cluster
        .load_balancers()
        .await
        .into_iter()
        .find(|lb| lb["service_uid"] == uid)
}

fn backend_names(lb: &Value) -> Vec<String> {
    lb["backends"]
        .as_array()
        .map(|b| {
            b.iter()
                .filter_map(|b| b["node_name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the Service has an ingress IP; returns the Service.
async fn provisioned(services: &Api<Service>, name: &str, timeout: Duration) -> Service {
    wait_for(&format!("{name} to get an ingress IP"), timeout, || async move {
        services
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .filter(|s| !ingress_ips(s).is_empty())
    })
    .await
}

async fn reasons(cluster: &Cluster, namespace: &str, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), namespace);
    let mut list = events.list(&ListParams::default()).await.expect("events").items;
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_is_created_updated_and_deleted_with_its_service() {
    let mut cluster = cluster_with_nodes(&["node-a", "node-b"], &[]).await;
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let services = cluster.services("default");
    let created = cluster.create_lb_service("default", "web", json!({})).await;
    let uid = created.uid().unwrap();

    let web = provisioned(&services, "web", Duration::from_secs(60)).await;
    assert!(
        web.finalizers().iter().any(|f| f == FINALIZER),
        "{:?}",
        web.finalizers()
    );
    let lb = load_balancer_of(&cluster, &uid)
        .await
        .expect("a load balancer in the cloud");
    assert_eq!(ingress_ips(&web), vec![lb["ip"].as_str().unwrap().to_owned()]);
    assert_eq!(backend_names(&lb), ["node-a", "node-b"]);
    let events = reasons(&cluster, "default", "web").await;
    assert!(
        events.contains(&"EnsuringLoadBalancer".to_owned())
            && events.contains(&"EnsuredLoadBalancer".to_owned()),
        "{events:?}"
    );

    // A second port needs the cloud: the load balancer gets a second listener.
    let ports = json!({"spec": {"ports": [
        { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" },
        { "name": "dns", "port": 53, "targetPort": 53, "protocol": "UDP" },
    ]}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&ports))
        .await
        .unwrap();
    wait_for("the second listener", Duration::from_secs(30), || {
        let cluster = &cluster;
        let uid = uid.clone();
        async move {
            let lb = load_balancer_of(cluster, &uid).await?;
            (lb["listeners"].as_array()?.len() == 2).then_some(())
        }
    })
    .await;

    // Deleted: the load balancer goes, then the finalizer, then the Service.
    services.delete("web", &DeleteParams::default()).await.unwrap();
    wait_for("the Service to be gone", Duration::from_secs(30), || {
        let services = services.clone();
        async move { services.get_opt("web").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(
        load_balancer_of(&cluster, &uid).await.is_none(),
        "the load balancer leaked"
    );
    let events = reasons(&cluster, "default", "web").await;
    assert!(
        events.contains(&"DeletingLoadBalancer".to_owned())
            && events.contains(&"DeletedLoadBalancer".to_owned()),
        "{events:?}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_changes_update_the_backends_of_every_load_balancer() {
    let mut cluster = cluster_with_nodes(&["node-a", "node-b", "node-c"], &[]).await;
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let services = cluster.services("default");
    let mut uids = Vec::new();
    for name in ["one", "two"] {
        uids.push(
            cluster
                .create_lb_service("default", name, json!({}))
                .await
                .uid()
                .unwrap(),
        );
    }
    for name in ["one", "two"] {
        provisioned(&services, name, Duration::from_secs(60)).await;
    }
    let backends_are = |want: &'static [&'static str]| {
        let cluster = &cluster;
        let uids = uids.clone();
        async move {
            for uid in &uids {
                let lb = load_balancer_of(cluster, uid).await?;
                if backend_names(&lb) != want {
                    return None;
                }
            }
            Some(())
        }
    };
    wait_for("three backends", Duration::from_secs(30), || {
        backends_are(&["node-a", "node-b", "node-c"])
    })
    .await;

    // Excluded by the label: out of every load balancer.
    let label = json!({"metadata": {"labels": {EXCLUDE: "true"}}});
    cluster
        .nodes()
        .patch("node-b", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    wait_for("node-b excluded", Duration::from_secs(30), || {
        backends_are(&["node-a", "node-c"])
    })
    .await;

    // Deleted: out too; a new node: in.
    cluster
        .nodes()
        .delete("node-c", &DeleteParams::default())
        .await
        .unwrap();
    cluster.register_node("node-d", true).await;
    wait_for("node-c gone, node-d in", Duration::from_secs(30), || {
        backends_are(&["node-a", "node-d"])
    })
    .await;

    // A NotReady node stays a backend (KEP-3458: readiness flaps must not churn load balancers).
    cluster.set_ready("node-a", false).await;
    let metrics = |cluster: &Cluster| {
        let http = cluster.procs.last().and_then(|p| p.http).unwrap();
        async move {
            e2e::http_get(http, "/metrics")
                .await
                .map(|(_, body)| body)
                .unwrap_or_default()
        }
    };
    let body = metrics(&cluster).await;
    assert!(
        body.contains("service_controller_loadbalancer_sync_total"),
        "{body}"
    );
    backends_are(&["node-a", "node-d"])
        .await
        .expect("node-a kept while NotReady");
    let events = reasons(&cluster, "default", "one").await;
    assert!(events.contains(&"UpdatedLoadBalancer".to_owned()), "{events:?}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_services_of_the_configured_class_are_served() {
    let mut cluster = cluster_with_nodes(&["node-a"], &[]).await;
    cluster.start_controller("service-lb-controller", "default-class", &[]);
    cluster.start_controller(
        "service-lb-controller",
        "internal-class",
        &["--load-balancer-class", "example.com/internal"],
    );
    let services = cluster.services("default");
    let plain = cluster.create_lb_service("default", "plain", json!({})).await;
    let internal = cluster
        .create_lb_service(
            "default",
            "internal",
            json!({"spec": {"loadBalancerClass": "example.com/internal"}}),
        )
        .await;
    let other = cluster
        .create_lb_service(
            "default",
            "other",
            json!({"spec": {"loadBalancerClass": "example.com/other"}}),
        )
        .await;
    provisioned(&services, "plain", Duration::from_secs(60)).await;
    provisioned(&services, "internal", Duration::from_secs(60)).await;
    assert!(load_balancer_of(&cluster, &plain.uid().unwrap()).await.is_some());
    assert!(
        load_balancer_of(&cluster, &internal.uid().unwrap())
            .await
            .is_some()
    );

    // Nobody serves the third class: no finalizer, no status, nothing in the cloud.
    let other = services.get(&other.name_any()).await.unwrap();
    assert!(
        other.finalizers().is_empty() && ingress_ips(&other).is_empty(),
        "{other:?}"
    );
    assert!(load_balancer_of(&cluster, &other.uid().unwrap()).await.is_none());

    // Deleting the internal one: its own install cleans up.
    services
        .delete("internal", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("internal gone", Duration::from_secs(30), || {
        let services = services.clone();
        async move { services.get_opt("internal").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(
        load_balancer_of(&cluster, &internal.uid().unwrap())
            .await
            .is_none()
    );
    assert!(load_balancer_of(&cluster, &plain.uid().unwrap()).await.is_some());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_exactly_while_the_cloud_provisions() {
    // The cloud answers RETRY_AFTER until 6 s after creation: the first retry comes after the
    // delay it named (not 5 s, 10 s of backoff), so the ingress appears a little after 6 s
    // with two ensure calls.
    let mut cluster = cluster_with_nodes(&["node-a"], &["--simulator-lb-provision-delay", "6s"]).await;
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let services = cluster.services("default");
    let started = std::time::Instant::now();
    cluster.create_lb_service("default", "slow", json!({})).await;
    provisioned(&services, "slow", Duration::from_secs(60)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(6),
        "provisioned before the cloud said it would be: {took:?}"
    );
    let stats = cluster.sim(&["stats"]).await;
    let calls = |op: &str| stats["operations"][op]["calls"].as_u64().unwrap_or(0);
    assert_eq!(
        (calls("ensure_load_balancer"), calls("read_load_balancers")),
        (1, 1),
        "one ensure answered RETRY_AFTER (a new Service's, with no read first); after exactly \
         that delay, one read found the load balancer active, with no second write: {stats}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_deleted_while_the_gateway_is_down_keeps_its_finalizer_until_its_load_balancer_is_gone() {
    let mut cluster = cluster_with_nodes(&["node-a"], &[]).await;
    cluster.start_controller(
        "service-lb-controller",
        "service-lb-controller",
        &["--gateway-timeout", "2s", "--gateway-retries", "1"],
    );
    let services = cluster.services("default");
    let uid = cluster
        .create_lb_service("default", "web", json!({}))
        .await
        .uid()
        .unwrap();
    provisioned(&services, "web", Duration::from_secs(60)).await;

    cluster.stop_gateway().await;
    services.delete("web", &DeleteParams::default()).await.unwrap();
    // The controller tries and fails: the Service stays, held by the finalizer.
    wait_for("a failed cleanup", Duration::from_secs(30), || {
        let cluster = &cluster;
        async move {
            reasons(cluster, "default", "web")
                .await
                .contains(&"SyncLoadBalancerFailed".to_owned())
                .then_some(())
        }
    })
    .await;
    let held = services
        .get("web")
        .await
        .expect("the Service is held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());

    cluster.start_gateway().await;
    assert!(
        load_balancer_of(&cluster, &uid).await.is_some(),
        "the load balancer is still there"
    );
    wait_for("the Service to be gone", Duration::from_secs(60), || {
        let services = services.clone();
        async move { services.get_opt("web").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(
        load_balancer_of(&cluster, &uid).await.is_none(),
        "the load balancer leaked"
    );
    cluster.stop().await;
}

/// The Warning `SyncLoadBalancerFailed` about Service `name`, once written.
async fn sync_failure(cluster: &Cluster, name: &str) -> Event {
    wait_for(
        &format!("a Warning about {name}"),
        Duration::from_secs(30),
        || {
            let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
            async move {
                events
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|e| {
                        e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    })
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_cloud_cannot_serve_is_a_warning_naming_the_problem() {
    let mut cluster = cluster_with_nodes(&["node-a"], &[]).await;
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let sctp = json!({"spec": {"ports": [{ "name": "sig", "port": 3868, "protocol": "SCTP" }]}});
    cluster.create_lb_service("default", "sctp", sctp).await;
    let outside = json!({"spec": {"loadBalancerIP": "198.51.100.7"}});
    cluster
        .create_lb_service("default", "outside-pool", outside)
        .await;
    for (name, says) in [("sctp", "SCTP"), ("outside-pool", "198.51.100.7")] {
        let warning = sync_failure(&cluster, name).await;
        assert_eq!(warning.type_.as_deref(), Some("Warning"));
        let note = warning.note.unwrap_or_default();
        assert!(
            note.contains("invalid argument") && note.contains(says),
            "{name}: {note}"
        );
    }
    assert!(
        cluster.load_balancers().await.is_empty(),
        "nothing is created in the cloud"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_the_cloud_cannot_serve_gets_a_warning_and_no_hot_retry_loop() {
    let mut cluster = cluster_with_nodes(&["node-a"], &[]).await;
    cluster.start_controller("service-lb-controller", "service-lb-controller", &[]);
    let services = cluster.services("default");
    let bad =
        json!({"metadata": {"annotations": {"simulator.cloudgateway.io/load-balancer-type": "quantum"}}});
    cluster.create_lb_service("default", "bad", bad).await;
    cluster.create_lb_service("default", "good", json!({})).await;
    provisioned(&services, "good", Duration::from_secs(60)).await;
    let warning = sync_failure(&cluster, "bad").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains("invalid argument") && note.contains("quantum"),
        "{note}"
    );
    // The cloud was asked one ensure per Service (a new Service's goes straight to the cloud,
    // without the read an ensure of a provisioned one starts with): the good one's made its load
    // balancer, the bad one's answered its error and made nothing. The bad one is not asked
    // again before a long backoff, even when the Service changes in ways that do not need the
    // cloud (our own finalizer write, a label).
    let asked = cluster.sim(&["stats"]).await;
    assert_eq!(asked["operations"]["ensure_load_balancer"]["calls"], 2, "{asked}");
    assert_eq!(asked["calls_total"], 2, "no other call: {asked}");
    let label = json!({"metadata": {"labels": {"team": "storage"}}});
    services
        .patch("bad", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(2) {
        let stats = cluster.sim(&["stats"]).await;
        assert_eq!(
            stats["calls_total"], asked["calls_total"],
            "the cloud is not asked again: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bad = services.get("bad").await.unwrap();
    assert!(ingress_ips(&bad).is_empty());
    let names: BTreeSet<String> = cluster
        .load_balancers()
        .await
        .iter()
        .filter_map(|lb| lb["service_name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, BTreeSet::from(["good".to_owned()]));
    cluster.stop().await;
}
