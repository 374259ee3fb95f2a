//! Every call that changes something in AWS goes through [`Writes`]: it is logged and counted,
//! and the first one of a converge that changes what the fingerprint covers first marks the load
//! balancer as being converged (see [`crate::converged`]), so a converge interrupted half-way is
//! never mistaken for a finished one. Member writes (register, deregister) mark nothing: the
//! fingerprint does not cover the members, which every node change reads from AWS.
//!
//! In a dry-run scope ([`provider::dry_run`]) each write is recorded as a "would" instead and
//! not made: the caller skips the call and goes on with what the call would have answered where
//! it can (a placeholder for what a create would have made), so one dry-run converge lists every
//! write the real one would make.

use aws_sdk_elasticloadbalancing::types::Tag as ClassicTag;
use aws_sdk_elasticloadbalancingv2::types::Tag as NetworkTag;
use provider::Result;

use crate::{
    AwsProvider,
    converged::{CONVERGING, MARKER_TAG},
    errors::sdk_error,
};

/// A load balancer whose converge marker is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marked {
    /// A Classic ELB, by name.
    Classic(String),
    /// An NLB, by ARN.
    Network(String),
}

/// Calls that change only a load balancer's members.
const MEMBER_WRITES: [&str; 4] = [
    "RegisterInstancesWithLoadBalancer",
    "DeregisterInstancesFromLoadBalancer",
    "RegisterTargets",
    "DeregisterTargets",
];

/// The writes of one converge or deletion.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    /// Writes made so far.
    pub count: usize,
    /// Of those, the ones changing what the fingerprint covers (not the marker, not members).
    pub covered: usize,
    /// The load balancer whose marker must be invalidated before the first write.
    invalidate: Option<Marked>,
}

impl Writes {
    /// Writes on a load balancer whose marker (a fingerprint) must not outlive a partial change.
    pub fn for_marked(marked: Option<Marked>) -> Self {
        Self {
            count: 0,
            covered: 0,
            invalidate: marked,
        }
    }
}

impl AwsProvider {
    /// Call right before each write: `op` is the AWS call, `target` what it changes, `request`
    /// its parameters (for a dry run's record). `false`: a dry run, the write is recorded and
    /// must not be made.
    pub(crate) async fn before_write(
        &self,
        w: &mut Writes,
        op: &str,
        target: &str,
        request: impl FnOnce() -> String,
    ) -> Result<bool> {
        if !MEMBER_WRITES.contains(&op) {
            if let Some(marked) = w.invalidate.take() {
                self.set_marker(&marked, CONVERGING).await?;
                w.count += 1;
            }
            w.covered += 1;
        }
        w.count += 1;
        if !provider::dry_run::intercept(crate::naming::PROVIDER_NAME, op, target, request) {
            return Ok(false);
        }
        tracing::info!(call = op, target, "AWS write");
        Ok(true)
    }

    /// Tags a load balancer with the converge marker.
    pub(crate) async fn set_marker(&self, marked: &Marked, value: &str) -> Result<()> {
        tracing::debug!(?marked, value, "converge marker");
        let target = match marked {
            Marked::Classic(name) => name,
            Marked::Network(arn) => arn,
        };
        if !provider::dry_run::intercept(crate::naming::PROVIDER_NAME, "AddTags", target, || {
            format!("{MARKER_TAG}={value}")
        }) {
            return Ok(());
        }
        match marked {
            Marked::Classic(name) => {
                let tag = ClassicTag::builder()
                    .key(MARKER_TAG)
                    .value(value)
                    .build()
                    .map_err(|e| provider::ProviderError::Internal(e.to_string()))?;
                self.classic
                    .add_tags()
                    .load_balancer_names(name)
                    .tags(tag)
                    .send()
                    .await
                    .map_err(|e| sdk_error("AddTags", &e))?;
            }
            Marked::Network(arn) => {
                self.elb
                    .add_tags()
                    .resource_arns(arn)
                    .tags(NetworkTag::builder().key(MARKER_TAG).value(value).build())
                    .send()
                    .await
                    .map_err(|e| sdk_error("AddTags", &e))?;
            }
        }
        Ok(())
    }
}
