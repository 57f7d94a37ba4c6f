//! Rendering a [`Ruleset`] into each backend's load syntax. Deterministic: the same ruleset
//! always renders to the same bytes.

pub mod ipset;
pub mod iptables;
pub mod nft;

use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::ruleset::Ruleset;

/// The whole desired state as `ipset restore` and `iptables-restore` text, in the order it
/// would be loaded, with `#` headers saying what each part is for.
pub fn render_iptables(ruleset: &Ruleset) -> String {
    let mut out = String::new();
    let sets: Vec<_> = ruleset
        .families
        .iter()
        .flat_map(|family| family.sets.iter().cloned())
        .collect();
    if !sets.is_empty() {
        out.push_str("# ipset restore\n");
        out.push_str(&ipset::render_sets(&sets));
    }
    for family in &ruleset.families {
        for table in &family.tables {
            let tool = match family.family {
                IpFamily::V4 => "iptables-restore",
                IpFamily::V6 => "ip6tables-restore",
            };
            let _ = writeln!(
                out,
                "# {tool} --noflush ({}, table {})",
                family.family, table.table
            );
            out.push_str(&iptables::render_table(table, family.family));
        }
    }
    if out.is_empty() {
        out.push_str("# no policy applies to this host: nothing to load\n");
    }
    out
}
