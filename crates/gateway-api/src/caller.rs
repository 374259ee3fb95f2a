//! The client side of caller identity: an interceptor that names the caller on every request,
//! and carries the caller's trace context (W3C `traceparent`) when traces are exported.

use tonic::{
    Request, Status,
    metadata::{Ascii, MetadataValue},
    service::Interceptor,
};

use crate::CALLER_HEADER;

/// Adds the [`CALLER_HEADER`] to every request of a client, and the current span's trace
/// context, so the gateway's spans of the call join the caller's trace.
#[derive(Debug, Clone)]
pub struct NameCaller(MetadataValue<Ascii>);

impl NameCaller {
    /// An interceptor naming `caller`; `None` when it is not a valid header value.
    pub fn new(caller: &str) -> Option<Self> {
        caller.parse().ok().map(Self)
    }
}

impl Interceptor for NameCaller {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert(CALLER_HEADER, self.0.clone());
        telemetry::propagation::inject_current(request.metadata_mut().as_mut());
        Ok(request)
    }
}
