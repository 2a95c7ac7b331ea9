//! The error-id catalogue (`heddle_model::error_id`) is the one list of `err-heddle-*` ids: every id the code
//! or its tests mention is in it, every id in it is used by the code, and `docs/errors.md` is rendered from it.
//!
//! Regenerate the page with `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test error_catalogue`.

use heddle_model::error_id::{CATALOGUE, lookup, render_markdown};
use heddle_testkit::workspace_root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The catalogue's own source, which names every id by definition.
const CATALOGUE_SOURCE: &str = "libs/model/src/error_id.rs";

/// Every `.rs` file under `dir`, depth-first; bounded by the size of the tree.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `err-heddle-*` ids in `text`, with their first line number.
fn ids_in(text: &str) -> Vec<(String, usize)> {
    const PREFIX: &str = "err-heddle-";
    let mut ids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find(PREFIX) {
            let tail = &rest[at + PREFIX.len()..];
            let len = tail
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                .count();
            let name = tail[..len].trim_end_matches('-');
            // `err-heddle-...` in prose names the family, not an id.
            if !name.is_empty() {
                ids.push((format!("{PREFIX}{name}"), n + 1));
            }
            rest = &tail[len..];
        }
    }
    ids
}

/// The catalogue's constant for `id`: `err-heddle-sample-out-of-order` is `SAMPLE_OUT_OF_ORDER`.
fn const_name(id: &str) -> String {
    id.trim_start_matches("err-heddle-").to_uppercase().replace('-', "_")
}

#[test]
fn every_id_in_the_code_is_catalogued_and_every_catalogued_id_is_used() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["libs", "services", "loadtest", "integration"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap_or(file).display().to_string();
        if rel == CATALOGUE_SOURCE || rel == "integration/tests/error_catalogue.rs" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        for (id, line) in ids_in(&text) {
            used.entry(id).or_default().push(format!("{rel}:{line}"));
        }
        // Code that needs an id as a value names the catalogue's constant instead of spelling the id.
        for e in CATALOGUE {
            if text.contains(&format!("error_id::{}", const_name(e.id))) {
                used.entry(e.id.to_owned()).or_default().push(rel.clone());
            }
        }
    }
    assert!(
        used.len() >= 10,
        "the scan found too few ids ({}): is the root right?",
        used.len()
    );
    let unknown: Vec<String> = used
        .iter()
        .filter(|(id, _)| lookup(id).is_none())
        .map(|(id, at)| format!("{id} at {}", at.join(", ")))
        .collect();
    assert!(
        unknown.is_empty(),
        "ids not in the catalogue ({CATALOGUE_SOURCE}); add them there:\n{}",
        unknown.join("\n")
    );
    let listed: BTreeSet<&str> = CATALOGUE.iter().map(|e| e.id).collect();
    let unused: Vec<&&str> = listed.iter().filter(|id| !used.contains_key(**id)).collect();
    assert!(
        unused.is_empty(),
        "catalogued ids no code uses (remove them): {unused:?}"
    );
}

#[test]
fn docs_errors_md_is_generated_from_the_catalogue() {
    let path = workspace_root().join("docs/errors.md");
    let doc = render_markdown();
    if std::env::var_os("HEDDLE_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &doc).expect("write docs/errors.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == doc,
        "docs/errors.md is stale; run `HEDDLE_UPDATE_DOCS=1 cargo test -p heddle-integration --test error_catalogue`\n\
         --- generated now ---\n{doc}"
    );
}

#[test]
fn constants_are_named_after_their_ids() {
    use heddle_model::error_id;
    assert_eq!(const_name(error_id::SAMPLE_OUT_OF_ORDER), "SAMPLE_OUT_OF_ORDER");
    assert_eq!(
        const_name(error_id::MAX_LABEL_NAMES_PER_SERIES),
        "MAX_LABEL_NAMES_PER_SERIES"
    );
    let source = std::fs::read_to_string(workspace_root().join(CATALOGUE_SOURCE)).expect("catalogue source");
    for e in CATALOGUE {
        let name = const_name(e.id);
        assert!(
            source.contains(&format!("{name} = \"{}\"", e.id)),
            "{} is not defined as {name}",
            e.id
        );
    }
}

#[test]
fn the_scan_reads_ids_as_written() {
    let found: Vec<String> =
        ids_in("a \"err-heddle-sample-out-of-order: x\" b err-heddle-ring-empty. (`err-heddle-...`)\n")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
    assert_eq!(found, ["err-heddle-sample-out-of-order", "err-heddle-ring-empty"]);
}
