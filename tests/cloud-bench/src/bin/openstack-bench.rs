//! `make bench-openstack`: the OpenStack calls our nodes and routes cost, beside OCCM's.
//!
//! On the real test cloud (`scripts/openstack/testcloud`), every call of the real
//! `cloud-gateway --provider openstack` goes through a counting proxy per service: the bench
//! registers a catalog region whose Keystone, Nova and Neutron endpoints are the proxies, and
//! gives the gateway a cloud.conf naming that region. It boots the servers (m1.tiny on
//! `private`, the ccm project's quotas lifted for the run and restored after), then per phase
//! starts a fresh fake-apiserver, gateway and cloud-node-controller (production defaults, the
//! status update frequency aside) and counts:
//!
//! - the gateway's start;
//! - 1, 50 and 200 Nodes joining at once, registered as kubelet `--cloud-provider=external`
//!   registers them (no providerID: found by name), until every one is initialized;
//! - one periodic address refresh of the 200 (`--node-status-update-frequency`; the pass is
//!   delimited by the controller's `cloud_node_controller_address_refreshes_total`);
//! - node-route-controller on `router1`: the 200 pod CIDRs routed, one unchanged reconcile
//!   (delimited by `node_route_controller_reconcile_total`), the 200 routes removed.
//!
//! OCCM's figures are its call sequence for the same work (`../shared/reference/
//! cloud-provider-openstack.md` §2.5 and §4, read from its code): InstanceMetadata is a Nova
//! server lookup (a `?name=` list without providerID, a GET with one), a flavor GET and a port
//! list, per node, at initialization and at every refresh; ListRoutes is a router GET and a
//! port list of the router; CreateRoute (extraroute-atomic) is the router PUT, a port list per
//! router network to find the node's port, and the port's PUT of its allowed address pairs; the
//! route of a deleted Node is a blackhole to it (no Node holds the nexthop), removed with the
//! router PUT alone.
//!
//! Prints a table and writes it as JSON (`--json PATH`). Exits non-zero when a target of the
//! issue is missed: ≤ 10 calls for 200 nodes joining, ≤ 5 per refresh of 200, one Keystone
//! token per gateway life.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use cloud_bench::{
    counting_proxy::{Call, CountingProxy, through},
    table,
};
use e2e::{Cluster, ClusterSpec, binary, counter, http_get, wait_for};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use openstack_fixture::{CloudConf, LiftedQuotas, TestCloud, User};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The refresh period of the phase that measures one (long enough that no pass overlaps the
/// joining, which takes a few seconds).
const REFRESH_PERIOD: &str = "45s";
/// Servers booted (and Nodes created) at once.
const PARALLEL: usize = 20;

struct Args {
    sizes: Vec<usize>,
    json: Option<PathBuf>,
    /// `--keep PREFIX`: use the servers named `PREFIX-…` a former run kept (booting only what
    /// is missing) and keep them at the end, for runs one after another.
    keep: Option<String>,
    /// `--skip-routes`: the nodes' rows only.
    skip_routes: bool,
}

fn args() -> Args {
    let mut args = Args {
        sizes: vec![1, 50, 200],
        json: None,
        keep: None,
        skip_routes: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => args.json = it.next().map(PathBuf::from),
            "--keep" => args.keep = it.next(),
            "--skip-routes" => args.skip_routes = true,
            "--sizes" => {
                args.sizes = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse()
                            .unwrap_or_else(|_| usage(&format!("bad size {s:?}")))
                    })
                    .collect();
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        usage("--sizes needs positive numbers");
    }
    args
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: openstack-bench [--sizes 1,50,200] [--json PATH] [--keep PREFIX] [--skip-routes]\n\
         The largest size is also the refresh's and the routes' node count. --keep PREFIX uses\n\
         and keeps the servers PREFIX-… (booting the missing ones), for runs one after another."
    );
    std::process::exit(if problem.is_empty() { 0 } else { 64 })
}

/// Calls by service, as the proxies saw them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    keystone: usize,
    /// Of which `POST /v3/auth/tokens`.
    tokens: usize,
    nova: usize,
    neutron: usize,
    writes: usize,
}

impl table::Counts for Counts {
    /// Ours with the Keystone tokens among the Keystone calls; each total with its writes.
    fn cells(&self, ours: bool, target: &str) -> Vec<String> {
        let keystone = match ours {
            true => format!("{} ({})", self.keystone, self.tokens),
            false => self.keystone.to_string(),
        };
        vec![
            keystone,
            self.nova.to_string(),
            self.neutron.to_string(),
            format!("{}{target} ({})", self.total(), self.writes),
        ]
    }

    fn json(&self) -> Value {
        json!({"keystone": self.keystone, "tokens": self.tokens, "nova": self.nova, "neutron": self.neutron,
               "writes": self.writes, "total": self.total()})
    }

    fn total(&self) -> u64 {
        (self.keystone + self.nova + self.neutron) as u64
    }
}

/// The three proxies.
struct Proxies {
    keystone: CountingProxy,
    nova: CountingProxy,
    neutron: CountingProxy,
}

impl Proxies {
    /// Counts since the last take, and the calls themselves (`Nova GET /servers/detail`).
    fn take(&self) -> (Counts, Vec<String>) {
        let mut counts = Counts::default();
        let mut calls = Vec::new();
        for (name, proxy) in [
            ("Keystone", &self.keystone),
            ("Nova", &self.nova),
            ("Neutron", &self.neutron),
        ] {
            for call in proxy.take() {
                match name {
                    "Keystone" => counts.keystone += 1,
                    "Nova" => counts.nova += 1,
                    _ => counts.neutron += 1,
                }
                if call.path.ends_with("/auth/tokens") && call.method == "POST" {
                    counts.tokens += 1;
                }
                counts.writes += usize::from(call.is_write());
                calls.push(describe(name, &call));
            }
        }
        (counts, calls)
    }
}

/// `Nova GET /v2.1/servers/detail` with ids shortened to `{id}`.
fn describe(service: &str, call: &Call) -> String {
    let path: Vec<String> = call
        .path
        .split('/')
        .map(|segment| {
            let hexish = segment.len() >= 32 && segment.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            if hexish {
                "{id}".to_owned()
            } else if segment.starts_with("kube-route") {
                "{tag}".to_owned()
            } else {
                segment.to_owned()
            }
        })
        .collect();
    let status = match call.status {
        0 => "no answer (the caller gave up)".to_owned(),
        status => status.to_string(),
    };
    format!("{service} {} {} → {status}", call.method, path.join("/"))
}

type Row = table::Row<Counts>;

/// Shortens repeated calls: `Nova GET … → 200 ×3`.
fn summarize(calls: &[String]) -> Vec<String> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for call in calls {
        let n = seen.entry(call).or_insert(0);
        if *n == 0 {
            order.push(call.as_str());
        }
        *n += 1;
    }
    order
        .into_iter()
        .map(|c| match seen[c] {
            1 => c.to_owned(),
            n => format!("{c} ×{n}"),
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let cloud = tokio::task::spawn_blocking(TestCloud::shared)
        .await
        .expect("the test cloud");
    let admin = cloud.admin().await;
    let ccm = cloud.client(User::Ccm).await;
    let largest = *args.sizes.iter().max().expect("a size");

    let quotas = LiftedQuotas::lift(
        &admin,
        &cloud.info.ids.project_ccm,
        &["instances", "cores", "ram"],
        &["port"],
    )
    .await;
    let prefix = args.keep.clone().unwrap_or_else(|| cloud.unique_name("bench"));
    let started = Instant::now();
    let have = listed(&ccm, &prefix).await.map(|s| s.len()).unwrap_or(0);
    eprintln!(
        "{have} servers {prefix}-…; booting {} more …",
        largest.saturating_sub(have)
    );
    let booted = boot_many(cloud, &ccm, &prefix, have, largest.saturating_sub(have)).await;
    let servers = listed(&ccm, &prefix).await.unwrap_or_default();
    if let Err(e) = booted {
        eprintln!("openstack-bench: booting the servers: {e}");
        if args.keep.is_none() {
            delete_all(&ccm, &servers).await;
            gone(&ccm, &prefix).await;
        }
        quotas.restore(&admin).await;
        std::process::exit(1)
    }
    eprintln!("booted in {:.0} s", started.elapsed().as_secs_f64());

    let outcome = run(cloud, &admin, &args, &servers[..largest]).await;
    // Said before the clean-up, which may fail in turn.
    if let Err(e) = &outcome {
        eprintln!("openstack-bench failed: {e}");
    }

    if args.keep.is_none() {
        eprintln!("deleting the servers …");
        delete_all(&ccm, &servers).await;
        // Nova refuses quotas below what its servers still use: they go first.
        gone(&ccm, &prefix).await;
    }
    quotas.restore(&admin).await;

    let Ok(rows) = outcome else { std::process::exit(1) };
    table::print_rows(
        &[
            "work",
            "ours: Keystone (tokens)",
            "Nova",
            "Neutron",
            "total (writes)",
            "OCCM: Keystone",
            "Nova",
            "Neutron",
            "total (writes)",
            "took",
        ],
        &rows,
    );
    if let Some(path) = &args.json
        && !table::write_json(path, &table::json_rows("occm", &rows))
    {
        std::process::exit(1);
    }
    let missed: Vec<String> = rows
        .iter()
        .filter_map(Row::missed)
        .chain(
            rows.iter()
                .filter(|r| r.ours.tokens > usize::from(r.work == "gateway start"))
                .map(|r| format!("{}: {} Keystone tokens", r.work, r.ours.tokens)),
        )
        .collect();
    if !missed.is_empty() {
        eprintln!("targets missed:\n  {}", missed.join("\n  "));
        std::process::exit(1);
    }
}

/// Servers booted per Nova request (`min_count` = `max_count`: Nova names them `<name>-<i>`),
/// so that 200 servers are 8 requests, not 200 that queue behind each other in Nova's API.
const BOOT_BATCH: usize = 25;

/// Boots `n` more servers (m1.tiny on `private`) named `<prefix>-<batch>-<i>`, `have` being
/// there already, and waits until every one is ACTIVE.
async fn boot_many(
    cloud: &TestCloud,
    ccm: &Client,
    prefix: &str,
    have: usize,
    n: usize,
) -> Result<(), String> {
    let mut left = n;
    let mut batch = have;
    while left > 0 {
        let count = left.min(BOOT_BATCH);
        let body = json!({"server": {
            "name": format!("{prefix}-{batch}"),
            "flavorRef": cloud.flavor_id("m1.tiny"),
            "imageRef": cloud.info.ids.image_cirros,
            "networks": [{"uuid": cloud.network_id("private")}],
            "min_count": count,
            "max_count": count,
        }});
        ccm.post(Service::Compute, "/servers")
            .json(&body)
            .send_empty()
            .await
            .map_err(|e| format!("booting batch {batch} ({count} servers): {e}"))?;
        left -= count;
        batch += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let statuses = statuses(ccm, prefix).await?;
        let active = statuses.iter().filter(|s| s.as_str() == "ACTIVE").count();
        if let Some(error) = statuses.iter().find(|s| s.starts_with("ERROR")) {
            return Err(format!("a server went to {error}"));
        }
        if active >= have + n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{active} of {} servers ACTIVE after 15 min", have + n));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The servers named `<prefix>-…`, as Nova lists them (one call: at most 1000 a page).
async fn prefixed(ccm: &Client, prefix: &str) -> Result<Vec<Value>, String> {
    let body: Value = ccm
        .get(Service::Compute, "/servers/detail")
        .query(&[("name", format!("^{prefix}-"))])
        .send_json()
        .await
        .map_err(|e| format!("listing the servers: {e}"))?;
    Ok(body["servers"].as_array().cloned().unwrap_or_default())
}

/// Each server's status, with its fault for ERROR.
async fn statuses(ccm: &Client, prefix: &str) -> Result<Vec<String>, String> {
    Ok(prefixed(ccm, prefix)
        .await?
        .iter()
        .map(|s| match s["status"].as_str().unwrap_or_default() {
            "ERROR" => format!("ERROR ({}: {})", s["name"], s["fault"]),
            status => status.to_owned(),
        })
        .collect())
}

/// (name, id) of the servers named `<prefix>-…`, by name.
async fn listed(ccm: &Client, prefix: &str) -> Result<Vec<(String, String)>, String> {
    let mut servers: Vec<(String, String)> = prefixed(ccm, prefix)
        .await?
        .iter()
        .filter_map(|s| Some((s["name"].as_str()?.to_owned(), s["id"].as_str()?.to_owned())))
        .collect();
    servers.sort();
    Ok(servers)
}

/// Waits up to 5 minutes until Nova lists no server named `<prefix>-…`; reports it if some
/// remain.
async fn gone(ccm: &Client, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        match listed(ccm, prefix).await {
            Ok(left) if left.is_empty() => return,
            Ok(left) if Instant::now() > deadline => {
                eprintln!("{} servers {prefix}-… still there after 5 minutes", left.len());
                return;
            }
            _ => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

/// Asks Nova to delete the servers (it finishes on its own); a failure is reported, not fatal.
async fn delete_all(ccm: &Client, servers: &[(String, String)]) {
    stream::iter(servers)
        .for_each_concurrent(PARALLEL / 2, |(name, id)| async move {
            let deleted = ccm
                .delete(Service::Compute, &format!("/servers/{id}"))
                .send_empty()
                .await;
            if let Err(e) = deleted
                && !e.is_not_found()
            {
                eprintln!("deleting server {name}: {e}");
            }
        })
        .await;
}

/// Every phase, with the region over the proxies; the region is removed whatever happens.
async fn run(
    cloud: &TestCloud,
    admin: &Client,
    args: &Args,
    servers: &[(String, String)],
) -> Result<Vec<Row>, String> {
    let proxies = Proxies {
        keystone: proxy(cloud, "identity").await?,
        nova: proxy(cloud, "compute").await?,
        neutron: proxy(cloud, "network").await?,
    };
    let region_id = cloud.unique_name("bench-region");
    let endpoints: BTreeMap<String, String> = [
        ("identity", &proxies.keystone),
        ("compute", &proxies.nova),
        ("network", &proxies.neutron),
    ]
    .into_iter()
    .map(|(kind, proxy)| (kind.to_owned(), through(&cloud.info.endpoints[kind], &proxy.url)))
    .collect();
    let region = cloud.add_region(admin, &region_id, &endpoints).await;
    let outcome = phases(cloud, admin, args, servers, &proxies, &region_id, &endpoints).await;
    region.remove(admin).await;
    outcome
}

async fn proxy(cloud: &TestCloud, kind: &str) -> Result<CountingProxy, String> {
    let upstream = cloud
        .info
        .endpoints
        .get(kind)
        .ok_or_else(|| format!("the test cloud has no {kind} endpoint"))?;
    CountingProxy::start(upstream)
        .await
        .map_err(|e| format!("starting the {kind} proxy: {e}"))
}

#[allow(clippy::too_many_lines)]
async fn phases(
    cloud: &TestCloud,
    admin: &Client,
    args: &Args,
    servers: &[(String, String)],
    proxies: &Proxies,
    region: &str,
    endpoints: &BTreeMap<String, String>,
) -> Result<Vec<Row>, String> {
    let conf_text = cloud.cloud_conf(&CloudConf {
        auth_url: Some(&endpoints["identity"]),
        region: Some(region),
        routes: true,
        ..CloudConf::default()
    });
    let mut rows = Vec::new();
    let router = cloud.info.ids.router1.clone();
    let router_networks = router_networks(admin, &router).await?;
    let largest = *args.sizes.iter().max().unwrap_or(&1);

    for (phase, &size) in args.sizes.iter().enumerate() {
        let last = size == largest && phase == args.sizes.iter().rposition(|&s| s == largest).unwrap_or(0);
        let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
        let conf = cluster.dir.path().join("cloud.conf");
        std::fs::write(&conf, &conf_text).map_err(|e| format!("writing cloud.conf: {e}"))?;
        proxies.take();
        let started = Instant::now();
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
        let (counts, calls) = proxies.take();
        if phase == 0 {
            rows.push(Row {
                work: "gateway start".into(),
                ours: counts,
                vendor: Counts {
                    keystone: 1,
                    tokens: 1,
                    ..Counts::default()
                },
                target: None,
                seconds: started.elapsed().as_secs_f64(),
                calls: summarize(&calls),
            });
        }
        let controller = cluster.start_controller(
            "cloud-node-controller",
            "cloud-node-controller",
            &["--node-status-update-frequency", REFRESH_PERIOD],
        );
        let metrics_at = cluster.procs[controller]
            .http
            .expect("the controller's HTTP address");

        let joining = &servers[..size];
        let started = Instant::now();
        stream::iter(joining)
            .for_each_concurrent(PARALLEL, |(name, _)| {
                let cluster = &cluster;
                async move {
                    cluster.register_node(name, true).await;
                }
            })
            .await;
        let nodes = cluster.nodes();
        wait_for(
            &format!("{size} nodes initialized from OpenStack"),
            Duration::from_secs(300),
            || {
                let nodes = nodes.clone();
                async move {
                    let list = nodes.list(&Default::default()).await.ok()?;
                    (list.items.len() == size && list.items.iter().all(initialized)).then_some(())
                }
            },
        )
        .await;
        let seconds = started.elapsed().as_secs_f64();
        let refreshes = metric(metrics_at, "cloud_node_controller_address_refreshes_total").await;
        if refreshes > 0 {
            return Err(format!(
                "an address refresh ran while {size} nodes joined ({seconds:.0} s): raise REFRESH_PERIOD"
            ));
        }
        let (counts, calls) = proxies.take();
        rows.push(Row {
            work: format!(
                "{size} node{} join{}",
                plural(size),
                if size == 1 { "s" } else { "" }
            ),
            ours: counts,
            vendor: per_node(size),
            target: (size == largest).then_some(10),
            seconds,
            calls: summarize(&calls),
        });

        if !last {
            cluster.stop().await;
            continue;
        }
        // One refresh pass of every node.
        let started = Instant::now();
        wait_for("one address refresh", Duration::from_secs(180), || async move {
            (metric(metrics_at, "cloud_node_controller_address_refreshes_total").await >= 1).then_some(())
        })
        .await;
        let (counts, calls) = proxies.take();
        rows.push(Row {
            work: format!("one address refresh of {size} nodes"),
            ours: counts,
            vendor: per_node(size),
            target: Some(5),
            seconds: started.elapsed().as_secs_f64(),
            calls: summarize(&calls),
        });
        if !args.skip_routes {
            rows.extend(
                routes(
                    &mut cluster,
                    cloud,
                    proxies,
                    servers,
                    size,
                    &router,
                    router_networks,
                )
                .await?,
            );
        }
        cluster.stop().await;
    }
    Ok(rows)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// OCCM's InstanceMetadata for `n` nodes: a server lookup and a flavor GET (Nova), a port list
/// (Neutron), each.
fn per_node(n: usize) -> Counts {
    Counts {
        nova: 2 * n,
        neutron: n,
        ..Counts::default()
    }
}

fn initialized(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    let tainted = spec
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
    let provider_id = spec.and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
    !tainted && provider_id.starts_with("openstack://")
}

async fn metric(at: std::net::SocketAddr, name: &str) -> u64 {
    match http_get(at, "/metrics").await {
        Some((200, body)) => counter(&body, name, &[]),
        _ => 0,
    }
}

/// How many networks `router`'s ports are on (OCCM lists the ports of each to find a node's).
async fn router_networks(admin: &Client, router: &str) -> Result<usize, String> {
    let ports: Value = admin
        .get(Service::Network, "/ports")
        .query(&[("device_id", router)])
        .send_json()
        .await
        .map_err(|e| format!("router ports: {e}"))?;
    let mut networks: Vec<&str> = ports["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["network_id"].as_str())
        .collect();
    networks.sort_unstable();
    networks.dedup();
    Ok(networks.len())
}

/// The route controller over the joined nodes: `size` routes created, one unchanged reconcile,
/// the routes removed.
async fn routes(
    cluster: &mut Cluster,
    cloud: &TestCloud,
    proxies: &Proxies,
    servers: &[(String, String)],
    size: usize,
    router: &str,
    router_networks: usize,
) -> Result<Vec<Row>, String> {
    // A /16 of this run only (router1 is shared): 10.<100..149>.<i>.0/24 per node.
    let second = 100 + std::process::id() as usize % 50;
    let cluster_cidr = format!("10.{second}.0.0/16");
    let cidr_of = |i: usize| format!("10.{second}.{i}.0/24");
    if size > 256 {
        return Err(format!("{size} nodes: one /24 each does not fit a /16"));
    }
    let nodes = cluster.nodes();
    stream::iter(servers[..size].iter().enumerate())
        .for_each_concurrent(PARALLEL, |(i, (name, _))| {
            let nodes = nodes.clone();
            let cidr = cidr_of(i);
            async move {
                let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
                nodes
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .expect("pod CIDR");
            }
        })
        .await;
    let cluster_name = cloud.unique_name("bench");
    proxies.take();
    let started = Instant::now();
    let controller = cluster.start_controller(
        "node-route-controller",
        "node-route-controller",
        &[
            "--cluster-name",
            &cluster_name,
            "--cluster-cidr",
            &cluster_cidr,
            "--route-reconciliation-period",
            "10s",
        ],
    );
    let metrics_at = cluster.procs[controller]
        .http
        .expect("the controller's HTTP address");
    let admin = cloud.admin().await;
    let in_cluster = |routes: &[(String, String)]| {
        routes
            .iter()
            .filter(|(destination, _)| destination.starts_with(&format!("10.{second}.")))
            .count()
    };
    wait_for(
        &format!("{size} routes on the router"),
        Duration::from_secs(1200),
        || {
            let admin = admin.clone();
            async move {
                let (routes, _) = router_state(&admin, router).await?;
                (in_cluster(&routes) == size).then_some(())
            }
        },
    )
    .await;
    // The reconcile that made them ends; the two after it list them, first with the names of
    // their servers unknown (a Nova list), then as every later one does.
    let mut reconciles = metric(metrics_at, "node_route_controller_reconcile_total").await;
    reconciles = next_reconcile(metrics_at, reconciles).await;
    let seconds = started.elapsed().as_secs_f64();
    let (created, calls) = proxies.take();
    let per_route = 2 + router_networks;
    let mut rows = vec![Row {
        work: format!("{size} routes created (route controller's start)"),
        ours: created,
        vendor: Counts {
            neutron: size * per_route + 2,
            writes: 2 * size,
            ..Counts::default()
        },
        target: None,
        seconds,
        calls: summarize(&calls),
    }];
    for work in ["first route reconcile after", "one unchanged route reconcile"] {
        let started = Instant::now();
        reconciles = next_reconcile(metrics_at, reconciles).await;
        let (counts, calls) = proxies.take();
        rows.push(Row {
            work: format!("{work} ({size} routes)"),
            ours: counts,
            vendor: Counts {
                neutron: 2,
                ..Counts::default()
            },
            target: None,
            seconds: started.elapsed().as_secs_f64(),
            calls: summarize(&calls),
        });
    }

    // The Nodes go (scaled down): their routes and address pairs with them.
    let started = Instant::now();
    stream::iter(servers[..size].iter())
        .for_each_concurrent(PARALLEL, |(name, _)| {
            let nodes = nodes.clone();
            async move {
                let _ = nodes.delete(name, &Default::default()).await;
            }
        })
        .await;
    wait_for(
        &format!("the {size} routes and their ownership tags removed"),
        Duration::from_secs(1200),
        || {
            let (admin, ours) = (admin.clone(), format!("kube-route:{cluster_name}:"));
            async move {
                let (routes, tags) = router_state(&admin, router).await?;
                let tags = tags.iter().filter(|t| t.starts_with(&ours)).count();
                (in_cluster(&routes) == 0 && tags == 0).then_some(())
            }
        },
    )
    .await;
    let (deleted, calls) = proxies.take();
    rows.push(Row {
        work: format!("{size} routes removed (their Nodes deleted; OCCM leaves the address pairs)"),
        ours: deleted,
        // Its ListRoutes finds no Node with the nexthop: a blackhole, removed from the router
        // alone (`remove_extraroutes`); the node port's allowed address pair stays.
        vendor: Counts {
            neutron: size + 2,
            writes: size,
            ..Counts::default()
        },
        target: None,
        seconds: started.elapsed().as_secs_f64(),
        calls: summarize(&calls),
    });
    Ok(rows)
}

/// Waits for the route controller's reconcile count to pass `seen`; answers the new count.
async fn next_reconcile(metrics_at: std::net::SocketAddr, seen: u64) -> u64 {
    wait_for("a route reconcile", Duration::from_secs(60), || async move {
        let now = metric(metrics_at, "node_route_controller_reconcile_total").await;
        (now > seen).then_some(now)
    })
    .await
}

/// The router's routes (destination, nexthop) and tags; `None` when Neutron did not answer (a
/// busy Neutron is no empty router).
async fn router_state(admin: &Client, router: &str) -> Option<(Vec<(String, String)>, Vec<String>)> {
    let body = admin
        .get(Service::Network, &format!("/routers/{router}"))
        .send_json::<Value>()
        .await
        .ok()?;
    let routes = body["router"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["destination"].as_str()?.to_owned(),
                r["nexthop"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let tags = body["router"]["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    Some((routes, tags))
}

#[cfg(test)]
mod tests {
    use super::summarize;

    #[test]
    fn repeated_calls_are_counted_once_in_order() {
        let calls: Vec<String> = ["a", "b", "a", "a"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(summarize(&calls), vec!["a ×3".to_owned(), "b".to_owned()]);
    }
}
