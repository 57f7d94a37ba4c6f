//! The lenient first pass of the two: learns the `kind` of every resource of a document (and
//! of every item of a list) and nothing else.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::spec::Sp;

/// What the first pass learns about a resource: its kind and, for lists, its items' kinds.
#[derive(Debug, Deserialize)]
pub(super) struct PeekResource {
    pub(super) kind: Option<Sp<String>>,
    #[serde(default)]
    pub(super) items: Option<Vec<PeekItem>>,
}

/// A list item of the first pass: a resource, or anything else (reported in the second pass).
#[derive(Debug)]
pub(super) enum PeekItem {
    Resource(PeekResource),
    NotAMapping,
}

impl<'de> Deserialize<'de> for PeekItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemVisitor;
        impl<'de> Visitor<'de> for ItemVisitor {
            type Value = PeekItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PeekItem, A::Error> {
                PeekResource::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PeekItem::Resource)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PeekItem, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(PeekItem::NotAMapping)
            }
            fn visit_bool<E>(self, _: bool) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_i64<E>(self, _: i64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_u64<E>(self, _: u64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_f64<E>(self, _: f64) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_str<E>(self, _: &str) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_unit<E>(self) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
            fn visit_none<E>(self) -> Result<PeekItem, E> {
                Ok(PeekItem::NotAMapping)
            }
        }
        deserializer.deserialize_any(ItemVisitor)
    }
}

/// The first pass's view of a whole document.
#[derive(Debug)]
pub(super) enum PeekDocument {
    Empty,
    Resource(PeekResource),
    Sequence(Vec<PeekItem>),
    Scalar,
}

impl<'de> Deserialize<'de> for PeekDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocumentVisitor;
        impl<'de> Visitor<'de> for DocumentVisitor {
            type Value = PeekDocument;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource or a list of resources")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PeekDocument, A::Error> {
                PeekResource::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PeekDocument::Resource)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PeekDocument, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<PeekItem>()? {
                    items.push(item);
                }
                Ok(PeekDocument::Sequence(items))
            }
            fn visit_unit<E>(self) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Empty)
            }
            fn visit_none<E>(self) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Empty)
            }
            fn visit_bool<E>(self, _: bool) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<PeekDocument, E> {
                Ok(PeekDocument::Scalar)
            }
        }
        deserializer.deserialize_any(DocumentVisitor)
    }
}
