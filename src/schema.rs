//! The JSON Schema of policy files (and of the config file), generated from the raw types so
//! it can never disagree with the parser. `schemas/` holds the generated files; a test fails
//! when they are stale.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::spec::{
    API_VERSION, Kind, RawHostEndpointSpec, RawMetadata, RawNetworkSetSpec, RawPolicySpec,
    RawTierSpec,
};

/// Where the policy schema is checked in, relative to the repository root.
pub const POLICY_SCHEMA_PATH: &str = "schemas/nodeport-guard.schema.json";
/// Where the config schema is checked in, relative to the repository root.
pub const CONFIG_SCHEMA_PATH: &str = "schemas/config.schema.json";

/// The JSON Schema of a policy file document, pretty-printed with a final newline.
pub fn policy_schema() -> String {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let metadata = generator.subschema_for::<RawMetadata>();
    let specs = [
        (
            Kind::GlobalNetworkPolicy,
            generator.subschema_for::<RawPolicySpec>(),
        ),
        (
            Kind::GlobalNetworkSet,
            generator.subschema_for::<RawNetworkSetSpec>(),
        ),
        (
            Kind::HostEndpoint,
            generator.subschema_for::<RawHostEndpointSpec>(),
        ),
        (Kind::Tier, generator.subschema_for::<RawTierSpec>()),
    ];
    let mut definitions: Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    let staged_spec = staged_spec_schema(&mut definitions);
    let specs = [
        specs[0].clone(),
        (Kind::StagedGlobalNetworkPolicy, staged_spec),
        specs[1].clone(),
        specs[2].clone(),
        specs[3].clone(),
    ];

    let mut resources = Vec::new();
    for (kind, spec) in &specs {
        definitions.insert(
            kind.as_str().to_owned(),
            json!({
                "description": format!("A `{kind}` resource."),
                "type": "object",
                "required": ["apiVersion", "kind", "metadata"],
                "additionalProperties": false,
                "properties": {
                    "apiVersion": {"const": API_VERSION},
                    "kind": {"const": kind.as_str()},
                    "metadata": metadata.clone(),
                    "spec": spec.clone(),
                }
            }),
        );
        resources.push(json!({"$ref": format!("#/$defs/{kind}")}));
    }
    for (list, item) in [
        (
            Kind::GlobalNetworkPolicyList,
            Some(Kind::GlobalNetworkPolicy),
        ),
        (
            Kind::StagedGlobalNetworkPolicyList,
            Some(Kind::StagedGlobalNetworkPolicy),
        ),
        (Kind::GlobalNetworkSetList, Some(Kind::GlobalNetworkSet)),
        (Kind::HostEndpointList, Some(Kind::HostEndpoint)),
        (Kind::TierList, Some(Kind::Tier)),
        (Kind::List, None),
    ] {
        let items = match item {
            Some(item) => json!({"$ref": format!("#/$defs/{item}")}),
            None => json!({"$ref": "#/$defs/Resource"}),
        };
        definitions.insert(
            list.as_str().to_owned(),
            json!({
                "description": format!("A `{list}`: its `items` are loaded as if each were its own document."),
                "type": "object",
                "required": ["kind", "items"],
                "additionalProperties": false,
                "properties": {
                    "apiVersion": {"const": API_VERSION},
                    "kind": {"const": list.as_str()},
                    "metadata": {"type": "object"},
                    "items": {"type": "array", "items": items},
                }
            }),
        );
        resources.push(json!({"$ref": format!("#/$defs/{list}")}));
    }
    definitions.insert("Resource".to_owned(), json!({"oneOf": resources}));

    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://nodeport-guard.invalid/schemas/nodeport-guard.schema.json",
        "title": "nodeport-guard policy file",
        "description": "A document of a nodeport-guard policy file: a Calico projectcalico.org/v3 GlobalNetworkPolicy, StagedGlobalNetworkPolicy, GlobalNetworkSet, HostEndpoint or Tier, a list of them, or a sequence of them.",
        "oneOf": [
            {"$ref": "#/$defs/Resource"},
            {"type": "array", "items": {"$ref": "#/$defs/Resource"}}
        ],
        "$defs": definitions,
    });
    pretty(&schema)
}

/// The spec of a `StagedGlobalNetworkPolicy`: a `GlobalNetworkPolicy`'s spec and
/// `stagedAction`. Adds its definition and returns a reference to it.
fn staged_spec_schema(definitions: &mut Map<String, Value>) -> schemars::Schema {
    let mut staged = definitions
        .get("GlobalNetworkPolicySpec")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(object) = staged.as_object_mut() {
        object.insert(
            "description".to_owned(),
            json!("`spec` of a `StagedGlobalNetworkPolicy`: a GlobalNetworkPolicy's spec, evaluated and logged to NFLOG but never enforced, and `stagedAction`."),
        );
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            properties.insert(
                "stagedAction".to_owned(),
                json!({
                    "description": "`Set` (the default) stages this spec; `Delete` stages removing the enforced policy of this name, and then only `tier` may be written besides.",
                    "enum": ["Set", "Delete"]
                }),
            );
        }
    }
    definitions.insert("StagedGlobalNetworkPolicySpec".to_owned(), staged);
    schemars::Schema::try_from(json!({"$ref": "#/$defs/StagedGlobalNetworkPolicySpec"}))
        .unwrap_or_default()
}

/// The JSON Schema of the config file.
pub fn config_schema() -> String {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<crate::config::RawConfig>();
    schema.insert(
        "title".to_owned(),
        Value::String("nodeport-guard config file".to_owned()),
    );
    pretty(&schema.to_value())
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}
