//! CPI's `TestDiscoverNodeIPs` cases (reference §4, numbered as there) and its helper tests.

use super::*;

const LO6: &str = "127.0.0.6";
const LO7: &str = "127.0.0.7";

fn nic(network: &str, ips: &[&str]) -> GuestNic {
    GuestNic {
        network: network.into(),
        ips: ips.iter().map(|s| (*s).to_owned()).collect(),
        device_config_id: 4000,
    }
}

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// One case: families, `[Nodes]`, NICs, static addresses, and the expected (kind, address)
/// pairs after the Hostname (`I`/`E`), or an error.
struct Case {
    n: u32,
    families: Vec<IpFamily>,
    sel: Selection,
    nics: Vec<GuestNic>,
    statics: Vec<&'static str>,
    want: Result<Vec<(&'static str, &'static str)>, ()>,
}

const V4: IpFamily = IpFamily::V4;
const V6: IpFamily = IpFamily::V6;

fn sel(int: &[&str], ext: &[&str]) -> Selection {
    Selection {
        internal_cidrs: nets(int),
        external_cidrs: nets(ext),
        ..Selection::default()
    }
}

fn names(int: Option<&str>, ext: Option<&str>) -> Selection {
    Selection {
        internal_network: int.map(Into::into),
        external_network: ext.map(Into::into),
        ..Selection::default()
    }
}

fn with_names(mut s: Selection, int: Option<&str>, ext: Option<&str>) -> Selection {
    s.internal_network = int.map(Into::into);
    s.external_network = ext.map(Into::into);
    s
}

fn excl(mut s: Selection, int: &[&str], ext: &[&str]) -> Selection {
    s.exclude_internal = nets(int);
    s.exclude_external = nets(ext);
    s
}

fn ie(i: &'static str, e: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![("I", i), ("E", e)]
}

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    let none = Selection::default;
    let nics_1 = || {
        vec![nic(
            "net_123abc",
            &[
                LO6,
                "20.30.40.50",
                "10.10.1.22",
                "10.10.1.23",
                "172.15.108.10",
                "172.15.108.11",
            ],
        )]
    };
    let nics_11 = || {
        vec![
            nic("net_123abc", &[LO6, "169.0.1.2"]),
            nic("internal_net", &["10.10.1.22"]),
            nic("external_net", &["172.15.108.11"]),
        ]
    };
    let nics_13 = || {
        vec![
            nic("net_123abc", &[LO6, "169.0.1.2", "10.10.1.22"]),
            nic("test_another_nic", &[LO7, "172.15.108.11"]),
        ]
    };
    let nics_16 = || {
        vec![
            nic("net_123abc", &[LO6]),
            nic("internal_net", &["10.10.5.8"]),
            nic("external_net", &["172.15.2.3"]),
        ]
    };
    let nics_21 = || {
        vec![
            nic("internal_net", &[LO6, "10.10.1.22", "10.10.1.23"]),
            nic("external_net", &[LO7, "172.15.108.10", "172.15.108.11"]),
        ]
    };
    let nics_24 = || {
        vec![
            nic("internal_net", &["22.22.22.22", "172.15.108.11"]),
            nic("external_net", &["33.33.33.33", "10.10.1.22"]),
        ]
    };
    let nics_8 = || {
        vec![
            nic("net_foo", &[LO6, "169.0.1.2"]),
            nic("net_bar", &["10.10.1.22", "fd00:dddd::11"]),
            nic("net_baz", &["172.15.108.11", "fd00:cccc::22"]),
        ]
    };
    let nics_33 = || {
        vec![
            nic("net_a", &["172.15.108.11", "fd00:cccc::1"]),
            nic("net_b", &["fd00:cccc::2"]),
        ]
    };
    let nics_37 = || {
        vec![
            nic(
                "internal_net",
                &[
                    "172.15.108.11",
                    "172.15.108.12",
                    "172.15.108.13",
                    "fd00:cccc::1",
                    "fd00:cccc::2",
                    "fd00:cccc::3",
                ],
            ),
            nic(
                "external_net",
                &[
                    "173.15.108.11",
                    "173.15.108.12",
                    "173.15.108.13",
                    "fd01:cccc::1",
                    "fd01:cccc::2",
                    "fd01:cccc::3",
                ],
            ),
        ]
    };
    let vm_net_42 = || vec![nic("VM Network", &["fe80::1", "fd01:1234::1", "fd01:cccc::1"])];
    let vm_net_44 = || vec![nic("VM Network", &["192.168.1.10", "192.168.1.12"])];
    let vm_net_46 = || {
        vec![nic(
            "VM Network",
            &["192.168.1.10", "192.168.1.12", "10.10.10.10"],
        )]
    };
    let mut v6_first = nics_33();
    v6_first[0].ips.swap(0, 1);
    let mut with_vnic = nics_24();
    let mut vnic = nic("vnic-device", &["254.10.1.2", "253.15.2.4"]);
    vnic.device_config_id = -1;
    with_vnic.insert(0, vnic);
    let cidrs_37 = sel(
        &["172.15.0.0/16", "fd00:cccc::0/32"],
        &["173.15.0.0/16", "fd01:cccc::0/32"],
    );
    let excl_37 = |s| {
        excl(
            s,
            &["172.15.108.11/32", "fd00:cccc::1/128", "fd00:cccc::2/128"],
            &["173.15.108.11/32", "173.15.108.12/32", "fd01:cccc::1/128"],
        )
    };
    let want_37 = vec![
        ("I", "172.15.108.12"),
        ("E", "173.15.108.13"),
        ("I", "fd00:cccc::3"),
        ("E", "fd01:cccc::2"),
    ];
    let c = |n, families: Vec<IpFamily>, sel, nics, want| Case {
        n,
        families,
        sel,
        nics,
        statics: vec![],
        want,
    };
    vec![
        c(
            1,
            vec![V4],
            sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
            nics_1(),
            Ok(ie("10.10.1.22", "172.15.108.10")),
        ),
        c(
            2,
            vec![V4],
            names(Some("internal_net"), Some("external_net")),
            nics_21(),
            Ok(ie("10.10.1.22", "172.15.108.10")),
        ),
        c(
            3,
            vec![V4],
            none(),
            vec![
                nic("net_123abc", &[LO6, "10.10.1.22", "10.10.1.23"]),
                nic("test_another_nic", &[LO7, "172.15.108.11"]),
            ],
            Ok(ie("10.10.1.22", "10.10.1.22")),
        ),
        c(
            4,
            vec![V6],
            sel(&["fd00:cccc::/64"], &["fd00:bbbb::/64"]),
            vec![nic(
                "net",
                &[
                    "fe80::1",
                    "fd00:aaaa::1",
                    "fd00:cccc::1",
                    "fd00:cccc::2",
                    "fd00:bbbb::1",
                    "fd00:bbbb::2",
                ],
            )],
            Ok(ie("fd00:cccc::1", "fd00:bbbb::1")),
        ),
        c(
            5,
            vec![V6],
            names(Some("internal_net"), Some("external_net")),
            vec![
                nic("internal_net", &["fe80::3", "fd00:cccc::1", "fd00:cccc::2"]),
                nic("external_net", &["fe80::2", "fd00:bbbb::1", "fd00:bbbb::2"]),
            ],
            Ok(ie("fd00:cccc::1", "fd00:bbbb::1")),
        ),
        c(
            6,
            vec![V6],
            none(),
            vec![
                nic("net_a", &["fe80::3", "fd00:cccc::1", "fd00:cccc::2"]),
                nic("net_b", &["fe80::2", "fd00:bbbb::1", "fd00:bbbb::2"]),
            ],
            Ok(ie("fd00:cccc::1", "fd00:cccc::1")),
        ),
        c(
            7,
            vec![V4],
            names(Some("internal_net"), Some("external_net")),
            {
                let mut n = nics_11();
                n[1].ips = vec!["10.10.10.10".into()];
                n
            },
            Ok(ie("10.10.10.10", "172.15.108.11")),
        ),
        c(
            8,
            vec![V4, V6],
            sel(
                &["10.10.0.0/16", "fd00:cccc::/64"],
                &["172.15.0.0/16", "fd00:dddd::/64"],
            ),
            nics_8(),
            Ok(vec![
                ("I", "10.10.1.22"),
                ("E", "172.15.108.11"),
                ("I", "fd00:cccc::22"),
                ("E", "fd00:dddd::11"),
            ]),
        ),
        c(
            9,
            vec![V4, V6],
            sel(
                &["10.10.0.0/16", "fd00:ffff::/64"],
                &["172.15.0.0/16", "fd00:eeee::/64"],
            ),
            nics_8(),
            Ok(vec![
                ("I", "10.10.1.22"),
                ("E", "172.15.108.11"),
                ("I", "fd00:dddd::11"),
                ("E", "fd00:dddd::11"),
            ]),
        ),
        c(
            10,
            vec![V4, V6],
            sel(
                &["10.10.0.0/16", "fd00:ffff::/64"],
                &["172.15.0.0/16", "fd00:dddd::/64"],
            ),
            nics_8(),
            Ok(vec![
                ("I", "10.10.1.22"),
                ("E", "172.15.108.11"),
                ("E", "fd00:dddd::11"),
            ]),
        ),
        c(
            11,
            vec![V4],
            sel(&["170.12.0.0/16", "10.10.0.0/16"], &["172.15.0.0/16"]),
            nics_11(),
            Ok(ie("10.10.1.22", "172.15.108.11")),
        ),
        c(
            12,
            vec![V4],
            sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
            nics_11(),
            Ok(ie("10.10.1.22", "172.15.108.11")),
        ),
        c(
            13,
            vec![V4],
            sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
            nics_13(),
            Ok(ie("10.10.1.22", "172.15.108.11")),
        ),
        c(
            14,
            vec![V4],
            sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
            vec![
                nic("net_123abc", &[LO6, "169.0.1.2", "10.10.1.22"]),
                nic("other", &[LO7]),
            ],
            Ok(vec![("I", "10.10.1.22")]),
        ),
        c(
            15,
            vec![V4],
            sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
            vec![
                nic("net_123abc", &[LO6, "169.0.1.2", "172.15.108.11"]),
                nic("other", &[LO7]),
            ],
            Ok(vec![("E", "172.15.108.11")]),
        ),
        c(
            16,
            vec![V4],
            names(Some("no-matches"), Some("external_net")),
            nics_16(),
            Ok(vec![("E", "172.15.2.3")]),
        ),
        c(
            17,
            vec![V4],
            names(Some("internal_net"), Some("no-matches")),
            nics_16(),
            Ok(vec![("I", "10.10.5.8")]),
        ),
        c(
            18,
            vec![V4],
            sel(&[], &["172.15.0.0/16"]),
            nics_1(),
            Ok(vec![("E", "172.15.108.10")]),
        ),
        c(
            19,
            vec![V4],
            sel(&["10.10.0.0/16"], &[]),
            nics_1(),
            Ok(vec![("I", "10.10.1.22")]),
        ),
        c(
            20,
            vec![V4],
            names(Some("InTerNal_NEt"), Some("ExTeRnAL_NeT")),
            vec![
                nic("internal_net", &[LO6, "20.30.40.50"]),
                nic("external_net", &[LO6, "20.30.40.51"]),
            ],
            Ok(ie("20.30.40.50", "20.30.40.51")),
        ),
        c(
            21,
            vec![V4],
            names(None, Some("external_net")),
            nics_21(),
            Ok(vec![("E", "172.15.108.10")]),
        ),
        c(
            22,
            vec![V4],
            names(Some("internal_net"), None),
            nics_21(),
            Ok(vec![("I", "10.10.1.22")]),
        ),
        c(
            23,
            vec![V4],
            with_names(sel(&["10.10.0.0/16"], &[]), None, Some("test_another_nic")),
            nics_13(),
            Ok(ie("10.10.1.22", "172.15.108.11")),
        ),
        c(
            24,
            vec![V4],
            with_names(
                sel(&["10.10.0.0/16"], &["172.15.0.0/16"]),
                Some("internal_net"),
                Some("external_net"),
            ),
            nics_24(),
            Ok(ie("10.10.1.22", "172.15.108.11")),
        ),
        c(
            25,
            vec![V4],
            with_names(
                sel(&["254.10.0.0/16"], &["253.15.0.0/16"]),
                Some("internal_net"),
                Some("external_net"),
            ),
            nics_24(),
            Ok(ie("22.22.22.22", "33.33.33.33")),
        ),
        c(
            26,
            vec![V4],
            with_names(
                sel(&["254.10.0.0/16"], &["253.15.0.0/16"]),
                Some("internal_net"),
                Some("external_net"),
            ),
            with_vnic,
            Ok(ie("22.22.22.22", "33.33.33.33")),
        ),
        c(
            27,
            vec![V4],
            names(Some("internal_net"), Some("external_net")),
            vec![nic("net_a", &["10.10.1.22"]), nic("net_b", &["172.15.108.11"])],
            Err(()),
        ),
        c(
            28,
            vec![V4],
            none(),
            vec![
                nic("net_123abc", &["blarg", LO6, "10.10.1.22", "10.10.1.23"]),
                nic("other", &[LO7, "172.15.108.11"]),
            ],
            Ok(ie("10.10.1.22", "10.10.1.22")),
        ),
        c(
            29,
            vec![V4],
            none(),
            vec![nic("net_a", &["172.15.108.11"]), nic("net_b", &[])],
            Ok(ie("172.15.108.11", "172.15.108.11")),
        ),
        c(
            30,
            vec![V4],
            none(),
            vec![nic("net_a", &[]), nic("net_b", &["172.15.108.11"])],
            Ok(ie("172.15.108.11", "172.15.108.11")),
        ),
        c(
            31,
            vec![V4],
            none(),
            vec![nic("net_a", &["fd00:cccc::1"]), nic("net_b", &["172.15.108.11"])],
            Ok(ie("172.15.108.11", "172.15.108.11")),
        ),
        c(
            32,
            vec![V4],
            none(),
            vec![
                nic("net_a", &["172.15.108.11", "fe80:cccc::1"]),
                nic("net_b", &["fe80:cccc::2"]),
            ],
            Ok(ie("172.15.108.11", "172.15.108.11")),
        ),
        c(
            33,
            vec![V4, V6],
            none(),
            nics_33(),
            Ok(vec![
                ("I", "172.15.108.11"),
                ("E", "172.15.108.11"),
                ("I", "fd00:cccc::1"),
                ("E", "fd00:cccc::1"),
            ]),
        ),
        c(
            34,
            vec![V4, V6],
            excl(
                none(),
                &["172.15.108.11/32", "fd00:cccc::1/128", "fd00:cccc::2/128"],
                &["172.15.108.11/32", "172.15.108.12/32", "fd00:cccc::1/128"],
            ),
            vec![
                nic(
                    "net_a",
                    &["172.15.108.11", "172.15.108.12", "172.15.108.13", "fd00:cccc::1"],
                ),
                nic("net_b", &["fd00:cccc::2", "fd00:cccc::3"]),
            ],
            Ok(vec![
                ("I", "172.15.108.12"),
                ("E", "172.15.108.13"),
                ("I", "fd00:cccc::3"),
                ("E", "fd00:cccc::2"),
            ]),
        ),
        c(
            35,
            vec![V6, V4],
            none(),
            nics_33(),
            Ok(vec![
                ("I", "fd00:cccc::1"),
                ("E", "fd00:cccc::1"),
                ("I", "172.15.108.11"),
                ("E", "172.15.108.11"),
            ]),
        ),
        c(
            36,
            vec![V6, V4],
            names(Some("internal_net"), Some("external_net")),
            vec![
                nic("internal_net", &["172.15.108.11", "fd00:cccc::1"]),
                nic("external_net", &["fd00:cccc::2", "172.15.108.12"]),
            ],
            Ok(vec![
                ("I", "fd00:cccc::1"),
                ("E", "fd00:cccc::2"),
                ("I", "172.15.108.11"),
                ("E", "172.15.108.12"),
            ]),
        ),
        c(
            37,
            vec![V4, V6],
            excl_37(cidrs_37),
            nics_37(),
            Ok(want_37.clone()),
        ),
        c(
            38,
            vec![V4, V6],
            excl_37(names(Some("internal_net"), Some("external_net"))),
            nics_37(),
            Ok(want_37),
        ),
        c(
            39,
            vec![V6, V4],
            excl(none(), &["172.15.108.11/8"], &["172.15.108.11/8"]),
            vec![nic("internal_net", &["172.15.108.11", "fd00:cccc::1"])],
            Err(()),
        ),
        c(
            40,
            vec![V6, V4],
            excl(none(), &["fd00:cccc::1/16"], &["fd00:cccc::1/16"]),
            vec![nic("internal_net", &["172.15.108.11", "fd00:cccc::1"])],
            Err(()),
        ),
        c(
            41,
            vec![V6, V4],
            none(),
            vec![nic("internal_net", &["127.0.0.1", "fd00:cccc::1"])],
            Err(()),
        ),
        c(
            42,
            vec![V6],
            none(),
            vm_net_42(),
            Ok(ie("fd01:1234::1", "fd01:1234::1")),
        ),
        Case {
            statics: vec!["fd01:cccc::1"],
            ..c(
                43,
                vec![V6],
                none(),
                vm_net_42(),
                Ok(ie("fd01:cccc::1", "fd01:cccc::1")),
            )
        },
        Case {
            statics: vec!["192.168.1.12"],
            ..c(
                44,
                vec![V4],
                none(),
                vm_net_44(),
                Ok(ie("192.168.1.12", "192.168.1.12")),
            )
        },
        Case {
            statics: vec!["192.168.1.12", "192.168.1.10"],
            ..c(
                45,
                vec![V4],
                none(),
                vm_net_44(),
                Ok(ie("192.168.1.12", "192.168.1.12")),
            )
        },
        Case {
            statics: vec!["10.10.10.10", "192.168.1.12"],
            ..c(
                46,
                vec![V4],
                sel(&["192.168.0.0/16"], &["192.168.0.0/16"]),
                vm_net_46(),
                Ok(ie("192.168.1.12", "192.168.1.12")),
            )
        },
        Case {
            statics: vec!["192.168.1.12", "10.10.10.10"],
            ..c(
                47,
                vec![V4],
                excl(none(), &["192.168.0.0/16"], &["192.168.0.0/16"]),
                vm_net_46(),
                Ok(ie("10.10.10.10", "10.10.10.10")),
            )
        },
        Case {
            statics: vec!["192.168.1.8", "192.168.1.12", "10.10.10.10"],
            ..c(
                48,
                vec![V4],
                names(Some("VM Network"), Some("VM Network")),
                vec![
                    nic("internal_net", &["192.168.1.8"]),
                    nic("VM Network", &["192.168.1.10", "192.168.1.12", "10.10.10.10"]),
                ],
                Ok(ie("192.168.1.12", "192.168.1.12")),
            )
        },
        Case {
            statics: vec!["192.168.1.12", "10.10.10.10"],
            ..c(
                49,
                vec![V4],
                none(),
                vec![nic("VM Network", &["192.168.1.8"])],
                Ok(ie("192.168.1.8", "192.168.1.8")),
            )
        },
        Case {
            statics: vec!["fd01:1:2:2919:abba:0000:0000:401"],
            ..c(
                50,
                vec![V6],
                none(),
                vec![nic("VM Network", &["fd00::1", "fd01:1:2:2919:abba::401"])],
                Ok(ie("fd01:1:2:2919:abba::401", "fd01:1:2:2919:abba::401")),
            )
        },
    ]
}

#[test]
fn cpi_discover_node_ip_cases() {
    for case in cases() {
        let statics: Vec<IpAddr> = case.statics.iter().map(|s| s.parse().unwrap()).collect();
        let got = node_addresses("node-x", &case.nics, &case.sel, &case.families, &statics);
        match (got, case.want) {
            (Ok(got), Ok(want)) => {
                let mut expected = vec![NodeAddress::new(AddressType::Hostname, "node-x")];
                for (kind, ip) in want {
                    let kind = if kind == "I" {
                        AddressType::InternalIP
                    } else {
                        AddressType::ExternalIP
                    };
                    expected.push(NodeAddress::new(kind, ip));
                }
                // CPI de-duplicates on (type, address): I and E of one IP are both listed.
                assert_eq!(got, expected, "case {}", case.n);
            }
            (Err(_), Err(())) => {}
            (got, want) => panic!("case {}: got {got:?}, want {want:?}", case.n),
        }
    }
}

#[test]
fn cpi_error_messages() {
    let err = node_addresses(
        "n",
        &[nic("a", &["10.0.0.1"])],
        &names(Some("x"), Some("y")),
        &[V4],
        &[],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("unable to find suitable IP address for node")
    );
    let err = node_addresses(
        "n",
        &[nic("a", &["127.0.0.1", "fe80::1"])],
        &Selection::default(),
        &[V4],
        &[],
    )
    .unwrap_err();
    assert_eq!(err, AddressError::OnlyLocal);
    let err = node_addresses(
        "n",
        &[nic("a", &["10.0.0.1"])],
        &Selection::default(),
        &[V4, V6],
        &[],
    )
    .unwrap_err();
    assert_eq!(err, AddressError::NoAddressOfFamily("ipv6"));
}

/// CPI's `TestExcludeLocalhostIPs`, `TestFindSubnetMatch` (CIDR order wins over IP order) and
/// `TestDiscoverNodeWithMultiIFByName`.
#[test]
fn cpi_helper_cases() {
    for (ip, local) in [
        ("0.0.0.0", true),
        ("::", true),
        ("224.0.0.1", true),
        ("ff02::1", true),
        ("169.254.0.1", true),
        ("fe80::1", true),
        ("127.0.0.1", true),
        ("::1", true),
        ("192.168.1.1", false),
        ("fd00:100:64::1", false),
    ] {
        assert_eq!(is_local(ip.parse().unwrap()), local, "{ip}");
    }
    let got = node_addresses(
        "n",
        &[nic("a", &["192.168.1.1", "10.10.1.2", "10.10.1.3"])],
        &sel(&["10.11.0.0/16", "10.10.0.0/16"], &[]),
        &[V4],
        &[],
    )
    .unwrap();
    assert_eq!(got[1], NodeAddress::new(AddressType::InternalIP, "10.10.1.2"));
    let got = node_addresses(
        "n",
        &[nic(
            "a",
            &["fc11::1", "fd00:101:64::2", "fd00:100:64::1", "fd00:100:64::2"],
        )],
        &sel(&["fd00:100:64::/64", "fd00:101:64::/64"], &[]),
        &[V6],
        &[],
    )
    .unwrap();
    assert_eq!(
        got[1],
        NodeAddress::new(AddressType::InternalIP, "fd00:100:64::1")
    );
    let got = node_addresses(
        "n",
        &[
            nic("net", &["fe80::250:56ff:fe8b:1"]),
            nic("net", &["10.10.108.12", "10.10.108.10", "fe80::250:56ff:fe8b:2"]),
        ],
        &Selection::default(),
        &[V4],
        &[],
    )
    .unwrap();
    assert_eq!(
        &got[1..],
        &[
            NodeAddress::new(AddressType::InternalIP, "10.10.108.12"),
            NodeAddress::new(AddressType::ExternalIP, "10.10.108.12")
        ]
    );
    assert_eq!(IpFamily::parse(" IPv4"), Some(V4));
    assert_eq!(IpFamily::parse("ipv7"), None);
}

/// CPI #614: a keepalived VIP reported first on the node's NIC. With the VIP excluded the
/// node's own address is chosen; without, CPI's default picks the VIP (as CPI does).
#[test]
fn a_vip_on_the_node_is_excluded_by_exclude_cidr() {
    let nics = [nic("VM Network", &["10.0.0.100", "10.0.0.11"])];
    let plain = node_addresses("n", &nics, &Selection::default(), &[V4], &[]).unwrap();
    assert_eq!(plain[1].address, "10.0.0.100");
    let s = excl(Selection::default(), &["10.0.0.100/32"], &["10.0.0.100/32"]);
    let got = node_addresses("n", &nics, &s, &[V4], &[]).unwrap();
    assert_eq!(
        &got[1..],
        &[
            NodeAddress::new(AddressType::InternalIP, "10.0.0.11"),
            NodeAddress::new(AddressType::ExternalIP, "10.0.0.11")
        ]
    );
}

proptest::proptest! {
    /// Any guest report: no panic; Hostname first; at most one InternalIP and one ExternalIP per
    /// family, each one of the reported addresses.
    #[test]
    fn fuzz_node_addresses(
        ips in proptest::collection::vec("(10\\.0\\.0\\.[0-9]|fd00::[0-9]|fe80::1|127\\.0\\.0\\.1|x)", 0..6),
        ids in proptest::collection::vec(-1i32..2, 1..3),
    ) {
        let nics: Vec<GuestNic> = ids.iter().map(|id| GuestNic { network: "n".into(), ips: ips.clone(), device_config_id: *id }).collect();
        if let Ok(got) = node_addresses("h", &nics, &Selection::default(), &[V4, V6], &[]) {
            proptest::prop_assert_eq!(got[0].kind, AddressType::Hostname);
            proptest::prop_assert!(got.len() <= 5);
            for a in &got[1..] {
                proptest::prop_assert!(ips.contains(&a.address));
            }
        }
    }
}
