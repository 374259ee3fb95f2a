//! `clouds.yaml`, read as OCCM reads it with `use-clouds = true` (`ReadConfig` → `ReadClouds`,
//! gophercloud's `clientconfig.GetCloudFromYAML`): the file is found where clientconfig looks,
//! the cloud is picked as clientconfig picks it, and its values fill what `[Global]` leaves
//! empty: a value set in `cloud.conf` wins, field by field.
//!
//! - [`search_path`]: `clouds-file` (OCCM exports it as `OS_CLIENT_CONFIG_FILE`), else the
//!   `OS_CLIENT_CONFIG_FILE` of the environment, then `./clouds.yaml`,
//!   `~/.config/openstack/clouds.yaml`, `/etc/openstack/clouds.yaml`; the first that exists.
//! - [`pick`]: the cloud named by `cloud`, else by `OS_CLOUD`, else the file's only cloud.
//! - [`merge`]: OCCM's `replaceEmpty` for each field `ReadClouds` copies, and nothing else:
//!   `verify`, `auth.token`, `auth_type`, `profile` and `regions` are not read by OCCM either
//!   and are named in the notices when set.
//!
//! Not read, as they are rare beside a CCM: `secure.yaml` and `clouds-public.yaml` (a
//! `profile`), named in the notices when the cloud asks for a profile.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Deserializer};

use crate::{auth::Secret, cloud_config::Global};

/// The file name clientconfig searches for.
pub const FILE_NAME: &str = "clouds.yaml";

/// One `clouds:` entry, the fields OCCM reads and those it ignores but we name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Cloud {
    /// `auth`.
    pub auth: Auth,
    /// `region_name`.
    #[serde(deserialize_with = "scalar")]
    pub region_name: String,
    /// `endpoint_type` (clientconfig copies `interface` here when only that is set).
    #[serde(deserialize_with = "scalar")]
    pub endpoint_type: String,
    /// `interface`.
    #[serde(deserialize_with = "scalar")]
    pub interface: String,
    /// `cacert`: a CA bundle file.
    #[serde(deserialize_with = "scalar")]
    pub cacert: String,
    /// `cert`: a client certificate file.
    #[serde(deserialize_with = "scalar")]
    pub cert: String,
    /// `key`: its key file.
    #[serde(deserialize_with = "scalar")]
    pub key: String,
    /// `verify` (not read by OCCM).
    pub verify: Option<bool>,
    /// `auth_type` (not read by OCCM: the method follows from the fields).
    #[serde(deserialize_with = "scalar")]
    pub auth_type: String,
    /// `profile` (a `clouds-public.yaml` entry; not read here).
    #[serde(deserialize_with = "scalar")]
    pub profile: String,
}

/// `auth:` of a cloud.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Auth {
    #[serde(deserialize_with = "scalar")]
    auth_url: String,
    #[serde(deserialize_with = "scalar")]
    user_id: String,
    #[serde(deserialize_with = "scalar")]
    username: String,
    #[serde(deserialize_with = "scalar")]
    password: String,
    #[serde(deserialize_with = "scalar")]
    project_id: String,
    #[serde(deserialize_with = "scalar")]
    project_name: String,
    #[serde(deserialize_with = "scalar")]
    domain_id: String,
    #[serde(deserialize_with = "scalar")]
    domain_name: String,
    #[serde(deserialize_with = "scalar")]
    project_domain_id: String,
    #[serde(deserialize_with = "scalar")]
    project_domain_name: String,
    #[serde(deserialize_with = "scalar")]
    user_domain_id: String,
    #[serde(deserialize_with = "scalar")]
    user_domain_name: String,
    #[serde(deserialize_with = "scalar")]
    application_credential_id: String,
    #[serde(deserialize_with = "scalar")]
    application_credential_name: String,
    #[serde(deserialize_with = "scalar")]
    application_credential_secret: String,
    /// Not read by OCCM (`ReadClouds` copies no token).
    #[serde(deserialize_with = "scalar")]
    token: String,
}

/// A YAML scalar as text, as Go's yaml.v2 fills a string field from `project_id: 12345` or
/// `password: yes`; null is empty.
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Int(i64),
        Float(f64),
        Bool(bool),
    }
    Ok(match Option::<Scalar>::deserialize(d)? {
        None => String::new(),
        Some(Scalar::Text(s)) => s,
        Some(Scalar::Int(i)) => i.to_string(),
        Some(Scalar::Float(f)) => f.to_string(),
        Some(Scalar::Bool(b)) => b.to_string(),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct File {
    clouds: BTreeMap<String, Cloud>,
}

/// The clouds of a `clouds.yaml` text, by name.
///
/// # Errors
/// The YAML's own message, without the file's text (it holds passwords).
pub fn parse(text: &str) -> Result<BTreeMap<String, Cloud>, String> {
    let file: File = serde_saphyr::from_str(text).map_err(|e| e.without_snippet().to_string())?;
    Ok(file.clouds)
}

/// Where clientconfig looks for `clouds.yaml`, in order: `clouds_file` (OCCM exports it as
/// `OS_CLIENT_CONFIG_FILE`, replacing the environment's), else `env_file`; then the working
/// directory, the user's `~/.config/openstack`, and `/etc/openstack`.
pub fn search_path(
    clouds_file: &str,
    env_file: Option<&str>,
    cwd: Option<&Path>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let mut path = Vec::new();
    let given = Some(clouds_file)
        .filter(|f| !f.is_empty())
        .or(env_file.filter(|f| !f.is_empty()));
    if let Some(file) = given {
        path.push(PathBuf::from(file));
    }
    if let Some(cwd) = cwd {
        path.push(cwd.join(FILE_NAME));
    }
    if let Some(home) = home {
        path.push(home.join(".config/openstack").join(FILE_NAME));
    }
    path.push(Path::new("/etc/openstack").join(FILE_NAME));
    path
}

/// clientconfig's choice of cloud: `name` (`[Global] cloud`), else `env_name` (`OS_CLOUD`),
/// else the only cloud of the file.
///
/// # Errors
/// A name the file does not have (naming those it has), or no name and several clouds.
pub fn pick<'a>(
    clouds: &'a BTreeMap<String, Cloud>,
    name: &str,
    env_name: Option<&str>,
) -> Result<(&'a str, &'a Cloud), String> {
    let listed = || clouds.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
    let name = Some(name)
        .filter(|n| !n.is_empty())
        .or(env_name.filter(|n| !n.is_empty()));
    match name {
        Some(name) => clouds
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| format!("has no cloud {name:?}; its clouds: {}", listed())),
        None => match clouds.iter().next() {
            Some((name, cloud)) if clouds.len() == 1 => Ok((name.as_str(), cloud)),
            _ => Err(format!(
                "has {} clouds ({}) and none is named: set [Global] cloud",
                clouds.len(),
                listed()
            )),
        },
    }
}

/// Fills what `global` leaves empty from `cloud`, as OCCM's `ReadClouds` does; returns the
/// cloud's settings OCCM does not read (for the notices).
pub fn merge(global: &mut Global, cloud: &Cloud) -> Vec<String> {
    fn fill(slot: &mut String, value: &str) {
        if slot.is_empty() {
            value.clone_into(slot);
        }
    }
    fn fill_secret(slot: &mut Secret, value: &str) {
        fill(&mut slot.0, value);
    }
    let a = &cloud.auth;
    fill(&mut global.auth_url, &a.auth_url);
    fill(&mut global.user_id, &a.user_id);
    fill(&mut global.username, &a.username);
    fill_secret(&mut global.password, &a.password);
    fill(&mut global.tenant_id, &a.project_id);
    fill(&mut global.tenant_name, &a.project_name);
    fill(&mut global.domain_id, &a.domain_id);
    fill(&mut global.domain_name, &a.domain_name);
    fill(&mut global.tenant_domain_id, &a.project_domain_id);
    fill(&mut global.tenant_domain_name, &a.project_domain_name);
    fill(&mut global.user_domain_id, &a.user_domain_id);
    fill(&mut global.user_domain_name, &a.user_domain_name);
    fill(&mut global.region, &cloud.region_name);
    // clientconfig: `interface` stands in for an unset `endpoint_type`.
    let endpoint_type = if cloud.endpoint_type.is_empty() {
        &cloud.interface
    } else {
        &cloud.endpoint_type
    };
    fill(&mut global.os_endpoint_type, endpoint_type);
    fill(&mut global.ca_file, &cloud.cacert);
    fill(&mut global.cert_file, &cloud.cert);
    fill(&mut global.key_file, &cloud.key);
    fill(
        &mut global.application_credential_id,
        &a.application_credential_id,
    );
    fill(
        &mut global.application_credential_name,
        &a.application_credential_name,
    );
    fill_secret(
        &mut global.application_credential_secret,
        &a.application_credential_secret,
    );

    let mut ignored = Vec::new();
    if cloud.verify == Some(false) {
        ignored.push(
            "verify: false is not read (as OCCM): certificates are verified; set tls-insecure = true in cloud.conf to stop that"
                .to_owned(),
        );
    }
    if !a.token.is_empty() {
        ignored.push("auth.token is not read (as OCCM): set token in cloud.conf".to_owned());
    }
    if !cloud.auth_type.is_empty() {
        ignored.push(format!(
            "auth_type {:?} is not read (as OCCM): the method follows from the credentials given",
            cloud.auth_type
        ));
    }
    if !cloud.profile.is_empty() {
        ignored.push(format!(
            "profile {:?}: clouds-public.yaml is not read; put the profile's values in this cloud",
            cloud.profile
        ));
    }
    ignored
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENSHIFT: &str = r#"
clouds:
  openstack:
    auth:
      auth_url: https://keystone.example:5000/v3
      username: "ccm"
      password: "s3cret"
      project_id: 4f5e
      project_name: k8s
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: internal
    cacert: /etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem
    verify: true
  other:
    auth:
      auth_url: https://elsewhere:5000/v3
"#;

    #[test]
    fn the_cloud_is_picked_by_name_then_os_cloud_then_alone() {
        let clouds = parse(OPENSHIFT).unwrap();
        assert_eq!(pick(&clouds, "openstack", Some("other")).unwrap().0, "openstack");
        assert_eq!(pick(&clouds, "", Some("other")).unwrap().0, "other");
        let e = pick(&clouds, "", None).unwrap_err();
        assert!(
            e.contains("2 clouds (openstack, other)") && e.contains("[Global] cloud"),
            "{e}"
        );
        let e = pick(&clouds, "nope", None).unwrap_err();
        assert!(
            e.contains("no cloud \"nope\"") && e.contains("openstack, other"),
            "{e}"
        );
        let one = parse("clouds:\n  only:\n    region_name: R\n").unwrap();
        assert_eq!(pick(&one, "", None).unwrap().0, "only");
        assert!(pick(&BTreeMap::new(), "", None).is_err());
    }

    /// OCCM's `ReadClouds`: each field fills an empty `[Global]` value; a value set in
    /// cloud.conf wins.
    #[test]
    fn cloud_conf_wins_field_by_field() {
        let clouds = parse(OPENSHIFT).unwrap();
        let cloud = &clouds["openstack"];
        for (before, check) in [
            (
                Global::default(),
                (|g: &Global| {
                    assert_eq!(g.auth_url, "https://keystone.example:5000/v3");
                    assert_eq!((g.username.as_str(), g.password.0.as_str()), ("ccm", "s3cret"));
                    assert_eq!((g.tenant_id.as_str(), g.tenant_name.as_str()), ("4f5e", "k8s"));
                    assert_eq!(g.user_domain_name, "Default");
                    assert_eq!(g.tenant_domain_name, "Default");
                    assert_eq!(g.region, "RegionOne");
                    assert_eq!(g.os_endpoint_type, "internal");
                    assert!(g.ca_file.ends_with("ca-bundle.pem"));
                }) as fn(&Global),
            ),
            (
                Global {
                    region: "RegionTwo".into(),
                    password: Secret("from-cloud-conf".into()),
                    os_endpoint_type: "public".into(),
                    ca_file: "/etc/ca.pem".into(),
                    ..Global::default()
                },
                |g: &Global| {
                    assert_eq!(g.region, "RegionTwo");
                    assert_eq!(g.password.0, "from-cloud-conf");
                    assert_eq!(g.os_endpoint_type, "public");
                    assert_eq!(g.ca_file, "/etc/ca.pem");
                    // What cloud.conf leaves empty still comes from clouds.yaml.
                    assert_eq!(g.username, "ccm");
                },
            ),
        ] {
            let mut global = before;
            assert_eq!(merge(&mut global, cloud), Vec::<String>::new());
            check(&global);
        }
    }

    #[test]
    fn endpoint_type_wins_over_interface_and_scalars_are_text() {
        let clouds = parse(
            "clouds:\n  c:\n    endpoint_type: admin\n    interface: internal\n    auth:\n      project_id: 12345\n      password: yes\n      application_credential_id: ac\n      application_credential_secret: 42\n",
        )
        .unwrap();
        let mut g = Global::default();
        merge(&mut g, &clouds["c"]);
        assert_eq!(g.os_endpoint_type, "admin");
        assert_eq!(g.tenant_id, "12345");
        assert_eq!(g.password.0, "true");
        assert_eq!(
            (
                g.application_credential_id.as_str(),
                g.application_credential_secret.0.as_str()
            ),
            ("ac", "42")
        );
    }

    #[test]
    fn what_occm_does_not_read_is_named() {
        let clouds = parse(
            "clouds:\n  c:\n    verify: false\n    auth_type: v3applicationcredential\n    profile: vexxhost\n    auth:\n      token: t\n",
        )
        .unwrap();
        let notes = merge(&mut Global::default(), &clouds["c"]);
        assert_eq!(notes.len(), 4, "{notes:?}");
        for (note, needle) in notes.iter().zip(["verify", "auth.token", "auth_type", "profile"]) {
            assert!(note.starts_with(needle), "{note}");
        }
    }

    #[test]
    fn a_malformed_file_is_an_error_without_its_text() {
        let e = parse("clouds:\n  c:\n    auth: [password: hunter2\n").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(parse("clouds: {}\n").unwrap().is_empty());
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn the_search_path_is_clientconfigs() {
        let cwd = Path::new("/work");
        let home = Path::new("/home/ccm");
        assert_eq!(
            search_path(
                "/etc/kubernetes/clouds.yaml",
                Some("/env.yaml"),
                Some(cwd),
                Some(home)
            ),
            [
                PathBuf::from("/etc/kubernetes/clouds.yaml"),
                PathBuf::from("/work/clouds.yaml"),
                PathBuf::from("/home/ccm/.config/openstack/clouds.yaml"),
                PathBuf::from("/etc/openstack/clouds.yaml"),
            ]
        );
        assert_eq!(
            search_path("", Some("/env.yaml"), None, None)[0],
            PathBuf::from("/env.yaml")
        );
        assert_eq!(
            search_path("", None, None, None),
            [PathBuf::from("/etc/openstack/clouds.yaml")]
        );
    }
}
