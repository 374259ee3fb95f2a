//! A provider that serves nothing, for the gateway's unit tests of what it does around the
//! provider (the capabilities it reports, its shutdown): no instances, load balancers or routes,
//! the capabilities it says are switched off, and a record of its shutdown.

use std::sync::atomic::{AtomicBool, Ordering};

use provider::{Instances, LoadBalancers, Provider, ProviderLimits, Routes, SwitchedOff};

/// Serves nothing; switches off what `off` names; records its shutdown.
#[derive(Default)]
pub(crate) struct Bare {
    off: SwitchedOff,
    closed: AtomicBool,
}

impl Bare {
    /// One that switches off what `off` names.
    pub fn switching_off(off: SwitchedOff) -> Self {
        Self {
            off,
            ..Self::default()
        }
    }

    /// Whether the gateway ran its shutdown.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

impl Provider for Bare {
    fn name(&self) -> &str {
        "bare"
    }
    fn limits(&self) -> ProviderLimits {
        ProviderLimits::default()
    }
    fn instances(&self) -> Option<&dyn Instances> {
        None
    }
    fn load_balancers(&self) -> Option<&dyn LoadBalancers> {
        None
    }
    fn routes(&self) -> Option<&dyn Routes> {
        None
    }
    fn switched_off(&self) -> SwitchedOff {
        self.off.clone()
    }
    fn shutdown(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async { self.closed.store(true, Ordering::SeqCst) })
    }
}
