//! The table a benchmark prints (Markdown) and writes (`--json PATH`): one row per piece of
//! work, our calls beside the vendor CCM's. `openstack-bench` and `vsphere-bench` count calls by
//! kinds of their own ([`Counts`]) in [`Row`]s; `openstack-lb-bench`'s rows are text, printed
//! with [`print_markdown`] and written with [`write_json`].

use std::path::Path;

use serde_json::{Map, Value};

/// The calls of one piece of work by kind, as a benchmark counts them.
pub trait Counts {
    /// Its cells in the table, in the header's order. `target` (` (target ≤ 10)`, or empty)
    /// follows the total; `ours` says whether these are our calls, which may show more.
    fn cells(&self, ours: bool, target: &str) -> Vec<String>;
    /// Its JSON object.
    fn json(&self) -> Value;
    /// Every call.
    fn total(&self) -> u64;
}

/// One piece of work: our calls, the vendor CCM's for the same work, how long ours took.
pub struct Row<C> {
    pub work: String,
    pub ours: C,
    pub vendor: C,
    /// The target for our calls, when it sets one.
    pub target: Option<u64>,
    pub seconds: f64,
    /// Our calls themselves, one text each (`soap Login ×1`).
    pub calls: Vec<String>,
}

impl<C: Counts> Row<C> {
    /// What to say when our calls exceed the target.
    pub fn missed(&self) -> Option<String> {
        let target = self.target.filter(|t| self.ours.total() > *t)?;
        Some(format!(
            "{}: {} calls, target ≤ {target}",
            self.work,
            self.ours.total()
        ))
    }
}

/// Prints a Markdown table: `header`, its separator, then `rows`.
pub fn print_markdown(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    println!("| {} |", header.join(" | "));
    println!("|{}", "---|".repeat(header.len()));
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
}

/// Prints `rows` under `header` (the work, our cells, the vendor's, the time taken), then each
/// row's calls.
pub fn print_rows<C: Counts>(header: &[&str], rows: &[Row<C>]) {
    print_markdown(
        header,
        rows.iter().map(|r| {
            let target = r.target.map(|t| format!(" (target ≤ {t})")).unwrap_or_default();
            let mut cells = vec![r.work.clone()];
            cells.extend(r.ours.cells(true, &target));
            cells.extend(r.vendor.cells(false, ""));
            cells.push(format!("{:.1} s", r.seconds));
            cells
        }),
    );
    println!();
    for r in rows {
        println!("{}: {}", r.work, r.calls.join("; "));
    }
}

/// `rows` as JSON objects, the vendor's counts under `vendor` (`occm`, `cpi`).
pub fn json_rows<C: Counts>(vendor: &str, rows: &[Row<C>]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let mut row = Map::new();
            row.insert("work".into(), r.work.clone().into());
            row.insert("ours".into(), r.ours.json());
            row.insert(vendor.into(), r.vendor.json());
            row.insert("target".into(), r.target.into());
            row.insert("seconds".into(), r.seconds.into());
            row.insert("calls".into(), r.calls.clone().into());
            Value::Object(row)
        })
        .collect()
}

/// Writes `rows` to `path` as pretty JSON; says on stderr that it did, or why not. Whether it
/// wrote them.
pub fn write_json(path: &Path, rows: &[Value]) -> bool {
    let text = serde_json::to_string_pretty(rows).unwrap_or_default();
    match std::fs::write(path, text) {
        Ok(()) => {
            eprintln!("wrote {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("writing {}: {e}", path.display());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Calls(u64);

    impl Counts for Calls {
        fn cells(&self, ours: bool, target: &str) -> Vec<String> {
            vec![format!("{}{target}{}", self.0, if ours { "*" } else { "" })]
        }
        fn json(&self) -> Value {
            json!(self.0)
        }
        fn total(&self) -> u64 {
            self.0
        }
    }

    fn row(ours: u64, target: Option<u64>) -> Row<Calls> {
        Row {
            work: "join".into(),
            ours: Calls(ours),
            vendor: Calls(40),
            target,
            seconds: 1.25,
            calls: vec!["a ×1".into()],
        }
    }

    #[test]
    fn only_a_row_over_its_target_is_missed() {
        assert_eq!(
            row(11, Some(10)).missed().as_deref(),
            Some("join: 11 calls, target ≤ 10")
        );
        assert_eq!(row(10, Some(10)).missed(), None);
        assert_eq!(row(99, None).missed(), None);
    }

    #[test]
    fn the_vendors_counts_are_named_in_the_json() {
        assert_eq!(
            json_rows("cpi", &[row(3, Some(5))]),
            [
                json!({"work": "join", "ours": 3, "cpi": 40, "target": 5, "seconds": 1.25,
                    "calls": ["a ×1"]})
            ]
        );
    }
}
