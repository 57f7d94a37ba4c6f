//! Reading other programs' DNAT rules for `exposure`, read-only: `iptables-legacy-save -t nat`
//! and `ip6tables-legacy-save -t nat` where x_tables has a nat table, `nft -j list ruleset`,
//! and `iptables-nft-save -t nat` (and ip6) where nf_tables has iptables-nft's nat table.
//!
//! Nothing is read that does not exist: asking iptables-legacy for a table it does not hold
//! would load and create it, a change in the kernel; so x_tables' list of tables is looked at
//! first, and iptables-nft's tables are found in nft's listing.

use super::Runner;
use crate::model::IpFamily;

/// What the kernel's nat rules look like, as the programs print them.
#[derive(Clone, Debug, Default)]
pub struct NatListings {
    /// `iptables-save -t nat` outputs, with their family.
    pub iptables: Vec<(IpFamily, String)>,
    /// `nft -j list ruleset`, when nft is installed and answered.
    pub nft_json: Option<String>,
    /// What could not be read, in words.
    pub notes: Vec<String>,
}

/// Reads every nat table of this network namespace through `runner`.
pub fn read(runner: &dyn Runner) -> NatListings {
    let mut listings = NatListings::default();
    for family in IpFamily::BOTH {
        let names = std::fs::read_to_string(super::xtables::names_file(family)).unwrap_or_default();
        if names.lines().any(|name| name == "nat") {
            let program = match family {
                IpFamily::V4 => "iptables-legacy-save",
                IpFamily::V6 => "ip6tables-legacy-save",
            };
            save(runner, program, family, &mut listings);
        }
    }
    let nft_tables = if runner.exists("nft") {
        match runner.run("nft", &["-j", "list", "ruleset"], None) {
            Ok(output) if output.success => {
                let tables = iptables_nft_nat_tables(&output.stdout);
                listings.nft_json = Some(output.stdout);
                tables
            }
            Ok(output) => {
                listings.notes.push(format!(
                    "`nft -j list ruleset` failed: {}",
                    output.stderr.trim()
                ));
                Vec::new()
            }
            Err(error) => {
                listings.notes.push(format!("cannot run `nft`: {error}"));
                Vec::new()
            }
        }
    } else {
        listings.notes.push(
            "`nft` is not installed: nftables tables and iptables-nft rules were not read".into(),
        );
        Vec::new()
    };
    for family in nft_tables {
        let program = match family {
            IpFamily::V4 => "iptables-nft-save",
            IpFamily::V6 => "ip6tables-nft-save",
        };
        save(runner, program, family, &mut listings);
    }
    listings
}

fn save(runner: &dyn Runner, program: &str, family: IpFamily, listings: &mut NatListings) {
    if !runner.exists(program) {
        listings.notes.push(format!(
            "`{program}` is not installed: its nat table was not read"
        ));
        return;
    }
    match runner.run(program, &["-t", "nat"], None) {
        Ok(output) if output.success => listings.iptables.push((family, output.stdout)),
        Ok(output) => listings.notes.push(format!(
            "`{program} -t nat` failed: {}",
            output.stderr.trim()
        )),
        Err(error) => listings
            .notes
            .push(format!("cannot run `{program}`: {error}")),
    }
}

/// The families whose iptables-nft nat table (`ip nat`, `ip6 nat`) nft's JSON listing shows.
fn iptables_nft_nat_tables(json: &str) -> Vec<IpFamily> {
    let Ok(document) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let objects = document
        .get("nftables")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut families = Vec::new();
    for object in &objects {
        let Some(table) = object.get("table") else {
            continue;
        };
        let field = |name: &str| table.get(name).and_then(serde_json::Value::as_str);
        let family = match (field("family"), field("name")) {
            (Some("ip"), Some("nat")) => IpFamily::V4,
            (Some("ip6"), Some("nat")) => IpFamily::V6,
            _ => continue,
        };
        if !families.contains(&family) {
            families.push(family);
        }
    }
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_nft_nat_tables_are_found_in_the_listing() {
        let json = r#"{"nftables": [{"metainfo": {}},
            {"table": {"family": "ip", "name": "nat"}},
            {"table": {"family": "ip6", "name": "filter"}},
            {"table": {"family": "ip", "name": "kube-proxy"}},
            {"table": {"family": "ip6", "name": "nat"}}]}"#;
        assert_eq!(iptables_nft_nat_tables(json), [IpFamily::V4, IpFamily::V6]);
        assert!(iptables_nft_nat_tables("not json").is_empty());
    }
}
