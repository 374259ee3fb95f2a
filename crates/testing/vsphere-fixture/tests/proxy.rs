//! The fault-injecting proxy in front of vcsim, as a SOAP client meets it (curl trusting the
//! proxy's CA): calls pass through unchanged without faults; with each fault at 100 % every call
//! meets it, counted by kind.

use std::{process::Command, time::Duration};

use vsphere_fixture::{
    Vcsim,
    proxy::{DROPPED_AFTER, DROPPED_BEFORE, Faults, NOT_AUTHENTICATED, SLOW, UNAVAILABLE, VcsimProxy},
};

const SERVICE_CONTENT: &str = r#"<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><RetrieveServiceContent xmlns="urn:vim25"><_this type="ServiceInstance">ServiceInstance</_this></RetrieveServiceContent></soapenv:Body></soapenv:Envelope>"#;

/// curl's exit code, HTTP status and body of a RetrieveServiceContent through the proxy.
async fn call(proxy: &VcsimProxy, cookie: bool) -> (i32, String, String) {
    let url = format!("https://127.0.0.1:{}/sdk", proxy.port);
    let ca = proxy.ca_file.clone();
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "20", "-w", "\n%{http_code}", "--cacert"])
            .arg(&ca)
            .args(["-H", "Content-Type: text/xml", "--data-binary", SERVICE_CONTENT]);
        if cookie {
            cmd.args(["-H", "Cookie: vmware_soap_session=\"52a0\""]);
        }
        let out = cmd.arg(&url).output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            out.status.code().unwrap_or(-1),
            status.to_owned(),
            body.to_owned(),
        )
    })
    .await
    .expect("curl task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_meets_the_calls_it_is_set_for_and_none_meets_them_without() {
    let vcsim = tokio::task::spawn_blocking(Vcsim::shared).await.expect("vcsim");
    let dir = tempfile_dir();
    let proxy = VcsimProxy::start(vcsim, &dir).await;

    let (code, status, body) = call(&proxy, false).await;
    assert_eq!((code, status.as_str()), (0, "200"), "{body}");
    assert!(body.contains("RetrieveServiceContentResponse"), "{body}");

    let only = |f: fn(&mut Faults)| {
        let mut faults = Faults::default();
        f(&mut faults);
        faults
    };
    proxy.faults(only(|f| f.unavailable = 100), 1);
    let (_, status, _) = call(&proxy, true).await;
    assert_eq!(status, "503");

    proxy.faults(only(|f| f.not_authenticated = 100), 1);
    let (_, status, body) = call(&proxy, true).await;
    assert_eq!(status, "500");
    assert!(body.contains(r#"xsi:type="NotAuthenticated""#), "{body}");
    // Without a session (Login, RetrieveServiceContent) vCenter never answers so.
    let (_, status, _) = call(&proxy, false).await;
    assert_eq!(status, "200");

    proxy.faults(only(|f| f.dropped = 100), 1);
    for _ in 0..6 {
        let (code, status, _) = call(&proxy, true).await;
        // 52: empty reply; 56: failure receiving (a TLS close without close_notify).
        assert!(matches!(code, 52 | 56), "curl exit {code}, HTTP {status}");
    }

    proxy.faults(
        only(|f| {
            f.slow = 100;
            f.slow_for = (Duration::from_millis(700), Duration::from_millis(700));
        }),
        1,
    );
    let started = std::time::Instant::now();
    let (_, status, _) = call(&proxy, true).await;
    assert_eq!(status, "200");
    assert!(started.elapsed() >= Duration::from_millis(700));

    proxy.faults(Faults::default(), 1);
    let (_, status, _) = call(&proxy, true).await;
    assert_eq!(status, "200");

    let counts = proxy.counts();
    assert_eq!(counts.get(UNAVAILABLE), Some(&1));
    assert_eq!(counts.get(NOT_AUTHENTICATED), Some(&1));
    assert_eq!(counts.get(SLOW), Some(&1));
    let dropped = counts.get(DROPPED_BEFORE).unwrap_or(&0) + counts.get(DROPPED_AFTER).unwrap_or(&0);
    assert_eq!(dropped, 6, "{counts:?}");
    assert_eq!(proxy.calls(), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory of this test's own (the proxy's CA file goes there).
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(vsphere_fixture::unique("vcsim-proxy-test"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
