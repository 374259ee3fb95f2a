//! The node-churn rows: `joining` nodes join a cluster whose `services` internal Services of 3
//! ports (the first with a health monitor) are converged, and the time until every pool of every
//! load balancer has every node as a member, Octavia ACTIVE again, with the calls it took.
//! Measured twice: on the test cloud as it is, then with every Octavia write taking 10 s.
//!
//! Ours: the real fake-apiserver, gateway and service-lb-controller (`--concurrent-service-syncs
//! 5`), the gateway's Octavia and Neutron behind counting proxies. OCCM's: its
//! `UpdateLoadBalancer` sequence (`../shared/reference/cloud-provider-openstack.md` §3.7, §3.13,
//! §3.14) replayed by 5 workers on load balancers built as OCCM builds them: the load balancer by
//! name, its listeners, then per port the pools, the members, one batch `PUT` of the members and
//! the wait for ACTIVE (an immediate GET, then sleeps from 1 s growing 1.2× each), and the
//! monitor for a port that has one. That wait inside the sync is what makes OCCM's users report
//! 26–30 minute reconciles of multi-port Services on node churn (#2858).

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use cloud_bench::counting_proxy::{Call, CountingProxy, through};
use e2e::{Cluster, wait_for};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use openstack_fixture::{TestCloud, lb};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

use super::{DEADLINE, PROVISIONING, Row, our_cluster, set_delay};

/// How long one join may take to converge: a deadline against a hang, not a target. At the
/// issue's size (50 load balancers of 3 ports, 50 nodes joining) the test cloud's one
/// octavia-worker applies 150 member updates of 53, then 103, members each; on 2 quiet cores
/// (2026-11-28) it applied 10–13 updates of 53 members a minute and 4–6 of 103, so the second
/// join took over 30 minutes, ours and OCCM's sequence alike.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(3600);

/// The Services' ports; OCCM names its listeners and pools `listener_<i>_<lb>`, `pool_<i>_<lb>`.
const PORTS: [u16; 3] = [80, 443, 8080];
/// The nodes the Services start with.
const FIRST_NODES: usize = 3;
/// OCCM's service workers (`--concurrent-service-syncs`, default 1; 5 as ours).
const OCCM_WORKERS: usize = 5;

/// What to measure.
pub struct Churn {
    /// Services of 3 ports.
    pub services: usize,
    /// Nodes that join at once, each time.
    pub joining: usize,
}

/// The two rows (Octavia as it is, every write 10 s), ours beside OCCM's replay. A join that
/// does not converge fills its own cell (and the next join of that side is not measured): the
/// other cells keep their figures.
pub async fn rows(
    cloud: &TestCloud,
    admin: &Client,
    ccm: &Client,
    churn: &Churn,
) -> Result<Vec<Row>, String> {
    let ours = ours(cloud, admin, churn).await;
    set_delay(cloud, Duration::ZERO);
    let occm = occm(cloud, ccm, churn).await;
    set_delay(cloud, Duration::ZERO);
    let ([ours_as_is, ours_slow], [occm_as_is, occm_slow]) = (cells(ours?), cells(occm?));
    let what = |delay: &str| {
        format!(
            "{} nodes join, {} internal Services of 3 ports (1 with a monitor), {delay}: until every \
             pool has every member and Octavia is ACTIVE",
            churn.joining, churn.services
        )
    };
    Ok(vec![
        Row {
            work: what("Octavia as it is"),
            ours: ours_as_is,
            occm: occm_as_is,
            target: None,
        },
        Row {
            work: what(&format!("every Octavia write {} s", PROVISIONING.as_secs())),
            ours: ours_slow,
            occm: occm_slow,
            target: None,
        },
    ])
}

/// One join: its figures, or why it has none.
type Join = Result<Joined, String>;

/// The two joins' cells: a join that was not measured because the one before it failed says so.
fn cells(joins: Vec<Join>) -> [String; 2] {
    let cell = |i: usize| match joins.get(i) {
        Some(Ok(joined)) => joined.to_string(),
        Some(Err(why)) => format!("no figure: {why}"),
        None => "not measured: the join before did not converge".to_owned(),
    };
    [cell(0), cell(1)]
}

/// The time and calls of one join.
struct Joined {
    seconds: f64,
    octavia: usize,
    octavia_writes: usize,
    neutron: usize,
    /// OCCM's ACTIVE polls (counted among the Octavia calls).
    polls: Option<u64>,
}

impl std::fmt::Display for Joined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} s; {} Octavia calls ({} writes",
            self.seconds, self.octavia, self.octavia_writes
        )?;
        if let Some(polls) = self.polls {
            write!(f, ", {polls} ACTIVE polls")?;
        }
        write!(f, "), {} Neutron", self.neutron)
    }
}

// ---------------------------------------------------------------------------------------------
// Ours
// ---------------------------------------------------------------------------------------------

async fn ours(cloud: &TestCloud, admin: &Client, churn: &Churn) -> Result<Vec<Join>, String> {
    let endpoint = |kind: &str| {
        cloud
            .info
            .endpoints
            .get(kind)
            .cloned()
            .ok_or_else(|| format!("the test cloud has no {kind} endpoint"))
    };
    let start = |kind: &'static str| async move {
        CountingProxy::start(&endpoint(kind)?)
            .await
            .map_err(|e| format!("starting the {kind} proxy: {e}"))
    };
    let (octavia, neutron) = (start("load-balancer").await?, start("network").await?);
    let mut endpoints = BTreeMap::new();
    for kind in ["identity", "compute"] {
        endpoints.insert(kind.to_owned(), endpoint(kind)?);
    }
    endpoints.insert(
        "load-balancer".into(),
        through(&endpoint("load-balancer")?, &octavia.url),
    );
    endpoints.insert("network".into(), through(&endpoint("network")?, &neutron.url));
    let region_id = cloud.unique_name("churn");
    let region = cloud.add_region(admin, &region_id, &endpoints).await;
    let outcome = ours_in(cloud, churn, &region_id, [&octavia, &neutron]).await;
    region.remove(admin).await;
    outcome
}

async fn ours_in(
    cloud: &TestCloud,
    churn: &Churn,
    region: &str,
    [octavia, neutron]: [&CountingProxy; 2],
) -> Result<Vec<Join>, String> {
    let name = cloud.unique_name("churn");
    let mut cluster = our_cluster(cloud, Some(region)).await?;
    cluster.start_controller(
        "service-lb-controller",
        "service-lb-controller",
        &[
            "--cluster-name",
            &name,
            "--concurrent-service-syncs",
            &super::CONCURRENT_SYNCS.to_string(),
        ],
    );
    let ccm = cloud.client(openstack_fixture::User::Ccm).await;
    let ccm = &ccm;
    let prefix = format!("kube_service_{name}_");
    let services = cluster.services("default");
    let measured = async {
        add_nodes(&cluster, 0..FIRST_NODES).await?;
        stream::iter(0..churn.services)
            .for_each_concurrent(20, |i| {
                let cluster = &cluster;
                async move {
                    cluster
                        .create_lb_service("default", &format!("svc-{i:03}"), service(i))
                        .await;
                }
            })
            .await;
        members_converged(ccm, &prefix, churn.services, FIRST_NODES).await?;
        let mut joined = Vec::new();
        for (round, delay) in [Duration::ZERO, PROVISIONING].into_iter().enumerate() {
            set_delay(cloud, delay);
            let (before, after) = (
                FIRST_NODES + round * churn.joining,
                FIRST_NODES + (round + 1) * churn.joining,
            );
            octavia.take();
            neutron.take();
            let started = Instant::now();
            add_nodes(&cluster, before..after).await?;
            let converged = members_converged(ccm, &prefix, churn.services, after).await;
            let seconds = started.elapsed().as_secs_f64();
            let (o, n) = (octavia.take(), neutron.take());
            eprintln!(
                "ours, join {} ({seconds:.1} s, {}): Octavia {}; Neutron {}",
                round + 1,
                converged.as_ref().map_or_else(String::as_str, |()| "converged"),
                shapes(&o),
                shapes(&n)
            );
            let failed = converged.is_err();
            joined.push(converged.map(|()| Joined {
                seconds,
                octavia: o.len(),
                octavia_writes: o.iter().filter(|c| c.is_write()).count(),
                neutron: n.len(),
                polls: None,
            }));
            if failed {
                break;
            }
        }
        Ok::<_, String>(joined)
    }
    .await;
    // Cleanup at full speed: the Services deleted, their load balancers with them.
    set_delay(cloud, Duration::ZERO);
    for i in 0..churn.services {
        let _ = services.delete(&format!("svc-{i:03}"), &Default::default()).await;
    }
    wait_for("the churn Services' load balancers deleted", DEADLINE, || async {
        (ours_lbs(ccm, &prefix).await?.is_empty()).then_some(())
    })
    .await;
    cluster.stop().await;
    measured
}

/// The calls by method and path, ids left out, most frequent first: where a join's calls go.
fn shapes(calls: &[Call]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for call in calls {
        let path: Vec<&str> = call
            .path
            .split('/')
            .map(|s| {
                if s.len() >= 32 && s.contains('-') {
                    "{id}"
                } else {
                    s
                }
            })
            .collect();
        *counts
            .entry(format!("{} {}", call.method, path.join("/")))
            .or_default() += 1;
    }
    let mut sorted: Vec<(String, usize)> = counts.into_iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.1));
    sorted
        .iter()
        .map(|(c, n)| format!("{c} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Service `i`: internal (no floating IP: the subject is members), 3 ports, the first Service
/// with a health monitor.
fn service(i: usize) -> Value {
    let mut annotations = json!({ lb::INTERNAL: "true" });
    if i == 0 {
        annotations[lb::ENABLE_HEALTH_MONITOR] = json!("true");
    }
    let ports: Vec<Value> = PORTS
        .iter()
        .map(|p| json!({ "name": format!("p{p}"), "port": p, "targetPort": 8080, "protocol": "TCP" }))
        .collect();
    json!({ "metadata": { "annotations": annotations }, "spec": { "ports": ports } })
}

/// Nodes `range` registered as kubelet registers them (its InternalIP on `private`), Ready.
async fn add_nodes(cluster: &Cluster, range: std::ops::Range<usize>) -> Result<(), String> {
    let nodes = cluster.nodes();
    let made: Vec<Result<(), String>> = stream::iter(range)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("churn-node-{i:03}");
                let node: Node = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
                    "status": { "addresses": [
                        { "type": "InternalIP", "address": node_address(i) },
                        { "type": "Hostname", "address": name },
                    ]},
                }))
                .map_err(|e| e.to_string())?;
                nodes
                    .create(&PostParams::default(), &node)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("creating {name}: {e}"))
            }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    made.into_iter().collect()
}

/// Node `i`'s address on `private` (10.0.0.0/24).
fn node_address(i: usize) -> String {
    format!("10.0.0.{}", 10 + i)
}

/// The load balancers whose names start with `prefix`.
async fn ours_lbs(ccm: &Client, prefix: &str) -> Option<Vec<Value>> {
    let list: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/loadbalancers")
        .send_json()
        .await
        .ok()?;
    Some(
        list["loadbalancers"]
            .as_array()?
            .iter()
            .filter(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .cloned()
            .collect(),
    )
}

/// Waits until the `services` load balancers named `prefix…` are ACTIVE with `nodes` members in
/// each of their pools (read directly, not through the proxies). An error after [`CONVERGE_DEADLINE`],
/// so that the caller still cleans up.
async fn members_converged(ccm: &Client, prefix: &str, services: usize, nodes: usize) -> Result<(), String> {
    let deadline = Instant::now() + CONVERGE_DEADLINE;
    let mut seen = String::from("nothing read yet");
    while Instant::now() < deadline {
        match members(ccm, prefix, services, nodes).await {
            Some(Ok(())) => return Ok(()),
            Some(Err(progress)) => seen = progress,
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "{nodes} members in every pool, ACTIVE: not after {} s ({seen})",
        CONVERGE_DEADLINE.as_secs()
    ))
}

/// `Ok` when converged, else how far: load balancers ACTIVE, pools with every member.
async fn members(ccm: &Client, prefix: &str, services: usize, nodes: usize) -> Option<Result<(), String>> {
    let lbs = ours_lbs(ccm, prefix).await?;
    let active = lbs
        .iter()
        .filter(|lb| lb["provisioning_status"] == "ACTIVE")
        .count();
    let ids: Vec<&str> = lbs.iter().filter_map(|lb| lb["id"].as_str()).collect();
    let pools: Value = ccm
        .get(Service::LoadBalancer, "/lbaas/pools")
        .send_json()
        .await
        .ok()?;
    let ours: Vec<&Value> = pools["pools"]
        .as_array()?
        .iter()
        .filter(|p| {
            p["loadbalancers"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|lb| ids.contains(&lb["id"].as_str().unwrap_or_default()))
            })
        })
        .collect();
    let full = ours
        .iter()
        .filter(|p| p["members"].as_array().is_some_and(|m| m.len() == nodes))
        .count();
    let pools = services * PORTS.len();
    Some(
        if lbs.len() == services && active == services && ours.len() == pools && full == pools {
            Ok(())
        } else {
            Err(format!(
                "{active} of {services} load balancers ACTIVE, {full} of {pools} pools with {nodes} members"
            ))
        },
    )
}

// ---------------------------------------------------------------------------------------------
// OCCM's sequence, replayed
// ---------------------------------------------------------------------------------------------

async fn occm(cloud: &TestCloud, ccm: &Client, churn: &Churn) -> Result<Vec<Join>, String> {
    let prefix = format!("kube_service_{}_default_", cloud.unique_name("occmchurn"));
    let made = build_as_occm(cloud, ccm, &prefix, churn.services).await;
    let outcome = async {
        let lbs = made?;
        members_converged(ccm, &prefix, churn.services, FIRST_NODES).await?;
        let mut joined = Vec::new();
        for (round, delay) in [Duration::ZERO, PROVISIONING].into_iter().enumerate() {
            set_delay(cloud, delay);
            let nodes = FIRST_NODES + (round + 1) * churn.joining;
            let counts = Counts::default();
            let started = Instant::now();
            let updated: Vec<Result<(), String>> = stream::iter(&lbs)
                .map(|lb| update_as_occm(ccm, &cloud.info.ids.subnet_private, lb, nodes, &counts))
                .buffer_unordered(OCCM_WORKERS)
                .collect()
                .await;
            let seconds = started.elapsed().as_secs_f64();
            let updated = updated.into_iter().collect::<Result<Vec<()>, String>>();
            eprintln!(
                "OCCM's sequence, join {} ({seconds:.1} s, {})",
                round + 1,
                updated.as_ref().map_or_else(String::as_str, |_| "converged")
            );
            let failed = updated.is_err();
            joined.push(updated.map(|_| Joined {
                seconds,
                octavia: counts.calls.load(Ordering::Relaxed) as usize,
                octavia_writes: counts.writes.load(Ordering::Relaxed) as usize,
                neutron: 0,
                polls: Some(counts.polls.load(Ordering::Relaxed)),
            }));
            if failed {
                break;
            }
        }
        Ok::<_, String>(joined)
    }
    .await;
    set_delay(cloud, Duration::ZERO);
    for lb in ours_lbs(ccm, &prefix).await.unwrap_or_default() {
        let id = lb["id"].as_str().unwrap_or_default();
        let _ = ccm
            .delete(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .query(&[("cascade", "true")])
            .send_empty()
            .await;
    }
    wait_for("OCCM's churn load balancers deleted", DEADLINE, || async {
        (ours_lbs(ccm, &prefix).await?.is_empty()).then_some(())
    })
    .await;
    outcome
}

/// The calls of OCCM's replay.
#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    writes: AtomicU64,
    polls: AtomicU64,
}

impl Counts {
    fn call(&self, write: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(u64::from(write), Ordering::Relaxed);
    }
}

/// A member as OCCM builds it: named after the node, its address, the node port, the member
/// subnet.
fn member(node: usize, port: u16, subnet: &str) -> Value {
    json!({
        "name": format!("churn-node-{node:03}"),
        "address": node_address(node),
        "protocol_port": node_port(port),
        "subnet_id": subnet,
    })
}

fn node_port(port: u16) -> u16 {
    30000 + port % 1000
}

/// `n` load balancers made as OCCM makes them (one fully populated create: 3 listeners, their
/// pools with the first nodes as members, the first one's monitors), all ACTIVE.
async fn build_as_occm(
    cloud: &TestCloud,
    ccm: &Client,
    prefix: &str,
    n: usize,
) -> Result<Vec<String>, String> {
    let subnet = &cloud.info.ids.subnet_private;
    let made: Vec<Result<String, String>> = stream::iter(0..n)
        .map(|i| async move {
            let name = format!("{prefix}svc-{i:03}");
            let listeners: Vec<Value> = PORTS
                .iter()
                .enumerate()
                .map(|(p, port)| {
                    let members: Vec<Value> =
                        (0..FIRST_NODES).map(|node| member(node, *port, subnet)).collect();
                    let mut pool = json!({
                        "name": format!("pool_{p}_{name}"), "protocol": "TCP",
                        "lb_algorithm": "ROUND_ROBIN", "members": members,
                    });
                    if i == 0 {
                        pool["healthmonitor"] = json!({
                            "name": format!("monitor_{p}_{name}"), "type": "TCP",
                            "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3,
                        });
                    }
                    json!({
                        "name": format!("listener_{p}_{name}"), "protocol": "TCP",
                        "protocol_port": port, "default_pool": pool,
                    })
                })
                .collect();
            let body = json!({"loadbalancer": {
                "name": name, "vip_subnet_id": subnet, "provider": "amphora", "listeners": listeners,
            }});
            // A 500 from the test cloud's sqlite ("database is locked") is asked again.
            for _ in 0..10 {
                match ccm
                    .post(Service::LoadBalancer, "/lbaas/loadbalancers")
                    .json(&body)
                    .send_json_field::<Value>("loadbalancer")
                    .await
                {
                    Ok(lb) => return Ok(lb["id"].as_str().unwrap_or_default().to_owned()),
                    Err(e) if e.status.is_some_and(|s| s.as_u16() == 500) => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err(format!("{name}: Octavia answered 500 ten times"))
        })
        .buffer_unordered(10)
        .collect()
        .await;
    made.into_iter().collect()
}

/// OCCM's `UpdateLoadBalancer` of one load balancer to `nodes` members per pool.
async fn update_as_occm(
    ccm: &Client,
    subnet: &str,
    id: &str,
    nodes: usize,
    counts: &Counts,
) -> Result<(), String> {
    let get = |path: String| async move {
        counts.call(false);
        ccm.get(Service::LoadBalancer, &path)
            .send_json::<Value>()
            .await
            .map_err(|e| format!("GET {path}: {e}"))
    };
    // By the ID OCCM wrote on the Service (`load-balancer-id`).
    let lb = get(format!("/lbaas/loadbalancers/{id}")).await?;
    let name = lb["loadbalancer"]["name"].as_str().unwrap_or_default().to_owned();
    let _listeners = get(format!("/lbaas/listeners?loadbalancer_id={id}")).await?;
    for (p, port) in PORTS.iter().enumerate() {
        let pools = get(format!("/lbaas/pools?loadbalancer_id={id}")).await?;
        let pool = pools["pools"]
            .as_array()
            .and_then(|all| all.iter().find(|pool| pool["name"] == format!("pool_{p}_{name}")))
            .ok_or_else(|| format!("{name}: no pool {p}"))?
            .clone();
        let pool_id = pool["id"].as_str().unwrap_or_default();
        get(format!("/lbaas/pools/{pool_id}/members")).await?;
        let members: Vec<Value> = (0..nodes).map(|node| member(node, *port, subnet)).collect();
        counts.call(true);
        ccm.put(Service::LoadBalancer, &format!("/lbaas/pools/{pool_id}/members"))
            .json(&json!({ "members": members }))
            .send_empty()
            .await
            .map_err(|e| format!("{name}: the members' batch update: {e}"))?;
        wait_active(ccm, id, counts).await?;
        if let Some(monitor) = pool["healthmonitor_id"].as_str() {
            get(format!("/lbaas/healthmonitors/{monitor}")).await?;
        }
    }
    Ok(())
}

/// OCCM's `WaitActiveAndGetLoadBalancer`: a GET at once, then sleeps from 1 s growing 1.2×.
async fn wait_active(ccm: &Client, id: &str, counts: &Counts) -> Result<(), String> {
    let mut sleep = Duration::from_secs(1);
    for _ in 0..23 {
        counts.call(false);
        counts.polls.fetch_add(1, Ordering::Relaxed);
        let lb: Value = ccm
            .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .send_json_field("loadbalancer")
            .await
            .map_err(|e| e.to_string())?;
        match lb["provisioning_status"].as_str() {
            Some("ACTIVE") => return Ok(()),
            Some("ERROR") => return Err(format!("load balancer {id} went to ERROR")),
            _ => {
                tokio::time::sleep(sleep).await;
                sleep = sleep.mul_f64(1.2);
            }
        }
    }
    Err(format!("timeout waiting for the loadbalancer {id} ACTIVE"))
}
