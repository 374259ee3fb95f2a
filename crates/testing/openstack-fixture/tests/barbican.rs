//! The fixture's Barbican containers on the test cloud, used the way a TLS Service uses them:
//! Octavia accepts a container as a TERMINATED_HTTPS listener's `default_tls_container_ref`
//! (reading it from Barbican), the listener goes ACTIVE, a changed ref too, a ref to nothing
//! is refused; afterwards nothing of the container stays behind. As user `ccm`, the CCM's.

use std::time::{Duration, Instant};

use openstack_fixture::{
    TestCloud, User,
    barbican::{create_certificate_container, delete_container_and_secrets, ref_path},
};
use provider_openstack::client::{Client, Service};
use serde_json::{Value, json};

/// How long a load balancer may stay PENDING_* (seconds on the test cloud).
const LB_DEADLINE: Duration = Duration::from_secs(120);

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

/// The load balancer's provisioning status; `None` once Octavia answers 404.
async fn lb_status(client: &Client, id: &str) -> Option<String> {
    match client
        .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{id}"))
        .send_json::<Value>()
        .await
    {
        Ok(lb) => Some(
            lb["loadbalancer"]["provisioning_status"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("reading load balancer {id}: {e}"),
    }
}

/// Until the load balancer is ACTIVE (ERROR or the deadline fails the test).
async fn until_active(client: &Client, id: &str) {
    let end = Instant::now() + LB_DEADLINE;
    loop {
        let status = lb_status(client, id).await;
        match status.as_deref() {
            Some("ACTIVE") => return,
            Some("ERROR") | None => panic!("load balancer {id}: {status:?}"),
            _ if Instant::now() > end => panic!("load balancer {id} still {status:?} after {LB_DEADLINE:?}"),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn listener(client: &Client, id: &str) -> Value {
    client
        .get(Service::LoadBalancer, &format!("/lbaas/listeners/{id}"))
        .send_json::<Value>()
        .await
        .unwrap_or_else(|e| panic!("reading listener {id}: {e}"))["listener"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_https_listener_takes_a_fixture_container_and_a_changed_one() {
    let _turn = cloud().octavia_turn().await;
    let client = cloud().client(User::Ccm).await;
    let name = cloud().unique_name("tls");
    let first = create_certificate_container(&client, &format!("{name}-a"))
        .await
        .expect("the first container");
    let second = create_certificate_container(&client, &format!("{name}-b"))
        .await
        .expect("the second container");
    let stored: Value = client
        .get(Service::KeyManager, &ref_path(&first).unwrap())
        .send_json()
        .await
        .expect("the container, read back");
    assert_eq!(stored["type"], "certificate", "{stored}");
    let secret_names: Vec<&str> = stored["secret_refs"]
        .as_array()
        .expect("secret_refs")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(secret_names.len(), 2, "{stored}");
    assert!(
        secret_names.contains(&"certificate") && secret_names.contains(&"private_key"),
        "{stored}"
    );

    let lb: Value = client
        .post(Service::LoadBalancer, "/lbaas/loadbalancers")
        .json(&json!({"loadbalancer": {"name": name, "vip_subnet_id": cloud().info.ids.subnet_private}}))
        .send_json()
        .await
        .expect("load balancer create");
    let lb_id = lb["loadbalancer"]["id"].as_str().expect("lb id").to_owned();
    until_active(&client, &lb_id).await;

    let created: Value = client
        .post(Service::LoadBalancer, "/lbaas/listeners")
        .json(&json!({"listener": {
            "loadbalancer_id": lb_id, "protocol": "TERMINATED_HTTPS", "protocol_port": 443,
            "default_tls_container_ref": first,
        }}))
        .send_json()
        .await
        .expect("TERMINATED_HTTPS listener create");
    let listener_id = created["listener"]["id"]
        .as_str()
        .expect("listener id")
        .to_owned();
    until_active(&client, &lb_id).await;
    client
        .post(Service::LoadBalancer, "/lbaas/pools")
        .json(
            &json!({"pool": {"listener_id": listener_id, "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN"}}),
        )
        .send_empty()
        .await
        .expect("HTTP pool create");
    until_active(&client, &lb_id).await;
    let got = listener(&client, &listener_id).await;
    assert_eq!(got["protocol"], "TERMINATED_HTTPS", "{got}");
    assert_eq!(got["provisioning_status"], "ACTIVE", "{got}");
    assert_eq!(got["default_tls_container_ref"], first.as_str(), "{got}");

    // A ref to no container: refused before anything is written.
    let nowhere = format!(
        "{}/containers/00000000-0000-0000-0000-000000000000",
        client.endpoint(Service::KeyManager).unwrap()
    );
    let refused = client
        .post(Service::LoadBalancer, "/lbaas/listeners")
        .json(&json!({"listener": {
            "loadbalancer_id": lb_id, "protocol": "TERMINATED_HTTPS", "protocol_port": 8443,
            "default_tls_container_ref": nowhere,
        }}))
        .send_empty()
        .await
        .expect_err("a listener with a ref to no container");
    assert_eq!(refused.status.map(|s| s.as_u16()), Some(400), "{refused}");
    assert!(
        refused.message.contains("Could not retrieve certificate"),
        "{refused}"
    );

    client
        .put(Service::LoadBalancer, &format!("/lbaas/listeners/{listener_id}"))
        .json(&json!({"listener": {"default_tls_container_ref": second}}))
        .send_empty()
        .await
        .expect("the listener's ref changed");
    until_active(&client, &lb_id).await;
    let got = listener(&client, &listener_id).await;
    assert_eq!(got["default_tls_container_ref"], second.as_str(), "{got}");
    assert_eq!(got["provisioning_status"], "ACTIVE", "{got}");

    client
        .delete(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{lb_id}"))
        .query(&[("cascade", "true")])
        .send_empty()
        .await
        .expect("cascade delete");
    let end = Instant::now() + LB_DEADLINE;
    while lb_status(&client, &lb_id).await.is_some() {
        assert!(
            Instant::now() < end,
            "load balancer {lb_id} not gone after {LB_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    for container in [&first, &second] {
        let secrets: Vec<String> = client
            .get(Service::KeyManager, &ref_path(container).unwrap())
            .send_json::<Value>()
            .await
            .expect("the container before its deletion")["secret_refs"]
            .as_array()
            .expect("secret_refs")
            .iter()
            .filter_map(|s| s["secret_ref"].as_str().map(str::to_owned))
            .collect();
        delete_container_and_secrets(&client, container)
            .await
            .expect("container and secrets deleted");
        for gone in secrets.iter().chain([container]) {
            let answer = client
                .get(Service::KeyManager, &ref_path(gone).unwrap())
                .send()
                .await;
            assert!(
                answer.as_ref().is_err_and(|e| e.is_not_found()),
                "{gone} still there: {answer:?}"
            );
        }
        // Deleting again is fine: already gone.
        delete_container_and_secrets(&client, container)
            .await
            .expect("a second deletion");
    }
}
