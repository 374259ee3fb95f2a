//! End-to-end: `cloudgateway-conformance` (the outside tool, as a vendor or an operator runs it)
//! against `cloud-gateway --provider openstack --cloud-config cloud.conf` as a process, over the
//! real OpenStack test cloud (`openstack-fixture`; shared, so everything is named uniquely).
//!
//! The fixture file is the one an operator of an OpenStack cloud writes: servers booted for the
//! run (two running, of two flavors; one stopped; one deleted), described as the provider
//! reports them (providerID `openstack:///<id>`, the flavor's name, zone `nova`, the region,
//! the port's address), a pod CIDR on `router1` for the routes case, every capability (load
//! balancers on the test cloud's Octavia), a Service OCCM's annotations make invalid, and a
//! `slow_provisioning` hook that does nothing: every Octavia create answers RETRY_AFTER until
//! Octavia reports the load balancer ACTIVE. Two cases must skip, each for its reason: no OCCM
//! annotation hands a Service to another controller, and no capability is missing.
//!
//! The test cloud never throttles, so the gateway reaches Nova, Neutron and Octavia through a small
//! throttling proxy, registered as a catalog region of its own, which answers 429 while a flag
//! file exists: the fixture's `hooks.throttle` creates and removes it (as the AWS run's fault
//! proxy in front of moto, `crates/providers/aws/tests/conformance.rs`).

mod openstack_support;

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use e2e::{
    Procs,
    conformance::{run_suite, start_gateway},
};
use openstack_fixture::{TestCloud, User};
use openstack_support::{Leftovers, boot, nexthops, spread, write_cloud_conf};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// The cases that must skip, with the reason the tool prints; every other case must pass.
const SKIPPED: [(&str, &str); 2] = [
    (
        "implemented_elsewhere_is_typed",
        "implemented_elsewhere_annotations",
    ),
    ("missing_capabilities_answer_unimplemented", "every capability"),
];
// ---------------------------------------------------------------------------------------------
// The throttling proxy
// ---------------------------------------------------------------------------------------------

/// What Nova's and Neutron's rate limiting middlewares answer.
const TOO_MANY_REQUESTS: &str =
    r#"{"overLimit": {"code": 429, "message": "Rate limit exceeded (test proxy)", "retryAfter": "1"}}"#;

/// A TCP proxy in front of one OpenStack service: bytes go through unchanged, but a request
/// that arrives while `flag` exists gets 429 and the connection is closed. Checked on every
/// read from the client, so a pooled keep-alive connection is throttled from its next request
/// on. Stops when dropped.
struct ThrottleProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for ThrottleProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ThrottleProxy {
    async fn start(upstream: SocketAddr, flag: PathBuf) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, flag.clone()));
            }
        });
        Self { addr, task }
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, flag: PathBuf) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_client.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            if flag.exists() {
                return true;
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                return false;
            }
        }
    };
    let throttled = tokio::select! {
        throttled = up => throttled,
        _ = tokio::io::copy(&mut from_server, &mut to_client) => false,
    };
    if throttled {
        // HTTP/1.1 clients send the next request only once the last answer is read: nothing of
        // the server's is in flight.
        let answer = format!(
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{TOO_MANY_REQUESTS}",
            TOO_MANY_REQUESTS.len()
        );
        let _ = to_client.write_all(answer.as_bytes()).await;
        let _ = to_client.shutdown().await;
    }
}

/// `host:port` of an endpoint URL.
fn socket_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .parse()
        .unwrap_or_else(|e| panic!("endpoint {url}: {e}"))
}

/// `url` with its `scheme://host:port` replaced by the proxy's, its path kept.
fn through(url: &str, proxy: SocketAddr) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    format!("http://{proxy}{path}")
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudgateway_conformance_passes_against_our_gateway_on_openstack() {
    let cloud = TestCloud::shared();
    let client = cloud.client(User::Ccm).await;
    let admin = cloud.admin().await;

    // The cloud the fixture describes: two running servers of two flavors, one stopped, one
    // deleted.
    let (run_1, run_2, sleeper, gone) = tokio::join!(
        boot(cloud, &client, "conf-run-1", "m1.tiny"),
        boot(cloud, &client, "conf-run-2", "m1.small"),
        boot(cloud, &client, "conf-sleeper", "m1.tiny"),
        boot(cloud, &client, "conf-gone", "m1.tiny"),
    );
    let mut leftovers = Leftovers::servers([&run_1, &run_2, &sleeper, &gone]);
    tokio::join!(
        cloud.stop_server(&client, &sleeper.id),
        cloud.delete_server(&client, &gone.id),
    );
    leftovers.deleted(&gone);

    // Nova, Neutron and Octavia behind the throttling proxy, in a region of their own.
    // The run makes load balancers: it takes Octavia's turn as the other tests that do (the
    // test cloud's sqlite answers "database is locked" to writes that race; see
    // `TestCloud::octavia_turn`).
    let _turn = cloud.octavia_turn().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let flag = dir.path().join("throttle");
    let endpoints = &cloud.info.endpoints;
    let nova = ThrottleProxy::start(socket_of(&endpoints["compute"]), flag.clone()).await;
    let neutron = ThrottleProxy::start(socket_of(&endpoints["network"]), flag.clone()).await;
    let octavia = ThrottleProxy::start(socket_of(&endpoints["load-balancer"]), flag.clone()).await;
    let region = cloud.unique_name("conformance");
    let catalog: BTreeMap<String, String> = [
        ("identity", endpoints["identity"].clone()),
        ("compute", through(&endpoints["compute"], nova.addr)),
        ("network", through(&endpoints["network"], neutron.addr)),
        (
            "load-balancer",
            through(&endpoints["load-balancer"], octavia.addr),
        ),
    ]
    .map(|(kind, url)| (kind.to_owned(), url))
    .into();
    leftovers.region = Some(cloud.add_region(&admin, &region, &catalog).await);

    let conf = write_cloud_conf(cloud, dir.path(), Some(&region));
    let mut procs = Procs::default();
    let provider = [
        "--provider",
        "openstack",
        "--cloud-config",
        &conf.display().to_string(),
    ];
    let (grpc, http) = start_gateway(&mut procs, dir.path(), &provider, &[], Duration::from_secs(60)).await;

    // router1 is shared: a pod CIDR (and a cluster name, which tags the routes) of this run only.
    let cluster = cloud.unique_name("conformance");
    leftovers.cluster = Some(cluster.clone());
    let h = spread(&cluster);
    let cidr = format!("10.{}.{}.0/24", 100 + h % 50, (h >> 8) % 256);
    let running = |s: &openstack_support::Server| {
        format!(
            "    - {{node_name: {}, provider_id: \"{}\", instance_type: {}, zone: nova, region: {region},\n       internal_ip: {}}}\n",
            s.name,
            s.provider_id(),
            s.flavor,
            s.ipv4
        )
    };
    let fixture = format!(
        r#"provider_name: openstack
capabilities: {{instances: true, load_balancers: true, routes: true}}
cluster_name: {cluster}
instances:
  running:
{}{}  stopped:
    - {{node_name: {}, provider_id: "{}"}}
  terminated:
    - {{node_name: {}, provider_id: "{}"}}
  unknown_provider_id: "openstack:///{}"
load_balancers:
  invalid_service:
    annotations: {{"loadbalancer.openstack.org/connection-limit": "-2"}}
routes:
  destination_cidr: {cidr}
  target_node: {}
hooks:
  throttle: {{on: "touch '{flag}'", off: "rm -f '{flag}'"}}
  slow_provisioning: {{on: "true", off: "true"}}
"#,
        running(&run_1),
        running(&run_2),
        sleeper.name,
        sleeper.provider_id(),
        gone.name,
        gone.provider_id(),
        uuid_like(&cluster),
        run_1.name,
        flag = flag.display(),
    );
    let fixture_path = dir.path().join("openstack.yaml");
    std::fs::write(&fixture_path, &fixture).expect("write the fixture");
    println!("fixture:\n{fixture}");

    run_suite(grpc, http, &fixture_path, &SKIPPED, Duration::from_secs(300)).await;
    assert!(!flag.exists(), "the throttle hook was undone");
    // The routes case cleaned up after itself on the shared router.
    let router = &cloud.info.ids.router1;
    assert_eq!(nexthops(&client, router, &cidr).await, Vec::<String>::new());
    drop(procs);
}

/// A well-formed server id (a UUID's shape) that Nova never gave: hex digits from `seed`.
fn uuid_like(seed: &str) -> String {
    let hex = format!("{:016x}{:016x}", spread(seed), spread(&format!("{seed}-2")));
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}
