//! Reading netlink messages byte by byte: the header fields in host order, with checked
//! access, for the few requests nodeport-guard makes itself (`nfgen`, `nfnotify`,
//! `ipset_sizes`).

/// Bytes of `struct nlmsghdr`.
pub const HEADER: usize = 16;
/// Bytes of `struct nfgenmsg`.
pub const NFGENMSG: usize = 4;

/// The host-order `u16` at `at`, if `bytes` hold it.
pub fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// The host-order `u32` at `at`, if `bytes` hold it.
pub fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}
