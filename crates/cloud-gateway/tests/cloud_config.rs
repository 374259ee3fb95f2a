//! The `cloud-gateway` binary with a malformed `--cloud-config`: it exits non-zero at start,
//! naming the file, line and key, before it listens or calls AWS.
#![cfg(feature = "aws")]

use std::process::Command;

#[test]
fn a_malformed_cloud_config_makes_the_gateway_exit_naming_the_line() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        "[Global]\nRegion = eu-west-1\n; a comment\nNodeIPFamilies = ipv5\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-gateway"))
        .args([
            "--provider",
            "aws",
            "--insecure-plaintext",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .args(["--http-listen", "127.0.0.1:0", "--cloud-config"])
        .arg(file.path())
        .env_remove("AWS_REGION")
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains(&file.path().display().to_string()), "{stderr}");
    assert!(stderr.contains("line 4, [Global] NodeIPFamilies"), "{stderr}");
    assert!(stderr.contains("\"ipv5\" is not an IP family"), "{stderr}");

    // A valid file gets past the cloud config: the next check (a bad flag, so that the gateway
    // stops before it listens) is what fails.
    std::fs::write(
        file.path(),
        "[Global]\nRegion = eu-west-1\nNodeIPFamilies = ipv6\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-gateway"))
        .args([
            "--provider",
            "aws",
            "--insecure-plaintext",
            "--aws-max-attempts",
            "0",
        ])
        .arg("--cloud-config")
        .arg(file.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("max attempts must be at least 1"), "{stderr}");
    assert!(!stderr.contains("cloud config"), "{stderr}");
}
