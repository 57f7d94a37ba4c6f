//! Reachability checks: many TCP/UDP probes from a [`Lab`]'s client run at
//! once, each judged against what it is expected to find.

use std::net::{IpAddr, SocketAddr};

use super::lab::Lab;
use super::sock::ConnectError;
use super::{CONNECT_TIMEOUT, DROP_TIMEOUT};

/// What a probe from the client is expected to find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The connection completes and this server answers.
    Reply(&'static str),
    /// The TCP handshake reaches the node's stack, which resets it (nothing
    /// listens there): the firewall let the SYN through.
    Refused,
    /// Silently dropped: the probe times out.
    Dropped,
}

/// One TCP (or UDP) probe from the client namespace.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Source address on the client.
    pub src: IpAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// UDP instead of TCP.
    pub udp: bool,
    /// What must happen.
    pub expect: Expect,
}

/// A TCP probe from `src` to `dst` that must get `reply`.
pub fn open(src: impl Into<IpAddr>, dst: SocketAddr, reply: &'static str) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Reply(reply),
    }
}

/// A TCP probe from `src` to `dst` that must be dropped (time out).
pub fn dropped(src: impl Into<IpAddr>, dst: SocketAddr) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Dropped,
    }
}

/// A TCP probe from `src` to a closed port `dst` that must be refused, i.e.
/// reach the node's TCP stack.
pub fn refused(src: impl Into<IpAddr>, dst: SocketAddr) -> Probe {
    Probe {
        src: src.into(),
        dst,
        udp: false,
        expect: Expect::Refused,
    }
}

impl Probe {
    /// The same probe over UDP.
    pub fn udp(mut self) -> Probe {
        self.udp = true;
        self
    }

    fn run(&self, lab: &Lab) -> Result<String, ConnectError> {
        let timeout = match self.expect {
            Expect::Dropped => DROP_TIMEOUT,
            Expect::Reply(_) | Expect::Refused => CONNECT_TIMEOUT,
        };
        if self.udp {
            lab.udp_probe(self.src, self.dst, timeout)
        } else {
            lab.connect(self.src, self.dst, timeout)
        }
    }

    fn judge(&self, result: &Result<String, ConnectError>) -> Option<String> {
        let ok = match (&self.expect, result) {
            (Expect::Reply(want), Ok(got)) => want == got,
            (Expect::Refused, Err(e)) => e.is_refused(),
            (Expect::Dropped, Err(e)) => e.is_timeout(),
            _ => false,
        };
        (!ok).then(|| {
            format!(
                "{} {} -> {}: expected {:?}, got {:?}",
                if self.udp { "udp" } else { "tcp" },
                self.src,
                self.dst,
                self.expect,
                result
            )
        })
    }
}

/// Runs all probes at the same time (so a batch of expected drops costs one
/// [`DROP_TIMEOUT`], not one each) and panics listing every probe whose
/// outcome was not the expected one.
#[track_caller]
pub fn check_reachability(lab: &Lab, context: &str, probes: &[Probe]) {
    let results: Vec<Result<String, ConnectError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = probes
            .iter()
            .map(|probe| scope.spawn(move || probe.run(lab)))
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let failures: Vec<String> = probes
        .iter()
        .zip(&results)
        .filter_map(|(probe, result)| probe.judge(result))
        .collect();
    if !failures.is_empty() {
        panic!(
            "{context} ({} backend): {} of {} probes failed:\n  {}",
            lab.backend(),
            failures.len(),
            probes.len(),
            failures.join("\n  ")
        );
    }
}

/// `SocketAddr` shorthand.
pub fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}
