//! The layering ARCHITECTURE.md promises, checked on the source: no cycle between the crate's
//! top-level modules, and none between the sibling modules of a directory (the commands, the
//! backends, the daemon's parts). A module may use what is below it; nothing below calls back
//! up.
//!
//! Dependencies are read from the text: every `crate::a::b` path (in `use` items, groups and
//! inline) and every `super::x` path, unit tests included: a test that reaches up into a module
//! that depends on the tested one belongs with that module. The file-size check counts only
//! code outside `#[cfg(test)]` items.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, e.g. `["dataplane", "iptables"]`; the crate root is `[]`.
type ModulePath = Vec<String>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file defines: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_of(src: &Path, file: &Path) -> ModulePath {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// The code of a file without its comments.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code of a file without its comments and its `#[cfg(test)]` items, for counting lines.
fn production_code(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        rest = skip_item(&rest[at + "#[cfg(test)]".len()..]);
    }
    out.push_str(rest);
    out
}

/// What follows the item at the start of `code`: after its `;` or its balanced `{ … }`.
fn skip_item(code: &str) -> &str {
    let Some(open) = code.find(['{', ';']) else {
        return "";
    };
    if code.as_bytes()[open] == b';' {
        return &code[open + 1..];
    }
    let mut depth = 0usize;
    for (index, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open + index + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths named after each occurrence of `prefix` (`crate::` or `super::`), as segments;
/// a group (`crate::{a, b::c}`) names each of its members.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (index, _) in code.match_indices(prefix) {
        if code[..index].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        paths.extend(expand(&code[index + prefix.len()..]));
    }
    paths
}

/// The paths at the start of `text`: `a::b::C`, or `a::{b, c::D}` as two.
fn expand(text: &str) -> Vec<Vec<String>> {
    let end = text
        .find(|c: char| !(is_ident(c) || c == ':'))
        .unwrap_or(text.len());
    let segments: Vec<String> = text[..end]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if !text[end..].starts_with('{') || !text[..end].ends_with("::") && end > 0 {
        return if segments.is_empty() {
            Vec::new()
        } else {
            vec![segments]
        };
    }
    let group = &text[end + 1..];
    let mut members = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..index]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    let mut paths = Vec::new();
    for member in members {
        for tail in expand(member.trim()) {
            let mut path = segments.clone();
            path.extend(tail.into_iter().filter(|s| s != "self"));
            paths.push(path);
        }
    }
    if paths.is_empty() && !segments.is_empty() {
        paths.push(segments);
    }
    paths
}

/// Every module a module's code refers to, as the longest known module path.
fn dependencies(
    module: &ModulePath,
    code: &str,
    known: &BTreeSet<ModulePath>,
) -> BTreeSet<ModulePath> {
    let mut found = BTreeSet::new();
    let mut resolve = |mut path: ModulePath| {
        while !path.is_empty() && !known.contains(&path) {
            path.pop();
        }
        if !path.is_empty() && &path != module {
            found.insert(path);
        }
    };
    for segments in paths_after(code, "crate::") {
        resolve(segments);
    }
    for segments in paths_after(code, "super::") {
        let mut path = module.clone();
        path.pop();
        path.extend(segments);
        resolve(path);
    }
    found
}

/// The module graph of `src/`.
fn graph() -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: Vec<(ModulePath, String)> = files
        .iter()
        // Unit tests count too: a test that reaches up into a module that depends on the tested
        // one is a cycle as well (it belongs with the module above).
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("read");
            (module_of(&src, file), without_comments(&text))
        })
        .collect();
    let known: BTreeSet<ModulePath> = modules.iter().map(|(module, _)| module.clone()).collect();
    modules
        .iter()
        .map(|(module, code)| (module.clone(), dependencies(module, code, &known)))
        .collect()
}

/// A cycle in `edges`, if there is one, as the nodes along it.
fn find_cycle<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        done: &mut BTreeSet<N>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(start) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[start..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

/// The graph seen from one level: dependencies between the children of `parent` (a
/// descendant stands for its child of `parent`), leaving out the parent itself.
fn level(
    graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
    parent: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
    let child = |module: &ModulePath| -> Option<String> {
        (module.len() > parent.len() && module.starts_with(parent))
            .then(|| module[parent.len()].clone())
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, dependencies) in graph {
        let Some(from) = child(module) else { continue };
        let entry = edges.entry(from.clone()).or_default();
        for dependency in dependencies {
            if let Some(to) = child(dependency)
                && to != from
            {
                entry.insert(to);
            }
        }
    }
    edges
}

#[test]
fn no_module_depends_on_a_module_that_depends_back_on_it() {
    let graph = graph();
    let parents: BTreeSet<ModulePath> = graph
        .keys()
        .filter(|module| !module.is_empty())
        .map(|module| module[..module.len() - 1].to_vec())
        .collect();
    let mut cycles = Vec::new();
    for parent in &parents {
        if let Some(cycle) = find_cycle(&level(&graph, parent)) {
            let prefix = if parent.is_empty() {
                "crate".to_owned()
            } else {
                format!("crate::{}", parent.join("::"))
            };
            cycles.push(format!("{prefix}: {}", cycle.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

/// ARCHITECTURE.md: "a Model can only come from validation". Outside the crate the type sees to
/// it (private fields, no public constructor); inside it, only `validate` calls the
/// crate-visible constructor.
#[test]
fn only_validate_builds_a_model() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let builders: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).expect("read");
            text.contains("Model::from_checked(")
        })
        .map(|file| {
            file.strip_prefix(&src)
                .expect("under src")
                .display()
                .to_string()
        })
        .filter(|file| !file.starts_with("validate/") && file != "model.rs")
        .collect();
    assert!(
        builders.is_empty(),
        "only src/validate/ may build a Model: {builders:?}"
    );
}

#[test]
fn the_checker_sees_a_cycle() {
    // The detector itself, on a graph with a cycle and one without.
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    edges.entry("cli").or_default().insert("app");
    edges.entry("app").or_default().insert("ops");
    edges.entry("ops").or_default().insert("app");
    assert_eq!(find_cycle(&edges), Some(vec!["app", "ops", "app"]));
    edges.get_mut("ops").expect("ops").clear();
    assert_eq!(find_cycle(&edges), None);
    // And the reader, on source text.
    let known: BTreeSet<ModulePath> = [vec!["a".to_owned()], vec!["b".to_owned(), "c".to_owned()]]
        .into_iter()
        .collect();
    let found = dependencies(
        &vec!["b".to_owned(), "d".to_owned()],
        "use crate::a::Thing;\nlet x = super::c::f();\nlet y = subcrate::a::g();",
        &known,
    );
    assert_eq!(
        found, known,
        "`crate::a::Thing` and `super::c` are read, `subcrate::` is not"
    );
    // Groups name each member; test items are left out, the code after them is not.
    let code = production_code(
        "use super::{c::{self, X}, Y};\n#[cfg(test)]\nmod tests {\n    fn f() { crate::a::g(); }\n}\nfn h() {}\n",
    );
    assert!(!code.contains("crate::a"), "{code}");
    assert!(code.contains("fn h()"), "{code}");
    let found = dependencies(&vec!["b".to_owned(), "d".to_owned()], &code, &known);
    assert_eq!(
        found,
        [vec!["b".to_owned(), "c".to_owned()]].into_iter().collect()
    );
    let found = dependencies(
        &vec!["e".to_owned()],
        "use crate::{a::Thing, b::c::Other};",
        &known,
    );
    assert_eq!(found, known);
}

#[test]
fn no_source_file_is_too_large_to_hold_in_ones_head() {
    // The non-test code of one file; a file this long has seams to split it along.
    const MOST_LINES: usize = 1_000;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut long: Vec<String> = files
        .iter()
        .filter(|file| {
            !file
                .iter()
                .any(|part| part == "tests" || part == "tests.rs")
        })
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).expect("read");
            let lines = production_code(&text).lines().count();
            (lines > MOST_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files over {MOST_LINES} lines:\n{}",
        long.join("\n")
    );
}
