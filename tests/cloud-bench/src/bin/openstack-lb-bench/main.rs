//! `make bench-openstack`, load-balancer rows: what Octavia load balancers cost, ours beside
//! OCCM's, on the real test cloud (`scripts/openstack/testcloud`: Octavia with the amphora
//! provider on no-op drivers, Neutron).
//!
//! - **Unchanged sync**, a 1-port Service and a 3-port one with health monitors: the calls and
//!   writes of one more ensure of a converged Service, on the gateway that converged it and on a
//!   restarted one (the provider library the gateway runs, its calls counted by its client).
//!   OCCM's figure is its call sequence (`../shared/reference/cloud-provider-openstack.md`
//!   §3.17, read from its code): the load balancer by name, its listeners, per port the pool and
//!   its members (and the monitor), then the VIP port and its floating IP: 2 + 2P Octavia calls
//!   (2 + 3P with monitors) and 2 Neutron calls.
//! - **200 unchanged Services after a gateway restart** (internal, so that they need no floating
//!   IP): one batched read of all 200, as the gateway asks before their ensures. OCCM: 2 + 2P
//!   Octavia calls each (its Neutron calls for an internal Service left out).
//! - **50 Services created at once while every Octavia write takes 10 s** (the test cloud's
//!   `octavia-delay-s`): the real fake-apiserver, gateway and service-lb-controller with
//!   `--concurrent-service-syncs 5`, until every Service has its address; beside it OCCM's way,
//!   5 workers that each create a load balancer fully populated, poll it until ACTIVE inside the
//!   sync (every second, as OCCM's first backoff steps), then make its floating IP. The floor:
//!   the same by hand, all at once: the delay plus the test cloud's own throughput (its one
//!   octavia-worker on 2 cores applies the creates' flows about 0.5 s apart), which no
//!   controller can beat.
//!
//! - **Node churn** (`churn.rs`): 50 nodes join while 50 internal Services of 3 ports (one with
//!   monitors) are converged, the time until every pool has every member, and the calls, ours
//!   beside OCCM's `UpdateLoadBalancer` replayed (a wait for ACTIVE after each pool's members);
//!   then again with every Octavia write taking 10 s.
//!
//! Prints a table and writes it as JSON (`--json PATH`). Exits non-zero when a target of the
//! issue is missed: an unchanged sync ≤ 2 calls and 0 writes, 200 after a restart ≤ 20 calls.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

mod churn;

use cloud_bench::table;
use e2e::{Cluster, ClusterSpec, binary, ingress_ips, wait_for};
use futures::{StreamExt, stream};
use openstack_fixture::{CloudConf, LiftedQuotas, TestCloud, User, lb};
use provider::{LoadBalancerObservation, LoadBalancerRead, LoadBalancerStatus, LoadBalancers, ServiceSpec};
use provider_openstack::{
    client::{Client, Service},
    load_balancers::OpenStackLoadBalancers,
};
use serde_json::{Value, json};

const IDENTITY: &str = "0c000000-0000-4000-8000-0000000000be";
const DEADLINE: Duration = Duration::from_secs(600);
const PROVISIONING: Duration = Duration::from_secs(10);
const CONCURRENT_SYNCS: usize = 5;

struct Args {
    json: Option<PathBuf>,
    restart_services: usize,
    created_services: usize,
    churn: churn::Churn,
    /// The groups of rows to measure (`unchanged`, `restart`, `created`, `churn`); all when empty.
    only: Vec<String>,
}

impl Args {
    fn measures(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }
}

/// The groups of rows `--only` can name.
const GROUPS: [&str; 4] = ["unchanged", "restart", "created", "churn"];

fn args() -> Args {
    let mut args = Args {
        json: None,
        restart_services: 200,
        created_services: 50,
        churn: churn::Churn {
            services: 50,
            joining: 50,
        },
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |what: &str| -> usize {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(|| usage(&format!("{what} needs a positive number")))
        };
        match arg.as_str() {
            "--json" => args.json = it.next().map(PathBuf::from),
            "--restart-services" => args.restart_services = number("--restart-services"),
            "--created-services" => args.created_services = number("--created-services"),
            "--churn-services" => args.churn.services = number("--churn-services"),
            "--joining-nodes" => args.churn.joining = number("--joining-nodes"),
            "--only" => {
                let groups = it.next().unwrap_or_default();
                args.only = groups.split(',').map(str::to_owned).collect();
                if let Some(g) = args.only.iter().find(|g| !GROUPS.contains(&g.as_str())) {
                    usage(&format!("--only: no group {g} (groups: {})", GROUPS.join(", ")));
                }
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    args
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: openstack-lb-bench [--json PATH] [--restart-services 200] [--created-services 50] \
         [--churn-services 50] [--joining-nodes 50] [--only unchanged,restart,created,churn]"
    );
    std::process::exit(if problem.is_empty() { 0 } else { 64 })
}

/// One row of the table.
#[derive(Debug, serde::Serialize)]
struct Row {
    work: String,
    ours: String,
    occm: String,
    /// The target, when it sets one, and whether ours meets it.
    target: Option<(String, bool)>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let cloud = tokio::task::spawn_blocking(TestCloud::shared)
        .await
        .expect("the test cloud");
    let admin = cloud.admin().await;
    let ccm = cloud.client(User::Ccm).await;
    let quotas = LiftedQuotas::lift(&admin, &cloud.info.ids.project_ccm, &[], &["port", "floatingip"]).await;
    let outcome = run(cloud, &admin, &ccm, &args).await;
    set_delay(cloud, Duration::ZERO);
    quotas.restore(&admin).await;
    let rows = outcome.unwrap_or_else(|e| {
        eprintln!("openstack-lb-bench failed: {e}");
        std::process::exit(1)
    });
    table::print_markdown(
        &["work", "ours", "OCCM", "target"],
        rows.iter().map(|r| {
            let target = r.target.as_ref().map_or("—".to_owned(), |(t, met)| {
                format!("{t} {}", if *met { "(met)" } else { "(MISSED)" })
            });
            vec![r.work.clone(), r.ours.clone(), r.occm.clone(), target]
        }),
    );
    if let Some(path) = &args.json {
        table::write_json(path, &rows.iter().map(|r| json!(r)).collect::<Vec<_>>());
    }
    if rows
        .iter()
        .any(|r| r.target.as_ref().is_some_and(|(_, met)| !met))
    {
        eprintln!("a target was missed");
        std::process::exit(1);
    }
}

async fn run(cloud: &TestCloud, admin: &Client, ccm: &Client, args: &Args) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let cluster = cloud.unique_name("lbbench");
    // Each row as it is measured, so a later failure loses none.
    let told = |rows: &[Row]| {
        for r in rows {
            eprintln!("row: {} | {} | {}", r.work, r.ours, r.occm);
        }
    };
    if args.measures("unchanged") {
        for (ports, monitors) in [(1u16, false), (3, true)] {
            let measured = unchanged_sync(cloud, ccm, &cluster, ports, monitors, None).await?;
            told(&measured);
            rows.extend(measured);
        }
        // TLS: a real certificate container in the test cloud's Barbican.
        let reference =
            openstack_fixture::barbican::create_certificate_container(ccm, &cloud.unique_name("bench"))
                .await
                .map_err(|e| format!("a certificate container: {e}"))?;
        let measured = unchanged_sync(cloud, ccm, &cluster, 1, false, Some(&reference)).await;
        let _ = openstack_fixture::barbican::delete_container_and_secrets(ccm, &reference).await;
        let measured = measured?;
        told(&measured);
        rows.extend(measured);
    }
    if args.measures("restart") {
        rows.push(after_restart(cloud, ccm, &cluster, args.restart_services).await?);
        told(&rows[rows.len() - 1..]);
    }
    if args.measures("created") {
        rows.push(created_at_once(cloud, ccm, args.created_services).await?);
        told(&rows[rows.len() - 1..]);
    }
    if args.measures("churn") {
        rows.extend(churn::rows(cloud, admin, ccm, &args.churn).await?);
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// The provider library, its calls counted
// ---------------------------------------------------------------------------------------------

async fn provider(cloud: &TestCloud, client: &Client) -> Result<OpenStackLoadBalancers, String> {
    lb::provider(cloud, client, lb::settings(cloud)).await
}

fn service(cloud: &TestCloud, ports: u16, monitors: bool, internal: bool) -> ServiceSpec {
    let mut svc = lb::service(cloud, "bench", ports, IDENTITY);
    if monitors {
        svc = lb::with(svc, lb::ENABLE_HEALTH_MONITOR);
    }
    if internal {
        svc = lb::with(svc, lb::INTERNAL);
    }
    svc
}

/// Ensures until converged ([`lb::until_settled`]).
async fn ensure(
    lbs: &OpenStackLoadBalancers,
    cluster: &str,
    svc: &ServiceSpec,
) -> Result<LoadBalancerStatus, String> {
    lb::ensure(lbs, cluster, svc, &[], DEADLINE)
        .await
        .map_err(|e| format!("{}/{}: {e}", svc.namespace, svc.name))
}

async fn delete(lbs: &OpenStackLoadBalancers, cluster: &str, svc: &ServiceSpec) {
    if let Err(e) = lb::delete(lbs, cluster, svc, DEADLINE).await {
        eprintln!("deleting {}: {e}", svc.name);
    }
}

/// Converges `svc`, then ensures until the provider answers without a write (the recorded
/// converge applied by Octavia).
async fn converge(
    lbs: &OpenStackLoadBalancers,
    cluster: &str,
    svc: &ServiceSpec,
) -> Result<LoadBalancerStatus, String> {
    let status = ensure(lbs, cluster, svc).await?;
    wait_for("the converge recorded", DEADLINE, || async {
        let writes = lbs.writes();
        let again = ensure(lbs, cluster, svc).await.ok()?;
        (lbs.writes() == writes && again == status).then_some(())
    })
    .await;
    Ok(status)
}

async fn unchanged_sync(
    cloud: &TestCloud,
    ccm: &Client,
    cluster: &str,
    ports: u16,
    monitors: bool,
    tls: Option<&str>,
) -> Result<Vec<Row>, String> {
    let lbs = provider(cloud, ccm).await?;
    let mut svc = service(cloud, ports, monitors, false);
    if let Some(reference) = tls {
        svc.annotations
            .insert(lb::TLS_CONTAINER_REF.into(), reference.to_owned());
    }
    let status = converge(&lbs, cluster, &svc).await?;
    let restarted = provider(cloud, ccm).await?;
    let what = format!(
        "{ports}-port Service{}{}",
        if monitors { " with monitors" } else { "" },
        if tls.is_some() { " terminating TLS" } else { "" }
    );
    let p = u64::from(ports);
    let occm = if monitors { 2 + 3 * p } else { 2 + 2 * p };
    // OCCM's checkService reads the TLS container on every sync.
    let (barbican, occm_barbican) = if tls.is_some() {
        (1, " + 1 Barbican")
    } else {
        (0, "")
    };
    let mut rows = Vec::new();
    for (whose, lbs) in [("same gateway", &lbs), ("restarted gateway", &restarted)] {
        let (before, writes) = (lb::calls(ccm), lbs.writes());
        let again = ensure(lbs, cluster, &svc).await?;
        let (n, w) = (lb::calls(ccm) - before, lbs.writes() - writes);
        if again != status {
            return Err(format!("{what}: the status changed on an unchanged sync"));
        }
        rows.push(Row {
            work: format!("unchanged sync, {what}, {whose}"),
            ours: format!("{n} calls, {w} writes"),
            occm: format!(
                "{} calls ({occm} Octavia + 2 Neutron{occm_barbican}), 0 writes",
                occm + 2 + barbican
            ),
            target: Some(("≤ 2 calls, 0 writes".into(), n <= 2 && w == 0)),
        });
    }
    delete(&lbs, cluster, &svc).await;
    Ok(rows)
}

async fn after_restart(cloud: &TestCloud, ccm: &Client, cluster: &str, n: usize) -> Result<Row, String> {
    let lbs = provider(cloud, ccm).await?;
    let services: Vec<ServiceSpec> = (0..n).map(|_| service(cloud, 1, false, true)).collect();
    let started = Instant::now();
    let made: Vec<Result<LoadBalancerStatus, String>> = stream::iter(&services)
        .map(|svc| converge(&lbs, cluster, svc))
        .buffered(10)
        .collect()
        .await;
    eprintln!(
        "{n} internal Services converged in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let outcome = async {
        let statuses = made.into_iter().collect::<Result<Vec<_>, _>>()?;
        let restarted = provider(cloud, ccm).await?;
        let reads: Vec<LoadBalancerRead> = services
            .iter()
            .map(|svc| LoadBalancerRead {
                service: svc.clone(),
                ensure_nodes: Some(Vec::new()),
            })
            .collect();
        let before = lb::calls(ccm);
        // The gateway asks at most `max_read_batch` per call.
        let mut answers = Vec::new();
        for chunk in reads.chunks(restarted.max_read_batch()) {
            answers.extend(
                restarted
                    .read_load_balancers(cluster, chunk)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let spent = lb::calls(ccm) - before;
        let converged = answers
            .iter()
            .zip(&statuses)
            .filter(|(a, s)| matches!(a, Ok(LoadBalancerObservation::Converged(got)) if got == *s))
            .count();
        if converged != n {
            return Err(format!("{converged} of {n} answered converged after the restart"));
        }
        Ok(Row {
            work: format!("{n} unchanged Services after a gateway restart"),
            ours: format!("{spent} calls, {} writes", restarted.writes()),
            occm: format!("{} Octavia calls (4 per Service)", 4 * n),
            target: Some((
                "≤ 20 calls, 0 writes".into(),
                spent <= 20 && restarted.writes() == 0,
            )),
        })
    }
    .await;
    stream::iter(&services)
        .for_each_concurrent(20, |svc| delete(&lbs, cluster, svc))
        .await;
    outcome
}

// ---------------------------------------------------------------------------------------------
// 50 Services at once on a slow Octavia
// ---------------------------------------------------------------------------------------------

fn set_delay(cloud: &TestCloud, delay: Duration) {
    let path = cloud.dir.join("octavia-delay-s");
    let _ = if delay.is_zero() {
        std::fs::remove_file(&path)
    } else {
        std::fs::write(&path, delay.as_secs().to_string())
    };
}

async fn created_at_once(cloud: &TestCloud, ccm: &Client, n: usize) -> Result<Row, String> {
    set_delay(cloud, PROVISIONING);
    let ours = ours_created_at_once(cloud, n).await;
    let occm = occm_created_at_once(cloud, ccm, n, CONCURRENT_SYNCS).await;
    let floor = occm_created_at_once(cloud, ccm, n, n).await;
    set_delay(cloud, Duration::ZERO);
    let (ours, occm, floor) = (ours?, occm?, floor?);
    Ok(Row {
        work: format!(
            "{n} Services at once, every Octavia write {} s, {CONCURRENT_SYNCS} concurrent syncs \
             (floor: all created by hand at once and polled, {floor:.1} s)",
            PROVISIONING.as_secs()
        ),
        ours: format!("{ours:.1} s ({:.2}× the floor)", ours / floor),
        occm: format!(
            "{occm:.1} s ({:.2}× the floor; polling inside the sync)",
            occm / floor
        ),
        target: None,
    })
}

/// fake-apiserver and the real gateway on the test cloud (`region`: another catalog region, one
/// whose endpoints are counting proxies), its write limit out of the way: the subject is
/// Octavia's time.
async fn our_cluster(cloud: &TestCloud, region: Option<&str>) -> Result<Cluster, String> {
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("cloud.conf");
    let text = cloud.cloud_conf(&CloudConf {
        load_balancers: true,
        region,
        ..CloudConf::default()
    });
    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
    let gateway_args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "openstack",
        "--write-rate",
        "100",
        "--write-burst",
        "100",
        "--cloud-config",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([conf.display().to_string()])
    .collect();
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args, &[])
        .await;
    Ok(cluster)
}

/// The real binaries: the time until all `n` Services have their address.
async fn ours_created_at_once(cloud: &TestCloud, n: usize) -> Result<f64, String> {
    let mut cluster = our_cluster(cloud, None).await?;
    let name = cloud.unique_name("created");
    cluster.start_controller(
        "service-lb-controller",
        "service-lb-controller",
        &[
            "--cluster-name",
            &name,
            "--concurrent-service-syncs",
            &CONCURRENT_SYNCS.to_string(),
        ],
    );
    let services = cluster.services("default");
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(20, |i| {
            let cluster = &cluster;
            async move {
                cluster
                    .create_lb_service("default", &format!("svc-{i:03}"), json!({}))
                    .await;
            }
        })
        .await;
    wait_for("every Service's address", DEADLINE, || async {
        let list = services.list(&Default::default()).await.ok()?;
        let done = list.items.iter().filter(|s| !ingress_ips(s).is_empty()).count();
        (done == n).then_some(())
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    // Cleanup at full speed: the Services deleted, their load balancers with them.
    set_delay(cloud, Duration::ZERO);
    for i in 0..n {
        let _ = services.delete(&format!("svc-{i:03}"), &Default::default()).await;
    }
    wait_for("the Services' load balancers deleted", DEADLINE, || async {
        let left = services.list(&Default::default()).await.ok()?;
        let ours = |s: &&k8s_openapi::api::core::v1::Service| {
            s.metadata.name.as_deref().is_some_and(|n| n.starts_with("svc-"))
        };
        (!left.items.iter().any(|s| ours(&s))).then_some(())
    })
    .await;
    set_delay(cloud, PROVISIONING);
    Ok(seconds)
}

/// OCCM's way: `workers` workers, each creating a load balancer fully populated and polling it
/// until ACTIVE before it takes the next Service. With `n` workers, the floor: every load
/// balancer asked for at once, which no controller can beat on this Octavia.
async fn occm_created_at_once(
    cloud: &TestCloud,
    ccm: &Client,
    n: usize,
    workers: usize,
) -> Result<f64, String> {
    let ids = &cloud.info.ids;
    let prefix = cloud.unique_name("occm");
    let started = Instant::now();
    let made: Vec<Result<(String, String), String>> = stream::iter(0..n)
        .map(|i| {
            let name = format!("{prefix}-{i:03}");
            async move {
                let body = json!({"loadbalancer": {
                    "name": name, "vip_subnet_id": ids.subnet_private, "provider": "amphora",
                    "listeners": [{"name": format!("listener_0_{name}"), "protocol": "TCP", "protocol_port": 80,
                        "default_pool": {"name": format!("pool_0_{name}"), "protocol": "TCP",
                            "lb_algorithm": "ROUND_ROBIN", "members": []}}]}});
                // A 500 from the test cloud's sqlite ("database is locked") is asked again, as
                // OCCM's next sync would (a create that failed left nothing).
                let mut tries = 0;
                let lb: Value = loop {
                    match ccm
                        .post(Service::LoadBalancer, "/lbaas/loadbalancers")
                        .json(&body)
                        .send_json_field("loadbalancer")
                        .await
                    {
                        Ok(lb) => break lb,
                        Err(e) if tries < 10 && e.status.is_some_and(|s| s.as_u16() == 500) => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                };
                let id = lb["id"].as_str().unwrap_or_default().to_owned();
                let port = poll_active(ccm, &id).await?;
                let fip: Value = ccm
                    .post(Service::Network, "/floatingips")
                    .json(&json!({"floatingip": {"floating_network_id": ids.network_public, "port_id": port}}))
                    .send_json_field("floatingip")
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((id, fip["id"].as_str().unwrap_or_default().to_owned()))
            }
        })
        .buffer_unordered(workers)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    set_delay(cloud, Duration::ZERO);
    let mut failed = None;
    // The cleanup's deletes, then the next run's delay.
    for m in made {
        match m {
            Ok((lb, fip)) => {
                // Asked again while the test cloud's sqlite answers "database is locked" (500).
                let done = |r: &Result<(), provider_openstack::client::ApiError>| {
                    r.as_ref()
                        .err()
                        .is_none_or(|e| e.status.is_some_and(|s| s.as_u16() == 404))
                };
                for _ in 0..10 {
                    let fip_gone = ccm
                        .delete(Service::Network, &format!("/floatingips/{fip}"))
                        .send_empty()
                        .await;
                    let lb_gone = ccm
                        .delete(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{lb}"))
                        .query(&[("cascade", "true")])
                        .send_empty()
                        .await;
                    if done(&fip_gone) && done(&lb_gone) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            Err(e) => failed = Some(e),
        }
    }
    wait_for("the benchmark's load balancers deleted", DEADLINE, || async {
        let left: Value = ccm
            .get(Service::LoadBalancer, "/lbaas/loadbalancers")
            .send_json()
            .await
            .ok()?;
        let ours = left["loadbalancers"]
            .as_array()?
            .iter()
            .any(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(&prefix)));
        (!ours).then_some(())
    })
    .await;
    set_delay(cloud, PROVISIONING);
    failed.map_or(Ok(seconds), Err)
}

/// Polls the load balancer every second until ACTIVE; its VIP port.
async fn poll_active(ccm: &Client, id: &str) -> Result<String, String> {
    let start = Instant::now();
    loop {
        let lb: Value = ccm
            .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
            .send_json_field("loadbalancer")
            .await
            .map_err(|e| e.to_string())?;
        match lb["provisioning_status"].as_str() {
            Some("ACTIVE") => return Ok(lb["vip_port_id"].as_str().unwrap_or_default().to_owned()),
            Some("ERROR") => return Err(format!("load balancer {id} went to ERROR")),
            _ if start.elapsed() > DEADLINE => return Err(format!("load balancer {id} not ACTIVE")),
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
