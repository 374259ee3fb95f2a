//! vSphere's tagging REST API (`/rest/com/vmware/cis/...`), as zones and regions need it: one
//! session per vCenter, kept and renewed on a 401, never one per lookup (CPI logs in and out
//! for every zone lookup, up to three times per node, which is how vCenters run out of
//! sessions: CAPV #1552, #1818). The transport and credentials are the SOAP client's.
//!
//! Hand-written for the reason the SOAP client is ([`crate::soap`]): no maintained crate speaks
//! this API; it is five JSON calls over the hyper client the provider already has.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::soap::{self, Moref, SoapError};

const SESSION_HEADER: &str = "vmware-api-session-id";

/// A tag: its name (the zone or region it stands for) and its category.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Tag {
    /// The tag's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its category's id.
    pub category_id: String,
}

/// A category: its id and name (`[Labels] zone` and `region` name categories).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Category {
    /// The category's id.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// The tagging API of one vCenter.
pub struct Tagging {
    soap: std::sync::Arc<soap::Client>,
    session: tokio::sync::Mutex<Option<String>>,
    calls: AtomicU64,
    logins: AtomicU64,
}

impl Tagging {
    /// The tagging API beside `soap` (the same host, TLS settings and credentials).
    pub fn new(soap: std::sync::Arc<soap::Client>) -> Self {
        Self {
            soap,
            session: tokio::sync::Mutex::new(None),
            calls: AtomicU64::new(0),
            logins: AtomicU64::new(0),
        }
    }

    /// REST calls made so far (logins included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// REST logins made so far.
    pub fn logins(&self) -> u64 {
        self.logins.load(Ordering::Relaxed)
    }

    fn url(&self, path: &str) -> String {
        let sdk = self.soap.vcenter().sdk_url();
        let base = sdk.strip_suffix("/sdk").unwrap_or(&sdk);
        format!("{base}/rest/com/vmware/cis{path}")
    }

    async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        auth: Auth<'_>,
    ) -> Result<(http::StatusCode, Bytes), SoapError> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(self.url(path))
            .header(http::header::USER_AGENT, "cloud-gateway-vsphere")
            .header(http::header::ACCEPT, "application/json");
        request = match auth {
            Auth::Basic(credential) => request.header(
                http::header::AUTHORIZATION,
                format!("Basic {}", basic(&credential.user, &credential.password.0)),
            ),
            Auth::Session(id) => request.header(SESSION_HEADER, id),
        };
        let payload = match body {
            Some(v) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(payload))
            .map_err(|e| SoapError::Transport(e.to_string()))?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        let (status, _, bytes) = self.soap.exchange(request).await?;
        Ok((status, bytes))
    }

    /// The session, logged in when there is none (or `stale` was refused).
    async fn session(&self, stale: Option<&str>) -> Result<String, SoapError> {
        let mut session = self.session.lock().await;
        if let Some(id) = session.as_deref().filter(|id| Some(*id) != stale) {
            return Ok(id.to_owned());
        }
        let mut last = None;
        for credential in self.soap.credentials()? {
            self.logins.fetch_add(1, Ordering::Relaxed);
            let (status, bytes) = self
                .send(http::Method::POST, "/session", None, Auth::Basic(&credential))
                .await?;
            if status == http::StatusCode::UNAUTHORIZED {
                last = Some(credential.user.clone());
                continue;
            }
            let id: String = value(status, &bytes, "/session")?;
            tracing::info!(server = %self.soap.vcenter().server, user = %credential.user, "logged in to vCenter's REST API");
            *session = Some(id.clone());
            return Ok(id);
        }
        Err(SoapError::Login(format!(
            "vCenter {}'s REST API refused the credentials (user {:?})",
            self.soap.vcenter().server,
            last.unwrap_or_default()
        )))
    }

    /// One call in the session; logged in again once when vCenter forgot it (401).
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, SoapError> {
        let id = self.session(None).await?;
        let (status, bytes) = self
            .send(method.clone(), path, body.as_ref(), Auth::Session(&id))
            .await?;
        if status != http::StatusCode::UNAUTHORIZED {
            return value(status, &bytes, path);
        }
        let id = self.session(Some(&id)).await?;
        let (status, bytes) = self.send(method, path, body.as_ref(), Auth::Session(&id)).await?;
        value(status, &bytes, path)
    }

    /// Every category's id.
    pub async fn category_ids(&self) -> Result<Vec<String>, SoapError> {
        let ids: Option<Vec<String>> = self.call(http::Method::GET, "/tagging/category", None).await?;
        Ok(ids.unwrap_or_default())
    }

    /// One category.
    pub async fn category(&self, id: &str) -> Result<Category, SoapError> {
        self.call(http::Method::GET, &format!("/tagging/category/id:{id}"), None)
            .await
    }

    /// The ids of the tags in a category.
    pub async fn tags_in(&self, category_id: &str) -> Result<Vec<String>, SoapError> {
        // An empty list comes as `null` from vcsim.
        let ids: Option<Vec<String>> = self
            .call(
                http::Method::POST,
                &format!("/tagging/tag/id:{category_id}?~action=list-tags-for-category"),
                None,
            )
            .await?;
        Ok(ids.unwrap_or_default())
    }

    /// One tag.
    pub async fn tag(&self, id: &str) -> Result<Tag, SoapError> {
        self.call(http::Method::GET, &format!("/tagging/tag/id:{id}"), None)
            .await
    }

    /// The objects each of `tag_ids` is attached to, in one call.
    pub async fn attached_objects(&self, tag_ids: &[String]) -> Result<Vec<(String, Vec<Moref>)>, SoapError> {
        if tag_ids.is_empty() {
            return Ok(Vec::new());
        }
        #[derive(Deserialize)]
        struct Object {
            #[serde(rename = "type")]
            kind: String,
            id: String,
        }
        #[derive(Deserialize)]
        struct Attached {
            tag_id: String,
            #[serde(default)]
            object_ids: Option<Vec<Object>>,
        }
        let attached: Option<Vec<Attached>> = self
            .call(
                http::Method::POST,
                "/tagging/tag-association?~action=list-attached-objects-on-tags",
                Some(json!({ "tag_ids": tag_ids })),
            )
            .await?;
        Ok(attached
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                let objects = a
                    .object_ids
                    .unwrap_or_default()
                    .into_iter()
                    .map(|o| Moref::new(&o.kind, &o.id))
                    .collect();
                (a.tag_id, objects)
            })
            .collect())
    }

    /// The ids of the tags attached to `object` (CPI's call per object on its walk up the
    /// inventory; this provider reads the attachments per tag instead, [`Tagging::attached_objects`],
    /// and `make bench-vsphere` replays CPI's sequence with it).
    pub async fn attached_tags(&self, object: &Moref) -> Result<Vec<String>, SoapError> {
        let ids: Option<Vec<String>> = self
            .call(
                http::Method::POST,
                "/tagging/tag-association?~action=list-attached-tags",
                Some(json!({ "object_id": { "type": object.kind, "id": object.value } })),
            )
            .await?;
        Ok(ids.unwrap_or_default())
    }

    /// Ends the session (at shutdown).
    pub async fn logout(&self) {
        let Some(id) = self.session.lock().await.take() else {
            return;
        };
        let _ = self
            .send(http::Method::DELETE, "/session", None, Auth::Session(&id))
            .await;
    }
}

enum Auth<'a> {
    Basic(&'a crate::credentials::Credential),
    Session(&'a str),
}

/// The `value` of an answer (`{"value": …}`), or the error its status stands for.
fn value<T: serde::de::DeserializeOwned>(
    status: http::StatusCode,
    bytes: &[u8],
    path: &str,
) -> Result<T, SoapError> {
    if !status.is_success() {
        return Err(SoapError::Http {
            status: status.as_u16(),
        });
    }
    #[derive(Deserialize)]
    struct Envelope<T> {
        value: T,
    }
    serde_json::from_slice::<Envelope<T>>(bytes)
        .map(|e| e.value)
        .map_err(|e| SoapError::Decode(format!("{path}: {e}")))
}

/// RFC 7617's `user:password`, base64.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_base64_of_user_colon_password() {
        // RFC 7617's example.
        assert_eq!(basic("Aladdin", "open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(basic("a", ""), "YTo=");
        assert_eq!(basic("ab", "c"), "YWI6Yw==");
        assert_eq!(basic("abc", "de"), "YWJjOmRl");
    }

    #[test]
    fn answers_are_read_from_their_value() {
        let ids: Vec<String> = value(http::StatusCode::OK, br#"{"value":["a","b"]}"#, "/x").unwrap();
        assert_eq!(ids, ["a", "b"]);
        let none: Option<Vec<String>> = value(http::StatusCode::OK, br#"{"value":null}"#, "/x").unwrap();
        assert_eq!(none, None);
        assert_eq!(
            value::<Vec<String>>(http::StatusCode::SERVICE_UNAVAILABLE, b"", "/x"),
            Err(SoapError::Http { status: 503 })
        );
        assert!(matches!(
            value::<Vec<String>>(http::StatusCode::OK, b"<html>", "/x"),
            Err(SoapError::Decode(m)) if m.contains("/x")
        ));
    }
}
