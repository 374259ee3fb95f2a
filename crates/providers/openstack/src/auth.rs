//! Who the provider is to Keystone and which endpoints it uses: the values of `[Global]` as OCCM
//! turns them into gophercloud's auth options (`ToAuth3Options`). Plain data: the cloud.conf
//! reader ([`crate::cloud_config`]) builds it, the client ([`crate::client`]) acts on it.

use std::{fmt, path::PathBuf};

/// A secret from the config: never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "<redacted>" })
    }
}

/// A Keystone domain, by ID or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRef {
    /// `…-domain-id`.
    Id(String),
    /// `…-domain-name`.
    Name(String),
}

/// A Keystone user: by ID (unique), or by name within a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    /// `user-id` (or `trustee-id`).
    Id(String),
    /// `username` and its domain (`user-domain-*`, else `domain-*`).
    Name {
        /// The user name.
        name: String,
        /// Its domain; `None` when the file names none (Keystone then refuses a name).
        domain: Option<DomainRef>,
    },
}

/// A Keystone project: by ID, or by name within a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectRef {
    /// `tenant-id`.
    Id(String),
    /// `tenant-name` and its domain (`tenant-domain-*`, else `domain-*`).
    Name {
        /// The project name.
        name: String,
        /// Its domain; `None` when the file names none.
        domain: Option<DomainRef>,
    },
}

/// How the provider proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// `username`/`user-id` and `password`.
    Password {
        /// The user.
        user: UserRef,
        /// Its password.
        password: Secret,
    },
    /// `application-credential-id` (or `-name` with the user) and `-secret`; the credential
    /// carries its own project scope.
    ApplicationCredential {
        /// `application-credential-id`: enough alone.
        id: Option<String>,
        /// `application-credential-name`: needs `user`.
        name: Option<String>,
        /// The owner, for a credential named rather than identified.
        user: Option<UserRef>,
        /// `application-credential-secret`.
        secret: Secret,
    },
    /// `token`: an existing token, exchanged for a scoped one.
    Token {
        /// The token.
        token: Secret,
    },
    /// `trust-id` with the trustee's password (`trustee-id`/`trustee-password`, else the user's).
    Trust {
        /// `trust-id`: also the scope.
        trust_id: String,
        /// The trustee.
        user: UserRef,
        /// The trustee's password.
        password: Secret,
    },
}

/// What the token is scoped to (a trust and an application credential scope themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A project (`tenant-*`).
    Project(ProjectRef),
    /// A domain (`domain-*` with no project).
    Domain(DomainRef),
    /// No explicit scope: the method's own (trust, application credential) or the user's default.
    Implied,
}

/// The catalog interface (`os-endpoint-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interface {
    /// `public` (the default).
    #[default]
    Public,
    /// `internal`.
    Internal,
    /// `admin`.
    Admin,
}

impl Interface {
    /// Keystone's spelling in the catalog.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Internal => "internal",
            Self::Admin => "admin",
        }
    }
}

/// TLS to every OpenStack endpoint (`ca-file` or `cafilecontents`, `tls-insecure`,
/// `cert-file`/`key-file`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    /// PEM bundle trusted instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// `cafilecontents`: the bundle given inline, trusted instead of the system's roots when
    /// there is no `ca_file` (as OCCM).
    pub ca_pem: Option<String>,
    /// `tls-insecure = true`: no verification at all.
    pub insecure: bool,
    /// Client certificate and key, for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Everything the client needs to reach the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `auth-url`: Keystone, with or without `/v3`.
    pub auth_url: String,
    /// How to authenticate.
    pub method: Method,
    /// What to scope the token to.
    pub scope: Scope,
    /// `region`: the catalog region of every endpoint; empty: the catalog's only region (the
    /// client settles it at connect and refuses a catalog with several).
    pub region: String,
    /// `os-endpoint-type`.
    pub interface: Interface,
    /// TLS settings.
    pub tls: Tls,
    /// `[Metadata] request-timeout` (OCCM: 60 s when unset): each HTTP exchange's limit.
    pub request_timeout: std::time::Duration,
}
