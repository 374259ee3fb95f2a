//! The SOAP client against vcsim: the searches, one batched property read, a session vCenter
//! forgot renewed once, a deleted VM named by ManagedObjectNotFound, a wrong password refused.

use provider_vsphere::{
    config::{Environment, parse},
    soap::{Client, Moref, SoapError},
};
use vsphere_fixture::{Vcsim, Vm};

fn client(vcsim: &Vcsim, extra_global: &str) -> std::sync::Arc<Client> {
    let text = vcsim
        .conf("")
        .replacen("[Global]\n", &format!("[Global]\n{extra_global}"), 1);
    let read = parse(&text, Environment::process()).expect("vsphere.conf");
    Client::new(&read.config.vcenters[0], None).expect("client")
}

#[tokio::test]
async fn searches_and_one_batched_read_in_one_session() {
    let vcsim = Vcsim::shared();
    let ip = vcsim.unique_ipv4();
    let a = Vm::ubuntu("soap-a", &ip);
    let b = Vm::ubuntu("soap-b", "10.20.0.2");
    let ma = vcsim.create_vm(&a);
    let mb = vcsim.create_vm(&b);
    let c = client(vcsim, "");

    let found = c.find_by_uuid(None, &a.uuid).await.unwrap();
    assert_eq!(found, Some(Moref::new("VirtualMachine", &ma)));
    assert_eq!(
        c.find_by_uuid(None, "00000000-0000-0000-0000-000000000000")
            .await
            .unwrap(),
        None
    );
    let by_name = c.find_all_by_dns_name(None, &b.guest.host_name).await.unwrap();
    assert_eq!(by_name, vec![Moref::new("VirtualMachine", &mb)]);
    assert_eq!(
        c.find_by_ip(None, &ip).await.unwrap(),
        Some(Moref::new("VirtualMachine", &ma))
    );

    let refs = [
        Moref::new("VirtualMachine", &ma),
        Moref::new("VirtualMachine", &mb),
    ];
    let before = c.calls();
    let (objects, gone) = c
        .retrieve(
            "VirtualMachine",
            &refs,
            &[
                "summary.config.uuid",
                "guest.hostName",
                "guest.net",
                "runtime.powerState",
            ],
        )
        .await
        .unwrap();
    assert_eq!(c.calls() - before, 1, "one call for the batch");
    assert!(gone.is_empty());
    assert_eq!(objects.len(), 2);
    let oa = objects.iter().find(|o| o.obj == Some(refs[0].clone())).unwrap();
    assert_eq!(oa.text("summary.config.uuid"), a.uuid);
    assert_eq!(oa.text("guest.hostName"), a.guest.host_name);
    assert_eq!(oa.text("runtime.powerState"), "poweredOn");
    let nic = oa.prop("guest.net").unwrap().child("GuestNicInfo").unwrap();
    assert_eq!(nic.text_of("network"), Some("VM Network"));
    assert_eq!(nic.text_of("ipAddress"), Some(ip.as_str()));
    assert_eq!(c.logins(), 1, "one login for all of it");

    let dcs = c.datacenters().await.unwrap();
    assert_eq!(dcs.len(), 1);
    assert_eq!(dcs[0].1, "DC0");

    // a deleted VM: named by ManagedObjectNotFound, the rest of the batch still read
    vcsim.vm_action(&mb, "destroy");
    let (objects, gone) = c
        .retrieve("VirtualMachine", &refs, &["runtime.powerState"])
        .await
        .unwrap();
    assert_eq!(gone, vec![refs[1].clone()]);
    assert_eq!(objects.len(), 1);
}

#[tokio::test]
async fn a_session_vcenter_forgot_is_renewed_once() {
    let vcsim = Vcsim::shared();
    let vm = Vm::ubuntu("soap-s", "10.20.1.1");
    vcsim.create_vm(&vm);
    let c = client(vcsim, "");
    assert!(c.find_by_uuid(None, &vm.uuid).await.unwrap().is_some());
    assert_eq!(c.logins(), 1);
    assert!(vcsim.terminate_sessions() >= 1);
    assert!(c.find_by_uuid(None, &vm.uuid).await.unwrap().is_some());
    assert_eq!(c.logins(), 2, "logged in again once");
    assert!(c.find_by_uuid(None, &vm.uuid).await.unwrap().is_some());
    assert_eq!(c.logins(), 2);
}

#[tokio::test]
async fn a_wrong_password_is_a_login_error_and_a_bad_ca_a_transport_error() {
    let vcsim = Vcsim::shared();
    let c = client(vcsim, "");
    drop(c);
    let text = vcsim.conf("").replace(&vcsim.info.password, "wrong");
    let read = parse(&text, Environment::process()).unwrap();
    let c = Client::new(&read.config.vcenters[0], None).unwrap();
    let err = c.find_by_uuid(None, "x").await.unwrap_err();
    assert!(matches!(err, SoapError::Login(_)), "{err}");
    assert!(err.to_string().contains("InvalidLogin"), "{err}");

    // without ca-file vcsim's certificate is not trusted: refused, not "not found"
    let text = vcsim
        .conf("")
        .replace(&format!("ca-file = {}\n", vcsim.ca_file().display()), "");
    let read = parse(&text, Environment::process()).unwrap();
    let c = Client::new(&read.config.vcenters[0], None).unwrap();
    let err = c.find_by_uuid(None, "x").await.unwrap_err();
    assert!(matches!(err, SoapError::Transport(_)), "{err}");
    // insecure-flag accepts it
    let c = client(vcsim, "insecure-flag = true\n");
    assert_eq!(
        c.find_by_uuid(None, "00000000-0000-0000-0000-000000000001")
            .await
            .unwrap(),
        None
    );
}
