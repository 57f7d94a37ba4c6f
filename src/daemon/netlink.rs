//! Noticing address and link changes through rtnetlink notifications, so the set of the
//! host's own addresses follows them within moments. The messages themselves are not parsed:
//! any notification means "read the addresses again".

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, socket,
};
use tokio::sync::mpsc::UnboundedSender;

use super::Event;

/// rtnetlink multicast groups: links, IPv4 addresses, IPv6 addresses.
const GROUPS: u32 = 0x1 | 0x10 | 0x100;

/// Starts a thread that sends [`Event::AddressesChanged`] on every link or address change.
/// Returns `false` when notifications are not available (the daemon then relies on resync).
pub fn start(events: UnboundedSender<Event>) -> bool {
    let socket = match socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    ) {
        Ok(socket) => socket,
        Err(error) => {
            tracing::warn!(%error, "cannot open an rtnetlink socket; address changes are only seen at resync");
            return false;
        }
    };
    if let Err(error) = bind(
        std::os::fd::AsRawFd::as_raw_fd(&socket),
        &NetlinkAddr::new(0, GROUPS),
    ) {
        tracing::warn!(%error, "cannot subscribe to address changes; they are only seen at resync");
        return false;
    }
    let spawned = std::thread::Builder::new()
        .name("netlink".into())
        .spawn(move || {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                match recv(std::os::fd::AsRawFd::as_raw_fd(&socket), &mut buffer, MsgFlags::empty()) {
                    Ok(0) => break,
                    Ok(_) => {
                        if events.send(Event::AddressesChanged).is_err() {
                            break;
                        }
                    }
                    // ENOBUFS: notifications were lost; reading everything again covers it.
                    Err(nix::errno::Errno::ENOBUFS) => {
                        let _ = events.send(Event::AddressesChanged);
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(error) => {
                        tracing::warn!(%error, "reading address changes failed; they are only seen at resync");
                        break;
                    }
                }
            }
        });
    spawned.is_ok()
}
