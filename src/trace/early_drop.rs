//! The early drop (`earlyDrop`) in the trace: a TCP SYN meets pre-DNAT policy in raw
//! `PREROUTING`, before connection tracking, through the raw copies of the pre-DNAT chains
//! (`compile::early_drop`); dropped there, it never reaches conntrack or mangle; let on, it is
//! marked, and mangle returns it without judging it again.

use super::report::{Stage, Step};
use super::{ChainEnd, End, Tracer, chain_step};
use crate::compile::binding::Path;
use crate::compile::names;

/// Where the early drop decides, as a verdict says it. The reason stays as mangle's would be
/// ("dropped by rule 1 of policy …"): `plan`'s cut-off list and `revoke` name a rule the same
/// way whichever table carries it.
pub(super) const AT: &str = "raw PREROUTING before connection tracking";

impl Tracer<'_> {
    /// The early drop's stage, if this packet meets it: a TCP SYN to a port pre-DNAT policy
    /// can deny (`compile::guarded`, answered once per evaluator), with `earlyDrop` on, that doNotTrack policy did not
    /// accept.
    pub(super) fn early_drop_stage(&mut self) -> Option<Stage> {
        let applies = self.config.early_drop
            && self.enforced(Path::PreDnatIn)
            && self.packet.is_tcp_syn()
            && self.guarded.contains(self.packet.dport)
            && !(self.enforced(Path::UntrackedIn) && self.bits & self.marks.accept != 0);
        if !applies {
            return None;
        }
        let mut steps = vec![chain_step(
            Step::new(
                "earlyDrop",
                0,
                "a TCP SYN (SYN set, ACK clear): judged by pre-DNAT policy before connection tracking",
            ),
            "npg-PREROUTING",
        )];
        self.bits = 0;
        if let Some(why) = self.host_to_itself(End::Source) {
            steps.push(chain_step(
                Step::new("hostToItself", 0, why),
                names::EARLY_DROP_CHAIN,
            ));
            return Some(stage(steps));
        }
        let end = self.dispatch(Path::PreDnatIn, AT, &mut steps);
        // The raw copies of the path's own chains have names of their own.
        for step in &mut steps[1..] {
            if let Some(chain) = &mut step.chain
                && !names::is_policy_chain(chain)
            {
                *chain = names::early_drop_chain(chain);
            }
        }
        if let ChainEnd::Returned = end {
            self.judged_in_raw = true;
            steps.push(chain_step(
                Step::new(
                    "judged",
                    0,
                    format!(
                        "not dropped: marked ({:#x}) so that mangle PREROUTING does not judge it again",
                        self.marks.scratch1
                    ),
                ),
                names::EARLY_DROP_CHAIN,
            ));
        }
        Some(stage(steps))
    }
}

fn stage(steps: Vec<Step>) -> Stage {
    Stage {
        table: "raw",
        hook: "PREROUTING",
        judges: "pre-DNAT policy on TCP SYNs, before connection tracking (earlyDrop)",
        steps,
    }
}
