//! Barbican (`key-manager`) on the test cloud as an OCCM user fills it for a TLS Service: a
//! self-signed certificate (rcgen) and its key stored as two secrets, PEM as `text/plain` (as
//! OCCM's documentation stores them: `openstack secret store --payload-content-type=text/plain`),
//! and a container of type `certificate` naming them `certificate` and `private_key`, the
//! names Octavia reads. Its `container_ref` is what a listener's `default_tls_container_ref`
//! (and OCCM's `loadbalancer.openstack.org/default-tls-container-ref`) holds.

use provider_openstack::client::{Client, Service};
use rcgen::{CertificateParams, DnType, KeyPair};
use serde_json::{Value, json};

/// A self-signed certificate for `common_name` (also its one DNS name) and its private key,
/// both PEM. The key is ECDSA P-256 (rcgen's default; Octavia accepts any key its
/// `cryptography` loads and checks only that it matches the certificate).
///
/// # Errors
/// `common_name` is not a valid DNS name for rcgen.
pub fn self_signed(common_name: &str) -> Result<(String, String), String> {
    let mut params = CertificateParams::new(vec![common_name.to_owned()])
        .map_err(|e| format!("certificate for {common_name:?}: {e}"))?;
    params.distinguished_name.push(DnType::CommonName, common_name);
    let key = KeyPair::generate().map_err(|e| format!("key: {e}"))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("self-signing {common_name:?}: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Stores `payload` as a `text/plain` secret named `name`; returns its `secret_ref`.
///
/// # Errors
/// Barbican refused or did not answer.
pub async fn store_text_secret(client: &Client, name: &str, payload: &str) -> Result<String, String> {
    let created: Value = client
        .post(Service::KeyManager, "/secrets")
        .json(&json!({"name": name, "payload": payload, "payload_content_type": "text/plain"}))
        .send_json()
        .await
        .map_err(|e| format!("storing secret {name}: {e}"))?;
    string_field(&created, "secret_ref")
}

/// A certificate container named `name` in the project of `client`: a fresh self-signed
/// certificate for CN `name` ([`self_signed`]) and its key as secrets `name-cert` and
/// `name-key`. Returns the container's ref URL. On a failure after the first secret, what was
/// stored is deleted again.
///
/// # Errors
/// `name` is no valid DNS name, or Barbican refused (the user needs Barbican's `creator` role
/// on its project; the test cloud's `ccm` has it).
pub async fn create_certificate_container(client: &Client, name: &str) -> Result<String, String> {
    let (cert_pem, key_pem) = self_signed(name)?;
    let cert_ref = store_text_secret(client, &format!("{name}-cert"), &cert_pem).await?;
    let key_ref = match store_text_secret(client, &format!("{name}-key"), &key_pem).await {
        Ok(r) => r,
        Err(e) => {
            let _ = delete_ref(client, &cert_ref).await;
            return Err(e);
        }
    };
    let body = json!({"name": name, "type": "certificate", "secret_refs": [
        {"name": "certificate", "secret_ref": cert_ref},
        {"name": "private_key", "secret_ref": key_ref},
    ]});
    let created: Result<Value, String> = client
        .post(Service::KeyManager, "/containers")
        .json(&body)
        .send_json()
        .await
        .map_err(|e| format!("storing container {name}: {e}"));
    match created.and_then(|c| string_field(&c, "container_ref")) {
        Ok(container_ref) => Ok(container_ref),
        Err(e) => {
            let _ = delete_ref(client, &cert_ref).await;
            let _ = delete_ref(client, &key_ref).await;
            Err(e)
        }
    }
}

/// Deletes the container `container_ref` and every secret it names. A container or secret
/// already gone is fine.
///
/// # Errors
/// `container_ref` is no container ref, or Barbican refused a read or delete.
pub async fn delete_container_and_secrets(client: &Client, container_ref: &str) -> Result<(), String> {
    let path = ref_path(container_ref)?;
    if !path.starts_with("/containers/") {
        return Err(format!("{container_ref:?} is no container ref"));
    }
    let container: Value = match client.get(Service::KeyManager, &path).send_json().await {
        Ok(c) => c,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(format!("reading {container_ref}: {e}")),
    };
    delete_ref(client, container_ref).await?;
    let secrets = container["secret_refs"].as_array().cloned().unwrap_or_default();
    for secret in secrets {
        if let Some(secret_ref) = secret["secret_ref"].as_str() {
            delete_ref(client, secret_ref).await?;
        }
    }
    Ok(())
}

/// Deletes a secret or container by its ref; already gone is fine.
///
/// # Errors
/// Not a Barbican ref, or Barbican refused.
pub async fn delete_ref(client: &Client, barbican_ref: &str) -> Result<(), String> {
    let path = ref_path(barbican_ref)?;
    match client.delete(Service::KeyManager, &path).send_empty().await {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(format!("deleting {barbican_ref}: {e}")),
    }
}

/// The client path of a ref (`…/v1/containers/<uuid>` → `/containers/<uuid>`): its last two
/// segments, as OCCM reads a ref, so a ref of any host reaches the client's own endpoint.
///
/// # Errors
/// The ref does not end in `secrets/<id>` or `containers/<id>`.
pub fn ref_path(barbican_ref: &str) -> Result<String, String> {
    let mut segments = barbican_ref.trim_end_matches('/').rsplit('/');
    match (segments.next(), segments.next()) {
        (Some(id), Some(kind @ ("secrets" | "containers"))) if !id.is_empty() => Ok(format!("/{kind}/{id}")),
        _ => Err(format!(
            "{barbican_ref:?} is no Barbican ref (…/secrets/<id> or …/containers/<id>)"
        )),
    }
}

fn string_field(answer: &Value, key: &str) -> Result<String, String> {
    answer[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("Barbican's answer has no {key}: {answer}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_paths() {
        for (r, want) in [
            ("http://127.0.0.1:16009/v1/containers/abc", Ok("/containers/abc")),
            ("https://kms:9311/v1/secrets/abc/", Ok("/secrets/abc")),
            ("containers/abc", Ok("/containers/abc")),
            ("http://kms/v1/orders/abc", Err(())),
            ("http://kms/v1/containers/", Err(())),
            ("abc", Err(())),
            ("", Err(())),
        ] {
            assert_eq!(ref_path(r).map_err(|_| ()), want.map(str::to_owned), "{r}");
        }
    }

    #[test]
    fn a_self_signed_certificate_names_its_cn() {
        let (cert, key) = self_signed("tls-1.example.test").unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
        assert!(
            self_signed("café.example.test").is_err(),
            "rcgen takes DNS names in ASCII only"
        );
    }
}
