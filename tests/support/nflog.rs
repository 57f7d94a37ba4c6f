//! Capturing NFLOG messages inside a namespace.
//!
//! [`NflogCapture`] runs `tcpdump -i nflog:<group> -U -w -` in the namespace
//! and parses the pcap stream itself. The NFLOG link type (239) carries the
//! netfilter log message as TLVs; the two that matter are `NFULA_PREFIX`
//! (the `--nflog-prefix` / `log prefix` string) and `NFULA_PAYLOAD` (the IP
//! packet, summarised here as addresses, protocol and ports).
//!
//! The capture only counts as started once tcpdump has printed "listening
//! on", i.e. once libpcap has bound the NFLOG group; messages logged before
//! that would be lost, so [`NflogCapture::start`] waits for it.
//!
//! Delivery is *not* immediate: the kernel queues NFLOG messages per group
//! and flushes them when 100 are queued or after one second (nfnetlink_log's
//! defaults, which libpcap leaves alone), unless the logging rule itself sets
//! `--nflog-threshold 1` (iptables) / `queue-threshold 1` (nft). Waits must
//! therefore allow well over [`NFLOG_FLUSH_INTERVAL`], and an assertion that
//! something was *not* logged must wait longer than that.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cmd;
use super::netns::Netns;

/// pcap link type of NFLOG captures.
pub const LINKTYPE_NFLOG: u32 = 239;
/// TLV type of the packet header (hardware protocol, hook).
pub const NFULA_PACKET_HDR: u16 = 1;
/// TLV type of the input interface index.
pub const NFULA_IFINDEX_INDEV: u16 = 4;
/// TLV type of the output interface index.
pub const NFULA_IFINDEX_OUTDEV: u16 = 5;
/// TLV type of the logged packet (network layer).
pub const NFULA_PAYLOAD: u16 = 9;
/// TLV type of the log prefix (NUL-terminated string).
pub const NFULA_PREFIX: u16 = 10;

/// Longest time the kernel holds back an NFLOG message before flushing it to
/// the listener (see the module docs).
pub const NFLOG_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How long [`NflogCapture::start`] waits for tcpdump to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One NFLOG message: its prefix and a summary of the logged packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NflogEvent {
    /// The log prefix, e.g. `DPI0|allow-cluster-nodeport-only`.
    pub prefix: String,
    /// Address family from the NFLOG header (2 = IPv4, 10 = IPv6).
    pub family: u8,
    /// Netfilter hook (0 PREROUTING, 1 INPUT, 2 FORWARD, 3 OUTPUT,
    /// 4 POSTROUTING), if present.
    pub hook: Option<u8>,
    /// Input interface index, if any.
    pub indev: Option<u32>,
    /// Output interface index, if any.
    pub outdev: Option<u32>,
    /// Source address of the logged packet.
    pub src: Option<IpAddr>,
    /// Destination address of the logged packet.
    pub dst: Option<IpAddr>,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, …).
    pub proto: Option<u8>,
    /// TCP/UDP/SCTP source port.
    pub sport: Option<u16>,
    /// TCP/UDP/SCTP destination port.
    pub dport: Option<u16>,
}

impl NflogEvent {
    /// Name of [`NflogEvent::proto`] (`tcp`, `udp`, … or the number).
    pub fn proto_name(&self) -> String {
        match self.proto {
            Some(6) => "tcp".into(),
            Some(17) => "udp".into(),
            Some(1) => "icmp".into(),
            Some(58) => "icmpv6".into(),
            Some(132) => "sctp".into(),
            Some(other) => other.to_string(),
            None => "?".into(),
        }
    }
}

impl fmt::Display for NflogEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |ip: Option<IpAddr>, port: Option<u16>| match (ip, port) {
            (Some(ip), Some(port)) => SocketAddr::new(ip, port).to_string(),
            (Some(ip), None) => ip.to_string(),
            (None, _) => "?".to_string(),
        };
        write!(
            f,
            "[{}] {} {} -> {}",
            self.prefix,
            self.proto_name(),
            end(self.src, self.sport),
            end(self.dst, self.dport)
        )?;
        if let Some(hook) = self.hook {
            write!(f, " hook={hook}")?;
        }
        Ok(())
    }
}

/// Byte order of a pcap stream (and of the NFLOG TLV headers in it, which
/// are in the byte order of the host that wrote the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapHeader {
    /// Whether the file's byte order is the opposite of this host's.
    pub swapped: bool,
    /// The link type of the capture.
    pub linktype: u32,
}

fn u16_at(data: &[u8], at: usize, swapped: bool) -> Option<u16> {
    let bytes: [u8; 2] = data.get(at..at + 2)?.try_into().ok()?;
    let v = u16::from_ne_bytes(bytes);
    Some(if swapped { v.swap_bytes() } else { v })
}

fn u32_at(data: &[u8], at: usize, swapped: bool) -> Option<u32> {
    let bytes: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    let v = u32::from_ne_bytes(bytes);
    Some(if swapped { v.swap_bytes() } else { v })
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(data.get(at..at + 2)?.try_into().ok()?))
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// Parses the 24-byte pcap global header (microsecond or nanosecond magic,
/// either byte order).
pub fn parse_pcap_header(header: &[u8]) -> Result<PcapHeader, String> {
    let magic = u32_at(header, 0, false).ok_or("short pcap header")?;
    let swapped = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => false,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => true,
        other => return Err(format!("not a pcap stream (magic {other:#010x})")),
    };
    let linktype = u32_at(header, 20, swapped).ok_or("short pcap header")?;
    Ok(PcapHeader { swapped, linktype })
}

/// Parses one LINKTYPE_NFLOG record: a 4-byte header (family, version,
/// resource id) followed by TLVs whose length includes the 4-byte TLV header
/// and which are padded to 4 bytes. TLV values are in network byte order.
pub fn parse_nflog_record(data: &[u8], swapped: bool) -> Option<NflogEvent> {
    let family = *data.first()?;
    let mut event = NflogEvent {
        prefix: String::new(),
        family,
        hook: None,
        indev: None,
        outdev: None,
        src: None,
        dst: None,
        proto: None,
        sport: None,
        dport: None,
    };
    let mut at = 4;
    while at + 4 <= data.len() {
        let len = usize::from(u16_at(data, at, swapped)?);
        // The top two bits are the netlink NESTED / NET_BYTEORDER flags.
        let kind = u16_at(data, at + 2, swapped)? & 0x3fff;
        if len < 4 || at + len > data.len() {
            break;
        }
        let value = &data[at + 4..at + len];
        match kind {
            NFULA_PACKET_HDR => event.hook = value.get(2).copied(),
            NFULA_IFINDEX_INDEV => event.indev = be32(value, 0),
            NFULA_IFINDEX_OUTDEV => event.outdev = be32(value, 0),
            NFULA_PREFIX => {
                let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                event.prefix = String::from_utf8_lossy(&value[..end]).into_owned();
            }
            NFULA_PAYLOAD => summarize_ip(value, &mut event),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Some(event)
}

/// Fills addresses, protocol and ports from an IPv4 or IPv6 packet.
fn summarize_ip(packet: &[u8], event: &mut NflogEvent) {
    let Some(&first) = packet.first() else {
        return;
    };
    let (proto, l4) = match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0f) * 4;
            let (Some(src), Some(dst)) = (packet.get(12..16), packet.get(16..20)) else {
                return;
            };
            let src: [u8; 4] = src.try_into().unwrap_or_default();
            let dst: [u8; 4] = dst.try_into().unwrap_or_default();
            event.src = Some(Ipv4Addr::from(src).into());
            event.dst = Some(Ipv4Addr::from(dst).into());
            let proto = packet.get(9).copied();
            // Only the first fragment carries the transport header.
            let frag_offset = be16(packet, 6).unwrap_or(0) & 0x1fff;
            let l4 = (frag_offset == 0).then(|| packet.get(ihl..)).flatten();
            (proto, l4)
        }
        6 => {
            let (Some(src), Some(dst)) = (packet.get(8..24), packet.get(24..40)) else {
                return;
            };
            let src: [u8; 16] = src.try_into().unwrap_or_default();
            let dst: [u8; 16] = dst.try_into().unwrap_or_default();
            event.src = Some(Ipv6Addr::from(src).into());
            event.dst = Some(Ipv6Addr::from(dst).into());
            skip_ipv6_extensions(packet)
        }
        _ => return,
    };
    event.proto = proto;
    if let (Some(6 | 17 | 132), Some(l4)) = (proto, l4) {
        event.sport = be16(l4, 0);
        event.dport = be16(l4, 2);
    }
}

/// Walks the IPv6 extension header chain to the transport header.
fn skip_ipv6_extensions(packet: &[u8]) -> (Option<u8>, Option<&[u8]>) {
    let mut next = packet.get(6).copied();
    let mut at = 40;
    loop {
        match next {
            // Hop-by-hop, routing, destination options: length in 8-byte units.
            Some(0 | 43 | 60) => {
                let Some(len) = packet.get(at + 1) else {
                    return (next, None);
                };
                next = packet.get(at).copied();
                at += (usize::from(*len) + 1) * 8;
            }
            // Fragment header: only the first fragment has ports.
            Some(44) => {
                let offset = be16(packet, at + 2).unwrap_or(0) >> 3;
                next = packet.get(at).copied();
                at += 8;
                if offset != 0 {
                    return (next, None);
                }
            }
            // Authentication header: length in 4-byte units, minus 2.
            Some(51) => {
                let Some(len) = packet.get(at + 1) else {
                    return (next, None);
                };
                next = packet.get(at).copied();
                at += (usize::from(*len) + 2) * 4;
            }
            _ => return (next, packet.get(at..)),
        }
    }
}

/// Reads a pcap stream and hands every NFLOG record to `sink` until EOF.
pub fn read_nflog_pcap(
    mut input: impl Read,
    mut sink: impl FnMut(NflogEvent),
) -> Result<(), String> {
    let mut header = [0u8; 24];
    match input.read_exact(&mut header) {
        Ok(()) => {}
        // tcpdump killed before the first packet: the header was never flushed.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
        Err(e) => return Err(format!("reading pcap header: {e}")),
    }
    let header = parse_pcap_header(&header)?;
    if header.linktype != LINKTYPE_NFLOG {
        return Err(format!(
            "pcap link type is {}, expected NFLOG ({LINKTYPE_NFLOG})",
            header.linktype
        ));
    }
    let mut record = [0u8; 16];
    loop {
        match input.read_exact(&mut record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading pcap record header: {e}")),
        }
        let caplen = u32_at(&record, 8, header.swapped).unwrap_or(0);
        let caplen = usize::try_from(caplen).map_err(|e| format!("pcap caplen: {e}"))?;
        if caplen > 16 * 1024 * 1024 {
            return Err(format!("implausible pcap record length {caplen}"));
        }
        let mut data = vec![0u8; caplen];
        match input.read_exact(&mut data) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading pcap record: {e}")),
        }
        if let Some(event) = parse_nflog_record(&data, header.swapped) {
            sink(event);
        }
    }
}

/// State shared between the capture and its reader threads.
#[derive(Debug, Default)]
struct Shared {
    events: Vec<NflogEvent>,
    stderr: String,
    error: Option<String>,
    finished: bool,
}

/// A running NFLOG capture of one group inside one namespace. Only one
/// capture per (namespace, group) can exist at a time: the kernel lets a
/// single listener bind an NFLOG group (a second tcpdump fails with "Can't
/// listen on group index: Operation not permitted"). NFLOG groups are per
/// namespace, so parallel tests can all use group 1 in their own labs. The
/// capture is killed in `Drop`.
pub struct NflogCapture {
    ns: String,
    group: u16,
    child: Child,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for NflogCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NflogCapture")
            .field("ns", &self.ns)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

fn lock(shared: &(Mutex<Shared>, Condvar)) -> MutexGuard<'_, Shared> {
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl NflogCapture {
    /// Starts capturing NFLOG group `group` in `ns` and returns once tcpdump
    /// is listening, so packets sent afterwards are guaranteed to be seen.
    /// Panics with tcpdump's stderr if it does not start.
    #[track_caller]
    pub fn start(ns: &Netns, group: u16) -> NflogCapture {
        let tcpdump = cmd::find_program("tcpdump")
            .unwrap_or_else(|| panic!("NFLOG capture needs tcpdump, which is not installed"));
        let iface = format!("nflog:{group}");
        let args: [&OsStr; 11] = [
            "netns".as_ref(),
            "exec".as_ref(),
            ns.name().as_ref(),
            tcpdump.as_os_str(),
            "-i".as_ref(),
            iface.as_ref(),
            // Packet-buffered output and no libpcap batching: each message
            // reaches the pipe as soon as the kernel delivers it.
            "-U".as_ref(),
            "--immediate-mode".as_ref(),
            "-n".as_ref(),
            "-w".as_ref(),
            "-".as_ref(),
        ];
        let command = cmd::command_line(&cmd::program_path("ip"), &args);
        // `ip netns exec` execs tcpdump in place, so the child *is* tcpdump.
        let mut child = Command::new(cmd::program_path("ip"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start `{command}`: {e}"));
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{command}`: no stdout/stderr pipe");
        };

        let shared = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let (ready_tx, ready_rx) = mpsc::channel::<()>();

        let err_shared = Arc::clone(&shared);
        let stderr_thread = std::thread::spawn(move || {
            let mut ready = Some(ready_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let listening = line.contains("listening on");
                {
                    let mut state = lock(&err_shared);
                    state.stderr.push_str(&line);
                    state.stderr.push('\n');
                }
                if listening && let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            // Dropping `ready` unsent tells `start` that tcpdump died first.
        });

        let out_shared = Arc::clone(&shared);
        let stdout_thread = std::thread::spawn(move || {
            let result = read_nflog_pcap(BufReader::new(stdout), |event| {
                lock(&out_shared).events.push(event);
                out_shared.1.notify_all();
            });
            let mut state = lock(&out_shared);
            state.error = result.err();
            state.finished = true;
            out_shared.1.notify_all();
        });

        let mut capture = NflogCapture {
            ns: ns.name().to_string(),
            group,
            child,
            shared,
            threads: vec![stderr_thread, stdout_thread],
        };
        if ready_rx.recv_timeout(START_TIMEOUT).is_err() {
            let status = capture.child.try_wait().ok().flatten();
            // Stop tcpdump (if still running) so that stderr is complete.
            capture.stop();
            let stderr = lock(&capture.shared).stderr.clone();
            panic!(
                "NFLOG capture `{command}` did not start listening within {START_TIMEOUT:?} \
                 (exit status: {status:?})\n--- stderr ---\n{stderr}"
            );
        }
        capture
    }

    /// The NFLOG group being captured.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// All messages captured so far.
    pub fn events(&self) -> Vec<NflogEvent> {
        lock(&self.shared).events.clone()
    }

    /// Waits (without busy polling) until a captured message satisfies
    /// `predicate` and returns it, or `None` after `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        predicate: impl Fn(&NflogEvent) -> bool,
    ) -> Option<NflogEvent> {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.shared);
        loop {
            if let Some(found) = state.events.iter().find(|e| predicate(e)) {
                return Some(found.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || state.finished {
                return None;
            }
            state = self
                .shared
                .1
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until a message whose prefix starts with `prefix` arrives and
    /// returns it, or `None` after `timeout`.
    pub fn wait_for_prefix(&self, prefix: &str, timeout: Duration) -> Option<NflogEvent> {
        self.wait_for(timeout, |e| e.prefix.starts_with(prefix))
    }

    /// Like [`NflogCapture::wait_for_prefix`], but panics with everything
    /// captured so far and tcpdump's stderr if no such message arrives.
    #[track_caller]
    pub fn expect_prefix(&self, prefix: &str, timeout: Duration) -> NflogEvent {
        match self.wait_for_prefix(prefix, timeout) {
            Some(event) => event,
            None => panic!(
                "no NFLOG message with prefix {prefix:?} in group {} of {} within {timeout:?}\n{}",
                self.group,
                self.ns,
                self.diagnostics()
            ),
        }
    }

    /// Waits the whole `timeout` and panics (listing what was captured) if a
    /// message matching `predicate` arrives, e.g. to show that an allowed
    /// source is not logged. `timeout` should exceed
    /// [`NFLOG_FLUSH_INTERVAL`], or a batched message may arrive too late.
    #[track_caller]
    pub fn expect_none(&self, timeout: Duration, predicate: impl Fn(&NflogEvent) -> bool) {
        if let Some(event) = self.wait_for(timeout, predicate) {
            panic!(
                "unexpected NFLOG message {event} in group {} of {}\n{}",
                self.group,
                self.ns,
                self.diagnostics()
            );
        }
    }

    /// Captured messages, parse errors and tcpdump's stderr, for failure
    /// messages.
    pub fn diagnostics(&self) -> String {
        let state = lock(&self.shared);
        let events: Vec<String> = state.events.iter().map(ToString::to_string).collect();
        format!(
            "captured {} message(s):\n  {}\nparse error: {:?}\n--- tcpdump stderr ---\n{}",
            events.len(),
            events.join("\n  "),
            state.error,
            state.stderr.trim_end()
        )
    }

    /// Kills tcpdump and waits for the reader threads.
    fn stop(&mut self) {
        // Killing is fine: every message was parsed as soon as it arrived,
        // so there is nothing left for tcpdump to flush.
        let _ = self.child.kill();
        let _ = self.child.wait();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for NflogCapture {
    fn drop(&mut self) {
        self.stop();
    }
}
