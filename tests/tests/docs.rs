//! The docs do not go stale: the README's Layout table has a row for every workspace crate (read
//! from the root `Cargo.toml`'s `members` and the directories on disk) and names no path that
//! does not exist; every relative link of README.md and docs/*.md reaches a file, and its
//! `#anchor` a heading there; every `make` target they name is one the Makefile has.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The quoted strings of the TOML array `key = [ ... ]` in `toml` (comments left out), if any.
fn toml_array(toml: &str, key: &str) -> Option<Vec<String>> {
    let start = toml
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{key} = [")))?;
    let mut items = Vec::new();
    for line in toml.lines().skip(start) {
        let code = line.split('#').next().unwrap_or_default();
        let code = code.split_once('[').map_or(code, |(_, rest)| rest);
        items.extend(code.split('"').skip(1).step_by(2).map(str::to_owned));
        if code.contains(']') {
            return Some(items);
        }
    }
    panic!("{key} = [ has no closing ]")
}

/// Every workspace crate directory, relative to the root: the `members` of the root
/// `Cargo.toml`, a trailing `/*` expanded to the directories under it that hold a `Cargo.toml`
/// (as cargo expands it), less `exclude`.
fn workspace_crates(root: &Path) -> BTreeSet<String> {
    let manifest = read(&root.join("Cargo.toml"));
    let members = toml_array(&manifest, "members").expect("the workspace's members");
    let exclude: BTreeSet<String> = toml_array(&manifest, "exclude")
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut crates = BTreeSet::new();
    for member in members {
        match member.strip_suffix("/*") {
            Some(parent) => {
                assert!(
                    !parent.contains(['*', '?', '[']),
                    "the member glob {member:?} is more than a trailing /*: teach this test"
                );
                let dir = root.join(parent);
                for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
                    let path = entry.expect("a directory entry").path();
                    if path.join("Cargo.toml").is_file() {
                        let name = path.file_name().unwrap().to_string_lossy();
                        crates.insert(format!("{parent}/{name}"));
                    }
                }
            }
            None => {
                assert!(
                    !member.contains(['*', '?', '[']),
                    "the member glob {member:?} is more than a trailing /*: teach this test"
                );
                crates.insert(member);
            }
        }
    }
    crates.retain(|c| !exclude.contains(c));
    crates
}

/// The text of the section `## heading` of a Markdown text, up to the next `## `.
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n## {heading}\n"))? + 1;
    let rest = &text[start..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
    Some(&rest[..end])
}

/// The paths of the Layout table: the code spans of each row's first cell, without a
/// trailing `/`.
fn layout_paths(readme: &str) -> Vec<String> {
    let layout = section(readme, "Layout").expect("README.md has a section ## Layout");
    let mut paths = Vec::new();
    for row in layout.lines().filter(|l| l.starts_with('|')) {
        let first = row.split('|').nth(1).unwrap_or_default().trim();
        if first == "path" || first.starts_with("---") {
            continue;
        }
        let spans: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        assert!(
            !spans.is_empty(),
            "a Layout row names no path in code spans: {row}"
        );
        paths.extend(spans.iter().map(|p| p.trim_end_matches('/').to_owned()));
    }
    paths
}

/// What is wrong with the Layout table: the crates it has no row for, the paths it names that
/// do not exist.
fn layout_problems(root: &Path, readme: &str) -> Vec<String> {
    let paths = layout_paths(readme);
    let listed: BTreeSet<&str> = paths.iter().map(String::as_str).collect();
    let mut problems = Vec::new();
    for krate in workspace_crates(root) {
        if !listed.contains(krate.as_str()) {
            problems.push(format!(
                "{krate} is a workspace crate but README.md's Layout table has no row naming it"
            ));
        }
    }
    for path in &paths {
        if !root.join(path).exists() {
            problems.push(format!(
                "README.md's Layout table names {path}, which does not exist"
            ));
        }
    }
    problems
}

#[test]
fn the_layout_table_lists_every_workspace_crate_and_only_what_exists() {
    let root = repo();
    let crates = workspace_crates(&root);
    // The expansion itself works: crates of each glob and the plain members.
    for krate in [
        "crates/cloud-gateway",
        "crates/controllers/controller-kit",
        "tests",
    ] {
        assert!(crates.contains(krate), "{krate} not found in {crates:?}");
    }
    let readme = read(&root.join("README.md"));
    let problems = layout_problems(&root, &readme);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layout_check_names_a_missing_row_and_a_path_that_does_not_exist() {
    let root = repo();
    let readme = read(&root.join("README.md"));
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `crates/common/gcfg` |"))
        .expect("the gcfg row");
    let without = readme.replace(&format!("{row}\n"), "");
    assert_eq!(
        layout_problems(&root, &without),
        ["crates/common/gcfg is a workspace crate but README.md's Layout table has no row naming it"]
    );
    let renamed = readme.replace(
        "| `crates/common/gcfg` |",
        "| `crates/common/gcfg`, `crates/common/ini` |",
    );
    assert_eq!(
        layout_problems(&root, &renamed),
        ["README.md's Layout table names crates/common/ini, which does not exist"]
    );
}

/// README.md and every Markdown file of docs/.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs).unwrap_or_else(|e| panic!("{}: {e}", docs.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The text outside fenced code blocks, and the lines inside them.
fn split_fences(text: &str) -> (String, Vec<&str>) {
    let mut prose = String::new();
    let mut code = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            code.push(line);
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    (prose, code)
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated heading's get `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split_fences(text);
    let mut anchors = BTreeSet::new();
    for line in prose.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut n = 0;
            while !anchors.insert(anchor.clone()) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
        }
    }
    anchors
}

/// The targets of a text's inline links `[text](target)`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let (prose, _) = split_fences(text);
    let outside_code: String = prose.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    outside_code
        .match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &outside_code[i + 2..];
            let end = rest.find([')', ' ', '\n'])?;
            Some(rest[..end].to_owned())
        })
        .collect()
}

#[test]
fn every_link_of_the_readme_and_the_docs_resolves() {
    let root = repo();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files(&root) {
        let text = read(&file);
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if !anchor.is_empty()
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&resolved)).contains(anchor)
            {
                broken.push(format!("{name}: {target}: no heading with that anchor"));
            }
        }
    }
    assert!(checked > 30, "only {checked} links found: is the parse right?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_make_target_the_readme_and_the_docs_name_exists() {
    let root = repo();
    let makefile = read(&root.join("Makefile"));
    let targets: BTreeSet<&str> = makefile
        .lines()
        .filter(|l| !l.starts_with(['\t', '#', '.']))
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .flat_map(str::split_whitespace)
        .collect();
    let mut missing = Vec::new();
    for file in markdown_files(&root) {
        let text = read(&file);
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        let (prose, code) = split_fences(&text);
        let spans = prose.split('`').skip(1).step_by(2);
        for command in spans.chain(code.into_iter().map(str::trim_start)) {
            let Some(rest) = command.strip_prefix("make ") else {
                continue;
            };
            // Targets, until a comment; `VAR=value` left out, a quoted value's words too.
            let mut quoted = false;
            for word in rest.split_whitespace() {
                let quotes = word.matches(['\'', '"']).count() % 2 == 1;
                if quoted || word.contains('=') {
                    quoted ^= quotes;
                    continue;
                }
                if word.starts_with('#') {
                    break;
                }
                if !targets.contains(word) {
                    missing.push(format!("{name}: `make {word}`"));
                }
            }
        }
    }
    assert!(
        targets.contains("demo") && targets.contains("test"),
        "{targets:?}"
    );
    assert!(
        missing.is_empty(),
        "not Makefile targets:\n{}",
        missing.join("\n")
    );
}
