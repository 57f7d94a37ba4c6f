//! `trace`: what the compiled rules do with one packet, worked out from the validated policies
//! without the kernel.
//!
//! The evaluator walks the same path the compiler writes (see `compile`'s module docs): for
//! each table the packet passes, the top-level chain (replies and established connections,
//! what an earlier table accepted, the host's traffic to itself), the dispatch to the host
//! endpoint of the packet's interface, the failsafe ports, then tier by tier each policy's
//! rules, the end of each tier and the profile. Mark bits are followed as the kernel keeps
//! them: the accept bit an earlier table set survives into the next table, the pass bit ends a
//! tier. Every step is recorded in words, with the NFLOG prefixes the kernel would log.
//!
//! It is a pure function of the model, the config and the host's facts; the differential
//! kernel test (`tests/kernel_differential.rs`) checks that its verdicts and logs agree with
//! the kernel's.

mod early_drop;
pub mod impact;
mod matching;
mod report;
pub mod revoke;
mod staged;

use std::net::IpAddr;

use crate::compile::binding::{self, Binding, Path};
use crate::compile::rules::nflog_prefix;
use crate::config::{Config, Failsafe, LogTarget};
use crate::facts::HostFacts;
use crate::marks::MarkBits;
use crate::model::{self, Direction, IpFamily, Model, Policy, TierAction};

pub use matching::{Selections, rule_matches, selected};
pub use report::{ConnState, Logged, Outcome, Packet, Stage, Step, Trace, Travel, Verdict};

/// The source port assumed when none is given.
pub const DEFAULT_SOURCE_PORT: u16 = 49152;

/// Traces `packet` through the rules compiled from `model` for this host.
pub fn trace(model: &Model, config: &Config, host: &HostFacts, packet: &Packet) -> Trace {
    Evaluator::new(model, config, host).trace(packet)
}

/// The policies bound to this host's endpoints once, for tracing many packets (what a change
/// cuts off, which connections to revoke).
pub struct Evaluator<'m> {
    model: &'m Model,
    config: &'m Config,
    host: &'m HostFacts,
    marks: MarkBits,
    bindings: Vec<Binding<'m>>,
    own_addresses: Vec<IpAddr>,
    selections: Selections<'m>,
    /// The SYNs the early drop judges: a question over every pre-DNAT policy, answered once
    /// (the exposure audit traces many packets; at 10,000 policies answering it per packet
    /// was most of the audit's time).
    guarded: crate::compile::Guarded,
}

impl<'m> Evaluator<'m> {
    /// Binds `model`'s policies to the endpoints of `host`, as the compiler does.
    pub fn new(model: &'m Model, config: &'m Config, host: &'m HostFacts) -> Evaluator<'m> {
        let mut warnings = Vec::new();
        let endpoints = binding::endpoints_of_host(model, config, host);
        let bindings = binding::bind(model, endpoints, host, &mut warnings);
        Evaluator {
            model,
            config,
            host,
            marks: crate::compile::marks_of(config),
            guarded: crate::compile::guarded(config, &bindings),
            bindings,
            own_addresses: host.own_addresses(&config.host_interface_exclude),
            selections: Selections::of(model),
        }
    }

    /// Traces `packet`.
    pub fn trace(&self, packet: &Packet) -> Trace {
        self.tracer(packet, true).run(self.host)
    }

    /// The verdict on `packet`, as [`Evaluator::trace`] gives it, without the account of the
    /// policies passed on the way (what a change cuts off and revocation trace thousands of
    /// packets through thousands of policies, and read only the verdict).
    pub fn verdict(&self, packet: &Packet) -> Verdict {
        self.tracer(packet, false).run(self.host).verdict
    }

    /// The verdict on `packet` when nat `PREROUTING` sends it on as `translated` (a DNAT or
    /// REDIRECT: another destination address or port): raw and mangle judge `packet`, filter
    /// `INPUT` or `FORWARD` judges `translated`, as the kernel does.
    pub fn verdict_after_dnat(&self, packet: &Packet, translated: &Packet) -> Verdict {
        let mut tracer = self.tracer(packet, false);
        tracer.after_dnat = Some(translated);
        tracer.run(self.host).verdict
    }

    fn tracer<'t>(&'t self, packet: &'t Packet, account: bool) -> Tracer<'t> {
        let family = packet.family();
        Tracer {
            model: self.model,
            config: self.config,
            marks: self.marks,
            packet,
            family,
            bindings: &self.bindings,
            own_addresses: &self.own_addresses,
            selections: &self.selections,
            guarded: &self.guarded,
            account,
            bits: 0,
            logs: Vec::new(),
            decision: None,
            judged_in_raw: false,
            after_dnat: None,
        }
    }
}

impl Tracer<'_> {
    /// The whole path of the packet, table by table, and the verdict.
    fn run(mut self, host: &HostFacts) -> Trace {
        let packet = self.packet;
        let family = self.family;
        let mut notes = Vec::new();
        let mut stages = Vec::new();
        if host.families().contains(&family) {
            for hook in hooks(packet.travel) {
                if hook.table == "mangle" {
                    stages.extend(self.early_drop_stage());
                    if self.dropped() {
                        break;
                    }
                }
                if hook.table == "filter"
                    && let Some(translated) = self.after_dnat
                {
                    self.packet = translated;
                }
                let stage = self.stage(&hook);
                stages.extend(stage);
                if self.dropped() {
                    break;
                }
            }
        } else {
            notes.push(format!(
                "{family} rules are not programmed on this host ({})",
                host.ipv6_off_reason
                    .as_deref()
                    .unwrap_or("IPv6 is turned off")
            ));
        }
        let verdict = self.decision.take().unwrap_or_else(|| Verdict {
            outcome: Outcome::NotOurs,
            reason: "no rule of nodeport-guard decided about this packet".to_owned(),
            at: None,
            policy: None,
            tier: None,
            rule: None,
            nflog_prefix: None,
        });
        Trace {
            packet: packet.clone(),
            family: family.to_string(),
            notes,
            stages,
            logs: self.logs,
            verdict,
        }
    }
}

/// One hooked kernel chain and the paths its top-level chain dispatches to, in the compiler's
/// shape (`compile::dispatch`).
struct Hook {
    table: &'static str,
    kernel_chain: &'static str,
    judges: &'static str,
    paths: &'static [Path],
    conntrack: bool,
    /// The paths whose accept an earlier table honours (the top chain exists with this shape
    /// only when one of them is needed).
    accepted_earlier: &'static [Path],
    /// Where the host's own traffic is recognised.
    self_traffic: Option<End>,
}

#[derive(Clone, Copy)]
enum End {
    Source,
    Destination,
}

fn hooks(travel: Travel) -> Vec<Hook> {
    let raw_in = Hook {
        table: "raw",
        kernel_chain: "PREROUTING",
        judges: "untracked (doNotTrack) policy",
        paths: &[Path::UntrackedIn],
        conntrack: false,
        accepted_earlier: &[],
        self_traffic: Some(End::Source),
    };
    let mangle_in = Hook {
        table: "mangle",
        kernel_chain: "PREROUTING",
        judges: "pre-DNAT policy",
        paths: &[Path::PreDnatIn],
        conntrack: true,
        accepted_earlier: &[Path::UntrackedIn],
        self_traffic: Some(End::Source),
    };
    match travel {
        Travel::Inbound => vec![
            raw_in,
            mangle_in,
            Hook {
                table: "filter",
                kernel_chain: "INPUT",
                judges: "normal ingress policy",
                paths: &[Path::NormalIn],
                conntrack: true,
                accepted_earlier: &[Path::UntrackedIn, Path::PreDnatIn],
                self_traffic: Some(End::Source),
            },
        ],
        Travel::Forward => vec![
            raw_in,
            mangle_in,
            Hook {
                table: "filter",
                kernel_chain: "FORWARD",
                judges: "normal policy with applyOnForward",
                paths: &[Path::ForwardIn, Path::ForwardOut],
                conntrack: true,
                accepted_earlier: &[Path::UntrackedIn, Path::PreDnatIn],
                self_traffic: None,
            },
        ],
        Travel::Outbound => vec![
            Hook {
                table: "raw",
                kernel_chain: "OUTPUT",
                judges: "untracked (doNotTrack) egress policy",
                paths: &[Path::UntrackedOut],
                conntrack: false,
                accepted_earlier: &[],
                self_traffic: Some(End::Destination),
            },
            Hook {
                table: "filter",
                kernel_chain: "OUTPUT",
                judges: "normal egress policy",
                paths: &[Path::NormalOut],
                conntrack: true,
                accepted_earlier: &[Path::UntrackedOut],
                self_traffic: Some(End::Destination),
            },
        ],
    }
}

/// How an endpoint or policy chain ended.
enum ChainEnd {
    /// The packet was dropped.
    Dropped,
    /// The chain returned.
    Returned,
}

struct Tracer<'a> {
    model: &'a Model,
    config: &'a Config,
    marks: MarkBits,
    packet: &'a Packet,
    family: IpFamily,
    bindings: &'a [Binding<'a>],
    own_addresses: &'a [IpAddr],
    selections: &'a Selections<'a>,
    /// The SYNs the early drop judges ([`Evaluator`]'s).
    guarded: &'a crate::compile::Guarded,
    /// Whether the steps tell of every policy passed (else only of those with a rule that
    /// matches: the verdict is the same).
    account: bool,
    /// Our mark bits on the packet.
    bits: u32,
    logs: Vec<Logged>,
    /// The decision so far: a drop ends the trace; an allow may be followed by later tables'
    /// judgement.
    decision: Option<Verdict>,
    /// Whether the early drop judged this TCP SYN in raw and let it on (mangle returns it).
    judged_in_raw: bool,
    /// The packet as nat `PREROUTING` leaves it, which filter judges (see
    /// [`Evaluator::verdict_after_dnat`]).
    after_dnat: Option<&'a Packet>,
}

impl Tracer<'_> {
    /// Whether a rule of ours dropped the packet (which ends its way).
    fn dropped(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|d| d.outcome == Outcome::Dropped)
    }

    fn needed(&self, path: Path) -> bool {
        self.bindings.iter().any(|binding| path.needed(binding))
    }

    fn enforced(&self, path: Path) -> bool {
        self.bindings.iter().any(|binding| path.enforced(binding))
    }

    /// One hooked kernel chain; `None` when nodeport-guard has no chain there.
    fn stage(&mut self, hook: &Hook) -> Option<Stage> {
        if !hook.paths.iter().any(|path| self.needed(*path)) {
            return None;
        }
        let at = format!("{} {}", hook.table, hook.kernel_chain);
        let top = format!("npg-{}", hook.kernel_chain);
        let mut steps = Vec::new();
        let established = matches!(
            self.packet.state,
            ConnState::Established | ConnState::Related
        );
        if hook.conntrack && established {
            steps.push(chain_step(
                Step::new(
                    "conntrack",
                    0,
                    "a reply or a packet of a known connection: returned before any policy",
                ),
                &top,
            ));
            self.decide_not_ours_once(
                &at,
                "a reply or a packet of a known connection: only a new connection is judged",
            );
            return Some(self.finish_stage(hook, steps));
        }
        if hook.table == "mangle" && self.judged_in_raw {
            steps.push(chain_step(
                Step::new(
                    "judgedInRaw",
                    0,
                    "a TCP SYN pre-DNAT policy judged in raw PREROUTING: returned without judging again",
                ),
                &top,
            ));
            return Some(self.finish_stage(hook, steps));
        }
        // Only enforced policy accepts: staged policies clear the accept bit they set.
        let honour_accept = hook
            .accepted_earlier
            .iter()
            .any(|path| self.enforced(*path));
        if honour_accept && self.bits & self.marks.accept != 0 {
            steps.push(chain_step(
                Step::new(
                    "acceptedEarlier",
                    0,
                    format!(
                        "the accept mark ({:#x}) an earlier table set: returned without judging again",
                        self.marks.accept
                    ),
                ),
                &top,
            ));
            return Some(self.finish_stage(hook, steps));
        }
        self.bits = 0;
        if let Some(end) = hook.self_traffic
            && let Some(why) = self.host_to_itself(end)
        {
            steps.push(chain_step(Step::new("hostToItself", 0, why), &top));
            self.decide_not_ours_once(&at, "the host's traffic to itself is never judged");
            return Some(self.finish_stage(hook, steps));
        }
        for path in hook.paths {
            if let ChainEnd::Dropped = self.dispatch(*path, &at, &mut steps) {
                break;
            }
        }
        Some(self.finish_stage(hook, steps))
    }

    fn finish_stage(&self, hook: &Hook, steps: Vec<Step>) -> Stage {
        Stage {
            table: hook.table,
            hook: hook.kernel_chain,
            judges: hook.judges,
            steps,
        }
    }

    /// Records "not ours" only when nothing decided yet (a later table may still decide).
    fn decide_not_ours_once(&mut self, at: &str, reason: &str) {
        if self.decision.is_none() {
            self.decision = Some(Verdict {
                outcome: Outcome::NotOurs,
                reason: reason.to_owned(),
                at: Some(at.to_owned()),
                policy: None,
                tier: None,
                rule: None,
                nflog_prefix: None,
            });
        }
    }

    fn host_to_itself(&self, end: End) -> Option<String> {
        let (interface, address, word) = match end {
            End::Source => (&self.packet.in_interface, self.packet.src, "source"),
            End::Destination => (&self.packet.out_interface, self.packet.dst, "destination"),
        };
        if interface.as_deref() == Some("lo") {
            return Some("the host to itself (loopback interface): returned".to_owned());
        }
        if self.own_addresses.contains(&address) {
            return Some(format!(
                "the host to itself ({word} {address} is one of this host's addresses): returned"
            ));
        }
        None
    }

    /// The dispatch chain of `path`: the endpoint of the packet's interface, if it has a chain
    /// on this path.
    fn dispatch(&mut self, path: Path, at: &str, steps: &mut Vec<Step>) -> ChainEnd {
        let interface = match path.direction() {
            Direction::Ingress => self.packet.in_interface.as_deref(),
            Direction::Egress => self.packet.out_interface.as_deref(),
        };
        let wildcard_needed = self
            .bindings
            .iter()
            .any(|binding| binding.interface.is_none() && path.needed(binding));
        let chosen = self
            .bindings
            .iter()
            .find(|binding| match &binding.interface {
                Some(name) => {
                    interface == Some(name.as_str()) && (path.needed(binding) || wildcard_needed)
                }
                None => path.needed(binding),
            });
        let dispatch = path.dispatch_chain();
        let Some(binding) = chosen else {
            steps.push(chain_step(
                Step::new(
                    "endpoint",
                    0,
                    format!(
                        "no host endpoint with {} policy for this interface",
                        words(path)
                    ),
                ),
                dispatch,
            ));
            return ChainEnd::Returned;
        };
        if !path.needed(binding) {
            steps.push(chain_step(
                Step::new(
                    "endpoint",
                    0,
                    format!(
                        "{} has no {} policy: returned",
                        binding.describe(),
                        words(path)
                    ),
                ),
                dispatch,
            ));
            return ChainEnd::Returned;
        }
        let chain =
            crate::compile::names::endpoint_chain(path.chain_kind(), binding.interface.as_deref());
        let mut text = format!("{}: {}", binding.describe(), words(path));
        if binding.interface.is_none() && interface.is_none() {
            text.push_str(" (no interface given: one without an endpoint of its own)");
        }
        steps.push(chain_step(Step::new("endpoint", 0, text), &chain));
        self.endpoint_chain(path, binding, &chain, at, steps)
    }

    /// One endpoint's chain: invalid packets, failsafe ports, the tiers, the profile.
    fn endpoint_chain(
        &mut self,
        path: Path,
        binding: &Binding<'_>,
        chain: &str,
        at: &str,
        steps: &mut Vec<Step>,
    ) -> ChainEnd {
        let normal = path.is_normal();
        let direction = path.direction();
        if normal && path.enforced(binding) && self.packet.state == ConnState::Invalid {
            steps.push(chain_step(
                Step::new("invalid", 1, "conntrack finds the packet invalid: dropped"),
                chain,
            ));
            self.decide(
                Outcome::Dropped,
                at,
                "dropped: conntrack finds it invalid",
                None,
            );
            return ChainEnd::Dropped;
        }
        if !matches!(path, Path::ForwardIn | Path::ForwardOut)
            && let Some(words) = self.failsafe_words(path)
        {
            let accept = self.marks.accept;
            self.bits |= accept;
            let mut step = Step::new("failsafe", 1, format!("{words}: allowed before any policy"));
            step.marks.push(format!("accept={accept:#x}"));
            steps.push(chain_step(step, chain));
            self.decide(Outcome::Allowed, at, &format!("allowed: {words}"), None);
            return ChainEnd::Returned;
        }
        self.staged_pass(path, binding, chain, steps);
        self.bits &= !(self.marks.accept | self.marks.pass);
        let policies = path.policies(binding);
        for tier_policies in policies.chunk_by(|a, b| a.tier == b.tier) {
            let tier = tier_policies[0].tier.clone();
            self.bits &= !self.marks.pass;
            let mut step = Step::new("tier", 1, format!("tier {tier}"));
            step.tier = Some(tier.clone());
            steps.push(chain_step(step, chain));
            for policy in tier_policies {
                if self.bits & self.marks.pass != 0 {
                    break;
                }
                match self.policy(policy, path, at, steps) {
                    ChainEnd::Dropped => return ChainEnd::Dropped,
                    ChainEnd::Returned if self.bits & self.marks.accept != 0 => {
                        return ChainEnd::Returned;
                    }
                    ChainEnd::Returned => {}
                }
            }
            if let ChainEnd::Dropped = self.end_of_tier(path, &tier, normal, chain, at, steps) {
                return ChainEnd::Dropped;
            }
        }
        if matches!(path, Path::NormalIn | Path::NormalOut) {
            return self.end_of_profiles(direction, binding, chain, at, steps);
        }
        let mut step = Step::new(
            "fallThrough",
            1,
            if policies.is_empty() {
                "no policy here: returned".to_owned()
            } else {
                format!(
                    "no policy decided: returned ({} has no end-of-tier drop)",
                    words(path)
                )
            },
        );
        step.chain = Some(chain.to_owned());
        steps.push(step);
        ChainEnd::Returned
    }

    /// What makes the packet a failsafe on `path`, in words: the failsafe port it uses, or
    /// IPv6 neighbour discovery.
    fn failsafe_words(&self, path: Path) -> Option<String> {
        if let Some(failsafe) = self.failsafe(path) {
            return Some(format!(
                "failsafe port {}/{}",
                failsafe.protocol.to_string().to_lowercase(),
                failsafe.port
            ));
        }
        let packet = self.packet;
        (packet.protocol == crate::model::Protocol::Icmpv6.number())
            .then_some(packet.icmp_type)
            .flatten()
            .filter(|kind| crate::compile::NEIGHBOUR_DISCOVERY.contains(kind))
            .map(|kind| format!("IPv6 neighbour discovery (ICMPv6 type {kind})"))
    }

    /// The failsafe port the packet uses on `path`, if any.
    fn failsafe(&self, path: Path) -> Option<&Failsafe> {
        let (own, reverse, net_end) = match path.direction() {
            Direction::Ingress => (
                &self.config.failsafe_inbound,
                &self.config.failsafe_outbound,
                End::Source,
            ),
            Direction::Egress => (
                &self.config.failsafe_outbound,
                &self.config.failsafe_inbound,
                End::Destination,
            ),
        };
        let packet = self.packet;
        let fits = |failsafe: &&Failsafe, port: Option<u16>| {
            let peer = match net_end {
                End::Source => packet.src,
                End::Destination => packet.dst,
            };
            failsafe.protocol.number() == packet.protocol
                && port == Some(failsafe.port)
                && failsafe.net.is_none_or(|net| net.contains(&peer))
        };
        own.iter()
            .find(|failsafe| fits(failsafe, packet.dport))
            .or_else(|| {
                // In raw, replies of the other direction's failsafe connections, by source port.
                (path.table() == crate::ruleset::Table::Raw)
                    .then(|| reverse.iter().find(|failsafe| fits(failsafe, packet.sport)))
                    .flatten()
            })
    }

    /// One policy's chain: its rules in order until one decides.
    fn policy(&mut self, policy: &Policy, path: Path, at: &str, steps: &mut Vec<Step>) -> ChainEnd {
        let direction = path.direction();
        let rules = policy.rules(direction).unwrap_or_default();
        let matches =
            |rule| rule_matches(self.model, self.selections, rule, self.packet, self.family);
        if !self.account && !rules.iter().any(matches) {
            // Nothing but the account of the walk depends on a policy no rule of which matches.
            return ChainEnd::Returned;
        }
        let chain = crate::compile::names::policy_chain(&policy.name, direction);
        let mut matched_any = false;
        let mut header = Step::new("policy", 2, format!("policy {}", policy.name));
        header.policy = Some(policy.name.clone());
        header.tier = Some(policy.tier.clone());
        header.chain = Some(chain.clone());
        steps.push(header);
        for (index, rule) in rules.iter().enumerate() {
            if !rule_matches(self.model, self.selections, rule, self.packet, self.family) {
                continue;
            }
            matched_any = true;
            let scope = PolicyScope {
                policy,
                path,
                chain: &chain,
                at,
            };
            let end = self.rule_matched(&scope, index, rule, steps);
            if let Some(end) = end {
                return end;
            }
        }
        let text = if rules.is_empty() {
            "no rules: returned".to_owned()
        } else if matched_any {
            "no other rule matched: returned".to_owned()
        } else {
            "no rule matched: returned".to_owned()
        };
        let mut step = Step::new("noMatch", 3, text);
        step.policy = Some(policy.name.clone());
        step.chain = Some(chain);
        steps.push(step);
        ChainEnd::Returned
    }

    /// A rule that matched: its marks, logs and verdict. `None` for a Log rule (the chain goes
    /// on).
    fn rule_matched(
        &mut self,
        scope: &PolicyScope<'_>,
        index: usize,
        rule: &model::Rule,
        steps: &mut Vec<Step>,
    ) -> Option<ChainEnd> {
        let PolicyScope {
            policy,
            path,
            chain,
            at,
        } = *scope;
        let direction = path.direction();
        let group = self.nflog_group(direction);
        let logs = |action: model::Action| self.config.log_actions.contains(&action);
        let (bit, bit_name, letter, logged) = match rule.action {
            model::Action::Allow => (self.marks.accept, "accept", 'A', logs(model::Action::Allow)),
            model::Action::Pass => (self.marks.pass, "pass", 'P', logs(model::Action::Pass)),
            model::Action::Deny => (self.marks.drop, "drop", 'D', logs(model::Action::Deny)),
            model::Action::Log => (0, "", 'L', self.config.log_target == LogTarget::Nflog),
        };
        let prefix = nflog_prefix(letter, direction, Some(index), &policy.name);
        let consequence = match rule.action {
            model::Action::Allow => "allowed: the endpoint chain returns",
            model::Action::Pass => "passed: the rest of this tier is skipped",
            model::Action::Deny => "dropped",
            model::Action::Log if !logged => "logged to the kernel log; the next rule goes on",
            model::Action::Log => "logged; the next rule goes on",
        };
        let mut step = Step::new(
            "rule",
            3,
            format!("rule {index} ({}) matched: {consequence}", rule.action),
        );
        step.policy = Some(policy.name.clone());
        step.tier = Some(policy.tier.clone());
        step.rule = Some(index);
        step.action = Some(rule.action.to_string());
        step.chain = Some(chain.to_owned());
        if bit != 0 {
            self.bits |= bit;
            step.marks.push(format!("{bit_name}={bit:#x}"));
        }
        if logged {
            self.log_in(&mut step, group, &prefix);
        }
        steps.push(step);
        let untracked = matches!(path, Path::UntrackedIn | Path::UntrackedOut);
        let reason = |verb: &str| {
            format!(
                "{verb} by rule {index} of policy {} (tier {})",
                policy.name, policy.tier
            )
        };
        let by = Some(By {
            policy: policy.name.clone(),
            tier: policy.tier.clone(),
            rule: Some(index),
            prefix: logged.then(|| prefix.clone()),
        });
        match rule.action {
            model::Action::Log => None,
            model::Action::Pass => Some(ChainEnd::Returned),
            model::Action::Allow => {
                let mut words = reason("allowed");
                if untracked {
                    words.push_str(", exempt from connection tracking");
                }
                self.decide(Outcome::Allowed, at, &words, by);
                Some(ChainEnd::Returned)
            }
            model::Action::Deny => {
                self.decide(Outcome::Dropped, at, &reason("dropped"), by);
                Some(ChainEnd::Dropped)
            }
        }
    }

    /// The end of a tier: for normal policy, its default action on what no policy passed.
    fn end_of_tier(
        &mut self,
        path: Path,
        tier: &str,
        normal: bool,
        chain: &str,
        at: &str,
        steps: &mut Vec<Step>,
    ) -> ChainEnd {
        let passed = self.bits & self.marks.pass != 0;
        if !normal || passed {
            return ChainEnd::Returned;
        }
        let direction = path.direction();
        let group = self.nflog_group(direction);
        let denies = self
            .model
            .tier(tier)
            .is_none_or(|tier| tier.default_action == TierAction::Deny);
        if denies {
            let logged = self.config.log_actions.contains(&model::Action::Deny);
            let prefix = nflog_prefix('D', direction, None, tier);
            let mut step = Step::new(
                "endOfTier",
                1,
                format!("end of tier {tier}: no policy allowed or passed the packet: dropped"),
            );
            step.tier = Some(tier.to_owned());
            step.chain = Some(chain.to_owned());
            if logged {
                self.log_in(&mut step, group, &prefix);
            }
            steps.push(step);
            self.decide(
                Outcome::Dropped,
                at,
                &format!("dropped at the end of tier {tier} (its default action is Deny)"),
                Some(By {
                    policy: String::new(),
                    tier: tier.to_owned(),
                    rule: None,
                    prefix: logged.then_some(prefix),
                }),
            );
            return ChainEnd::Dropped;
        }
        let mut step = Step::new(
            "endOfTier",
            1,
            format!("end of tier {tier}: its default action is Pass: the next tier decides"),
        );
        step.tier = Some(tier.to_owned());
        if self.config.log_actions.contains(&model::Action::Pass) {
            let prefix = nflog_prefix('P', direction, None, tier);
            self.log_in(&mut step, group, &prefix);
        }
        steps.push(step);
        ChainEnd::Returned
    }

    /// The end of the chain of the host's own traffic: the profile.
    fn end_of_profiles(
        &mut self,
        direction: Direction,
        binding: &Binding<'_>,
        chain: &str,
        at: &str,
        steps: &mut Vec<Step>,
    ) -> ChainEnd {
        if binding.endpoint.default_allow {
            let mut step = Step::new(
                "profile",
                1,
                "allowed by profile projectcalico-default-allow: returned",
            );
            step.chain = Some(chain.to_owned());
            steps.push(step);
            self.decide(
                Outcome::Allowed,
                at,
                "allowed by profile projectcalico-default-allow",
                None,
            );
            return ChainEnd::Returned;
        }
        let group = self.nflog_group(direction);
        let prefix = match direction {
            Direction::Ingress => "DRI",
            Direction::Egress => "DRE",
        }
        .to_owned();
        let logged = self.config.log_actions.contains(&model::Action::Deny);
        let mut step = Step::new(
            "profile",
            1,
            "no profile allows it (the endpoint has none): dropped",
        );
        step.chain = Some(chain.to_owned());
        if logged {
            self.log_in(&mut step, group, &prefix);
        }
        steps.push(step);
        self.decide(
            Outcome::Dropped,
            at,
            "dropped: no profile matched (an explicit host endpoint has none)",
            Some(By {
                policy: String::new(),
                tier: String::new(),
                rule: None,
                prefix: logged.then_some(prefix),
            }),
        );
        ChainEnd::Dropped
    }

    fn nflog_group(&self, direction: Direction) -> u16 {
        match direction {
            Direction::Ingress => self.config.nflog_group,
            Direction::Egress => self.config.nflog_group_egress,
        }
    }

    fn log(&mut self, group: u16, prefix: &str) {
        self.logs.push(Logged {
            group,
            prefix: prefix.to_owned(),
        });
    }

    /// Logs `prefix` to `group` at `step`, which says so.
    fn log_in(&mut self, step: &mut Step, group: u16, prefix: &str) {
        self.log(group, prefix);
        step.nflog_prefix = Some(prefix.to_owned());
        step.nflog_group = Some(group);
    }

    /// Records a decision. A drop is final; an allow replaces an earlier "not ours" or allow
    /// (the later table's word is the one that counts for what reaches the host).
    fn decide(&mut self, outcome: Outcome, at: &str, reason: &str, by: Option<By>) {
        let by = by.unwrap_or_default();
        let nonempty = |text: String| (!text.is_empty()).then_some(text);
        let verdict = Verdict {
            outcome,
            reason: reason.to_owned(),
            at: Some(at.to_owned()),
            policy: nonempty(by.policy),
            tier: nonempty(by.tier),
            rule: by.rule,
            nflog_prefix: by.prefix,
        };
        match &self.decision {
            Some(earlier) if earlier.outcome == Outcome::Dropped => {}
            _ => self.decision = Some(verdict),
        }
    }
}

/// The policy chain a rule is evaluated in.
struct PolicyScope<'s> {
    policy: &'s Policy,
    path: Path,
    chain: &'s str,
    at: &'s str,
}

/// Who decided.
#[derive(Default)]
struct By {
    policy: String,
    tier: String,
    rule: Option<usize>,
    prefix: Option<String>,
}

fn chain_step(mut step: Step, chain: &str) -> Step {
    step.chain = Some(chain.to_owned());
    step
}

/// The kind of policy a path judges, in words.
fn words(path: Path) -> &'static str {
    match path {
        Path::UntrackedIn => "untracked ingress",
        Path::UntrackedOut => "untracked egress",
        Path::PreDnatIn => "pre-DNAT ingress",
        Path::NormalIn => "normal ingress",
        Path::NormalOut => "normal egress",
        Path::ForwardIn => "forwarded ingress",
        Path::ForwardOut => "forwarded egress",
    }
}

#[cfg(test)]
mod tests;
