//! The vSphere provider: InstancesV2 for batches of nodes over one SOAP session per vCenter.
//! Load balancers and routes are not offered (CPI's need NSX-T and are alpha), so the gateway
//! answers UNIMPLEMENTED for them and their controllers stay idle.
//!
//! A batch with a node not in the snapshot kept costs one read of every VM per vCenter
//! ([`crate::inventory`]: through ContainerViews made once per session, made again when vCenter
//! forgot them), which also answers for the VMs in it for [`REUSE`]: the batches of a burst of
//! joining nodes cost that one read together. A batch whose every node is in the snapshot,
//! once that is older, costs one RetrievePropertiesEx of its VMs per vCenter. With `[Labels]`,
//! the parents of hosts, pools and folders not read in the tags' period are read in one more
//! call (none once the clusters' are known), and the tags once per period
//! ([`crate::zones`]). CPI makes about 9 SOAP and 10 REST calls per node instead (reference
//! §9).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Instant,
};

use async_trait::async_trait;
use provider::{
    InstanceInfo, Instances, LoadBalancers, NodeRef, Provider, ProviderError, ProviderLimits, Routes,
};
use tokio::sync::OnceCell;

use crate::{
    addresses::Selection,
    config::Config,
    inventory::{self, Answer, Snapshot},
    nodes::{self, Key, Rules, Search},
    soap::{Client, Moref, SoapError, methods::ObjectContent},
    tagging::Tagging,
    zones::{self, Placement, ZoneTags},
};

/// Most nodes per batch (one RetrievePropertiesEx carries them all).
pub const MAX_BATCH: usize = 200;

/// How long a read of every VM answers, once each, for the VMs in it without another call:
/// the batches a burst of joining nodes arrives in (the gateway sends one as soon as the last
/// is answered) cost one read together. Half the gateway's default answer cache (10 s), so no
/// answer is older than the gateway would serve anyway; a VM asked about again is read again
/// (its power state may just have changed).
pub const REUSE: std::time::Duration = std::time::Duration::from_secs(5);

struct VCenterState {
    client: Arc<Client>,
    /// The datacenters searched: `[None]` (the whole inventory) when none are configured.
    scopes: OnceCell<Vec<Option<Moref>>>,
    /// With `[Labels]`: the zone and region tags.
    zones: Option<ZoneTags>,
    /// The ContainerViews over the VMs of each scope (empty until made; made again when
    /// vCenter forgot them with the session).
    views: tokio::sync::Mutex<Vec<Moref>>,
    /// The last snapshot of every VM read.
    snapshot: Mutex<Option<Arc<Snapshot>>>,
    /// The properties of the VMs that last read holds, when it was made, until each VM is
    /// answered from them once (see [`REUSE`]).
    unanswered: Mutex<Option<(Instant, HashMap<Moref, ObjectContent>)>>,
    /// Parents of the hosts, pools and folders VMs are placed in, read again after
    /// [`zones::REFRESH`] as the tags are.
    parents: tokio::sync::Mutex<Parents>,
}

#[derive(Default)]
struct Parents {
    read_at: Option<Instant>,
    edges: HashMap<Moref, Moref>,
    /// Objects whose chain up to the root is in `edges`.
    complete: HashSet<Moref>,
}

/// The provider.
pub struct VsphereProvider {
    vcenters: Vec<VCenterState>,
    selection: Selection,
}

/// The identity snapshots read for one batch (at most once per batch).
type Fresh = Option<Vec<Result<Arc<Snapshot>, SoapError>>>;

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
                    views: tokio::sync::Mutex::default(),
                    snapshot: Mutex::default(),
                    unanswered: Mutex::default(),
                    parents: tokio::sync::Mutex::default(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Arc::new(Self {
            vcenters,
            selection: config.nodes.clone(),
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

    /// Ends the SOAP and REST sessions (the gateway's shutdown), so that they do not count
    /// against vCenter's session limit until they time out (CAPV #1552, #1818).
    pub async fn logout(&self) {
        for vc in &self.vcenters {
            if let Some(zones) = &vc.zones {
                zones.tagging().logout().await;
            }
            vc.client.logout().await;
        }
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

    /// The VM views of vCenter `vc`, made when there are none.
    async fn views(&self, vc: usize) -> Result<Vec<Moref>, SoapError> {
        let state = &self.vcenters[vc];
        let mut views = state.views.lock().await;
        if views.is_empty() {
            let scopes = self.scopes(vc).await?;
            let root = state.client.content().await?.root_folder.clone();
            let mut made = Vec::with_capacity(scopes.len());
            for scope in scopes {
                made.push(
                    state
                        .client
                        .create_vm_view(scope.as_ref().unwrap_or(&root))
                        .await?,
                );
            }
            *views = made;
        }
        Ok(views.clone())
    }

    /// Every VM's identity in vCenter `vc`, read now (and kept for later batches). A view
    /// vCenter forgot (ManagedObjectNotFound: its session ended) is made again once.
    async fn read_snapshot(&self, vc: usize) -> Result<Arc<Snapshot>, SoapError> {
        let state = &self.vcenters[vc];
        let mut again = true;
        loop {
            let views = self.views(vc).await?;
            match state.client.retrieve_views(&views, &self.paths(vc)).await {
                Ok(objects) => {
                    let snapshot = Arc::new(Snapshot::new(&objects));
                    *state.snapshot.lock().expect("snapshot") = Some(snapshot.clone());
                    let contents = objects
                        .into_iter()
                        .filter_map(|o| Some((o.obj.clone()?, o)))
                        .collect();
                    *state.unanswered.lock().expect("unanswered") = Some((Instant::now(), contents));
                    return Ok(snapshot);
                }
                Err(SoapError::Fault { kind, object, .. })
                    if again
                        && kind == "ManagedObjectNotFound"
                        && object.as_ref().is_none_or(|o| views.contains(o)) =>
                {
                    tracing::info!(server = %state.client.vcenter().server, "vCenter forgot the VM view; making it again");
                    state.views.lock().await.clear();
                    again = false;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The snapshots of this batch, read on first need.
    async fn fresh<'a>(&self, fresh: &'a mut Fresh) -> &'a Vec<Result<Arc<Snapshot>, SoapError>> {
        if fresh.is_none() {
            let mut read = Vec::with_capacity(self.vcenters.len());
            for vc in 0..self.vcenters.len() {
                read.push(self.read_snapshot(vc).await);
            }
            *fresh = Some(read);
        }
        fresh.as_ref().expect("read above")
    }

    /// Where `key` is by this batch's snapshots.
    async fn search(&self, key: &Key, fresh: &mut Fresh) -> Search {
        let answers: Vec<Answer> = self
            .fresh(fresh)
            .await
            .iter()
            .map(|read| match read {
                Ok(s) => Answer::Read {
                    found: s.find(key),
                    unidentified: s.unidentified.len(),
                },
                Err(e) => Answer::Failed(e.clone()),
            })
            .collect();
        inventory::decide(key, &answers)
    }

    /// Where `key` is by the snapshots kept from earlier batches, when exactly one VM matches.
    fn kept(&self, key: &Key) -> Option<(usize, Moref)> {
        let mut hits = self.vcenters.iter().enumerate().flat_map(|(vc, state)| {
            let kept = state.snapshot.lock().expect("snapshot").clone();
            kept.map(|s| s.find(key))
                .unwrap_or_default()
                .into_iter()
                .map(move |vm| (vc, vm))
        });
        let first = hits.next()?;
        hits.next().is_none().then_some(first)
    }

    /// The properties read of each VM: [`nodes::PROPERTIES`], and [`nodes::PLACEMENT`] with
    /// `[Labels]`.
    fn paths(&self, vc: usize) -> Vec<&'static str> {
        if self.vcenters[vc].zones.is_some() {
            nodes::PROPERTIES
                .iter()
                .chain(nodes::PLACEMENT)
                .copied()
                .collect()
        } else {
            nodes::PROPERTIES.to_vec()
        }
    }

    /// The VMs in `located`, per vCenter: from the last read of every VM when it was made less
    /// than [`REUSE`] ago and none of them was answered from it yet, else in one
    /// RetrievePropertiesEx (whose ManagedObjectNotFound tells a VM gone).
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
            if let Some(found) = self.unanswered(vc, &refs) {
                out.insert(vc, Ok((found, Vec::new())));
                continue;
            }
            let paths = self.paths(vc);
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

    /// The properties of every VM of `refs` from the last read of every VM, taken out of it,
    /// when it is recent and holds them all.
    fn unanswered(&self, vc: usize, refs: &[Moref]) -> Option<HashMap<Moref, ObjectContent>> {
        let mut unanswered = self.vcenters[vc].unanswered.lock().expect("unanswered");
        let (at, contents) = unanswered.as_mut()?;
        if at.elapsed() >= REUSE || !refs.iter().all(|r| contents.contains_key(r)) {
            return None;
        }
        Some(
            refs.iter()
                .filter_map(|r| Some((r.clone(), contents.remove(r)?)))
                .collect(),
        )
    }

    /// Each VM's zone and region in `found` (of vCenter `vc`, with `[Labels]`): the tags (read
    /// once per period) and the ancestors of the VMs' hosts, pools and folders (read once per
    /// period too, in one call for those not read yet).
    async fn placements(&self, vc: usize, found: &HashMap<Moref, ObjectContent>) -> Option<Placed> {
        let tags = self.vcenters[vc].zones.as_ref()?;
        Some(
            async {
                // CPI's order: the host, the resource pool, the VM (whose own parent is read
                // with it).
                let mut vm_parents: HashMap<Moref, Moref> = HashMap::new();
                let starts: HashMap<&Moref, Vec<Moref>> = found
                    .iter()
                    .map(|(vm, content)| {
                        let mut starts: Vec<Moref> = nodes::PLACEMENT[..2]
                            .iter()
                            .filter_map(|path| Moref::from(content.prop(path)?))
                            .collect();
                        if let Some(parent) = content.prop("parent").and_then(Moref::from) {
                            vm_parents.insert(vm.clone(), parent);
                        }
                        starts.push(vm.clone());
                        (vm, starts)
                    })
                    .collect();
                let mut above: Vec<Moref> = starts
                    .values()
                    .flat_map(|s| s[..s.len() - 1].iter().cloned())
                    .chain(vm_parents.values().cloned())
                    .collect();
                above.sort();
                above.dedup();
                let index = tags.index().await?;
                let mut parents = self.parents(vc, &above).await?;
                parents.extend(vm_parents);
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

    /// The parents up to the root of `objects` (and of every object read before in this
    /// period): one call for those not read yet in the period, none when all were.
    async fn parents(&self, vc: usize, objects: &[Moref]) -> Result<HashMap<Moref, Moref>, SoapError> {
        let mut cache = self.vcenters[vc].parents.lock().await;
        if cache.read_at.is_some_and(|at| at.elapsed() >= zones::REFRESH) {
            *cache = Parents::default();
        }
        let missing: Vec<Moref> = objects
            .iter()
            .filter(|o| !cache.complete.contains(*o))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let read = self.vcenters[vc].client.parents(&missing).await?;
            cache.complete.extend(read.keys().cloned());
            cache.complete.extend(missing);
            cache.edges.extend(read);
            cache.read_at.get_or_insert_with(Instant::now);
        }
        Ok(cache.edges.clone())
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
        let mut fresh: Fresh = None;
        let mut steps = Vec::with_capacity(batch.len());
        for node in batch {
            let key = match nodes::key(&node.name, &node.provider_id) {
                Ok(k) => k,
                Err(e) => {
                    steps.push(Step::Done(Err(e)));
                    continue;
                }
            };
            steps.push(match self.kept(&key) {
                Some((vc, vm)) => Step::At {
                    key,
                    vc,
                    vm,
                    remembered: true,
                },
                None => match self.search(&key, &mut fresh).await {
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
        // Two rounds at most: a remembered VM that is gone, or is no longer the node's, is
        // searched for in this batch's snapshot and read once more.
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
                let read = match &answers[vc] {
                    Err(e) => {
                        *step = Step::Done(Err(nodes::unknown(e)));
                        continue;
                    }
                    Ok((found, _)) => found.get(vm),
                };
                let next = match read {
                    Some(content) if !*remembered || inventory::still_matches(key, content) => {
                        let answer = nodes::instance(&node.provider_id, content, self.rules(*vc))
                            .and_then(|info| placed_in(info, placed.get(vc), vm));
                        Step::Done(answer)
                    }
                    // Remembered, and gone or no longer the node's: search again before
                    // concluding anything.
                    _ if *remembered => match self.search(key, &mut fresh).await {
                        Search::Found(at, found) if at == *vc && found == *vm => {
                            Step::Done(Err(ProviderError::Unavailable(format!(
                                "VM {} changed while it was read; asked again later",
                                vm.value
                            ))))
                        }
                        Search::Found(vc, vm) => Step::At {
                            key: key.clone(),
                            vc,
                            vm,
                            remembered: false,
                        },
                        other => Step::Done(Err(nodes::not_found(key, &other))),
                    },
                    _ => Step::Done(Err(ProviderError::Unavailable(format!(
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

    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.logout())
    }
}
