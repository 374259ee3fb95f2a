//! Which VM a node is, decided over one read of every VM: a ContainerView over the VMs of each
//! vCenter (or of each configured datacenter) and one RetrievePropertiesEx of their properties
//! ([`crate::nodes::PROPERTIES`]), whose BIOS UUID, tools hostname and primary IP are matched here as vCenter's SearchIndex matches
//! (`FindByUuid`, then with the byte-swapped UUID, as CPI; `FindAllByDnsName` on
//! `guest.hostName`; `FindByIp` on `guest.ipAddress`). CPI makes one search call per node and
//! datacenter (and a second for the swapped UUID); here a batch of any size costs one call per
//! vCenter, and none when every node is in the snapshot kept from an earlier batch.
//!
//! A snapshot kept from earlier is only trusted for what it finds, and what it found is checked
//! against the VM's properties read afterwards ([`still_matches`]); "no such VM" is concluded
//! only from snapshots read for this batch ([`decide`]), and never while a VM's UUID cannot be
//! read (an inaccessible or half-created VM could be the node's: CPI #642, #521).

use std::{collections::HashMap, net::IpAddr};

use crate::{
    nodes::{Key, Search},
    provider_id,
    soap::{Moref, SoapError, methods::ObjectContent},
};

/// The properties nodes are found by (read with [`crate::nodes::PROPERTIES`]).
pub const IDENTITY: &[&str] = &["summary.config.uuid", "guest.hostName", "guest.ipAddress"];

/// One vCenter's VMs by what nodes are looked up by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    by_uuid: HashMap<String, Vec<Moref>>,
    by_hostname: HashMap<String, Vec<Moref>>,
    by_ip: HashMap<String, Vec<Moref>>,
    /// VMs whose BIOS UUID could not be read (missing or empty).
    pub unidentified: Vec<Moref>,
}

impl Snapshot {
    /// The snapshot of the VMs read with [`IDENTITY`].
    pub fn new(vms: &[ObjectContent]) -> Self {
        let mut s = Self::default();
        for vm in vms {
            let Some(moref) = vm.obj.clone() else { continue };
            let uuid = vm.text("summary.config.uuid").to_ascii_lowercase();
            let unreadable = vm.missing.iter().any(|(p, _)| p == "summary.config.uuid");
            if uuid.is_empty() || unreadable {
                s.unidentified.push(moref.clone());
            } else {
                s.by_uuid.entry(uuid).or_default().push(moref.clone());
            }
            let hostname = vm.text("guest.hostName").to_ascii_lowercase();
            if !hostname.is_empty() {
                s.by_hostname.entry(hostname).or_default().push(moref.clone());
            }
            let ip = vm.text("guest.ipAddress");
            if !ip.is_empty() {
                s.by_ip.entry(ip.to_owned()).or_default().push(moref);
            }
        }
        s
    }

    /// The VMs `key` names here, as SearchIndex finds them: the UUID, else its byte-swapped
    /// form; the tools hostname, else (for a name that is an IP) the primary IP.
    pub fn find(&self, key: &Key) -> Vec<Moref> {
        let get = |map: &HashMap<String, Vec<Moref>>, k: &str| map.get(k).cloned().unwrap_or_default();
        match key {
            Key::Uuid(uuid) => {
                let found = get(&self.by_uuid, uuid);
                if found.is_empty() {
                    get(&self.by_uuid, &provider_id::swap_bytes(uuid))
                } else {
                    found
                }
            }
            Key::Name(name) => {
                let found = get(&self.by_hostname, name);
                if found.is_empty() && name.parse::<IpAddr>().is_ok() {
                    get(&self.by_ip, name)
                } else {
                    found
                }
            }
        }
    }
}

/// What one vCenter's snapshot says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Read: the VMs found, and how many VMs' UUIDs could not be read.
    Read {
        /// The VMs the key names.
        found: Vec<Moref>,
        /// VMs without a readable UUID.
        unidentified: usize,
    },
    /// The read failed.
    Failed(SoapError),
}

/// Every vCenter's answer (in config order) for `key`, read for this batch: one VM found is the
/// node's; several are ambiguous; none is "absent" only when every vCenter answered and, for a
/// UUID, every VM's UUID could be read.
pub fn decide(key: &Key, answers: &[Answer]) -> Search {
    let mut hits: Vec<(usize, &Moref)> = Vec::new();
    let mut failed = None;
    let mut unidentified = 0;
    for (vc, answer) in answers.iter().enumerate() {
        match answer {
            Answer::Read {
                found,
                unidentified: n,
            } => {
                hits.extend(found.iter().map(|m| (vc, m)));
                unidentified += n;
            }
            Answer::Failed(e) => failed = Some(e.clone()),
        }
    }
    match (hits.as_slice(), failed) {
        ([(vc, vm)], _) => Search::Found(*vc, (*vm).clone()),
        ([], Some(e)) => Search::Failed(e),
        ([], None) if unidentified > 0 && matches!(key, Key::Uuid(_)) => Search::Unidentified(unidentified),
        ([], None) => Search::Absent,
        (many, _) => Search::Ambiguous(many.len()),
    }
}

/// Whether the VM read (with [`crate::nodes::PROPERTIES`]) is still the one `key` names: a VM
/// found in a snapshot kept from earlier may have been renamed or re-addressed since.
pub fn still_matches(key: &Key, vm: &ObjectContent) -> bool {
    match key {
        Key::Uuid(uuid) => {
            let read = vm.text("summary.config.uuid").to_ascii_lowercase();
            read == *uuid || read == provider_id::swap_bytes(uuid)
        }
        Key::Name(name) => {
            vm.text("guest.hostName").eq_ignore_ascii_case(name)
                || (name.parse::<IpAddr>().is_ok() && vm.text("guest.ipAddress") == name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soap::xml::parse;

    fn vm(id: &str, props: &[(&str, &str)], missing: &[&str]) -> ObjectContent {
        ObjectContent {
            obj: Some(Moref::new("VirtualMachine", id)),
            props: props
                .iter()
                .map(|(p, v)| ((*p).to_owned(), parse(&format!("<val>{v}</val>")).unwrap()))
                .collect(),
            missing: missing
                .iter()
                .map(|p| ((*p).to_owned(), "NoPermission".to_owned()))
                .collect(),
        }
    }

    const UUID: &str = "422e4956-ad22-1139-6d72-59cc8f26bc90";
    const SWAPPED: &str = "56492e42-22ad-3911-6d72-59cc8f26bc90";

    fn m(id: &str) -> Moref {
        Moref::new("VirtualMachine", id)
    }

    fn snapshot() -> Snapshot {
        Snapshot::new(&[
            vm(
                "vm-1",
                &[
                    ("summary.config.uuid", &UUID.to_uppercase()),
                    ("guest.hostName", "Node-1"),
                    ("guest.ipAddress", "10.0.0.1"),
                ],
                &[],
            ),
            vm(
                "vm-2",
                &[
                    ("summary.config.uuid", "11111111-2222-3333-4444-555555555555"),
                    ("guest.hostName", "twin"),
                ],
                &[],
            ),
            vm(
                "vm-3",
                &[
                    ("summary.config.uuid", "66666666-2222-3333-4444-555555555555"),
                    ("guest.hostName", "twin"),
                    ("guest.ipAddress", "10.0.0.3"),
                ],
                &[],
            ),
        ])
    }

    /// SearchIndex's matches: UUID in either byte order (case aside), hostname (case aside),
    /// an IP name by the primary IP only after the hostname missed.
    #[test]
    fn keys_match_as_search_index_matches() {
        let s = snapshot();
        let cases: Vec<(Key, Vec<Moref>)> = vec![
            (Key::Uuid(UUID.into()), vec![m("vm-1")]),
            (Key::Uuid(SWAPPED.into()), vec![m("vm-1")]),
            (Key::Uuid("99999999-2222-3333-4444-555555555555".into()), vec![]),
            (Key::Name("node-1".into()), vec![m("vm-1")]),
            (Key::Name("twin".into()), vec![m("vm-2"), m("vm-3")]),
            (Key::Name("10.0.0.3".into()), vec![m("vm-3")]),
            (Key::Name("10.0.0.9".into()), vec![]),
            (
                Key::Name("vm-1".into()),
                vec![], /* inventory names are never searched */
            ),
        ];
        for (key, want) in cases {
            assert_eq!(s.find(&key), want, "{key:?}");
        }
    }

    /// Only every vCenter answering, with every UUID readable, makes a UUID absent.
    #[test]
    fn absence_needs_every_answer_and_every_uuid() {
        let uuid = Key::Uuid(UUID.into());
        let name = Key::Name("n".into());
        let read = |found: &[&str], unidentified| Answer::Read {
            found: found.iter().map(|id| m(id)).collect(),
            unidentified,
        };
        let down = Answer::Failed(SoapError::Http { status: 503 });
        let cases: Vec<(&str, &Key, Vec<Answer>, Search)> = vec![
            (
                "one hit",
                &uuid,
                vec![read(&[], 0), read(&["vm-1"], 0)],
                Search::Found(1, m("vm-1")),
            ),
            (
                "a hit beside a failure",
                &uuid,
                vec![down.clone(), read(&["vm-1"], 3)],
                Search::Found(1, m("vm-1")),
            ),
            (
                "every vCenter: none",
                &uuid,
                vec![read(&[], 0), read(&[], 0)],
                Search::Absent,
            ),
            (
                "none, one failed",
                &uuid,
                vec![read(&[], 0), down.clone()],
                Search::Failed(SoapError::Http { status: 503 }),
            ),
            (
                "none, a VM's UUID unreadable",
                &uuid,
                vec![read(&[], 1)],
                Search::Unidentified(1),
            ),
            (
                "by name, unreadable UUIDs do not matter",
                &name,
                vec![read(&[], 1)],
                Search::Absent,
            ),
            (
                "two VMs",
                &name,
                vec![read(&["vm-2", "vm-3"], 0)],
                Search::Ambiguous(2),
            ),
            (
                "one in each of two vCenters",
                &uuid,
                vec![read(&["vm-1"], 0), read(&["vm-9"], 0)],
                Search::Ambiguous(2),
            ),
        ];
        for (what, key, answers, want) in cases {
            assert_eq!(decide(key, &answers), want, "{what}");
        }
    }

    #[test]
    fn what_nodes_are_found_by_is_read_with_their_properties() {
        for path in IDENTITY {
            assert!(crate::nodes::PROPERTIES.contains(path), "{path}");
        }
    }

    #[test]
    fn unreadable_or_empty_uuids_are_counted() {
        let s = Snapshot::new(&[
            vm("vm-1", &[("guest.hostName", "a")], &[]),
            vm("vm-2", &[], &["summary.config.uuid"]),
        ]);
        assert_eq!(s.unidentified, vec![m("vm-1"), m("vm-2")]);
        assert_eq!(s.find(&Key::Name("a".into())), vec![m("vm-1")]);
    }

    #[test]
    fn a_remembered_vm_is_checked_against_what_is_read() {
        let read = vm(
            "vm-1",
            &[
                ("summary.config.uuid", UUID),
                ("guest.hostName", "node-1"),
                ("guest.ipAddress", "10.0.0.1"),
            ],
            &[],
        );
        assert!(still_matches(&Key::Uuid(UUID.into()), &read));
        assert!(still_matches(&Key::Uuid(SWAPPED.into()), &read));
        assert!(still_matches(&Key::Name("NODE-1".into()), &read));
        assert!(still_matches(&Key::Name("10.0.0.1".into()), &read));
        assert!(!still_matches(&Key::Name("node-2".into()), &read), "renamed");
        assert!(!still_matches(
            &Key::Uuid("99999999-2222-3333-4444-555555555555".into()),
            &read
        ));
    }
}
