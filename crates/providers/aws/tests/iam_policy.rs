//! `docs/aws-iam-policy.json` is exactly what the provider calls: every AWS operation the code
//! invokes on its three SDK clients is in the policy, and the policy grants nothing the code never
//! calls. A new call without its action fails here, not at an operator's first AccessDenied.
//!
//! The provider's clients are the fields `ec2` (EC2), `elb` (ELBv2) and `classic` (Classic ELB);
//! an operation is `.<client>.<operation>(` in the source, whitespace aside (rustfmt splits the
//! chain over lines).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

const CLIENTS: [(&str, &str); 3] = [
    ("ec2", "ec2"),
    ("elb", "elasticloadbalancing"),
    ("classic", "elasticloadbalancing"),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `service:Action` for every operation the source calls on the clients.
fn called(source: &str) -> BTreeSet<String> {
    let flat: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    let mut actions = BTreeSet::new();
    for (field, service) in CLIENTS {
        let needle = format!(".{field}.");
        for (at, _) in flat.match_indices(&needle) {
            let rest = &flat[at + needle.len()..];
            let op: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !op.is_empty() && rest[op.len()..].starts_with('(') {
                actions.insert(format!("{service}:{}", pascal(&op)));
            }
        }
    }
    actions
}

fn policy_actions() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../docs/aws-iam-policy.json");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the policy file")).expect("policy JSON");
    policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .flat_map(|s| s["Action"].as_array().cloned().unwrap_or_default())
        .map(|a| a.as_str().expect("an action").to_owned())
        .collect()
}

#[test]
fn the_policy_grants_exactly_what_the_provider_calls() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut used = BTreeSet::new();
    for file in &files {
        used.extend(called(&std::fs::read_to_string(file).expect("source")));
    }
    let granted = policy_actions();
    let missing: Vec<_> = used.difference(&granted).collect();
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(
        missing.is_empty(),
        "called but not in docs/aws-iam-policy.json: {missing:?}"
    );
    assert!(
        unused.is_empty(),
        "in docs/aws-iam-policy.json but never called: {unused:?}"
    );
    // The target-group attribute actions upstream's documented policy lacks.
    assert!(used.contains("elasticloadbalancing:ModifyTargetGroupAttributes"));
}

#[test]
fn calls_are_found_across_lines() {
    let source = "let x = self\n    .classic\n    .describe_load_balancers()\n; self.ec2.create_route().send(); self.elb .add_tags ( )";
    assert_eq!(
        called(source),
        BTreeSet::from([
            "ec2:CreateRoute".to_owned(),
            "elasticloadbalancing:AddTags".to_owned(),
            "elasticloadbalancing:DescribeLoadBalancers".to_owned(),
        ])
    );
}
