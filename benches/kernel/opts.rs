//! Command-line options: which scenarios, which backends, how many runs.

use crate::support::Backend as LabBackend;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bk {
    Legacy,
    Nft,
    Nftables,
}

impl Bk {
    pub(crate) const ALL: [Bk; 3] = [Bk::Legacy, Bk::Nft, Bk::Nftables];

    pub(crate) fn arg(self) -> &'static str {
        match self {
            Bk::Legacy => "iptables-legacy",
            Bk::Nft => "iptables-nft",
            Bk::Nftables => "nftables",
        }
    }

    pub(crate) fn lab(self) -> LabBackend {
        match self {
            Bk::Legacy => LabBackend::Legacy,
            Bk::Nft | Bk::Nftables => LabBackend::Nft,
        }
    }

    pub(crate) fn iptables(self) -> bool {
        self != Bk::Nftables
    }

    /// `iptables`, `ip6tables` of this flavour, plus the suffix of save/restore.
    pub(crate) fn tool(self, v6: bool, what: &str) -> String {
        let flavour = if self == Bk::Legacy { "legacy" } else { "nft" };
        let base = if v6 { "ip6tables" } else { "iptables" };
        if what.is_empty() {
            format!("{base}-{flavour}")
        } else {
            format!("{base}-{flavour}-{what}")
        }
    }
}

#[derive(Debug)]
pub(crate) struct Opts {
    pub(crate) scenarios: Vec<String>,
    pub(crate) quick: bool,
    pub(crate) backends: Vec<Bk>,
    pub(crate) policies: usize,
    pub(crate) runs: Option<usize>,
    /// Shell scripts that each set up one more way to drop the `flood` scenario's SYNs in the
    /// node's namespace, measured beside the others (to weigh what a rule's parts cost).
    pub(crate) flood_scripts: Vec<String>,
}

pub(crate) const SCENARIOS: [&str; 8] = [
    "plan",
    "apply",
    "loop",
    "incremental",
    "reload",
    "packet",
    "flood",
    "idle",
];

pub(crate) const USAGE: &str =
    "usage: cargo bench --bench kernel -- [SCENARIO…] [--quick] [--runs N] \
[--policies N] [--backend iptables-legacy,iptables-nft,nftables] [--flood-script FILE]…
scenarios: plan apply loop incremental reload packet flood idle (default: all)";

pub(crate) fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut opts = Opts {
        scenarios: Vec::new(),
        quick: false,
        backends: Bk::ALL.to_vec(),
        policies: 1_000,
        runs: None,
        flood_scripts: Vec::new(),
    };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--bench" => {}
            "--quick" => opts.quick = true,
            "--runs" => {
                opts.runs = Some(
                    iter.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--runs needs a number")?,
                );
            }
            "--flood-script" => {
                let path = iter.next().ok_or("--flood-script needs a file")?;
                opts.flood_scripts.push(path.clone());
            }
            "--policies" => {
                opts.policies = iter
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--policies needs a number")?;
            }
            "--backend" => {
                let list = iter.next().ok_or("--backend needs a value")?;
                opts.backends = list
                    .split(',')
                    .map(|name| {
                        Bk::ALL
                            .into_iter()
                            .find(|bk| bk.arg() == name || bk.arg().ends_with(name))
                            .ok_or(format!("unknown backend `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            "all" => opts
                .scenarios
                .extend(SCENARIOS.iter().map(|s| (*s).to_owned())),
            name if SCENARIOS.contains(&name) => opts.scenarios.push(name.to_owned()),
            // Filters cargo or criterion may pass along.
            other if other.starts_with('-') => {}
            other => return Err(format!("unknown scenario `{other}`\n{USAGE}")),
        }
    }
    if opts.scenarios.is_empty() {
        opts.scenarios = SCENARIOS.iter().map(|s| (*s).to_owned()).collect();
    }
    Ok(opts)
}

impl Opts {
    pub(crate) fn runs(&self, normal: usize, quick: usize) -> usize {
        self.runs.unwrap_or(if self.quick { quick } else { normal })
    }
}
