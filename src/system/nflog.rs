//! The NFLOG socket: binding our groups over netlink (`NETLINK_NETFILTER`, subsystem ULOG) and
//! reading the packets the kernel logs to them; who holds a group when we cannot have it; the
//! daemon's stream socket as a client sees it.
//!
//! The messages are encoded and decoded by `netlink-packet-netfilter`; what the packets mean is
//! `crate::drops`'s business.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::nflog::{
    ConfigCmd, ConfigFlags, ConfigMode, ConfigNla, PacketNla, Timeout, ULogMessage, config_request,
};
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// The most datagrams one [`NflogSocket::recv`] takes.
const DATAGRAMS_PER_BATCH: usize = 256;

/// `MSG_DONTWAIT`, as the `recv` flags of `netlink-sys` take it.
fn libc_dontwait() -> i32 {
    nix::sys::socket::MsgFlags::MSG_DONTWAIT.bits()
}

/// How the kernel should batch messages for a listener.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Bytes of each packet copied (the headers are enough).
    pub copy_range: u32,
    /// Send once this many packets are queued …
    pub queue_threshold: u32,
    /// … or after this many hundredths of a second.
    pub flush_hundredths: u32,
    /// The socket's receive buffer.
    pub receive_buffer: usize,
}

impl Tuning {
    /// For a person watching: every packet at once.
    pub const INTERACTIVE: Tuning = Tuning {
        copy_range: 128,
        queue_threshold: 1,
        flush_hundredths: 10,
        receive_buffer: 1 << 20,
    };
    /// For the daemon: batches, flushed at least every 100 ms.
    pub const BATCHED: Tuning = Tuning {
        copy_range: 96,
        queue_threshold: 32,
        flush_hundredths: 10,
        receive_buffer: 4 << 20,
    };
}

/// One packet the kernel logged.
#[derive(Clone, Debug)]
pub struct Logged {
    /// The group it was logged to.
    pub group: u16,
    /// The NFLOG prefix.
    pub prefix: String,
    /// The first bytes of the packet, from the IP header on.
    pub payload: Vec<u8>,
    /// The input interface's name.
    pub in_interface: Option<String>,
}

/// What one read brought.
#[derive(Debug, Default)]
pub struct Batch {
    pub packets: Vec<Logged>,
    /// Packets the kernel numbered but that never arrived (the socket's buffer overflowed),
    /// as far as the sequence numbers tell.
    pub lost: u64,
}

/// Why a group could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another socket holds it (the kernel allows one per group and network namespace).
    #[error("NFLOG group {group} is held by another program: {holder}")]
    Held {
        group: u16,
        /// Who, as far as `/proc` tells.
        holder: String,
    },
    /// Anything else: no permission, no nfnetlink_log, …
    #[error("cannot listen on NFLOG group {group}: {error}")]
    Other { group: u16, error: io::Error },
}

/// A netlink socket bound to some NFLOG groups.
pub struct NflogSocket {
    socket: Socket,
    buffer: Vec<u8>,
    /// The last sequence number seen per group, to count what was lost.
    sequence: HashMap<u16, u32>,
    names: HashMap<u32, String>,
    names_read: Instant,
}

impl NflogSocket {
    /// Opens a socket and binds `groups`, copying `copy_range` bytes of each packet.
    pub fn bind(groups: &[u16], tuning: Tuning) -> Result<NflogSocket, BindError> {
        let first = groups.first().copied().unwrap_or_default();
        let other = |group, error| BindError::Other { group, error };
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| other(first, e))?;
        socket.bind_auto().map_err(|e| other(first, e))?;
        // A bigger buffer rides out bursts: beyond rmem_max as root (SO_RCVBUFFORCE), else up
        // to it.
        if nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::RcvBufForce,
            &tuning.receive_buffer,
        )
        .is_err()
        {
            let _ = socket.set_rx_buf_sz(tuning.receive_buffer);
        }
        let mut nflog = NflogSocket {
            socket,
            buffer: Vec::with_capacity(256 * 1024),
            sequence: HashMap::new(),
            names: HashMap::new(),
            names_read: Instant::now(),
        };
        for &group in groups {
            let configs = [
                vec![ConfigNla::Cmd(ConfigCmd::Bind)],
                vec![
                    ConfigNla::Mode(ConfigMode::new_packet(tuning.copy_range)),
                    ConfigNla::QThresh(tuning.queue_threshold),
                    ConfigNla::Timeout(Timeout::new(tuning.flush_hundredths)),
                    ConfigNla::Flags(ConfigFlags::SEQ),
                ],
            ];
            for nlas in configs {
                match nflog.request(config_request(NetfilterProtoFamily::Unspec, group, nlas)) {
                    Ok(()) => {}
                    // Another socket's group: EPERM (not its owner), or EBUSY on a bind.
                    Err(error)
                        if error.raw_os_error() == Some(nix::errno::Errno::EBUSY as i32)
                            || (error.raw_os_error() == Some(nix::errno::Errno::EPERM as i32)
                                && held_by_other(group)) =>
                    {
                        return Err(BindError::Held {
                            group,
                            holder: holder_of(group),
                        });
                    }
                    Err(error) => return Err(other(group, error)),
                }
            }
        }
        Ok(nflog)
    }

    /// Sends a config request and waits for its acknowledgement.
    fn request(&mut self, mut message: NetlinkMessage<NetfilterMessage>) -> io::Result<()> {
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.socket.send_to(&bytes, &SocketAddr::new(0, 0), 0)?;
        loop {
            self.buffer.clear();
            self.socket.recv(&mut self.buffer, 0)?;
            for message in messages(&self.buffer) {
                if let Ok(NetlinkPayload::Error(error)) = message.map(|m| m.payload) {
                    return match error.code {
                        None => Ok(()),
                        Some(_) => Err(error.to_io()),
                    };
                }
            }
        }
    }

    /// Waits for the next packets.
    pub fn recv(&mut self) -> io::Result<Batch> {
        let mut batch = Batch::default();
        if self.names_read.elapsed() > Duration::from_secs(10) {
            self.names.clear();
            self.names_read = Instant::now();
        }
        // The first datagram is waited for; whatever else is queued already is taken along
        // (our rules log with threshold 1, so a datagram is often one packet).
        for round in 0..DATAGRAMS_PER_BATCH {
            self.buffer.clear();
            let flags = if round == 0 { 0 } else { libc_dontwait() };
            match self.socket.recv(&mut self.buffer, flags) {
                Ok(_) => {}
                // The kernel dropped messages for us; the sequence numbers say how many.
                Err(error) if error.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) => {
                    continue;
                }
                Err(error)
                    if round > 0
                        && error.raw_os_error() == Some(nix::errno::Errno::EAGAIN as i32) =>
                {
                    break;
                }
                Err(error) if round > 0 => {
                    tracing::debug!(%error, "reading NFLOG");
                    break;
                }
                Err(error) => return Err(error),
            }
            let buffer = std::mem::take(&mut self.buffer);
            self.packets(&buffer, &mut batch);
            self.buffer = buffer;
        }
        Ok(batch)
    }

    fn packets(&mut self, buffer: &[u8], batch: &mut Batch) {
        for message in messages(buffer).flatten() {
            let group = match &message.payload {
                NetlinkPayload::InnerMessage(inner) => inner.header.res_id,
                _ => continue,
            };
            let NetlinkPayload::InnerMessage(NetfilterMessage {
                inner: NetfilterMessageInner::ULog(ULogMessage::Packet(nlas)),
                ..
            }) = message.payload
            else {
                continue;
            };
            if let Some(packet) = self.packet(group, nlas, &mut batch.lost) {
                batch.packets.push(packet);
            }
        }
    }

    fn packet(&mut self, group: u16, nlas: Vec<PacketNla>, lost: &mut u64) -> Option<Logged> {
        let mut logged = Logged {
            group,
            prefix: String::new(),
            payload: Vec::new(),
            in_interface: None,
        };
        for nla in nlas {
            match nla {
                PacketNla::Prefix(prefix) => {
                    logged.prefix = prefix.to_string_lossy().into_owned();
                }
                PacketNla::Payload(payload) => logged.payload = payload,
                PacketNla::IfIndexInDev(index) => logged.in_interface = self.name(index),
                PacketNla::Seq(seq) => {
                    if let Some(last) = self.sequence.insert(group, seq) {
                        *lost += u64::from(seq.wrapping_sub(last).saturating_sub(1));
                    }
                }
                _ => {}
            }
        }
        Some(logged)
    }

    fn name(&mut self, index: u32) -> Option<String> {
        if let Some(name) = self.names.get(&index) {
            return Some(name.clone());
        }
        let name = nix::net::if_::if_indextoname(index)
            .ok()?
            .to_string_lossy()
            .into_owned();
        self.names.insert(index, name.clone());
        Some(name)
    }
}

/// The netlink messages in one datagram.
fn messages(
    buffer: &[u8],
) -> impl Iterator<Item = Result<NetlinkMessage<NetfilterMessage>, netlink_packet_core::DecodeError>> + '_
{
    let mut offset = 0;
    std::iter::from_fn(move || {
        let rest = buffer.get(offset..).filter(|r| r.len() >= 16)?;
        let length = NetlinkBuffer::new_checked(rest).ok()?.length() as usize;
        if length < 16 {
            return None;
        }
        let message = NetlinkMessage::deserialize(&rest[..length.min(rest.len())]);
        offset += (length + 3) & !3;
        Some(message)
    })
}

/// Whether `/proc/net/netfilter/nfnetlink_log` lists `group` as bound.
fn held_by_other(group: u16) -> bool {
    std::fs::read_to_string("/proc/net/netfilter/nfnetlink_log")
        .map(|text| {
            crate::drops::group_holders(&text)
                .iter()
                .any(|(g, _)| *g == group)
        })
        .unwrap_or(false)
}

/// Who holds `group`, in words: `tcpdump (pid 1234)`, or the port id when no process can be
/// named.
pub fn holder_of(group: u16) -> String {
    let Some(portid) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_log")
        .ok()
        .and_then(|text| {
            crate::drops::group_holders(&text)
                .into_iter()
                .find(|(g, _)| *g == group)
        })
        .map(|(_, portid)| portid)
    else {
        return "a program /proc/net/netfilter/nfnetlink_log does not name".to_owned();
    };
    match process_of_portid(portid) {
        Some((pid, comm)) => format!("{comm} (pid {pid})"),
        None => format!("netlink port id {portid}, whose process cannot be found"),
    }
}

/// The process owning the netfilter netlink socket with `portid`: the one with that socket's
/// inode among its file descriptors, or else (the first netlink socket of a process gets its
/// pid as port id) the process with that pid.
fn process_of_portid(portid: u32) -> Option<(u32, String)> {
    let inode = std::fs::read_to_string("/proc/net/netlink")
        .ok()
        .and_then(|text| socket_inode(&text, portid));
    if let Some(inode) = inode
        && let Some(found) = process_with_socket(inode)
    {
        return Some(found);
    }
    let comm = std::fs::read_to_string(format!("/proc/{portid}/comm")).ok()?;
    Some((portid, comm.trim().to_owned()))
}

/// The inode of the netfilter (protocol 12) socket with `portid` in `/proc/net/netlink`
/// (columns sk, Eth, Pid, Groups, Rmem, Wmem, Dump, Locks, Drops, Inode).
pub fn socket_inode(text: &str, portid: u32) -> Option<u64> {
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let protocol: u32 = fields.get(1)?.parse().ok()?;
        let pid: i64 = fields.get(2)?.parse().ok()?;
        (protocol == 12 && pid as u32 == portid)
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

fn process_with_socket(inode: u64) -> Option<(u32, String)> {
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let owns = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())
        });
        if owns {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            return Some((pid, comm.trim().to_owned()));
        }
    }
    None
}

/// The daemon's stream socket in the state directory.
pub fn stream_path(state_dir: &Path) -> std::path::PathBuf {
    state_dir.join("drops.sock")
}

/// Connects to the daemon's stream and asks it for `request`; the answer is JSON lines of
/// [`crate::drops::StreamMessage`].
pub fn open_stream(
    state_dir: &Path,
    request: &crate::drops::StreamRequest,
) -> io::Result<io::BufReader<std::os::unix::net::UnixStream>> {
    use std::io::Write as _;
    let mut stream = std::os::unix::net::UnixStream::connect(stream_path(state_dir))?;
    let mut line = serde_json::to_string(request).map_err(io::Error::other)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    Ok(io::BufReader::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_inode_of_a_netfilter_socket() {
        let text = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n\
                    0000000000000000 0   1234       00000000 0        0        0     2        0        111\n\
                    0000000000000000 12  1234       00000000 0        0        0     2        0        222\n\
                    0000000000000000 12  -4096      00000000 0        0        0     2        0        333\n";
        assert_eq!(socket_inode(text, 1234), Some(222));
        assert_eq!(socket_inode(text, (-4096i32) as u32), Some(333));
        assert_eq!(socket_inode(text, 99), None);
    }

    #[test]
    fn splits_a_datagram_into_messages() {
        let mut one = config_request(
            NetfilterProtoFamily::Unspec,
            7,
            vec![ConfigNla::Cmd(ConfigCmd::Bind)],
        );
        one.finalize();
        let mut bytes = vec![0; one.buffer_len()];
        one.serialize(&mut bytes);
        let mut two = bytes.clone();
        two.extend(&bytes);
        let parsed: Vec<_> = messages(&two).collect();
        assert_eq!(parsed.len(), 2);
        for message in parsed {
            let NetlinkPayload::InnerMessage(inner) = message.expect("parses").payload else {
                panic!("not a netfilter message")
            };
            assert_eq!(inner.header.res_id, 7);
        }
        assert_eq!(messages(&two[..10]).count(), 0);
    }
}
