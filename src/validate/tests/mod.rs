//! Unit tests of validation, one file per part of the input. Most go through [`validate`]
//! with real files, so that positions and messages are checked as the user sees them.

use super::*;
use crate::diagnostic::Severity;
use crate::model::Policy;
use crate::selector::Selector;
use crate::source::SourceFile;

/// What validating some files gave.
struct Outcome {
    sources: Sources,
    model: Model,
    diagnostics: Vec<Diagnostic>,
}

impl Outcome {
    /// `path:line:col: error|warning: message` for every diagnostic, in order.
    fn headlines(&self) -> Vec<String> {
        self.diagnostics
            .iter()
            .map(|diagnostic| diagnostic.headline(&self.sources))
            .collect()
    }

    /// The help of the first diagnostic whose message contains `text`.
    fn help(&self, text: &str) -> String {
        self.diagnostics
            .iter()
            .find(|diagnostic| diagnostic.message.contains(text))
            .and_then(|diagnostic| diagnostic.help.clone())
            .unwrap_or_else(|| panic!("no help for {text:?} in {:?}", self.headlines()))
    }

    fn policy(&self, name: &str) -> &Policy {
        self.model
            .policies()
            .iter()
            .find(|policy| policy.name == name)
            .unwrap_or_else(|| panic!("no policy {name}"))
    }
}

/// Loads each file with the real loader, then validates them together. The inputs must
/// parse: these tests are about validation.
fn run(files: &[(&str, &str)]) -> Outcome {
    let mut sources = Sources::new();
    let mut resources = Vec::new();
    for (path, text) in files {
        let id = sources.add(SourceFile::new(*path, *text));
        let (parsed, problems) = crate::load::parse_file(id, sources.get(id));
        let rendered: Vec<_> = problems.iter().map(|d| d.headline(&sources)).collect();
        assert!(rendered.is_empty(), "{path} does not load: {rendered:?}");
        resources.extend(parsed.into_iter().map(|resource| (id, resource)));
    }
    let (model, diagnostics) = validate(&sources, &resources);
    Outcome {
        sources,
        model,
        diagnostics,
    }
}

fn run_one(text: &str) -> Outcome {
    run(&[("p.yaml", text)])
}

/// Asserts that `text` gives exactly the diagnostics `expected`, each given as the start of
/// its headline after `p.yaml:` (`"8:17: error: `tcp` is not"`).
#[track_caller]
fn expect(text: &str, expected: &[&str]) -> Outcome {
    let outcome = run_one(text);
    let headlines = outcome.headlines();
    let matches = headlines.len() == expected.len()
        && headlines
            .iter()
            .zip(expected)
            .all(|(headline, prefix)| headline.starts_with(&format!("p.yaml:{prefix}")));
    assert!(
        matches,
        "\nexpected: {expected:#?}\n     got: {headlines:#?}\nfor:\n{text}"
    );
    outcome
}

/// A policy named `p` with `spec` (indented by two spaces) starting on line 6.
fn policy(spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: p\nspec:\n{spec}"
    )
}

/// A policy whose one ingress rule (keys indented by six spaces) starts on line 7.
fn rule(body: &str) -> String {
    policy(&format!("  ingress:\n    - {}", body.trim_start()))
}

/// A network set named `s` with `spec` starting on line 6.
fn network_set(spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: s\nspec:\n{spec}"
    )
}

/// A host endpoint named `h` with `spec` starting on line 6.
fn host_endpoint(spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: h\nspec:\n{spec}"
    )
}

/// Whether the selector module is the real parser (the placeholder accepts everything).
fn real_selector_parser() -> bool {
    Selector::parse("role = 'x'").is_err()
}

mod calico_corpus;
mod envelope;
mod fixtures;
mod host_endpoint;
mod network_set;
mod policy;
mod robustness;
mod rules;
mod staged;
mod values;
