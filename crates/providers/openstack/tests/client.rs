//! The client against the real test cloud (Keystone, Nova, Neutron of Zed on 127.0.0.1; see
//! `openstack-fixture`): every way to authenticate, token reuse and renewal after a
//! revocation, endpoint selection, typed errors, pagination, `If-Match`, microversions.

use std::time::Duration;

use openstack_fixture::{TestCloud, User};
use provider::ProviderError;
use provider_openstack::{
    auth::{DomainRef, Interface, Method, ProjectRef, Scope, Secret, UserRef},
    client::{Client, ErrorKind, Service},
};
use serde_json::{Value, json};

fn cloud() -> &'static TestCloud {
    TestCloud::shared()
}

fn default_domain() -> Option<DomainRef> {
    Some(DomainRef::Name("Default".into()))
}

#[tokio::test]
async fn password_by_name_and_by_id() {
    let cloud = cloud();
    let by_name = cloud.client(User::Ccm).await;
    let info = by_name.token_info();
    assert_eq!(
        info.project_id.as_deref(),
        Some(cloud.info.ids.project_ccm.as_str())
    );
    assert_eq!(info.user_name.as_deref(), Some("ccm"));
    assert!(info.lifetime > Duration::from_secs(600), "{info:?}");

    let mut creds = cloud.credentials(User::Ccm);
    creds.method = Method::Password {
        user: UserRef::Id(info.user_id.clone().expect("user id")),
        password: Secret(cloud.info.ccm.password.clone()),
    };
    creds.scope = Scope::Project(ProjectRef::Id(cloud.info.ids.project_ccm.clone()));
    let by_id = Client::connect(&creds).await.expect("connect by ids");
    assert_eq!(by_id.token_info().project_id, info.project_id);
    let nets: Value = by_id
        .get(Service::Network, "/networks")
        .query(&[("name", "private")])
        .send_json()
        .await
        .expect("networks");
    assert_eq!(nets["networks"][0]["id"], cloud.info.ids.network_private.as_str());

    // The domain's id rather than its name; the auth URL without /v3 and with a slash.
    creds.auth_url = cloud.info.auth_url.trim_end_matches("/v3").to_owned() + "/";
    creds.scope = Scope::Project(ProjectRef::Name {
        name: "ccm".into(),
        domain: Some(DomainRef::Id("default".into())),
    });
    let c = Client::connect(&creds)
        .await
        .expect("connect, auth URL without /v3");
    assert_eq!(c.token_info().project_id, info.project_id);
}

#[tokio::test]
async fn admin_connects_and_reads_keystone() {
    let admin = cloud().admin().await;
    assert_eq!(
        admin.token_info().project_id.as_deref(),
        Some(cloud().info.ids.project_admin.as_str())
    );
    let id = cloud().user_id(&admin, "ccm").await;
    assert!(!id.is_empty());
    assert_eq!(admin.endpoint(Service::Identity).unwrap(), cloud().info.auth_url);
}

#[tokio::test]
async fn bad_password_fails_connect() {
    let mut creds = cloud().credentials(User::Ccm);
    creds.method = Method::Password {
        user: UserRef::Name {
            name: "ccm".into(),
            domain: default_domain(),
        },
        password: Secret("wrong".into()),
    };
    let e = Client::connect(&creds).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unauthorized, "{e}");
    assert_eq!(e.status.map(|s| s.as_u16()), Some(401));
    assert!(
        !e.to_string().contains("wrong"),
        "the password never appears in an error: {e}"
    );
}

#[tokio::test]
async fn one_token_serves_many_requests() {
    let c = cloud().client(User::Ccm).await;
    for _ in 0..5 {
        c.get(Service::Compute, "/servers")
            .send_empty()
            .await
            .expect("servers");
        c.get(Service::Network, "/ports")
            .query(&[("device_id", "none")])
            .send_empty()
            .await
            .expect("ports");
    }
    let concurrent = (0..6).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.get(Service::Compute, "/flavors").send_empty().await })
    });
    for j in concurrent {
        j.await.unwrap().expect("flavors");
    }
    assert_eq!(c.tokens_issued(), 1);
    let counts = c.request_counts();
    assert_eq!(counts[&(Service::Compute, "GET".to_owned())], 11);
    assert_eq!(counts[&(Service::Network, "GET".to_owned())], 5);
    assert_eq!(counts[&(Service::Identity, "POST".to_owned())], 1);
}

#[tokio::test]
async fn revoked_token_is_renewed_once_for_concurrent_callers() {
    let admin = cloud().admin().await;
    // A fresh client whose token Nova has never seen (keystonemiddleware caches validations).
    let c = cloud().client(User::Ccm).await;
    let token = c.token().await.unwrap();
    admin
        .delete(Service::Identity, "/auth/tokens")
        .header("X-Subject-Token", &token.0)
        .send_empty()
        .await
        .expect("revoking the ccm token");
    let calls = (0..8).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.get(Service::Compute, "/servers").send_empty().await })
    });
    for j in calls {
        j.await.unwrap().expect("a request after the revocation succeeds");
    }
    assert_eq!(c.tokens_issued(), 2, "one re-authentication for all");
    assert_ne!(c.token().await.unwrap(), token);
    // And it stays: the next requests use the new token.
    c.get(Service::Network, "/networks").send_empty().await.unwrap();
    assert_eq!(c.tokens_issued(), 2);
}

#[tokio::test]
async fn application_credential_by_id_and_by_name() {
    let cloud = cloud();
    let ccm = cloud.client(User::Ccm).await;
    let user_id = ccm.token_info().user_id.unwrap();
    let name = cloud.unique_name("ac");
    let created: Value = ccm
        .post(
            Service::Identity,
            &format!("/users/{user_id}/application_credentials"),
        )
        .json(&json!({"application_credential": {"name": name, "description": "client.rs test"}}))
        .send_json()
        .await
        .expect("creating an application credential");
    let ac = &created["application_credential"];
    let (id, secret) = (
        ac["id"].as_str().unwrap().to_owned(),
        ac["secret"].as_str().unwrap().to_owned(),
    );

    let mut creds = cloud.credentials(User::Ccm);
    // The configured project scope is ignored: the credential carries its own.
    creds.method = Method::ApplicationCredential {
        id: Some(id.clone()),
        name: None,
        user: None,
        secret: Secret(secret.clone()),
    };
    let by_id = Client::connect(&creds)
        .await
        .expect("application credential by id");
    assert_eq!(
        by_id.token_info().project_id.as_deref(),
        Some(cloud.info.ids.project_ccm.as_str())
    );
    by_id
        .get(Service::Compute, "/servers")
        .send_empty()
        .await
        .unwrap();

    creds.method = Method::ApplicationCredential {
        id: None,
        name: Some(name.clone()),
        user: Some(UserRef::Name {
            name: "ccm".into(),
            domain: default_domain(),
        }),
        secret: Secret(secret.clone()),
    };
    creds.scope = Scope::Implied;
    let by_name = Client::connect(&creds)
        .await
        .expect("application credential by name and user");
    by_name
        .get(Service::Network, "/networks")
        .send_empty()
        .await
        .unwrap();

    creds.method = Method::ApplicationCredential {
        id: Some(id.clone()),
        name: None,
        user: None,
        secret: Secret("not-the-secret".into()),
    };
    assert_eq!(
        Client::connect(&creds).await.unwrap_err().kind,
        ErrorKind::Unauthorized
    );

    ccm.delete(
        Service::Identity,
        &format!("/users/{user_id}/application_credentials/{id}"),
    )
    .send_empty()
    .await
    .expect("deleting the application credential");
}

#[tokio::test]
async fn trust_from_ccm_to_a_trustee() {
    let cloud = cloud();
    let admin = cloud.admin().await;
    let ccm = cloud.client(User::Ccm).await;
    let trustee_name = cloud.unique_name("trustee");
    let trustee_id = cloud.create_user(&admin, &trustee_name, "trustee-secret").await;
    // Keystone (Zed): the trustor creates the trust, with a project-scoped token, delegating
    // roles it has on that project.
    let trust: Value = ccm
        .post(Service::Identity, "/OS-TRUST/trusts")
        .json(&json!({"trust": {
            "trustor_user_id": ccm.token_info().user_id.unwrap(),
            "trustee_user_id": trustee_id,
            "project_id": cloud.info.ids.project_ccm,
            "roles": [{"name": "member"}],
            "impersonation": false,
        }}))
        .send_json()
        .await
        .expect("creating the trust");
    let trust_id = trust["trust"]["id"].as_str().unwrap().to_owned();

    let mut creds = cloud.credentials(User::Ccm);
    creds.method = Method::Trust {
        trust_id: trust_id.clone(),
        user: UserRef::Name {
            name: trustee_name.clone(),
            domain: default_domain(),
        },
        password: Secret("trustee-secret".into()),
    };
    let c = Client::connect(&creds).await.expect("connect with the trust");
    assert_eq!(
        c.token_info().project_id.as_deref(),
        Some(cloud.info.ids.project_ccm.as_str())
    );
    assert_eq!(c.token_info().user_id.as_deref(), Some(trustee_id.as_str()));
    let nets: Value = c
        .get(Service::Network, "/networks")
        .query(&[("name", "private")])
        .send_json()
        .await
        .unwrap();
    assert_eq!(
        nets["networks"].as_array().map(Vec::len),
        Some(1),
        "the trust sees project ccm's network"
    );

    ccm.delete(Service::Identity, &format!("/OS-TRUST/trusts/{trust_id}"))
        .send_empty()
        .await
        .unwrap();
    admin
        .delete(Service::Identity, &format!("/users/{trustee_id}"))
        .send_empty()
        .await
        .unwrap();
}

#[tokio::test]
async fn token_exchange() {
    let ccm = cloud().client(User::Ccm).await;
    let mut creds = cloud().credentials(User::Ccm);
    creds.method = Method::Token {
        token: ccm.token().await.unwrap(),
    };
    let c = Client::connect(&creds).await.expect("token method");
    assert_eq!(c.token_info().project_id, ccm.token_info().project_id);
    c.get(Service::Compute, "/flavors").send_empty().await.unwrap();
}

#[tokio::test]
async fn not_found_is_typed_and_left_to_the_caller() {
    let c = cloud().client(User::Ccm).await;
    let missing = "00000000-0000-4000-8000-000000000000";
    let e = c
        .get(Service::Compute, &format!("/servers/{missing}"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.error_type.as_deref(), Some("itemNotFound"));
    assert!(e.message.contains("could not be found"), "{e}");
    assert!(
        e.request_id.as_deref().is_some_and(|r| r.starts_with("req-")),
        "{e:?}"
    );
    assert_eq!(&*e.path, format!("/servers/{missing}"));
    assert!(matches!(ProviderError::from(e), ProviderError::Internal(_)));

    let e = c
        .get(Service::Network, &format!("/networks/{missing}"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.error_type.as_deref(), Some("NetworkNotFound"), "{e:?}");

    let e = c
        .get(Service::LoadBalancer, &format!("/lbaas/loadbalancers/{missing}"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    let e = c
        .get(Service::Network, "/ports")
        .query(&[("fixed_ips", "garbage")])
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest, "{e:?}");
    assert_eq!(e.error_type.as_deref(), Some("InvalidInput"));
    assert!(matches!(
        ProviderError::from(e),
        ProviderError::InvalidArgument(_)
    ));
}

#[tokio::test]
async fn interfaces_and_regions() {
    for interface in [Interface::Internal, Interface::Admin] {
        let mut creds = cloud().credentials(User::Ccm);
        creds.interface = interface;
        let c = Client::connect(&creds).await.expect("connect");
        c.get(Service::Compute, "/servers").send_empty().await.unwrap();
        assert_eq!(
            c.endpoint(Service::Network).unwrap(),
            format!("{}/v2.0", cloud().info.endpoints["network"])
        );
        assert_eq!(
            c.endpoint(Service::LoadBalancer).unwrap(),
            format!("{}/v2", cloud().info.endpoints["load-balancer"])
        );
        assert_eq!(
            c.endpoint(Service::Compute).unwrap(),
            cloud().info.endpoints["compute"]
        );
    }
    let mut creds = cloud().credentials(User::Ccm);
    creds.region = "Nowhere".into();
    let e = Client::connect(&creds).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoEndpoint, "{e}");
    assert!(
        e.message.contains("\"Nowhere\"") && e.message.contains("RegionOne"),
        "{e}"
    );
    assert!(matches!(
        ProviderError::from(e),
        ProviderError::InvalidArgument(_)
    ));
}

#[tokio::test]
async fn pagination_and_repeated_query_parameters() {
    let cloud = cloud();
    let c = cloud.client(User::Ccm).await;
    // Nova: flavors_links.
    let before = c
        .request_counts()
        .get(&(Service::Compute, "GET".to_owned()))
        .copied()
        .unwrap_or(0);
    let flavors: Vec<Value> = c
        .get(Service::Compute, "/flavors")
        .query(&[("limit", "1")])
        .send_paginated("flavors", 10)
        .await
        .unwrap();
    let names: Vec<&str> = flavors.iter().filter_map(|f| f["name"].as_str()).collect();
    assert!(
        names.contains(&"m1.tiny") && names.contains(&"m1.small"),
        "{names:?}"
    );
    let pages = c.request_counts()[&(Service::Compute, "GET".to_owned())] - before;
    assert!(pages >= 2, "{pages} pages");
    let e = c
        .get(Service::Compute, "/flavors")
        .query(&[("limit", "1")])
        .send_paginated::<Value>("flavors", 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooManyPages);

    // Neutron: networks_links with limit; repeated id= parameters.
    let ids = [
        cloud.info.ids.network_private.as_str(),
        cloud.info.ids.network_public.as_str(),
    ];
    let nets: Vec<Value> = c
        .get(Service::Network, "/networks")
        .query(&[("id", ids[0]), ("id", ids[1])])
        .query(&[("limit", "1")])
        .send_paginated("networks", 10)
        .await
        .unwrap();
    let mut got: Vec<&str> = nets.iter().filter_map(|n| n["id"].as_str()).collect();
    got.sort();
    let mut want = ids.to_vec();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test]
async fn if_match_precondition_failed() {
    let cloud = cloud();
    let c = cloud.client(User::Ccm).await;
    let path = format!("/routers/{}", cloud.info.ids.router1);
    // Other tests may update router1 at the same time: retry on a 412 until our write lands.
    let mut revision = 0;
    for _ in 0..5 {
        let router: Value = c.get(Service::Network, &path).send_json().await.unwrap();
        revision = router["router"]["revision_number"].as_u64().unwrap();
        let put = c
            .put(Service::Network, &path)
            .header("If-Match", &format!("revision_number={revision}"))
            .json(&json!({"router": {"description": cloud.unique_name("client-test")}}))
            .send()
            .await;
        match put {
            Ok(r) => {
                assert_eq!(r.status().as_u16(), 200);
                break;
            }
            Err(e) if e.is_precondition_failed() => continue,
            Err(e) => panic!("{e}"),
        }
    }
    let e = c
        .put(Service::Network, &path)
        .header("If-Match", &format!("revision_number={revision}"))
        .json(&json!({"router": {"description": "stale"}}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::PreconditionFailed, "{e:?}");
    // Neutron's type for a stale If-Match (not "PreconditionFailed").
    assert_eq!(
        e.error_type.as_deref(),
        Some("RevisionNumberConstraintFailed"),
        "{e:?}"
    );
    assert!(matches!(ProviderError::from(e), ProviderError::RetryAfter { .. }));
}

#[tokio::test]
async fn servers_microversions_and_lifecycle() {
    let cloud = cloud();
    let c = cloud.client(User::Ccm).await;
    let name = cloud.unique_name("client-vm");
    let id = cloud.boot_server(&c, &name, "m1.tiny", "private").await;

    let exact = format!("^{name}$");
    let old: Value = c
        .get(Service::Compute, "/servers/detail")
        .query(&[("name", exact.as_str())])
        .send_json()
        .await
        .unwrap();
    assert_eq!(old["servers"].as_array().map(Vec::len), Some(1), "{old}");
    assert_eq!(
        old["servers"][0]["flavor"]["id"], "1",
        "2.1 names the flavor by id"
    );
    let new: Value = c
        .get(Service::Compute, "/servers/detail")
        .query(&[("name", exact.as_str())])
        .microversion("2.47")
        .send_json()
        .await
        .unwrap();
    assert_eq!(new["servers"][0]["flavor"]["original_name"], "m1.tiny", "{new}");
    let r = c
        .get(Service::Compute, &format!("/servers/{id}"))
        .microversion("2.79")
        .send()
        .await
        .unwrap();
    assert_eq!(r.header("openstack-api-version"), Some("compute 2.79"));

    cloud.stop_server(&c, &id).await;
    // Stopping a stopped server: Nova's 409.
    let e = c
        .post(Service::Compute, &format!("/servers/{id}/action"))
        .json(&json!({"os-stop": null}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{e:?}");
    assert_eq!(e.error_type.as_deref(), Some("conflictingRequest"));
    cloud.start_server(&c, &id).await;
    cloud.delete_server(&c, &id).await;
    let e = c
        .get(Service::Compute, &format!("/servers/{id}"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_not_found());
}

/// Quota errors as Zed answers them, in a project of its own with quotas of 0.
#[tokio::test]
async fn quota_errors() {
    let cloud = cloud();
    let admin = cloud.admin().await;
    let name = cloud.unique_name("quota");
    let project: Value = admin
        .post(Service::Identity, "/projects")
        .json(&json!({"project": {"name": name, "domain_id": "default"}}))
        .send_json()
        .await
        .unwrap();
    let pid = project["project"]["id"].as_str().unwrap().to_owned();
    let admin_id = admin.token_info().user_id.unwrap();
    let roles: Value = admin
        .get(Service::Identity, "/roles")
        .query(&[("name", "member")])
        .send_json()
        .await
        .unwrap();
    let member = roles["roles"][0]["id"].as_str().unwrap();
    admin
        .put(
            Service::Identity,
            &format!("/projects/{pid}/users/{admin_id}/roles/{member}"),
        )
        .send_empty()
        .await
        .unwrap();
    admin
        .put(Service::Compute, &format!("/os-quota-sets/{pid}"))
        .json(&json!({"quota_set": {"instances": 0}}))
        .send_empty()
        .await
        .unwrap();
    admin
        .put(Service::Network, &format!("/quotas/{pid}"))
        .json(&json!({"quota": {"network": 0}}))
        .send_empty()
        .await
        .unwrap();
    let mut creds = cloud.credentials(User::Admin);
    creds.scope = Scope::Project(ProjectRef::Id(pid.clone()));
    let c = Client::connect(&creds).await.unwrap();

    let e = c
        .post(Service::Compute, "/servers")
        .microversion("2.47")
        .json(&json!({"server": {"name": "q", "flavorRef": "1", "imageRef": cloud.info.ids.image_cirros, "networks": "none"}}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.status.map(|s| s.as_u16())),
        (ErrorKind::OverQuota, Some(403)),
        "{e:?}"
    );
    let e = c
        .post(Service::Network, "/networks")
        .json(&json!({"network": {"name": "q"}}))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.status.map(|s| s.as_u16())),
        (ErrorKind::OverQuota, Some(409)),
        "{e:?}"
    );
    assert_eq!(e.error_type.as_deref(), Some("OverQuota"));
    assert!(matches!(ProviderError::from(e), ProviderError::QuotaExceeded(m) if m.contains("['network']")));

    admin
        .delete(Service::Identity, &format!("/projects/{pid}"))
        .send_empty()
        .await
        .unwrap();
}
