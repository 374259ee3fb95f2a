//! A cloud for controller tests.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use controller_kit::gateway::{CloudInstances, GatewayError, Instance, NodeRef};

/// The cloud as the controllers see it through [`CloudInstances`], answering from a table: a
/// node is looked up by its provider ID when it has one, else by name; a key with no answer is
/// `InstanceNotFound`, as the cloud says of an instance that does not exist.
#[derive(Default)]
pub struct FakeCloud {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Result<Instance, GatewayError>>,
    call_error: Option<GatewayError>,
    calls: Vec<Vec<NodeRef>>,
    latency: std::time::Duration,
}

impl FakeCloud {
    /// An empty cloud: every lookup is `InstanceNotFound`.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The instance answered for the node whose provider ID (or, without one, name) is `key`.
    pub fn set_instance(&self, key: &str, instance: Instance) {
        self.state().answers.insert(key.to_owned(), Ok(instance));
    }

    /// The error answered for the node keyed `key` alone.
    pub fn set_error(&self, key: &str, error: GatewayError) {
        self.state().answers.insert(key.to_owned(), Err(error));
    }

    /// Forgets `key`: it is `InstanceNotFound` from now on.
    pub fn remove(&self, key: &str) {
        self.state().answers.remove(key);
    }

    /// Makes every call fail as a whole with `error` (`None`: answer again).
    pub fn fail_calls(&self, error: Option<GatewayError>) {
        self.state().call_error = error;
    }

    /// Makes every call take `latency` (answered as of its end).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.state().latency = latency;
    }

    /// The nodes of every call so far, in order.
    pub fn calls(&self) -> Vec<Vec<NodeRef>> {
        self.state().calls.clone()
    }
}

#[async_trait::async_trait]
impl CloudInstances for FakeCloud {
    async fn lookup_instances(
        &self,
        nodes: &[NodeRef],
    ) -> Result<Vec<Result<Instance, GatewayError>>, GatewayError> {
        let latency = {
            let mut state = self.state();
            state.calls.push(nodes.to_vec());
            state.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let state = self.state();
        if let Some(err) = &state.call_error {
            return Err(err.clone());
        }
        Ok(nodes
            .iter()
            .map(|node| {
                let key = if node.provider_id.is_empty() {
                    &node.name
                } else {
                    &node.provider_id
                };
                state
                    .answers
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| Err(GatewayError::InstanceNotFound(key.clone())))
            })
            .collect())
    }
}
