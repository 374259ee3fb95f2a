//! Knowing a load balancer is as its Service asks without reading all of it again.
//!
//! Upstream reads everything about a load balancer on every sync of its Service (9 to 11 AWS
//! calls, and often a write, for a Service that did not change). Here a sync first reads only
//! the load balancer and its tags. The full read (listeners, target groups, targets, attributes,
//! security groups) happens when either says the load balancer may differ from the request:
//!
//! - the **fingerprint** of a request is a hash of everything the load balancer is built from
//!   except its members (the Service as parsed, the provider's settings). The members are not
//!   covered, so a node change is only its register and deregister calls, with no tag write (as
//!   upstream): they are checked against what AWS lists instead, a Classic ELB's in the
//!   DescribeLoadBalancers answer the sync reads anyway, an NLB's in its target health (read
//!   unless this process made or found them as the same nodes ask, within the verify period);
//! - after a converge that changed something the fingerprint covers, the load balancer is tagged
//!   [`MARKER_TAG`] = that fingerprint (and [`CONVERGING`] before the first such change, so an
//!   interrupted one is never trusted; an interrupted node change needs neither, its members
//!   being read again by the next sync). Any replica, and this one after a restart, then trusts a load
//!   balancer whose tag equals the fingerprint of the request it has;
//! - after a full read that found nothing to change (a load balancer adopted as another
//!   controller built it, which must stay untouched), the provider remembers the fingerprint and
//!   the tag value it saw; it trusts that memory while the tag is unchanged;
//! - whatever is trusted is read in full again after the verify period, so changes made behind
//!   the provider's back are repaired (upstream repairs them on every sync).

pub use provider::converged::Verified;

/// The tag recording the fingerprint a load balancer was last converged to.
pub const MARKER_TAG: &str = "cloudgateway.io/load-balancer-spec";
/// The marker's value while a converge is under way.
pub const CONVERGING: &str = "converging";
/// Bumped when what a fingerprint covers changes meaning, so older markers are not trusted.
const FINGERPRINT_VERSION: &str = "aws-lb/2";

/// The fingerprint of a request: 16 hex digits of a SHA-256 over its parts.
pub fn fingerprint(parts: &[&str]) -> String {
    provider::converged::fingerprint(FINGERPRINT_VERSION, parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_separate_their_parts() {
        assert_eq!(fingerprint(&["a", "b"]), fingerprint(&["a", "b"]));
        assert_ne!(fingerprint(&["ab", ""]), fingerprint(&["a", "b"]));
        assert_eq!(fingerprint(&["x"]).len(), 16);
    }
}
