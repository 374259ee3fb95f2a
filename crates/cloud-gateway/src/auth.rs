//! Who is calling, and what they may call.
//!
//! Under mutual TLS the caller is its client certificate ([`tls_files::identity_of`]: the URI
//! SAN, a SPIFFE ID, else the CN), never a header. The [`Policy`] maps identities to a caller
//! name (the fair-queueing key and metric label) and the calls it may make; anything else is
//! PERMISSION_DENIED, counted by method and logged once per identity and method. So per-caller
//! state (queues, batches, metric series) exists only for the policy's few callers.
//!
//! Without TLS (`--insecure-plaintext`, for local development) there is no authentication: the
//! `x-cloudgateway-caller` header names the caller, and only the policy's caller names get
//! their own queue; any other value shares the anonymous one.

use std::{
    collections::{BTreeSet, HashSet},
    path::Path,
    sync::Mutex,
};

use gateway_api::{ANONYMOUS_CALLER, CALLER_HEADER, error::GatewayError};
use prometheus_client::metrics::{counter::Counter, family::Family};
use serde::Deserialize;
use tls_files::ServerFiles;
use tonic::Request;

use crate::metrics::MethodLabels;

/// How the gRPC port knows its callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Security {
    /// Mutual TLS: every client presents a certificate the client CA signed; its identity
    /// (URI SAN, else CN) is the caller, authorized by the policy. Files are re-read when they
    /// change, so rotated certificates need no restart.
    MutualTls {
        /// The certificate, key and client CA files.
        files: ServerFiles,
        /// Which identities may call what.
        policy: Policy,
    },
    /// `--insecure-plaintext`: no TLS, no authentication, no authorization; the caller header
    /// names the caller (only the policy's caller names get a queue of their own). For local
    /// development, tests and the demo.
    InsecurePlaintext {
        /// Whose names the header may use.
        policy: Policy,
    },
}

/// The calls of the contract, by what they touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Group {
    /// `GetCapabilities`: every caller in the policy may ask.
    Identity,
    /// Instance lookups (`InstanceExists`, `InstanceShutdown`, `InstanceMetadata`,
    /// `BatchLookupInstances`).
    Instances,
    /// Load-balancer calls.
    LoadBalancers,
    /// Route calls.
    Routes,
}

impl Group {
    /// The group of a `cloudgateway.v1` method name.
    pub fn of(method: &str) -> Option<Self> {
        Some(match method {
            "GetCapabilities" => Self::Identity,
            "InstanceExists" | "InstanceShutdown" | "InstanceMetadata" | "BatchLookupInstances" => {
                Self::Instances
            }
            "GetLoadBalancer"
            | "GetLoadBalancerName"
            | "EnsureLoadBalancer"
            | "UpdateLoadBalancer"
            | "EnsureLoadBalancerDeleted" => Self::LoadBalancers,
            "ListRoutes" | "CreateRoute" | "DeleteRoute" => Self::Routes,
            _ => return None,
        })
    }
}

/// One caller of the policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caller {
    /// Its name: the fair-queueing key and the `caller` metric label.
    pub name: String,
    /// The certificate identities that are this caller: a full identity (`spiffe://…`, a CN)
    /// matches exactly; a bare name (no `/`, no `:`) matches a SPIFFE ID ending in
    /// `/sa/<name>` or a CN equal to it.
    pub identities: Vec<String>,
    /// What it may call.
    pub allow: BTreeSet<Group>,
}

/// Which identities may call what.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The callers.
    pub callers: Vec<Caller>,
}

fn matches(pattern: &str, identity: &str) -> bool {
    if pattern.contains('/') || pattern.contains(':') {
        return pattern == identity;
    }
    identity == pattern
        || (identity.starts_with("spiffe://")
            && identity.rsplit_once("/sa/").is_some_and(|(_, sa)| sa == pattern))
}

impl Default for Policy {
    /// The controllers by their service accounts (or CNs), as the chart issues their
    /// certificates: each may make its own calls only.
    fn default() -> Self {
        let caller = |name: &str, identities: &[&str], allow: &[Group]| Caller {
            name: name.to_owned(),
            identities: identities.iter().map(|s| (*s).to_owned()).collect(),
            allow: allow.iter().copied().collect(),
        };
        Self {
            callers: vec![
                caller(
                    "node-controller",
                    &["cloud-node-controller", "cloud-node-lifecycle-controller"],
                    &[Group::Identity, Group::Instances],
                ),
                caller(
                    "service-controller",
                    &["service-lb-controller"],
                    &[Group::Identity, Group::Instances, Group::LoadBalancers],
                ),
                caller(
                    "route-controller",
                    &["node-route-controller"],
                    &[Group::Identity, Group::Routes],
                ),
            ],
        }
    }
}

impl Policy {
    /// Reads a policy file (YAML, the shape of [`Policy`]).
    ///
    /// # Errors
    /// The file cannot be read or parsed; the message names the file and the problem.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks policy text (YAML, the shape of [`Policy`]).
    ///
    /// # Errors
    /// The text is not YAML of that shape, or breaks a rule (a caller name that cannot be a
    /// metric label, a caller listed twice or without identities); the message says which.
    pub fn parse(text: &str) -> Result<Self, String> {
        let policy: Self = serde_saphyr::from_str(text).map_err(|e| e.without_snippet().to_string())?;
        policy.validate()?;
        Ok(policy)
    }

    fn validate(&self) -> Result<(), String> {
        let mut names = HashSet::new();
        for caller in &self.callers {
            let valid = !caller.name.is_empty()
                && caller.name.len() <= 63
                && caller
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !valid {
                return Err(format!(
                    "caller name {:?} must be 1-63 of a-z, 0-9 and '-'",
                    caller.name
                ));
            }
            if !names.insert(&caller.name) {
                return Err(format!("caller {:?} is listed twice", caller.name));
            }
            if caller.identities.is_empty() {
                return Err(format!("caller {:?} has no identities", caller.name));
            }
        }
        Ok(())
    }

    /// The caller a certificate identity is.
    pub fn caller_of(&self, identity: &str) -> Option<&Caller> {
        self.callers
            .iter()
            .find(|c| c.identities.iter().any(|p| matches(p, identity)))
    }

    fn is_caller_name(&self, name: &str) -> bool {
        self.callers.iter().any(|c| c.name == name)
    }
}

/// Decides who a request is from and whether it may make its call.
pub struct Authorizer {
    /// How callers are known (certificates or the header), and the policy.
    security: Security,
    denied: Family<MethodLabels, Counter>,
    /// (identity, method) pairs already logged; bounded, as only certificates our CA signed get
    /// this far.
    logged: Mutex<HashSet<(String, &'static str)>>,
}

/// Most denials logged by identity and method; later ones are only counted.
const MAX_LOGGED_DENIALS: usize = 1024;

impl Authorizer {
    /// Authorizes as `security` says, counting denials in `denied`.
    pub fn new(security: Security, denied: Family<MethodLabels, Counter>) -> Self {
        Self {
            security,
            denied,
            logged: Mutex::default(),
        }
    }

    /// The caller name of `request` for `method`, or why it may not make the call.
    ///
    /// # Errors
    /// `PermissionDenied` under mutual TLS when the certificate names no caller of the policy,
    /// or a caller not allowed this method.
    pub fn authorize<T>(&self, request: &Request<T>, method: &'static str) -> Result<String, GatewayError> {
        match &self.security {
            Security::InsecurePlaintext { policy } => Ok(caller_from_header(policy, request)),
            Security::MutualTls { policy, .. } => {
                let identity = request
                    .peer_certs()
                    .and_then(|certs| certs.first().and_then(|c| tls_files::identity_of(c)));
                let Some(identity) = identity else {
                    return Err(self.deny(
                        method,
                        "<none>",
                        "the client certificate names no identity (no URI SAN, no CN)",
                    ));
                };
                let Some(caller) = policy.caller_of(&identity) else {
                    return Err(self.deny(
                        method,
                        &identity,
                        "the identity is not in the authorization policy",
                    ));
                };
                let allowed = Group::of(method).is_some_and(|g| caller.allow.contains(&g));
                if !allowed {
                    let why = format!("caller {} may not call {method}", caller.name);
                    return Err(self.deny(method, &identity, &why));
                }
                Ok(caller.name.clone())
            }
        }
    }

    fn deny(&self, method: &'static str, identity: &str, why: &str) -> GatewayError {
        self.denied.get_or_create(&MethodLabels { method }).inc();
        let first = {
            let mut logged = self
                .logged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            logged.len() < MAX_LOGGED_DENIALS && logged.insert((identity.to_owned(), method))
        };
        if first {
            tracing::warn!(
                identity,
                method,
                why,
                "call refused (logged once per identity and method)"
            );
        }
        GatewayError::PermissionDenied(format!("{identity} may not call {method}: {why}"))
    }
}

/// The header's caller when it is one of the policy's names; anything else (absent,
/// malformed, unknown) is the anonymous caller, so no header value creates state.
fn caller_from_header<T>(policy: &Policy, request: &Request<T>) -> String {
    request
        .metadata()
        .get(CALLER_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|name| policy.is_caller_name(name))
        .map_or_else(|| ANONYMOUS_CALLER.to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_match_exactly_or_by_service_account_name() {
        let cases = [
            (
                "service-lb-controller",
                "spiffe://cluster.local/ns/kube-system/sa/service-lb-controller",
                true,
            ),
            ("service-lb-controller", "service-lb-controller", true),
            (
                "service-lb-controller",
                "spiffe://cluster.local/ns/x/sa/service-lb-controller-evil",
                false,
            ),
            (
                "service-lb-controller",
                "spiffe://cluster.local/ns/x/sa/evil/sa/x",
                false,
            ),
            ("spiffe://td/ns/a/sa/b", "spiffe://td/ns/a/sa/b", true),
            ("spiffe://td/ns/a/sa/b", "spiffe://td/ns/other/sa/b", false),
        ];
        for (pattern, identity, want) in cases {
            assert_eq!(matches(pattern, identity), want, "{pattern} vs {identity}");
        }
    }

    #[test]
    fn each_controller_may_make_its_own_calls_only() {
        let policy = Policy::default();
        let may = |identity: &str, method: &str| {
            policy
                .caller_of(identity)
                .is_some_and(|c| Group::of(method).is_some_and(|g| c.allow.contains(&g)))
        };
        let sa = |name: &str| format!("spiffe://cluster.local/ns/kube-system/sa/{name}");
        let cases = [
            ("cloud-node-controller", "BatchLookupInstances", true),
            ("cloud-node-lifecycle-controller", "InstanceExists", true),
            ("cloud-node-controller", "EnsureLoadBalancer", false),
            ("service-lb-controller", "EnsureLoadBalancerDeleted", true),
            ("service-lb-controller", "BatchLookupInstances", true),
            ("service-lb-controller", "DeleteRoute", false),
            ("node-route-controller", "CreateRoute", true),
            ("node-route-controller", "EnsureLoadBalancerDeleted", false),
            ("node-route-controller", "GetCapabilities", true),
            ("someone", "GetCapabilities", false),
        ];
        for (who, method, want) in cases {
            assert_eq!(may(&sa(who), method), want, "{who} calling {method}");
        }
    }

    #[test]
    fn a_policy_file_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.yaml");
        std::fs::write(
            &file,
            "callers:\n  - name: service-controller\n    identities: [\"spiffe://td/ns/ccm/sa/lb\"]\n    allow: [load-balancers, instances]\n",
        )
        .unwrap();
        let policy = Policy::from_file(&file).unwrap();
        assert_eq!(
            policy
                .caller_of("spiffe://td/ns/ccm/sa/lb")
                .map(|c| c.name.as_str()),
            Some("service-controller")
        );
        for bad in [
            "callers:\n  - name: x\n    identities: [a]\n    allow: [everything]\n",
            "callers:\n  - name: Bad_Name\n    identities: [a]\n    allow: [routes]\n",
            "callers:\n  - name: x\n    identities: []\n    allow: [routes]\n",
            "callers:\n  - name: x\n    identities: [a]\n    allow: [routes]\n  - name: x\n    identities: [b]\n    allow: [routes]\n",
            "callers:\n  - name: x\n    identities: [a]\n    allow: [routes]\n    extra: 1\n",
        ] {
            std::fs::write(&file, bad).unwrap();
            let err = Policy::from_file(&file).unwrap_err();
            assert!(err.contains("policy.yaml"), "{err}");
        }
    }
}
