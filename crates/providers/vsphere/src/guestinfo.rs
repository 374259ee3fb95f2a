//! The addresses a VM's cloud-init network config assigns statically, read from its
//! `guestinfo.metadata` as CPI's `sortStaticallyConfiguredAddressesFirst` reads it (PRs #725,
//! #762; reference §4 step 5): the node's candidates among them are preferred, in their order.
//!
//! - Only when `guestinfo.metadata.encoding` is `base64` (anything else: no preference, as CPI).
//! - The decoded YAML's top-level `network.encoding`: `base64`/`b64` → `network` is base64
//!   YAML; `gzip+base64`/`gz+b64` → base64 of gzip; else `network` is the map itself.
//! - The addresses: `network.ethernets.<id>.addresses[]`, each `ip/prefix` (the prefix
//!   ignored), in order within an ethernet; ethernets by id (CPI walks a Go map, so its order
//!   across ethernets is random).
//! - A metadata that cannot be decoded fails the node's discovery, as in CPI ("cannot
//!   unmarshal").

use std::{io::Read, net::IpAddr};

use base64::Engine as _;
use serde::Deserialize;

/// The statically configured addresses, in order; empty when the metadata gives none.
///
/// # Errors
/// What could not be decoded, for the node's error.
pub fn static_addresses(metadata: Option<&str>, encoding: Option<&str>) -> Result<Vec<IpAddr>, String> {
    let (Some(metadata), Some("base64")) = (metadata, encoding.map(str::trim)) else {
        return Ok(Vec::new());
    };
    let text = base64_text(metadata).map_err(|e| format!("guestinfo.metadata: {e}"))?;
    let doc: Metadata =
        serde_saphyr::from_str(&text).map_err(|e| format!("guestinfo.metadata: cannot unmarshal: {e}"))?;
    let Some(network) = doc.network else {
        return Ok(Vec::new());
    };
    let config: NetworkConfig = match (doc.encoding.as_deref().map(str::trim), network) {
        (Some("base64" | "b64"), Config::Encoded(text)) => {
            let yaml = base64_text(&text).map_err(|e| format!("guestinfo.metadata network: {e}"))?;
            serde_saphyr::from_str(&yaml)
                .map_err(|e| format!("guestinfo.metadata network: cannot unmarshal: {e}"))?
        }
        (Some("gzip+base64" | "gz+b64"), Config::Encoded(text)) => {
            let packed = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| format!("guestinfo.metadata network: not base64: {e}"))?;
            let mut yaml = String::new();
            flate2::read::GzDecoder::new(&packed[..])
                .read_to_string(&mut yaml)
                .map_err(|e| format!("guestinfo.metadata network: not gzip: {e}"))?;
            serde_saphyr::from_str(&yaml)
                .map_err(|e| format!("guestinfo.metadata network: cannot unmarshal: {e}"))?
        }
        (_, Config::Inline(config)) => config,
        (encoding, Config::Encoded(_)) => {
            return Err(format!(
                "guestinfo.metadata network: cannot unmarshal: a string with encoding {encoding:?}"
            ));
        }
    };
    let mut out = Vec::new();
    for ethernet in config.ethernets.into_values() {
        for address in ethernet.addresses {
            let ip = address.split('/').next().unwrap_or_default();
            if let Ok(ip) = ip.parse::<IpAddr>() {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

fn base64_text(text: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    String::from_utf8(bytes).map_err(|e| format!("not text: {e}"))
}

/// The metadata's top level: `network` (a map, or a string with `network.encoding`).
#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    network: Option<Config>,
    #[serde(default, rename = "network.encoding")]
    encoding: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Config {
    Encoded(String),
    Inline(NetworkConfig),
}

#[derive(Deserialize, Default)]
struct NetworkConfig {
    #[serde(default)]
    ethernets: std::collections::BTreeMap<String, Ethernet>,
}

#[derive(Deserialize, Default)]
struct Ethernet {
    #[serde(default)]
    addresses: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn gzip_b64(text: &str) -> String {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        b64(&gz.finish().unwrap())
    }

    const NETWORK: &str = "version: 2\nethernets:\n  id0:\n    addresses:\n    - fd01:cccc::1/128\n";

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    // CPI's TestDiscoverNodeIPs 43-53 (the metadata side; the address choice is table-tested in
    // addresses/tests.rs with these lists).
    #[test]
    fn static_addresses_as_cpi_decodes_them() {
        let inline = format!("network:\n  {}", NETWORK.replace('\n', "\n  "));
        // (what, guestinfo.metadata, its encoding, the addresses or words of the error)
        type Case<'a> = (&'a str, String, Option<&'a str>, Result<Vec<IpAddr>, &'a str>);
        let cases: Vec<Case<'_>> = vec![
            ("43: inline, IPv6", b64(inline.as_bytes()), Some("base64"), Ok(ips(&["fd01:cccc::1"]))),
            (
                "45: the order of the addresses kept",
                b64(b"network:\n  ethernets:\n    e:\n      addresses: [192.168.1.12/64, 192.168.1.10/64]\n"),
                Some("base64"),
                Ok(ips(&["192.168.1.12", "192.168.1.10"])),
            ),
            (
                "50: a long-hand IPv6 normalised",
                b64(b"network:\n  ethernets:\n    e:\n      addresses: [fd01:1:2:2919:abba:0000:0000:401/128]\n"),
                Some("base64"),
                Ok(ips(&["fd01:1:2:2919:abba::401"])),
            ),
            (
                "51: network gzip+base64",
                b64(format!("network: {}\nnetwork.encoding: gzip+base64\n", gzip_b64(NETWORK)).as_bytes()),
                Some("base64"),
                Ok(ips(&["fd01:cccc::1"])),
            ),
            (
                "52: network base64",
                b64(format!("network: {}\nnetwork.encoding: base64\n", b64(NETWORK.as_bytes())).as_bytes()),
                Some("base64"),
                Ok(ips(&["fd01:cccc::1"])),
            ),
            (
                "53: not YAML",
                b64(b"not-valid-yaml this should error"),
                Some("base64"),
                Err("cannot unmarshal"),
            ),
            ("another metadata encoding: no preference", inline.clone(), Some("plain"), Ok(vec![])),
            ("no encoding: no preference", b64(inline.as_bytes()), None, Ok(vec![])),
            ("no network", b64(b"instance-id: i-1\n"), Some("base64"), Ok(vec![])),
            ("the metadata not base64", "%%%".into(), Some("base64"), Err("not base64")),
        ];
        for (what, metadata, encoding, want) in cases {
            let got = static_addresses(Some(&metadata), encoding);
            match (&got, want) {
                (Ok(got), Ok(want)) => assert_eq!(*got, want, "{what}"),
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{what}: {e}"),
                _ => panic!("{what}: {got:?}"),
            }
        }
        assert_eq!(static_addresses(None, Some("base64")), Ok(vec![]));
    }
}
