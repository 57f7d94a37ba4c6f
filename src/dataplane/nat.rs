//! Reading other programs' DNAT rules for `exposure`, read-only: `iptables-legacy-save -t nat`
//! and `ip6tables-legacy-save -t nat` where x_tables has a nat table, `nft -j list table` of
//! every nftables table of other programs, and `iptables-nft-save -t nat` (and ip6) where
//! nf_tables has iptables-nft's nat table.
//!
//! Nothing is read that does not exist: asking iptables-legacy for a table it does not hold
//! would load and create it, a change in the kernel; so x_tables' list of tables is looked at
//! first, and iptables-nft's tables are found in the list of nf_tables tables
//! ([`super::nft_tables`]).

use super::Runner;
use crate::model::IpFamily;

/// What the kernel's nat rules look like, as the programs print them.
#[derive(Clone, Debug, Default)]
pub struct NatListings {
    /// `iptables-save -t nat` outputs, with their family.
    pub iptables: Vec<(IpFamily, String)>,
    /// `nft -j list table FAMILY NAME` of each nftables table neither ours nor iptables-nft's.
    pub nft_json: Vec<String>,
    /// What could not be read, in words.
    pub notes: Vec<String>,
}

/// Reads every nat table of this network namespace through `runner`.
pub fn read(runner: &dyn super::Host) -> NatListings {
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
        // The table names first, then only the tables of other programs: listing the whole
        // ruleset would list ours and iptables-nft's too (tens of MB of JSON with 1,000
        // policies, hundreds of MB once parsed), none of which this reads.
        match super::nft_tables::listing(runner, runner) {
            Ok(output) if output.success => {
                let tables = table_names(&output.stdout);
                let foreign = foreign_tables(&tables);
                if foreign.len() > TABLES_LISTED_ONE_BY_ONE {
                    // Another program made many tables: one listing of them all costs less.
                    list_json(runner, &["-j", "list", "ruleset"], &mut listings);
                } else {
                    for (family, name) in foreign {
                        list_json(
                            runner,
                            &["-j", "list", "table", family, name],
                            &mut listings,
                        );
                    }
                }
                iptables_nft_nat_tables(&tables)
            }
            Ok(output) => {
                listings.notes.push(format!(
                    "`nft list tables` failed: {}",
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

/// How many tables of other programs are listed one by one; more are read with one listing
/// of the whole ruleset.
const TABLES_LISTED_ONE_BY_ONE: usize = 32;

/// The tables of `tables` that are neither iptables-nft's nor ours: the nftables tables of
/// other programs, where their DNAT rules are.
fn foreign_tables(tables: &[(String, String)]) -> Vec<(&str, &str)> {
    tables
        .iter()
        .filter(|(family, name)| {
            !is_iptables_nft_table(family, name) && name != super::nftables::render::TABLE
        })
        .map(|(family, name)| (family.as_str(), name.as_str()))
        .collect()
}

/// Runs `nft ARGS` (a JSON listing) and keeps its output, or a note of why there is none.
fn list_json(runner: &dyn Runner, args: &[&str], listings: &mut NatListings) {
    match runner.run("nft", args, None) {
        Ok(listed) if listed.success => listings.nft_json.push(listed.stdout),
        // A table removed since it was named is no table to read.
        Ok(listed) if listed.stderr.contains("No such file or directory") => {}
        Ok(listed) => listings.notes.push(format!(
            "`nft {}` failed: {}",
            args.join(" "),
            listed.stderr.trim()
        )),
        Err(error) => listings.notes.push(format!("cannot run `nft`: {error}")),
    }
}

/// Whether a table of nf_tables is one iptables-nft keeps (read through `iptables-nft-save`,
/// not as nftables).
pub fn is_iptables_nft_table(family: &str, name: &str) -> bool {
    matches!(family, "ip" | "ip6")
        && matches!(name, "nat" | "filter" | "mangle" | "raw" | "security")
}

/// The (family, name) of every table `nft list tables` printed.
fn table_names(listing: &str) -> Vec<(String, String)> {
    listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("table"), Some(family), Some(name)) => {
                    Some((family.to_owned(), name.to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

/// The families whose iptables-nft nat table (`ip nat`, `ip6 nat`) is among `tables`.
fn iptables_nft_nat_tables(tables: &[(String, String)]) -> Vec<IpFamily> {
    let mut families = Vec::new();
    for (family, name) in tables {
        let family = match (family.as_str(), name.as_str()) {
            ("ip", "nat") => IpFamily::V4,
            ("ip6", "nat") => IpFamily::V6,
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
        let tables = table_names(
            "table ip nat\ntable ip6 filter\ntable ip kube-proxy\ntable ip6 nat\nnot a table\n",
        );
        assert_eq!(tables.len(), 4);
        assert_eq!(
            iptables_nft_nat_tables(&tables),
            [IpFamily::V4, IpFamily::V6]
        );
        assert!(is_iptables_nft_table("ip", "mangle"));
        assert!(!is_iptables_nft_table("inet", "nat"));
        assert!(!is_iptables_nft_table("ip", "kube-proxy"));
    }

    /// A runner that answers `nft list tables` with iptables-nft's nat table, ours, and
    /// `tables` tables of other programs, prints nothing for anything else, and records every
    /// program it is asked to run.
    struct ManyTables {
        tables: usize,
        ran: std::sync::Mutex<Vec<String>>,
    }

    impl Runner for ManyTables {
        fn run(
            &self,
            program: &str,
            args: &[&str],
            _stdin: Option<&[u8]>,
        ) -> std::io::Result<super::super::Output> {
            let call = format!("{program} {}", args.join(" "));
            self.ran.lock().expect("lock").push(call.clone());
            let stdout = if call == "nft list tables" {
                let mut listing = "table ip nat\ntable ip nodeport_guard\n".to_owned();
                for n in 0..self.tables {
                    listing.push_str(&format!("table inet other{n}\n"));
                }
                listing
            } else {
                r#"{"nftables": []}"#.to_owned()
            };
            Ok(super::super::Output {
                success: true,
                code: Some(0),
                stdout,
                stderr: String::new(),
            })
        }

        fn exists(&self, _program: &str) -> bool {
            true
        }
    }

    /// It reads nothing of the kernel: the table names come from `nft list tables`.
    impl crate::dataplane::Kernel for ManyTables {}

    fn nft_listings(tables: usize) -> Vec<String> {
        let runner = ManyTables {
            tables,
            ran: Default::default(),
        };
        let listings = read(&runner);
        assert!(listings.notes.is_empty(), "{:?}", listings.notes);
        let ran = runner.ran.into_inner().expect("lock");
        ran.into_iter()
            .filter(|call| call.starts_with("nft -j"))
            .collect()
    }

    #[test]
    fn a_program_that_makes_many_tables_costs_one_listing() {
        // A few tables: each read alone, never ours or iptables-nft's.
        let few = nft_listings(3);
        assert_eq!(
            few,
            [
                "nft -j list table inet other0",
                "nft -j list table inet other1",
                "nft -j list table inet other2"
            ]
        );
        // Many (another program, or a hostile one, made them): one listing of them all.
        assert_eq!(nft_listings(TABLES_LISTED_ONE_BY_ONE), {
            (0..TABLES_LISTED_ONE_BY_ONE)
                .map(|n| format!("nft -j list table inet other{n}"))
                .collect::<Vec<_>>()
        });
        assert_eq!(
            nft_listings(10_000),
            ["nft -j list ruleset"],
            "one run of nft, not ten thousand"
        );
    }

    #[test]
    fn only_other_programs_tables_are_listed() {
        let tables = table_names(
            "table ip nat\ntable ip mangle\ntable ip nodeport_guard\ntable ip6 nodeport_guard\n\
             table ip kube-proxy\ntable inet firewalld\ntable ip6 raw\n",
        );
        assert_eq!(
            foreign_tables(&tables),
            [("ip", "kube-proxy"), ("inet", "firewalld")]
        );
    }
}
