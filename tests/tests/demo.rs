//! The README's run command works: `ccm-demo --exit` initializes the inventory's nodes,
//! taints the stopped one and deletes the terminated one's Node, provisions LoadBalancer
//! Services and deletes one's load balancer with it, routes every Node's pod CIDR; `kill <pid>` stops it and
//! everything it started, as Ctrl-C does.

use std::{collections::BTreeSet, process::Command, time::Duration};

use e2e::{Procs, wait_for};
use tokio::time::Instant;

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
    // Ready, it lost the API server's not-ready taint too (as kube-controller-manager does it).
    assert!(!worker1.contains("not-ready"), "{worker1}");
    // NotReady, it keeps that taint: the controllers remove or add only their own.
    let worker4 = row("worker-4").expect("worker-4 listed");
    assert!(
        worker4.contains("shutdown") && worker4.contains("not-ready") && !worker4.contains("uninitialized"),
        "{worker4}"
    );
    assert!(
        row("worker-5").is_none(),
        "the terminated instance's Node must be deleted:\n{after}"
    );
    assert!(after.contains("accelerator=sim-gpu"), "{after}");

    // LoadBalancer Services get an EXTERNAL-IP from the cloud; deleting one deletes its
    // load balancer.
    let services = stdout
        .split("== LoadBalancer Services (kubectl get svc) ==")
        .nth(1)
        .expect("a services table");
    let web = services
        .lines()
        .find(|l| l.starts_with("web "))
        .expect("web listed");
    assert!(
        web.contains("LoadBalancer") && web.contains("203.0.113."),
        "{web}"
    );
    let (provisioned, after_delete) = services
        .split_once("Deleting Service dns")
        .expect("the deletion step");
    assert!(provisioned.contains("default/dns"), "{provisioned}");
    let remaining = after_delete
        .split("== Load balancers in the simulated cloud ==")
        .nth(1)
        .expect("the cloud after the deletion");
    assert!(
        remaining.contains("default/web") && !remaining.contains("default/dns"),
        "{remaining}"
    );

    // Every Node's pod CIDR has its route in the cloud, named after the Node's UID, and the
    // Node says its network is available.
    let routes = stdout
        .split("== Pod CIDRs and their routes in the simulated cloud ==")
        .nth(1)
        .expect("a routes table");
    let worker1 = routes
        .lines()
        .find(|l| l.starts_with("worker-1 "))
        .expect("worker-1 routed");
    assert!(
        worker1.contains("10.244.")
            && worker1.contains("kubernetes-")
            && worker1.contains("active")
            && worker1.contains("False/RouteCreated"),
        "{worker1}"
    );
    assert!(!routes.contains("<none>"), "every pod CIDR routed:\n{routes}");
    assert!(!routes.contains("worker-5 "), "{routes}");
}

/// A process seen under /proc: its id, start time (so a reused id is not mistaken for it) and
/// program name.
#[derive(Debug, Clone, PartialEq)]
struct Process {
    pid: u32,
    start: u64,
    name: String,
}

/// `(parent pid, start time, state)` from `/proc/<pid>/stat`; `None` once the process is gone.
fn stat(pid: u32) -> Option<(u32, u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces; fields 3.. follow the last ')'.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?, state))
}

/// Every process below `root` (children, their children, ...).
fn descendants(root: u32) -> Vec<Process> {
    let all: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| stat(pid).map(|(ppid, start, _)| (pid, ppid, start)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for &(pid, ppid, start) in &all {
            if ppid == parent {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let argv0 = String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap_or_default())
                    .into_owned();
                let name = argv0.rsplit('/').next().unwrap_or_default().to_owned();
                found.push(Process { pid, start, name });
                parents.push(pid);
            }
        }
    }
    found
}

/// Whether `p` still runs (a zombie is dead, only not reaped yet).
fn alive(p: &Process) -> bool {
    stat(p.pid).is_some_and(|(_, start, state)| start == p.start && !matches!(state, 'Z' | 'X'))
}

/// SIGKILLs whatever a failed run leaves behind, so a failure does not leak servers.
struct Leftovers {
    root: u32,
    seen: Vec<Process>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let mut all = descendants(self.root);
        all.extend(self.seen.iter().cloned());
        for p in all.iter().filter(|p| alive(p)) {
            let _ = Command::new("kill").arg("-KILL").arg(p.pid.to_string()).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_stops_every_process_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs(vec![e2e::spawn(
        dir.path(),
        "ccm-demo",
        &e2e::binary("ccm-demo"),
        &[],
    )]);
    let pid = procs[0].id().expect("ccm-demo started");
    // Declared after `procs`, so dropped first: it finds the children while ccm-demo lives.
    let mut leftovers = Leftovers {
        root: pid,
        seen: Vec::new(),
    };
    let want = [
        "fake-apiserver",
        "cloud-gateway",
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "node-route-controller",
    ];
    let children = wait_for(
        "ccm-demo to be up with its processes",
        Duration::from_secs(90),
        || {
            let up = procs[0].log().contains("Everything keeps running");
            let found = descendants(pid);
            async move {
                let names: BTreeSet<&str> = found.iter().map(|p| p.name.as_str()).collect();
                (up && want.iter().all(|w| names.contains(w))).then_some(found)
            }
        },
    )
    .await;
    leftovers.seen.clone_from(&children);

    procs[0].signal("TERM").await;
    let status = wait_for("ccm-demo to exit after SIGTERM", Duration::from_secs(30), || {
        let exited = procs[0].exited();
        async move { exited }
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let running = loop {
        let running: Vec<&Process> = children.iter().filter(|p| alive(p)).collect();
        if running.is_empty() || Instant::now() >= deadline {
            break running;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        running.is_empty(),
        "still running after ccm-demo got SIGTERM and exited ({status}): {running:?}"
    );
    assert!(
        status.success(),
        "ccm-demo did not stop cleanly on SIGTERM: {status}"
    );
    assert!(procs[0].log().contains("stopping"), "{}", procs[0].log());
}
