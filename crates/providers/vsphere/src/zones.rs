//! Zones and regions from vSphere tags, decided as CPI's `LookupZoneByMoref` decides them
//! (reference §6): `[Labels] zone` and `region` name tag categories; a node's zone and region
//! are the names of the tags of those categories found walking up from its VM's host (then its
//! resource pool, then the VM itself): host, cluster, folders, datacenter. A tag met higher up
//! replaces one met lower until both a zone and a region are found (so with zone tags on a host
//! and on its cluster and the region on the datacenter, the cluster's zone wins, as in CPI).
//!
//! What differs, on purpose: CPI logs in to the REST API, reads every tag attached to every
//! object on the way (two more calls per tag) and logs out, for every node, up to three times.
//! Here the tags of the two categories and the objects they are attached to are read once per
//! [`REFRESH`] (one session kept), and each node's walk is made from memory, over its
//! ancestors read with its VM in the batch's SOAP calls.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::{
    soap::{Moref, SoapError},
    tagging::Tagging,
};

/// How long the zone and region tags read are used before they are read again. A tag attached
/// meanwhile reaches nodes initialized after the next read (CPI applies labels only at
/// initialization anyway, #435).
pub const REFRESH: Duration = Duration::from_secs(300);

/// The zone and region tag names attached to objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagIndex {
    zones: HashMap<Moref, String>,
    regions: HashMap<Moref, String>,
}

impl TagIndex {
    /// The index of what each tag (`(name, is_zone)`) is attached to. An object with two tags of
    /// one category keeps the last by name (CPI keeps the last vCenter lists).
    pub fn new(attached: impl IntoIterator<Item = (String, bool, Vec<Moref>)>) -> Self {
        let mut index = Self::default();
        let mut all: Vec<(String, bool, Vec<Moref>)> = attached.into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, is_zone, objects) in all {
            let map = if is_zone {
                &mut index.zones
            } else {
                &mut index.regions
            };
            for object in objects {
                map.insert(object, name.clone());
            }
        }
        index
    }
}

/// A node's zone and region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub zone: String,
    pub region: String,
}

/// The walk up from `start` through `parents`: CPI's `LookupZoneByMoref`. An error names what
/// was not found, as CPI's does.
pub fn walk(
    start: &Moref,
    parents: &HashMap<Moref, Moref>,
    index: &TagIndex,
    categories: (&str, &str),
) -> Result<Placement, String> {
    let (zone_category, region_category) = categories;
    let (mut zone, mut region) = (String::new(), String::new());
    let mut at = Some(start);
    let mut steps = 0;
    while let Some(object) = at {
        if let Some(z) = index.zones.get(object) {
            zone.clone_from(z);
        }
        if let Some(r) = index.regions.get(object) {
            region.clone_from(r);
        }
        if !zone.is_empty() && !region.is_empty() {
            return Ok(Placement { zone, region });
        }
        // A cycle cannot happen in vSphere's inventory; the bound keeps a bad answer harmless.
        steps += 1;
        at = parents.get(object).filter(|_| steps < 64);
    }
    if region.is_empty() {
        return Err(format!(
            "vSphere region category {region_category} does not match any tags for mo: {}:{}",
            start.kind, start.value
        ));
    }
    Err(format!(
        "vSphere zone category {zone_category} does not match any tags for mo: {}:{}",
        start.kind, start.value
    ))
}

/// CPI's order: the VM's host, else its resource pool, else the VM itself; the last error when
/// none has both.
pub fn placement(
    starts: &[&Moref],
    parents: &HashMap<Moref, Moref>,
    index: &TagIndex,
    categories: (&str, &str),
) -> Result<Placement, String> {
    let mut last = "the VM has no host, resource pool or folder to look up zones from".to_owned();
    for start in starts {
        match walk(start, parents, index, categories) {
            Ok(found) => return Ok(found),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The tags of one vCenter, read again every [`REFRESH`].
pub struct ZoneTags {
    zone_category: String,
    region_category: String,
    tagging: Tagging,
    read: tokio::sync::Mutex<Option<(Instant, TagIndex)>>,
    /// Category names by id, read once each (a category's name is not expected to change; a
    /// renamed one is read again after a restart).
    category_names: std::sync::Mutex<HashMap<String, String>>,
}

impl ZoneTags {
    /// The zone and region categories' tags of the vCenter `tagging` talks to.
    pub fn new(tagging: Tagging, zone_category: &str, region_category: &str) -> Self {
        Self {
            zone_category: zone_category.to_owned(),
            region_category: region_category.to_owned(),
            tagging,
            read: tokio::sync::Mutex::new(None),
            category_names: std::sync::Mutex::default(),
        }
    }

    /// The category names, zone first.
    pub fn categories(&self) -> (&str, &str) {
        (&self.zone_category, &self.region_category)
    }

    /// The REST API's counts (calls, logins).
    pub fn tagging(&self) -> &Tagging {
        &self.tagging
    }

    /// The index, read when older than [`REFRESH`] (one reader at a time; the others wait for
    /// it). When reading fails, the last index read is used (zones change rarely; a vCenter
    /// whose REST API is down does not hold back nodes it already placed).
    pub async fn index(&self) -> Result<TagIndex, SoapError> {
        let mut read = self.read.lock().await;
        if let Some((at, index)) = read.as_ref()
            && at.elapsed() < REFRESH
        {
            return Ok(index.clone());
        }
        match self.fetch().await {
            Ok(index) => {
                *read = Some((Instant::now(), index.clone()));
                Ok(index)
            }
            Err(e) => match read.as_ref() {
                Some((_, index)) => {
                    tracing::warn!(error = %e, "cannot read the zone and region tags; using the last read");
                    Ok(index.clone())
                }
                None => Err(e),
            },
        }
    }

    /// Categories (one list, one read of each not read before), the two categories' tags (one
    /// list each, one read per tag) and the objects they are attached to (one call).
    async fn fetch(&self) -> Result<TagIndex, SoapError> {
        let mut zone_category = None;
        let mut region_category = None;
        for id in self.tagging.category_ids().await? {
            let known = self.category_names.lock().expect("names").get(&id).cloned();
            let name = match known {
                Some(name) => name,
                None => {
                    let category = self.tagging.category(&id).await?;
                    self.category_names
                        .lock()
                        .expect("names")
                        .insert(id.clone(), category.name.clone());
                    category.name
                }
            };
            if name == self.zone_category {
                zone_category = Some(id.clone());
            }
            if name == self.region_category {
                region_category = Some(id);
            }
        }
        let mut names: HashMap<String, (String, bool)> = HashMap::new();
        for (category, is_zone) in [(zone_category, true), (region_category, false)] {
            let Some(category) = category else { continue };
            for id in self.tagging.tags_in(&category).await? {
                let tag = self.tagging.tag(&id).await?;
                names.insert(tag.id, (tag.name, is_zone));
            }
        }
        let ids: Vec<String> = names.keys().cloned().collect();
        let attached = self.tagging.attached_objects(&ids).await?;
        Ok(TagIndex::new(attached.into_iter().filter_map(|(id, objects)| {
            let (name, is_zone) = names.get(&id)?.clone();
            Some((name, is_zone, objects))
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: &str, value: &str) -> Moref {
        Moref::new(kind, value)
    }

    /// host-1 → cluster → host folder → datacenter → root; a resource pool under the cluster; a
    /// VM folder under the datacenter.
    fn inventory() -> HashMap<Moref, Moref> {
        [
            (
                m("HostSystem", "host-1"),
                m("ClusterComputeResource", "domain-c1"),
            ),
            (m("ClusterComputeResource", "domain-c1"), m("Folder", "group-h1")),
            (m("Folder", "group-h1"), m("Datacenter", "datacenter-1")),
            (m("Datacenter", "datacenter-1"), m("Folder", "group-d1")),
            (
                m("ResourcePool", "resgroup-1"),
                m("ClusterComputeResource", "domain-c1"),
            ),
            (m("VirtualMachine", "vm-1"), m("Folder", "group-v1")),
            (m("Folder", "group-v1"), m("Datacenter", "datacenter-1")),
        ]
        .into_iter()
        .collect()
    }

    const CATEGORIES: (&str, &str) = ("k8s-zone", "k8s-region");

    /// A tag's name, whether it is a zone (else a region), and the objects (type, id) it is on.
    type Attached<'a> = (&'a str, bool, &'a [(&'a str, &'a str)]);

    fn index(tags: &[Attached<'_>]) -> TagIndex {
        TagIndex::new(tags.iter().map(|(name, zone, objects)| {
            (
                (*name).to_owned(),
                *zone,
                objects.iter().map(|(k, v)| m(k, v)).collect(),
            )
        }))
    }

    // CPI's LookupZoneByMoref walk, case by case (reference §6).
    #[test]
    fn the_walk_up_finds_zone_and_region_as_cpi_does() {
        let parents = inventory();
        let host = m("HostSystem", "host-1");
        let pool = m("ResourcePool", "resgroup-1");
        let vm = m("VirtualMachine", "vm-1");
        let ok = |zone: &str, region: &str| {
            Ok(Placement {
                zone: zone.into(),
                region: region.into(),
            })
        };
        let cases: Vec<(&str, TagIndex, Result<Placement, String>)> = vec![
            (
                "zone on the cluster, region on the datacenter",
                index(&[
                    ("zone-a", true, &[("ClusterComputeResource", "domain-c1")]),
                    ("region-1", false, &[("Datacenter", "datacenter-1")]),
                ]),
                ok("zone-a", "region-1"),
            ),
            (
                "zone on the host and on the cluster: the cluster's wins (met before the region)",
                index(&[
                    ("zone-host", true, &[("HostSystem", "host-1")]),
                    ("zone-cluster", true, &[("ClusterComputeResource", "domain-c1")]),
                    ("region-1", false, &[("Datacenter", "datacenter-1")]),
                ]),
                ok("zone-cluster", "region-1"),
            ),
            (
                "both on the host: the walk stops there",
                index(&[
                    ("zone-host", true, &[("HostSystem", "host-1")]),
                    ("region-host", false, &[("HostSystem", "host-1")]),
                    ("zone-cluster", true, &[("ClusterComputeResource", "domain-c1")]),
                ]),
                ok("zone-host", "region-host"),
            ),
            (
                "a folder on the way counts",
                index(&[
                    ("zone-f", true, &[("Folder", "group-h1")]),
                    ("region-root", false, &[("Folder", "group-d1")]),
                ]),
                ok("zone-f", "region-root"),
            ),
            (
                "no region tag anywhere: an error naming the region category",
                index(&[("zone-a", true, &[("ClusterComputeResource", "domain-c1")])]),
                Err(
                    "vSphere region category k8s-region does not match any tags for mo: VirtualMachine:vm-1"
                        .into(),
                ),
            ),
            (
                "a region but no zone: an error naming the zone category, not an empty zone",
                index(&[("region-1", false, &[("Datacenter", "datacenter-1")])]),
                Err(
                    "vSphere zone category k8s-zone does not match any tags for mo: VirtualMachine:vm-1"
                        .into(),
                ),
            ),
            (
                "tags on objects outside the chains do not count",
                index(&[
                    ("zone-x", true, &[("ClusterComputeResource", "domain-c9")]),
                    ("region-1", false, &[("Datacenter", "datacenter-1")]),
                ]),
                Err(
                    "vSphere zone category k8s-zone does not match any tags for mo: VirtualMachine:vm-1"
                        .into(),
                ),
            ),
        ];
        for (what, index, want) in cases {
            assert_eq!(
                placement(&[&host, &pool, &vm], &parents, &index, CATEGORIES),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn the_resource_pool_then_the_vm_are_tried_when_the_host_has_nothing() {
        let parents = inventory();
        // A standalone host outside the tagged cluster; the VM's pool is in it.
        let lone = m("HostSystem", "host-9");
        let index = index(&[
            ("zone-a", true, &[("ClusterComputeResource", "domain-c1")]),
            ("region-1", false, &[("Datacenter", "datacenter-1")]),
        ]);
        let pool = m("ResourcePool", "resgroup-1");
        assert_eq!(
            placement(&[&lone, &pool], &parents, &index, CATEGORIES).map(|p| p.zone),
            Ok("zone-a".to_owned())
        );
        // Only the VM's folder chain leads to the datacenter: the region is found, no zone.
        let vm = m("VirtualMachine", "vm-1");
        assert!(
            placement(&[&lone, &vm], &parents, &index, CATEGORIES)
                .is_err_and(|e| e.contains("zone category k8s-zone"))
        );
    }

    #[test]
    fn two_tags_of_one_category_on_one_object_keep_the_last_by_name() {
        let index = index(&[
            ("b", true, &[("HostSystem", "host-1")]),
            ("a", true, &[("HostSystem", "host-1")]),
            ("r", false, &[("HostSystem", "host-1")]),
        ]);
        let host = m("HostSystem", "host-1");
        assert_eq!(
            walk(&host, &HashMap::new(), &index, CATEGORIES).map(|p| p.zone),
            Ok("b".to_owned())
        );
    }
}
