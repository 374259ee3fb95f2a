//! InstancesV2 against the real test cloud: Nodes with and without providerID, OCCM's
//! providerIDs, labels and addresses, SHUTOFF as the only shut-down state, a deleted server as a
//! definite not-found for both kinds of Node (OCCM #2999 fixed), and the calls a batch costs.

use std::collections::BTreeMap;

use openstack_fixture::{TestCloud, User};
use provider::{AddressType, Instances, NodeRef, ProviderError};
use provider_openstack::{
    client::Service,
    instances::OpenStackInstances,
    nodes::{AddressOptions, ProviderIdScheme},
};

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

fn scheme(regional: bool) -> ProviderIdScheme {
    ProviderIdScheme {
        region: cloud().info.region.clone(),
        regional,
    }
}

/// Calls made since `before`, by service and method.
fn calls_since(
    before: &BTreeMap<(Service, String), u64>,
    now: &BTreeMap<(Service, String), u64>,
) -> BTreeMap<String, u64> {
    now.iter()
        .filter_map(|((service, method), n)| {
            let d = n - before.get(&(*service, method.clone())).copied().unwrap_or(0);
            (d > 0).then(|| (format!("{} {method}", service.catalog_type()), d))
        })
        .collect()
}

#[tokio::test]
async fn nodes_initialize_as_occm_and_a_batch_costs_two_calls() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let names: Vec<String> = (0..3).map(|i| cloud.unique_name(&format!("node{i}"))).collect();
    let mut ids = Vec::new();
    for name in &names {
        ids.push(cloud.boot_server(&client, name, "m1.tiny", "private").await);
    }
    let instances = OpenStackInstances::new(client.clone(), scheme(false), AddressOptions::default());
    // Two Nodes found by name (no providerID yet), one by providerID.
    let nodes = vec![
        NodeRef::by_name(&names[0]),
        NodeRef::by_name(&names[1]),
        NodeRef::new(&names[2], format!("openstack:///{}", ids[2])),
    ];
    let before = client.request_counts();
    let answers = instances.lookup_instances(&nodes).await.unwrap();
    let calls = calls_since(&before, &client.request_counts());
    assert_eq!(
        calls,
        BTreeMap::from([("compute GET".to_owned(), 1), ("network GET".to_owned(), 1)]),
        "one server list and one port list for the batch"
    );
    for (i, answer) in answers.iter().enumerate() {
        let info = answer.as_ref().unwrap_or_else(|e| panic!("{}: {e}", names[i]));
        let m = &info.metadata;
        assert_eq!(m.provider_id, format!("openstack:///{}", ids[i]));
        assert_eq!(m.instance_type, "m1.tiny", "the flavor's name");
        assert_eq!(m.zone, "nova", "the server's availability zone");
        assert_eq!(m.region, cloud.info.region);
        assert!(m.additional_labels.is_empty(), "OCCM adds no labels");
        assert!(!info.shutdown);
        let internal: Vec<&str> = m
            .addresses
            .iter()
            .filter(|a| a.kind == AddressType::InternalIP)
            .map(|a| a.address.as_str())
            .collect();
        assert!(
            internal.iter().any(|a| a.starts_with("10.0.0.")),
            "the port's IPv4 address is an InternalIP: {:?}",
            m.addresses
        );
        assert!(
            internal.iter().any(|a| a.starts_with("fd00:10:")),
            "and its IPv6 one: {:?}",
            m.addresses
        );
    }

    // Regional providerIDs, as OCCM with OS_CCM_REGIONAL=true.
    let regional = OpenStackInstances::new(client.clone(), scheme(true), AddressOptions::default());
    let answer = regional.lookup_instances(&nodes[..1]).await.unwrap();
    assert_eq!(
        answer[0].as_ref().unwrap().metadata.provider_id,
        format!("openstack://{}/{}", cloud.info.region, ids[0])
    );

    // IPv6 disabled ([Networking] ipv6-support-disabled): no v6 address at all.
    let v4 = OpenStackInstances::new(
        client.clone(),
        scheme(false),
        AddressOptions {
            ipv6_support_disabled: true,
            ..AddressOptions::default()
        },
    );
    let answer = v4.lookup_instances(&nodes[..1]).await.unwrap();
    let addresses = &answer[0].as_ref().unwrap().metadata.addresses;
    assert!(
        addresses.iter().all(|a| !a.address.contains(':')),
        "{addresses:?}"
    );

    for id in &ids {
        cloud.delete_server(&client, id).await;
    }
}

#[tokio::test]
async fn only_shutoff_is_shut_down_and_a_deleted_server_is_not_found_with_or_without_provider_id() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("stopped");
    let id = cloud.boot_server(&client, &name, "m1.tiny", "private").await;
    let instances = OpenStackInstances::new(client.clone(), scheme(false), AddressOptions::default());
    let by_id = NodeRef::new(&name, format!("openstack:///{id}"));
    let by_name = NodeRef::by_name(&name);

    cloud.stop_server(&client, &id).await;
    let answers = instances
        .lookup_instances(&[by_id.clone(), by_name.clone()])
        .await
        .unwrap();
    for answer in &answers {
        assert!(answer.as_ref().unwrap().shutdown, "SHUTOFF is shut down");
    }

    cloud.delete_server(&client, &id).await;
    let answers = instances
        .lookup_instances(&[by_id, by_name, NodeRef::new("other", "aws:///i-123")])
        .await
        .unwrap();
    assert!(
        matches!(&answers[0], Err(ProviderError::InstanceNotFound(_))),
        "by providerID: {:?}",
        answers[0]
    );
    assert!(
        matches!(&answers[1], Err(ProviderError::InstanceNotFound(_))),
        "without providerID, a definite not-found too (OCCM #2999 reports an error forever): {:?}",
        answers[1]
    );
    assert!(
        matches!(&answers[2], Err(ProviderError::InvalidArgument(_))),
        "another provider's ID is refused, never 'not found': {:?}",
        answers[2]
    );
}

#[tokio::test]
async fn a_node_named_otherwise_than_its_server_is_found_by_provider_id() {
    let cloud = cloud();
    let client = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("server");
    let id = cloud.boot_server(&client, &name, "m1.small", "private").await;
    let instances = OpenStackInstances::new(client.clone(), scheme(false), AddressOptions::default());
    let answers = instances
        .lookup_instances(&[NodeRef::new("kubelet-name", format!("openstack:///{id}"))])
        .await
        .unwrap();
    let info = answers[0].as_ref().unwrap();
    assert_eq!(info.metadata.instance_type, "m1.small");
    cloud.delete_server(&client, &id).await;
}

/// A flavor whose name is no valid label value: OCCM labels its ID. Nova at 2.47 names the
/// flavor of a server without its ID, so the ID comes from the flavor list.
#[tokio::test]
async fn a_flavor_named_no_valid_label_value_is_labelled_by_its_id() {
    let cloud = cloud();
    let admin = cloud.admin().await;
    let flavor_name = format!("tiny {}", cloud.unique_name("spaced"));
    let flavor: serde_json::Value = admin
        .post(Service::Compute, "/flavors")
        .json(&serde_json::json!({"flavor": {
            "name": flavor_name, "ram": 64, "vcpus": 1, "disk": 1,
            "os-flavor-access:is_public": true,
        }}))
        .send_json()
        .await
        .unwrap();
    let flavor_id = flavor["flavor"]["id"].as_str().unwrap().to_owned();
    let client = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("oddflavor");
    let id = cloud.boot_server(&client, &name, &flavor_id, "private").await;
    let instances = OpenStackInstances::new(client.clone(), scheme(false), AddressOptions::default());
    let answers = instances
        .lookup_instances(&[NodeRef::by_name(&name)])
        .await
        .unwrap();
    assert_eq!(answers[0].as_ref().unwrap().metadata.instance_type, flavor_id);
    cloud.delete_server(&client, &id).await;
    admin
        .delete(Service::Compute, &format!("/flavors/{flavor_id}"))
        .send_empty()
        .await
        .unwrap();
}
