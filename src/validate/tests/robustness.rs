//! Robustness: no input makes validation panic, and messages stay on one line.

use super::*;

/// A valid file that uses nearly every field, one scalar per line so each can be replaced.
const EVERYTHING: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: every-field\n  labels:\n    role: edge\n  annotations:\n    note: hello\nspec:\n  tier: default\n  order: 10\n  selector: has(kubernetes-host)\n  preDNAT: true\n  applyOnForward: true\n  types:\n    - Ingress\n  performanceHints:\n    - AssumeNeededOnEveryNode\n  ingress:\n    - action: Allow\n      protocol: TCP\n      notProtocol: UDP\n      ipVersion: 4\n      metadata:\n        annotations:\n          why: because\n      source:\n        nets:\n          - 10.0.0.0/8\n        notNets:\n          - 10.1.0.0/16\n        selector: role == 'lb'\n        notSelector: has(x)\n        ports:\n          - 80\n          - '8000:8080'\n        notPorts:\n          - web\n    - action: Allow\n      protocol: ICMP\n      icmp:\n        type: 8\n        code: 0\n      notICMP:\n        type: 3\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: set\n  labels:\n    role: lb\nspec:\n  nets:\n    - 192.0.2.0/24\n    - 198.51.100.1\n---\napiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: hep\nspec:\n  node: node1\n  interfaceName: eth0\n  expectedIPs:\n    - 10.0.0.1\n  ports:\n    - name: web\n      port: 8080\n      protocol: TCP\n  profiles:\n    - projectcalico-default-allow\n";

#[test]
fn the_robustness_template_is_valid() {
    expect(EVERYTHING, &[]);
}

/// Replaces every scalar of the template, one at a time, with awkward values; validation
/// must neither panic nor produce a diagnostic that breaks the one-line output format.
#[test]
fn validation_never_panics_and_messages_stay_on_one_line() {
    let long_ascii = "a".repeat(5000);
    let long_unicode = "é".repeat(3000);
    let tricky: Vec<String> = [
        "''",
        "0",
        "-1",
        "99999999999",
        "99999999999999999999999",
        "-99999999999999999999999",
        "\"\\0\"",
        "\"\\n\"",
        "\"a\\nb\"",
        "\"\\u0007\\u007f\\u0085\"",
        "\"\\t\"",
        "\"ü€𝔘\"",
        "'é:é'",
        "\"global(\"",
        "'has('",
        "'!'",
        "\"'\"",
        "'80:'",
        "':'",
        "'0:0'",
        "'65535:1'",
        "'1-2'",
        "'::/0'",
        "'0.0.0.0/0'",
        "'10.0.0.1/33'",
        "'*'",
        "'--'",
        "'a/b/c'",
        "'/'",
        "~",
        "[]",
        "{}",
        "true",
        "1.5",
        "-0.0",
        "1e308",
        "Ingress",
        "Egress",
    ]
    .iter()
    .map(|value| (*value).to_owned())
    .chain([
        long_ascii.clone(),
        long_unicode.clone(),
        format!("'{long_unicode}:{long_ascii}'"),
        format!("\"{}\"", "\\n".repeat(100)),
    ])
    .collect();
    let scalar =
        regex::Regex::new(r"^(\s*(?:- )?(?:[A-Za-z]+: )?)(.+)$").unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<&str> = EVERYTHING.lines().collect();
    let mut runs = 0;
    for (index, line) in lines.iter().enumerate() {
        let Some(captures) = scalar.captures(line) else {
            continue;
        };
        let (prefix, value) = (&captures[1], &captures[2]);
        if value.ends_with(':') || value == "---" {
            continue;
        }
        for replacement in &tricky {
            let mut mutated: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
            mutated[index] = format!("{prefix}{replacement}");
            let text = mutated.join("\n") + "\n";
            let mut sources = Sources::new();
            let id = sources.add(SourceFile::new("p.yaml", text.as_str()));
            let (resources, _) = crate::load::parse_file(id, sources.get(id));
            let resources: Vec<_> = resources.into_iter().map(|r| (id, r)).collect();
            let (_, diagnostics) = validate(&sources, &resources);
            for diagnostic in &diagnostics {
                let rendered = diagnostic.render(&sources);
                assert!(!diagnostic.message.contains(['\n', '\r']), "{rendered}");
                assert!(!diagnostic.message.ends_with('.'), "{rendered}");
                let help = diagnostic.help.as_deref().unwrap_or("");
                assert!(!help.contains(['\n', '\r']), "{rendered}");
                assert!(
                    diagnostic
                        .span
                        .is_some_and(|span| span.end <= text.len() && span.start <= span.end),
                    "{rendered}"
                );
                assert!(diagnostic.message.chars().count() < 400, "{rendered}");
            }
            runs += 1;
        }
    }
    assert!(runs > 1000, "only {runs} variants ran");
}

#[test]
fn severities_are_errors_except_the_documented_warnings() {
    let outcome = run_one(&policy("  types: [Ingress]\n  egress: [{action: Allow}]\n"));
    assert_eq!(outcome.diagnostics[0].severity, Severity::Warning);
    assert!(!crate::diagnostic::has_errors(&outcome.diagnostics));
}
