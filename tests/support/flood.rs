//! A TCP SYN flood from spoofed sources: raw IPv4 packets (SYN set, ACK clear, correct
//! checksums, so conntrack would take them) sent as fast as a thread can, from a namespace,
//! for the early-drop tests and the kernel bench's `flood` scenario.
//!
//! Over a veth pair the receiving namespace processes each packet on the sender's CPU, in the
//! same system call: the rate a sender reaches is bound by what the receiver does with a
//! packet, which is what the bench compares.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn, sendto, socket,
};

use super::Netns;

/// The first spoofed source: 203.0.113.64 and up, clear of the lab's clients (.10–.13) in
/// the routed client network, so the node sees them arrive where that network comes from.
pub const FLOOD_FIRST_SOURCE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 64);
/// How many spoofed source addresses the flood cycles through.
pub const FLOOD_SOURCES: u8 = 192;

/// A running flood; stopped (and its threads joined) by [`Flood::stop`] or on drop.
pub struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Flood {
    /// Starts `threads` senders in `ns`, each sending SYNs to `dst` from
    /// [`FLOOD_SOURCES`] spoofed addresses and every source port from 1024 up.
    pub fn start(ns: &Netns, dst: SocketAddrV4, threads: usize) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|index| {
                let stop = Arc::clone(&stop);
                let sent = Arc::clone(&sent);
                ns.spawn(&format!("flood-{index}"), move || {
                    send_until(dst, index, &stop, &sent);
                })
            })
            .collect();
        Flood {
            stop,
            sent,
            threads,
        }
    }

    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the senders; returns how many packets they sent.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.sent()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Packets built ahead per sender (every source with 21 ports each).
const BATCH: usize = 4032;

fn send_until(dst: SocketAddrV4, index: usize, stop: &AtomicBool, sent: &AtomicU64) {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Raw,
    )
    .expect("raw socket (root is needed)");
    let packets: Vec<[u8; 40]> = (0..BATCH)
        .map(|i| {
            let offset = u8::try_from(i % usize::from(FLOOD_SOURCES)).expect("small");
            let [a, b, c, d] = FLOOD_FIRST_SOURCE.octets();
            let src = Ipv4Addr::new(a, b, c, d + offset);
            let port = 1024 + (index * BATCH + i) % 60_000;
            syn(src, u16::try_from(port).expect("port"), dst)
        })
        .collect();
    let to = SockaddrIn::from(dst);
    while !stop.load(Ordering::Relaxed) {
        for packet in &packets {
            // A full queue (ENOBUFS) only means the receiver is behind: go on.
            if sendto(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                packet,
                &to,
                MsgFlags::empty(),
            )
            .is_ok()
            {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// An IPv4 TCP SYN from `src:sport` to `dst`, checksums filled in.
pub fn syn(src: Ipv4Addr, sport: u16, dst: SocketAddrV4) -> [u8; 40] {
    let mut packet = [0u8; 40];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&40u16.to_be_bytes());
    packet[6] = 0x40; // don't fragment
    packet[8] = 64; // TTL
    packet[9] = 6; // TCP
    packet[12..16].copy_from_slice(&src.octets());
    packet[16..20].copy_from_slice(&dst.ip().octets());
    let header = checksum(&packet[..20], 0);
    packet[10..12].copy_from_slice(&header.to_be_bytes());
    let tcp = &mut packet[20..];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    tcp[4..8].copy_from_slice(&u32::from(sport).wrapping_mul(2_654_435_761).to_be_bytes());
    tcp[12] = 5 << 4; // header length: five words
    tcp[13] = 0x02; // SYN
    tcp[14..16].copy_from_slice(&64_240u16.to_be_bytes());
    let mut pseudo = 0u32;
    for word in [src.octets(), dst.ip().octets()] {
        pseudo += u32::from(u16::from_be_bytes([word[0], word[1]]));
        pseudo += u32::from(u16::from_be_bytes([word[2], word[3]]));
    }
    pseudo += 6 + 20;
    let sum = checksum(&packet[20..], pseudo);
    packet[36..38].copy_from_slice(&sum.to_be_bytes());
    packet
}

/// The Internet checksum of `bytes`, starting from `sum`.
fn checksum(bytes: &[u8], mut sum: u32) -> u16 {
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).expect("folded")
}
