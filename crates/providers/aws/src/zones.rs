//! Availability zones: each zone's ID (`use1-az6`, the same physical zone in every account,
//! unlike the name) and type (`availability-zone`, `local-zone`, `wavelength-zone`), described
//! once for the process's life as cloud-provider-aws's zone cache does: one
//! DescribeAvailabilityZones call for every zone of the region, again only when a zone is asked
//! that the cache does not know (an account can gain zones), and then at most once per
//! [`ZONE_REFRESH_INTERVAL`].

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use provider::Result;

use crate::{AwsProvider, errors::sdk_error};

/// The node label cloud-provider-aws sets to the instance's zone ID.
pub const LABEL_ZONE_ID: &str = "topology.k8s.aws/zone-id";

/// Least time between two descriptions asked for by an unknown zone name.
pub const ZONE_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// What the provider keeps of a zone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZoneView {
    /// Zone ID, e.g. `use1-az6`.
    pub id: String,
    /// Zone type, e.g. `availability-zone`, `local-zone`.
    pub kind: String,
}

/// The zone cache: zones by name, and when they were last described.
#[derive(Debug, Default)]
pub(crate) struct ZoneCache {
    /// Zones by name.
    pub zones: BTreeMap<String, ZoneView>,
    /// When the region's zones were last described.
    pub described: Option<Instant>,
}

impl ZoneCache {
    /// Whether to describe the zones again to learn `names`: some are unknown and the last
    /// description is not too recent.
    pub fn needs_refresh(&self, names: &BTreeSet<String>, now: Instant) -> bool {
        names.iter().any(|n| !self.zones.contains_key(n))
            && self
                .described
                .is_none_or(|at| now.duration_since(at) >= ZONE_REFRESH_INTERVAL)
    }
}

impl AwsProvider {
    /// The zones among `names` that the region has (unknown names are absent from the answer).
    /// At most one DescribeAvailabilityZones call at a time: concurrent callers wait for it and
    /// share its answer.
    pub(crate) async fn zones(&self, names: &BTreeSet<String>) -> Result<BTreeMap<String, ZoneView>> {
        let known = |cache: &ZoneCache| {
            names
                .iter()
                .filter_map(|n| cache.zones.get(n).map(|z| (n.clone(), z.clone())))
                .collect::<BTreeMap<_, _>>()
        };
        {
            let cache = self.caches.zones.lock().expect("zone cache");
            if !cache.needs_refresh(names, Instant::now()) {
                return Ok(known(&cache));
            }
        }
        let _describing = self.caches.zones_describing.lock().await;
        // Another caller may have described them meanwhile.
        if !self
            .caches
            .zones
            .lock()
            .expect("zone cache")
            .needs_refresh(names, Instant::now())
        {
            return Ok(known(&self.caches.zones.lock().expect("zone cache")));
        }
        let out = self
            .ec2
            .describe_availability_zones()
            .all_availability_zones(true)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeAvailabilityZones", &e))?;
        let mut cache = self.caches.zones.lock().expect("zone cache");
        for z in out.availability_zones() {
            if let Some(name) = z.zone_name().filter(|n| !n.is_empty()) {
                cache.zones.insert(
                    name.to_owned(),
                    ZoneView {
                        id: z.zone_id().unwrap_or_default().to_owned(),
                        kind: z.zone_type().unwrap_or_default().to_owned(),
                    },
                );
            }
        }
        cache.described = Some(Instant::now());
        Ok(known(&cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_described_again_only_for_an_unknown_name_and_not_too_often() {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        let start = Instant::now();
        let mut cache = ZoneCache::default();
        assert!(
            cache.needs_refresh(&names(&["us-east-1a"]), start),
            "never described"
        );
        assert!(!cache.needs_refresh(&names(&[]), start), "nothing asked");
        cache.zones.insert("us-east-1a".into(), ZoneView::default());
        cache.described = Some(start);
        assert!(!cache.needs_refresh(&names(&["us-east-1a"]), start));
        let unknown = names(&["us-east-1a", "us-east-1-bos-1a"]);
        assert!(!cache.needs_refresh(&unknown, start + Duration::from_secs(59)));
        assert!(cache.needs_refresh(&unknown, start + ZONE_REFRESH_INTERVAL));
    }
}
