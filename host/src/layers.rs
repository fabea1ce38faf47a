//! The layering of the crate's top-level modules, as the crate doc states it, checked against
//! the `crate::` paths the code uses: a module that reaches a module of its own layer or
//! above fails the test below. (Comments and test code are left out: a test may use anything.)

use std::collections::BTreeSet;
use std::path::Path;

/// Each top-level module and its layer (see the crate doc); within layer 1, `backoff` is used
/// by `task` and `task` by `instruments`, so they are ranked in that order.
const LAYERS: &[(&str, f32)] = &[
    ("backoff", 1.0),
    ("shutdown", 1.0),
    ("task", 1.1),
    ("instruments", 1.2),
    ("store", 2.0),
    ("sandbox", 3.0),
    ("schedule", 3.0),
    ("plugins", 4.0),
    ("enqueue", 5.0),
    ("worker", 6.0),
    ("alerts", 7.0),
    ("config", 8.0),
    ("api", 9.0),
    ("host", 10.0),
    ("cli", 11.0),
];

fn layer(module: &str) -> Option<f32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The text of `file` without its comments and its `#[cfg(test)]` part.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module named after `crate::` in `code`, also inside `crate::{a, b::c}` groups.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                used.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            used.insert(name);
        }
    }
    used
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut upward = Vec::new();
    for file in all {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs");
        let Some(own) = layer(top) else { continue };
        for used in used_modules(&code(&file)) {
            if let Some(theirs) = layer(&used)
                && used != top
                && theirs >= own
            {
                upward.push(format!("{}: {top} uses {used}", relative.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "modules that reach their own layer or above (see the crate doc's layers):\n{}",
        upward.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if ["lib", "main", "layers"].contains(&module) {
            continue;
        }
        assert!(layer(module).is_some(), "`{module}` has no layer in LAYERS");
    }
}
