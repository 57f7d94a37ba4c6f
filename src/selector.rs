//! Placeholder until the selector module lands.
#![allow(missing_docs)]
use std::collections::{BTreeMap, BTreeSet};
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector(String);
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
    pub help: Option<String>,
}
impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        Ok(Selector(text.to_owned()))
    }
    pub fn all() -> Selector {
        Selector(String::new())
    }
    pub fn is_all(&self) -> bool {
        self.0.is_empty() || self.0 == "all()"
    }
    pub fn matches(&self, _labels: &BTreeMap<String, String>) -> bool {
        true
    }
    pub fn label_keys(&self) -> BTreeSet<&str> {
        BTreeSet::new()
    }
}
impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "all()" } else { &self.0 })
    }
}
