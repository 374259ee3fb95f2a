//! Shadow mode: write calls answered from a plan, with the provider's writes recorded as
//! "woulds" ([`provider::dry_run`]) instead of made.
//!
//! A write call runs in dry-run when the gateway was started with `--dry-run`, or when the
//! request carries [`DRY_RUN_HEADER`]`: true` (a controller in dry-run is then safe with a
//! normal gateway). Each would is logged (info), counted in
//! `cloudgateway_dry_run_woulds_total{provider,call}` and kept for `/dry-run` on the side port
//! (the last [`KEPT`], with the total since start). The answer carries the count and the woulds
//! as response metadata ([`DRY_RUN_HEADER`], [`DRY_RUN_WOULDS_HEADER`]).
//!
//! Write calls are never coalesced or cached in the gateway (only instance lookups are, and
//! those are reads), so a dry-run call is never answered by, or joined to, a real one.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use gateway_api::{DRY_RUN_HEADER, DRY_RUN_WOULDS_HEADER, DRY_RUN_WOULDS_MAX_BYTES};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
};
use provider::dry_run::Would;
use serde_json::{Value, json};
use tonic::metadata::{MetadataMap, MetadataValue};

/// How many woulds `/dry-run` keeps (the oldest go first; the total counts them all).
pub const KEPT: usize = 10_000;

/// Labels of `cloudgateway_dry_run_woulds_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WouldLabels {
    /// The provider that would have written.
    pub provider: String,
    /// Its call.
    pub call: String,
}

/// Whether a request asks for dry-run: [`DRY_RUN_HEADER`] is `true` (any case). Any other value
/// (absent, `false`, garbage) is a normal call, as an older client would mean it.
pub fn requested(metadata: &MetadataMap) -> bool {
    metadata
        .get(DRY_RUN_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Every would since start (the last [`KEPT`]), with their count, for `/dry-run`.
pub struct DryRunLog {
    /// Whether the gateway itself runs in dry-run (`--dry-run`).
    gateway_dry_run: bool,
    metric: Family<WouldLabels, Counter>,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    kept: VecDeque<Value>,
    total: u64,
    calls: u64,
}

impl DryRunLog {
    /// A log counting into `metric`.
    pub fn new(gateway_dry_run: bool, metric: Family<WouldLabels, Counter>) -> Arc<Self> {
        Arc::new(Self {
            gateway_dry_run,
            metric,
            log: Mutex::default(),
        })
    }

    /// Whether the gateway itself runs in dry-run.
    pub fn gateway_dry_run(&self) -> bool {
        self.gateway_dry_run
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the woulds of one call of `method` by `caller`: logged, counted and kept.
    pub fn record(&self, method: &str, caller: &str, woulds: &[Would]) {
        let mut log = self.lock();
        log.calls += 1;
        for would in woulds {
            tracing::info!(
                method,
                caller,
                provider = %would.provider,
                call = %would.call,
                target = %would.target,
                request = %would.request,
                "dry-run: would write"
            );
            self.metric
                .get_or_create(&WouldLabels {
                    provider: would.provider.clone(),
                    call: would.call.clone(),
                })
                .inc();
            log.total += 1;
            let entry = json!({
                "seq": log.total,
                "method": method,
                "caller": caller,
                "provider": would.provider,
                "call": would.call,
                "target": would.target,
                "request": would.request,
            });
            if log.kept.len() == KEPT {
                log.kept.pop_front();
            }
            log.kept.push_back(entry);
        }
    }

    /// `/dry-run`'s body: `{"dry_run", "calls", "total", "kept", "woulds": [...]}`, oldest
    /// first. `calls` counts the write calls answered in dry-run, `total` their woulds.
    pub fn to_json(&self) -> Value {
        let log = self.lock();
        json!({
            "dry_run": self.gateway_dry_run,
            "calls": log.calls,
            "total": log.total,
            "kept": log.kept.len(),
            "woulds": log.kept,
        })
    }

    /// `GET /dry-run` on the side port.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        let log = self.clone();
        axum::Router::new().route(
            "/dry-run",
            axum::routing::get(move || {
                let body = log.to_json();
                async move { axum::Json(body) }
            }),
        )
    }
}

/// Puts the dry-run marker on an answer's metadata: the count, and the woulds as compact JSON
/// when there are any (whole entries up to [`DRY_RUN_WOULDS_MAX_BYTES`]).
pub fn mark(metadata: &mut MetadataMap, woulds: &[Would]) {
    metadata.insert(DRY_RUN_HEADER, MetadataValue::from(woulds.len() as u64));
    if woulds.is_empty() {
        return;
    }
    if let Ok(value) = woulds_header(woulds).parse() {
        metadata.insert(DRY_RUN_WOULDS_HEADER, value);
    }
}

/// The woulds as a compact JSON array of at most [`DRY_RUN_WOULDS_MAX_BYTES`] bytes, dropping
/// the entries that do not fit whole. ASCII only (serde_json escapes nothing else, so non-ASCII
/// text is written as `\u` escapes here), as a metadata value must be.
pub fn woulds_header(woulds: &[Would]) -> String {
    let mut out = String::from("[");
    for would in woulds {
        let entry = ascii_json(&serde_json::to_value(would).unwrap_or(Value::Null));
        // room for the comma and the closing bracket
        if out.len() + entry.len() + 2 > DRY_RUN_WOULDS_MAX_BYTES {
            break;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&entry);
    }
    out.push(']');
    out
}

/// Compact JSON with every non-ASCII character (and control character) as a `\u` escape.
fn ascii_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() && !c.is_ascii_control() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn would(target: &str, request: &str) -> Would {
        Would {
            provider: "simulator".into(),
            call: "ensure_load_balancer".into(),
            target: target.into(),
            request: request.into(),
        }
    }

    #[test]
    fn only_true_asks_for_dry_run() {
        let mut metadata = MetadataMap::new();
        assert!(!requested(&metadata));
        for (value, dry) in [
            ("true", true),
            ("TRUE", true),
            (" true ", true),
            ("false", false),
            ("1", false),
        ] {
            metadata.insert(DRY_RUN_HEADER, value.parse().unwrap());
            assert_eq!(requested(&metadata), dry, "{value:?}");
        }
    }

    #[test]
    fn the_marker_carries_the_count_and_the_woulds_as_json() {
        let mut metadata = MetadataMap::new();
        mark(&mut metadata, &[]);
        assert_eq!(metadata.get(DRY_RUN_HEADER).unwrap(), "0");
        assert!(metadata.get(DRY_RUN_WOULDS_HEADER).is_none());

        let woulds = [would("lb-1", "{\"port\":8080}"), would("lb-ü", "naïve\n")];
        mark(&mut metadata, &woulds);
        assert_eq!(metadata.get(DRY_RUN_HEADER).unwrap(), "2");
        let text = metadata.get(DRY_RUN_WOULDS_HEADER).unwrap().to_str().unwrap();
        let parsed: Vec<Value> = serde_json::from_str(text).unwrap();
        assert_eq!(parsed[0]["request"], "{\"port\":8080}");
        assert_eq!(parsed[1]["target"], "lb-ü", "non-ASCII survives as escapes");
        assert_eq!(parsed[1]["request"], "naïve\n");
    }

    #[test]
    fn the_header_keeps_whole_entries_within_its_size() {
        let big = "x".repeat(3000);
        let woulds: Vec<Would> = (0..10).map(|i| would(&format!("lb-{i}"), &big)).collect();
        let text = woulds_header(&woulds);
        assert!(text.len() <= DRY_RUN_WOULDS_MAX_BYTES, "{}", text.len());
        let parsed: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.len(), 2, "two 3 kB entries fit in 8 KiB, not three");
        // One entry too big for the header: an empty array, still valid JSON.
        let huge = [would("lb", &"y".repeat(DRY_RUN_WOULDS_MAX_BYTES))];
        assert_eq!(woulds_header(&huge), "[]");
    }

    #[test]
    fn the_log_counts_everything_and_keeps_the_last() {
        let metric = Family::<WouldLabels, Counter>::default();
        let log = DryRunLog::new(true, metric.clone());
        log.record("EnsureLoadBalancer", "service-controller", &[]);
        for i in 0..(KEPT + 5) {
            log.record(
                "EnsureLoadBalancer",
                "service-controller",
                &[would(&format!("lb-{i}"), "{}")],
            );
        }
        let json = log.to_json();
        assert_eq!(json["dry_run"], true);
        assert_eq!(json["calls"], KEPT as u64 + 6);
        assert_eq!(json["total"], KEPT as u64 + 5);
        assert_eq!(json["kept"], KEPT);
        assert_eq!(json["woulds"][0]["target"], "lb-5", "the oldest went first");
        assert_eq!(json["woulds"][KEPT - 1]["seq"], KEPT as u64 + 5);
        let counted = metric
            .get_or_create(&WouldLabels {
                provider: "simulator".into(),
                call: "ensure_load_balancer".into(),
            })
            .get();
        assert_eq!(counted, KEPT as u64 + 5);
    }
}
