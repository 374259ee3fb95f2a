//! Realism knobs, changeable while the simulator runs: latency, the cloud's own API rate limit,
//! injected errors and load balancer provisioning time.
//!
//! JSON shape (durations are human-readable strings such as `"50ms"` or `"2s"`):
//! ```json
//! {"latency": "20ms", "latency_jitter": "5ms", "rate_limit": {"rate": 10.0, "burst": 20.0},
//!  "error_rate": {"describe_instances": 0.1, "*": 0.01}, "lb_provision_delay": "0s"}
//! ```
//! The admin API takes a partial object ([`KnobsPatch`]) and merges it.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Deserializer, Serialize};

/// Every operation the simulated cloud API answers, as named in knobs and stats.
pub const OPERATIONS: [&str; 9] = [
    "describe_instances",
    "get_load_balancer",
    "read_load_balancers",
    "ensure_load_balancer",
    "update_load_balancer",
    "delete_load_balancer",
    "list_routes",
    "create_route",
    "delete_route",
];

/// Whether an operation changes the cloud: writes and reads are rate-limited apart.
pub fn is_write(operation: &str) -> bool {
    matches!(
        operation,
        "ensure_load_balancer"
            | "update_load_balancer"
            | "delete_load_balancer"
            | "create_route"
            | "delete_route"
    )
}

/// The `error_rate` key that applies to every operation without its own entry.
pub const ALL_OPERATIONS: &str = "*";

/// Longest latency or jitter accepted; longer is certainly a typo (`"50s"` for `"50ms"`).
const MAX_LATENCY: Duration = Duration::from_secs(60);
/// Longest load balancer provisioning time accepted.
const MAX_PROVISION_DELAY: Duration = Duration::from_secs(3600);

/// The knobs. `Default` is an ideal cloud: instant, unlimited, never failing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Knobs {
    /// Added to every API call (after the rate limit admitted it).
    #[serde(with = "duration_str")]
    pub latency: Duration,
    /// A uniformly random extra latency in `[0, latency_jitter]`.
    #[serde(with = "duration_str")]
    pub latency_jitter: Duration,
    /// The cloud's API rate limit, for reads and for writes each (as AWS limits its
    /// non-mutating and mutating actions apart); `None`: unlimited. Calls beyond it answer
    /// `Throttled`.
    pub rate_limit: Option<RateLimit>,
    /// Probability in `[0, 1]` that a call of the operation fails with `Unavailable`. The key is an
    /// operation name (see [`OPERATIONS`]) or `"*"` for every operation without its own entry.
    pub error_rate: BTreeMap<String, f64>,
    /// How long a new load balancer stays `Provisioning` (ensure answers `RetryAfter` meanwhile).
    #[serde(with = "duration_str")]
    pub lb_provision_delay: Duration,
}

/// A token bucket limit: `rate` calls per second sustained, bursts of up to `burst`.
/// `rate: 0` closes the API: every call is throttled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Calls per second; 0 throttles every call.
    pub rate: f64,
    /// Largest burst; at least 1 when `rate > 0`.
    pub burst: f64,
}

impl RateLimit {
    /// Builds a limit.
    pub fn new(rate: f64, burst: f64) -> Self {
        Self { rate, burst }
    }

    /// A limit that throttles every call.
    pub fn closed() -> Self {
        Self {
            rate: 0.0,
            burst: 0.0,
        }
    }

    /// Whether this limit throttles every call.
    pub fn is_closed(&self) -> bool {
        self.rate == 0.0
    }

    fn validate(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            return Err(format!(
                "rate_limit.rate must be a number of calls per second >= 0 (0 throttles every call), got {}",
                self.rate
            ));
        }
        if self.rate > 0.0 && !(self.burst.is_finite() && self.burst >= 1.0) {
            return Err(format!("rate_limit.burst must be at least 1, got {}", self.burst));
        }
        Ok(())
    }
}

impl Knobs {
    /// Explains the first invalid value, if any.
    pub fn validate(&self) -> Result<(), String> {
        for (name, d, max) in [
            ("latency", self.latency, MAX_LATENCY),
            ("latency_jitter", self.latency_jitter, MAX_LATENCY),
            ("lb_provision_delay", self.lb_provision_delay, MAX_PROVISION_DELAY),
        ] {
            if d > max {
                return Err(format!(
                    "{name} must be at most {}, got {}",
                    humantime::format_duration(max),
                    humantime::format_duration(d)
                ));
            }
        }
        if let Some(limit) = &self.rate_limit {
            limit.validate()?;
        }
        for (op, rate) in &self.error_rate {
            if op != ALL_OPERATIONS && !OPERATIONS.contains(&op.as_str()) {
                return Err(format!(
                    "error_rate: unknown operation {op:?}; known: \"*\", {}",
                    OPERATIONS.join(", ")
                ));
            }
            if !(0.0..=1.0).contains(rate) {
                return Err(format!(
                    "error_rate[{op}] must be a probability between 0 and 1, got {rate}"
                ));
            }
        }
        Ok(())
    }

    /// The probability that a call of `op` gets an injected failure: the operation's own entry,
    /// else the `"*"` entry, else 0.
    pub fn error_rate_for(&self, op: &str) -> f64 {
        self.error_rate
            .get(op)
            .or_else(|| self.error_rate.get(ALL_OPERATIONS))
            .copied()
            .unwrap_or(0.0)
    }

    /// A valid copy: out-of-range values are clamped, unknown operations dropped. Used by
    /// [`crate::Simulator::set_knobs`], which cannot fail; the admin API rejects instead.
    pub fn normalized(&self) -> Knobs {
        let mut k = self.clone();
        k.latency = k.latency.min(MAX_LATENCY);
        k.latency_jitter = k.latency_jitter.min(MAX_LATENCY);
        k.lb_provision_delay = k.lb_provision_delay.min(MAX_PROVISION_DELAY);
        if let Some(limit) = &mut k.rate_limit {
            if !(limit.rate.is_finite() && limit.rate > 0.0) {
                *limit = RateLimit::closed();
            } else if !(limit.burst.is_finite() && limit.burst >= 1.0) {
                limit.burst = 1.0;
            }
        }
        k.error_rate
            .retain(|op, _| op == ALL_OPERATIONS || OPERATIONS.contains(&op.as_str()));
        for rate in k.error_rate.values_mut() {
            *rate = if rate.is_nan() { 0.0 } else { rate.clamp(0.0, 1.0) };
        }
        k
    }

    /// These knobs with `patch` merged in, validated.
    pub fn merged(&self, patch: &KnobsPatch) -> Result<Knobs, String> {
        let mut k = self.clone();
        if let Some(d) = patch.latency {
            k.latency = d;
        }
        if let Some(d) = patch.latency_jitter {
            k.latency_jitter = d;
        }
        if let Some(limit) = patch.rate_limit {
            k.rate_limit = limit;
        }
        match &patch.error_rate {
            None => {}
            Some(None) => k.error_rate.clear(),
            Some(Some(entries)) => {
                for (op, rate) in entries {
                    match rate {
                        Some(r) => {
                            k.error_rate.insert(op.clone(), *r);
                        }
                        None => {
                            k.error_rate.remove(op);
                        }
                    }
                }
            }
        }
        if let Some(d) = patch.lb_provision_delay {
            k.lb_provision_delay = d;
        }
        k.validate()?;
        Ok(k)
    }
}

/// A partial update of [`Knobs`]: absent fields stay as they are. `"rate_limit": null` removes
/// the limit; in `error_rate`, an entry set to `null` is removed and `"error_rate": null` clears
/// every entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnobsPatch {
    /// New latency.
    #[serde(with = "opt_duration_str", skip_serializing_if = "Option::is_none")]
    pub latency: Option<Duration>,
    /// New jitter.
    #[serde(with = "opt_duration_str", skip_serializing_if = "Option::is_none")]
    pub latency_jitter: Option<Duration>,
    /// `Some(None)`: no limit.
    #[serde(deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Option<RateLimit>>,
    /// Entries to set (`Some`) or remove (`None`); `Some(None)` clears all.
    #[serde(deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<Option<BTreeMap<String, Option<f64>>>>,
    /// New provisioning delay.
    #[serde(with = "opt_duration_str", skip_serializing_if = "Option::is_none")]
    pub lb_provision_delay: Option<Duration>,
}

/// Tells a present `null` (`Some(None)`) from an absent field (`None`, through `default`).
fn double_option<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Parses a rate limit as the gateway's `--simulator-rate-limit` and `cloud-sim knobs set
/// --rate-limit` both take it: `RATE/BURST` (e.g. `10/20`), a bare `RATE` (burst the same, at
/// least 1), `0` (every call throttled), or `off`/`none` (unlimited: `None`).
pub fn parse_rate_limit(s: &str) -> Result<Option<RateLimit>, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let number = |x: &str| {
        x.trim()
            .parse::<f64>()
            .map_err(|_| format!("expected RATE/BURST (e.g. 10/20), off or 0; got {s:?}"))
    };
    let limit = match s.split_once('/') {
        Some((rate, burst)) => RateLimit::new(number(rate)?, number(burst)?),
        None => {
            let rate = number(s)?;
            RateLimit::new(rate, if rate == 0.0 { 0.0 } else { rate.max(1.0) })
        }
    };
    Ok(Some(limit))
}

/// A rate limit as a command line takes it ([`parse_rate_limit`]): a limit, or `None` for `off`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitSetting(pub Option<RateLimit>);

impl std::str::FromStr for RateLimitSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_rate_limit(s).map(Self)
    }
}

/// Parses an injected error rate, `OPERATION=PROBABILITY` (`*` for every operation), or
/// `OPERATION=off` (`None`: no rate of its own).
pub fn parse_error_rate(s: &str) -> Result<(String, Option<f64>), String> {
    let (operation, p) = s
        .split_once('=')
        .ok_or_else(|| format!("expected OPERATION=PROBABILITY (e.g. describe_instances=0.5), got {s:?}"))?;
    let (operation, p) = (operation.trim(), p.trim());
    if p.eq_ignore_ascii_case("off") {
        return Ok((operation.to_owned(), None));
    }
    let p: f64 = p
        .parse()
        .map_err(|_| format!("{p:?} is not a probability between 0 and 1"))?;
    Ok((operation.to_owned(), Some(p)))
}

/// Parses `"50ms"`, `"2s"`, `"1m 30s"` or `"0"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); write e.g. \"50ms\" or \"2s\""))
}

/// Formats a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".into()
    } else {
        humantime::format_duration(d).to_string()
    }
}

mod duration_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(D::Error::custom)
    }
}

mod opt_duration_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => super::parse_duration(&s).map(Some).map_err(D::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(json: &str) -> KnobsPatch {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn knobs_round_trip_through_json() {
        let k = Knobs {
            latency: Duration::from_millis(50),
            latency_jitter: Duration::from_millis(5),
            rate_limit: Some(RateLimit::new(10.0, 20.0)),
            error_rate: [("describe_instances".to_string(), 0.5)].into(),
            lb_provision_delay: Duration::from_secs(2),
        };
        let json = serde_json::to_string(&k).unwrap();
        assert!(json.contains(r#""latency":"50ms""#), "{json}");
        assert_eq!(serde_json::from_str::<Knobs>(&json).unwrap(), k);
        assert_eq!(serde_json::from_str::<Knobs>("{}").unwrap(), Knobs::default());
    }

    #[test]
    fn patches_merge() {
        let base = Knobs {
            latency: Duration::from_millis(50),
            rate_limit: Some(RateLimit::new(10.0, 20.0)),
            error_rate: [("*".to_string(), 0.1), ("list_routes".to_string(), 1.0)].into(),
            ..Knobs::default()
        };
        // (patch, check)
        type Check<'a> = Box<dyn Fn(&Knobs) -> bool + 'a>;
        let cases: Vec<(&str, Check)> = vec![
            ("{}", Box::new(|k: &Knobs| *k == base)),
            (
                r#"{"latency":"1s"}"#,
                Box::new(|k: &Knobs| k.latency == Duration::from_secs(1) && k.rate_limit.is_some()),
            ),
            (
                r#"{"rate_limit":null}"#,
                Box::new(|k: &Knobs| k.rate_limit.is_none()),
            ),
            (
                r#"{"rate_limit":{"rate":1,"burst":2}}"#,
                Box::new(|k: &Knobs| k.rate_limit == Some(RateLimit::new(1.0, 2.0))),
            ),
            (
                r#"{"error_rate":{"list_routes":null,"create_route":0.5}}"#,
                Box::new(|k: &Knobs| {
                    k.error_rate.len() == 2
                        && k.error_rate_for("list_routes") == 0.1
                        && k.error_rate_for("create_route") == 0.5
                }),
            ),
            (
                r#"{"error_rate":null}"#,
                Box::new(|k: &Knobs| k.error_rate.is_empty()),
            ),
            (
                r#"{"lb_provision_delay":"0"}"#,
                Box::new(|k: &Knobs| k.lb_provision_delay.is_zero()),
            ),
        ];
        for (json, check) in cases {
            let merged = base.merged(&patch(json)).unwrap();
            assert!(check(&merged), "{json}: {merged:?}");
        }
    }

    #[test]
    fn invalid_values_are_explained() {
        let base = Knobs::default();
        let cases = [
            (r#"{"error_rate":{"describe_instances":1.5}}"#, "between 0 and 1"),
            (
                r#"{"error_rate":{"describe":0.5}}"#,
                "unknown operation \"describe\"",
            ),
            (r#"{"rate_limit":{"rate":-1,"burst":2}}"#, "rate_limit.rate"),
            (
                r#"{"rate_limit":{"rate":5,"burst":0.5}}"#,
                "burst must be at least 1",
            ),
            (r#"{"latency":"2h"}"#, "latency must be at most"),
        ];
        for (json, want) in cases {
            let err = base.merged(&patch(json)).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
        }
        for (json, want) in [
            (r#"{"latency":"fast"}"#, "invalid duration"),
            (r#"{"latencyy":"1s"}"#, "unknown field"),
        ] {
            let err = serde_json::from_str::<KnobsPatch>(json).unwrap_err().to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
    }

    #[test]
    fn closed_rate_limit_is_valid() {
        let k = Knobs::default()
            .merged(&patch(r#"{"rate_limit":{"rate":0,"burst":0}}"#))
            .unwrap();
        assert!(k.rate_limit.unwrap().is_closed());
    }

    #[test]
    fn normalized_clamps_instead_of_failing() {
        let k = Knobs {
            rate_limit: Some(RateLimit::new(f64::NAN, 3.0)),
            error_rate: [
                ("describe_instances".to_string(), 7.0),
                ("nope".to_string(), 0.5),
                ("*".to_string(), f64::NAN),
            ]
            .into(),
            latency: Duration::from_secs(7200),
            ..Knobs::default()
        }
        .normalized();
        assert!(k.validate().is_ok(), "{k:?}");
        assert!(k.rate_limit.unwrap().is_closed());
        assert_eq!(k.error_rate_for("describe_instances"), 1.0);
        assert_eq!(k.error_rate_for("list_routes"), 0.0);
        assert!(!k.error_rate.contains_key("nope"));
    }

    /// The gateway's flags and cloud-sim's console read limits and error rates alike.
    #[test]
    fn rate_limits_and_error_rates_parse_as_both_command_lines_write_them() {
        for (text, want) in [
            ("10/20", Ok(Some(RateLimit::new(10.0, 20.0)))),
            (" 50 / 100 ", Ok(Some(RateLimit::new(50.0, 100.0)))),
            ("5", Ok(Some(RateLimit::new(5.0, 5.0)))),
            ("0.5", Ok(Some(RateLimit::new(0.5, 1.0)))),
            ("0", Ok(Some(RateLimit::closed()))),
            ("off", Ok(None)),
            ("NONE", Ok(None)),
        ] {
            assert_eq!(parse_rate_limit(text), want, "{text:?}");
        }
        for text in ["fast", "10/", "/2", ""] {
            let err = parse_rate_limit(text).unwrap_err();
            assert!(err.contains("RATE/BURST"), "{text:?}: {err}");
        }
        for (text, want) in [
            ("describe_instances=0.5", ("describe_instances", Some(0.5))),
            (" *=0.1", ("*", Some(0.1))),
            ("list_routes=off", ("list_routes", None)),
        ] {
            assert_eq!(
                parse_error_rate(text),
                Ok((want.0.to_owned(), want.1)),
                "{text:?}"
            );
        }
        assert!(
            parse_error_rate("x")
                .unwrap_err()
                .contains("OPERATION=PROBABILITY")
        );
        assert!(parse_error_rate("x=y").unwrap_err().contains("probability"));
    }
}
