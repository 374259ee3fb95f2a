//! providerIDs and BIOS UUIDs as CPI writes and reads them (reference §2.1, §2.2).
//!
//! CPI writes `vsphere://<BIOS uuid, lower-case>`. Reading one, it strips the prefix, trims and
//! lower-cases, with no other check. A VM's BIOS UUID is reported by some guests with the first
//! three groups byte-swapped (Photon 2 vs others), so a lookup that finds nothing is retried with
//! the swapped form ([`swap_bytes`]).

/// The scheme of every vSphere providerID.
pub const PREFIX: &str = "vsphere://";

/// `vsphere://<uuid>` for a VM's BIOS UUID (lower-cased, trimmed, as CPI).
pub fn provider_id(uuid: &str) -> String {
    format!("{PREFIX}{}", uuid.trim().to_ascii_lowercase())
}

/// The UUID in a providerID (CPI's `GetUUIDFromProviderID`): the prefix stripped when present,
/// trimmed, lower-cased. A bare UUID passes through.
pub fn uuid_from_provider_id(provider_id: &str) -> String {
    let rest = provider_id.strip_prefix(PREFIX).unwrap_or(provider_id);
    rest.trim().to_ascii_lowercase()
}

/// Whether `text` looks like a UUID (8-4-4-4-12 hex digits): what a lookup by UUID needs. CPI
/// searches with anything (a k3s `vsphere://hostname` is searched as a UUID and not found); we
/// do not call vCenter for what cannot be a UUID and do not call it "not found" either.
pub fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The UUID with its first three groups byte-swapped (CPI's `ConvertK8sUUIDtoNormal`),
/// lower-cased; an involution. Text shorter than 36 characters, or not ASCII, is returned as it
/// is (CPI only logs it).
pub fn swap_bytes(uuid: &str) -> String {
    let s = uuid.trim();
    if s.len() < 36 || !s.is_ascii() {
        return uuid.to_owned();
    }
    let b = |from: usize| &s[from..from + 2];
    let swapped = format!(
        "{}{}{}{}-{}{}-{}{}-{}",
        b(6),
        b(4),
        b(2),
        b(0),
        b(11),
        b(9),
        b(16),
        b(14),
        &s[19..]
    );
    swapped.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPI's util_test.go cases.
    #[test]
    fn cpi_provider_id_and_swap_cases() {
        assert_eq!(uuid_from_provider_id(""), "");
        assert_eq!(
            uuid_from_provider_id("vsphere://423740E7-0F2E-4DB1-B1E6-C2B3A1D6C1C3"),
            "423740e7-0f2e-4db1-b1e6-c2b3a1d6c1c3"
        );
        assert_eq!(
            uuid_from_provider_id("vsphere://423740e7-0f2e-4db1-b1e6-c2b3a1d6c1c3"),
            "423740e7-0f2e-4db1-b1e6-c2b3a1d6c1c3"
        );
        assert_eq!(
            uuid_from_provider_id("423740e7-0f2e-4db1-b1e6-c2b3a1d6c1c3"),
            "423740e7-0f2e-4db1-b1e6-c2b3a1d6c1c3"
        );
        assert_eq!(uuid_from_provider_id("vsphere:///x"), "/x");
        assert_eq!(swap_bytes(""), "");
        assert_eq!(
            swap_bytes("56492e42-22ad-3911-6d72-59cc8f26bc90"),
            "422e4956-ad22-1139-6d72-59cc8f26bc90"
        );
        assert_eq!(
            swap_bytes("56492E42-22AD-3911-6D72-59CC8F26BC90"),
            "422e4956-ad22-1139-6d72-59cc8f26bc90"
        );
        let u = "42278c9d-79fb-f2af-b060-d7f167fa261c";
        assert_eq!(swap_bytes(&swap_bytes(u)), u);
        assert_eq!(
            provider_id(" 422E4956-AD22-1139-6D72-59CC8F26BC90 "),
            "vsphere://422e4956-ad22-1139-6d72-59cc8f26bc90"
        );
    }

    #[test]
    fn only_uuids_are_searched_as_uuids() {
        assert!(is_uuid("422e4956-ad22-1139-6d72-59cc8f26bc90"));
        assert!(!is_uuid("hostname"));
        assert!(!is_uuid("/x"));
        assert!(!is_uuid("422e4956-ad22-1139-6d72-59cc8f26bc9g"));
        // multi-byte text of the right length neither panics nor passes
        assert_eq!(
            swap_bytes("ééééééééééééééééééééééééééééééééééééé"),
            "ééééééééééééééééééééééééééééééééééééé"
        );
    }

    proptest::proptest! {
        /// Any text: no panic, and swapping twice gives a UUID back.
        #[test]
        fn fuzz_swap_bytes(s in ".{0,50}") {
            let once = swap_bytes(&s);
            if is_uuid(s.trim()) {
                proptest::prop_assert_eq!(swap_bytes(&once), s.trim().to_ascii_lowercase());
            }
        }
    }
}
