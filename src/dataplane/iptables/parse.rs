//! Reading back what the kernel holds of ours: `iptables-save` and `ipset save` text parsed
//! into a [`State`]. Pure: the dataplane runs the programs and hands their output here.
//!
//! Only our own things are kept: chains named `npg-…`, our rules in other chains (recognised
//! by their `npg:` comment or by jumping to one of our chains), and sets named `npg…`.
//! Everything else other programs put there (kube-proxy, docker, flannel, the operator's own
//! rules) is skipped, whatever it looks like.

use std::collections::BTreeSet;

use crate::dataplane::ObserveError;
use crate::model::IpFamily;
use crate::ruleset::{CHAIN_PREFIX, Table, is_our_set};
use crate::state::{Counters, HookRule, RuleLine, SetState, State, TableKey, TableState};

/// The hash in a rule's `npg:` comment, if it has one.
pub fn rule_hash(rule: &str) -> Option<crate::state::RuleHash> {
    let start = rule.find("--comment ")? + "--comment ".len();
    let rest = rule[start..].trim_start_matches('"');
    let hash = rest.strip_prefix(crate::state::HASH_PREFIX)?;
    let end = hash
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(hash.len());
    (end > 0).then(|| crate::state::RuleHash::from(&hash[..end]))
}

/// The hash that `rule` (an `-A` line as `iptables-save` prints it, in `table`) would carry
/// if it were rendered as it reads: its body is the line without `-A <chain>` and with the
/// `npg:` hash taken out of its comment (see `render::render_rule`). `None` for a line of
/// another form.
fn printed_hash(table: Table, chain: &str, rule: &str) -> Option<String> {
    const COMMENT: &str = " -m comment --comment ";
    let rest = rule.strip_prefix("-A ")?.strip_prefix(chain)?;
    let at = rest.find(COMMENT)?;
    let (head, after) = (&rest[..at], &rest[at + COMMENT.len()..]);
    // The comment as `xtables_save_string` printed it: quoted with `\` escapes, or bare.
    let mut comment = String::new();
    let used = if let Some(quoted) = after.strip_prefix('"') {
        let mut chars = quoted.char_indices();
        let mut end = None;
        while let Some((index, c)) = chars.next() {
            match c {
                '\\' => comment.push(chars.next()?.1),
                '"' => {
                    end = Some(index + 2);
                    break;
                }
                _ => comment.push(c),
            }
        }
        end?
    } else {
        let end = after.find(' ').unwrap_or(after.len());
        comment.push_str(&after[..end]);
        end
    };
    let tail = &after[used..];
    let words = comment
        .strip_prefix(crate::state::HASH_PREFIX)?
        .split_once(' ')
        .map(|(_, words)| words);
    let mut body = String::with_capacity(rest.len());
    body.push_str(head);
    if let Some(words) = words {
        body.push_str(COMMENT);
        super::render::push_saved_string(&mut body, words);
    }
    body.push_str(tail);
    Some(crate::state::rule_hash(table, chain, &body))
}

/// The hash of one of our rules as read: its comment's, marked changed when the rule as
/// printed does not hash to it (see [`crate::state::observed_hash`]).
fn checked_hash(table: Table, chain: &str, rule: &str) -> Option<crate::state::RuleHash> {
    let hash = rule_hash(rule)?;
    let printed = printed_hash(table, chain, rule).unwrap_or_default();
    Some(crate::state::observed_hash(&hash, &printed))
}

/// Whether a rule in a chain we do not own is ours: it carries our hash or jumps to our chain.
fn is_ours(rule: &str) -> bool {
    if rule_hash(rule).is_some() {
        return true;
    }
    let mut words = rule.split_whitespace();
    while let Some(word) = words.next() {
        if matches!(word, "-j" | "--jump" | "-g" | "--goto")
            && words
                .next()
                .is_some_and(|target| target.starts_with(CHAIN_PREFIX))
        {
            return true;
        }
    }
    false
}

/// Splits `[packets:bytes] rest` into counters and rest.
fn split_counters(line: &str) -> (Option<Counters>, &str) {
    if let Some(rest) = line.strip_prefix('[')
        && let Some((numbers, rule)) = rest.split_once("] ")
        && let Some((packets, bytes)) = numbers.split_once(':')
        && let (Ok(packets), Ok(bytes)) = (packets.parse(), bytes.parse())
    {
        return (Some(Counters { packets, bytes }), rule);
    }
    (None, line)
}

/// One table's chains of ours as they are read, before they are shared.
type Chains = std::collections::BTreeMap<String, Vec<RuleLine>>;

/// Parses `iptables-save` output (with or without `-c`) for one family into `state`, keeping
/// only the tables nodeport-guard uses.
pub fn parse_iptables_save(
    text: &str,
    family: IpFamily,
    state: &mut State,
) -> Result<(), ObserveError> {
    // The table being read, with its chains of ours (every declared one, empty or not).
    let mut current: Option<(Table, TableState, Chains)> = None;
    let mut positions: std::collections::BTreeMap<String, usize> = Default::default();
    let finish = |current: &mut Option<(Table, TableState, Chains)>, state: &mut State| {
        if let Some((table, mut table_state, chains)) = current.take() {
            table_state.chains = chains
                .into_iter()
                .map(|(name, rules)| (name, rules.into()))
                .collect();
            if !table_state.is_empty() {
                state.tables.insert(TableKey { family, table }, table_state);
            }
        }
    };
    for raw_line in text.lines() {
        let line = raw_line.trim_end();
        if let Some(name) = line.strip_prefix('*') {
            finish(&mut current, state);
            positions.clear();
            current = Table::ALL
                .into_iter()
                .find(|table| table.as_str() == name)
                .map(|table| (table, TableState::default(), Chains::new()));
            continue;
        }
        if line.starts_with('#') {
            if line.contains("is incompatible, use 'nft' tool") {
                return Err(ObserveError::Incompatible {
                    table: current
                        .as_ref()
                        .map_or_else(|| "a table".to_owned(), |(t, _, _)| t.to_string()),
                    line: line.to_owned(),
                });
            }
            continue;
        }
        let Some((table, table_state, chains)) = current.as_mut() else {
            continue;
        };
        if let Some(declaration) = line.strip_prefix(':') {
            let name = declaration.split_whitespace().next().unwrap_or_default();
            // A chain of ours that exists but is empty is still ours.
            if name.starts_with(CHAIN_PREFIX) {
                chains.entry(name.to_owned()).or_default();
            }
            continue;
        }
        let (counters, rule) = split_counters(line);
        let Some(after) = rule.strip_prefix("-A ") else {
            continue;
        };
        let chain = after
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let position = positions.entry(chain.clone()).or_insert(0);
        *position += 1;
        let rule_line = RuleLine {
            hash: checked_hash(*table, &chain, rule),
            text: rule.into(),
            counters: counters.map(Box::new),
        };
        if chain.starts_with(CHAIN_PREFIX) {
            chains.entry(chain).or_default().push(rule_line);
        } else if is_ours(rule) {
            table_state.hooks.entry(chain).or_default().push(HookRule {
                position: *position,
                rule: rule_line,
            });
        }
    }
    finish(&mut current, state);
    Ok(())
}

/// Parses `ipset save` output into `state`, keeping only our sets.
pub fn parse_ipset_save(text: &str, state: &mut State) {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("create") => {
                let Some(name) = words.next().filter(|name| is_our_set(name)) else {
                    continue;
                };
                let kind = words.next().unwrap_or_default().to_owned();
                let mut family = IpFamily::V4;
                while let Some(word) = words.next() {
                    if word == "family" && words.next() == Some("inet6") {
                        family = IpFamily::V6;
                    }
                }
                state.sets.insert(
                    name.to_owned(),
                    SetState {
                        family,
                        kind,
                        members: BTreeSet::new(),
                    },
                );
            }
            Some("add") => {
                let Some(name) = words.next() else { continue };
                if let (Some(set), Some(member)) = (state.sets.get_mut(name), words.next()) {
                    set.members.insert(member.to_owned());
                }
            }
            _ => {}
        }
    }
}

/// Splits a line into words the way the restore programs do: whitespace separates, double
/// quotes group (and are removed), a backslash escapes a quote inside them.
pub(crate) fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = r#"# Generated by iptables-save v1.8.9 on Sun Nov 29 20:24:58 2026
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
[3:180] -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
*mangle
:PREROUTING ACCEPT [10:600]
:INPUT ACCEPT [0:0]
:npg-PREROUTING - [0:0]
:npg-empty - [0:0]
:USER-CHAIN - [0:0]
[1:60] -A PREROUTING -s 10.0.0.0/8 -m comment --comment "user's own \"quoted\" rule" -j MARK --set-xmark 0x1/0x1
[9:540] -A PREROUTING -m comment --comment "npg:AbC_d-123" -j npg-PREROUTING
[0:0] -A PREROUTING -j npg-PREROUTING
[4:240] -A npg-PREROUTING -m comment --comment npg:Xy12 -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN
[0:0] -A npg-PREROUTING -s 192.0.2.1/32 -j DROP
[0:0] -A USER-CHAIN -m comment --comment "npg:Zz" -j RETURN
COMMIT
# Completed on Sun Nov 29 20:24:58 2026
"#;

    #[test]
    fn keeps_only_our_chains_and_our_rules_in_other_chains() {
        let mut state = State::default();
        parse_iptables_save(SAVE, IpFamily::V4, &mut state).expect("parse");
        assert_eq!(state.tables.len(), 1, "nat has nothing of ours");
        let mangle = &state.tables[&TableKey {
            family: IpFamily::V4,
            table: Table::Mangle,
        }];
        assert_eq!(
            mangle.chains.keys().collect::<Vec<_>>(),
            vec!["npg-PREROUTING", "npg-empty"]
        );
        let ours = &mangle.chains["npg-PREROUTING"];
        // Made-up hashes: the rules as printed do not hash to them, so they read as changed.
        assert_eq!(ours[0].hash.as_deref(), Some("Xy12~"));
        assert_eq!(
            ours[0].counters.as_deref(),
            Some(&Counters {
                packets: 4,
                bytes: 240
            })
        );
        assert_eq!(
            ours[1].hash, None,
            "a foreign rule inside our chain has no hash"
        );
        let hooks = &mangle.hooks["PREROUTING"];
        assert_eq!(
            hooks.iter().map(|h| h.position).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert_eq!(hooks[0].rule.hash.as_deref(), Some("AbC_d-123~"));
        assert_eq!(
            &*hooks[0].rule.text,
            "-A PREROUTING -m comment --comment \"npg:AbC_d-123\" -j npg-PREROUTING"
        );
        assert_eq!(
            hooks[1].rule.hash, None,
            "a jump to our chain without our comment is still ours"
        );
        assert_eq!(mangle.hooks["USER-CHAIN"].len(), 1);
    }

    #[test]
    fn a_rule_changed_in_place_with_our_comment_kept_reads_as_changed() {
        use crate::state::rule_hash;
        let jump = rule_hash(Table::Mangle, "PREROUTING", " -j npg-PREROUTING");
        let body = " -s 192.0.2.1/32 -m comment --comment \"policy a \\\"b\\\" rule 0\" -j DROP";
        let drop = rule_hash(Table::Mangle, "npg-pi-a", body);
        let save = |jump_target: &str, action: &str| {
            format!(
                "*mangle\n:PREROUTING ACCEPT [0:0]\n:npg-pi-a - [0:0]\n\
                 -A PREROUTING -m comment --comment \"npg:{jump}\" -j {jump_target}\n\
                 -A npg-pi-a -s 192.0.2.1/32 -m comment --comment \"npg:{drop} policy a \\\"b\\\" rule 0\" -j {action}\n\
                 COMMIT\n"
            )
        };
        let read = |text: &str| {
            let mut state = State::default();
            parse_iptables_save(text, IpFamily::V4, &mut state).expect("parse");
            let mangle = state.tables.into_values().next().expect("mangle");
            (
                mangle.hooks["PREROUTING"][0].rule.hash.clone(),
                mangle.chains["npg-pi-a"][0].hash.clone(),
            )
        };
        let (hook, rule) = read(&save("npg-PREROUTING", "DROP"));
        assert_eq!(hook.as_deref(), Some(jump.as_str()));
        assert_eq!(rule.as_deref(), Some(drop.as_str()));
        let (hook, rule) = read(&save("RENAMED", "ACCEPT"));
        assert_eq!(hook.as_deref(), Some(format!("{jump}~").as_str()));
        assert_eq!(rule.as_deref(), Some(format!("{drop}~").as_str()));
    }

    #[test]
    fn a_rule_with_words_longer_than_a_comment_holds_reads_back_as_written() {
        use crate::ruleset::{Action, Match, Rule};
        let mut rule = Rule::new(vec![Match::InInterface("eth0".into())], Action::Return);
        rule.comment = Some("an annotation that goes on and on ".repeat(10));
        let rendered =
            super::super::render::render_rule(Table::Mangle, "npg-x", &rule, IpFamily::V4);
        assert!(rendered.line.len() < 400, "{}", rendered.line);
        let save = format!("*mangle\n:npg-x - [0:0]\n{}\nCOMMIT\n", rendered.line);
        let mut state = State::default();
        parse_iptables_save(&save, IpFamily::V4, &mut state).expect("parse");
        let mangle = state.tables.into_values().next().expect("mangle");
        assert_eq!(
            mangle.chains["npg-x"][0].hash.as_deref(),
            Some(rendered.hash.as_str())
        );
    }

    #[test]
    fn incompatible_tables_are_an_error() {
        let text = "*mangle\n# Table `mangle' is incompatible, use 'nft' tool.\nCOMMIT\n";
        let mut state = State::default();
        assert!(matches!(
            parse_iptables_save(text, IpFamily::V4, &mut state),
            Err(ObserveError::Incompatible { .. })
        ));
    }

    #[test]
    fn ipset_save_keeps_our_sets() {
        let text = "create KUBE-X hash:ip family inet hashsize 1024 maxelem 65536\nadd KUBE-X 10.0.0.1\ncreate npg4-this-host hash:ip family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x1\nadd npg4-this-host 198.51.100.1\ncreate npg6-p-x hash:ip,port family inet6 hashsize 1024 maxelem 1048576\nadd npg6-p-x 2001:db8::1,tcp:8080\n";
        let mut state = State::default();
        parse_ipset_save(text, &mut state);
        assert_eq!(state.sets.len(), 2);
        assert_eq!(state.sets["npg4-this-host"].kind, "hash:ip");
        assert!(
            state.sets["npg4-this-host"]
                .members
                .contains("198.51.100.1")
        );
        assert_eq!(state.sets["npg6-p-x"].family, IpFamily::V6);
        assert!(
            state.sets["npg6-p-x"]
                .members
                .contains("2001:db8::1,tcp:8080")
        );
    }

    #[test]
    fn hashes_are_found_quoted_or_not() {
        assert_eq!(
            rule_hash("-A x -m comment --comment \"npg:abc\" -j y").as_deref(),
            Some("abc")
        );
        assert_eq!(
            rule_hash("-A x -m comment --comment npg:abc -j y").as_deref(),
            Some("abc")
        );
        assert_eq!(rule_hash("-A x -m comment --comment \"other\" -j y"), None);
    }
}
