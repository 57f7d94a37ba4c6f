//! The compiler: a validated [`Model`], the config and the host's facts in, a [`Ruleset`] out.
//!
//! Architecture invariant: compiling never touches the kernel or the file system; it is a pure
//! function, so `render`, `plan` and the daemon all see exactly the same rules for the same
//! input, and the tests check it without root.
//!
//! The chains follow Felix's shapes with the `npg` prefix. For one family the packet path is:
//!
//! ```text
//! raw      PREROUTING → npg-PREROUTING → npg-from-host-endpoint → npg-fh-<if>   (doNotTrack)
//! mangle   PREROUTING → npg-PREROUTING → npg-from-host-endpoint → npg-fh-<if>   (preDNAT)
//! filter   INPUT      → npg-INPUT      → npg-from-host-endpoint → npg-fh-<if>   (normal)
//!          FORWARD    → npg-FORWARD    → npg-from/to-hep-forward → npg-fhfw/thfw-<if>
//!          OUTPUT     → npg-OUTPUT     → npg-to-host-endpoint    → npg-th-<if>
//! raw      OUTPUT     → npg-OUTPUT     → npg-to-host-endpoint    → npg-th-<if>  (doNotTrack)
//! ```
//!
//! An endpoint chain runs the failsafe chain, clears the accept and pass bits, then jumps to
//! each policy's chain (`npg-pi-…`/`npg-po-…`) while the pass bit is clear, returning as soon
//! as a policy set the accept bit. Normal chains end with the default deny Calico applies.
//! Our chains never ACCEPT: an allowed packet returns to the kernel chain, where docker's,
//! kube-proxy's and the operator's own rules still apply. nodeport-guard only ever takes
//! reachability away.

pub mod names;
pub mod rules;
pub mod sets;

use std::collections::BTreeMap;

use crate::config::{Config, Failsafe};
use crate::diagnostic::Diagnostic;
use crate::facts::HostFacts;
use crate::marks::MarkBits;
use crate::model::{
    self, Direction, EndpointInterface, HostEndpoint, IpFamily, Model, Policy, PolicyKind,
};
use crate::ruleset::{
    Action, Chain, CtState, FamilyRuleset, Hook, Match, PortRange, Rule, Ruleset, SetLookup, Side,
    Table, TableRuleset,
};
use names::EndpointChainKind;
use rules::{RuleContext, clear_bits, mark_clear, mark_set, set_bit};
use sets::SetRegistry;

/// Most policies one chain jumps to; longer lists are split into batch chains so no chain grows
/// past a few hundred rules.
pub const POLICIES_PER_CHAIN: usize = 100;

/// The label Calico puts on every node's host endpoint.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The result of compiling.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The rules and sets to program.
    pub ruleset: Ruleset,
    /// Things the operator should know before applying, in words.
    pub warnings: Vec<Diagnostic>,
}

/// The host endpoints enforced on this host: the explicit ones whose `node` is this host, or
/// the implicit `*` endpoint when there are none.
pub fn endpoints_of_host(model: &Model, config: &Config, host: &HostFacts) -> Vec<HostEndpoint> {
    let explicit: Vec<HostEndpoint> = model
        .host_endpoints
        .iter()
        .filter(|endpoint| endpoint.node == host.node_name)
        .cloned()
        .collect();
    if !explicit.is_empty() {
        return explicit;
    }
    let mut labels = model::Labels::new();
    labels.insert(HOSTNAME_LABEL.to_owned(), host.node_name.clone());
    labels.insert("kubernetes.io/os".to_owned(), "linux".to_owned());
    labels.extend(config.host_labels.clone());
    vec![HostEndpoint {
        name: format!("{}-implicit", host.node_name),
        labels,
        node: host.node_name.clone(),
        interface: EndpointInterface::All,
        expected_ips: Vec::new(),
        ports: Vec::new(),
        default_allow: true,
        origin: None,
    }]
}

/// One endpoint bound to the interface(s) it stands for, with the policies that apply to it.
#[derive(Debug)]
struct Binding<'m> {
    /// The interface; `None` is every interface without an endpoint of its own.
    interface: Option<String>,
    endpoint: HostEndpoint,
    untracked_in: Vec<&'m Policy>,
    untracked_out: Vec<&'m Policy>,
    pre_dnat_in: Vec<&'m Policy>,
    normal_in: Vec<&'m Policy>,
    normal_out: Vec<&'m Policy>,
    forward_in: Vec<&'m Policy>,
    forward_out: Vec<&'m Policy>,
}

impl Binding<'_> {
    fn describe(&self) -> String {
        let which = match &self.endpoint.origin {
            None => "the implicit host endpoint".to_owned(),
            Some(_) => format!("host endpoint `{}`", self.endpoint.name),
        };
        match &self.interface {
            None => format!("{which} (all interfaces)"),
            Some(interface) => format!("{which} (interface `{interface}`)"),
        }
    }
}

/// Whether an interface name can be written into kernel input as it is.
fn is_safe_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn bind<'m>(
    model: &'m Model,
    endpoints: Vec<HostEndpoint>,
    host: &HostFacts,
    warnings: &mut Vec<Diagnostic>,
) -> Vec<Binding<'m>> {
    // Which endpoint stands for which interface: a named endpoint wins for its interface, one
    // found by address comes next, and the `*` endpoint covers the rest. Ties go to the
    // alphabetically first endpoint, as in Felix.
    let mut by_interface: BTreeMap<String, HostEndpoint> = BTreeMap::new();
    let mut wildcard: Option<HostEndpoint> = None;
    let mut by_address: Vec<HostEndpoint> = Vec::new();
    for endpoint in endpoints {
        match &endpoint.interface {
            EndpointInterface::Named(name) => {
                if !host.interfaces.is_empty() && !host.interfaces.iter().any(|i| &i.name == name) {
                    warnings.push(endpoint_warning(
                        &endpoint,
                        format!(
                            "host endpoint `{}` names interface `{name}`, which this host does not have (yet); its rules wait for it",
                            endpoint.name
                        ),
                    ));
                }
                if let Some(existing) = by_interface.get(name) {
                    warnings.push(endpoint_warning(
                        &endpoint,
                        format!(
                            "host endpoints `{}` and `{}` both name interface `{name}`; `{}` is used",
                            existing.name, endpoint.name, existing.name
                        ),
                    ));
                    continue;
                }
                by_interface.insert(name.clone(), endpoint);
            }
            EndpointInterface::All => match &wildcard {
                Some(existing) => warnings.push(endpoint_warning(
                    &endpoint,
                    format!(
                        "host endpoints `{}` and `{}` both use `interfaceName: \"*\"`; `{}` is used",
                        existing.name, endpoint.name, existing.name
                    ),
                )),
                None => wildcard = Some(endpoint),
            },
            EndpointInterface::ByAddress => by_address.push(endpoint),
        }
    }
    for endpoint in by_address {
        let interfaces: Vec<&str> = host
            .interfaces
            .iter()
            .filter(|interface| {
                interface
                    .addresses
                    .iter()
                    .any(|address| endpoint.expected_ips.contains(address))
            })
            .map(|interface| interface.name.as_str())
            .collect();
        if interfaces.is_empty() {
            warnings.push(endpoint_warning(
                &endpoint,
                format!(
                    "host endpoint `{}` has no `interfaceName` and none of its `expectedIPs` is on an interface of this host; it is not enforced",
                    endpoint.name
                ),
            ));
        }
        for interface in interfaces {
            by_interface
                .entry(interface.to_owned())
                .or_insert_with(|| endpoint.clone());
        }
    }

    let mut bindings: Vec<Binding<'m>> = Vec::new();
    for (interface, endpoint) in by_interface {
        if !is_safe_interface_name(&interface) {
            warnings.push(endpoint_warning(
                &endpoint,
                format!("interface `{}` has a name nodeport-guard cannot write into rules; it is skipped", interface.escape_debug()),
            ));
            continue;
        }
        bindings.push(new_binding(model, Some(interface), endpoint));
    }
    if let Some(endpoint) = wildcard {
        bindings.push(new_binding(model, None, endpoint));
    }
    bindings
}

fn new_binding(model: &Model, interface: Option<String>, endpoint: HostEndpoint) -> Binding<'_> {
    let mut binding = Binding {
        interface,
        endpoint,
        untracked_in: Vec::new(),
        untracked_out: Vec::new(),
        pre_dnat_in: Vec::new(),
        normal_in: Vec::new(),
        normal_out: Vec::new(),
        forward_in: Vec::new(),
        forward_out: Vec::new(),
    };
    for policy in &model.policies {
        if !policy.selector.matches(&binding.endpoint.labels) {
            continue;
        }
        let ingress = policy.ingress.is_some();
        let egress = policy.egress.is_some();
        match policy.kind {
            PolicyKind::Untracked => {
                if ingress {
                    binding.untracked_in.push(policy);
                }
                if egress {
                    binding.untracked_out.push(policy);
                }
            }
            PolicyKind::PreDnat => {
                if ingress {
                    binding.pre_dnat_in.push(policy);
                }
            }
            PolicyKind::Normal => {
                if ingress {
                    binding.normal_in.push(policy);
                    if policy.apply_on_forward {
                        binding.forward_in.push(policy);
                    }
                }
                if egress {
                    binding.normal_out.push(policy);
                    if policy.apply_on_forward {
                        binding.forward_out.push(policy);
                    }
                }
            }
        }
    }
    binding
}

fn endpoint_warning(endpoint: &HostEndpoint, message: String) -> Diagnostic {
    match endpoint.origin {
        Some(origin) => Diagnostic::warning(origin.file, origin.span, message),
        None => Diagnostic::global_warning(message),
    }
}

/// The kinds of traffic an endpoint chain judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    UntrackedIn,
    UntrackedOut,
    PreDnatIn,
    NormalIn,
    NormalOut,
    ForwardIn,
    ForwardOut,
}

impl Path {
    fn table(self) -> Table {
        match self {
            Path::UntrackedIn | Path::UntrackedOut => Table::Raw,
            Path::PreDnatIn => Table::Mangle,
            _ => Table::Filter,
        }
    }

    fn direction(self) -> Direction {
        match self {
            Path::UntrackedIn | Path::PreDnatIn | Path::NormalIn | Path::ForwardIn => {
                Direction::Ingress
            }
            Path::UntrackedOut | Path::NormalOut | Path::ForwardOut => Direction::Egress,
        }
    }

    fn chain_kind(self) -> EndpointChainKind {
        match self {
            Path::UntrackedIn | Path::PreDnatIn | Path::NormalIn => EndpointChainKind::FromHost,
            Path::UntrackedOut | Path::NormalOut => EndpointChainKind::ToHost,
            Path::ForwardIn => EndpointChainKind::FromHostForward,
            Path::ForwardOut => EndpointChainKind::ToHostForward,
        }
    }

    fn dispatch_chain(self) -> &'static str {
        match self.chain_kind() {
            EndpointChainKind::FromHost => "npg-from-host-endpoint",
            EndpointChainKind::ToHost => "npg-to-host-endpoint",
            EndpointChainKind::FromHostForward => "npg-from-hep-forward",
            EndpointChainKind::ToHostForward => "npg-to-hep-forward",
        }
    }

    fn policies<'b, 'm>(self, binding: &'b Binding<'m>) -> &'b [&'m Policy] {
        match self {
            Path::UntrackedIn => &binding.untracked_in,
            Path::UntrackedOut => &binding.untracked_out,
            Path::PreDnatIn => &binding.pre_dnat_in,
            Path::NormalIn => &binding.normal_in,
            Path::NormalOut => &binding.normal_out,
            Path::ForwardIn => &binding.forward_in,
            Path::ForwardOut => &binding.forward_out,
        }
    }

    /// Whether this endpoint needs a chain on this path: policies apply, or (for the host's
    /// own traffic) the endpoint has no allow-all profile, so Calico's default deny applies
    /// even without policy.
    fn needed(self, binding: &Binding<'_>) -> bool {
        !self.policies(binding).is_empty()
            || (matches!(self, Path::NormalIn | Path::NormalOut) && !binding.endpoint.default_allow)
    }

    const ALL: [Path; 7] = [
        Path::UntrackedIn,
        Path::UntrackedOut,
        Path::PreDnatIn,
        Path::NormalIn,
        Path::NormalOut,
        Path::ForwardIn,
        Path::ForwardOut,
    ];
}

/// The chains of one table being built.
#[derive(Default)]
struct TableBuilder {
    hooks: Vec<Hook>,
    chains: BTreeMap<String, Chain>,
}

impl TableBuilder {
    fn add(&mut self, chain: Chain) {
        self.chains.entry(chain.name.clone()).or_insert(chain);
    }

    fn has(&self, name: &str) -> bool {
        self.chains.contains_key(name)
    }
}

struct Compiler<'a> {
    config: &'a Config,
    host: &'a HostFacts,
    marks: MarkBits,
}

/// Compiles the model for this host.
///
/// `config.mark_mask` must have five bits (the config loader refuses other masks); a config
/// built in code with fewer falls back to the default mask's bits.
pub fn compile(model: &Model, config: &Config, host: &HostFacts) -> Compiled {
    let marks = MarkBits::from_mask(config.mark_mask).unwrap_or(DEFAULT_MARKS);
    let compiler = Compiler {
        config,
        host,
        marks,
    };
    let mut warnings = Vec::new();
    let endpoints = endpoints_of_host(model, config, host);
    let bindings = bind(model, endpoints, host, &mut warnings);
    policy_warnings(model, &bindings, host, &mut warnings);
    default_deny_warnings(&bindings, config, &mut warnings);

    let mut families = Vec::new();
    for family in host.families() {
        let mut sets = SetRegistry::new(family, model);
        let tables = compiler.compile_family(family, &bindings, &mut sets);
        for selector in &sets.empty_selectors {
            warnings.push(Diagnostic::global_warning(format!(
                "rule selector `{selector}` matches no GlobalNetworkSet and no HostEndpoint ({family}): rules using it match nothing"
            )));
        }
        for port in &sets.unknown_named_ports {
            warnings.push(Diagnostic::global_warning(format!(
                "named port `{port}` is defined by no HostEndpoint: rules using it match nothing"
            )));
        }
        families.push(FamilyRuleset {
            family,
            tables,
            sets: sets.into_sets(),
        });
    }
    if !host.ipv6 {
        let reason = host
            .ipv6_off_reason
            .clone()
            .unwrap_or_else(|| "IPv6 is turned off".to_owned());
        warnings.push(Diagnostic::global_warning(format!(
            "IPv6 rules are skipped: {reason}"
        )));
    }
    dedup_warnings(&mut warnings);
    Compiled {
        ruleset: Ruleset { marks, families },
        warnings,
    }
}

/// The bits of the default mask `0xffff0000`.
const DEFAULT_MARKS: MarkBits = MarkBits {
    accept: 0x1_0000,
    pass: 0x2_0000,
    drop: 0x4_0000,
    scratch0: 0x8_0000,
    scratch1: 0x10_0000,
};

fn dedup_warnings(warnings: &mut Vec<Diagnostic>) {
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|warning| seen.insert((warning.file, warning.span, warning.message.clone())));
}

fn policy_warnings(
    model: &Model,
    bindings: &[Binding<'_>],
    host: &HostFacts,
    warnings: &mut Vec<Diagnostic>,
) {
    let used: std::collections::HashSet<&str> = bindings
        .iter()
        .flat_map(|binding| {
            Path::ALL
                .iter()
                .flat_map(move |path| path.policies(binding))
        })
        .map(|policy| policy.name.as_str())
        .collect();
    for policy in &model.policies {
        if !used.contains(policy.name.as_str()) {
            warnings.push(Diagnostic::warning(
                policy.origin.file,
                policy.origin.span,
                format!(
                    "policy `{}` selects no host endpoint of node `{}`: it has no effect here",
                    policy.name, host.node_name
                ),
            ));
        }
    }
}

fn default_deny_warnings(
    bindings: &[Binding<'_>],
    config: &Config,
    warnings: &mut Vec<Diagnostic>,
) {
    let failsafe_words = |list: &[Failsafe]| {
        if list.is_empty() {
            "no failsafe port stays open".to_owned()
        } else {
            format!(
                "failsafe ports stay open: {}",
                list.iter()
                    .map(|f| format!("{}/{}", f.protocol.to_string().to_lowercase(), f.port))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };
    for binding in bindings {
        for (path, words, failsafes) in [
            (
                Path::NormalIn,
                "arriving at this host",
                &config.failsafe_inbound,
            ),
            (
                Path::NormalOut,
                "sent by this host",
                &config.failsafe_outbound,
            ),
        ] {
            let policies = path.policies(binding);
            if !policies.is_empty() {
                warnings.push(endpoint_warning(
                    &binding.endpoint,
                    format!(
                        "{} is default-deny for {} traffic: traffic {words} that no policy allows is dropped ({}); selected by {}",
                        binding.describe(),
                        path.direction(),
                        failsafe_words(failsafes),
                        policies.iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ")
                    ),
                ));
            } else if !binding.endpoint.default_allow {
                warnings.push(endpoint_warning(
                    &binding.endpoint,
                    format!(
                        "{} has no profile and no normal {} policy: all traffic {words} is dropped ({}); add a policy that allows what it needs, or `profiles: [projectcalico-default-allow]`",
                        binding.describe(),
                        path.direction(),
                        failsafe_words(failsafes)
                    ),
                ));
            }
        }
    }
}

impl Compiler<'_> {
    fn compile_family(
        &self,
        family: IpFamily,
        bindings: &[Binding<'_>],
        sets: &mut SetRegistry<'_>,
    ) -> Vec<TableRuleset> {
        let mut builders: BTreeMap<Table, TableBuilder> = BTreeMap::new();
        let needs = |path: Path| bindings.iter().any(|binding| path.needed(binding));
        let raw_in = needs(Path::UntrackedIn);
        let raw_out = needs(Path::UntrackedOut);
        let mangle_in = needs(Path::PreDnatIn);
        let own_addresses = self.host.own_addresses(&self.config.host_interface_exclude);

        for path in Path::ALL {
            if !needs(path) {
                continue;
            }
            let builder = builders.entry(path.table()).or_default();
            self.build_path(family, path, bindings, builder, sets);
        }

        // Top-level chains, one per hooked kernel chain.
        let accepted_earlier_in = raw_in || mangle_in;
        if raw_in || raw_out {
            let builder = builders.entry(Table::Raw).or_default();
            if raw_in {
                self.top_chain(
                    builder,
                    sets,
                    &own_addresses,
                    "PREROUTING",
                    TopChain {
                        conntrack: false,
                        honour_accept: false,
                        self_traffic: Some(Side::Source),
                        dispatch: vec![Path::UntrackedIn.dispatch_chain()],
                    },
                );
            }
            if raw_out {
                self.top_chain(
                    builder,
                    sets,
                    &own_addresses,
                    "OUTPUT",
                    TopChain {
                        conntrack: false,
                        honour_accept: false,
                        self_traffic: Some(Side::Destination),
                        dispatch: vec![Path::UntrackedOut.dispatch_chain()],
                    },
                );
            }
        }
        if mangle_in {
            let builder = builders.entry(Table::Mangle).or_default();
            self.top_chain(
                builder,
                sets,
                &own_addresses,
                "PREROUTING",
                TopChain {
                    conntrack: true,
                    honour_accept: raw_in,
                    self_traffic: Some(Side::Source),
                    dispatch: vec![Path::PreDnatIn.dispatch_chain()],
                },
            );
        }
        if let Some(builder) = builders.get_mut(&Table::Filter) {
            if builder.has(Path::NormalIn.dispatch_chain()) {
                self.top_chain(
                    builder,
                    sets,
                    &own_addresses,
                    "INPUT",
                    TopChain {
                        conntrack: true,
                        honour_accept: accepted_earlier_in,
                        self_traffic: Some(Side::Source),
                        dispatch: vec![Path::NormalIn.dispatch_chain()],
                    },
                );
            }
            let forward: Vec<&'static str> = [Path::ForwardIn, Path::ForwardOut]
                .into_iter()
                .map(Path::dispatch_chain)
                .filter(|chain| builder.has(chain))
                .collect();
            if !forward.is_empty() {
                self.top_chain(
                    builder,
                    sets,
                    &own_addresses,
                    "FORWARD",
                    TopChain {
                        conntrack: true,
                        honour_accept: accepted_earlier_in,
                        self_traffic: None,
                        dispatch: forward,
                    },
                );
            }
            if builder.has(Path::NormalOut.dispatch_chain()) {
                self.top_chain(
                    builder,
                    sets,
                    &own_addresses,
                    "OUTPUT",
                    TopChain {
                        conntrack: true,
                        honour_accept: raw_out,
                        self_traffic: Some(Side::Destination),
                        dispatch: vec![Path::NormalOut.dispatch_chain()],
                    },
                );
            }
        }

        Table::ALL
            .into_iter()
            .filter_map(|table| {
                let builder = builders.remove(&table)?;
                let mut hooks = builder.hooks;
                let order = crate::ruleset::kernel_chains(table);
                hooks.sort_by_key(|hook| order.iter().position(|c| *c == hook.kernel_chain));
                Some(TableRuleset {
                    table,
                    hooks,
                    chains: builder.chains.into_values().collect(),
                })
            })
            .collect()
    }

    /// Builds the dispatch chain, the endpoint chains and the policy chains of one path.
    fn build_path(
        &self,
        family: IpFamily,
        path: Path,
        bindings: &[Binding<'_>],
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) {
        let wildcard_needed = bindings
            .iter()
            .any(|binding| binding.interface.is_none() && path.needed(binding));
        let mut dispatch = Vec::new();
        for binding in bindings {
            let needed = path.needed(binding);
            let chain_name = names::endpoint_chain(path.chain_kind(), binding.interface.as_deref());
            let interface_match = binding
                .interface
                .as_ref()
                .map(|name| match path.direction() {
                    Direction::Ingress => Match::InInterface(name.clone()),
                    Direction::Egress => Match::OutInterface(name.clone()),
                });
            match (needed, interface_match) {
                (true, Some(interface)) => dispatch.push(
                    Rule::new(vec![interface], Action::Goto(chain_name.clone()))
                        .comment(format!("to {}", binding.describe())),
                ),
                (true, None) => dispatch.push(
                    Rule::new(Vec::new(), Action::Goto(chain_name.clone()))
                        .comment(format!("to {}", binding.describe())),
                ),
                // An interface with an endpoint of its own but nothing to check on this path
                // must not fall through to the `*` endpoint's chain.
                (false, Some(interface)) if wildcard_needed => dispatch.push(
                    Rule::new(vec![interface], Action::Return)
                        .comment(format!("{} has no policy here", binding.describe())),
                ),
                _ => {}
            }
            if needed {
                let chain = self.endpoint_chain(family, path, binding, &chain_name, builder, sets);
                builder.add(chain);
            }
        }
        builder.add(Chain {
            name: path.dispatch_chain().to_owned(),
            rules: dispatch,
        });
    }

    fn endpoint_chain(
        &self,
        family: IpFamily,
        path: Path,
        binding: &Binding<'_>,
        name: &str,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> Chain {
        let marks = self.marks;
        let direction = path.direction();
        let mut rules = Vec::new();
        if matches!(
            path,
            Path::NormalIn | Path::NormalOut | Path::ForwardIn | Path::ForwardOut
        ) {
            rules.push(
                Rule::new(vec![Match::Conntrack(CtState::Invalid)], Action::Drop)
                    .comment("drop packets conntrack finds invalid"),
            );
        }
        if !matches!(path, Path::ForwardIn | Path::ForwardOut) {
            let failsafe = self.failsafe_chain(family, path, builder);
            rules.push(Rule::new(Vec::new(), Action::Jump(failsafe)).comment("failsafe ports"));
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::Return)
                    .comment("allowed as a failsafe port"),
            );
        }
        rules.push(Rule::new(Vec::new(), clear_bits(marks.accept | marks.pass)));
        let policies = path.policies(binding);
        if !policies.is_empty() {
            rules.push(
                Rule::new(Vec::new(), clear_bits(marks.pass)).comment("Start of tier default"),
            );
            let policy_rules = self.policy_section(family, path, policies, builder, sets);
            rules.extend(policy_rules);
            if matches!(
                path,
                Path::NormalIn | Path::NormalOut | Path::ForwardIn | Path::ForwardOut
            ) {
                if self.config.log_actions.contains(&model::Action::Deny) {
                    rules.push(
                        Rule::new(
                            vec![mark_clear(marks.pass)],
                            Action::Nflog {
                                group: self.nflog_group(direction),
                                prefix: rules::nflog_prefix('D', direction, None, "default"),
                            },
                        )
                        .comment("End of tier default: log"),
                    );
                }
                rules.push(
                    Rule::new(vec![mark_clear(marks.pass)], Action::Drop)
                        .comment("End of tier default. Drop if no policies passed packet"),
                );
            }
        }
        if matches!(path, Path::NormalIn | Path::NormalOut) {
            if binding.endpoint.default_allow {
                rules.push(
                    Rule::new(Vec::new(), Action::Return)
                        .comment("allowed by profile projectcalico-default-allow"),
                );
            } else {
                if self.config.log_actions.contains(&model::Action::Deny) {
                    let letter = match direction {
                        Direction::Ingress => "DRI",
                        Direction::Egress => "DRE",
                    };
                    rules.push(
                        Rule::new(
                            Vec::new(),
                            Action::Nflog {
                                group: self.nflog_group(direction),
                                prefix: letter.to_owned(),
                            },
                        )
                        .comment("Drop if no profiles matched: log"),
                    );
                }
                rules.push(
                    Rule::new(Vec::new(), Action::Drop).comment("Drop if no profiles matched"),
                );
            }
        }
        Chain {
            name: name.to_owned(),
            rules,
        }
    }

    fn nflog_group(&self, direction: Direction) -> u16 {
        match direction {
            Direction::Ingress => self.config.nflog_group,
            Direction::Egress => self.config.nflog_group_egress,
        }
    }

    /// The jumps to each policy (gated on the pass bit), in batch chains when the list is
    /// long.
    fn policy_section(
        &self,
        family: IpFamily,
        path: Path,
        policies: &[&Policy],
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> Vec<Rule> {
        let untracked = matches!(path, Path::UntrackedIn | Path::UntrackedOut);
        let direction = path.direction();
        let mut jumps = Vec::new();
        for policy in policies {
            let chain = self.policy_chain(family, policy, direction, builder, sets);
            jumps.extend(self.gated_jump(chain, untracked));
        }
        if policies.len() <= POLICIES_PER_CHAIN {
            return jumps;
        }
        let per_policy = jumps.len() / policies.len();
        let mut section = Vec::new();
        for batch in jumps.chunks(POLICIES_PER_CHAIN * per_policy) {
            let content: Vec<String> = batch
                .iter()
                .filter_map(|rule| match &rule.action {
                    Action::Jump(target) => Some(target.clone()),
                    _ => None,
                })
                .collect();
            let name = names::batch_chain(&format!("{}|{}", path.table(), content.join(",")));
            builder.add(Chain {
                name: name.clone(),
                rules: batch.to_vec(),
            });
            section.extend(self.gated_jump(name, false));
        }
        section
    }

    fn gated_jump(&self, chain: String, untracked: bool) -> Vec<Rule> {
        let marks = self.marks;
        let mut rules = vec![Rule::new(vec![mark_clear(marks.pass)], Action::Jump(chain))];
        if untracked {
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::NoTrack)
                    .comment("untracked policy accepted: skip connection tracking"),
            );
        }
        rules.push(
            Rule::new(vec![mark_set(marks.accept)], Action::Return)
                .comment("Return if policy accepted"),
        );
        rules
    }

    fn policy_chain(
        &self,
        family: IpFamily,
        policy: &Policy,
        direction: Direction,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
    ) -> String {
        let name = names::policy_chain(&policy.name, direction);
        if builder.has(&name) {
            return name;
        }
        let context = RuleContext {
            family,
            marks: self.marks,
            policy: &policy.name,
            direction,
            log_actions: &self.config.log_actions,
            nflog_group: self.nflog_group(direction),
        };
        let mut rules: Vec<Rule> = policy
            .rules(direction)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .flat_map(|(index, rule)| rules::compile_rule(rule, index, &context, sets))
            .collect();
        // Falling off the end of the chain returns too (Felix strips these as well).
        while rules
            .last()
            .is_some_and(|rule| rule.action == Action::Return)
        {
            rules.pop();
        }
        builder.add(Chain {
            name: name.clone(),
            rules,
        });
        name
    }

    /// The failsafe chain for a path's table and direction; returns its name.
    fn failsafe_chain(&self, family: IpFamily, path: Path, builder: &mut TableBuilder) -> String {
        let direction = path.direction();
        let name = match direction {
            Direction::Ingress => "npg-failsafe-in",
            Direction::Egress => "npg-failsafe-out",
        };
        if builder.has(name) {
            return name.to_owned();
        }
        let accept = set_bit(self.marks.accept);
        let entry = |failsafe: &Failsafe, port_side: Side, net_side: Side| -> Option<Rule> {
            if failsafe
                .net
                .is_some_and(|net| IpFamily::of_net(&net) != family)
            {
                return None;
            }
            let mut matches = vec![
                Match::Protocol {
                    number: failsafe.protocol.number(),
                    negated: false,
                },
                Match::Ports {
                    side: port_side,
                    ports: vec![PortRange {
                        first: failsafe.port,
                        last: failsafe.port,
                    }],
                    negated: false,
                },
            ];
            if let Some(net) = failsafe.net {
                matches.push(Match::Net {
                    side: net_side,
                    net,
                    negated: false,
                });
            }
            Some(Rule::new(matches, accept.clone()))
        };
        // The ports of this direction, matched on their destination; the peer net is the
        // source inbound and the destination outbound.
        let (own, reverse, net_side) = match direction {
            Direction::Ingress => (
                &self.config.failsafe_inbound,
                &self.config.failsafe_outbound,
                Side::Source,
            ),
            Direction::Egress => (
                &self.config.failsafe_outbound,
                &self.config.failsafe_inbound,
                Side::Destination,
            ),
        };
        let mut rules: Vec<Rule> = own
            .iter()
            .filter_map(|f| entry(f, Side::Destination, net_side))
            .collect();
        // Untracked traffic has no conntrack to let replies back: in raw, the replies of the
        // other direction's failsafe connections (matched on their source port) pass too.
        if path.table() == Table::Raw {
            rules.extend(
                reverse
                    .iter()
                    .filter_map(|f| entry(f, Side::Source, net_side)),
            );
        }
        builder.add(Chain {
            name: name.to_owned(),
            rules,
        });
        name.to_owned()
    }

    fn top_chain(
        &self,
        builder: &mut TableBuilder,
        sets: &mut SetRegistry<'_>,
        own_addresses: &[std::net::IpAddr],
        kernel_chain: &str,
        shape: TopChain,
    ) {
        let marks = self.marks;
        let name = format!("npg-{kernel_chain}");
        let mut rules = Vec::new();
        if shape.conntrack {
            rules.push(
                Rule::new(
                    vec![Match::Conntrack(CtState::RelatedEstablished)],
                    Action::Return,
                )
                .comment("replies and established connections"),
            );
        }
        if shape.honour_accept {
            rules.push(
                Rule::new(vec![mark_set(marks.accept)], Action::Return)
                    .comment("accepted by an earlier table"),
            );
        }
        // Every packet that reaches our policy starts with our bits clear, whatever another
        // program or an earlier table left in them.
        rules.push(Rule::new(Vec::new(), clear_bits(marks.all())));
        if let Some(side) = shape.self_traffic {
            let (interface, direction_word) = match side {
                Side::Source => (Match::InInterface("lo".to_owned()), "src"),
                Side::Destination => (Match::OutInterface("lo".to_owned()), "dst"),
            };
            rules.push(Rule::new(vec![interface], Action::Return).comment("host to itself"));
            let set = sets.this_host(own_addresses);
            rules.push(
                Rule::new(
                    vec![Match::Set {
                        side,
                        name: set,
                        lookup: SetLookup::Address,
                        negated: false,
                    }],
                    Action::Return,
                )
                .comment(format!(
                    "host to itself ({direction_word} is a host address)"
                )),
            );
        }
        for dispatch in shape.dispatch {
            rules.push(Rule::new(Vec::new(), Action::Jump(dispatch.to_owned())));
        }
        builder.add(Chain {
            name: name.clone(),
            rules,
        });
        builder.hooks.push(Hook {
            kernel_chain: kernel_chain.to_owned(),
            target: name,
        });
    }
}

/// The shape of a top-level chain.
struct TopChain {
    /// Return at once for replies and established connections.
    conntrack: bool,
    /// Return at once for packets an earlier table's policy accepted.
    honour_accept: bool,
    /// Return for the host's own traffic, recognised on this side.
    self_traffic: Option<Side>,
    /// The dispatch chains to jump to.
    dispatch: Vec<&'static str>,
}

#[cfg(test)]
mod tests;
