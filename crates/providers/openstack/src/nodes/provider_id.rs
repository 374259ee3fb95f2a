//! OCCM's providerIDs: `openstack:///<server-id>`, or `openstack://<region>/<server-id>` when
//! `OS_CCM_REGIONAL=true` (OCCM's `instanceIDFromProviderID` and `makeInstanceID`).

use provider::ProviderError;

/// The scheme of OCCM's providerIDs, and the provider name.
pub const PROVIDER_NAME: &str = "openstack";

/// Why a providerID does not name a server of this cloud.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderIdError {
    /// Not `openstack://[region]/<id>` (nor one of the scheme-less forms OCCM accepts).
    #[error("ProviderID {0:?} didn't match expected format \"openstack://region/InstanceID\"")]
    Format(String),
    /// A regional providerID of another region.
    #[error("ProviderID {provider_id:?} didn't match supported region {region:?}")]
    Region {
        /// The providerID.
        provider_id: String,
        /// The configured `[Global] region`.
        region: String,
    },
}

impl From<ProviderIdError> for ProviderError {
    /// Neither error means "not found": OCCM returns them as plain errors, so the Node stays.
    fn from(e: ProviderIdError) -> Self {
        ProviderError::InvalidArgument(e.to_string())
    }
}

/// Splits a providerID into `(server_id, region)`; the region is empty in the global form.
///
/// Accepted: `openstack:///ID`, `openstack://Region/ID`, and without a scheme (kubernetes#85731)
/// `/ID` and `Region/ID`. Everything else must match `^openstack://([^/]*)/([^/]+)$`.
///
/// # Errors
/// [`ProviderIdError::Format`] for any other shape (`openstack://ID`, a bare `ID`,
/// `other:///ID`, an empty string).
pub fn instance_id_from_provider_id(provider_id: &str) -> Result<(&str, &str), ProviderIdError> {
    let err = || {
        // OCCM reports the string after it added the missing scheme.
        let shown = if !provider_id.is_empty() && !provider_id.contains("://") {
            format!("{PROVIDER_NAME}://{provider_id}")
        } else {
            provider_id.to_owned()
        };
        ProviderIdError::Format(shown)
    };
    // A string without "://" gets the scheme prepended, i.e. what follows it is the whole string.
    let rest = if provider_id.contains("://") {
        provider_id
            .strip_prefix(PROVIDER_NAME)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(err)?
    } else if provider_id.is_empty() {
        return Err(err());
    } else {
        provider_id
    };
    // `([^/]*)/([^/]+)`: exactly one slash, a non-empty ID after it.
    match rest.split_once('/') {
        Some((region, id)) if !id.is_empty() && !id.contains('/') => Ok((id, region)),
        _ => Err(err()),
    }
}

/// How this cloud's providerIDs are written and checked: `[Global] region` and whether
/// `OS_CCM_REGIONAL=true`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderIdScheme {
    /// `[Global] region`.
    pub region: String,
    /// `OS_CCM_REGIONAL=true`: write the region into providerIDs.
    pub regional: bool,
}

impl ProviderIdScheme {
    /// The providerID reported for a server (`makeInstanceID`).
    pub fn make_instance_id(&self, server_id: &str) -> String {
        make_instance_id(server_id, &self.region, self.regional)
    }

    /// The server ID a Node's providerID names in this region (`getInstance`).
    ///
    /// # Errors
    /// A malformed providerID, or a region component that is not `[Global] region`. Both
    /// readings are accepted whatever `regional` is, so switching the mode keeps old Nodes.
    pub fn server_id<'a>(&self, provider_id: &'a str) -> Result<&'a str, ProviderIdError> {
        let (id, region) = instance_id_from_provider_id(provider_id)?;
        if !region.is_empty() && region != self.region {
            return Err(ProviderIdError::Region {
                provider_id: provider_id.to_owned(),
                region: self.region.clone(),
            });
        }
        Ok(id)
    }
}

/// `openstack:///<id>`, or `openstack://<region>/<id>` in regional mode.
pub fn make_instance_id(server_id: &str, region: &str, regional: bool) -> String {
    if regional {
        format!("{PROVIDER_NAME}://{region}/{server_id}")
    } else {
        format!("{PROVIDER_NAME}:///{server_id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OCCM `Test_instanceIDFromProviderID` (instances_test.go), 5 cases.
    #[test]
    fn occm_instances_test_instance_id_from_provider_id() {
        type Case<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);
        let cases: [Case; 5] = [
            (
                "it parses region & instanceID correctly from providerID",
                "openstack://us-east-1/testInstanceID",
                Some(("testInstanceID", "us-east-1")),
            ),
            (
                "it parses instanceID if providerID has empty protocol & no region",
                "/testInstanceID",
                Some(("testInstanceID", "")),
            ),
            (
                "it returns error in case of invalid providerID format with no region",
                "openstack://us-east-1-testInstanceID",
                None,
            ),
            (
                "it parses correct instanceID in case the region name is the empty string",
                "openstack:///testInstanceID",
                Some(("testInstanceID", "")),
            ),
            (
                "it appends openstack:// in case of missing protocol in providerID",
                "us-east-1/testInstanceID",
                Some(("testInstanceID", "us-east-1")),
            ),
        ];
        for (name, pid, want) in cases {
            match (instance_id_from_provider_id(pid), want) {
                (Ok(got), Some(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), None) => assert!(
                    e.to_string().contains("didn't match expected format"),
                    "{name}: {e}"
                ),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// OCCM `TestInstanceIDFromProviderID` (openstack_test.go), 6 cases.
    #[test]
    fn occm_openstack_test_instance_id_from_provider_id() {
        let id = "7b9cf879-7146-417c-abfd-cb4272f0c935";
        let cases = [
            (format!("openstack:///{id}"), Some((id, ""))),
            (format!("openstack://RegionOne/{id}"), Some((id, "RegionOne"))),
            (format!("/{id}"), Some((id, ""))),
            (format!("openstack://{id}"), None),
            (id.to_owned(), None),
            (format!("other-provider:///{id}"), None),
        ];
        for (pid, want) in cases {
            assert_eq!(instance_id_from_provider_id(&pid).ok(), want, "{pid}");
        }
    }

    #[test]
    fn more_shapes() {
        for bad in [
            "",
            "openstack://",
            "openstack:///",
            "openstack://r/a/b",
            "r/a/b",
            "OpenStack:///x",
            "aws:///us-east-1a/i-1",
            "xopenstack:///x",
        ] {
            assert!(instance_id_from_provider_id(bad).is_err(), "{bad:?}");
        }
        // "openstack:/x" has no "://", so it reads as region "openstack:" and ID "x", as in OCCM.
        assert_eq!(
            instance_id_from_provider_id("openstack:/x"),
            Ok(("x", "openstack:"))
        );
    }

    #[test]
    fn region_check() {
        let global = ProviderIdScheme {
            region: "RegionOne".into(),
            regional: false,
        };
        assert_eq!(global.server_id("openstack:///abc"), Ok("abc"));
        assert_eq!(global.server_id("openstack://RegionOne/abc"), Ok("abc"));
        assert_eq!(global.server_id("RegionOne/abc"), Ok("abc"));
        let e = global.server_id("openstack://RegionTwo/abc").unwrap_err();
        assert!(matches!(e, ProviderIdError::Region { .. }));
        assert!(matches!(
            ProviderError::from(e),
            ProviderError::InvalidArgument(_)
        ));
        assert!(global.server_id("abc").is_err());
    }

    #[test]
    fn make_instance_id_forms() {
        assert_eq!(make_instance_id("abc", "RegionOne", false), "openstack:///abc");
        assert_eq!(
            make_instance_id("abc", "RegionOne", true),
            "openstack://RegionOne/abc"
        );
        let s = ProviderIdScheme {
            region: "R".into(),
            regional: true,
        };
        // What we write, we read back.
        assert_eq!(s.server_id(&s.make_instance_id("abc")), Ok("abc"));
    }
}
