//! Barbican's key-manager API as this provider calls it: one read of a TLS container or secret,
//! to check a reference before a listener is written with it (OCCM's `checkService` with
//! `container-store = barbican`). Octavia itself reads the certificate; this provider never
//! reads a payload.

use provider::ProviderError;

use crate::client::{ApiError, Client, ErrorKind, Service, path_segment};

/// What a TLS reference names, read as OCCM reads it: the last two segments of its path,
/// `containers/<uuid>` or `secrets/<uuid>` (the host part is not checked; the read goes to the
/// catalog's Barbican, as OCCM's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsRef {
    /// A certificate container (certificate, private key, intermediates).
    Container(String),
    /// A secret holding a PKCS#12 bundle.
    Secret(String),
}

impl TlsRef {
    /// Reads `reference`.
    ///
    /// # Errors
    /// A message saying what is wrong with it, for the Service's Warning.
    pub fn parse(reference: &str) -> Result<Self, String> {
        let mut segments = reference.rsplit('/');
        let (id, kind) = (segments.next().unwrap_or_default(), segments.next());
        match (kind, id) {
            (None, _) => Err(format!(
                "{reference:?} is not a Barbican reference (…/containers/<uuid> or …/secrets/<uuid>)"
            )),
            (Some(_), "") => Err(format!(
                "{reference:?} names no container or secret (it ends in /)"
            )),
            (Some("containers"), id) => Ok(Self::Container(id.to_owned())),
            (Some("secrets"), id) => Ok(Self::Secret(id.to_owned())),
            (Some(other), _) => Err(format!(
                "{reference:?} names a {other:?}, where Barbican's TLS references name containers or secrets"
            )),
        }
    }

    fn path(&self) -> String {
        match self {
            Self::Container(id) => format!("/containers/{}", path_segment(id)),
            Self::Secret(id) => format!("/secrets/{}", path_segment(id)),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Container(_) => "container",
            Self::Secret(_) => "secret",
        }
    }
}

/// Whether the key manager has what `reference` names, readable by this provider's user
/// (metadata only: one `GET`, no payload).
///
/// # Errors
/// `InvalidArgument` naming the reference when Barbican says it does not exist or may not be
/// read (another project's needs an ACL for this user); the client's error otherwise.
pub async fn check(client: &Client, reference: &str, named: &TlsRef) -> Result<(), ProviderError> {
    let path = named.path();
    let answer: Result<serde_json::Value, ApiError> =
        client.get(Service::KeyManager, &path).send_json().await;
    match answer {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Err(ProviderError::InvalidArgument(format!(
            "TLS reference {reference:?}: Barbican has no such {} ({e})",
            named.kind()
        ))),
        Err(e) if e.kind == ErrorKind::Forbidden => Err(ProviderError::InvalidArgument(format!(
            "TLS reference {reference:?}: this provider's user may not read that {} ({e}); one of another \
                 project needs an ACL for it (openstack acl user add --user <the user> {reference})",
            named.kind()
        ))),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // OCCM's checkService: split on '/', the last segment is the UUID, the one before it the
    // type; fewer than two segments, or another type, is an error.
    #[test]
    fn references_are_read_by_their_last_two_segments() {
        let ok = |r: &str| TlsRef::parse(r).unwrap();
        assert_eq!(
            ok("https://barbican:9311/v1/containers/0c8e-1"),
            TlsRef::Container("0c8e-1".into())
        );
        assert_eq!(ok("http://kms/v1/secrets/abc"), TlsRef::Secret("abc".into()));
        assert_eq!(ok("containers/abc"), TlsRef::Container("abc".into()));
        for bad in [
            "abc",
            "https://barbican/v1/orders/abc",
            "https://barbican/v1/containers/",
            "",
        ] {
            let e = TlsRef::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn the_read_goes_to_the_catalogs_barbican_by_kind() {
        assert_eq!(TlsRef::Container("a b".into()).path(), "/containers/a%20b");
        assert_eq!(TlsRef::Secret("s".into()).path(), "/secrets/s");
    }
}
