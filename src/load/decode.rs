//! The serde visitors and seeds that decode a resource: the single pass over a document holding
//! one resource, and the strict second pass that follows the [`Plan`] of the first.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::source::Span;
use crate::spec::{
    Kind, RawHostEndpointSpec, RawMetadata, RawNetworkSetSpec, RawPolicySpec, RawResource, RawSpec,
    RawTierSpec, Sp,
};

/// The plan for the second pass: the kind each resource will be decoded as (`None` when its kind
/// is missing or unknown, already reported: the resource is skipped).
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) kind: Option<Kind>,
    pub(super) items: Vec<Plan>,
}

/// Second pass over a whole document.
pub(super) struct DocumentSeed<'p> {
    pub(super) plans: &'p [Plan],
}

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = Vec<RawResource>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(DocumentVisitor { plans: self.plans })
    }
}

struct DocumentVisitor<'p> {
    plans: &'p [Plan],
}

impl<'de> Visitor<'de> for DocumentVisitor<'_> {
    type Value = Vec<RawResource>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource or a list of resources")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let Some(plan) = self.plans.first() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        ResourceVisitor {
            plan,
            out: &mut out,
        }
        .visit_map(map)?;
        Ok(out)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        for plan in self.plans {
            let found = seq.next_element_seed(ResourceSeed {
                plan,
                out: &mut out,
            })?;
            if found.is_none() {
                break;
            }
        }
        Ok(out)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
}

/// Second pass over one resource (or list), pushing what it decodes onto `out`.
struct ResourceSeed<'p, 'o> {
    plan: &'p Plan,
    out: &'o mut Vec<RawResource>,
}

impl<'de> DeserializeSeed<'de> for ResourceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(ResourceVisitor {
            plan: self.plan,
            out: self.out,
        })
    }
}

struct ResourceVisitor<'p, 'o> {
    plan: &'p Plan,
    out: &'o mut Vec<RawResource>,
}

const SINGLE_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
const LIST_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "items"];

impl<'de> Visitor<'de> for ResourceVisitor<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource: a mapping with `apiVersion`, `kind`, `metadata` and `spec`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some(kind) = self.plan.kind else {
            // Already reported in the first pass: skip the whole resource.
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut first_key: Option<Span> = None;
        let mut api_version = None;
        let mut kind_span = None;
        let mut metadata = None;
        let mut spec = None;
        let mut items_seen = false;
        let mut items_out = Vec::new();
        while let Some(key) = map.next_key::<Sp<String>>()? {
            first_key.get_or_insert(key.span);
            match key.value.as_str() {
                "apiVersion" => api_version = Some(map.next_value::<Sp<String>>()?),
                "kind" => kind_span = Some(map.next_value::<Sp<String>>()?.span),
                "metadata" => metadata = Some(map.next_value::<Sp<RawMetadata>>()?),
                "spec" if !kind.is_list() => spec = Some(next_spec(&mut map, kind)?),
                "items" if kind.is_list() => {
                    items_seen = true;
                    map.next_value_seed(ItemsSeed {
                        plans: &self.plan.items,
                        out: &mut items_out,
                    })?;
                }
                other => {
                    let expected = if kind.is_list() {
                        LIST_FIELDS
                    } else {
                        SINGLE_FIELDS
                    };
                    return Err(de::Error::unknown_field(other, expected));
                }
            }
        }
        let span = first_key.unwrap_or_default();
        if kind.is_list() {
            if !items_seen {
                return Err(de::Error::custom(format!(
                    "a `{kind}` needs `items`, the list of its resources"
                )));
            }
            // List metadata (resourceVersion) says nothing about the items.
            let _ = metadata;
            self.out.extend(items_out.into_iter().map(|mut item| {
                if item.api_version.is_none() {
                    item.api_version = api_version.clone();
                }
                item
            }));
            return Ok(());
        }
        self.out.push(RawResource {
            span,
            api_version,
            kind: Sp::new(kind, kind_span.unwrap_or(span)),
            metadata,
            spec,
            shift: 0,
        });
        Ok(())
    }
}

/// Decodes the value of `spec` as the spec of `kind` (a kind that is not a list).
fn next_spec<'de, A: MapAccess<'de>>(map: &mut A, kind: Kind) -> Result<Sp<RawSpec>, A::Error> {
    Ok(match kind {
        Kind::GlobalNetworkPolicy | Kind::StagedGlobalNetworkPolicy => {
            let spec = map.next_value::<Sp<RawPolicySpec>>()?;
            Sp::new(RawSpec::Policy(Box::new(spec.value)), spec.span)
        }
        Kind::GlobalNetworkSet => {
            let spec = map.next_value::<Sp<RawNetworkSetSpec>>()?;
            Sp::new(RawSpec::NetworkSet(spec.value), spec.span)
        }
        Kind::Tier => {
            let spec = map.next_value::<Sp<RawTierSpec>>()?;
            Sp::new(RawSpec::Tier(spec.value), spec.span)
        }
        _ => {
            let spec = map.next_value::<Sp<RawHostEndpointSpec>>()?;
            Sp::new(RawSpec::HostEndpoint(spec.value), spec.span)
        }
    })
}

/// The single pass over a document holding one resource: learns the kind when it meets `kind`
/// and decodes `spec` right away. Fails (and the caller falls back to the two passes) on
/// anything else: another shape, a list kind, an unknown kind, `spec` before `kind`, an
/// unknown field, any error. On success it yields what [`ResourceVisitor`] yields with the
/// plan of the first pass.
pub(super) struct SinglePassVisitor;

/// Why the single pass gave up; never shown (the two passes report the real problem).
fn two_passes<E: de::Error>() -> E {
    E::custom("needs two passes")
}

impl<'de> Visitor<'de> for SinglePassVisitor {
    type Value = RawResource;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource with `kind` before `spec`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawResource, A::Error> {
        let mut first_key: Option<Span> = None;
        let mut api_version = None;
        let mut kind: Option<Sp<Kind>> = None;
        let mut metadata = None;
        let mut spec = None;
        while let Some(key) = map.next_key::<Sp<String>>()? {
            first_key.get_or_insert(key.span);
            match key.value.as_str() {
                "apiVersion" => api_version = Some(map.next_value::<Sp<String>>()?),
                "kind" => {
                    let written = map.next_value::<Sp<String>>()?;
                    match Kind::parse(&written.value) {
                        Some(parsed) if !parsed.is_list() && kind.is_none() => {
                            kind = Some(Sp::new(parsed, written.span));
                        }
                        _ => return Err(two_passes()),
                    }
                }
                "metadata" => metadata = Some(map.next_value::<Sp<RawMetadata>>()?),
                "spec" => match &kind {
                    Some(kind) => spec = Some(next_spec(&mut map, kind.value)?),
                    None => return Err(two_passes()),
                },
                _ => return Err(two_passes()),
            }
        }
        let Some(kind) = kind else {
            return Err(two_passes());
        };
        Ok(RawResource {
            span: first_key.unwrap_or_default(),
            api_version,
            kind,
            metadata,
            spec,
            shift: 0,
        })
    }
}

struct ItemsSeed<'p, 'o> {
    plans: &'p [Plan],
    out: &'o mut Vec<RawResource>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of resources")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for plan in self.plans {
            let found = seq.next_element_seed(ResourceSeed {
                plan,
                out: &mut *self.out,
            })?;
            if found.is_none() {
                break;
            }
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}
