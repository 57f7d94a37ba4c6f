//! Which kernel and network namespace this is: the boot's id and the namespace's cookie. The
//! kernel never gives two namespaces of one boot the same cookie (a namespace's inode number,
//! by contrast, may be reused by a later one), so the pair names one namespace for good.

use std::io;

/// `<boot id>/<network namespace cookie>` of the calling process.
pub fn identity() -> io::Result<String> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    let probe = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let mut cookie = [0u8; 8];
    super::xtables::get(
        &probe,
        nix::libc::SOL_SOCKET,
        nix::libc::SO_NETNS_COOKIE,
        &mut cookie,
    )?;
    Ok(format!("{}/{}", boot.trim(), u64::from_ne_bytes(cookie)))
}

#[cfg(test)]
mod tests {
    /// The same process asking twice gets the same answer, and a namespace's cookie is not 0.
    #[test]
    fn identity_is_stable_and_names_a_namespace() {
        let Ok(first) = super::identity() else {
            // A kernel older than 5.14 has no cookie: the caller then keeps no view.
            return;
        };
        assert_eq!(super::identity().unwrap(), first);
        let (boot, cookie) = first.split_once('/').unwrap();
        assert_eq!(boot.len(), 36, "a boot id is a UUID: {first}");
        assert_ne!(cookie, "0");
    }
}
