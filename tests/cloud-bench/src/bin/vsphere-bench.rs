//! `make bench-vsphere`: the vCenter calls our nodes cost, beside the vSphere CPI's.
//!
//! On a vcsim of its own (2 datacenters `DC0`/`DC1`, each with a cluster; 210 VMs spread over
//! them; a zone tag on each cluster and a region tag on each datacenter, `[Labels]` naming the
//! two categories), the real `cloud-gateway --provider vsphere`, fake-apiserver and
//! cloud-node-controller run, and vcsim counts every SOAP method and REST call it receives:
//!
//! - 200 Nodes joining at once, registered as kubelet `--cloud-provider=external` registers
//!   them (no providerID: found by tools hostname), until every one is initialized with its zone;
//! - 10 more VMs made afterwards and their Nodes joining;
//! - one periodic address refresh of the 210 (delimited by the controller's
//!   `cloud_node_controller_address_refreshes_total`);
//! - the gateway stopped (SIGTERM): its sessions logged out.
//!
//! CPI's figures are its call sequence for the same work (`../shared/reference/
//! cloud-provider-vsphere.md` §2–§6 and §9, read from its code), replayed against the same vcsim
//! and counted by it, not computed: a joining Node is RegisterNode (DiscoverNode by the VM's
//! SystemUUID byte-swapped, then as reported) and InstanceMetadata (zones: the VM's host and
//! pool, the host's summary, its ancestors, and a REST session listing the tags of each
//! ancestor with a GET of each tag and its category; then DiscoverNode by UUID); a refresh is
//! InstanceMetadata. DiscoverNode is the session check, the datacenter list, a SearchIndex call
//! per datacenter and the VM's properties read twice.
//!
//! Prints a table and writes it as JSON (`--json PATH`). Exits non-zero when a target of the
//! issue is missed: ≤ 20 calls for 200 nodes joining (the first tag reads included), ≤ 10 for
//! the 10 later, ≤ 5 per refresh, no login after the first of each kind, and no session left
//! at vCenter after the gateway stopped.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use cloud_bench::table;
use e2e::{Cluster, ClusterSpec, binary, counter, http_get, nodes::initialized, wait_for};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use provider_vsphere::{
    config::{Environment, parse},
    provider_id::swap_bytes,
    soap::{Client, Moref},
    tagging::Tagging,
};
use serde_json::{Value, json};
use vsphere_fixture::{Vcsim, Vm};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Long enough that no refresh pass overlaps the joining.
const REFRESH_PERIOD: &str = "45s";
/// Nodes created at once (and CPI's lookups replayed at once: its 8 search workers).
const PARALLEL: usize = 20;
const JOINING: usize = 200;
const LATER: usize = 10;

/// Calls of one phase, as vcsim counted them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    soap: u64,
    rest: u64,
    /// SOAP `Login` and REST `POST …/session`.
    logins: u64,
    /// SOAP `Logout` and REST `DELETE …/session`.
    logouts: u64,
}

impl Counts {
    fn of(calls: &BTreeMap<String, u64>) -> Self {
        let mut c = Self::default();
        for (name, n) in calls {
            if name.starts_with("soap ") {
                c.soap += n;
            } else {
                c.rest += n;
            }
            match name.as_str() {
                "soap Login" | "rest POST /rest/com/vmware/cis/session" => c.logins += n,
                "soap Logout" | "rest DELETE /rest/com/vmware/cis/session" => c.logouts += n,
                _ => {}
            }
        }
        c
    }
}

impl table::Counts for Counts {
    fn cells(&self, _ours: bool, target: &str) -> Vec<String> {
        vec![
            self.soap.to_string(),
            self.rest.to_string(),
            self.logins.to_string(),
            format!("{}{target}", self.total()),
        ]
    }

    fn json(&self) -> Value {
        json!({"soap": self.soap, "rest": self.rest, "logins": self.logins, "logouts": self.logouts,
               "total": self.total()})
    }

    fn total(&self) -> u64 {
        self.soap + self.rest
    }
}

type Row = table::Row<Counts>;

fn take(vcsim: &Vcsim) -> (Counts, Vec<String>) {
    let calls = vcsim.calls();
    vcsim.reset_calls();
    let list = calls.iter().map(|(name, n)| format!("{name} ×{n}")).collect();
    (Counts::of(&calls), list)
}

fn args() -> Option<PathBuf> {
    let mut json = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => json = it.next().map(PathBuf::from),
            "-h" | "--help" => {
                eprintln!("usage: vsphere-bench [--json PATH]");
                std::process::exit(0)
            }
            other => {
                eprintln!("unknown argument {other}\nusage: vsphere-bench [--json PATH]");
                std::process::exit(64)
            }
        }
    }
    json
}

/// The inventory: VMs alternating between the datacenters, the zone and region tags.
struct Inventory {
    vms: Vec<Vm>,
    zones: String,
    regions: String,
}

fn vm(i: usize) -> Vm {
    let mut vm = Vm::ubuntu("bench", &format!("10.50.{}.{}", i / 200, i % 200 + 1));
    vm.datacenter = Some(format!("DC{}", i % 2));
    vm
}

fn inventory(vcsim: &Vcsim) -> Inventory {
    let vms: Vec<Vm> = (0..JOINING).map(vm).collect();
    let morefs = vcsim.create_vms(&vms);
    let (zones, regions) = vcsim.tag_zones_and_regions(&morefs, 2);
    Inventory { vms, zones, regions }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let json_path = args();
    let dir = tempfile::tempdir().expect("a directory for vcsim");
    let vcsim = Vcsim::start_with(dir.path(), 2);
    let started = Instant::now();
    let mut inv = inventory(&vcsim);
    eprintln!(
        "vcsim: {} VMs over 2 datacenters in {:.1} s",
        inv.vms.len(),
        started.elapsed().as_secs_f64()
    );
    let outcome = run(&vcsim, &mut inv).await;
    vcsim.stop();
    let rows = match outcome {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("vsphere-bench failed: {e}");
            std::process::exit(1)
        }
    };
    table::print_rows(
        &[
            "work",
            "ours: SOAP",
            "REST",
            "logins",
            "total",
            "CPI: SOAP",
            "REST",
            "logins",
            "total",
            "took",
        ],
        &rows,
    );
    if let Some(path) = &json_path
        && !table::write_json(path, &table::json_rows("cpi", &rows))
    {
        std::process::exit(1);
    }
    let missed: Vec<String> = rows
        .iter()
        .filter_map(Row::missed)
        .chain(
            rows.iter()
                .filter(|r| r.ours.logins > if r.work.starts_with("200") { 2 } else { 0 })
                .map(|r| format!("{}: {} logins", r.work, r.ours.logins)),
        )
        .collect();
    if !missed.is_empty() {
        eprintln!("targets missed:\n  {}", missed.join("\n  "));
        std::process::exit(1);
    }
}

async fn run(vcsim: &Vcsim, inv: &mut Inventory) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let conf = cluster.dir.path().join("vsphere.conf");
    let labels = format!(
        "[Labels]\nzone = \"{}\"\nregion = \"{}\"\n",
        inv.zones, inv.regions
    );
    std::fs::write(&conf, vcsim.conf(&labels)).map_err(|e| format!("vsphere.conf: {e}"))?;
    vcsim.reset_calls();
    let gateway_args: Vec<String> = ["--insecure-plaintext", "--provider", "vsphere", "--cloud-config"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([conf.display().to_string()])
        .collect();
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway_args, &[])
        .await;
    let controller = cluster.start_controller(
        "cloud-node-controller",
        "cloud-node-controller",
        &["--node-status-update-frequency", REFRESH_PERIOD],
    );
    let metrics_at = cluster.procs[controller]
        .http
        .ok_or("the controller's HTTP address")?;
    let cpi = Cpi::new(vcsim, inv).await?;

    // 200 join.
    let names: Vec<String> = inv.vms.iter().map(|v| v.name.clone()).collect();
    let started = Instant::now();
    join(&cluster, &names).await;
    let seconds = started.elapsed().as_secs_f64();
    if metric(metrics_at, "cloud_node_controller_address_refreshes_total").await > 0 {
        return Err(format!(
            "an address refresh ran while {JOINING} nodes joined ({seconds:.0} s): raise REFRESH_PERIOD"
        ));
    }
    let (ours, calls) = take(vcsim);
    let cpi_join = cpi.replay(&inv.vms, true).await?;
    rows.push(Row {
        work: format!("{JOINING} nodes join"),
        ours,
        vendor: cpi_join,
        target: Some(20),
        seconds,
        calls,
    });

    // 10 more VMs, made now, and their Nodes.
    let later: Vec<Vm> = (JOINING..JOINING + LATER).map(vm).collect();
    vcsim.create_vms(&later);
    vcsim.reset_calls();
    let names: Vec<String> = later.iter().map(|v| v.name.clone()).collect();
    let started = Instant::now();
    join(&cluster, &names).await;
    let seconds = started.elapsed().as_secs_f64();
    let (ours, calls) = take(vcsim);
    let cpi_later = cpi.replay(&later, true).await?;
    rows.push(Row {
        work: format!("{LATER} more nodes join later (VMs made after the first {JOINING})"),
        ours,
        vendor: cpi_later,
        target: Some(10),
        seconds,
        calls,
    });
    inv.vms.extend(later);

    // One refresh of every Node.
    let started = Instant::now();
    wait_for("one address refresh", Duration::from_secs(180), || async move {
        (metric(metrics_at, "cloud_node_controller_address_refreshes_total").await >= 1).then_some(())
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let (ours, calls) = take(vcsim);
    let cpi_refresh = cpi.replay(&inv.vms, false).await?;
    rows.push(Row {
        work: format!("one address refresh of {} nodes", inv.vms.len()),
        ours,
        vendor: cpi_refresh,
        target: Some(5),
        seconds,
        calls,
    });

    // The gateway stops: its sessions end with it.
    cpi.logout().await;
    vcsim.reset_calls();
    let started = Instant::now();
    cluster.stop_gateway().await;
    let seconds = started.elapsed().as_secs_f64();
    let (ours, calls) = take(vcsim);
    let left = vcsim.sessions();
    rows.push(Row {
        work: format!("gateway stopped (SIGTERM): {left} SOAP sessions left at vCenter"),
        ours,
        // CPI logs its SOAP sessions out on SIGTERM; its REST sessions end with each lookup.
        vendor: Counts {
            soap: 1,
            logouts: 1,
            ..Counts::default()
        },
        target: None,
        seconds,
        calls,
    });
    cluster.stop().await;
    if left > 0 || ours.logouts < 2 {
        return Err(format!(
            "after the gateway stopped: {left} sessions left, {} logouts",
            ours.logouts
        ));
    }
    Ok(rows)
}

/// Registers `names` as kubelet does and waits until each is initialized with its zone.
async fn join(cluster: &Cluster, names: &[String]) {
    stream::iter(names)
        .for_each_concurrent(PARALLEL, |name| async move {
            cluster.register_node(name, true).await;
        })
        .await;
    let nodes = cluster.nodes();
    let wanted: Vec<String> = names.to_vec();
    wait_for(
        &format!("{} nodes initialized from vSphere with zones", names.len()),
        Duration::from_secs(300),
        || {
            let (nodes, wanted) = (nodes.clone(), wanted.clone());
            async move {
                let list = nodes.list(&Default::default()).await.ok()?;
                let done = list
                    .items
                    .into_iter()
                    .filter(|n| wanted.iter().any(|w| Some(w) == n.metadata.name.as_ref()))
                    .filter(|n| !tainted(n) && has_zone(n))
                    .filter_map(initialized)
                    .count();
                (done == wanted.len()).then_some(())
            }
        },
    )
    .await;
}

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED))
}

fn has_zone(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ZONE_LABEL))
        .is_some_and(|z| z.starts_with("zone-"))
}

async fn metric(at: std::net::SocketAddr, name: &str) -> u64 {
    match http_get(at, "/metrics").await {
        Some((200, body)) => counter(&body, name, &[]),
        _ => 0,
    }
}

/// CPI's node calls, replayed (reference §2.3, §2.4, §3.1, §3.4, §6, §9) over one SOAP session
/// (as CPI keeps one) and a REST session per zone lookup (as CPI's `withTagsClient`).
struct Cpi {
    client: Arc<Client>,
    vcsim: Vcsim,
    /// `[Labels]`: the zone and region categories.
    categories: (String, String),
    /// Its node cache: the VM found for each BIOS UUID (`nodeUUIDMap`).
    cache: std::sync::Mutex<std::collections::HashMap<String, Moref>>,
}

impl Cpi {
    async fn new(vcsim: &Vcsim, inv: &Inventory) -> Result<Self, String> {
        let read = parse(&vcsim.conf(""), Environment::process()).map_err(|e| e.to_string())?;
        let client = Client::new(&read.config.vcenters[0], None)?;
        Ok(Self {
            client,
            vcsim: Vcsim {
                dir: vcsim.dir.clone(),
                info: vcsim.info.clone(),
            },
            categories: (inv.zones.clone(), inv.regions.clone()),
            cache: std::sync::Mutex::default(),
        })
    }

    /// The calls of `vms`' Nodes joining (`joining`: RegisterNode, then InstanceMetadata) or
    /// refreshed (InstanceMetadata), as vcsim counted them.
    async fn replay(&self, vms: &[Vm], joining: bool) -> Result<Counts, String> {
        take(&self.vcsim);
        let failures: Vec<String> = stream::iter(vms)
            .map(|vm| async move {
                if joining {
                    // RegisterNode: the SystemUUID swapped first, then as kubelet reported it.
                    let found = self.discover_by_uuid(&swap_bytes(&vm.uuid), true).await?;
                    let found = found.ok_or_else(|| format!("{}: no VM", vm.name))?;
                    self.cache.lock().expect("cache").insert(vm.uuid.clone(), found);
                }
                self.instance_metadata(vm).await
            })
            .buffer_unordered(8)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await;
        if let Some(e) = failures.first() {
            return Err(format!("CPI's sequence failed {} times: {e}", failures.len()));
        }
        Ok(take(&self.vcsim).0)
    }

    async fn logout(&self) {
        self.client.logout().await;
    }

    /// InstanceMetadata with the node cached: GetZoneByProviderID, then
    /// NodeAddressesByProviderID (a DiscoverNode by UUID).
    async fn instance_metadata(&self, vm: &Vm) -> Result<(), String> {
        let cached = self.cache.lock().expect("cache").get(&vm.uuid).cloned();
        let found = cached.ok_or_else(|| format!("{}: not in CPI's cache", vm.name))?;
        self.zone(&found).await?;
        self.discover_by_uuid(&vm.uuid, false).await?;
        Ok(())
    }

    /// WhichVCandDCByNodeID by UUID (retried with the swapped form when `swapped_retry` and the
    /// first found nothing), then DiscoverNode's second property read.
    async fn discover_by_uuid(&self, uuid: &str, swapped_retry: bool) -> Result<Option<Moref>, String> {
        let mut vm = self.search(uuid).await?;
        if vm.is_none() && swapped_retry {
            vm = self.search(&swap_bytes(uuid)).await?;
        }
        if let Some(vm) = &vm {
            self.properties(vm).await?;
        }
        Ok(vm)
    }

    /// Connect's session check, the datacenter list, FindByUuid per datacenter, and the hit's
    /// properties.
    async fn search(&self, uuid: &str) -> Result<Option<Moref>, String> {
        let content = self.client.content().await.map_err(|e| e.to_string())?.clone();
        let e = |e: provider_vsphere::soap::SoapError| e.to_string();
        self.client
            .retrieve(
                "SessionManager",
                std::slice::from_ref(&content.session_manager),
                &["currentSession"],
            )
            .await
            .map_err(e)?;
        let (root, _) = self
            .client
            .retrieve(
                "Folder",
                std::slice::from_ref(&content.root_folder),
                &["childEntity"],
            )
            .await
            .map_err(e)?;
        let datacenters: Vec<Moref> = root
            .first()
            .and_then(|o| o.prop("childEntity"))
            .map(|list| list.children.iter().filter_map(Moref::from).collect())
            .unwrap_or_default();
        let mut hit = None;
        for dc in &datacenters {
            if let Some(vm) = self.client.find_by_uuid(Some(dc), uuid).await.map_err(e)? {
                hit.get_or_insert(vm);
            }
        }
        if let Some(vm) = &hit {
            self.properties(vm).await?;
        }
        Ok(hit)
    }

    async fn properties(&self, vm: &Moref) -> Result<(), String> {
        self.client
            .retrieve(
                "VirtualMachine",
                std::slice::from_ref(vm),
                &["config", "summary", "guest"],
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// GetZoneByProviderID: the VM's host and pool, the host's summary, then
    /// LookupZoneByMoref on the host: its ancestors, and in a REST session of its own the tags
    /// of each from the host up (a GET of each tag and of its category) until both are found.
    async fn zone(&self, vm: &Moref) -> Result<(), String> {
        let e = |e: provider_vsphere::soap::SoapError| e.to_string();
        let one = |path: &'static str| async move {
            let (objects, _) = self
                .client
                .retrieve("VirtualMachine", std::slice::from_ref(vm), &[path])
                .await?;
            Ok::<_, provider_vsphere::soap::SoapError>(
                objects.first().and_then(|o| o.prop(path)).and_then(Moref::from),
            )
        };
        let host = one("summary.runtime.host")
            .await
            .map_err(e)?
            .ok_or("the VM has no host")?;
        one("resourcePool").await.map_err(e)?;
        self.client
            .retrieve("HostSystem", std::slice::from_ref(&host), &["summary"])
            .await
            .map_err(e)?;
        let parents = self
            .client
            .parents(std::slice::from_ref(&host))
            .await
            .map_err(e)?;
        let tags = Tagging::new(self.client.clone());
        let (mut zone, mut region) = (false, false);
        let mut at = Some(host);
        while let Some(object) = at {
            for id in tags.attached_tags(&object).await.map_err(e)? {
                let tag = tags.tag(&id).await.map_err(e)?;
                let category = tags.category(&tag.category_id).await.map_err(e)?;
                zone |= category.name == self.categories.0;
                region |= category.name == self.categories.1;
            }
            if zone && region {
                break;
            }
            at = parents.get(&object).cloned();
        }
        tags.logout().await;
        if zone && region {
            Ok(())
        } else {
            Err(format!("CPI's walk found no zone and region for {}", vm.value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn calls_are_counted_by_kind() {
        let calls = [
            ("soap Login", 1),
            ("soap RetrievePropertiesEx", 3),
            ("rest POST /rest/com/vmware/cis/session", 2),
            ("rest DELETE /rest/com/vmware/cis/session", 2),
            ("soap Logout", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(
            Counts::of(&calls),
            Counts {
                soap: 5,
                rest: 4,
                logins: 3,
                logouts: 3
            }
        );
    }
}
