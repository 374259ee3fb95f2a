//! The README's run command works: `ccm-demo --exit` initializes the inventory's nodes,
//! taints the stopped one and deletes the terminated one's Node.

use std::process::Command;

#[test]
fn the_demo_shows_nodes_initialized_from_the_simulated_cloud() {
    let output = Command::new(e2e::binary("ccm-demo"))
        .arg("--exit")
        .output()
        .expect("run ccm-demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ccm-demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = stdout
        .split("== Nodes after the controllers")
        .nth(1)
        .expect("an after table");
    let row = |name: &str| {
        after
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(str::to_owned)
    };
    let worker1 = row("worker-1").expect("worker-1 listed");
    assert!(
        worker1.contains("simulator://sim-east-1a/") && worker1.contains("sim.medium"),
        "{worker1}"
    );
    assert!(!worker1.contains("uninitialized"), "{worker1}");
    assert!(row("worker-4").expect("worker-4 listed").contains("shutdown"));
    assert!(
        row("worker-5").is_none(),
        "the terminated instance's Node must be deleted:\n{after}"
    );
    assert!(after.contains("accelerator=sim-gpu"), "{after}");
}
