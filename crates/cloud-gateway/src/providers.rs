//! The providers this gateway can run. Each vendor crate registers itself (its name, flags,
//! cloud config and constructor: [`provider::registration`]); this list is the only place the
//! gateway names them, one line each with the cargo feature that builds it in.

use provider::registration::Registration;

/// A provider of the list: in this build, or left out of it (its cargo feature was off).
#[derive(Clone, Copy)]
pub enum Entry {
    /// Built in.
    Built(&'static dyn Registration),
    /// Left out of this build: still a `--provider` value, refused at start naming the feature.
    NotBuilt(&'static str),
}

impl Entry {
    /// The `--provider` value, also the name of the cargo feature that builds it in.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Built(registration) => registration.name(),
            Self::NotBuilt(name) => name,
        }
    }
}

/// `"feature" => path::to::REGISTRATION`, one per vendor.
macro_rules! providers {
    ($($feature:literal => $registration:path),* $(,)?) => {
        &[$({
            #[cfg(feature = $feature)]
            let entry = Entry::Built(&$registration);
            #[cfg(not(feature = $feature))]
            let entry = Entry::NotBuilt($feature);
            entry
        }),*]
    };
}

/// Every provider, the default (`simulator`) first.
pub static PROVIDERS: &[Entry] = providers![
    "simulator" => provider_simulator::gateway_args::REGISTRATION,
    "aws" => provider_aws::gateway_args::REGISTRATION,
    "openstack" => provider_openstack::gateway_args::REGISTRATION,
    "vsphere" => provider_vsphere::gateway_args::REGISTRATION,
];

/// The provider named `name`, if the list has it.
pub fn find(name: &str) -> Option<Entry> {
    PROVIDERS.iter().copied().find(|entry| entry.name() == name)
}

/// The providers built in.
pub fn built() -> impl Iterator<Item = &'static dyn Registration> {
    PROVIDERS.iter().filter_map(|entry| match entry {
        Entry::Built(registration) => Some(*registration),
        Entry::NotBuilt(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are the `--provider` values and the flags' prefixes: unique, and each registration
    /// is listed under the cargo feature named as it is.
    #[test]
    fn every_provider_has_its_own_name_and_flag_prefix() {
        let names: Vec<&str> = PROVIDERS.iter().map(Entry::name).collect();
        assert_eq!(names, ["simulator", "aws", "openstack", "vsphere"]);
        for registration in built() {
            let command = registration.flags(clap::Command::new("cloud-gateway"));
            for arg in command.get_arguments() {
                let long = arg.get_long().unwrap_or_default();
                assert!(
                    long.starts_with(&format!("{}-", registration.name())),
                    "--{long} of {} does not start with --{}-",
                    registration.name(),
                    registration.name()
                );
            }
        }
    }
}
