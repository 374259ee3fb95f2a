//! Chaos on the OpenStack test cloud: LoadBalancer Services on Octavia while the
//! service-lb-controller and the gateway are SIGKILLed during provisioning and 20 % of Octavia's
//! writes fail (a 409 as for a busy load balancer, a 500 before or after the write reached
//! Octavia: `openstack_fixture::proxy::CloudProxy`), with Services created and deleted meanwhile.
//! Beside them, another cluster's load balancer under this cluster's name, for a Service of the
//! same namespace and name.
//!
//! Then the faults stop and, once converged: every live Service has exactly one load balancer
//! and its address is that load balancer's floating IP (else missing); no load balancer or
//! floating IP of this cluster's without a live Service (leaked); the other cluster's load
//! balancer unchanged (not one write), its Service told whose it is (a Warning event).
//!
//! `make test` runs it briefly; `make chaos` with `CHAOS_SCALE=full` (more Services, more
//! kills). Prints the outcome as the chaos suite's table.

mod openstack_support;

use std::time::{Duration, Instant};

use e2e::{
    Cluster, ClusterSpec, binary,
    chaos::{Dice, Outcome, table, wait_until},
    ingress_ips,
};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::api::{DeleteParams, ListParams};
use openstack_fixture::{CloudConf, TestCloud, User, proxy::CloudProxy};
use provider_openstack::client::{Client, Service as Api};
use serde_json::{Value, json};

const NAMESPACE: &str = "default";
const OTHER_IDENTITY: &str = "0e000000-0000-4000-8000-0000000000ee";
const CONVERGE: Duration = Duration::from_secs(240);

fn full() -> bool {
    std::env::var("CHAOS_SCALE").is_ok_and(|s| s == "full")
}

/// The load balancers whose names begin with `prefix`, as Octavia lists them.
async fn load_balancers(client: &Client, prefix: &str) -> Vec<Value> {
    let all: Value = client
        .get(Api::LoadBalancer, "/lbaas/loadbalancers")
        .send_json()
        .await
        .unwrap_or(Value::Null);
    all["loadbalancers"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .filter(|lb| lb["provisioning_status"] != "DELETED")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The floating IPs described as made for a Service of `cluster`.
async fn floating_ips(client: &Client, cluster: &str) -> Vec<Value> {
    let all: Value = client
        .get(Api::Network, "/floatingips")
        .send_json()
        .await
        .unwrap_or(Value::Null);
    let suffix = format!(" from cluster {cluster}");
    all["floatingips"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|f| f["description"].as_str().is_some_and(|d| d.ends_with(&suffix)))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Another cluster's load balancer under `cluster`'s name for Service `name`, made as OCCM
/// makes one and claimed by that cluster's identity; ACTIVE.
async fn other_clusters_load_balancer(
    cloud: &TestCloud,
    client: &Client,
    cluster: &str,
    name: &str,
) -> Value {
    let lb_name = format!("kube_service_{cluster}_{NAMESPACE}_{name}");
    let body = json!({"loadbalancer": {
        "name": lb_name, "provider": "amphora", "vip_subnet_id": cloud.info.ids.subnet_private,
        "description": format!("Kubernetes external service {NAMESPACE}/{name} from cluster {cluster}"),
        "tags": [lb_name, format!("kube_cluster_id_{OTHER_IDENTITY}")]}});
    let lb: Value = client
        .post(Api::LoadBalancer, "/lbaas/loadbalancers")
        .json(&body)
        .send_json_field("loadbalancer")
        .await
        .expect("the other cluster's load balancer");
    let id = lb["id"].as_str().expect("an id").to_owned();
    let start = Instant::now();
    loop {
        let lb: Value = client
            .get(Api::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .send_json_field("loadbalancer")
            .await
            .expect("read it");
        if lb["provisioning_status"] == "ACTIVE" {
            return lb;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "ACTIVE: {lb}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_on_octavia_survive_kills_and_failing_writes() {
    let cloud = TestCloud::shared();
    let _turn = cloud.octavia_turn().await;
    let client = cloud.client(User::Ccm).await;
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut dice = Dice::new(seed);
    let mut outcome = Outcome::new("openstack-services");
    let (services_made, kills) = if full() { (16, 12) } else { (5, 4) };

    let proxy = CloudProxy::start(cloud).await;
    let cluster_name = cloud.unique_name("chaos");
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("cloud.conf");
    let text = cloud.cloud_conf(&CloudConf {
        auth_url: Some(&proxy.auth_url),
        load_balancers: true,
        ..CloudConf::default()
    });
    std::fs::write(&conf, text).expect("cloud.conf");
    let gateway_args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "openstack",
        "--cloud-config",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([conf.display().to_string()])
    .collect();
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args, &[])
        .await;
    let controller_args = ["--cluster-name", cluster_name.as_str()];
    cluster.start_controller("service-lb-controller", "service-lb-controller", &controller_args);

    // Another cluster's load balancer for default/decoy, under this cluster's name.
    let decoy = other_clusters_load_balancer(cloud, &client, &cluster_name, "decoy").await;
    cluster.create_lb_service(NAMESPACE, "decoy", json!({})).await;

    // Churn and kills, with 20 % of Octavia's writes failing.
    proxy.fail_octavia_writes(20, seed);
    let services = cluster.services(NAMESPACE);
    let mut live: Vec<String> = Vec::new();
    let mut kill_at: Vec<usize> = (0..kills).map(|k| k * services_made / kills).collect();
    kill_at.dedup();
    for i in 0..services_made {
        let name = format!("svc-{i:02}");
        cluster.create_lb_service(NAMESPACE, &name, json!({})).await;
        live.push(name);
        // Into Octavia's provisioning window (the create answered, the load balancer PENDING).
        tokio::time::sleep(dice.between(Duration::from_millis(300), Duration::from_millis(1500))).await;
        if kill_at.contains(&i) {
            if dice.chance(0.5) {
                if let Some(p) = cluster.proc_named("service-lb-controller") {
                    p.kill().await;
                }
                outcome.fault("service-lb-controller SIGKILL");
                cluster.start_controller("service-lb-controller", "service-lb-controller", &controller_args);
            } else {
                cluster.kill_gateway().await;
                outcome.fault("gateway SIGKILL");
                cluster
                    .swap_gateway(&binary("cloud-gateway"), &gateway_args, &[])
                    .await;
            }
        }
        if i % 3 == 2 {
            let gone = live.remove(dice.below(live.len() as u64) as usize);
            let _ = services.delete(&gone, &DeleteParams::default()).await;
            outcome.fault("Service deleted");
        }
    }
    proxy.fail_octavia_writes(0, 0);
    let last_fault = Instant::now();

    // Converged: every live Service has its address, every deleted one is gone.
    let prefix = format!("kube_service_{cluster_name}_{NAMESPACE}_");
    let converged = wait_until(&mut outcome, "the Services converged", CONVERGE, || {
        let (services, live, client, prefix) = (&services, &live, &client, &prefix);
        async move {
            let list = services.list(&ListParams::default()).await.ok()?;
            let ours: Vec<&Service> = list
                .items
                .iter()
                .filter(|s| s.metadata.name.as_deref().is_some_and(|n| n.starts_with("svc-")))
                .collect();
            let all_live_served = ours.len() == live.len() && ours.iter().all(|s| !ingress_ips(s).is_empty());
            let lbs = load_balancers(client, prefix).await;
            // Settled: no load balancer of ours busy, none of a deleted Service left.
            let settled =
                lbs.iter().all(|lb| lb["provisioning_status"] == "ACTIVE") && lbs.len() == live.len() + 1;
            (all_live_served && settled).then_some(())
        }
    })
    .await;
    if converged.is_some() {
        outcome.converged_after = Some(last_fault.elapsed());
    }

    // The invariants.
    let lbs = load_balancers(&client, &prefix).await;
    let fips = floating_ips(&client, &cluster_name).await;
    let list = services.list(&ListParams::default()).await.expect("Services");
    for name in &live {
        let lb_name = format!("{prefix}{name}");
        let of_it: Vec<&Value> = lbs.iter().filter(|lb| lb["name"] == lb_name.as_str()).collect();
        let svc = list
            .items
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name.as_str()));
        let address = svc.map(ingress_ips).unwrap_or_default();
        match of_it.as_slice() {
            [lb] => {
                let fip = fips.iter().find(|f| f["port_id"] == lb["vip_port_id"]);
                let fip_address = fip.and_then(|f| f["floating_ip_address"].as_str());
                if fip_address.is_none() || address.first().map(String::as_str) != fip_address {
                    outcome.missing += 1;
                    outcome.violation(format!(
                        "{name}: its address {address:?} is not its load balancer's floating IP {fip_address:?}"
                    ));
                }
            }
            [] => {
                outcome.missing += 1;
                outcome.violation(format!("{name}: no load balancer"));
            }
            more => outcome.violation(format!("{name}: {} load balancers", more.len())),
        }
    }
    for lb in &lbs {
        let name = lb["name"].as_str().unwrap_or_default();
        let service = name.strip_prefix(&prefix).unwrap_or_default();
        if service != "decoy" && !live.iter().any(|l| l == service) {
            outcome.leaked += 1;
            outcome.violation(format!("load balancer {name} without a live Service"));
        }
    }
    for fip in &fips {
        let attached = fip["port_id"].as_str().is_some_and(|p| !p.is_empty())
            && lbs.iter().any(|lb| lb["vip_port_id"] == fip["port_id"]);
        if !attached {
            outcome.leaked += 1;
            outcome.violation(format!("floating IP {} left: {fip}", fip["floating_ip_address"]));
        }
    }
    // The other cluster's load balancer: untouched, and its Service told whose it is.
    let now: Value = client
        .get(
            Api::LoadBalancer,
            &format!(
                "/lbaas/loadbalancers/{}",
                decoy["id"].as_str().unwrap_or_default()
            ),
        )
        .send_json_field("loadbalancer")
        .await
        .unwrap_or(Value::Null);
    for field in ["updated_at", "tags", "provisioning_status", "listeners"] {
        if now[field] != decoy[field] {
            outcome.violation(format!(
                "the other cluster's load balancer changed: {field} {} → {}",
                decoy[field], now[field]
            ));
        }
    }
    let events = kube::Api::<Event>::namespaced(cluster.client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let told = events.iter().any(|e| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("decoy")
            && e.type_.as_deref() == Some("Warning")
            && e.note.as_deref().is_some_and(|n| n.contains(OTHER_IDENTITY))
    });
    if !told {
        outcome.violation("the decoy Service got no Warning naming the other cluster");
    }
    for _ in 0..proxy.failed_octavia_writes() {
        outcome.fault("Octavia write failed (409 / 500)");
    }
    outcome.note("seed", seed);
    outcome.note("services", services_made);
    outcome.note("writes through the proxy", proxy.writes());
    eprintln!("{}", table(std::slice::from_ref(&outcome)));

    // Cleanup, faults off: the Services (their load balancers with them), the decoy by hand.
    for s in &list.items {
        if let Some(name) = s
            .metadata
            .name
            .as_deref()
            .filter(|n| n.starts_with("svc-") || *n == "decoy")
        {
            let _ = services.delete(name, &DeleteParams::default()).await;
        }
    }
    let cleaned = wait_until(
        &mut outcome,
        "the Services' load balancers deleted",
        CONVERGE,
        || {
            let (client, prefix) = (&client, &prefix);
            async move { (load_balancers(client, prefix).await.len() <= 1).then_some(()) }
        },
    )
    .await;
    let _ = client
        .delete(
            Api::LoadBalancer,
            &format!(
                "/lbaas/loadbalancers/{}",
                decoy["id"].as_str().unwrap_or_default()
            ),
        )
        .query(&[("cascade", "true")])
        .send_empty()
        .await;
    assert!(cleaned.is_some() && outcome.passed(), "{:#}", outcome.to_json());
}
