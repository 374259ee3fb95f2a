//! Knowing a load balancer is as its Service asks without reading its listeners, pools, members
//! and monitors again ([`provider::converged`]): an unchanged sync then costs the load balancer's
//! read and its floating IP's (2 calls, whatever the port count), where OCCM makes 2 + 2P Octavia
//! calls (2 + 3P with monitors) and 2 Neutron calls.
//!
//! - The fingerprint covers everything the load balancer is built from: its name, the Service's
//!   resolved settings, the listeners, pools, members and monitors they give, and what the
//!   cloud's Octavia can do.
//! - A converge this provider finishes on a load balancer of its own (one recording this
//!   cluster's identity) records the fingerprint as the tag `cloudgateway_spec_<fingerprint>`,
//!   in one tag write made as the sync answers (it does not wait for it). Any replica, and this
//!   one after a restart, then trusts a load balancer whose tag equals its request's fingerprint.
//! - A full read that finds nothing to change is remembered in memory (a load balancer taken over
//!   from OCCM unchanged is not written to; it is trusted while its tags stay as read).
//! - The members are covered too, so a node change ends with the tag write (one provisioning
//!   cycle more than OCCM's member updates). Octavia lists members only per pool, so a marker that
//!   left them out could not be checked against them without reading every pool: a restarted
//!   gateway would trust a load balancer whose members changed after its marker was written (a
//!   node that left and came back across the restart, never put back).
//! - Trust ends after [`VERIFY_PERIOD`]: the next sync reads it all again and repairs what was
//!   changed behind the provider's back. Also the one hole a marker without a "converging" state
//!   leaves: a Service edited, then edited back while a converge to the edit was half done and
//!   the gateway restarted, is trusted as the first request until then. A "converging" marker
//!   would close it at the cost of a second tag write (a second Octavia provisioning cycle) on
//!   every change, node churn included.

use std::time::Duration;

use super::{
    desired, security_groups,
    service_conf::{OctaviaFeatures, ServiceLbConf},
};

/// How long a converge, recorded or remembered, is trusted before the next full read.
pub const VERIFY_PERIOD: Duration = Duration::from_secs(600);

/// The tag prefix of the fingerprint marker.
pub const MARKER_PREFIX: &str = "cloudgateway_spec_";

/// Bumped when what the fingerprint covers changes meaning.
const FINGERPRINT_VERSION: &str = "openstack-lb/1";

/// The fingerprint of what the Service asks: its load balancer and, with
/// `manage-security-groups`, its security group (without it the fingerprint is as before the
/// setting was served, so that existing markers hold).
pub fn fingerprint(
    lb_name: &str,
    conf: &ServiceLbConf,
    want: &[desired::Listener],
    features: &OctaviaFeatures,
    security_group: Option<&security_groups::plan::Request>,
) -> String {
    // TLS fields print only when set, so that a load balancer without TLS keeps the marker it
    // was given before TLS was served (each would otherwise be read in full and re-tagged).
    let parts = [
        lb_name.to_owned(),
        format!("{conf:?}").replace(", tls_container_ref: None }", " }"),
        format!("{want:?}").replace(", default_tls_container_ref: None }", " }"),
        format!("{features:?}"),
    ];
    let group = security_group.map(|g| format!("{g:?}"));
    let parts: Vec<&str> = parts.iter().chain(group.as_ref()).map(String::as_str).collect();
    provider::converged::fingerprint(FINGERPRINT_VERSION, &parts)
}

/// The fingerprint a load balancer tagged `tags` records, if any.
pub fn marker(tags: &[String]) -> Option<&str> {
    tags.iter().find_map(|t| t.strip_prefix(MARKER_PREFIX))
}

/// `tags` recording `fingerprint`: every other tag kept, any older marker replaced.
pub fn with_marker(tags: &[String], fingerprint: &str) -> Vec<String> {
    tags.iter()
        .filter(|t| !t.starts_with(MARKER_PREFIX))
        .cloned()
        .chain([format!("{MARKER_PREFIX}{fingerprint}")])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_marker_is_one_tag_among_the_others() {
        assert_eq!(marker(&tags(&["a", "cloudgateway_spec_f1"])), Some("f1"));
        assert_eq!(marker(&tags(&["a"])), None);
        assert_eq!(
            with_marker(&tags(&["a", "cloudgateway_spec_f1", "b"]), "f2"),
            tags(&["a", "b", "cloudgateway_spec_f2"])
        );
        assert_eq!(with_marker(&tags(&[]), "f1"), tags(&["cloudgateway_spec_f1"]));
    }
    #[test]
    fn a_service_without_tls_keeps_the_fingerprint_it_had_before_tls_was_served() {
        // Pinned: a field added to what the fingerprint covers must not move the markers that
        // load balancers already carry (each would be read in full and re-tagged once).
        use crate::load_balancers::{desired, service_conf, test_support::web_and_dns};
        let service = web_and_dns(&[(service_conf::X_FORWARDED_FOR, "true")]);
        let settings = crate::cloud_config::LoadBalancerSettings {
            subnet_id: Some("subnet-1".into()),
            ..Default::default()
        };
        let features = service_conf::OctaviaFeatures::of(2, 26, "amphora");
        let node = provider::LoadBalancerNode {
            name: "n1".into(),
            addresses: vec![provider::NodeAddress {
                kind: provider::AddressType::InternalIP,
                address: "10.0.0.5".into(),
            }],
            ..Default::default()
        };
        const LB: &str = "kube_service_c_default_web";
        // The Service's resolved settings, its listeners on `node`, and their fingerprint.
        let asked = |service: &provider::ServiceSpec| {
            let conf = service_conf::resolve(&settings, &features, service).expect("conf");
            let octavia = desired::Octavia {
                features: &features,
                provider: "amphora",
                member_calls: desired::MemberCalls::Batch,
            };
            let want = desired::listeners(service, &conf, octavia, LB, &[&node], Some(desired::IpFamily::V4));
            let got = fingerprint(LB, &conf, &want, &features, None);
            (conf, want, got)
        };
        let (_, _, got) = asked(&service);
        assert_eq!(got, "fa58e115f5b7d814");
        // With TLS, the reference is covered.
        let tls = web_and_dns(&[(service_conf::TLS_CONTAINER_REF, "https://kms/v1/containers/c")]);
        let (conf, want, with_tls) = asked(&tls);
        assert_ne!(with_tls, got);
        let mut other = conf.clone();
        other.tls_container_ref = Some("https://kms/v1/containers/d".into());
        assert_ne!(fingerprint(LB, &other, &want, &features, None), with_tls);
    }
}
