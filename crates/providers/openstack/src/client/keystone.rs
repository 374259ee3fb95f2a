//! Keystone v3, the pure parts: the `POST /v3/auth/tokens` body for each [`Method`] and
//! [`Scope`], the token answer (expiry, catalog, who we are), the renewal decision and endpoint
//! selection from the catalog.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use super::Service;
use crate::auth::{Credentials, DomainRef, Interface, Method, ProjectRef, Scope, UserRef};

/// The shortest time before expiry at which a token is renewed.
pub const RENEW_MIN_MARGIN: Duration = Duration::from_secs(60);

/// `{auth_url}/auth/tokens`, with `auth_url` given with or without `/v3` (or an old `/v2.0`)
/// and a trailing slash.
pub fn tokens_url(auth_url: &str) -> String {
    format!("{}/auth/tokens", identity_base(auth_url))
}

/// The identity v3 base (`…/v3`) of an auth URL or an identity catalog URL.
pub fn identity_base(url: &str) -> String {
    let mut base = url.trim().trim_end_matches('/');
    if let Some(stripped) = base.strip_suffix("/v2.0") {
        base = stripped;
    }
    if base.ends_with("/v3") {
        base.to_owned()
    } else {
        format!("{base}/v3")
    }
}

fn domain(d: &DomainRef) -> Value {
    match d {
        DomainRef::Id(id) => json!({ "id": id }),
        DomainRef::Name(name) => json!({ "name": name }),
    }
}

fn user(u: &UserRef) -> Result<Value, String> {
    match u {
        UserRef::Id(id) => Ok(json!({ "id": id })),
        UserRef::Name {
            name,
            domain: Some(d),
        } => Ok(json!({ "name": name, "domain": domain(d) })),
        UserRef::Name { name, domain: None } => Err(format!(
            "user {name:?} is named without a domain (set user-domain-name or user-domain-id)"
        )),
    }
}

fn password(u: &UserRef, secret: &str) -> Result<Value, String> {
    let mut user = user(u)?;
    user["password"] = json!(secret);
    Ok(json!({ "user": user }))
}

/// The body of `POST /v3/auth/tokens`. Application credentials and trusts carry their own
/// scope, so [`Credentials::scope`] is not sent with them (Keystone refuses a second scope).
pub fn auth_body(creds: &Credentials) -> Result<Value, String> {
    let (identity, own_scope) = match &creds.method {
        Method::Password {
            user,
            password: secret,
        } => (
            json!({ "methods": ["password"], "password": password(user, &secret.0)? }),
            None,
        ),
        Method::ApplicationCredential {
            id,
            name,
            user: owner,
            secret,
        } => {
            let mut ac = match (id, name, owner) {
                (Some(id), _, _) if !id.is_empty() => json!({ "id": id }),
                (_, Some(name), Some(owner)) if !name.is_empty() => {
                    json!({ "name": name, "user": user(owner)? })
                }
                (_, Some(_), None) => {
                    return Err(
                        "application-credential-name needs the user (user-id, or username with its domain)"
                            .into(),
                    );
                }
                _ => return Err("application credential without an id or a name".into()),
            };
            ac["secret"] = json!(secret.0);
            (
                json!({ "methods": ["application_credential"], "application_credential": ac }),
                Some(Value::Null),
            )
        }
        Method::Token { token } => (json!({ "methods": ["token"], "token": { "id": token.0 } }), None),
        Method::Trust {
            trust_id,
            user,
            password: secret,
        } => (
            json!({ "methods": ["password"], "password": password(user, &secret.0)? }),
            Some(json!({ "OS-TRUST:trust": { "id": trust_id } })),
        ),
    };
    let scope = match own_scope {
        Some(s) => s,
        None => match &creds.scope {
            Scope::Project(ProjectRef::Id(id)) => json!({ "project": { "id": id } }),
            Scope::Project(ProjectRef::Name {
                name,
                domain: Some(d),
            }) => {
                json!({ "project": { "name": name, "domain": domain(d) } })
            }
            Scope::Project(ProjectRef::Name { name, domain: None }) => {
                return Err(format!(
                    "project {name:?} is named without a domain (set tenant-domain-name or domain-name)"
                ));
            }
            Scope::Domain(d) => json!({ "domain": domain(d) }),
            Scope::Implied => Value::Null,
        },
    };
    let mut auth = json!({ "identity": identity });
    if !scope.is_null() {
        auth["scope"] = scope;
    }
    Ok(json!({ "auth": auth }))
}

/// One endpoint of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Endpoint {
    /// `public`, `internal` or `admin`.
    pub interface: String,
    /// The region's id (Keystone also sends the deprecated `region`, the same).
    #[serde(default)]
    pub region_id: Option<String>,
    /// The deprecated region name.
    #[serde(default)]
    pub region: Option<String>,
    /// The URL.
    pub url: String,
}

/// One service of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CatalogEntry {
    /// `compute`, `network`, …
    #[serde(rename = "type")]
    pub service_type: String,
    /// `nova`, `neutron`, …
    #[serde(default)]
    pub name: Option<String>,
    /// Its endpoints.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Named {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    token: TokenData,
}

#[derive(Debug, Deserialize)]
struct TokenData {
    expires_at: String,
    #[serde(default)]
    issued_at: Option<String>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
    #[serde(default)]
    user: Option<Named>,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    domain: Option<Named>,
}

/// Who a token says we are, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The user's id.
    pub user_id: Option<String>,
    /// The user's name.
    pub user_name: Option<String>,
    /// The project the token is scoped to (a trust's or application credential's included).
    pub project_id: Option<String>,
    /// Its name.
    pub project_name: Option<String>,
    /// The domain, for a domain-scoped token.
    pub domain_id: Option<String>,
    /// `expires_at` as Keystone wrote it (the server's clock).
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// How long the token lives (`expires_at - issued_at`, both on the server's clock).
    pub lifetime: Duration,
}

/// A parsed token answer (the token itself comes from `X-Subject-Token`).
#[derive(Debug, Clone)]
pub struct TokenAnswer {
    /// Who and until when.
    pub info: TokenInfo,
    /// The catalog (empty for an unscoped token).
    pub catalog: Vec<CatalogEntry>,
}

fn parse_time(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s.trim_end_matches('Z'), "%Y-%m-%dT%H:%M:%S%.f")
                .map(|t| t.and_utc())
        })
        .map_err(|e| format!("token time {s:?}: {e}"))
}

/// Reads a token answer's body. `now` is the local wall clock, used only when Keystone sends no
/// `issued_at`.
pub fn parse_token(body: &[u8], now: chrono::DateTime<chrono::Utc>) -> Result<TokenAnswer, String> {
    let TokenBody { token } = serde_json::from_slice(body).map_err(|e| format!("token answer: {e}"))?;
    let expires_at = parse_time(&token.expires_at)?;
    let issued_at = match &token.issued_at {
        Some(s) => parse_time(s)?,
        None => now,
    };
    let lifetime = (expires_at - issued_at).to_std().unwrap_or_default();
    let user = token.user.unwrap_or_default();
    let project = token.project.unwrap_or_default();
    Ok(TokenAnswer {
        info: TokenInfo {
            user_id: user.id,
            user_name: user.name,
            project_id: project.id,
            project_name: project.name,
            domain_id: token.domain.and_then(|d| d.id),
            expires_at,
            lifetime,
        },
        catalog: token.catalog,
    })
}

/// How long before expiry a token of `lifetime` is renewed: max(60 s, 10 % of its life), but
/// never more than half of it (a token of a few minutes is still used).
pub fn renew_margin(lifetime: Duration) -> Duration {
    RENEW_MIN_MARGIN.max(lifetime / 10).min(lifetime / 2)
}

/// When a token received at `received` (local monotonic clock) with `lifetime` should be
/// renewed. The server's clock only gives the lifetime, so a skewed local clock changes nothing.
pub fn renew_at(received: Instant, lifetime: Duration) -> Instant {
    received + lifetime.saturating_sub(renew_margin(lifetime))
}

/// Whether a token is renewed before the next request.
pub fn needs_renewal(now: Instant, received: Instant, lifetime: Duration) -> bool {
    now >= renew_at(received, lifetime)
}

/// The base URL of `service` in the catalog, for `region` (empty: any) and `interface`, with
/// the API version the client's paths are relative to: Neutron's `/v2.0`, Octavia's `/v2`,
/// Barbican's `/v1` and Keystone's `/v3` are appended when the catalog leaves them out (as it
/// usually does for Neutron, Octavia and Barbican); Nova's catalog URL carries its `/v2.1`.
pub fn select_endpoint(
    catalog: &[CatalogEntry],
    service: Service,
    region: &str,
    interface: Interface,
) -> Result<String, String> {
    let url = catalog
        .iter()
        .filter(|s| s.service_type == service.catalog_type())
        .flat_map(|s| &s.endpoints)
        .find(|e| {
            e.interface == interface.as_str()
                && (region.is_empty()
                    || e.region_id.as_deref() == Some(region)
                    || e.region.as_deref() == Some(region))
        })
        .map(|e| e.url.trim_end_matches('/').to_owned());
    let Some(url) = url else {
        return Err(no_endpoint_message(catalog, service, region, interface));
    };
    Ok(match service {
        Service::Network if !url.ends_with("/v2.0") => format!("{url}/v2.0"),
        Service::LoadBalancer if !(url.ends_with("/v2") || url.ends_with("/v2.0")) => format!("{url}/v2"),
        Service::KeyManager if !url.ends_with("/v1") => format!("{url}/v1"),
        Service::Identity => identity_base(&url),
        _ => url,
    })
}

fn no_endpoint_message(
    catalog: &[CatalogEntry],
    service: Service,
    region: &str,
    interface: Interface,
) -> String {
    let mut seen: Vec<String> = catalog
        .iter()
        .filter(|s| s.service_type == service.catalog_type())
        .flat_map(|s| &s.endpoints)
        .map(|e| {
            format!(
                "{}/{}",
                e.region_id
                    .as_deref()
                    .or(e.region.as_deref())
                    .unwrap_or("(no region)"),
                e.interface
            )
        })
        .collect();
    seen.sort();
    seen.dedup();
    let region = if region.is_empty() {
        "any region".to_owned()
    } else {
        format!("region {region:?}")
    };
    let has = if catalog.is_empty() {
        "the token has no catalog (is it scoped to a project?)".to_owned()
    } else if seen.is_empty() {
        format!("the catalog has no {} service", service.catalog_type())
    } else {
        format!("the catalog has it in {}", seen.join(", "))
    };
    format!(
        "no {} endpoint ({}) for {region} and interface {} in the catalog: {has}",
        service.catalog_type(),
        service.project_name(),
        interface.as_str(),
    )
}

/// The regions the catalog names for `interface`, for a clear start-up error.
pub fn catalog_regions(catalog: &[CatalogEntry], interface: Interface) -> Vec<String> {
    let mut regions: Vec<String> = catalog
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.interface == interface.as_str())
        .filter_map(|e| e.region_id.clone().or_else(|| e.region.clone()))
        .collect();
    regions.sort();
    regions.dedup();
    regions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Secret, Tls};

    fn creds(method: Method, scope: Scope) -> Credentials {
        Credentials {
            auth_url: "http://k:5000/v3/".into(),
            method,
            scope,
            region: "RegionOne".into(),
            interface: Interface::Public,
            tls: Tls::default(),
            request_timeout: Duration::from_secs(60),
        }
    }

    fn by_name(name: &str) -> UserRef {
        UserRef::Name {
            name: name.into(),
            domain: Some(DomainRef::Name("Default".into())),
        }
    }

    #[test]
    fn auth_urls() {
        for (given, want) in [
            ("http://k:5000/v3", "http://k:5000/v3/auth/tokens"),
            ("http://k:5000/v3/", "http://k:5000/v3/auth/tokens"),
            ("http://k:5000", "http://k:5000/v3/auth/tokens"),
            ("http://k:5000/", "http://k:5000/v3/auth/tokens"),
            ("https://k/identity", "https://k/identity/v3/auth/tokens"),
            ("https://k/identity/v2.0/", "https://k/identity/v3/auth/tokens"),
        ] {
            assert_eq!(tokens_url(given), want, "{given}");
        }
    }

    #[test]
    fn password_bodies() {
        let pw = Secret("pw".into());
        let b = auth_body(&creds(
            Method::Password {
                user: by_name("ccm"),
                password: pw.clone(),
            },
            Scope::Project(ProjectRef::Name {
                name: "ccm".into(),
                domain: Some(DomainRef::Id("default".into())),
            }),
        ))
        .unwrap();
        assert_eq!(
            b,
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": "ccm", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"name": "ccm", "domain": {"id": "default"}}}}})
        );
        let b = auth_body(&creds(
            Method::Password {
                user: UserRef::Id("u1".into()),
                password: pw.clone(),
            },
            Scope::Project(ProjectRef::Id("p1".into())),
        ))
        .unwrap();
        assert_eq!(
            b["auth"]["identity"]["password"]["user"],
            json!({"id": "u1", "password": "pw"})
        );
        assert_eq!(b["auth"]["scope"], json!({"project": {"id": "p1"}}));
        let b = auth_body(&creds(
            Method::Password {
                user: UserRef::Id("u1".into()),
                password: pw.clone(),
            },
            Scope::Domain(DomainRef::Name("Default".into())),
        ))
        .unwrap();
        assert_eq!(b["auth"]["scope"], json!({"domain": {"name": "Default"}}));
        let b = auth_body(&creds(
            Method::Password {
                user: UserRef::Id("u1".into()),
                password: pw.clone(),
            },
            Scope::Implied,
        ))
        .unwrap();
        assert!(b["auth"].get("scope").is_none());
        let e = auth_body(&creds(
            Method::Password {
                user: UserRef::Name {
                    name: "ccm".into(),
                    domain: None,
                },
                password: pw.clone(),
            },
            Scope::Implied,
        ))
        .unwrap_err();
        assert!(e.contains("without a domain"), "{e}");
        let e = auth_body(&creds(
            Method::Password {
                user: UserRef::Id("u".into()),
                password: pw,
            },
            Scope::Project(ProjectRef::Name {
                name: "p".into(),
                domain: None,
            }),
        ))
        .unwrap_err();
        assert!(e.contains("project \"p\""), "{e}");
    }

    #[test]
    fn application_credential_trust_and_token_bodies() {
        let project = Scope::Project(ProjectRef::Id("p1".into()));
        let b = auth_body(&creds(
            Method::ApplicationCredential {
                id: Some("ac1".into()),
                name: None,
                user: None,
                secret: Secret("s".into()),
            },
            project.clone(),
        ))
        .unwrap();
        assert_eq!(
            b,
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"id": "ac1", "secret": "s"}}}})
        );
        let b = auth_body(&creds(
            Method::ApplicationCredential {
                id: None,
                name: Some("ac".into()),
                user: Some(by_name("ccm")),
                secret: Secret("s".into()),
            },
            Scope::Implied,
        ))
        .unwrap();
        assert_eq!(
            b["auth"]["identity"]["application_credential"],
            json!({"name": "ac", "user": {"name": "ccm", "domain": {"name": "Default"}}, "secret": "s"})
        );
        assert!(
            auth_body(&creds(
                Method::ApplicationCredential {
                    id: None,
                    name: Some("ac".into()),
                    user: None,
                    secret: Secret("s".into())
                },
                Scope::Implied,
            ))
            .is_err()
        );
        let b = auth_body(&creds(
            Method::Trust {
                trust_id: "t1".into(),
                user: UserRef::Id("u2".into()),
                password: Secret("pw".into()),
            },
            project.clone(),
        ))
        .unwrap();
        assert_eq!(
            b,
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {"id": "u2", "password": "pw"}}},
                "scope": {"OS-TRUST:trust": {"id": "t1"}}}})
        );
        let b = auth_body(&creds(
            Method::Token {
                token: Secret("tok".into()),
            },
            project,
        ))
        .unwrap();
        assert_eq!(
            b,
            json!({"auth": {"identity": {"methods": ["token"], "token": {"id": "tok"}},
                "scope": {"project": {"id": "p1"}}}})
        );
    }

    /// A trimmed answer of the test cloud's Keystone (Zed).
    const TOKEN: &str = r#"{"token": {"methods": ["password"],
        "user": {"domain": {"id": "default", "name": "Default"}, "id": "u1", "name": "ccm", "password_expires_at": null},
        "audit_ids": ["x"], "expires_at": "2025-11-25T15:30:00.000000Z", "issued_at": "2025-11-25T14:30:00.000000Z",
        "project": {"domain": {"id": "default", "name": "Default"}, "id": "p1", "name": "ccm"},
        "is_domain": false, "roles": [{"id": "r", "name": "member"}],
        "catalog": [
          {"endpoints": [
            {"id": "e1", "interface": "public", "region_id": "RegionOne", "url": "http://127.0.0.1:15004", "region": "RegionOne"},
            {"id": "e2", "interface": "internal", "region_id": "RegionOne", "url": "http://10.0.0.1:9696/", "region": "RegionOne"}],
           "id": "s1", "type": "network", "name": "neutron"},
          {"endpoints": [
            {"id": "e3", "interface": "public", "region_id": "RegionOne", "url": "http://127.0.0.1:15003/v2.1", "region": "RegionOne"},
            {"id": "e4", "interface": "public", "region_id": "RegionTwo", "url": "http://two:8774/v2.1", "region": "RegionTwo"}],
           "id": "s2", "type": "compute", "name": "nova"},
          {"endpoints": [
            {"id": "e5", "interface": "public", "region_id": "RegionOne", "url": "http://127.0.0.1:15005", "region": "RegionOne"}],
           "id": "s3", "type": "load-balancer", "name": "octavia"},
          {"endpoints": [
            {"id": "e6", "interface": "public", "region_id": "RegionOne", "url": "http://127.0.0.1:15000/v3/", "region": "RegionOne"}],
           "id": "s4", "type": "identity", "name": "keystone"}
        ]}}"#;

    #[test]
    fn parses_a_token_answer() {
        let t = parse_token(TOKEN.as_bytes(), chrono::Utc::now()).unwrap();
        assert_eq!(t.info.user_id.as_deref(), Some("u1"));
        assert_eq!(t.info.project_id.as_deref(), Some("p1"));
        assert_eq!(t.info.project_name.as_deref(), Some("ccm"));
        assert_eq!(t.info.lifetime, Duration::from_secs(3600));
        assert_eq!(t.catalog.len(), 4);
        for bad in [
            "",
            "{}",
            r#"{"token": {}}"#,
            r#"{"token": {"expires_at": "tomorrow"}}"#,
            "[1]",
        ] {
            assert!(parse_token(bad.as_bytes(), chrono::Utc::now()).is_err(), "{bad}");
        }
        // No issued_at: the lifetime is measured from the local clock.
        let t = parse_token(
            br#"{"token": {"expires_at": "2030-01-01T00:10:00Z"}}"#,
            "2030-01-01T00:00:00Z".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(t.info.lifetime, Duration::from_secs(600));
        assert!(t.catalog.is_empty());
    }

    #[test]
    fn selects_endpoints() {
        let c = parse_token(TOKEN.as_bytes(), chrono::Utc::now()).unwrap().catalog;
        let sel = |s, r, i| select_endpoint(&c, s, r, i);
        assert_eq!(
            sel(Service::Network, "RegionOne", Interface::Public).unwrap(),
            "http://127.0.0.1:15004/v2.0"
        );
        assert_eq!(
            sel(Service::Network, "RegionOne", Interface::Internal).unwrap(),
            "http://10.0.0.1:9696/v2.0"
        );
        assert_eq!(
            sel(Service::Compute, "RegionOne", Interface::Public).unwrap(),
            "http://127.0.0.1:15003/v2.1"
        );
        assert_eq!(
            sel(Service::Compute, "RegionTwo", Interface::Public).unwrap(),
            "http://two:8774/v2.1"
        );
        assert_eq!(
            sel(Service::Compute, "", Interface::Public).unwrap(),
            "http://127.0.0.1:15003/v2.1"
        );
        assert_eq!(
            sel(Service::LoadBalancer, "RegionOne", Interface::Public).unwrap(),
            "http://127.0.0.1:15005/v2"
        );
        assert_eq!(
            sel(Service::Identity, "RegionOne", Interface::Public).unwrap(),
            "http://127.0.0.1:15000/v3"
        );
        let e = sel(Service::Compute, "RegionOne", Interface::Internal).unwrap_err();
        assert_eq!(
            e,
            "no compute endpoint (Nova) for region \"RegionOne\" and interface internal in the catalog: \
             the catalog has it in RegionOne/public, RegionTwo/public"
        );
        let e = sel(Service::LoadBalancer, "Nowhere", Interface::Public).unwrap_err();
        assert!(
            e.contains("region \"Nowhere\"") && e.contains("RegionOne/public"),
            "{e}"
        );
        let e = select_endpoint(&[], Service::Compute, "RegionOne", Interface::Public).unwrap_err();
        assert!(e.contains("no catalog"), "{e}");
        let only_net = &c[..1];
        let e = select_endpoint(only_net, Service::LoadBalancer, "RegionOne", Interface::Public).unwrap_err();
        assert!(e.contains("has no load-balancer service"), "{e}");
        assert_eq!(catalog_regions(&c, Interface::Public), ["RegionOne", "RegionTwo"]);
        assert_eq!(catalog_regions(&c, Interface::Admin), Vec::<String>::new());
    }

    #[test]
    fn barbican_gets_its_v1_unless_the_catalog_names_it() {
        for (url, want) in [
            ("http://127.0.0.1:15009", "http://127.0.0.1:15009/v1"),
            ("http://127.0.0.1:15009/", "http://127.0.0.1:15009/v1"),
            ("https://kms.example:9311/v1", "https://kms.example:9311/v1"),
            ("https://kms.example:9311/v1/", "https://kms.example:9311/v1"),
        ] {
            let catalog = [CatalogEntry {
                service_type: "key-manager".into(),
                name: Some("barbican".into()),
                endpoints: vec![Endpoint {
                    interface: "public".into(),
                    region_id: Some("RegionOne".into()),
                    region: None,
                    url: url.into(),
                }],
            }];
            let got = select_endpoint(&catalog, Service::KeyManager, "RegionOne", Interface::Public);
            assert_eq!(got.as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn renewal_decision() {
        let hour = Duration::from_secs(3600);
        assert_eq!(renew_margin(hour), Duration::from_secs(360));
        assert_eq!(renew_margin(Duration::from_secs(300)), Duration::from_secs(60));
        assert_eq!(renew_margin(Duration::from_secs(60)), Duration::from_secs(30));
        assert_eq!(renew_margin(Duration::ZERO), Duration::ZERO);
        let t0 = Instant::now();
        assert!(!needs_renewal(t0, t0, hour));
        assert!(!needs_renewal(t0 + Duration::from_secs(3239), t0, hour));
        assert!(needs_renewal(t0 + Duration::from_secs(3240), t0, hour));
        assert!(needs_renewal(t0 + Duration::from_secs(4000), t0, hour));
        // Already expired on arrival (a clock-skewed or broken Keystone): renewed on every use,
        // which the client's failure back-off keeps from becoming once per call.
        assert!(needs_renewal(t0, t0, Duration::ZERO));
    }
}
