//! OpenStack as the gateway runs it (`cloud-gateway --provider openstack --cloud-config
//! cloud.conf`): OCCM's `cloud.conf`, read by [`crate::cloud_config`], and the environment it
//! reads beside it; no flags of its own.

use std::path::Path;

use provider::registration::{Built, CloudConfig, Registration, SetupError};

use crate::{
    OpenStackProvider,
    cloud_config::{REGIONAL_ENV, read, regional_from_env},
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
        let file = read(path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// OCCM's cloud.conf: a malformed value, a key we refuse (clouds.yaml) and a missing
    /// required key stop the gateway before any call, naming the file, the line and the key.
    #[tokio::test]
    async fn a_malformed_or_refused_openstack_cloud_conf_stops_start_up_naming_file_line_and_key() {
        const GLOBAL: &str = "[Global]\nauth-url = http://127.0.0.1:1/v3\nusername = u\npassword = p\ntenant-name = t\ndomain-name = Default\nregion = r\n";
        let flags = clap::Command::new("cloud-gateway").get_matches_from(["cloud-gateway"]);
        for (text, needle) in [
            (format!("{GLOBAL}[LoadBalancer]\nmonitor-delay = 5\n"), "line 9"),
            (format!("{GLOBAL}use-clouds = true\n"), "use-clouds"),
            (
                "[Global]\nauth-url = http://127.0.0.1:1/v3\n".to_owned(),
                "region",
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
