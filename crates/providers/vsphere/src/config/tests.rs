//! CPI's config tests (`pkg/common/config`, `vsphere_test.go`, reference §10) and ours.

use super::*;

fn env_with(vars: &'static [(&'static str, &'static str)]) -> Environment<'static> {
    Environment {
        var: Box::leak(Box::new(move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })),
        names: Box::leak(Box::new(move || {
            vars.iter().map(|(k, _)| (*k).to_owned()).collect()
        })),
        default_secrets_dir_exists: false,
    }
}

fn env() -> Environment<'static> {
    env_with(&[])
}

fn ok(text: &str) -> Read {
    parse(text, env()).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

fn err(text: &str) -> String {
    parse(text, env())
        .err()
        .unwrap_or_else(|| panic!("accepted: {text}"))
        .to_string()
}

const YAML: &str = "global:
  user: user
  password: pass
  port: 443
  insecureFlag: true
  secretName: global-secret
  secretNamespace: kube-system
vcenter:
  tenant1:
    server: 10.0.0.1
    datacenters:
      - vic0dc
    secretName: tenant1-secret
    secretNamespace: kube-system
  tenant2:
    server: 10.0.0.2
    user: u2
    password: p2
    port: 444
labels:
  region: k8s-region
  zone: k8s-zone
nodes:
  internalNetworkSubnetCidr: 10.0.0.0/8
  excludeExternalNetworkSubnetCidr: 10.1.0.0/16,10.2.0.0/16
";

const INI: &str = "[Global]
user = user
password = pass
port = 443
insecure-flag = true
secret-name = global-secret
secret-namespace = kube-system

[VirtualCenter \"tenant1\"]
server = 10.0.0.1
datacenters = vic0dc
secret-name = tenant1-secret
secret-namespace = kube-system

[VirtualCenter \"tenant2\"]
server = 10.0.0.2
user = u2
password = p2
port = 444

[Labels]
region = k8s-region
zone = k8s-zone

[Nodes]
internal-network-subnet-cidr = 10.0.0.0/8
exclude-external-network-subnet-cidr = 10.1.0.0/16, 10.2.0.0/16
";

/// CPI's TestReadConfig/TestTenantRefs: the same file in both formats means the same.
#[test]
fn yaml_and_ini_read_the_same() {
    let y = ok(YAML);
    let i = ok(INI);
    assert_eq!(y.config.format, Format::Yaml);
    assert_eq!(i.config.format, Format::Ini);
    assert_eq!(
        Config {
            format: Format::Yaml,
            ..i.config.clone()
        },
        y.config
    );
    let c = y.config;
    assert_eq!(c.vcenters.len(), 2);
    let t1 = &c.vcenters[0];
    assert_eq!(
        (t1.tenant.as_str(), t1.server.as_str(), t1.port),
        ("tenant1", "10.0.0.1", 443)
    );
    assert_eq!(t1.user, "user", "inherited");
    assert!(t1.insecure);
    assert_eq!(t1.datacenters, ["vic0dc"]);
    assert_eq!(
        t1.secret,
        Some(SecretRef {
            namespace: "kube-system".into(),
            name: "tenant1-secret".into()
        })
    );
    let t2 = &c.vcenters[1];
    assert_eq!((t2.user.as_str(), t2.port), ("u2", 444));
    assert_eq!(t2.secret.as_ref().map(|s| s.name.as_str()), Some("global-secret"));
    assert_eq!(t2.sdk_url(), "https://10.0.0.2:444/sdk");
    assert_eq!(c.labels.zone.as_deref(), Some("k8s-zone"));
    assert_eq!(
        c.nodes.internal_cidrs,
        vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]
    );
    assert_eq!(c.nodes.exclude_external.len(), 2);
    assert_eq!(t1.ip_families, [IpFamily::V4], "CPI's default");
}

/// CPI's validation messages; a YAML error is reported as YAML, an INI error as INI.
#[test]
fn cpi_validation_messages() {
    assert!(err("").contains("no vSphere cloud provider config file given"));
    assert!(err("global:\n  user: u\n  password: p\n").contains("No Virtual Center hosts defined"));
    assert!(err("[Global]\nuser = u\npassword = p\n").contains("No Virtual Center hosts defined"));
    assert!(
        err("vcenter:\n  x:\n    user: u\n    password: p\n")
            .contains("does not have the VirtualCenter IP address specified")
    );
    assert!(err("[VirtualCenter \"1.1.1.1\"]\npassword = p\n").contains("Username is missing"));
    assert!(err("[VirtualCenter \"1.1.1.1\"]\nuser = u\n").contains("Password is missing"));
    // CPI: `INI=[2:9: expected EOL, EOF, or comment]` for `[Global]]`.
    let e = err("\n[Global]]\nuser = u\n");
    assert!(e.contains("INI") && e.contains("line 2"), "{e}");
    assert!(err("plain text, neither").contains("neither YAML"));
    assert!(err("global: [1, 2]\n").contains("global is not a mapping"));
    let e = err("[Global]\nserver = 1.1.1.1\nuser = u\npassword = p\nport = abc\n");
    assert!(e.contains("line 5") && e.contains("port"), "{e}");
    let e = err(
        "[Global]\nserver = 1.1.1.1\nuser = u\npassword = p\n[Nodes]\ninternal-network-subnet-cidr = 10.0.0.0/33\n",
    );
    assert!(
        e.contains("internal-network-subnet-cidr") && e.contains("not a CIDR"),
        "{e}"
    );
}

/// CPI's TestIPFamiliesINI and Test_validateDualStack.
#[test]
fn ip_families_and_the_dual_stack_gate() {
    let with = |fam: &str| format!("[VirtualCenter \"v\"]\nuser = u\npassword = p\nip-family = {fam}\n");
    assert_eq!(ok(&with("ipv6")).config.vcenters[0].ip_families, [IpFamily::V6]);
    assert_eq!(ok(&with("ipv4")).config.vcenters[0].ip_families, [IpFamily::V4]);
    assert_eq!(ok(&with("ipv4, ")).config.vcenters[0].ip_families, [IpFamily::V4]);
    assert!(err(&with("ipv7")).contains("not an IP family"));
    assert!(err(&with("ipv4,ipv7")).contains("ipv7"));
    assert!(err(&with("ipv6,ipv4")).contains("ENABLE_ALPHA_DUAL_STACK"));
    let read = parse(&with("ipv6,ipv4"), env_with(&[("ENABLE_ALPHA_DUAL_STACK", "")])).unwrap();
    assert_eq!(read.config.vcenters[0].ip_families, [IpFamily::V6, IpFamily::V4]);
    // ours: CPI validates `IPv4` and then matches no address; we read it as ipv4
    assert_eq!(ok(&with("IPv4")).config.vcenters[0].ip_families, [IpFamily::V4]);
}

/// CPI's TestSecretVSphereConfig, in substance: where credentials may come from.
#[test]
fn credentials_may_come_from_a_secret_or_the_secrets_directory() {
    // a Secret alone: no user or password needed in the file
    let c =
        ok("[Global]\nsecret-name = s\nsecret-namespace = kube-system\n[VirtualCenter \"0.0.0.0\"]\n").config;
    assert_eq!(c.vcenters[0].secret.as_ref().unwrap().name, "s");
    assert!(c.vcenters[0].user.is_empty());
    // a secret name without its namespace is no Secret: credentials are required
    assert!(err("[Global]\nsecret-name = s\n[VirtualCenter \"0.0.0.0\"]\n").contains("Username is missing"));
    // [VirtualCenter "0.0.0.0"] inherits the global credentials
    let c = ok("[Global]\nuser = u\npassword = p\n[VirtualCenter \"0.0.0.0\"]\n").config;
    assert_eq!(
        (c.vcenters[0].user.as_str(), c.vcenters[0].password.0.as_str()),
        ("u", "p")
    );
    // per-vCenter thumbprints, a global CA for all
    let c = ok("[Global]\nuser = u\npassword = p\nca-file = /ca.pem\n[VirtualCenter \"0.0.0.0\"]\nthumbprint = thumbprint:0\n[VirtualCenter \"1.1.1.1\"]\nthumbprint = thumbprint:1\n").config;
    assert_eq!(c.vcenters[0].thumbprint.as_deref(), Some("thumbprint:0"));
    assert_eq!(c.vcenters[1].thumbprint.as_deref(), Some("thumbprint:1"));
    assert!(
        c.vcenters
            .iter()
            .all(|v| v.ca_file.as_deref() == Some(Path::new("/ca.pem")))
    );
    // the default secrets directory, when it exists, replaces the need for credentials
    let e = Environment {
        default_secrets_dir_exists: true,
        ..env()
    };
    let c = parse("[VirtualCenter \"v\"]\n", e).unwrap().config;
    assert_eq!(
        c.secrets_directory.as_deref(),
        Some(Path::new(DEFAULT_SECRETS_DIR))
    );
    // [Global] server adds a vCenter of its own
    let c = ok("[Global]\nserver = vc.example\nuser = u\npassword = p\nport = 8443\n").config;
    assert_eq!(c.vcenters[0].sdk_url(), "https://vc.example:8443/sdk");
    let c = ok("global:\n  server: fd00::1\n  user: u\n  password: p\n").config;
    assert_eq!(c.vcenters[0].sdk_url(), "https://[fd00::1]:443/sdk");
}

/// CPI #1455: INI keys in a YAML file (and the reverse) are read by their meaning, with a notice
/// naming each; unknown keys and keys without effect are named too.
#[test]
fn the_other_formats_spelling_is_read_with_a_notice() {
    let r = ok("global:
  user: u
  password: p
  insecure-flag: 1
  ca-file: /ca.pem
vcenter:
  vc:
    server: vc
nodes:
  exclude-internal-network-subnet-cidr: 10.0.0.100/32
  internalNetworkSubnetCidr: 10.0.0.0/24
");
    let vc = &r.config.vcenters[0];
    assert!(vc.insecure);
    assert_eq!(vc.ca_file.as_deref(), Some(Path::new("/ca.pem")));
    assert_eq!(r.config.nodes.exclude_internal.len(), 1);
    let notices = r.notices.join("\n");
    for key in ["insecure-flag", "ca-file", "exclude-internal-network-subnet-cidr"] {
        assert!(notices.contains(key), "{notices}");
    }
    assert!(!notices.contains("internalNetworkSubnetCidr"), "{notices}");
    let r = ok(
        "[Global]\nuser = u\npassword = p\ninsecureFlag = true\nsoap-roundtrip-count = 3\nfoo = bar\n[VirtualCenter \"v\"]\n[Bogus]\n",
    );
    assert!(r.config.vcenters[0].insecure);
    let notices = r.notices.join("\n");
    for needle in [
        "line 4: [Global] insecureFlag: read as insecure-flag",
        "soap-roundtrip-count: no effect",
        "[Global] foo: unknown key",
        "[Bogus]: unknown section",
        "deprecated",
    ] {
        assert!(notices.contains(needle), "{needle} in {notices}");
    }
}

proptest::proptest! {
    /// Any text: an answer, never a panic.
    #[test]
    fn fuzz_parse(text in "(\\[Global\\]|global:|\\[VirtualCenter \"v\"\\]|vcenter:|  [a-z-]{1,8}: [a-z0-9]{0,4}|[a-z-]{1,8} = [a-z0-9,]{0,6}|\n){0,12}") {
        let _ = parse(&text, env());
    }
}

// CPI's FromEnv / FromCPIEnv (reference §7.4), with its two inverted checks and the port
// variable taken for a vCenter fixed.
#[test]
fn environment_overrides_as_cpi_applies_them() {
    let file = "[VirtualCenter \"vc1\"]\nuser = u\npassword = p\n[Labels]\nzone = z-file\nregion = r-file\n";
    let read = parse(
        file,
        env_with(&[
            ("VSPHERE_LABEL_ZONE", "k8s-zone"),
            ("VSPHERE_LABEL_REGION", "k8s-region"),
            ("VSPHERE_SECRETS_DIRECTORY", "/var/secrets"),
            (
                "VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR",
                "10.0.0.0/8, 192.168.0.0/16",
            ),
            ("VSPHERE_NODES_EXTERNAL_VM_NETWORK_NAME", "public"),
            ("VSPHERE_USER", "ignored"),
            ("VSPHERE_VCENTER_PORT", "8443"),
            ("VSPHERE_VCENTER_B", "vc2.example"),
            ("VCENTER_B_USERNAME", "user2"),
            ("VCENTER_B_PASSWORD", "pass2"),
            ("VCENTER_B_PORT", "9443"),
            ("VCENTER_B_INSECURE", "true"),
            ("VCENTER_B_IP_FAMILY", "ipv6"),
            ("VCENTER_B_DATACENTERS", "dc1, dc2"),
        ]),
    )
    .unwrap();
    let c = &read.config;
    assert_eq!(c.labels.zone.as_deref(), Some("k8s-zone"));
    assert_eq!(c.labels.region.as_deref(), Some("k8s-region"));
    assert_eq!(c.secrets_directory.as_deref(), Some(Path::new("/var/secrets")));
    assert_eq!(c.nodes.internal_cidrs.len(), 2);
    assert_eq!(c.nodes.external_network.as_deref(), Some("public"));
    // The port variable is no vCenter; the file's vCenter keeps its login.
    assert_eq!(c.vcenters.len(), 2, "{:?}", c.vcenters);
    assert_eq!(c.vcenters[0].user, "u");
    let b = &c.vcenters[1];
    assert_eq!(
        (
            b.tenant.as_str(),
            b.server.as_str(),
            b.port,
            b.user.as_str(),
            b.insecure
        ),
        ("vc2.example", "vc2.example", 9443, "user2", true)
    );
    assert_eq!(
        b.ip_families,
        [IpFamily::V6],
        "read when set (CPI reads it only when absent)"
    );
    assert_eq!(b.datacenters, ["dc1", "dc2"]);
    // The global connection variables change no vCenter in CPI: each named once.
    for name in ["VSPHERE_USER", "VSPHERE_VCENTER_PORT"] {
        assert!(
            read.notices
                .iter()
                .any(|n| n.contains(name) && n.contains("no effect")),
            "{:?}",
            read.notices
        );
    }
    // A value that cannot be used is named.
    let e = parse(
        file,
        env_with(&[("VSPHERE_VCENTER_X", "vc3"), ("VCENTER_X_PORT", "https")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("VCENTER_X_PORT"), "{e}");
    let e = parse(
        file,
        env_with(&[("VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR", "10.0.0.0")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR"), "{e}");
}

/// CPI reads `[NSXT]`, `[LoadBalancer]` and `[Route]` (its alpha NSX-T features): the notice says
/// they are not served, not that CPI ignores them.
#[test]
fn cpis_nsxt_sections_are_named_as_not_served() {
    for (section, served_by_cpi) in [
        ("line 3: [NSXT]", true),
        ("line 9: [LoadBalancer]", true),
        ("line 12: [LoadBalancerClass \"x\"]", true),
        ("line 9: [Route \"r\"]", true),
        ("nsxt", true),
        ("loadBalancer", true),
        ("line 2: [Bogus]", false),
        ("routes", false),
    ] {
        let notice = super::section_notice(section);
        assert_eq!(notice.contains("NSX-T"), served_by_cpi, "{section}: {notice}");
        assert!(notice.starts_with(section), "{notice}");
    }
}
