//! Time-boxed access, pure: what carries an expiry (for `grants`, `plan` and `status`), and the
//! policy file `grant` writes.
//!
//! A grant is nothing but a policy file: a pre-DNAT `GlobalNetworkPolicy` in the `default` tier
//! with an Allow rule and the `nodeport-guard.io/expires` annotation. Everything that makes it
//! expire lives in validation (`validate::expiry`) and works for any policy, staged policy or
//! network set; this module only lists them and writes new ones.

use std::fmt::Write as _;
use std::path::PathBuf;

use ipnet::IpNet;
use jiff::Timestamp;
use serde::Serialize;

use crate::model::{
    DEFAULT_TIER, EXPIRES_ANNOTATION, Expiry, GRANTED_BY_ANNOTATION, IpFamily, Model, Policy,
    REASON_ANNOTATION,
};
use crate::policy_set::PolicySet;
use crate::validate::expiry::human_duration;

/// The prefix of a grant's policy name and file name.
pub const GRANT_PREFIX: &str = "grant-";

/// One resource that carries an expiry.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Expiring {
    /// `GlobalNetworkPolicy`, `StagedGlobalNetworkPolicy` or `GlobalNetworkSet`.
    pub kind: &'static str,
    pub name: String,
    /// The file that holds it.
    pub file: PathBuf,
    /// The source networks (and selectors) its ingress rules name; a set's networks.
    pub sources: Vec<String>,
    /// The destination ports its ingress rules name, as `tcp/30008`.
    pub ports: Vec<String>,
    /// When it expires.
    #[serde(serialize_with = "as_text")]
    pub expires: Timestamp,
    /// `nodeport-guard.io/granted-by`.
    pub granted_by: Option<String>,
    /// `nodeport-guard.io/reason`.
    pub reason: Option<String>,
    /// Whether it still counts.
    pub active: bool,
}

impl Expiring {
    /// `active` or `expired`.
    pub fn status(&self) -> &'static str {
        if self.active { "active" } else { "expired" }
    }

    /// "expires in 2h 5m" or "expired 3m ago", seen from `now`.
    pub fn relative(&self, now: Timestamp) -> String {
        relative(self.expires, now)
    }
}

fn as_text<S: serde::Serializer>(time: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(time)
}

/// "expires in 2h 5m" or "expired 3m ago": `expires` seen from `now`.
pub fn relative(expires: Timestamp, now: Timestamp) -> String {
    if expires > now {
        format!("expires in {}", human_duration(expires.duration_since(now)))
    } else {
        format!(
            "expired {} ago",
            human_duration(now.duration_since(expires))
        )
    }
}

/// Every resource of `set` that carries an expiry, active or expired at the set's instant,
/// soonest first.
pub fn expiring(set: &PolicySet) -> Vec<Expiring> {
    expiring_in(&set.validated, &set.sources, set.now)
}

/// [`expiring`] of a validated model whose resources point into `sources`.
pub fn expiring_in(
    model: &Model,
    sources: &crate::source::Sources,
    now: Timestamp,
) -> Vec<Expiring> {
    let file = |expiry: &Expiry| sources.get(expiry.origin.file).path.clone();
    let item = |kind, name: &str, expiry: &Expiry, sources, ports| Expiring {
        kind,
        name: name.to_owned(),
        file: file(expiry),
        sources,
        ports,
        expires: expiry.at,
        granted_by: expiry.granted_by.clone(),
        reason: expiry.reason.clone(),
        active: !expiry.has_passed(now),
    };
    let mut items = Vec::new();
    let enforced = model
        .policies()
        .iter()
        .map(|policy| ("GlobalNetworkPolicy", policy));
    let staged = model
        .staged_policies()
        .iter()
        .map(|policy| ("StagedGlobalNetworkPolicy", policy));
    for (kind, policy) in enforced.chain(staged) {
        if let Some(expiry) = &policy.expires {
            let (sources, ports) = policy_reach(policy);
            items.push(item(kind, &policy.name, expiry, sources, ports));
        }
    }
    for deletion in model.staged_deletions() {
        if let Some(expiry) = &deletion.expires {
            items.push(item(
                "StagedGlobalNetworkPolicy",
                &deletion.name,
                expiry,
                Vec::new(),
                Vec::new(),
            ));
        }
    }
    for set in model.network_sets() {
        if let Some(expiry) = &set.expires {
            let nets = set.nets.iter().map(ToString::to_string).collect();
            items.push(item(
                "GlobalNetworkSet",
                &set.name,
                expiry,
                nets,
                Vec::new(),
            ));
        }
    }
    items.sort_by(|a, b| a.expires.cmp(&b.expires).then_with(|| a.name.cmp(&b.name)));
    items
}

/// The sources and destination ports a policy's ingress rules name, each once, in order.
fn policy_reach(policy: &Policy) -> (Vec<String>, Vec<String>) {
    let (mut sources, mut ports) = (Vec::new(), Vec::new());
    let push = |list: &mut Vec<String>, value: String| {
        if !list.contains(&value) {
            list.push(value);
        }
    };
    for rule in policy.ingress.iter().flatten() {
        for net in &rule.source.nets {
            push(&mut sources, net.to_string());
        }
        if let Some(selector) = &rule.source.selector {
            push(&mut sources, format!("selector {selector}"));
        }
        let protocol = rule
            .protocol
            .map_or_else(|| "any".to_owned(), |p| p.to_string().to_lowercase());
        for port in &rule.destination.ports {
            push(&mut ports, format!("{protocol}/{port}"));
        }
    }
    (sources, ports)
}

/// Whether every resource of `model` is time-boxed (carries an expiry) and it has at least
/// one: a directory emptied of such resources, say by `grant --revoke` of the last grant, ends
/// temporary exceptions early rather than removing protection, so the daemon's empty-set guard
/// (`allowEmpty: false`) lets it through, as it does an expiry.
pub fn only_time_boxed(model: &Model) -> bool {
    let policies = model.policies().iter().chain(model.staged_policies());
    !model.is_empty()
        && model.host_endpoints().is_empty()
        && policies.clone().all(|policy| policy.expires.is_some())
        && model.staged_deletions().iter().all(|d| d.expires.is_some())
        && model.network_sets().iter().all(|set| set.expires.is_some())
}

/// The files that hold only expired resources (what `grants --prune` deletes), in order.
pub fn prunable(set: &PolicySet) -> Vec<PathBuf> {
    use std::collections::BTreeSet;
    let (model, now) = (&set.validated, set.now);
    let (mut live, mut expired) = (BTreeSet::new(), BTreeSet::new());
    let mut note = |origin: crate::model::Origin, expires: Option<&Expiry>| {
        if expires.is_some_and(|expiry| expiry.has_passed(now)) {
            expired.insert(origin.file);
        } else {
            live.insert(origin.file);
        }
    };
    for policy in model.policies().iter().chain(model.staged_policies()) {
        note(policy.origin, policy.expires.as_ref());
    }
    for deletion in model.staged_deletions() {
        note(deletion.origin, deletion.expires.as_ref());
    }
    for network_set in model.network_sets() {
        note(network_set.origin, network_set.expires.as_ref());
    }
    let endpoints = model
        .host_endpoints()
        .iter()
        .map(|endpoint| endpoint.origin);
    let tiers = model.tiers().iter().map(|tier| tier.origin);
    for origin in endpoints.chain(tiers).flatten() {
        note(origin, None);
    }
    expired
        .difference(&live)
        .map(|file| set.sources.get(*file).path.clone())
        .collect()
}

/// What `grant` is asked to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// `<name>`: the policy is `grant-<name>`, the file `grant-<name>.yaml`.
    pub name: String,
    /// Who may come in.
    pub sources: Vec<IpNet>,
    /// To which ports.
    pub ports: Vec<u16>,
    /// `TCP` or `UDP`.
    pub protocol: GrantProtocol,
    /// Until when.
    pub expires: Timestamp,
    /// Who granted it.
    pub granted_by: String,
    /// Why.
    pub reason: Option<String>,
    /// The policy's `order`: below every other policy of the default tier.
    pub order: f64,
}

/// The protocols a grant may open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantProtocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
}

impl GrantProtocol {
    /// As Calico writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantProtocol::Tcp => "TCP",
            GrantProtocol::Udp => "UDP",
        }
    }
}

impl Grant {
    /// The policy's name.
    pub fn policy_name(&self) -> String {
        format!("{GRANT_PREFIX}{}", self.name)
    }

    /// The policy file: valid Calico YAML (Calico ignores the annotations).
    pub fn render(&self) -> String {
        let quoted = |text: &str| serde_json::to_string(text).unwrap_or_default();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Written by `nodeport-guard grant`: a time-boxed exception, left out from {} on.",
            self.expires
        );
        let _ = writeln!(
            out,
            "# `nodeport-guard grants` lists it; `nodeport-guard grant --revoke {}` ends it now.",
            self.name
        );
        out.push_str("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n");
        let _ = writeln!(out, "  name: {}", self.policy_name());
        out.push_str("  annotations:\n");
        let _ = writeln!(out, "    {EXPIRES_ANNOTATION}: \"{}\"", self.expires);
        let _ = writeln!(
            out,
            "    {GRANTED_BY_ANNOTATION}: {}",
            quoted(&self.granted_by)
        );
        if let Some(reason) = &self.reason {
            let _ = writeln!(out, "    {REASON_ANNOTATION}: {}", quoted(reason));
        }
        out.push_str("spec:\n");
        let _ = writeln!(out, "  order: {}", self.order);
        out.push_str("  preDNAT: true\n  applyOnForward: true\n  selector: all()\n");
        out.push_str("  types: [Ingress]\n  ingress:\n");
        // A Calico rule holds the networks of one family: one rule per family of the sources.
        for family in [IpFamily::V4, IpFamily::V6] {
            let nets: Vec<&IpNet> = self
                .sources
                .iter()
                .filter(|net| IpFamily::of_net(net) == family)
                .collect();
            if nets.is_empty() {
                continue;
            }
            out.push_str("    - action: Allow\n");
            let _ = writeln!(out, "      protocol: {}", self.protocol.as_str());
            out.push_str("      source:\n        nets:\n");
            for net in nets {
                let _ = writeln!(out, "          - {net}");
            }
            out.push_str("      destination:\n        ports:\n");
            for port in &self.ports {
                let _ = writeln!(out, "          - {port}");
            }
        }
        out
    }
}

/// The file of the grant `<name>`.
pub fn file_name(name: &str) -> String {
    format!("{GRANT_PREFIX}{name}.yaml")
}

/// A readable name from the first source and port: `198-51-100-7-30008` for a single
/// address, `203-0-113-0-28-30008` for a network, `2001-db8--7-30008` for IPv6.
pub fn default_name(source: &IpNet, port: u16) -> String {
    let address = source.addr().to_string().replace(['.', ':'], "-");
    // `::` (as in `::/0`) has no digit to keep.
    let address = match address.trim_matches('-') {
        "" => "0",
        address => address,
    };
    if source.prefix_len() == source.max_prefix_len() {
        format!("{address}-{port}")
    } else {
        format!("{address}-{}-{port}", source.prefix_len())
    }
}

/// An `order` that puts a policy before every other policy of the default tier (`exclude` is
/// the grant's own policy, when it is replaced): one below the lowest order (or, where one less
/// is the same float, as with `1e20`, the next float below it), or 0 when none has one (a
/// policy without `order` runs last). An error naming the policy when its order is the lowest
/// a float holds, with none before it.
pub fn first_order(model: &Model, exclude: &str) -> Result<f64, String> {
    let lowest = model
        .policies()
        .iter()
        .chain(model.staged_policies())
        .filter(|policy| policy.tier == DEFAULT_TIER && policy.name != exclude)
        .filter_map(|policy| policy.order.map(|order| (order, &policy.name)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let Some((lowest, name)) = lowest else {
        return Ok(0.0);
    };
    let below = (lowest - 1.0).floor();
    let below = if below < lowest {
        below
    } else {
        lowest.next_down()
    };
    if below.is_finite() {
        Ok(below)
    } else {
        Err(format!(
            "no order comes before the policy `{name}` (order {lowest:e}), and a grant must run first: give that policy a higher order"
        ))
    }
}

#[cfg(test)]
mod tests;
