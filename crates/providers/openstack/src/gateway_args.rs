//! OpenStack as the gateway runs it (`cloud-gateway --provider openstack --cloud-config
//! cloud.conf`): OCCM's `cloud.conf`, read by [`crate::cloud_config`], the clouds.yaml it names
//! ([`crate::clouds_yaml`]), and the environment OCCM reads beside them; no flags of its own.

use std::path::Path;

use provider::registration::{Built, CloudConfig, Registration, SetupError};

use crate::{
    OpenStackProvider,
    cloud_config::{CloudsEnv, REGIONAL_ENV, read, regional_from_env},
};

/// OpenStack's entry in the gateway's provider list.
pub static REGISTRATION: OpenStackRegistration = OpenStackRegistration;

/// See [`REGISTRATION`].
pub struct OpenStackRegistration;

#[async_trait::async_trait]
impl Registration for OpenStackRegistration {
    fn name(&self) -> &'static str {
        "openstack"
    }

    fn about(&self) -> &'static str {
        "OpenStack: Nova instances, Neutron router routes, Octavia load balancers, as openstack-cloud-controller-manager."
    }

    fn cloud_config(&self) -> CloudConfig {
        CloudConfig::Required("openstack-cloud-controller-manager's cloud.conf")
    }

    fn flags(&self, command: clap::Command) -> clap::Command {
        command
    }

    async fn build(&self, _: &clap::ArgMatches, cloud_config: Option<&Path>) -> Result<Built, SetupError> {
        let path = cloud_config.ok_or("--provider openstack needs --cloud-config")?;
        let mut file = read(path)?;
        file.merge_clouds_yaml(&CloudsEnv::of_process(), read_if_exists)
            .map_err(|e| e.in_file(path))?;
        let regional = regional_from_env(std::env::var(REGIONAL_ENV).ok().as_deref());
        let config = file.to_config(regional).map_err(|e| e.in_file(path))?;
        let notices = file.notices().iter().map(ToString::to_string).collect();
        let openstack = OpenStackProvider::connect(&config)
            .await
            .map_err(|e| format!("cannot set up OpenStack: {e}"))?;
        Ok(Built {
            notices,
            ..Built::provider(openstack)
        })
    }
}

/// A file's text, `None` when it does not exist (clientconfig's search goes on then).
fn read_if_exists(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OCCM's cloud.conf: a malformed value, a clouds.yaml that cannot be found and a missing
    /// required key stop the gateway before any call, naming the file, the line and the key.
    #[tokio::test]
    async fn a_malformed_or_refused_openstack_cloud_conf_stops_start_up_naming_file_line_and_key() {
        const GLOBAL: &str = "[Global]\nauth-url = http://127.0.0.1:1/v3\nusername = u\npassword = p\ntenant-name = t\ndomain-name = Default\nregion = r\n";
        let flags = clap::Command::new("cloud-gateway").get_matches_from(["cloud-gateway"]);
        for (text, needle) in [
            (format!("{GLOBAL}[LoadBalancer]\nmonitor-delay = 5\n"), "line 9"),
            (
                format!("{GLOBAL}use-clouds = true\nclouds-file = /nonexistent/clouds.yaml\ncloud = c\n"),
                "use-clouds",
            ),
            (
                "[Global]\nauth-url = http://127.0.0.1:1/v3\n".to_owned(),
                "no credentials",
            ),
        ] {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &text).unwrap();
            let path = file.path().to_str().unwrap();
            let err = REGISTRATION
                .build(&flags, Some(file.path()))
                .await
                .err()
                .expect("refused")
                .to_string();
            assert!(err.contains(path) && err.contains(needle), "{text}: {err}");
        }
    }
}
