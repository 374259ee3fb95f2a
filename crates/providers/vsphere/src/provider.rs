//! The vSphere provider: InstancesV2 for batches of nodes over one SOAP session per vCenter.
//! Load balancers and routes are not offered (CPI's need NSX-T and are alpha), so the gateway
//! answers UNIMPLEMENTED for them and their controllers stay idle.
//!
//! A batch costs, with every VM already seen: one RetrievePropertiesEx per vCenter. A node not
//! seen yet adds its searches (FindByUuid, then with the byte-swapped UUID; or
//! FindAllByDnsName, then FindByIp), one per vCenter and datacenter scope. The VM found is
//! remembered by its key, so the next lookup reads it directly; a remembered VM that vCenter
//! no longer has (ManagedObjectNotFound) is searched for again before anything is concluded.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use provider::{
    InstanceInfo, Instances, LoadBalancers, NodeRef, Provider, ProviderError, ProviderLimits, Routes,
};
use tokio::sync::OnceCell;

use crate::{
    addresses::Selection,
    config::Config,
    nodes::{self, Key, Rules, Search},
    provider_id,
    soap::{Client, Moref, SoapError, methods::ObjectContent},
    tagging::Tagging,
    zones::{self, Placement, ZoneTags},
};

/// Most nodes per batch (one RetrievePropertiesEx carries them all).
pub const MAX_BATCH: usize = 200;

struct VCenterState {
    client: Arc<Client>,
    /// The datacenters searched: `[None]` (the whole inventory) when none are configured.
    scopes: OnceCell<Vec<Option<Moref>>>,
    /// With `[Labels]`: the zone and region tags.
    zones: Option<ZoneTags>,
}

/// The provider.
pub struct VsphereProvider {
    vcenters: Vec<VCenterState>,
    selection: Selection,
    seen: Mutex<HashMap<Key, (usize, Moref)>>,
}

impl VsphereProvider {
    /// The provider for `config`; no call is made until the first lookup (as CPI: bad
    /// credentials do not stop start-up, they fail lookups without deleting anything).
    pub fn new(config: &Config) -> Result<Arc<Self>, String> {
        let secrets: Option<PathBuf> = config.secrets_directory.clone();
        let labels = config.labels.zone.as_deref().zip(config.labels.region.as_deref());
        let vcenters = config
            .vcenters
            .iter()
            .map(|vc| {
                let client = Client::new(vc, secrets.clone())?;
                Ok(VCenterState {
                    zones: labels
                        .map(|(zone, region)| ZoneTags::new(Tagging::new(client.clone()), zone, region)),
                    client,
                    scopes: OnceCell::new(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Arc::new(Self {
            vcenters,
            selection: config.nodes.clone(),
            seen: Mutex::new(HashMap::new()),
        }))
    }

    /// The SOAP clients, in config order (their call and login counts).
    pub fn clients(&self) -> impl Iterator<Item = &Arc<Client>> {
        self.vcenters.iter().map(|v| &v.client)
    }

    /// The tagging REST clients, with `[Labels]` (their call and login counts).
    pub fn tagging(&self) -> impl Iterator<Item = &Tagging> {
        self.vcenters
            .iter()
            .filter_map(|v| Some(v.zones.as_ref()?.tagging()))
    }

    async fn scopes(&self, vc: usize) -> Result<&Vec<Option<Moref>>, SoapError> {
        let state = &self.vcenters[vc];
        state
            .scopes
            .get_or_try_init(|| async {
                let wanted = &state.client.vcenter().datacenters;
                if wanted.is_empty() {
                    return Ok(vec![None]);
                }
                let all = state.client.datacenters().await?;
                wanted
                    .iter()
                    .map(|w| {
                        let by_moref = w.strip_prefix("Datacenter:");
                        let last = w.rsplit('/').next().unwrap_or(w);
                        all.iter()
                            .find(|(m, name)| by_moref == Some(m.value.as_str()) || name == last)
                            .map(|(m, _)| Some(m.clone()))
                            .ok_or_else(|| SoapError::Fault {
                                kind: "NotFound".into(),
                                message: format!(
                                    "datacenter {w:?} is not in vCenter {}",
                                    state.client.vcenter().server
                                ),
                                object: None,
                            })
                    })
                    .collect()
            })
            .await
    }

    /// Every vCenter and scope searched with `find`; the first hit wins; "absent" only when all
    /// answered.
    async fn search_all<'a, F, Fut>(&'a self, find: F) -> Search
    where
        F: Fn(&'a Client, Option<&'a Moref>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Moref>, SoapError>>,
    {
        let mut failed = None;
        let mut hits: Vec<(usize, Moref)> = Vec::new();
        for (i, vc) in self.vcenters.iter().enumerate() {
            let scopes = match self.scopes(i).await {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            for scope in scopes {
                match find(&vc.client, scope.as_ref()).await {
                    Ok(found) => hits.extend(found.into_iter().map(|m| (i, m))),
                    Err(e) => failed = Some(e),
                }
            }
        }
        hits.dedup();
        match (hits.len(), failed) {
            (1, _) => {
                let (i, m) = hits.remove(0);
                Search::Found(i, m)
            }
            (0, Some(e)) => Search::Failed(e),
            (0, None) => Search::Absent,
            (n, _) => Search::Ambiguous(n),
        }
    }

    async fn search(&self, key: &Key) -> Search {
        match key {
            Key::Uuid(uuid) => {
                let first = self
                    .search_all(
                        |c, dc| async move { Ok(c.find_by_uuid(dc, uuid).await?.into_iter().collect()) },
                    )
                    .await;
                if first != Search::Absent {
                    return first;
                }
                let swapped = provider_id::swap_bytes(uuid);
                let swapped = &swapped;
                self.search_all(|c, dc| async move {
                    Ok(c.find_by_uuid(dc, swapped).await?.into_iter().collect())
                })
                .await
            }
            Key::Name(name) => {
                let by_name = self.search_all(|c, dc| c.find_all_by_dns_name(dc, name)).await;
                if by_name != Search::Absent || name.parse::<IpAddr>().is_err() {
                    return by_name;
                }
                self.search_all(
                    |c, dc| async move { Ok(c.find_by_ip(dc, name).await?.into_iter().collect()) },
                )
                .await
            }
        }
    }

    /// One RetrievePropertiesEx per vCenter for the VMs in `located`.
    async fn read(
        &self,
        located: &[(usize, Moref)],
    ) -> BTreeMap<usize, Result<(HashMap<Moref, ObjectContent>, Vec<Moref>), SoapError>> {
        let mut by_vc: BTreeMap<usize, Vec<Moref>> = BTreeMap::new();
        for (vc, m) in located {
            let list = by_vc.entry(*vc).or_default();
            if !list.contains(m) {
                list.push(m.clone());
            }
        }
        let mut out = BTreeMap::new();
        for (vc, refs) in by_vc {
            let paths: Vec<&str> = if self.vcenters[vc].zones.is_some() {
                nodes::PROPERTIES
                    .iter()
                    .chain(nodes::PLACEMENT)
                    .copied()
                    .collect()
            } else {
                nodes::PROPERTIES.to_vec()
            };
            let answer = self.vcenters[vc]
                .client
                .retrieve("VirtualMachine", &refs, &paths)
                .await
                .map(|(objects, gone)| {
                    let map = objects
                        .into_iter()
                        .filter_map(|o| Some((o.obj.clone()?, o)))
                        .collect();
                    (map, gone)
                });
            out.insert(vc, answer);
        }
        out
    }

    /// Each VM's zone and region in `found` (of vCenter `vc`, with `[Labels]`): the tags (read
    /// once per period) and the ancestors of the VMs' hosts, pools and folders (one call).
    async fn placements(&self, vc: usize, found: &HashMap<Moref, ObjectContent>) -> Option<Placed> {
        let tags = self.vcenters[vc].zones.as_ref()?;
        Some(
            async {
                let starts: HashMap<&Moref, Vec<Moref>> = found
                    .iter()
                    .map(|(vm, content)| {
                        let mut starts: Vec<Moref> = nodes::PLACEMENT[..2]
                            .iter()
                            .filter_map(|path| Moref::from(content.prop(path)?))
                            .collect();
                        starts.push(vm.clone());
                        (vm, starts)
                    })
                    .collect();
                let mut objects: Vec<Moref> = starts.values().flatten().cloned().collect();
                objects.sort();
                objects.dedup();
                let index = tags.index().await?;
                let parents = self.vcenters[vc].client.parents(&objects).await?;
                Ok(starts
                    .into_iter()
                    .map(|(vm, starts)| {
                        let starts: Vec<&Moref> = starts.iter().collect();
                        (
                            vm.clone(),
                            zones::placement(&starts, &parents, &index, tags.categories()),
                        )
                    })
                    .collect())
            }
            .await,
        )
    }

    fn rules(&self, vc: usize) -> Rules<'_> {
        Rules {
            selection: &self.selection,
            families: &self.vcenters[vc].client.vcenter().ip_families,
        }
    }
}

/// Where a node stands while a batch is answered.
enum Step {
    Done(Result<InstanceInfo, ProviderError>),
    /// Located (from memory when `remembered`).
    At {
        key: Key,
        vc: usize,
        vm: Moref,
        remembered: bool,
    },
}

#[async_trait]
impl Instances for VsphereProvider {
    async fn lookup_instances(
        &self,
        batch: &[NodeRef],
    ) -> provider::Result<Vec<Result<InstanceInfo, ProviderError>>> {
        let mut steps = Vec::with_capacity(batch.len());
        for node in batch {
            let key = match nodes::key(&node.name, &node.provider_id) {
                Ok(k) => k,
                Err(e) => {
                    steps.push(Step::Done(Err(e)));
                    continue;
                }
            };
            let seen = self.seen.lock().expect("seen").get(&key).cloned();
            steps.push(match seen {
                Some((vc, vm)) => Step::At {
                    key,
                    vc,
                    vm,
                    remembered: true,
                },
                None => match self.search(&key).await {
                    Search::Found(vc, vm) => Step::At {
                        key,
                        vc,
                        vm,
                        remembered: false,
                    },
                    other => Step::Done(Err(nodes::not_found(&key, &other))),
                },
            });
        }
        // Two rounds at most: a remembered VM that is gone is searched for and read once more.
        for _round in 0..2 {
            let located: Vec<(usize, Moref)> = steps
                .iter()
                .filter_map(|s| match s {
                    Step::At { vc, vm, .. } => Some((*vc, vm.clone())),
                    Step::Done(_) => None,
                })
                .collect();
            if located.is_empty() {
                break;
            }
            let answers = self.read(&located).await;
            let mut placed = BTreeMap::new();
            for (vc, answer) in &answers {
                if let Ok((found, _)) = answer
                    && let Some(placements) = self.placements(*vc, found).await
                {
                    placed.insert(*vc, placements);
                }
            }
            for (step, node) in steps.iter_mut().zip(batch) {
                let Step::At {
                    key,
                    vc,
                    vm,
                    remembered,
                } = step
                else {
                    continue;
                };
                let next = match &answers[vc] {
                    Err(e) => Step::Done(Err(nodes::unknown(e))),
                    Ok((found, _)) if found.contains_key(vm) => {
                        let answer = nodes::instance(&node.provider_id, &found[vm], self.rules(*vc))
                            .and_then(|info| placed_in(info, placed.get(vc), vm));
                        self.seen
                            .lock()
                            .expect("seen")
                            .insert(key.clone(), (*vc, vm.clone()));
                        Step::Done(answer)
                    }
                    Ok(_) if *remembered => {
                        // The VM remembered is gone: search again before concluding anything.
                        self.seen.lock().expect("seen").remove(key);
                        match self.search(key).await {
                            Search::Found(vc, vm) => Step::At {
                                key: key.clone(),
                                vc,
                                vm,
                                remembered: false,
                            },
                            other => Step::Done(Err(nodes::not_found(key, &other))),
                        }
                    }
                    Ok(_) => Step::Done(Err(ProviderError::Unavailable(format!(
                        "VM {} was found and then could not be read (deleted meanwhile?)",
                        vm.value
                    )))),
                };
                *step = next;
            }
        }
        Ok(steps
            .into_iter()
            .map(|s| match s {
                Step::Done(answer) => answer,
                Step::At { vm, .. } => {
                    Err(ProviderError::Unavailable(format!("VM {} kept moving", vm.value)))
                }
            })
            .collect())
    }
}

/// A batch's zones and regions by VM, or why none could be read.
type Placed = Result<HashMap<Moref, Result<Placement, String>>, SoapError>;

/// `info` with its zone and region, when `[Labels]` asks for them: a node whose zone cannot be
/// found is not answered (as CPI: it stays uninitialized, and is asked about again), never
/// answered without its zone.
fn placed_in(
    mut info: InstanceInfo,
    placed: Option<&Placed>,
    vm: &Moref,
) -> Result<InstanceInfo, ProviderError> {
    let Some(placed) = placed else {
        return Ok(info);
    };
    let placement = match placed {
        Err(e) => return Err(nodes::unknown(e)),
        Ok(by_vm) => by_vm
            .get(vm)
            .cloned()
            .unwrap_or_else(|| Err(format!("VM {} was not placed", vm.value))),
    };
    let placement = placement.map_err(ProviderError::Unavailable)?;
    info.metadata.zone = placement.zone;
    info.metadata.region = placement.region;
    Ok(info)
}

impl Provider for VsphereProvider {
    fn name(&self) -> &str {
        "vsphere"
    }

    fn limits(&self) -> ProviderLimits {
        ProviderLimits {
            max_instance_batch: MAX_BATCH,
        }
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }

    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        None
    }

    fn routes(&self) -> Option<&dyn Routes> {
        None
    }
}
