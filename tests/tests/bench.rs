//! `make bench`'s quick variant: the harness runs every scenario in both modes, small, and
//! prints its table. No timing is asserted (a benchmark, not a timed test).

use std::process::Command;

use e2e::binary;

#[test]
fn the_quick_benchmark_completes_and_prints_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let output = Command::new(binary("ccm-bench"))
        .args(["--quick", "--json"])
        .arg(&json)
        .output()
        .expect("run ccm-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ccm-bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{stdout}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| (")).collect();
    assert_eq!(rows.len(), 9, "six scenario rows and three ratio rows:\n{stdout}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = json.as_array().expect("a JSON array");
    assert_eq!(rows.len(), 6);
    for row in rows {
        assert!(
            row["note"].as_str().is_some_and(|n| !n.contains("converge")),
            "{row}"
        );
        assert!(
            row["provider_calls"].as_u64().is_some_and(|c| c > 0)
                || row["scenario"].as_str().unwrap().starts_with("(b)"),
            "{row}"
        );
    }
}
