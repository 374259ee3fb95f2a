//! Zone, instance type, shutdown and the assembled InstanceMetadata, as OCCM decides them
//! (`instances.go`, `util.SanitizeLabel`).

use std::collections::BTreeMap;

use provider::InstanceMetadata;

use super::addresses::{AddressOptions, SubportAddresses, node_addresses_with_subports};
use super::provider_id::ProviderIdScheme;
use crate::{
    neutron::ports::Port,
    nova::{Flavor, Server, ServerFlavor},
};

/// The one Nova status that counts as shut down (OCCM's `instanceShutoff`): the only state in
/// which volumes can be detached at once. PAUSED, SUSPENDED, SHELVED... are not.
pub const STATUS_SHUTOFF: &str = "SHUTOFF";

/// Longest Kubernetes label value.
const LABEL_VALUE_MAX: usize = 63;

/// Whether Nova's status means the instance is shut down (InstanceShutdown).
pub fn is_shutdown(status: &str) -> bool {
    status == STATUS_SHUTOFF
}

/// `util.SanitizeLabel`: each run of characters outside `[-A-Za-z0-9_.]` becomes one `-`,
/// leading and trailing `-_.` are trimmed, the result is cut to 63 characters. (The cut may
/// leave a trailing `-_.`, as in OCCM.)
pub fn sanitize_label(input: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let mut out = String::with_capacity(input.len());
    let mut in_run = false;
    for c in input.chars() {
        if allowed(c) {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches(['-', '_', '.']);
    // ASCII only from here on, so a byte cut is a character cut.
    trimmed[..trimmed.len().min(LABEL_VALUE_MAX)].to_owned()
}

/// Kubernetes' `IsValidLabelValue`: empty, or at most 63 characters of `[-A-Za-z0-9_.]`
/// starting and ending with an alphanumeric.
pub fn is_valid_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= LABEL_VALUE_MAX
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// The instance type a fetched flavor gives: its name if a valid label value, else its ID.
pub fn instance_type_of_flavor(flavor: &Flavor) -> String {
    if is_valid_label_value(&flavor.name) {
        flavor.name.clone()
    } else {
        flavor.id.clone()
    }
}

/// What [`choose_instance_type`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceTypeChoice {
    /// The instance type.
    Known(String),
    /// Fetch `GET /flavors/{0}`, record the answer, and ask again.
    NeedsFlavor(String),
    /// Every lookup failed: OCCM fails the whole InstanceMetadata ("flavor original_name/id not
    /// found").
    NotFound,
}

/// Flavor lookups made so far: flavor ID → the flavor, or `None` when the GET failed.
pub type FlavorLookups = BTreeMap<String, Option<Flavor>>;

/// OCCM's `srvInstanceType` as a step function.
///
/// It tries `flavor.original_name` then `flavor.id`, each when present. A present
/// `original_name` that is a valid label value is the answer at once. Otherwise that value is
/// looked up as a flavor ID (OCCM does so for `original_name` too, and skips to the next key
/// when the GET fails); a found flavor gives [`instance_type_of_flavor`]. Nova at microversion
/// 2.1, which OCCM uses, sends only the `id`, so in practice this is one flavor GET per server
/// (cacheable: flavors rarely change).
pub fn choose_instance_type(flavor: &ServerFlavor, lookups: &FlavorLookups) -> InstanceTypeChoice {
    let candidates = [
        (flavor.original_name.as_deref(), true),
        (flavor.id.as_deref(), false),
    ];
    for (value, is_original_name) in candidates {
        let Some(value) = value else { continue };
        if is_original_name && is_valid_label_value(value) {
            return InstanceTypeChoice::Known(value.to_owned());
        }
        match lookups.get(value) {
            None => return InstanceTypeChoice::NeedsFlavor(value.to_owned()),
            Some(Some(f)) => return InstanceTypeChoice::Known(instance_type_of_flavor(f)),
            Some(None) => {}
        }
    }
    InstanceTypeChoice::NotFound
}

/// The zone label of a server: its sanitized availability zone.
pub fn zone(server: &Server) -> String {
    sanitize_label(&server.availability_zone)
}

/// InstanceMetadata of a server, as OCCM's `InstanceMetadata` builds it: providerID, instance
/// type (from [`choose_instance_type`]), addresses, zone and region; no additional labels.
pub fn instance_metadata(
    server: &Server,
    ports: &[Port],
    subports: &[SubportAddresses],
    instance_type: &str,
    opts: &AddressOptions,
    scheme: &ProviderIdScheme,
) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: scheme.make_instance_id(&server.id),
        instance_type: instance_type.to_owned(),
        addresses: node_addresses_with_subports(server, ports, subports, opts),
        zone: zone(server),
        region: scheme.region.clone(),
        additional_labels: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use provider::{AddressType, NodeAddress};

    #[test]
    fn sanitize_label_table() {
        for (input, want) in [
            ("", ""),
            ("nova", "nova"),
            ("Default Group", "Default-Group"),
            ("az 1  /  rack 2", "az-1-rack-2"),
            (" leading and trailing ", "leading-and-trailing"),
            ("--_.az_.--", "az"),
            ("zone@é#1", "zone-1"),
            ("été", "t"),
            ("日本", ""),
            ("a.b_c-D9", "a.b_c-D9"),
            ("!!!", ""),
            (&"z".repeat(70), &"z".repeat(63)),
            // The cut can leave a trailing separator; OCCM does not trim again.
            (&format!("{}-b", "a".repeat(62)), &format!("{}-", "a".repeat(62))),
        ] {
            assert_eq!(sanitize_label(input), want, "{input:?}");
        }
    }

    #[test]
    fn label_value_validity() {
        for (v, ok) in [
            ("", true),
            ("m1.small", true),
            ("m1 small", false),
            ("-m1", false),
            ("m1.", false),
            ("a", true),
            ("_", false),
            ("ß", false),
        ] {
            assert_eq!(is_valid_label_value(v), ok, "{v:?}");
        }
        assert!(is_valid_label_value(&"a".repeat(63)));
        assert!(!is_valid_label_value(&"a".repeat(64)));
    }

    /// Every Nova server status: only SHUTOFF is shut down.
    #[test]
    fn shutdown_status_table() {
        for (status, down) in [
            ("ACTIVE", false),
            ("BUILD", false),
            ("DELETED", false),
            ("ERROR", false),
            ("HARD_REBOOT", false),
            ("MIGRATING", false),
            ("PASSWORD", false),
            ("PAUSED", false),
            ("REBOOT", false),
            ("REBUILD", false),
            ("RESCUE", false),
            ("RESIZE", false),
            ("REVERT_RESIZE", false),
            ("SHELVED", false),
            ("SHELVED_OFFLOADED", false),
            ("SHUTOFF", true),
            ("SOFT_DELETED", false),
            ("SUSPENDED", false),
            ("UNKNOWN", false),
            ("VERIFY_RESIZE", false),
            ("shutoff", false),
            ("", false),
        ] {
            assert_eq!(is_shutdown(status), down, "{status}");
        }
    }

    fn flavor(id: &str, name: &str) -> Flavor {
        Flavor {
            id: id.into(),
            name: name.into(),
        }
    }

    #[test]
    fn instance_type_steps() {
        let sf = |original: Option<&str>, id: Option<&str>| ServerFlavor {
            original_name: original.map(Into::into),
            id: id.map(Into::into),
        };
        let none = FlavorLookups::new();
        // Microversion >= 2.47: a valid original_name is the answer, no lookup.
        assert_eq!(
            choose_instance_type(&sf(Some("m1.small"), None), &none),
            InstanceTypeChoice::Known("m1.small".into())
        );
        // Microversion 2.1: the id is looked up.
        assert_eq!(
            choose_instance_type(&sf(None, Some("42")), &none),
            InstanceTypeChoice::NeedsFlavor("42".into())
        );
        let found = FlavorLookups::from([("42".into(), Some(flavor("42", "m1.large")))]);
        assert_eq!(
            choose_instance_type(&sf(None, Some("42")), &found),
            InstanceTypeChoice::Known("m1.large".into())
        );
        // A name that is no label value falls back to the flavor id.
        let odd = FlavorLookups::from([("42".into(), Some(flavor("42", "m1 large (old)")))]);
        assert_eq!(
            choose_instance_type(&sf(None, Some("42")), &odd),
            InstanceTypeChoice::Known("42".into())
        );
        // The flavor is gone: InstanceMetadata fails, as in OCCM.
        let gone = FlavorLookups::from([("42".into(), None)]);
        assert_eq!(
            choose_instance_type(&sf(None, Some("42")), &gone),
            InstanceTypeChoice::NotFound
        );
        // An invalid original_name is looked up as an id first, then the id is tried.
        let s = sf(Some("bad name"), Some("42"));
        assert_eq!(
            choose_instance_type(&s, &none),
            InstanceTypeChoice::NeedsFlavor("bad name".into())
        );
        let first_failed = FlavorLookups::from([("bad name".into(), None)]);
        assert_eq!(
            choose_instance_type(&s, &first_failed),
            InstanceTypeChoice::NeedsFlavor("42".into())
        );
        // No flavor at all.
        assert_eq!(
            choose_instance_type(&sf(None, None), &none),
            InstanceTypeChoice::NotFound
        );
    }

    #[test]
    fn instance_metadata_assembles_occm_fields() {
        let body = br#"{"server": {"id": "abc", "status": "ACTIVE",
            "OS-EXT-AZ:availability_zone": "Default Group",
            "addresses": {"private": [{"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"}]}}}"#;
        let server = Server::from_get_body(body).unwrap();
        let scheme = ProviderIdScheme {
            region: "RegionOne".into(),
            regional: false,
        };
        let md = instance_metadata(&server, &[], &[], "m1.small", &AddressOptions::default(), &scheme);
        assert_eq!(
            md,
            InstanceMetadata {
                provider_id: "openstack:///abc".into(),
                instance_type: "m1.small".into(),
                addresses: vec![NodeAddress::new(AddressType::InternalIP, "10.0.0.5")],
                zone: "Default-Group".into(),
                region: "RegionOne".into(),
                additional_labels: BTreeMap::new(),
            }
        );
        let regional = ProviderIdScheme {
            regional: true,
            ..scheme
        };
        let md = instance_metadata(
            &server,
            &[],
            &[],
            "m1.small",
            &AddressOptions::default(),
            &regional,
        );
        assert_eq!(md.provider_id, "openstack://RegionOne/abc");
    }
}
