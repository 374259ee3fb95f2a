//! `make bench`'s quick variant: the harness runs every scenario in both modes (the node, the
//! service and the route controllers'), small, and prints its tables. No timing is asserted (a benchmark, not a timed test).

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
    // Nodes: six scenario rows and three ratio rows; Services: (d) and (e) in both modes, (f)
    // with 1 and 2 replicas, (i) and (j) ours; routes: (g) and (h) in both modes, (h) ours with
    // a long resync.
    assert_eq!(rows.len(), 22, "every scenario row:\n{stdout}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = json.as_array().expect("a JSON array");
    assert_eq!(rows.len(), 19);
    for row in rows {
        assert!(
            row["note"].as_str().is_some_and(|n| !n.contains("converge")),
            "{row}"
        );
        // Node rows count lookups; service rows count calls by operation.
        let calls = row["provider_calls"].as_u64().unwrap_or_else(|| {
            row["provider_calls"]
                .as_object()
                .map_or(0, |ops| ops.values().filter_map(serde_json::Value::as_u64).sum())
        });
        assert!(
            calls > 0 || row["scenario"].as_str().unwrap().starts_with("(b)"),
            "{row}"
        );
    }
    let updates = rows
        .iter()
        .filter_map(|r| r["updates_per_load_balancer"].as_f64())
        .collect::<Vec<_>>();
    assert_eq!(updates.len(), 2, "(e) in both modes");
    // (j): a restarted service controller's syncs of converged Services write nothing, and
    // their reads share calls (how many depends on timing: the bench reports it).
    let resync = rows
        .iter()
        .find(|r| r["scenario"].as_str().is_some_and(|s| s.starts_with("(j)")))
        .expect("(j)");
    let calls = resync["provider_calls"].as_object().expect("calls by operation");
    let writes: u64 = [
        "ensure_load_balancer",
        "update_load_balancer",
        "delete_load_balancer",
    ]
    .iter()
    .filter_map(|op| calls.get(*op).and_then(serde_json::Value::as_u64))
    .sum();
    assert_eq!(writes, 0, "{resync}");
    let reads = calls
        .get("read_load_balancers")
        .and_then(serde_json::Value::as_u64);
    assert!(reads.is_some_and(|r| (1..100).contains(&r)), "{resync}");
}
