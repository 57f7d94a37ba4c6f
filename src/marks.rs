//! Mark bits, carved from `markMask` as Felix carves them: accept, pass, drop, scratch0 and
//! scratch1 take the lowest set bits of the mask, in that order.
//!
//! The bits carry one packet's verdict between our chains and tables:
//! - accept: "a policy (or failsafe) allowed this packet"; it survives from raw to mangle to
//!   filter so later tables do not judge the packet again;
//! - pass: "a policy said Pass": the remaining policies are skipped;
//! - drop: set by a deny rule just before it drops (NFLOG rules look at it);
//! - scratch0 / scratch1: temporary "one of several alternatives matched" bits for rules that
//!   OR several nets or port lists.

use std::fmt;

/// How many bits the mask must have.
pub const BITS_NEEDED: u32 = 5;

/// The single-bit masks we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MarkBits {
    /// Allowed.
    pub accept: u32,
    /// Passed: skip the remaining policies.
    pub pass: u32,
    /// Denied.
    pub drop: u32,
    /// "All blocks so far matched".
    pub scratch0: u32,
    /// "This block matched".
    pub scratch1: u32,
}

impl MarkBits {
    /// Takes the five lowest set bits of `mask`; `None` if it has fewer.
    pub fn from_mask(mask: u32) -> Option<MarkBits> {
        let mut remaining = mask;
        let mut next = || {
            if remaining == 0 {
                return None;
            }
            let bit = remaining & remaining.wrapping_neg();
            remaining &= !bit;
            Some(bit)
        };
        Some(MarkBits {
            accept: next()?,
            pass: next()?,
            drop: next()?,
            scratch0: next()?,
            scratch1: next()?,
        })
    }

    /// Every bit we use.
    pub fn all(&self) -> u32 {
        self.accept | self.pass | self.drop | self.scratch0 | self.scratch1
    }

    /// Both scratch bits.
    pub fn scratch(&self) -> u32 {
        self.scratch0 | self.scratch1
    }
}

impl fmt::Display for MarkBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "accept {:#x}, pass {:#x}, drop {:#x}, scratch0 {:#x}, scratch1 {:#x}",
            self.accept, self.pass, self.drop, self.scratch0, self.scratch1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_mask_gives_felix_v3_30_bits() {
        let bits = MarkBits::from_mask(0xffff_0000).expect("16 bits");
        assert_eq!(
            bits,
            MarkBits {
                accept: 0x1_0000,
                pass: 0x2_0000,
                drop: 0x4_0000,
                scratch0: 0x8_0000,
                scratch1: 0x10_0000,
            }
        );
        assert_eq!(bits.all(), 0x1f_0000);
    }

    #[test]
    fn sparse_masks_take_the_lowest_bits_in_order() {
        let bits = MarkBits::from_mask(0x8000_0f01).expect("6 bits");
        assert_eq!(bits.accept, 0x1);
        assert_eq!(bits.pass, 0x100);
        assert_eq!(bits.drop, 0x200);
        assert_eq!(bits.scratch0, 0x400);
        assert_eq!(bits.scratch1, 0x800);
        assert_eq!(MarkBits::from_mask(0xf), None);
    }
}
