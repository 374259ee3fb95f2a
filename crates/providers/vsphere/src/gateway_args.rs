//! vSphere as the gateway runs it (`cloud-gateway --provider vsphere --cloud-config
//! vsphere.conf`): CPI's `vsphere.conf`, read by [`crate::config`]; no flags of its own.

use std::path::Path;

use provider::registration::{Built, CloudConfig, Registration, SetupError};

use crate::{
    config::{Environment, read},
    provider::VsphereProvider,
};

/// vSphere's entry in the gateway's provider list.
pub static REGISTRATION: VsphereRegistration = VsphereRegistration;

/// See [`REGISTRATION`].
pub struct VsphereRegistration;

#[async_trait::async_trait]
impl Registration for VsphereRegistration {
    fn name(&self) -> &'static str {
        "vsphere"
    }

    fn about(&self) -> &'static str {
        "vSphere: VMs found by BIOS UUID, tools hostname or IP, as vsphere-cloud-controller-manager (nodes only)."
    }

    fn cloud_config(&self) -> CloudConfig {
        CloudConfig::Required("vsphere-cloud-controller-manager's vsphere.conf (YAML or INI)")
    }

    fn flags(&self, command: clap::Command) -> clap::Command {
        command
    }

    async fn build(&self, _: &clap::ArgMatches, cloud_config: Option<&Path>) -> Result<Built, SetupError> {
        let path = cloud_config.ok_or("--provider vsphere needs --cloud-config")?;
        let read = read(path, Environment::process())?;
        let provider = VsphereProvider::new(&read.config)
            .map_err(|e| format!("vsphere.conf {}: {e}", path.display()))?;
        Ok(Built {
            notices: read.notices,
            ..Built::provider(provider)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_vsphere_conf_stops_start_up_naming_the_file() {
        let flags = clap::Command::new("cloud-gateway").get_matches_from(["cloud-gateway"]);
        for (text, needle) in [
            (
                "[Global]\nuser = u\npassword = p\n",
                "No Virtual Center hosts defined",
            ),
            (
                "[VirtualCenter \"v\"]\nuser = u\npassword = p\nport = x\n",
                "line 4",
            ),
        ] {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), text).unwrap();
            let err = REGISTRATION
                .build(&flags, Some(file.path()))
                .await
                .err()
                .expect("refused")
                .to_string();
            assert!(
                err.contains(&file.path().display().to_string()) && err.contains(needle),
                "{text}: {err}"
            );
        }
        assert!(REGISTRATION.build(&flags, None).await.is_err());
        // Zones and regions from tags are served: [Labels] starts.
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            "[VirtualCenter \"v\"]\nuser = u\npassword = p\n[Labels]\nzone = z\nregion = r\n",
        )
        .unwrap();
        assert!(REGISTRATION.build(&flags, Some(file.path())).await.is_ok());
    }
}
