//! Scenario `openstack`: the `services` scenario on the OpenStack test cloud (real Keystone,
//! Neutron and Octavia; `openstack_fixture`). Two service-lb-controller replicas sharing the
//! Services through shard leases and `cloud-gateway --provider openstack` (with
//! `manage-security-groups`) serve LoadBalancer Services that are created, edited (ports,
//! `loadbalancer.openstack.org/connection-limit`, `loadBalancerSourceRanges`,
//! `loadbalancer.openstack.org/keep-floatingip`) and deleted, while replicas are SIGKILLed and
//! replaced, every few kills all of them while some Service's load balancer is in Octavia and
//! its status not yet patched, the gateway is SIGKILLed and restarted, and the fault-injecting
//! proxy in front of the cloud (`openstack_fixture::proxy::CloudProxy`) fails a share of
//! Octavia's and Neutron's writes (409, 500 before the write landed, 500 after it landed) and
//! keeps a share of load balancers pending after Octavia made them ACTIVE. Beside them, another
//! cluster's load balancer under this cluster's name, for a Service of the same name.
//!
//! Then the faults stop and, within a deadline, everything must converge:
//! - every live Service has exactly one load balancer, ACTIVE, whose listeners have its ports,
//!   connection limit and source ranges; one floating IP of ours on its VIP port, which is its
//!   status; its security group, with one ingress rule per node port (missing otherwise);
//! - no load balancer, floating IP (but those a `keep-floatingip` Service left) or security
//!   group of ours without a live Service, no rule its Service does not ask for, no deleted
//!   Service kept by its finalizer (leaked otherwise);
//! - no load balancer created twice (a create whose answer was lost, made again);
//! - no Service synced by two replicas at once (from the replicas' JSON logs);
//! - the other cluster's load balancer not written to, and its Service told whose it is.
//!
//! A Service found wrong gets its story: the scenario's changes to it, the replicas' syncs of it
//! and its objects in OpenStack.
//!
//! # What bounds it (measured 2026-11-28, 2 shared cores)
//! - Octavia's single worker applies one flow at a time: a cascade delete takes about 1.5 s, so
//!   the clean-up of 40–60 live Services alone takes 60–100 s; during the churn at most 7–10
//!   load balancers were pending at once, so the worker kept up with one change every 0.4 s.
//! - Neutron's sqlite: one API process whose green threads write one file. Before the test
//!   cloud's `sqlite_locked_retry` glue, two concurrent writes failed with a 500 "database is
//!   locked" (531 in two full runs), and the controller's backoff, not Octavia, set the time to
//!   converge. Now Neutron retries them as deadlocks: none fails, but under the churn a request
//!   can take 40–75 s, past the provider's 60 s timeout, and then land late (the provider then
//!   waits two timeouts before trusting that Service's converge: `load_balancers::unanswered`).
//!   That sets the time to converge now: 164–198 s after the last fault in 2026-11-28's runs.
//! - The gateway's restarts: each takes Keystone and Octavia discovery through the proxy, while
//!   the churn waits for it to be ready.
//!
//! Full scale: 100 Services created, about 50 edits and 60 deletions in 3–4 min of churn, then
//! edits alone until at least 50 cloud faults fired (fewer by the give-up time is a violation),
//! 7–9 min per run with convergence and clean-up. The run notes the most load balancers seen
//! pending at once and the "database is locked" of Octavia and Neutron.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Duration,
};

use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use openstack_fixture::{
    CloudConf, LiftedQuotas, TestCloud, User,
    proxy::{Chaos, CloudProxy},
};
use provider_openstack::client::{Client, Service as Api};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    Dice, Outcome, Scale,
    journal::Journal,
    services::{Replicas, Work, overlaps, work_of},
    wait_until,
};
use crate::{Cluster, ClusterSpec, binary, ingress_ips};

const NAMESPACE: &str = "default";
const REPLICAS: usize = 2;
/// The identity of the other cluster whose load balancer sits under this cluster's name.
const OTHER_IDENTITY: &str = "0e000000-0000-4000-8000-0000000000ee";
const CONNECTION_LIMIT: &str = "loadbalancer.openstack.org/connection-limit";
const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";

/// What the proxy injects while the churn runs.
const CHAOS: Chaos = Chaos {
    octavia_percent: 15,
    neutron_percent: 15,
    slow_percent: 15,
    slow_for: (Duration::from_secs(3), Duration::from_secs(12)),
};

/// A Service as the scenario wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    /// Its TCP ports, sorted.
    ports: Vec<u16>,
    connection_limit: Option<i32>,
    /// `loadBalancerSourceRanges`, sorted; empty: none.
    source_ranges: Vec<String>,
    keep_floating_ip: bool,
}

impl Wanted {
    /// The Service's spec and annotations as a merge patch (or the body of a create): absent
    /// annotations and source ranges removed.
    fn patch(&self) -> Value {
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|p| json!({"name": format!("p{p}"), "port": p, "targetPort": 8080, "protocol": "TCP"}))
            .collect();
        let ranges = (!self.source_ranges.is_empty()).then(|| self.source_ranges.clone());
        json!({
            "metadata": {"annotations": {
                CONNECTION_LIMIT: self.connection_limit.map(|l| l.to_string()),
                KEEP_FLOATING_IP: self.keep_floating_ip.then_some("true"),
            }},
            "spec": {"ports": ports, "loadBalancerSourceRanges": ranges},
        })
    }

    /// In a few words, for the journal.
    fn describe(&self) -> String {
        format!(
            "ports {:?} connection-limit {:?} source ranges {:?} keep-floatingip {}",
            self.ports, self.connection_limit, self.source_ranges, self.keep_floating_ip
        )
    }
}

/// `v` without its null fields (what a merge patch removes is absent from a create).
fn without_nulls(v: &mut Value) {
    if let Some(object) = v.as_object_mut() {
        object.retain(|_, field| !field.is_null());
        object.values_mut().for_each(without_nulls);
    }
}

/// A random Service.
fn random_service(dice: &mut Dice) -> Wanted {
    let mut w = Wanted {
        ports: vec![80 + dice.below(20) as u16],
        connection_limit: None,
        source_ranges: Vec::new(),
        keep_floating_ip: dice.chance(0.25),
    };
    if dice.chance(0.3) {
        w.ports.push(443);
    }
    if dice.chance(0.3) {
        w.connection_limit = Some(100 * (1 + dice.below(50) as i32));
    }
    if dice.chance(0.25) {
        w.source_ranges = random_ranges(dice);
    }
    w
}

fn random_ranges(dice: &mut Dice) -> Vec<String> {
    let mut ranges: Vec<String> = (0..1 + dice.below(2))
        .map(|_| format!("10.{}.0.0/16", 100 + dice.below(100)))
        .collect();
    ranges.sort();
    ranges.dedup();
    ranges
}

/// One edit of `w`, and its name.
fn edit(dice: &mut Dice, w: &Wanted) -> (Wanted, &'static str) {
    let mut w = w.clone();
    let what = match dice.below(4) {
        0 => {
            if w.ports.len() > 1 {
                w.ports.pop();
            } else if dice.chance(0.5) {
                w.ports.push(443);
            } else {
                w.ports[0] = if w.ports[0] >= 99 { 80 } else { w.ports[0] + 1 };
            }
            "ports"
        }
        1 => {
            w.connection_limit = match w.connection_limit {
                Some(_) if dice.chance(0.5) => None,
                _ => Some(100 * (1 + dice.below(50) as i32)),
            };
            "connection-limit"
        }
        2 => {
            w.source_ranges = if !w.source_ranges.is_empty() && dice.chance(0.5) {
                Vec::new()
            } else {
                random_ranges(dice)
            };
            "source ranges"
        }
        _ => {
            w.keep_floating_ip = !w.keep_floating_ip;
            "keep-floatingip"
        }
    };
    w.ports.sort_unstable();
    w.ports.dedup();
    (w, what)
}

/// What OpenStack and the API server hold, as far as this scenario is concerned.
struct World {
    /// The load balancers named for this cluster and namespace (not DELETED).
    lbs: Vec<Value>,
    /// Every listener of those load balancers.
    listeners: Vec<Value>,
    /// The floating IPs whose description says this cluster made them.
    fips: Vec<Value>,
    /// The security groups whose description names this cluster, with their rules.
    groups: Vec<Value>,
    /// The scenario's Services (and the decoy) in the namespace.
    services: Vec<Service>,
}

async fn list(client: &Client, api: Api, path: &str, field: &str) -> Option<Vec<Value>> {
    let all: Value = client.get(api, path).send_json().await.ok()?;
    all[field].as_array().cloned()
}

impl World {
    async fn read(client: &Client, cluster: &Cluster, cluster_name: &str) -> Option<Self> {
        let prefix = lb_prefix(cluster_name);
        let lbs: Vec<Value> = list(client, Api::LoadBalancer, "/lbaas/loadbalancers", "loadbalancers")
            .await?
            .into_iter()
            .filter(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .filter(|lb| lb["provisioning_status"] != "DELETED")
            .collect();
        let ids: BTreeSet<&str> = lbs.iter().filter_map(|lb| lb["id"].as_str()).collect();
        let listeners = list(client, Api::LoadBalancer, "/lbaas/listeners", "listeners")
            .await?
            .into_iter()
            .filter(|l| {
                l["loadbalancers"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|lb| lb["id"].as_str().is_some_and(|id| ids.contains(id)))
                })
            })
            .collect();
        let suffix = format!(" from cluster {cluster_name}");
        let fips = list(client, Api::Network, "/floatingips", "floatingips")
            .await?
            .into_iter()
            .filter(|f| f["description"].as_str().is_some_and(|d| d.ends_with(&suffix)))
            .collect();
        let suffix = format!(" in cluster {cluster_name}");
        let groups = list(client, Api::Network, "/security-groups", "security_groups")
            .await?
            .into_iter()
            .filter(|g| g["description"].as_str().is_some_and(|d| d.ends_with(&suffix)))
            .collect();
        let services = cluster
            .services(NAMESPACE)
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|s| is_ours(&s.name_any()))
            .collect();
        Some(Self {
            lbs,
            listeners,
            fips,
            groups,
            services,
        })
    }

    fn lbs_of(&self, cluster_name: &str, name: &str) -> Vec<&Value> {
        let lb_name = format!("{}{name}", lb_prefix(cluster_name));
        self.lbs
            .iter()
            .filter(|lb| lb["name"] == lb_name.as_str())
            .collect()
    }

    fn listeners_of(&self, lb: &Value) -> Vec<&Value> {
        self.listeners
            .iter()
            .filter(|l| {
                l["loadbalancers"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["id"] == lb["id"]))
            })
            .collect()
    }

    fn fips_of(&self, cluster_name: &str, name: &str) -> Vec<&Value> {
        let of = format!(" {NAMESPACE}/{name} from cluster {cluster_name}");
        self.fips
            .iter()
            .filter(|f| f["description"].as_str().is_some_and(|d| d.ends_with(&of)))
            .collect()
    }

    fn groups_of(&self, name: &str) -> Vec<&Value> {
        let of = format!("for {NAMESPACE}/{name} Service LoadBalancer in cluster ");
        self.groups
            .iter()
            .filter(|g| g["description"].as_str().is_some_and(|d| d.contains(&of)))
            .collect()
    }

    /// Service `name`'s objects in OpenStack in a line, for its story.
    fn objects_of(&self, cluster_name: &str, name: &str) -> String {
        let lbs: Vec<String> = self
            .lbs_of(cluster_name, name)
            .iter()
            .map(|lb| {
                let listeners: Vec<String> = self
                    .listeners_of(lb)
                    .iter()
                    .map(|l| {
                        format!(
                            ":{} limit {} cidrs {}",
                            l["protocol_port"], l["connection_limit"], l["allowed_cidrs"]
                        )
                    })
                    .collect();
                format!(
                    "load balancer {} {} vip port {} listeners [{}]",
                    lb["id"],
                    lb["provisioning_status"],
                    lb["vip_port_id"],
                    listeners.join(", ")
                )
            })
            .collect();
        let fips: Vec<String> = self
            .fips_of(cluster_name, name)
            .iter()
            .map(|f| {
                format!(
                    "floating IP {} on port {}",
                    f["floating_ip_address"], f["port_id"]
                )
            })
            .collect();
        let groups: Vec<String> = self
            .groups_of(name)
            .iter()
            .map(|g| {
                format!(
                    "security group {} ingress ports {:?}",
                    g["name"],
                    ingress_ports(g)
                )
            })
            .collect();
        let all: Vec<String> = lbs.into_iter().chain(fips).chain(groups).collect();
        if all.is_empty() {
            "nothing".to_owned()
        } else {
            all.join("; ")
        }
    }
}

/// Whether a Service of the namespace is the scenario's (the API server's own `kubernetes`
/// is not).
fn is_ours(name: &str) -> bool {
    name.starts_with("svc-") || name == "decoy"
}

fn lb_prefix(cluster_name: &str) -> String {
    format!("kube_service_{cluster_name}_{NAMESPACE}_")
}

/// The ports of a security group's ingress rules, sorted.
fn ingress_ports(group: &Value) -> Vec<u64> {
    let mut ports: Vec<u64> = group["security_group_rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter(|r| r["direction"] == "ingress")
                .filter_map(|r| r["port_range_min"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    ports.sort_unstable();
    ports
}

/// A listener's source ranges as a set; none, empty or "anywhere" read alike.
fn cidrs(listener: &Value) -> Vec<String> {
    let mut all: Vec<String> = listener["allowed_cidrs"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    all.retain(|c| c != "0.0.0.0/0" && c != "::/0");
    all.sort();
    all
}

/// How far the cloud and the API server are from converged.
#[derive(Default)]
struct Differences {
    /// Every difference in words; empty when converged.
    all: Vec<String>,
    leaked: u64,
    missing: u64,
    /// The Services with a difference, in the order found.
    named: Vec<String>,
}

impl Differences {
    fn add(&mut self, name: Option<&str>, what: String) {
        self.all.push(what);
        if let Some(name) = name
            && !self.named.iter().any(|n| n == name)
        {
            self.named.push(name.to_owned());
        }
    }
}

/// What converged looks like against `world`. `kept`: the Services deleted with
/// `keep-floatingip`, whose floating IPs stay.
fn differences(
    world: &World,
    cluster_name: &str,
    wanted: &BTreeMap<String, Wanted>,
    kept: &BTreeSet<String>,
) -> Differences {
    let mut d = Differences::default();
    let mut ours_lbs = BTreeSet::new();
    let mut ours_fips = BTreeSet::new();
    let mut ours_groups = BTreeSet::new();
    for s in &world.services {
        let name = s.name_any();
        if name == "decoy" {
            continue;
        }
        let Some(w) = wanted.get(&name) else {
            d.leaked += 1;
            d.add(
                Some(name.as_str()),
                format!(
                    "{name} was deleted but is still there: {:?}",
                    s.metadata.finalizers
                ),
            );
            continue;
        };
        check_service(
            world,
            cluster_name,
            s,
            w,
            &mut d,
            &mut ours_lbs,
            &mut ours_fips,
            &mut ours_groups,
        );
    }
    for name in wanted.keys() {
        if !world.services.iter().any(|s| s.name_any() == *name) {
            d.add(
                Some(name.as_str()),
                format!("{name} is missing from the API server"),
            );
        }
    }
    let prefix = lb_prefix(cluster_name);
    for lb in &world.lbs {
        let name = lb["name"].as_str().unwrap_or_default();
        let service = name.strip_prefix(&prefix).unwrap_or_default();
        if service != "decoy" && !ours_lbs.contains(lb["id"].as_str().unwrap_or_default()) {
            d.leaked += 1;
            d.add(Some(service), format!("load balancer {name} of no live Service"));
        }
    }
    let mut kept_seen: BTreeMap<String, u32> = BTreeMap::new();
    for fip in &world.fips {
        let id = fip["id"].as_str().unwrap_or_default();
        if ours_fips.contains(id) {
            continue;
        }
        let description = fip["description"].as_str().unwrap_or_default();
        let service = description
            .split_once(&format!(" {NAMESPACE}/"))
            .and_then(|(_, rest)| rest.split_once(" from cluster "))
            .map(|(name, _)| name.to_owned())
            .unwrap_or_default();
        let detached = fip["port_id"].as_str().is_none_or(str::is_empty);
        if kept.contains(&service) && detached {
            let seen = kept_seen.entry(service.clone()).or_default();
            *seen += 1;
            if *seen == 1 {
                continue;
            }
        }
        d.leaked += 1;
        d.add(
            Some(service.as_str()),
            format!(
                "floating IP {} ({description}) on port {} of no live Service's load balancer",
                fip["floating_ip_address"], fip["port_id"]
            ),
        );
    }
    for group in &world.groups {
        let id = group["id"].as_str().unwrap_or_default();
        if !ours_groups.contains(id) {
            d.leaked += 1;
            let description = group["description"].as_str().unwrap_or_default();
            let service = description
                .split_once(&format!("for {NAMESPACE}/"))
                .and_then(|(_, rest)| rest.split_once(' '))
                .map(|(name, _)| name.to_owned());
            d.add(
                service.as_deref(),
                format!("security group {} of no live Service", group["name"]),
            );
        }
    }
    d
}

/// The differences of one live, wanted Service; the ids of its objects go to the `ours_*`.
#[allow(clippy::too_many_arguments)]
fn check_service(
    world: &World,
    cluster_name: &str,
    s: &Service,
    w: &Wanted,
    d: &mut Differences,
    ours_lbs: &mut BTreeSet<String>,
    ours_fips: &mut BTreeSet<String>,
    ours_groups: &mut BTreeSet<String>,
) {
    let name = s.name_any();
    let n = Some(name.as_str());
    let lbs = world.lbs_of(cluster_name, &name);
    let lb = match lbs.as_slice() {
        [lb] => *lb,
        [] => {
            d.missing += 1;
            d.add(n, format!("{name} has no load balancer"));
            return;
        }
        more => {
            d.add(n, format!("{name} has {} load balancers", more.len()));
            return;
        }
    };
    ours_lbs.insert(lb["id"].as_str().unwrap_or_default().to_owned());
    if lb["provisioning_status"] != "ACTIVE" {
        d.add(
            n,
            format!("{name}'s load balancer is {}", lb["provisioning_status"]),
        );
    }
    let listeners = world.listeners_of(lb);
    let mut ports: Vec<u64> = listeners
        .iter()
        .filter_map(|l| l["protocol_port"].as_u64())
        .collect();
    ports.sort_unstable();
    let want_ports: Vec<u64> = w.ports.iter().map(|p| u64::from(*p)).collect();
    if ports != want_ports {
        d.add(
            n,
            format!("{name}'s listeners are on {ports:?}, not {want_ports:?}"),
        );
    }
    let limit = i64::from(w.connection_limit.unwrap_or(-1));
    for l in &listeners {
        if l["connection_limit"].as_i64() != Some(limit) {
            d.add(
                n,
                format!(
                    "{name}'s listener :{} has connection limit {}, not {limit}",
                    l["protocol_port"], l["connection_limit"]
                ),
            );
        }
        if cidrs(l) != w.source_ranges {
            d.add(
                n,
                format!(
                    "{name}'s listener :{} allows {}, not {:?}",
                    l["protocol_port"], l["allowed_cidrs"], w.source_ranges
                ),
            );
        }
    }
    let on_vip: Vec<&Value> = world
        .fips
        .iter()
        .filter(|f| f["port_id"] == lb["vip_port_id"])
        .collect();
    let fip_address = match on_vip.as_slice() {
        [fip] => {
            ours_fips.insert(fip["id"].as_str().unwrap_or_default().to_owned());
            fip["floating_ip_address"].as_str().map(str::to_owned)
        }
        [] => {
            d.missing += 1;
            d.add(n, format!("{name}'s load balancer has no floating IP of ours"));
            None
        }
        more => {
            for fip in more {
                ours_fips.insert(fip["id"].as_str().unwrap_or_default().to_owned());
            }
            d.add(
                n,
                format!("{name}'s load balancer has {} floating IPs", more.len()),
            );
            None
        }
    };
    if fip_address.is_some() && ingress_ips(s) != fip_address.clone().into_iter().collect::<Vec<_>>() {
        d.add(
            n,
            format!(
                "{name}'s status {:?} is not its floating IP {fip_address:?}",
                ingress_ips(s)
            ),
        );
    }
    let group_name = format!("lb-sg-{}-{NAMESPACE}-{name}", s.uid().unwrap_or_default());
    let groups: Vec<&Value> = world
        .groups
        .iter()
        .filter(|g| g["name"] == group_name.as_str())
        .collect();
    match groups.as_slice() {
        [group] => {
            ours_groups.insert(group["id"].as_str().unwrap_or_default().to_owned());
            let mut node_ports: Vec<u64> = s
                .spec
                .iter()
                .flat_map(|spec| spec.ports.iter().flatten())
                .filter_map(|p| p.node_port.and_then(|p| u64::try_from(p).ok()))
                .collect();
            node_ports.sort_unstable();
            let rules = ingress_ports(group);
            if rules != node_ports {
                let extra = rules.iter().filter(|p| !node_ports.contains(p)).count();
                let lacking = node_ports.iter().filter(|p| !rules.contains(p)).count();
                d.leaked += extra as u64;
                d.missing += lacking as u64;
                d.add(
                    n,
                    format!(
                        "{name}'s security group has rules for {rules:?}, its node ports are {node_ports:?}"
                    ),
                );
            }
        }
        [] => {
            d.missing += 1;
            d.add(n, format!("{name} has no security group {group_name}"));
        }
        more => d.add(n, format!("{name} has {} security groups", more.len())),
    }
}

/// Whether some live Service's load balancer is in Octavia while its status does not show it.
async fn in_write_window(client: &Client, cluster: &Cluster, cluster_name: &str) -> bool {
    let prefix = lb_prefix(cluster_name);
    let Some(lbs) = list(client, Api::LoadBalancer, "/lbaas/loadbalancers", "loadbalancers").await else {
        return false;
    };
    let Ok(services) = cluster.services(NAMESPACE).list(&ListParams::default()).await else {
        return false;
    };
    services.items.iter().any(|s| {
        let lb_name = format!("{prefix}{}", s.name_any());
        s.name_any().starts_with("svc-")
            && s.metadata.deletion_timestamp.is_none()
            && ingress_ips(s).is_empty()
            && lbs.iter().any(|lb| lb["name"] == lb_name.as_str())
    })
}

/// Load balancers of this scenario's pending right now (`None` when Octavia does not answer).
async fn pending(client: &Client, cluster_name: &str) -> Option<usize> {
    let prefix = lb_prefix(cluster_name);
    let lbs = list(client, Api::LoadBalancer, "/lbaas/loadbalancers", "loadbalancers").await?;
    Some(
        lbs.iter()
            .filter(|lb| lb["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .filter(|lb| {
                lb["provisioning_status"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("PENDING_"))
            })
            .count(),
    )
}

/// Times the sqlite of the services whose logs begin with `service` (`octavia`, `neutron`)
/// refused a write so far ("database is locked" in their logs).
fn sqlite_locked(cloud: &TestCloud, service: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(cloud.dir.join("log")) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(service))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|text| text.matches("database is locked").count())
        .sum()
}

/// Another cluster's load balancer under `cluster_name`'s name for Service `name`, made as OCCM
/// makes one and claimed by that cluster's identity; ACTIVE. `None` when Octavia did not make it.
async fn other_clusters_load_balancer(
    cloud: &TestCloud,
    client: &Client,
    cluster_name: &str,
    name: &str,
) -> Option<Value> {
    let lb_name = format!("{}{name}", lb_prefix(cluster_name));
    let body = json!({"loadbalancer": {
        "name": lb_name, "provider": "amphora", "vip_subnet_id": cloud.info.ids.subnet_private,
        "description": format!("Kubernetes external service {NAMESPACE}/{name} from cluster {cluster_name}"),
        "tags": [lb_name, format!("kube_cluster_id_{OTHER_IDENTITY}")]}});
    let lb: Value = client
        .post(Api::LoadBalancer, "/lbaas/loadbalancers")
        .json(&body)
        .send_json_field("loadbalancer")
        .await
        .ok()?;
    let path = format!("/lbaas/loadbalancers/{}", lb["id"].as_str()?);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let lb: Value = client
            .get(Api::LoadBalancer, &path)
            .send_json_field("loadbalancer")
            .await
            .ok()?;
        if lb["provisioning_status"] == "ACTIVE" {
            return Some(lb);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}

/// The gateway's flags: OpenStack through the proxy, with `manage-security-groups`, its own
/// limiter out of the way (the subject is Octavia's pace).
fn gateway_args(cloud: &TestCloud, proxy: &CloudProxy, dir: &Path) -> Vec<String> {
    let conf = dir.join("cloud.conf");
    let mut text = cloud.cloud_conf(&CloudConf {
        auth_url: Some(&proxy.auth_url),
        load_balancers: true,
        ..CloudConf::default()
    });
    // `[LoadBalancer]` is the last section.
    text.push_str("manage-security-groups = true\n");
    if let Err(e) = std::fs::write(&conf, text) {
        eprintln!("chaos: cannot write {}: {e}", conf.display());
    }
    let mut args: Vec<String> = [
        "--insecure-plaintext",
        "--provider",
        "openstack",
        "--cloud-config",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(conf.display().to_string());
    for flag in ["--write-rate", "--write-burst", "--read-rate", "--read-burst"] {
        args.extend([flag.to_owned(), "500".to_owned()]);
    }
    args
}

/// The cloud faults the proxy injected so far (Octavia's and Neutron's failing writes, slow
/// load balancers), all kinds together.
fn cloud_faults(proxy: &CloudProxy) -> u64 {
    proxy.faults().values().sum()
}

/// Runs the scenario.
pub async fn run(scale: Scale, mut dice: Dice) -> Outcome {
    let mut outcome = Outcome::new("openstack");
    let cloud = match tokio::task::spawn_blocking(TestCloud::shared).await {
        Ok(cloud) => cloud,
        Err(e) => {
            outcome.violation(format!("the OpenStack test cloud did not start: {e}"));
            return outcome;
        }
    };
    let _turn = cloud.octavia_turn().await;
    let client = cloud.client(User::Ccm).await;
    // A group per Service, and a floating IP and a VIP port: Neutron's default quotas (10
    // security groups) are for people, not for a hundred Services.
    let admin = cloud.admin().await;
    let quotas = LiftedQuotas::lift(
        &admin,
        &cloud.info.ids.project_ccm,
        &[],
        &["security_group", "security_group_rule", "floatingip", "port"],
    )
    .await;
    let locked_before = [sqlite_locked(cloud, "octavia"), sqlite_locked(cloud, "neutron")];
    let proxy = CloudProxy::start(cloud).await;
    let cluster_name = cloud.unique_name("chaos");
    let mut cluster = Cluster::start(ClusterSpec::with_instances(&[])).await;
    let gateway = gateway_args(cloud, &proxy, cluster.dir.path());
    cluster
        .swap_gateway(&binary("cloud-gateway"), &gateway, &[])
        .await;
    let mut replicas = Replicas::with_flags(vec!["--cluster-name".to_owned(), cluster_name.clone()]);
    for _ in 0..REPLICAS {
        replicas.start(&mut cluster);
    }

    // Another cluster's load balancer for default/decoy, under this cluster's name.
    let Some(decoy) = other_clusters_load_balancer(cloud, &client, &cluster_name, "decoy").await else {
        outcome.violation("the other cluster's load balancer could not be made");
        quotas.restore(&admin).await;
        cluster.stop().await;
        return outcome;
    };
    cluster.create_lb_service(NAMESPACE, "decoy", json!({})).await;

    // The churn, with kills and the proxy's faults.
    proxy.chaos(CHAOS, dice.seed());
    let target = scale.pick(10, 100);
    // The cloud faults a run injects at least: the churn goes on, editing, until they fired
    // (the share is drawn, so 100 Services alone drew 47 to 79).
    let fault_floor = scale.pick(0, 50);
    let max_live = scale.pick(6, 40);
    let give_up = scale.pick(Duration::from_secs(120), Duration::from_secs(420));
    let pace = scale.pick(
        (Duration::from_millis(300), Duration::from_millis(900)),
        (Duration::from_millis(200), Duration::from_millis(600)),
    );
    let kill_every = scale.pick(
        (Duration::from_secs(3), Duration::from_secs(5)),
        (Duration::from_secs(6), Duration::from_secs(12)),
    );
    let gateway_every = scale.pick(Duration::from_secs(10), Duration::from_secs(40));
    // Every so many kills, all replicas at once.
    let all_every = scale.pick(2, 4);
    let api = cluster.services(NAMESPACE);
    let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
    // The Services deleted with keep-floatingip: their floating IPs stay.
    let mut kept: BTreeSet<String> = BTreeSet::new();
    let mut journal = Journal::default();
    let (mut created, mut edits, mut deletes) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    let mut next_kill = started + dice.between(kill_every.0, kill_every.1);
    let mut next_gateway_kill = started + gateway_every;
    let mut next_sample = started;
    let mut kills = 0u64;
    let mut most_pending = 0usize;
    while started.elapsed() < give_up
        && (created < target || (cloud_faults(&proxy) < fault_floor && !wanted.is_empty()))
    {
        let roll = dice.below(20);
        let names: Vec<String> = wanted.keys().cloned().collect();
        let pick = |dice: &mut Dice| names.get(dice.below(names.len() as u64) as usize).cloned();
        let creating = created < target;
        if creating && names.len() < max_live && (roll < 11 || names.is_empty()) {
            created += 1;
            let name = format!("svc-{created:04}");
            let w = random_service(&mut dice);
            let mut body = w.patch();
            without_nulls(&mut body);
            json_patch::merge(
                &mut body,
                &json!({"metadata": {"name": name, "namespace": NAMESPACE},
                        "spec": {"type": "LoadBalancer", "selector": {"app": name}}}),
            );
            let made = match serde_json::from_value::<Service>(body) {
                Ok(svc) => api.create(&Default::default(), &svc).await.ok(),
                Err(_) => None,
            };
            if let Some(made) = made {
                journal.record(&name, format!("created: {}", w.describe()), Some(&made));
                wanted.insert(name, w);
            }
        } else if creating && roll < 15 {
            if let Some(name) = pick(&mut dice)
                && let Ok(answer) = api.delete(&name, &DeleteParams::default()).await
            {
                journal.record(&name, "deleted", answer.left().as_ref());
                if let Some(w) = wanted.remove(&name)
                    && w.keep_floating_ip
                {
                    kept.insert(name);
                }
                deletes += 1;
            }
        } else if let Some(name) = pick(&mut dice) {
            let (w, what) = edit(&mut dice, &wanted[&name]);
            if let Ok(answer) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&w.patch()))
                .await
            {
                journal.record(&name, format!("{what} edited: {}", w.describe()), Some(&answer));
                wanted.insert(name, w);
                edits += 1;
            }
        }

        let now = Instant::now();
        if now >= next_sample {
            if let Some(n) = pending(&client, &cluster_name).await {
                most_pending = most_pending.max(n);
            }
            next_sample = now + Duration::from_secs(5);
        }
        if now >= next_kill {
            kills += 1;
            if kills.is_multiple_of(all_every) {
                // All replicas at once, while a load balancer is in Octavia and its status not.
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut seen = in_write_window(&client, &cluster, &cluster_name).await;
                while !seen && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    seen = in_write_window(&client, &cluster, &cluster_name).await;
                }
                for name in replicas.running.clone() {
                    replicas.kill(&mut cluster, &name).await;
                    outcome.fault("service-lb-controller SIGKILL");
                }
                if seen && in_write_window(&client, &cluster, &cluster_name).await {
                    outcome.fault("all replicas SIGKILLed between a cloud write and its status patch");
                }
                for _ in 0..REPLICAS {
                    replicas.start(&mut cluster);
                }
            } else {
                let victim = replicas.running[dice.below(replicas.running.len() as u64) as usize].clone();
                replicas.kill(&mut cluster, &victim).await;
                outcome.fault("service-lb-controller SIGKILL");
                replicas.start(&mut cluster);
            }
            next_kill = Instant::now() + dice.between(kill_every.0, kill_every.1);
        }
        if now >= next_gateway_kill {
            cluster.kill_gateway().await;
            outcome.fault("gateway SIGKILL");
            cluster
                .swap_gateway(&binary("cloud-gateway"), &gateway, &[])
                .await;
            next_gateway_kill = Instant::now() + gateway_every;
        }
        tokio::time::sleep(dice.between(pace.0, pace.1)).await;
    }
    let churn = started.elapsed();
    proxy.chaos(Chaos::default(), 0);
    let last_fault = Instant::now();
    // A load balancer the proxy made slow stays so a little longer; count from there.
    let converge = scale.pick(Duration::from_secs(180), Duration::from_secs(360));

    // Converged: every Service as wanted, nothing leaked, nothing missing.
    let converged = wait_until(&mut outcome, "every Service converged", converge, || {
        let (client, cluster, cluster_name, wanted, kept) =
            (&client, &cluster, &cluster_name, &wanted, &kept);
        async move {
            let done = match World::read(client, cluster, cluster_name).await {
                Some(world) => differences(&world, cluster_name, wanted, kept).all.is_empty(),
                None => false,
            };
            if !done {
                // A full read is six calls: spare the cloud's cores.
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            done.then_some(())
        }
    })
    .await;
    if converged.is_some() {
        outcome.converged_after = Some(last_fault.elapsed());
    }
    let work = syncs(&mut cluster, &replicas, &mut outcome);
    if converged.is_none() {
        match World::read(&client, &cluster, &cluster_name).await {
            Some(world) => {
                let found = differences(&world, &cluster_name, &wanted, &kept);
                outcome.leaked = found.leaked;
                outcome.missing = found.missing;
                for d in found.all.iter().take(20) {
                    outcome.violation(d.clone());
                }
                // The story of each Service found wrong, so that the run explains itself.
                for name in found.named.iter().take(20) {
                    let live = world.services.iter().find(|s| s.name_any() == *name);
                    let story = journal.explain(name, live, work.get(&format!("{NAMESPACE}/{name}")));
                    let objects = world.objects_of(&cluster_name, name);
                    outcome.violation(format!("story of {story}; in OpenStack: {objects}"));
                }
            }
            None => outcome.violation("OpenStack or the API server did not answer after the run"),
        }
    }

    // Each load balancer made once, even when the answer to its create was lost.
    let mut creates: BTreeMap<String, u32> = BTreeMap::new();
    for name in proxy.load_balancers_created() {
        *creates.entry(name).or_default() += 1;
    }
    for (name, n) in &creates {
        if *n > 1 {
            outcome.violation(format!("load balancer {name} created {n} times"));
        }
    }
    for overlap in overlaps(&work) {
        outcome.violation(overlap);
    }
    check_decoy(&client, &cluster, &decoy, &mut outcome).await;

    for (kind, n) in proxy.faults() {
        outcome.faults.insert(kind.to_owned(), n);
    }
    let fired = cloud_faults(&proxy);
    if fired < fault_floor {
        outcome.violation(format!(
            "the churn injected {fired} cloud faults in {:.0} s, fewer than the {fault_floor} a run \
             must (the test cloud too slow for the churn's give-up time)",
            churn.as_secs_f64()
        ));
    }
    outcome.note("services_created", created);
    outcome.note("edits", edits);
    outcome.note("deletes", deletes);
    outcome.note("live_at_end", wanted.len());
    outcome.note("churn_s", format!("{:.1}", churn.as_secs_f64()));
    outcome.note("writes_through_proxy", proxy.writes());
    outcome.note("load_balancers_created", creates.values().sum::<u32>());
    outcome.note("most_load_balancers_pending_at_once", most_pending);
    outcome.note(
        "octavia_sqlite_database_locked",
        sqlite_locked(cloud, "octavia").saturating_sub(locked_before[0]),
    );
    outcome.note(
        "neutron_sqlite_database_locked",
        sqlite_locked(cloud, "neutron").saturating_sub(locked_before[1]),
    );
    outcome.note("syncs", work.values().map(Vec::len).sum::<usize>());

    clean_up(&client, &cluster, &cluster_name, &decoy, &mut outcome).await;
    quotas.restore(&admin).await;
    cluster.stop().await;
    super::keep_logs(&cluster, &mut outcome, &dice);
    outcome
}

/// Who synced what, from the replicas' JSON logs.
fn syncs(cluster: &mut Cluster, replicas: &Replicas, outcome: &mut Outcome) -> BTreeMap<String, Vec<Work>> {
    let mut work: BTreeMap<String, Vec<Work>> = BTreeMap::new();
    for (name, killed) in &replicas.all {
        let log = cluster.proc_named(name).map(|p| p.log()).unwrap_or_default();
        match work_of(name, &log, *killed) {
            Ok(items) => {
                for (service, mut w) in items {
                    work.entry(service).or_default().append(&mut w);
                }
            }
            Err(e) => outcome.violation(e),
        }
    }
    work
}

/// The other cluster's load balancer untouched, and its Service told whose it is.
async fn check_decoy(client: &Client, cluster: &Cluster, decoy: &Value, outcome: &mut Outcome) {
    let path = format!(
        "/lbaas/loadbalancers/{}",
        decoy["id"].as_str().unwrap_or_default()
    );
    let now: Value = client
        .get(Api::LoadBalancer, &path)
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
}

/// Faults off: the Services deleted (their load balancers, floating IPs and groups with them,
/// which must go), then by hand what stays on purpose (the decoy, the kept floating IPs) and
/// anything leaked, so that the cloud is left as found.
async fn clean_up(
    client: &Client,
    cluster: &Cluster,
    cluster_name: &str,
    decoy: &Value,
    outcome: &mut Outcome,
) {
    let api = cluster.services(NAMESPACE);
    if let Ok(list) = api.list(&ListParams::default()).await {
        for s in list.items.iter().filter(|s| is_ours(&s.name_any())) {
            let _ = api.delete(&s.name_any(), &DeleteParams::default()).await;
        }
    }
    let deleted = wait_until(
        outcome,
        "the Services' load balancers deleted",
        Duration::from_secs(240),
        || async move {
            let world = World::read(client, cluster, cluster_name).await?;
            let done = world.lbs.len() <= 1 && world.services.is_empty();
            if !done {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            done.then_some(())
        },
    )
    .await;
    // Which are left, and in what state: one Octavia holds in PENDING_DELETE is a delete the
    // controller asked for and Octavia's worker never finished (2026-11-28: a flow whose
    // thread hung; its Service kept its finalizer, as it must), not one nobody asked for.
    if deleted.is_none()
        && let Some(world) = World::read(client, cluster, cluster_name).await
    {
        for lb in world.lbs.iter().filter(|lb| lb["id"] != decoy["id"]) {
            outcome.violation(format!(
                "left after the clean-up: load balancer {} ({}) {}",
                lb["name"].as_str().unwrap_or_default(),
                lb["id"].as_str().unwrap_or_default(),
                lb["provisioning_status"].as_str().unwrap_or("in no status"),
            ));
        }
    }
    let decoy_path = format!(
        "/lbaas/loadbalancers/{}",
        decoy["id"].as_str().unwrap_or_default()
    );
    let _ = client
        .delete(Api::LoadBalancer, &decoy_path)
        .query(&[("cascade", "true")])
        .send_empty()
        .await;
    if let Some(world) = World::read(client, cluster, cluster_name).await {
        for lb in world.lbs.iter().filter(|lb| lb["id"] != decoy["id"]) {
            let path = format!("/lbaas/loadbalancers/{}", lb["id"].as_str().unwrap_or_default());
            let _ = client
                .delete(Api::LoadBalancer, &path)
                .query(&[("cascade", "true")])
                .send_empty()
                .await;
        }
        for fip in &world.fips {
            let path = format!("/floatingips/{}", fip["id"].as_str().unwrap_or_default());
            let _ = client.delete(Api::Network, &path).send_empty().await;
        }
        for group in &world.groups {
            let path = format!("/security-groups/{}", group["id"].as_str().unwrap_or_default());
            let _ = client.delete(Api::Network, &path).send_empty().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(lbs: Value, listeners: Value, fips: Value, groups: Value, services: Value) -> World {
        let arr = |v: Value| v.as_array().cloned().unwrap_or_default();
        World {
            lbs: arr(lbs),
            listeners: arr(listeners),
            fips: arr(fips),
            groups: arr(groups),
            services: serde_json::from_value(services).unwrap(),
        }
    }

    fn service(name: &str, node_ports: &[u16], ingress: Option<&str>) -> Value {
        let ports: Vec<Value> = node_ports
            .iter()
            .enumerate()
            .map(|(i, np)| json!({"port": 80 + i, "nodePort": np}))
            .collect();
        json!({"metadata": {"name": name, "uid": format!("u-{name}")},
               "spec": {"type": "LoadBalancer", "ports": ports},
               "status": {"loadBalancer": {"ingress": ingress.map(|ip| vec![json!({"ip": ip})]).unwrap_or_default()}}})
    }

    fn wanted(ports: &[u16]) -> Wanted {
        Wanted {
            ports: ports.to_vec(),
            connection_limit: None,
            source_ranges: Vec::new(),
            keep_floating_ip: false,
        }
    }

    const C: &str = "c1";

    /// One converged Service `svc-1`: its load balancer, listener, floating IP and group.
    fn converged() -> (Value, Value, Value, Value) {
        (
            json!([{"id": "lb1", "name": "kube_service_c1_default_svc-1", "provisioning_status": "ACTIVE", "vip_port_id": "vip1"}]),
            json!([{"id": "l1", "protocol_port": 80, "connection_limit": -1, "allowed_cidrs": ["0.0.0.0/0"], "loadbalancers": [{"id": "lb1"}]}]),
            json!([{"id": "f1", "port_id": "vip1", "floating_ip_address": "172.24.4.9",
                    "description": "Floating IP for Kubernetes external service default/svc-1 from cluster c1"}]),
            json!([{"id": "g1", "name": "lb-sg-u-svc-1-default-svc-1",
                    "description": "Security Group for default/svc-1 Service LoadBalancer in cluster c1",
                    "security_group_rules": [{"direction": "egress"}, {"direction": "ingress", "port_range_min": 30001}]}]),
        )
    }

    #[test]
    fn a_converged_service_has_no_differences() {
        let (lbs, listeners, fips, groups) = converged();
        let w = world(
            lbs,
            listeners,
            fips,
            groups,
            json!([service("svc-1", &[30001], Some("172.24.4.9"))]),
        );
        let want = BTreeMap::from([("svc-1".to_owned(), wanted(&[80]))]);
        let d = differences(&w, C, &want, &BTreeSet::new());
        assert!(d.all.is_empty(), "{:?}", d.all);
    }

    #[test]
    fn each_difference_is_found_and_counted() {
        let (lbs, listeners, fips, groups) = converged();
        let mut want = BTreeMap::from([("svc-1".to_owned(), wanted(&[80]))]);
        // Wrong status, a connection limit not applied, an extra rule.
        want.get_mut("svc-1").unwrap().connection_limit = Some(200);
        let mut g = groups.clone();
        g[0]["security_group_rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"direction": "ingress", "port_range_min": 30999}));
        let w = world(
            lbs.clone(),
            listeners.clone(),
            fips.clone(),
            g,
            json!([service("svc-1", &[30001], None)]),
        );
        let d = differences(&w, C, &want, &BTreeSet::new());
        assert_eq!((d.leaked, d.missing), (1, 0), "{:?}", d.all);
        assert_eq!(d.all.len(), 3, "{:?}", d.all);
        assert_eq!(d.named, ["svc-1"]);

        // The Service deleted: its load balancer, floating IP and group leaked, unless its
        // floating IP is kept (detached).
        let w = world(
            lbs.clone(),
            listeners.clone(),
            fips.clone(),
            groups.clone(),
            json!([]),
        );
        let d = differences(&w, C, &BTreeMap::new(), &BTreeSet::new());
        assert_eq!(d.leaked, 3, "{:?}", d.all);
        let mut detached = fips.clone();
        detached[0]["port_id"] = Value::Null;
        let w = world(json!([]), json!([]), detached.clone(), json!([]), json!([]));
        let kept = BTreeSet::from(["svc-1".to_owned()]);
        assert!(differences(&w, C, &BTreeMap::new(), &kept).all.is_empty());
        assert_eq!(differences(&w, C, &BTreeMap::new(), &BTreeSet::new()).leaked, 1);

        // Nothing in OpenStack for a live Service: missing.
        let w = world(
            json!([]),
            json!([]),
            json!([]),
            json!([]),
            json!([service("svc-1", &[30001], None)]),
        );
        let d = differences(&w, C, &want, &BTreeSet::new());
        assert_eq!((d.leaked, d.missing), (0, 1), "{:?}", d.all);
    }

    #[test]
    fn an_edit_changes_one_thing_and_its_patch_removes_what_is_unset() {
        let mut dice = Dice::new(7);
        for _ in 0..200 {
            let w = random_service(&mut dice);
            assert!(!w.ports.is_empty());
            let (e, what) = edit(&mut dice, &w);
            assert!(
                !e.ports.is_empty() && e.ports.windows(2).all(|p| p[0] < p[1]),
                "{e:?}"
            );
            let changed = [
                e.ports != w.ports,
                e.connection_limit != w.connection_limit,
                e.source_ranges != w.source_ranges,
                e.keep_floating_ip != w.keep_floating_ip,
            ];
            assert!(
                changed.iter().filter(|c| **c).count() <= 1,
                "{what}: {w:?} → {e:?}"
            );
        }
        let mut patch = wanted(&[80]).patch();
        assert_eq!(patch["metadata"]["annotations"][CONNECTION_LIMIT], Value::Null);
        assert!(
            patch["spec"]
                .as_object()
                .unwrap()
                .contains_key("loadBalancerSourceRanges")
        );
        assert_eq!(patch["spec"]["ports"][0]["port"], 80);
        without_nulls(&mut patch);
        assert!(
            !patch["spec"]
                .as_object()
                .unwrap()
                .contains_key("loadBalancerSourceRanges")
        );
        assert_eq!(patch["metadata"]["annotations"], json!({}));
        serde_json::from_value::<Service>(patch).expect("a Service");
    }
}
