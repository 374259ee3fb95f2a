//! The test cloud's octavia-worker can log from its native threads at once, as its flows do:
//! `scripts/openstack/check_octavia_worker_threads.py` makes a process as `testcloud` makes the
//! worker's (its glue, eventlet imported, oslo.log set up) and has eight threads log. Without
//! `testcloud_glue/oslo_log_native_threads.py` they wait on eventlet's lock for good, as a chaos
//! run's load-balancer delete did (PENDING_DELETE forever). Needs the test cloud's packages
//! (`scripts/openstack/install.sh`), not a running cloud.

use std::{path::Path, process::Command};

#[test]
fn octavia_workers_threads_log_at_once_without_hanging() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../scripts/openstack/check_octavia_worker_threads.py");
    let out = Command::new("/usr/bin/python3")
        .arg(&script)
        .output()
        .expect("run check_octavia_worker_threads.py");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "octavia-worker's threads hang on logging: {said}"
    );
    assert!(said.contains("8 of 8 threads finished"), "{said}");
}
