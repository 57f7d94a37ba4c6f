//! Which host endpoints apply on this host, which interface each stands for, and which policies
//! each one's chains judge (the part of Felix's `endpoints.go` that picks endpoints and
//! policies, before any chain is written).

use std::collections::BTreeMap;

use super::names::EndpointChainKind;
use crate::config::{Config, Failsafe};
use crate::diagnostic::Diagnostic;
use crate::facts::HostFacts;
use crate::model::{self, Direction, EndpointInterface, HostEndpoint, Model, Policy, PolicyKind};
use crate::ruleset::Table;

/// The label Calico puts on every node's host endpoint.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The host endpoints enforced on this host: the explicit ones whose `node` is this host, or
/// the implicit `*` endpoint when there are none.
pub fn endpoints_of_host(model: &Model, config: &Config, host: &HostFacts) -> Vec<HostEndpoint> {
    let explicit: Vec<HostEndpoint> = model
        .host_endpoints()
        .iter()
        .filter(|endpoint| endpoint.node == host.node_name)
        .map(|endpoint| HostEndpoint::clone(endpoint))
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
pub struct Binding<'m> {
    /// The interface; `None` is every interface without an endpoint of its own.
    pub interface: Option<String>,
    /// The host endpoint whose interfaces are bound.
    pub endpoint: HostEndpoint,
    untracked_in: Vec<&'m Policy>,
    untracked_out: Vec<&'m Policy>,
    pre_dnat_in: Vec<&'m Policy>,
    normal_in: Vec<&'m Policy>,
    normal_out: Vec<&'m Policy>,
    forward_in: Vec<&'m Policy>,
    forward_out: Vec<&'m Policy>,
    /// The staged policies of each path, indexed like [`Path::ALL`].
    staged: [Vec<&'m Policy>; 7],
}

impl Binding<'_> {
    /// The endpoint and its interface, in words.
    pub fn describe(&self) -> String {
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

/// The endpoints of this host bound to their interfaces: one binding per interface with an
/// endpoint of its own, then the `*` endpoint's, if any.
pub fn bind<'m>(
    model: &'m Model,
    endpoints: Vec<HostEndpoint>,
    host: &HostFacts,
    warnings: &mut Vec<Diagnostic>,
) -> Vec<Binding<'m>> {
    let (by_interface, wildcard) = assign_interfaces(endpoints, host, warnings);
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

/// Which endpoint stands for which interface: a named endpoint wins for its interface, one
/// found by address comes next, and the `*` endpoint covers the rest. Ties go to the
/// alphabetically first endpoint, as in Felix. Returns the endpoint of each named interface
/// and the `*` endpoint.
fn assign_interfaces(
    endpoints: Vec<HostEndpoint>,
    host: &HostFacts,
    warnings: &mut Vec<Diagnostic>,
) -> (BTreeMap<String, HostEndpoint>, Option<HostEndpoint>) {
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
        assign_by_address(endpoint, host, &mut by_interface, warnings);
    }
    (by_interface, wildcard)
}

/// Binds an endpoint without `interfaceName` to every interface of this host that has one of
/// its `expectedIPs`, unless a named endpoint already stands for that interface.
fn assign_by_address(
    endpoint: HostEndpoint,
    host: &HostFacts,
    by_interface: &mut BTreeMap<String, HostEndpoint>,
    warnings: &mut Vec<Diagnostic>,
) {
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

/// A binding with the policies that select its endpoint, sorted onto the paths they judge;
/// staged policies the same way, onto their own lists.
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
        staged: Default::default(),
    };
    for policy in model.policies() {
        if !policy.selector.matches(&binding.endpoint.labels) {
            continue;
        }
        for path in paths_of(policy) {
            binding.policies_mut(path).push(policy);
        }
    }
    for policy in model.staged_policies() {
        if !policy.selector.matches(&binding.endpoint.labels) {
            continue;
        }
        for path in paths_of(policy) {
            binding.staged[path as usize].push(policy);
        }
    }
    binding
}

/// The paths a policy judges, by its kind, directions and `applyOnForward`.
fn paths_of(policy: &Policy) -> Vec<Path> {
    let ingress = policy.ingress.is_some();
    let egress = policy.egress.is_some();
    let mut paths = Vec::new();
    match policy.kind {
        PolicyKind::Untracked => {
            if ingress {
                paths.push(Path::UntrackedIn);
            }
            if egress {
                paths.push(Path::UntrackedOut);
            }
        }
        PolicyKind::PreDnat => {
            if ingress {
                paths.push(Path::PreDnatIn);
            }
        }
        PolicyKind::Normal => {
            if ingress {
                paths.push(Path::NormalIn);
                if policy.apply_on_forward {
                    paths.push(Path::ForwardIn);
                }
            }
            if egress {
                paths.push(Path::NormalOut);
                if policy.apply_on_forward {
                    paths.push(Path::ForwardOut);
                }
            }
        }
    }
    paths
}

impl<'m> Binding<'m> {
    fn policies_mut(&mut self, path: Path) -> &mut Vec<&'m Policy> {
        match path {
            Path::UntrackedIn => &mut self.untracked_in,
            Path::UntrackedOut => &mut self.untracked_out,
            Path::PreDnatIn => &mut self.pre_dnat_in,
            Path::NormalIn => &mut self.normal_in,
            Path::NormalOut => &mut self.normal_out,
            Path::ForwardIn => &mut self.forward_in,
            Path::ForwardOut => &mut self.forward_out,
        }
    }
}

/// A warning about one endpoint, pointing at its file when it has one.
pub(crate) fn endpoint_warning(endpoint: &HostEndpoint, message: String) -> Diagnostic {
    match endpoint.origin {
        Some(origin) => Diagnostic::warning(origin.file, origin.span, message),
        None => Diagnostic::global_warning(message),
    }
}

/// The kinds of traffic an endpoint chain judges, in the order of [`Path::ALL`] (their
/// discriminants index a binding's staged lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Untracked (doNotTrack) ingress policy, raw PREROUTING.
    UntrackedIn,
    /// Untracked egress policy, raw OUTPUT.
    UntrackedOut,
    /// Pre-DNAT policy, mangle PREROUTING.
    PreDnatIn,
    /// Normal ingress policy, filter INPUT.
    NormalIn,
    /// Normal egress policy, filter OUTPUT.
    NormalOut,
    /// Normal ingress policy with applyOnForward, filter FORWARD (by the input interface).
    ForwardIn,
    /// Normal egress policy with applyOnForward, filter FORWARD (by the output interface).
    ForwardOut,
}

impl Path {
    /// The table the path's chains live in.
    pub fn table(self) -> Table {
        match self {
            Path::UntrackedIn | Path::UntrackedOut => Table::Raw,
            Path::PreDnatIn => Table::Mangle,
            _ => Table::Filter,
        }
    }

    /// The direction its policies' rules come from.
    pub fn direction(self) -> Direction {
        match self {
            Path::UntrackedIn | Path::PreDnatIn | Path::NormalIn | Path::ForwardIn => {
                Direction::Ingress
            }
            Path::UntrackedOut | Path::NormalOut | Path::ForwardOut => Direction::Egress,
        }
    }

    /// The kind of endpoint chain it uses.
    pub fn chain_kind(self) -> EndpointChainKind {
        match self {
            Path::UntrackedIn | Path::PreDnatIn | Path::NormalIn => EndpointChainKind::FromHost,
            Path::UntrackedOut | Path::NormalOut => EndpointChainKind::ToHost,
            Path::ForwardIn => EndpointChainKind::FromHostForward,
            Path::ForwardOut => EndpointChainKind::ToHostForward,
        }
    }

    /// The chain that sends this path's packets to the policies (`npg-*-dispatch`).
    pub fn dispatch_chain(self) -> &'static str {
        match self.chain_kind() {
            EndpointChainKind::FromHost => "npg-from-host-endpoint",
            EndpointChainKind::ToHost => "npg-to-host-endpoint",
            EndpointChainKind::FromHostForward => "npg-from-hep-forward",
            EndpointChainKind::ToHostForward => "npg-to-hep-forward",
        }
    }

    /// The policies of `binding` on this path, in evaluation order.
    pub fn policies<'b, 'm>(self, binding: &'b Binding<'m>) -> &'b [&'m Policy] {
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

    /// The staged policies of this path, in evaluation order.
    pub fn staged<'b, 'm>(self, binding: &'b Binding<'m>) -> &'b [&'m Policy] {
        &binding.staged[self as usize]
    }

    /// Whether this endpoint needs a chain on this path: policies (enforced or staged) apply,
    /// or (for the host's own traffic) the endpoint has no allow-all profile, so Calico's
    /// default deny applies even without policy.
    pub fn needed(self, binding: &Binding<'_>) -> bool {
        self.enforced(binding) || !self.staged(binding).is_empty()
    }

    /// Whether this endpoint's chain on this path decides anything: enforced policies apply,
    /// or the endpoint has no allow-all profile. A chain that only staged policies need must
    /// not drop anything, not even what conntrack finds invalid.
    pub fn enforced(self, binding: &Binding<'_>) -> bool {
        !self.policies(binding).is_empty()
            || (matches!(self, Path::NormalIn | Path::NormalOut) && !binding.endpoint.default_allow)
    }

    /// Whether the path judges with normal (filter) policy, whose tiers end in their default
    /// action and whose chains drop what conntrack finds invalid.
    pub fn is_normal(self) -> bool {
        matches!(
            self,
            Path::NormalIn | Path::NormalOut | Path::ForwardIn | Path::ForwardOut
        )
    }

    /// Every path, in the order the compiler builds them.
    pub const ALL: [Path; 7] = [
        Path::UntrackedIn,
        Path::UntrackedOut,
        Path::PreDnatIn,
        Path::NormalIn,
        Path::NormalOut,
        Path::ForwardIn,
        Path::ForwardOut,
    ];
}

/// Warns about every policy that selects no endpoint of this host.
pub(crate) fn policy_warnings(
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
    for policy in model.policies() {
        if !used.contains(policy.name.as_str()) {
            warnings.push(Diagnostic::warning(
                policy.origin.file,
                policy.origin.span,
                format!(
                    "policy {} selects no host endpoint of node `{}`: it has no effect here",
                    policy.described(),
                    host.node_name
                ),
            ));
        }
    }
    let staged_used: std::collections::HashSet<&str> = bindings
        .iter()
        .flat_map(|binding| Path::ALL.iter().flat_map(move |path| path.staged(binding)))
        .map(|policy| policy.name.as_str())
        .collect();
    for policy in model.staged_policies() {
        if !staged_used.contains(policy.name.as_str()) {
            warnings.push(Diagnostic::warning(
                policy.origin.file,
                policy.origin.span,
                format!(
                    "staged policy {} selects no host endpoint of node `{}`: it logs nothing here",
                    policy.described(),
                    host.node_name
                ),
            ));
        }
    }
}

/// Tells the operator, for each binding and direction of the host's own traffic, that it is
/// default-deny and which failsafe ports stay open.
pub(crate) fn default_deny_warnings(
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
                        policies.iter().map(|p| p.described()).collect::<Vec<_>>().join(", ")
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
