//! iptables-legacy's x_tables read straight from the kernel, for the daemon's cached view:
//! a digest of every rule of every table, and the xtables lock.
//!
//! x_tables have no generation. `IPT_SO_GET_INFO` gives a table's entry count and size in one
//! `getsockopt`, but a rule replaced by one of the same size (another source address, say)
//! leaves both as they were, so they cannot tell that nothing changed. `IPT_SO_GET_ENTRIES`
//! gives the table itself: the blob `iptables-legacy-save` decodes, in one more `getsockopt`.
//! Its bytes, with each rule's packet and byte counters zeroed (they move with traffic), are
//! the same exactly when the rules are, so their digest is the sign a cached view needs. It is
//! cheaper than `iptables-legacy-save` of the same tables, which also leaves text to parse
//! (`docs/performance.md` has the figures).
//!
//! The digest only proves that nothing changed between two readings. That what the daemon
//! wrote in between is all that changed needs the xtables lock (`/run/xtables.lock`, which
//! every iptables, docker and kube-proxy take before they write): [`XtablesLock`] holds it
//! from the reading before a write to the reading after, and its children take a lock file of
//! their own, which `XTABLES_LOCKFILE` names.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::model::IpFamily;

/// `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO`.
const SO_GET_INFO: i32 = 64;
/// `IPT_SO_GET_ENTRIES` and `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: i32 = 65;
/// Bytes of `struct ipt_getinfo` (the same for IPv6).
const GETINFO: usize = 84;
/// Where `size` is in `struct ipt_getinfo`.
const GETINFO_SIZE: usize = 80;
/// Bytes before `entrytable` in `struct ipt_get_entries` (the same for IPv6).
const GET_ENTRIES: usize = 40;
/// `XT_TABLE_MAXNAMELEN`.
const TABLE_NAME: usize = 32;

/// Where `next_offset` and `counters` are in a family's `struct ipt_entry`/`ip6t_entry`.
struct EntryLayout {
    next_offset: usize,
    counters: usize,
}

/// `struct xt_counters`: two u64.
const COUNTERS: usize = 16;

fn layout(family: IpFamily) -> EntryLayout {
    match family {
        IpFamily::V4 => EntryLayout {
            next_offset: 90,
            counters: 96,
        },
        IpFamily::V6 => EntryLayout {
            next_offset: 142,
            counters: 152,
        },
    }
}

/// The hasher of this process's digests (SipHash with secret keys, 128 bits: see
/// `crate::digest::Fingerprinter`); several times faster than SHA-256 over the megabytes of a
/// large table, which matters as a reload reads it twice. Digests are compared only within
/// the process that took them.
pub fn fingerprinter() -> &'static crate::digest::Fingerprinter {
    static FINGERPRINTER: std::sync::OnceLock<crate::digest::Fingerprinter> =
        std::sync::OnceLock::new();
    FINGERPRINTER.get_or_init(crate::digest::Fingerprinter::default)
}

/// The digest of every x_tables rule of this network namespace, both families: which tables
/// exist and each one's rules, counters left out.
pub fn digest() -> io::Result<u128> {
    let mut tables = Vec::new();
    for family in IpFamily::BOTH {
        let names = match std::fs::read_to_string(names_file(family)) {
            Ok(names) => names,
            // The family's x_tables module is not loaded: no tables, nothing to hash.
            Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error),
        };
        let mut names: Vec<&str> = names.lines().filter(|name| !name.is_empty()).collect();
        names.sort_unstable();
        for name in names {
            let mut blob = entries(family, name)?;
            zero_counters(&mut blob, &layout(family))?;
            // One table at a time: a large one is megabytes.
            tables.push((family, name.to_owned(), fingerprinter().of(&blob)));
        }
    }
    Ok(fingerprinter().of(&tables))
}

/// The digest of some x_tables tables only, counters left out: the daemon's once-a-second
/// check of the tables it has rules in (one `getsockopt` pair per table, no lock: the kernel
/// copies a table out whole). A table that does not exist reads as empty.
pub fn digest_of(tables: &[(IpFamily, &str)]) -> io::Result<u128> {
    let mut digests = Vec::with_capacity(tables.len());
    for &(family, name) in tables {
        let digest = match entries(family, name) {
            Ok(mut blob) => {
                zero_counters(&mut blob, &layout(family))?;
                Some(fingerprinter().of(&blob))
            }
            Err(error) if error.raw_os_error() == Some(nix::libc::ENOENT) => None,
            Err(error) => return Err(error),
        };
        digests.push((family, name, digest));
    }
    Ok(fingerprinter().of(&digests))
}

/// Whether the network namespace of this thread has any x_tables table, in either family
/// (a kernel without x_tables has no such files: none).
pub(crate) fn any_table() -> io::Result<bool> {
    for family in IpFamily::BOTH {
        match std::fs::read_to_string(names_file(family)) {
            Ok(names) if names.lines().any(|name| !name.trim().is_empty()) => return Ok(true),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    Ok(false)
}

/// The tables of `family` in the network namespace of this thread (`/proc/net` is that of the
/// process's first thread).
pub(crate) fn names_file(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "/proc/thread-self/net/ip_tables_names",
        IpFamily::V6 => "/proc/thread-self/net/ip6_tables_names",
    }
}

/// Zeroes the counters of every entry of a table's blob.
fn zero_counters(blob: &mut [u8], layout: &EntryLayout) -> io::Result<()> {
    let mut at = 0;
    while at < blob.len() {
        let next = blob
            .get(at + layout.next_offset..at + layout.next_offset + 2)
            .map(|bytes| usize::from(u16::from_ne_bytes([bytes[0], bytes[1]])))
            .ok_or_else(|| invalid("an entry runs past the table"))?;
        let counters = blob
            .get_mut(at + layout.counters..at + layout.counters + COUNTERS)
            .ok_or_else(|| invalid("an entry runs past the table"))?;
        counters.fill(0);
        if next < layout.counters + COUNTERS {
            return Err(invalid("an entry shorter than its header"));
        }
        at += next;
    }
    Ok(())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("x_tables: {what}"))
}

/// The entries of one table, as the kernel copies them out (`IPT_SO_GET_ENTRIES`).
fn entries(family: IpFamily, table: &str) -> io::Result<Vec<u8>> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
    let (domain, level) = match family {
        IpFamily::V4 => (AddressFamily::Inet, nix::libc::SOL_IP),
        IpFamily::V6 => (AddressFamily::Inet6, nix::libc::SOL_IPV6),
    };
    let socket = socket(
        domain,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Raw,
    )?;
    let mut name = [0u8; TABLE_NAME];
    if table.len() >= TABLE_NAME {
        return Err(invalid("a table name too long"));
    }
    name[..table.len()].copy_from_slice(table.as_bytes());
    // The table may be replaced between the two calls; the kernel then refuses the second
    // (EAGAIN, the size no longer matches) and both are made again.
    for _ in 0..8 {
        let mut info = [0u8; GETINFO];
        info[..TABLE_NAME].copy_from_slice(&name);
        get(&socket, level, SO_GET_INFO, &mut info)?;
        let size = u32::from_ne_bytes(
            info[GETINFO_SIZE..GETINFO_SIZE + 4]
                .try_into()
                .map_err(|_| invalid("short info"))?,
        ) as usize;
        let mut buffer = vec![0u8; GET_ENTRIES + size];
        buffer[..TABLE_NAME].copy_from_slice(&name);
        buffer[TABLE_NAME..TABLE_NAME + 4].copy_from_slice(&(size as u32).to_ne_bytes());
        match get(&socket, level, SO_GET_ENTRIES, &mut buffer) {
            Ok(()) => {
                buffer.drain(..GET_ENTRIES);
                return Ok(buffer);
            }
            Err(error) if error.raw_os_error() == Some(nix::libc::EAGAIN) => continue,
            Err(error) => return Err(error),
        }
    }
    Err(invalid("the table kept changing while it was read"))
}

/// One `getsockopt` into `buffer`, which holds the request and receives the answer.
#[allow(unsafe_code)]
pub(super) fn get(
    socket: &std::os::fd::OwnedFd,
    level: i32,
    option: i32,
    buffer: &mut [u8],
) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let mut length =
        nix::libc::socklen_t::try_from(buffer.len()).map_err(|_| invalid("a table too large"))?;
    // SAFETY: `buffer` is valid for writes of `length` bytes for the whole call, and the kernel
    // writes at most `length` bytes into it (it checks the length against the table's size).
    let result = unsafe {
        nix::libc::getsockopt(
            socket.as_raw_fd(),
            level,
            option,
            buffer.as_mut_ptr().cast(),
            &mut length,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The xtables lock, held: no iptables, docker or kube-proxy that takes it can write x_tables
/// until it is dropped. Children of ours take [`XtablesLock::children_lock_file`] instead.
#[derive(Debug)]
pub struct XtablesLock {
    _held: nix::fcntl::Flock<std::fs::File>,
    children: PathBuf,
}

impl XtablesLock {
    /// Takes the lock iptables takes (`XTABLES_LOCKFILE` or `/run/xtables.lock`), waiting up
    /// to `wait` for whoever holds it.
    pub fn take(wait: Duration) -> io::Result<XtablesLock> {
        let path = lock_path();
        let children = children_lock_file(&path);
        let deadline = Instant::now() + wait;
        let mut file = open(&path)?;
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(held) => {
                    return Ok(XtablesLock {
                        _held: held,
                        children,
                    });
                }
                Err((again, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = again;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((_, errno)) => return Err(errno.into()),
            }
        }
    }

    /// The lock file our own iptables commands take while this is held.
    pub fn children_lock_file(&self) -> &Path {
        &self.children
    }
}

/// The lock file iptables-legacy takes, host-wide (also inside network namespaces):
/// `XTABLES_LOCKFILE` if set and not empty, as iptables reads it, else `/run/xtables.lock`.
pub fn lock_path() -> PathBuf {
    std::env::var_os("XTABLES_LOCKFILE")
        .filter(|path| !path.is_empty())
        .map_or_else(|| "/run/xtables.lock".into(), PathBuf::from)
}

fn open(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// Beside the xtables lock: `/run/nodeport-guard.xtables.lock`.
fn children_lock_file(lock: &Path) -> PathBuf {
    lock.with_file_name("nodeport-guard.xtables.lock")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two IPv4 entries as the kernel lays them out: 112 bytes of header each, then (for the
    /// first) 40 bytes of target.
    fn blob() -> Vec<u8> {
        let mut blob = vec![0u8; 152 + 112];
        let v4 = layout(IpFamily::V4);
        for (at, next) in [(0usize, 152u16), (152, 112)] {
            blob[at + v4.next_offset..at + v4.next_offset + 2].copy_from_slice(&next.to_ne_bytes());
            blob[at + v4.counters..at + v4.counters + COUNTERS].fill(0xAB);
            blob[at] = 0xC0; // part of the source address: a rule's content
        }
        blob
    }

    #[test]
    fn counters_are_zeroed_and_nothing_else() {
        let mut table = blob();
        zero_counters(&mut table, &layout(IpFamily::V4)).unwrap();
        assert!(!table.contains(&0xAB), "a counter was left");
        assert_eq!(table[0], 0xC0);
        assert_eq!(table[152], 0xC0);
        assert_eq!(table[90], 152, "next_offset kept");
    }

    #[test]
    fn a_table_that_does_not_add_up_is_refused() {
        let mut table = blob();
        table.truncate(200);
        assert!(zero_counters(&mut table, &layout(IpFamily::V4)).is_err());
        let mut table = blob();
        table[90..92].copy_from_slice(&0u16.to_ne_bytes());
        assert!(zero_counters(&mut table, &layout(IpFamily::V4)).is_err());
    }

    #[test]
    fn children_lock_beside_the_xtables_lock() {
        assert_eq!(
            children_lock_file(Path::new("/run/xtables.lock")),
            Path::new("/run/nodeport-guard.xtables.lock")
        );
    }
}
