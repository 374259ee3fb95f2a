//! How a provider crate offers itself to the gateway: its `--provider` name, its own flags, what
//! `--cloud-config` means to it, and how it is built from them. The gateway's command line is
//! its own flags plus every registered provider's, so it knows no vendor by name: a new vendor
//! is a crate that exports a [`Registration`] and one line in the gateway's list.

use std::{path::Path, sync::Arc};

use crate::Provider;

/// Any error a provider's set-up reports; its message is shown as it is (the provider names
/// itself, the file, the line and the key).
pub type SetupError = Box<dyn std::error::Error + Send + Sync>;

/// A provider as the gateway's command line sees it.
#[async_trait::async_trait]
pub trait Registration: Send + Sync {
    /// The `--provider` value, also the name of the gateway's cargo feature that builds it in.
    fn name(&self) -> &'static str;
    /// One line for `--help`.
    fn about(&self) -> &'static str;
    /// What the gateway's `--cloud-config` flag means for this provider.
    fn cloud_config(&self) -> CloudConfig {
        CloudConfig::Unused
    }
    /// Adds the provider's flags to the gateway's command. Each is named `--<name>-…` (so that
    /// a build without the provider can tell whose flag it was) and has a default or is
    /// optional: a command line that does not pick this provider still parses.
    fn flags(&self, command: clap::Command) -> clap::Command;
    /// Builds the provider from the parsed command line and the cloud config file, when the
    /// provider reads one and it was given.
    async fn build(&self, flags: &clap::ArgMatches, cloud_config: Option<&Path>)
    -> Result<Built, SetupError>;
}

/// What `--cloud-config` means for a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloudConfig {
    /// The provider reads no such file: giving one is an error.
    Unused,
    /// The vendor CCM's file, read when given; the text says what it is.
    Optional(&'static str),
    /// The vendor CCM's file, which the provider cannot start without; the text says what it is
    /// (e.g. "openstack-cloud-controller-manager's cloud.conf").
    Required(&'static str),
}

impl CloudConfig {
    /// What the file is, for a provider that reads one.
    pub fn what(self) -> Option<&'static str> {
        match self {
            Self::Unused => None,
            Self::Optional(what) | Self::Required(what) => Some(what),
        }
    }
}

/// A provider, ready to serve.
pub struct Built {
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// HTTP routes it serves beside the gateway's own (the simulator's admin API).
    pub http: Option<axum::Router>,
    /// Settings it was given that have no effect, logged once at start.
    pub notices: Vec<String>,
}

impl Built {
    /// A provider with no routes of its own and nothing to note.
    pub fn provider(provider: Arc<dyn Provider>) -> Self {
        Self {
            provider,
            http: None,
            notices: Vec::new(),
        }
    }
}

/// Parses `argv` (without the program name) as the flags `A` alone, as the gateway parses them
/// beside its own: how a provider's tests read its flags.
pub fn parse_flags<A: clap::Args + clap::FromArgMatches>(argv: &[&str]) -> Result<A, clap::Error> {
    let command = A::augment_args(clap::Command::new("cloud-gateway"));
    let matches =
        command.try_get_matches_from(std::iter::once("cloud-gateway").chain(argv.iter().copied()))?;
    A::from_arg_matches(&matches)
}
