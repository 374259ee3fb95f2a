//! Knowing a load balancer is as its Service asks without reading all of it again: a
//! provider hashes the request into a fingerprint, records it on the load balancer (a tag) when
//! it converges one, and remembers the converges it read in full. [`Verified`] decides when
//! that is enough to skip the full read; whatever is trusted is read in full again after the
//! verify period, so changes made behind the provider's back are repaired.
//!
//! Shared by the providers (the AWS provider's marker is a tag key and value, OpenStack's an
//! Octavia tag); each says what its fingerprint covers.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};

/// The fingerprint of a request: 16 hex digits of a SHA-256 over `version` (bumped by a
/// provider when what its fingerprint covers changes meaning, so older markers are not
/// trusted) and the parts, each length-prefixed.
pub fn fingerprint(version: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(version.as_bytes());
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone)]
struct Entry {
    fingerprint: String,
    marker: Option<String>,
    identity: String,
    at: Instant,
}

impl Entry {
    /// A converge to `fingerprint` known as of now.
    fn now(identity: &str, fingerprint: &str, marker: Option<&str>) -> Self {
        Self {
            fingerprint: fingerprint.to_owned(),
            marker: marker.map(str::to_owned),
            identity: identity.to_owned(),
            at: Instant::now(),
        }
    }
}

/// What this process knows to be converged, per load balancer name.
#[derive(Debug)]
pub struct Verified {
    period: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Verified {
    /// An empty memory; entries are trusted for `period`.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the load balancer `name` (`identity`: its ARN or creation time, so a load balancer
    /// deleted and made again is not mistaken for the one checked) with marker `marker` is known
    /// to be as `fingerprint` asks.
    pub fn trusted(&self, name: &str, identity: &str, fingerprint: &str, marker: Option<&str>) -> bool {
        if self.period.is_zero() {
            return false;
        }
        let mut entries = self.entries.lock().expect("verified");
        if let Some(e) = entries.get(name)
            && e.fingerprint == fingerprint
            && e.identity == identity
            && e.marker.as_deref() == marker
        {
            return e.at.elapsed() < self.period;
        }
        if marker == Some(fingerprint) {
            entries.insert(name.to_owned(), Entry::now(identity, fingerprint, marker));
            return true;
        }
        false
    }

    /// Records a full converge of `name` to `fingerprint`, after which its marker is `marker`.
    pub fn record(&self, name: &str, identity: &str, fingerprint: &str, marker: Option<&str>) {
        self.entries
            .lock()
            .expect("verified")
            .insert(name.to_owned(), Entry::now(identity, fingerprint, marker));
    }

    /// Forgets `name` (deleted, or a converge failed half-way).
    pub fn forget(&self, name: &str) {
        self.entries.lock().expect("verified").remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_separate_their_parts_and_versions() {
        assert_eq!(fingerprint("v", &["a", "b"]), fingerprint("v", &["a", "b"]));
        assert_ne!(fingerprint("v", &["ab", ""]), fingerprint("v", &["a", "b"]));
        assert_ne!(fingerprint("v1", &["a"]), fingerprint("v2", &["a"]));
        assert_eq!(fingerprint("v", &["x"]).len(), 16);
    }

    #[test]
    fn a_remembered_converge_is_trusted_while_the_marker_is_unchanged() {
        let v = Verified::new(Duration::from_secs(60));
        assert!(!v.trusted("lb", "arn-1", "f1", None));
        v.record("lb", "arn-1", "f1", None);
        assert!(v.trusted("lb", "arn-1", "f1", None));
        assert!(!v.trusted("lb", "arn-1", "f2", None), "another request");
        assert!(
            !v.trusted("lb", "arn-2", "f1", None),
            "another load balancer of that name"
        );
        // Another replica converged it to f2 and back-and-forth: the marker moved, no trust.
        assert!(!v.trusted("lb", "arn-1", "f1", Some("f2")));
        assert!(!v.trusted("lb", "arn-1", "f1", Some("converging")));
        v.forget("lb");
        assert!(!v.trusted("lb", "arn-1", "f1", None));
    }

    #[test]
    fn a_marker_equal_to_the_request_is_trusted_by_any_replica() {
        let v = Verified::new(Duration::from_secs(60));
        assert!(v.trusted("lb", "arn-1", "f1", Some("f1")));
        assert!(!v.trusted("lb", "arn-1", "f2", Some("f1")));
    }

    #[test]
    fn trust_ends_with_the_period() {
        let v = Verified::new(Duration::from_millis(1));
        v.record("lb", "arn-1", "f1", Some("f1"));
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !v.trusted("lb", "arn-1", "f1", Some("f1")),
            "re-read after the period"
        );
        let off = Verified::new(Duration::ZERO);
        assert!(
            !off.trusted("lb", "arn-1", "f1", Some("f1")),
            "a zero period reads every time"
        );
    }
}
