//! The instance type CPI writes: `vsphere-vm.cpu-<numCpu>.mem-<memoryMB / 1024>gb.os-<os>`
//! (reference §5), `<os>` the short name of the VM's configured guest OS (`summary.config.guestId`)
//! in CPI's `GuestOSLookup`, else `unknown`.

/// CPI's `GuestOSLookup`: guestId → short name, sorted by guestId for a binary search.
const GUEST_OS: &[(&str, &str)] = &[
    ("asianux3Guest", "asianux3"),
    ("asianux3_64Guest", "asianux3"),
    ("asianux4Guest", "asianux4"),
    ("asianux4_64Guest", "asianux4"),
    ("asianux5_64Guest", "asianux5"),
    ("asianux7_64Guest", "asianux7"),
    ("centos64Guest", "centos64"),
    ("centos6Guest", "centos6"),
    ("centos6_64Guest", "centos6"),
    ("centos7Guest", "centos7"),
    ("centos7_64Guest", "centos7"),
    ("centosGuest", "centos"),
    ("coreos64Guest", "coreos"),
    ("darwin10Guest", "darwin"),
    ("darwin10_64Guest", "darwin"),
    ("darwin11Guest", "darwin"),
    ("darwin11_64Guest", "darwin"),
    ("darwin12_64Guest", "darwin"),
    ("darwin13_64Guest", "darwin"),
    ("darwin14_64Guest", "darwin"),
    ("darwin15_64Guest", "darwin"),
    ("darwin16_64Guest", "darwin"),
    ("darwin64Guest", "darwin"),
    ("darwinGuest", "darwin"),
    ("debian10Guest", "debian10"),
    ("debian10_64Guest", "debian10"),
    ("debian4Guest", "debian4"),
    ("debian4_64Guest", "debian4"),
    ("debian5Guest", "debian5"),
    ("debian5_64Guest", "debian5"),
    ("debian6Guest", "debian6"),
    ("debian6_64Guest", "debian6"),
    ("debian7Guest", "debian7"),
    ("debian7_64Guest", "debian7"),
    ("debian8Guest", "debian8"),
    ("debian8_64Guest", "debian8"),
    ("debian9Guest", "debian9"),
    ("debian9_64Guest", "debian9"),
    ("dosGuest", "dos"),
    ("eComStation2Guest", "eComStation2"),
    ("eComStationGuest", "eComStation"),
    ("fedora64Guest", "fedora"),
    ("fedoraGuest", "fedora"),
    ("freebsd64Guest", "freebsd"),
    ("freebsdGuest", "freebsd"),
    ("genericLinuxGuest", "linux"),
    ("mandrakeGuest", "mandrake"),
    ("mandriva64Guest", "mandriva"),
    ("mandrivaGuest", "mandriva"),
    ("netware4Guest", "netware4"),
    ("netware5Guest", "netware5"),
    ("netware6Guest", "netware6"),
    ("nld9Guest", "nld9"),
    ("oesGuest", "oes"),
    ("openServer5Guest", "openServer5"),
    ("openServer6Guest", "openServer6"),
    ("opensuse64Guest", "opensuse"),
    ("opensuseGuest", "opensuse"),
    ("oracleLinux64Guest", "oracleLinux"),
    ("oracleLinux6Guest", "oracleLinux6"),
    ("oracleLinux6_64Guest", "oracleLinux6"),
    ("oracleLinux7Guest", "oracleLinux7"),
    ("oracleLinux7_64Guest", "oracleLinux7"),
    ("oracleLinuxGuest", "oracleLinux"),
    ("os2Guest", "os2"),
    ("other24xLinux64Guest", "linux"),
    ("other24xLinuxGuest", "linux"),
    ("other26xLinux64Guest", "linux"),
    ("other26xLinuxGuest", "linux"),
    ("other3xLinux64Guest", "linux"),
    ("other3xLinuxGuest", "linux"),
    ("otherGuest", "other"),
    ("otherGuest64", "other"),
    ("otherLinux64Guest", "linux"),
    ("otherLinuxGuest", "linux"),
    ("redhatGuest", "rhel"),
    ("rhel2Guest", "rhel2"),
    ("rhel3Guest", "rhel3"),
    ("rhel3_64Guest", "rhel3"),
    ("rhel4Guest", "rhel4"),
    ("rhel4_64Guest", "rhel4"),
    ("rhel5Guest", "rhel5"),
    ("rhel5_64Guest", "rhel5"),
    ("rhel6Guest", "rhel6"),
    ("rhel6_64Guest", "rhel6"),
    ("rhel7Guest", "rhel7"),
    ("rhel7_64Guest", "rhel7"),
    ("sjdsGuest", "sjds"),
    ("sles10Guest", "sles10"),
    ("sles10_64Guest", "sles10"),
    ("sles11Guest", "sles11"),
    ("sles11_64Guest", "sles11"),
    ("sles12Guest", "sles12"),
    ("sles12_64Guest", "sles12"),
    ("sles64Guest", "sles64"),
    ("slesGuest", "sles"),
    ("solaris10Guest", "solaris10"),
    ("solaris10_64Guest", "solaris10"),
    ("solaris11_64Guest", "solaris11"),
    ("solaris6Guest", "solaris6"),
    ("solaris7Guest", "solaris7"),
    ("solaris8Guest", "solaris8"),
    ("solaris9Guest", "solaris9"),
    ("suse64Guest", "suse"),
    ("suseGuest", "suse"),
    ("turboLinux64Guest", "turbolinux"),
    ("turboLinuxGuest", "turbolinux"),
    ("ubuntu64Guest", "ubuntu"),
    ("ubuntuGuest", "ubuntu"),
    ("unixWare7Guest", "unixware7"),
    ("vmkernel5Guest", "vmkernel5"),
    ("vmkernel65Guest", "vmkernel65"),
    ("vmkernel6Guest", "vmkernel6"),
    ("vmkernelGuest", "vmkernel"),
    ("vmwarePhoton64Guest", "photon"),
    ("win2000AdvServGuest", "win2000advserv"),
    ("win2000ProGuest", "win2000pro"),
    ("win2000ServGuest", "win2000serv"),
    ("win31Guest", "win31"),
    ("win95Guest", "win95"),
    ("win98Guest", "win98"),
    ("winLonghorn64Guest", "winlonghorn"),
    ("winLonghornGuest", "winlonghorn"),
    ("winMeGuest", "winme"),
    ("winNTGuest", "winnt"),
    ("winNetBusinessGuest", "winnetbusiness"),
    ("winNetDatacenter64Guest", "winnetdatacenter"),
    ("winNetDatacenterGuest", "winnetdatacenter"),
    ("winNetEnterprise64Guest", "winnetenterprise"),
    ("winNetEnterpriseGuest", "winnetenterprise"),
    ("winNetStandard64Guest", "winnetstandard"),
    ("winNetStandardGuest", "winnetstandard"),
    ("winNetWebGuest", "winnetweb"),
    ("winVista64Guest", "winvista"),
    ("winVistaGuest", "winvista"),
    ("winXPHomeGuest", "winxphome"),
    ("winXPPro64Guest", "winxppro"),
    ("winXPProGuest", "winxppro"),
    ("windows7Guest", "win7"),
    ("windows7Server64Guest", "win7server"),
    ("windows7_64Guest", "win7"),
    ("windows8Guest", "win8"),
    ("windows8Server64Guest", "win8server"),
    ("windows8_64Guest", "win8"),
    ("windows9Guest", "win10"),
    ("windows9Server64Guest", "win10server"),
    ("windows9_64Guest", "win10"),
    ("windowsHyperVGuest", "windowshyperv"),
];

/// The short name CPI uses for `guest_id`; `unknown` for a guestId CPI's table lacks.
pub fn guest_os(guest_id: &str) -> &'static str {
    GUEST_OS
        .binary_search_by(|(id, _)| (*id).cmp(guest_id))
        .map(|i| GUEST_OS[i].1)
        .unwrap_or("unknown")
}

/// The instance type of a VM with `num_cpu` vCPUs, `memory_mb` MB and guest OS `guest_id`.
/// Memory is in whole GB rounded down, as CPI (1536 MB is `mem-1gb`).
pub fn instance_type(num_cpu: i64, memory_mb: i64, guest_id: &str) -> String {
    format!(
        "vsphere-vm.cpu-{num_cpu}.mem-{}gb.os-{}",
        memory_mb / 1024,
        guest_os(guest_id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpi_instance_types() {
        assert!(
            GUEST_OS.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, no duplicates"
        );
        for (cpu, mem, guest, want) in [
            (2, 8192, "ubuntu64Guest", "vsphere-vm.cpu-2.mem-8gb.os-ubuntu"),
            (2, 1536, "ubuntu64Guest", "vsphere-vm.cpu-2.mem-1gb.os-ubuntu"),
            (1, 32, "otherGuest", "vsphere-vm.cpu-1.mem-0gb.os-other"),
            (
                4,
                16384,
                "vmwarePhoton64Guest",
                "vsphere-vm.cpu-4.mem-16gb.os-photon",
            ),
            (
                8,
                32768,
                "windows9Server64Guest",
                "vsphere-vm.cpu-8.mem-32gb.os-win10server",
            ),
            (2, 4096, "debian11_64Guest", "vsphere-vm.cpu-2.mem-4gb.os-unknown"),
            (
                2,
                4096,
                "windows2019srv_64Guest",
                "vsphere-vm.cpu-2.mem-4gb.os-unknown",
            ),
            (2, 4096, "", "vsphere-vm.cpu-2.mem-4gb.os-unknown"),
        ] {
            assert_eq!(instance_type(cpu, mem, guest), want);
        }
    }
}
