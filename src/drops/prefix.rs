//! NFLOG prefixes back to what logged them: decoding Calico's format, and resolving a prefix
//! against the policies by computing every prefix their compiled rules would emit (hashed ones
//! included), so that nothing is guessed.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::compile::rules::{MAX_NFLOG_PREFIX, nflog_prefix};
use crate::config::{Config, LogTarget};
use crate::model::{self, DEFAULT_TIER, Direction, Model};

/// What the name part of a staged policy's prefix starts with (`DPI0|staged:<name>`).
pub const STAGED_MARK: &str = "staged:";

/// The action a prefix's first letter names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggedAction {
    /// `A`: allowed.
    Allow,
    /// `D`: denied.
    Deny,
    /// `P`: passed to the next tier.
    Pass,
    /// `L`: a Log rule; the packet went on.
    Log,
}

impl LoggedAction {
    fn from_letter(letter: u8) -> Option<LoggedAction> {
        Some(match letter {
            b'A' => LoggedAction::Allow,
            b'D' => LoggedAction::Deny,
            b'P' => LoggedAction::Pass,
            b'L' => LoggedAction::Log,
            _ => return None,
        })
    }

    fn of_rule(action: model::Action) -> LoggedAction {
        match action {
            model::Action::Allow => LoggedAction::Allow,
            model::Action::Deny => LoggedAction::Deny,
            model::Action::Pass => LoggedAction::Pass,
            model::Action::Log => LoggedAction::Log,
        }
    }

    fn letter(self) -> char {
        match self {
            LoggedAction::Allow => 'A',
            LoggedAction::Deny => 'D',
            LoggedAction::Pass => 'P',
            LoggedAction::Log => 'L',
        }
    }

    /// The past participle: "denied", "allowed", …
    pub fn done(self) -> &'static str {
        match self {
            LoggedAction::Allow => "allowed",
            LoggedAction::Deny => "denied",
            LoggedAction::Pass => "passed",
            LoggedAction::Log => "logged",
        }
    }
}

/// What a prefix says by itself, before it is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// `<A|D|P|L>P<I|E><index>|<name>`: a policy rule.
    Rule {
        /// The action letter.
        action: LoggedAction,
        /// `I` or `E`.
        direction: Direction,
        /// The rule's index in its policy.
        index: usize,
        /// The policy's name (without `staged:`).
        name: String,
        /// Whether the name started with `staged:`.
        staged: bool,
    },
    /// `<D|P>P<I|E>|<tier>`: the end of a tier.
    EndOfTier {
        /// The action letter.
        action: LoggedAction,
        /// `I` or `E`.
        direction: Direction,
        /// The tier's name (without `staged:`).
        tier: String,
        /// Whether the name started with `staged:`.
        staged: bool,
    },
    /// `DRI` / `DRE`: no profile matched.
    NoProfile {
        /// `I` or `E`.
        direction: Direction,
    },
    /// Shortened with a hash (63 characters, `_` at 10 and 52): only a lookup can tell.
    Hashed,
    /// Not in Calico's format.
    Foreign,
}

/// Whether `prefix` has the shape [`crate::compile::rules::shorten_prefix`] gives.
pub fn is_hashed(prefix: &str) -> bool {
    let bytes = prefix.as_bytes();
    bytes.len() == MAX_NFLOG_PREFIX && bytes[10] == b'_' && bytes[52] == b'_'
}

/// Decodes a prefix by its format alone.
pub fn decode(prefix: &str) -> Decoded {
    match prefix {
        "DRI" => {
            return Decoded::NoProfile {
                direction: Direction::Ingress,
            };
        }
        "DRE" => {
            return Decoded::NoProfile {
                direction: Direction::Egress,
            };
        }
        _ => {}
    }
    if is_hashed(prefix) {
        return Decoded::Hashed;
    }
    let Some((head, name)) = prefix.split_once('|') else {
        return Decoded::Foreign;
    };
    let bytes = head.as_bytes();
    if bytes.len() < 3 || bytes[1] != b'P' || name.is_empty() {
        return Decoded::Foreign;
    }
    let Some(action) = LoggedAction::from_letter(bytes[0]) else {
        return Decoded::Foreign;
    };
    let direction = match bytes[2] {
        b'I' => Direction::Ingress,
        b'E' => Direction::Egress,
        _ => return Decoded::Foreign,
    };
    let (staged, name) = match name.strip_prefix(STAGED_MARK) {
        Some(rest) if !rest.is_empty() => (true, rest.to_owned()),
        Some(_) => return Decoded::Foreign,
        None => (false, name.to_owned()),
    };
    let digits = &head[3..];
    if digits.is_empty() {
        return match action {
            LoggedAction::Deny | LoggedAction::Pass => Decoded::EndOfTier {
                action,
                direction,
                tier: name,
                staged,
            },
            _ => Decoded::Foreign,
        };
    }
    match digits.parse::<usize>() {
        Ok(index) if digits.bytes().all(|b| b.is_ascii_digit()) => Decoded::Rule {
            action,
            direction,
            index,
            name,
            staged,
        },
        _ => Decoded::Foreign,
    }
}

/// What logged a packet, in the policies' terms.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Verdict {
    /// A policy rule.
    Rule {
        policy: String,
        /// Its tier (unknown for a staged policy not in the policy files).
        tier: Option<String>,
        /// The rule list.
        direction: Direction,
        /// The rule's index in that list (from 0).
        rule: usize,
        /// What it did.
        action: LoggedAction,
        /// A staged policy: it only says what it would have done.
        staged: bool,
    },
    /// The end of a tier: no policy of the tier decided.
    EndOfTier {
        tier: String,
        direction: Direction,
        /// Deny (the tier's default action) or Pass.
        action: LoggedAction,
        /// A staged end of tier.
        staged: bool,
    },
    /// The end of the endpoint's chain: no profile allowed it.
    NoProfile { direction: Direction },
    /// A prefix the current policies do not emit.
    Unknown {
        /// Why it could not be told.
        reason: String,
    },
}

impl Verdict {
    /// Whether it is a staged policy's "would deny" (or would-be anything).
    pub fn is_staged(&self) -> bool {
        matches!(
            self,
            Verdict::Rule { staged: true, .. } | Verdict::EndOfTier { staged: true, .. }
        )
    }

    /// The policy, if a rule of one logged it.
    pub fn policy(&self) -> Option<&str> {
        match self {
            Verdict::Rule { policy, .. } => Some(policy),
            _ => None,
        }
    }

    /// The verdict in words, without the prefix.
    pub fn words(&self) -> String {
        match self {
            Verdict::Rule {
                policy,
                tier,
                direction,
                rule,
                action,
                staged,
            } => {
                let tier = tier
                    .as_deref()
                    .map(|t| format!(" (tier {t})"))
                    .unwrap_or_default();
                if *staged {
                    format!(
                        "staged (would {}): staged policy {policy}{tier} {direction} rule {rule}",
                        would(*action)
                    )
                } else {
                    format!(
                        "{} by policy {policy}{tier} {direction} rule {rule}",
                        action.done()
                    )
                }
            }
            Verdict::EndOfTier {
                tier,
                direction,
                action,
                staged,
            } => {
                let what = match action {
                    LoggedAction::Pass => "passed to the next tier".to_owned(),
                    _ => "denied".to_owned(),
                };
                if *staged {
                    format!(
                        "staged (would {}): end of staged tier {tier} {direction}, no staged policy decided",
                        would(*action)
                    )
                } else {
                    format!(
                        "{what} at the end of tier {tier} {direction}: no policy of the tier allowed or passed it"
                    )
                }
            }
            Verdict::NoProfile { direction } => {
                format!(
                    "denied {direction}: no policy or profile allowed it (end of the endpoint's rules)"
                )
            }
            Verdict::Unknown { reason } => reason.clone(),
        }
    }
}

fn would(action: LoggedAction) -> &'static str {
    match action {
        LoggedAction::Allow => "allow",
        LoggedAction::Deny => "deny",
        LoggedAction::Pass => "pass",
        LoggedAction::Log => "log",
    }
}

/// Every prefix a policy set's compiled rules may emit, and what each means.
#[derive(Clone, Debug, Default)]
pub struct Resolver {
    known: HashMap<String, Verdict>,
}

impl Resolver {
    /// The prefixes of `model` compiled with `config` (which actions log).
    pub fn new(model: &Model, config: &Config) -> Resolver {
        let mut known = HashMap::new();
        let logs = &config.log_actions;
        let mut tiers: BTreeSet<&str> = model.tiers().iter().map(|t| t.name.as_str()).collect();
        tiers.insert(DEFAULT_TIER);
        let mut staged_tiers: BTreeSet<&str> = BTreeSet::new();
        // Enforced policies log what `logActions` lists (and Log rules); staged ones also
        // always log a Deny, under `staged:<name>`.
        let enforced = model.policies().iter().map(|policy| (policy, false));
        let staged = model.staged_policies().iter().map(|policy| (policy, true));
        for (policy, is_staged) in enforced.chain(staged) {
            if is_staged {
                staged_tiers.insert(&policy.tier);
            } else {
                tiers.insert(&policy.tier);
            }
            let name = if is_staged {
                crate::compile::rules::staged_name(&policy.name)
            } else {
                policy.name.clone()
            };
            for direction in [Direction::Ingress, Direction::Egress] {
                let rules = policy.rules(direction).unwrap_or_default();
                for (index, rule) in rules.iter().enumerate() {
                    // A Log rule writing to the kernel log emits no NFLOG prefix.
                    let always = (rule.action == model::Action::Log
                        && config.log_target == LogTarget::Nflog)
                        || (is_staged && rule.action == model::Action::Deny);
                    if rule.action == model::Action::Log && !always {
                        continue;
                    }
                    if !always && !logs.contains(&rule.action) {
                        continue;
                    }
                    let action = LoggedAction::of_rule(rule.action);
                    known.insert(
                        nflog_prefix(action.letter(), direction, Some(index), &name),
                        Verdict::Rule {
                            policy: policy.name.clone(),
                            tier: Some(policy.tier.clone()),
                            direction,
                            rule: index,
                            action,
                            staged: is_staged,
                        },
                    );
                }
            }
        }
        // A tier ends in its default action: a drop (`DP…|tier`, logged when Deny logs; a
        // staged one always, as `DP…|staged:<tier>`) or a pass (`PP…|tier`, when Pass logs).
        let ends = tiers
            .into_iter()
            .map(|tier| (tier, false))
            .chain(staged_tiers.into_iter().map(|tier| (tier, true)));
        for (tier, is_staged) in ends {
            let passes = model
                .tier(tier)
                .is_some_and(|t| t.default_action == model::TierAction::Pass);
            let (action, logged) = if passes {
                (LoggedAction::Pass, model::Action::Pass)
            } else {
                (LoggedAction::Deny, model::Action::Deny)
            };
            let always = is_staged && !passes;
            if !always && !logs.contains(&logged) {
                continue;
            }
            let name = if is_staged {
                crate::compile::rules::staged_name(tier)
            } else {
                tier.to_owned()
            };
            for direction in [Direction::Ingress, Direction::Egress] {
                known.insert(
                    nflog_prefix(action.letter(), direction, None, &name),
                    Verdict::EndOfTier {
                        tier: tier.to_owned(),
                        direction,
                        action,
                        staged: is_staged,
                    },
                );
            }
        }
        Resolver { known }
    }

    /// What `prefix` means under these policies. A staged prefix not in them is decoded from
    /// its text (the name is spelled out in it); a hashed or foreign one, or one whose policy
    /// rule the policies do not have, is unknown.
    pub fn resolve(&self, prefix: &str) -> Verdict {
        if let Some(verdict) = self.known.get(prefix) {
            return verdict.clone();
        }
        let unknown = |why: &str| Verdict::Unknown {
            reason: format!("unknown prefix `{prefix}` ({why})"),
        };
        match decode(prefix) {
            Decoded::NoProfile { direction } => Verdict::NoProfile { direction },
            Decoded::Rule {
                action,
                direction,
                index,
                name,
                staged: true,
            } => Verdict::Rule {
                policy: name,
                tier: None,
                direction,
                rule: index,
                action,
                staged: true,
            },
            Decoded::EndOfTier {
                action,
                direction,
                tier,
                staged: true,
            } => Verdict::EndOfTier {
                tier,
                direction,
                action,
                staged: true,
            },
            Decoded::Rule { .. } | Decoded::EndOfTier { .. } => {
                unknown("not a rule of the current policies")
            }
            Decoded::Hashed => unknown("hashed, and no rule of the current policies has it"),
            Decoded::Foreign => unknown("not nodeport-guard's format"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_calico_prefixes() {
        assert_eq!(
            decode("DPI1|allow-cluster"),
            Decoded::Rule {
                action: LoggedAction::Deny,
                direction: Direction::Ingress,
                index: 1,
                name: "allow-cluster".into(),
                staged: false
            }
        );
        assert_eq!(
            decode("LPE12|p"),
            Decoded::Rule {
                action: LoggedAction::Log,
                direction: Direction::Egress,
                index: 12,
                name: "p".into(),
                staged: false
            }
        );
        assert_eq!(
            decode("DPE|default"),
            Decoded::EndOfTier {
                action: LoggedAction::Deny,
                direction: Direction::Egress,
                tier: "default".into(),
                staged: false
            }
        );
        assert_eq!(
            decode("DRI"),
            Decoded::NoProfile {
                direction: Direction::Ingress
            }
        );
        assert_eq!(
            decode("DRE"),
            Decoded::NoProfile {
                direction: Direction::Egress
            }
        );
        for foreign in [
            "",
            "DROP",
            "DXI0|p",
            "DPX0|p",
            "DPI0|",
            "DPI1x|p",
            "XPI0|p",
            "API|t",
            "DPI+1|p",
            "DPI0|staged:",
        ] {
            assert_eq!(decode(foreign), Decoded::Foreign, "{foreign}");
        }
    }

    #[test]
    fn decodes_staged_prefixes() {
        assert_eq!(
            decode("DPI0|staged:audit"),
            Decoded::Rule {
                action: LoggedAction::Deny,
                direction: Direction::Ingress,
                index: 0,
                name: "audit".into(),
                staged: true
            }
        );
        assert_eq!(
            decode("DPI|staged:security"),
            Decoded::EndOfTier {
                action: LoggedAction::Deny,
                direction: Direction::Ingress,
                tier: "security".into(),
                staged: true
            }
        );
        let resolver = Resolver::default();
        let verdict = resolver.resolve("DPI0|staged:audit");
        assert!(verdict.is_staged());
        assert_eq!(
            verdict.words(),
            "staged (would deny): staged policy audit ingress rule 0"
        );
        let end = resolver.resolve("DPI|staged:security");
        assert!(end.is_staged());
        assert!(
            end.words()
                .starts_with("staged (would deny): end of staged tier security")
        );
    }

    #[test]
    fn hashed_prefixes_are_recognised() {
        let long = nflog_prefix('D', Direction::Ingress, Some(3), &"x".repeat(100));
        assert!(is_hashed(&long));
        assert_eq!(decode(&long), Decoded::Hashed);
        assert!(!is_hashed("DPI1|short"));
    }

    fn model_of(yaml: &str) -> Model {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("p.yaml"), yaml).expect("write");
        let set = crate::policy_set::load(&[dir.path().to_path_buf()]);
        assert!(set.is_valid(), "{:?}", set.diagnostics);
        set.model
    }

    const POLICIES: &str = "\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: allow-cluster}
spec:
  selector: all()
  ingress:
  - action: Allow
    protocol: TCP
    source: {nets: [192.0.2.0/24]}
  - action: Log
  - action: Deny
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: a-policy-with-a-very-long-name-that-makes-the-prefix-too-long-for-the-kernel}
spec:
  selector: all()
  egress:
  - action: Deny
";

    #[test]
    fn resolves_every_prefix_the_policies_emit() {
        let model = model_of(POLICIES);
        let resolver = Resolver::new(&model, &Config::default());
        let verdict = resolver.resolve("DPI2|allow-cluster");
        assert_eq!(
            verdict,
            Verdict::Rule {
                policy: "allow-cluster".into(),
                tier: Some("default".into()),
                direction: Direction::Ingress,
                rule: 2,
                action: LoggedAction::Deny,
                staged: false
            }
        );
        assert_eq!(
            verdict.words(),
            "denied by policy allow-cluster (tier default) ingress rule 2"
        );
        assert!(matches!(
            resolver.resolve("LPI1|allow-cluster"),
            Verdict::Rule {
                action: LoggedAction::Log,
                ..
            }
        ));
        // Allow does not log by default, and rule 0 is no Deny: neither prefix is emitted.
        assert!(matches!(
            resolver.resolve("API0|allow-cluster"),
            Verdict::Unknown { .. }
        ));
        assert!(matches!(
            resolver.resolve("DPI0|allow-cluster"),
            Verdict::Unknown { .. }
        ));
        let long = "a-policy-with-a-very-long-name-that-makes-the-prefix-too-long-for-the-kernel";
        let hashed = nflog_prefix('D', Direction::Egress, Some(0), long);
        assert!(is_hashed(&hashed));
        assert_eq!(resolver.resolve(&hashed).policy(), Some(long));
        let other = nflog_prefix('D', Direction::Egress, Some(1), long);
        let Verdict::Unknown { reason } = resolver.resolve(&other) else {
            panic!("a hash of no rule resolved")
        };
        assert!(reason.starts_with("unknown prefix `"), "{reason}");
        assert!(reason.contains("hashed"), "{reason}");
        assert_eq!(
            resolver.resolve("DPE|default"),
            Verdict::EndOfTier {
                tier: "default".into(),
                direction: Direction::Egress,
                action: LoggedAction::Deny,
                staged: false
            }
        );
        assert_eq!(
            resolver.resolve("DRI"),
            Verdict::NoProfile {
                direction: Direction::Ingress
            }
        );
        assert!(matches!(
            resolver.resolve("DPI0|gone"),
            Verdict::Unknown { .. }
        ));
        assert!(matches!(
            resolver.resolve("PPI|default"),
            Verdict::Unknown { .. }
        ));
    }

    #[test]
    fn log_rules_writing_to_the_kernel_log_emit_no_prefix() {
        let config = Config {
            log_target: LogTarget::KernelLog {
                prefix: "calico-packet: ".into(),
                level: 5,
            },
            ..Config::default()
        };
        let resolver = Resolver::new(&model_of(POLICIES), &config);
        assert!(matches!(
            resolver.resolve("LPI1|allow-cluster"),
            Verdict::Unknown { .. }
        ));
        assert!(matches!(
            resolver.resolve("DPI2|allow-cluster"),
            Verdict::Rule { .. }
        ));
    }

    #[test]
    fn a_prefix_of_sixty_three_characters_is_hashed_so_no_plain_one_looks_hashed() {
        // nflogprefix_test.go: "Policy name makes raw prefix 63 bytes - will hash".
        let name = "012345678901234567890123456789012345678901234567890123456";
        let hashed = nflog_prefix('D', Direction::Ingress, Some(88), name);
        assert_eq!(
            hashed,
            "DPI88|0123_S7GBfc7R7_4bzrXpbzglqoJrRG_UxIP0CuYjRWshz_7890123456"
        );
        assert!(is_hashed(&hashed));
        // A policy of that name logs it, and `drops` names the policy.
        let mut rules = String::new();
        for _ in 0..88 {
            rules.push_str("  - {action: Allow, protocol: TCP, destination: {ports: [1]}}\n");
        }
        let yaml = format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: \"{name}\"}}\nspec:\n  selector: all()\n  ingress:\n{rules}  - {{action: Deny}}\n"
        );
        let resolver = Resolver::new(&model_of(&yaml), &Config::default());
        assert_eq!(resolver.resolve(&hashed).policy(), Some(name));
        // One character fewer is written as it is, and is no hashed prefix.
        let plain = nflog_prefix('D', Direction::Ingress, Some(88), &name[1..]);
        assert_eq!(plain.len(), 62);
        assert_eq!(
            decode(&plain),
            Decoded::Rule {
                action: LoggedAction::Deny,
                direction: Direction::Ingress,
                index: 88,
                name: name[1..].to_owned(),
                staged: false
            }
        );
    }

    #[test]
    fn staged_prefixes_resolve_to_their_policy_and_tier_even_when_hashed() {
        let long = "staged-whitelist-with-a-name-long-enough-to-be-hashed-in-the-prefix";
        let yaml = format!(
            "apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {{name: {long}}}
spec:
  selector: all()
  types: [Ingress]
  ingress:
  - action: Allow
    source: {{nets: [192.0.2.0/24]}}
  - action: Deny
"
        );
        let resolver = Resolver::new(&model_of(&yaml), &Config::default());
        let staged = crate::compile::rules::staged_name(long);
        let hashed = nflog_prefix('D', Direction::Ingress, Some(1), &staged);
        assert!(is_hashed(&hashed));
        let verdict = resolver.resolve(&hashed);
        assert!(verdict.is_staged(), "{verdict:?}");
        assert_eq!(verdict.policy(), Some(long));
        assert_eq!(
            resolver.resolve("DPI|staged:default"),
            Verdict::EndOfTier {
                tier: "default".into(),
                direction: Direction::Ingress,
                action: LoggedAction::Deny,
                staged: true
            }
        );
    }

    #[test]
    fn logged_allows_and_passes_resolve_when_log_actions_say_so() {
        let tiered = format!(
            "{POLICIES}---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {{name: security}}
spec: {{order: 100, defaultAction: Pass}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: security.block}}
spec:
  tier: security
  selector: all()
  ingress:
  - action: Pass
"
        );
        let model = model_of(&tiered);
        let mut config = Config::default();
        config.log_actions.insert(model::Action::Allow);
        config.log_actions.insert(model::Action::Pass);
        let resolver = Resolver::new(&model, &config);
        assert_eq!(
            resolver.resolve("API0|allow-cluster").words(),
            "allowed by policy allow-cluster (tier default) ingress rule 0"
        );
        assert_eq!(
            resolver.resolve("PPI0|security.block").words(),
            "passed by policy security.block (tier security) ingress rule 0"
        );
        // A Pass tier ends in a pass, the default tier in a drop; never the other way round.
        assert!(matches!(
            resolver.resolve("PPI|security"),
            Verdict::EndOfTier {
                action: LoggedAction::Pass,
                ..
            }
        ));
        assert!(matches!(
            resolver.resolve("DPI|security"),
            Verdict::Unknown { .. }
        ));
        assert!(matches!(
            resolver.resolve("PPI|default"),
            Verdict::Unknown { .. }
        ));
        assert!(matches!(
            resolver.resolve("DPE|default"),
            Verdict::EndOfTier {
                action: LoggedAction::Deny,
                ..
            }
        ));
    }

    #[test]
    fn verdicts_serialise_with_camel_case_keys() {
        let verdict = Verdict::EndOfTier {
            tier: "t".into(),
            direction: Direction::Ingress,
            action: LoggedAction::Deny,
            staged: false,
        };
        assert_eq!(
            serde_json::to_string(&verdict).expect("json"),
            r#"{"kind":"endOfTier","tier":"t","direction":"ingress","action":"deny","staged":false}"#
        );
    }
}
