//! The JSON documents of `plan --json`, `status --json` and `trace --json` as scripts read
//! them: each starts with `apiVersion: nodeport-guard/v1` and its `kind`, and every key in it
//! is camelCase, as Calico's and Kubernetes' APIs (documented in `docs/SPEC.md`).

mod support;

use support::{Backend, Guard, Lab, addr, backend_tests, ports};

/// Every object key below `value` that is not camelCase, with its path.
fn not_camel_case(value: &serde_json::Value, path: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, field) in fields {
                let camel = key.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && key.chars().all(|c| c.is_ascii_alphanumeric());
                if !camel {
                    found.push(format!("{path}.{key}"));
                }
                not_camel_case(field, &format!("{path}.{key}"), found);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                not_camel_case(item, &format!("{path}[]"), found);
            }
        }
        _ => {}
    }
}

#[track_caller]
fn check_document(text: &str, kind: &str) {
    let value: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{kind}: not JSON ({e}): {text}"));
    let keys: Vec<&String> = value
        .as_object()
        .unwrap_or_else(|| panic!("{kind}: not an object: {text}"))
        .keys()
        .collect();
    assert_eq!(
        keys.get(..2),
        Some(&[&"apiVersion".to_owned(), &"kind".to_owned()][..]),
        "{kind}: {keys:?}"
    );
    assert_eq!(value["apiVersion"], "nodeport-guard/v1", "{kind}");
    assert_eq!(value["kind"], kind);
    let mut found = Vec::new();
    not_camel_case(&value, "", &mut found);
    assert!(found.is_empty(), "{kind}: keys not in camelCase: {found:?}");
}

/// `plan --json` (with changes), `status --json` and `trace --json` are versioned documents
/// with camelCase keys.
fn json_documents_are_versioned_and_camel_case(backend: Backend) {
    let lab = Lab::new(backend);
    let guard = Guard::new(&lab);
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policies/nodeport-whitelist.yaml"
    ))
    .expect("the example policy");
    guard.write_policy("policy.yaml", &example);
    let plan = guard.run_expect(&["plan", "--json"], 0);
    check_document(&plan.stdout, "Plan");
    guard.apply();
    let status = guard.run_expect(&["status", "--json"], 0);
    check_document(&status.stdout, "Status");
    let src = addr::CLIENT_V4[1].to_string();
    let dst = addr::NODE_V4.to_string();
    let port = ports::NODEPORT.to_string();
    let trace = guard.run_expect(
        &[
            "trace", "--src", &src, "--dst", &dst, "--dport", &port, "--json",
        ],
        0,
    );
    check_document(&trace.stdout, "Trace");
}
backend_tests!(json_documents_are_versioned_and_camel_case);
