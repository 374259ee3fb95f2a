//! What the end-to-end tests of `cloud-gateway --provider openstack` share
//! (`openstack_nodes.rs`, `openstack_conformance.rs`, `openstack_vendor_swap.rs`): servers booted
//! on the shared test cloud (`openstack-fixture`) with unique names and deleted whatever happens,
//! the test cloud's `cloud.conf` as an operator would hand it to the gateway and the gateway's
//! flags, their Nodes as OCCM initializes them, and `router1`'s routes.
// Each test uses a part of it.
#![allow(dead_code)]

use std::{
    collections::BTreeSet,
    hash::{DefaultHasher, Hash, Hasher},
    path::{Path, PathBuf},
    time::Duration,
};

use e2e::{
    nodes::{TAINT_UNINITIALIZED, initialized, label, provider_id},
    wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use openstack_fixture::{CloudConf, Region, TestCloud, User};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

/// A server booted for a test, as its Node knows it.
#[derive(Debug, Clone)]
pub struct Server {
    /// Nova's id.
    pub id: String,
    /// Its name: unique in the shared cloud, and the Node's name.
    pub name: String,
    /// Its flavor's name: the instance type.
    pub flavor: String,
    /// The IPv4 address of its port on `private`: its InternalIP.
    pub ipv4: String,
}

impl Server {
    /// `openstack:///<id>`, as OCCM (and our provider, not regional) writes it.
    pub fn provider_id(&self) -> String {
        format!("openstack:///{}", self.id)
    }
}

/// Boots a server (`prefix` made unique) of `flavor` on `private` as the CCM's user and waits
/// for it to be ACTIVE.
pub async fn boot(cloud: &TestCloud, client: &Client, prefix: &str, flavor: &str) -> Server {
    let name = cloud.unique_name(prefix);
    let id = cloud.boot_server(client, &name, flavor, "private").await;
    let ports: Value = client
        .get(Service::Network, "/ports")
        .query(&[("device_id", id.as_str())])
        .send_json()
        .await
        .expect("the server's ports");
    let private = cloud.info.ids.network_private.as_str();
    let ipv4 = ports["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["network_id"].as_str() == Some(private))
        .flat_map(|p| p["fixed_ips"].as_array().cloned().unwrap_or_default())
        .filter_map(|ip| ip["ip_address"].as_str().map(str::to_owned))
        .find(|ip| !ip.contains(':'))
        .unwrap_or_else(|| panic!("server {name} has no IPv4 address on private: {ports}"));
    Server {
        id,
        name,
        flavor: flavor.to_owned(),
        ipv4,
    }
}

/// What a test leaves in the shared cloud until it ends: its servers (those it did not delete
/// itself), a catalog region, routes on `router1`. Removed when dropped, pass or fail (on a
/// runtime of its own: the test's may be gone).
#[derive(Default)]
pub struct Leftovers {
    servers: BTreeSet<String>,
    /// A catalog region to remove at the end.
    pub region: Option<Region>,
    /// A cluster name whose routes on `router1` go at the end (those its controllers or cases
    /// did not delete themselves, when the test failed half-way).
    pub cluster: Option<String>,
}

impl Leftovers {
    /// Servers to delete at the end.
    pub fn servers<'a>(servers: impl IntoIterator<Item = &'a Server>) -> Self {
        Self {
            servers: servers.into_iter().map(|s| s.id.clone()).collect(),
            region: None,
            cluster: None,
        }
    }

    /// The test deleted this server itself.
    pub fn deleted(&mut self, server: &Server) {
        self.servers.remove(&server.id);
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let servers = std::mem::take(&mut self.servers);
        let region = self.region.take();
        let cluster = self.cluster.take();
        if servers.is_empty() && region.is_none() && cluster.is_none() {
            return;
        }
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async {
                let cloud = TestCloud::shared();
                let client = cloud.client(User::Ccm).await;
                if let Some(cluster) = cluster {
                    remove_routes(&client, &cloud.info.ids.router1, &cluster).await;
                }
                for id in servers {
                    let _ = client
                        .delete(Service::Compute, &format!("/servers/{id}"))
                        .send_empty()
                        .await;
                }
                if let Some(region) = region {
                    region.remove(&cloud.admin().await).await;
                }
            });
        })
        .join();
    }
}

/// Removes the routes and tags of `cluster` from `router`, as the provider tags them
/// (`kube-route:<cluster>:<destination with _ for />:<nexthop>`); a route another tag still
/// names (another cluster's, the very same route) stays. IPv4 routes (the tests make no other).
async fn remove_routes(client: &Client, router: &str, cluster: &str) {
    let path = format!("/routers/{router}");
    let Ok(body) = client.get(Service::Network, &path).send_json::<Value>().await else {
        return;
    };
    let tags: Vec<String> = body["router"]["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    let prefix = format!("kube-route:{cluster}:");
    for tag in tags.iter().filter(|t| t.starts_with(&prefix)) {
        let Some((destination, nexthop)) = tag[prefix.len()..].rsplit_once(':') else {
            continue;
        };
        let suffix = format!(":{destination}:{nexthop}");
        if !tags.iter().any(|t| t != tag && t.ends_with(&suffix)) {
            let route = serde_json::json!({"router": {"routes": [
                {"destination": destination.replace('_', "/"), "nexthop": nexthop},
            ]}});
            let _ = client
                .put(Service::Network, &format!("{path}/remove_extraroutes"))
                .json(&route)
                .send_empty()
                .await;
        }
        let _ = client
            .delete(Service::Network, &format!("{path}/tags/{tag}"))
            .send_empty()
            .await;
    }
}

/// Writes the test cloud's `cloud.conf` (the CCM's user, project `ccm`) into `dir`, as an
/// operator hands it to the gateway, with `[Route] router-id = router1` and, when given, another
/// `region`. Returns its path.
pub fn write_cloud_conf(cloud: &TestCloud, dir: &Path, region: Option<&str>) -> PathBuf {
    let conf = cloud.cloud_conf(&CloudConf {
        region,
        routes: true,
        load_balancers: true,
        ..CloudConf::default()
    });
    let path = dir.join("cloud.conf");
    std::fs::write(&path, conf).expect("write cloud.conf");
    path
}

/// `conf` (the test cloud's cloud.conf, as [`write_cloud_conf`] hands it over) as OpenShift's
/// CCM operator writes one (OCCM #323): `[Global]` holds only `use-clouds`, `clouds-file` (the
/// path given) and `cloud = openstack`, then `global_extra`; the credentials move to the
/// clouds.yaml returned, under `openstack`, beside another region's cloud. The other sections
/// as they are. Returns (cloud.conf, clouds.yaml).
pub fn with_clouds_yaml(conf: &str, clouds_file: &str, global_extra: &str) -> (String, String) {
    let global = |key: &str| {
        conf.lines()
            .find_map(|l| {
                l.split_once('=')
                    .filter(|(k, _)| k.trim() == key)
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("{key} in the test cloud's cloud.conf"))
    };
    let clouds = format!(
        "clouds:\n  other:\n    region_name: Elsewhere\n  openstack:\n    auth:\n      auth_url: {}\n      username: {}\n      password: {}\n      project_name: {}\n      user_domain_name: {}\n      project_domain_name: {}\n    region_name: {}\n    interface: public\n",
        global("auth-url"),
        global("username"),
        global("password"),
        global("tenant-name"),
        global("domain-name"),
        global("domain-name"),
        global("region"),
    );
    let rest = &conf[conf.find("\n[").expect("a section after [Global]")..];
    let conf = format!(
        "[Global]\nuse-clouds = true\nclouds-file = {clouds_file}\ncloud = openstack\n{global_extra}{rest}"
    );
    (conf, clouds)
}

/// A number from `name`, to derive pod CIDRs no other test of the shared `router1` uses.
pub fn spread(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// `router1`'s routes to `cidr`, as Neutron lists them: their nexthops.
pub async fn nexthops(client: &Client, router: &str, cidr: &str) -> Vec<String> {
    let body: Value = client
        .get(Service::Network, &format!("/routers/{router}"))
        .send_json()
        .await
        .expect("router GET");
    body["router"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["destination"].as_str() == Some(cidr))
        .filter_map(|r| r["nexthop"].as_str().map(str::to_owned))
        .collect()
}

/// Waits up to 60 s until `router1` routes `cidr` via exactly `want` (none: not at all).
pub async fn wait_routed(client: &Client, router: &str, cidr: &str, want: &[&str], why: &str) {
    wait_for(why, Duration::from_secs(60), || async move {
        let hops = nexthops(client, router, cidr).await;
        (hops == want).then_some(())
    })
    .await;
}

/// The flags of `cloud-gateway --provider openstack` with the operator's `conf`, no instance
/// cache; start it with `Cluster::swap_gateway`.
pub fn gateway_args(conf: &Path) -> Vec<String> {
    e2e::uncached_gateway_args("openstack", conf)
}

/// Creates the Node of `server` as kubelet `--cloud-provider=external --provider-id` registers
/// it: its providerID and the uninitialized taint (no status: set it with `Cluster::set_ready`).
pub async fn create_node_with_provider_id(nodes: &Api<Node>, server: &Server) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": server.name, "labels": { "kubernetes.io/hostname": server.name } },
        "spec": {
            "providerID": server.provider_id(),
            "taints": [{ "key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule" }],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap_or_else(|e| panic!("node {}: {e}", server.name));
}

/// Waits up to 90 s until the Node of `server` is initialized, and checks it as OCCM initializes
/// it ([`check_openstack_node`]).
pub async fn wait_openstack_node(nodes: &Api<Node>, server: &Server) {
    let node = wait_for(
        &format!("{} initialized from OpenStack", server.name),
        Duration::from_secs(90),
        || {
            let nodes = nodes.clone();
            let name = server.name.clone();
            async move { nodes.get(&name).await.ok().and_then(initialized) }
        },
    )
    .await;
    check_openstack_node(&node, server);
}

/// The Node of `server` as OCCM initializes it: providerID `openstack:///<id>`, instance type,
/// zone and region labels (GA and beta), the InternalIP of its port.
pub fn check_openstack_node(node: &Node, server: &Server) {
    assert_eq!(provider_id(node), server.provider_id(), "{}", server.name);
    for (key, want) in [
        ("node.kubernetes.io/instance-type", server.flavor.as_str()),
        ("beta.kubernetes.io/instance-type", server.flavor.as_str()),
        ("topology.kubernetes.io/zone", "nova"),
        ("failure-domain.beta.kubernetes.io/zone", "nova"),
        ("topology.kubernetes.io/region", "RegionOne"),
        ("failure-domain.beta.kubernetes.io/region", "RegionOne"),
    ] {
        assert_eq!(label(node, key), Some(want), "{}: label {key}", server.name);
    }
    let addresses = node.status.as_ref().unwrap().addresses.clone().unwrap();
    assert!(
        addresses
            .iter()
            .any(|x| x.type_ == "InternalIP" && x.address == server.ipv4),
        "{}: InternalIP {} from its port: {addresses:?}",
        server.name,
        server.ipv4
    );
}
