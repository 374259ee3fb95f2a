//! kubectl (a real client written by others) against the fake server. Needs `KUBECTL` naming a
//! kubectl binary when the tests are built (`make test` sets it); without one the test is
//! ignored, saying why (see build.rs).

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The kubectl the tests were built with (see build.rs).
#[cfg(kubectl)]
fn kubectl_bin() -> PathBuf {
    PathBuf::from(env!("KUBECTL_BIN"))
}

#[cfg(not(kubectl))]
fn kubectl_bin() -> PathBuf {
    panic!("no kubectl: build the tests with KUBECTL naming one")
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn kubectl");
        if let Some(mut si) = child.stdin.take() {
            if let Some(input) = stdin {
                si.write_all(input.as_bytes()).await.expect("stdin");
            }
            drop(si);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl in time")
            .expect("kubectl ran");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = self.run(args, stdin).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels:
    topology.kubernetes.io/zone: z1
status:
  conditions:
  - type: Ready
    status: "True"
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kubectl),
    ignore = "no kubectl: build the tests with KUBECTL naming one (make test does, after scripts/tools/setup.sh)"
)]
async fn kubectl_get_apply_label_taint_delete() {
    let bin = kubectl_bin();
    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    s.write_kubeconfig(&kubeconfig).unwrap();
    let k = Kubectl {
        bin,
        kubeconfig,
        cache: dir.path().join("cache"),
    };

    let out = k.ok(&["apply", "-f", "-"], Some(MANIFEST)).await;
    assert!(
        out.contains("node/node-1 created") && out.contains("service/web created"),
        "{out}"
    );
    // Re-applying the same manifest changes nothing (client-side apply's three-way patch).
    let out = k.ok(&["apply", "-f", "-"], Some(MANIFEST)).await;
    assert!(
        out.contains("node/node-1 unchanged") && out.contains("service/web unchanged"),
        "{out}"
    );

    // Server-side printing: kubectl asks for a Table and prints its columns.
    let out = k.ok(&["get", "nodes"], None).await;
    assert!(
        out.contains("NAME") && out.contains("STATUS") && out.contains("node-1") && out.contains("Ready"),
        "{out}"
    );
    let out = k.ok(&["get", "svc", "web"], None).await;
    assert!(
        out.contains("LoadBalancer") && out.contains("<pending>") && out.contains("80:3"),
        "{out}"
    );

    let out = k.ok(&["get", "svc", "-o", "json"], None).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "List");
    let web = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "web")
        .unwrap();
    let node_port = web["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port));

    k.ok(&["label", "node", "node-1", "role=edge"], None).await;
    k.ok(&["taint", "node", "node-1", "dedicated=edge:NoSchedule"], None)
        .await;
    let out = k.ok(&["get", "node", "node-1", "-o", "json"], None).await;
    let n: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(n["metadata"]["labels"]["role"], "edge");
    assert_eq!(n["spec"]["taints"][0]["key"], "dedicated");
    // A label change that conflicts without --overwrite is refused by kubectl; with it, applied.
    let (ok, _, _) = k.run(&["label", "node", "node-1", "role=core"], None).await;
    assert!(!ok);
    k.ok(&["label", "node", "node-1", "role=core", "--overwrite"], None)
        .await;
    k.ok(&["taint", "node", "node-1", "dedicated:NoSchedule-"], None)
        .await;
    let out = k
        .ok(&["get", "nodes", "-l", "role=core", "-o", "name"], None)
        .await;
    assert_eq!(out.trim(), "node/node-1");

    // Strict server-side validation: kubectl sends fieldValidation=Strict.
    let (ok, _, err) = k
        .run(
            &["apply", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\nbogus: 1\n"),
        )
        .await;
    assert!(!ok && err.contains("unknown field"), "{err}");

    // Delete waits for the object to go (kubectl watches it with a field selector).
    k.ok(&["delete", "svc", "web"], None).await;
    k.ok(&["delete", "node", "node-1"], None).await;
    let (ok, _, err) = k.run(&["get", "node", "node-1"], None).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}
