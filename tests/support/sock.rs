//! TCP/UDP servers and clients running inside namespaces, without external
//! tools.
//!
//! Each server owns a thread that entered its namespace before creating the
//! socket; each client probe runs on a short-lived thread that does the same
//! (see [`Netns::run`]). Servers answer with a short line naming themselves,
//! so a test can see *which* server answered, i.e. which DNAT path was taken.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, Shutdown, SockFlag, SockType, SockaddrStorage, bind, connect as sys_connect,
    getsockopt, setsockopt, shutdown, socket, sockopt,
};
use nix::sys::time::TimeVal;

use super::netns::{Netns, unique_id};

/// Why a probe did not get its answer. The variants separate what a firewall
/// test needs to tell apart: a silent drop, an active refusal, and anything
/// else (which usually means the test or the lab is broken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// Actively refused: a TCP RST (nothing listening, or `REJECT
    /// --reject-with tcp-reset`) or ICMP port unreachable (plain `REJECT`).
    /// A RST is reported at once; an ICMP error answering a TCP SYN only
    /// when the timeout expires (see [`Connect::tcp`]).
    Refused,
    /// No answer at all before the timeout: the packets were dropped
    /// somewhere (for TCP: the SYN or the SYN-ACK, including by the sending
    /// namespace's own OUTPUT chain).
    TimedOut,
    /// An ICMP error other than port unreachable (host/net unreachable,
    /// administratively prohibited), or, for UDP, `EPERM` because the
    /// sending namespace's own OUTPUT chain dropped the datagram.
    Unreachable(String),
    /// The TCP handshake completed but no reply line arrived (reset, closed
    /// early, or the reply was dropped).
    NoReply(String),
    /// Anything else, e.g. the source address could not be bound.
    Other(String),
}

impl ConnectError {
    /// Whether this is [`ConnectError::TimedOut`], i.e. "dropped".
    pub fn is_timeout(&self) -> bool {
        matches!(self, ConnectError::TimedOut)
    }

    /// Whether this is [`ConnectError::Refused`].
    pub fn is_refused(&self) -> bool {
        matches!(self, ConnectError::Refused)
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Refused => f.write_str("connection refused"),
            ConnectError::TimedOut => f.write_str("timed out (no answer: dropped?)"),
            ConnectError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ConnectError::NoReply(why) => write!(f, "connected but no reply: {why}"),
            ConnectError::Other(why) => write!(f, "error: {why}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Maps a connect/send/recv errno to the categories above.
fn classify(errno: Errno, what: &str) -> ConnectError {
    match errno {
        Errno::ECONNREFUSED => ConnectError::Refused,
        // A blocking connect() whose SO_SNDTIMEO expires reports EINPROGRESS;
        // reads with SO_RCVTIMEO report EAGAIN.
        Errno::EINPROGRESS | Errno::EAGAIN | Errno::ETIMEDOUT => ConnectError::TimedOut,
        Errno::EHOSTUNREACH | Errno::ENETUNREACH | Errno::EACCES | Errno::EPERM => {
            ConnectError::Unreachable(format!("{what}: {errno}"))
        }
        _ => ConnectError::Other(format!("{what}: {errno}")),
    }
}

fn classify_io(err: &io::Error, what: &str) -> ConnectError {
    match err.raw_os_error() {
        Some(code) => classify(Errno::from_raw(code), what),
        None => ConnectError::Other(format!("{what}: {err}")),
    }
}

fn unspecified(dst: SocketAddr) -> IpAddr {
    match dst {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// `SO_SNDTIMEO`/`SO_RCVTIMEO` treat zero as "forever", so never pass zero.
fn nonzero(timeout: Duration) -> Duration {
    timeout.max(Duration::from_millis(1))
}

/// A probe (TCP connection or UDP request) from a chosen source address and
/// optionally a chosen source port, built fluently:
///
/// ```ignore
/// Connect::to(dst).from(src).source_port(49125).timeout(DROP_TIMEOUT).tcp(&ns)
/// ```
#[derive(Debug, Clone)]
pub struct Connect {
    dst: SocketAddr,
    src: Option<IpAddr>,
    src_port: Option<u16>,
    timeout: Duration,
}

impl Connect {
    /// A probe to `dst` from any source, with [`super::CONNECT_TIMEOUT`].
    pub fn to(dst: SocketAddr) -> Connect {
        Connect {
            dst,
            src: None,
            src_port: None,
            timeout: super::CONNECT_TIMEOUT,
        }
    }

    /// Binds the probe's socket to this local address first.
    pub fn from(mut self, src: impl Into<IpAddr>) -> Connect {
        self.src = Some(src.into());
        self
    }

    /// Binds the probe's socket to this local port first.
    pub fn source_port(mut self, port: u16) -> Connect {
        self.src_port = Some(port);
        self
    }

    /// How long to wait for the handshake and again for the reply.
    pub fn timeout(mut self, timeout: Duration) -> Connect {
        self.timeout = timeout;
        self
    }

    /// Connects over TCP from inside `ns` and returns the server's reply line
    /// (without the newline).
    ///
    /// Over a veth, an ICMP error answering the first SYN arrives while
    /// connect() still holds the socket lock, so the kernel records it as a
    /// "soft" error and keeps retransmitting: an ICMP `REJECT` therefore costs
    /// the whole timeout, like a `DROP`, but is still reported as
    /// [`ConnectError::Refused`] / [`ConnectError::Unreachable`] rather than
    /// [`ConnectError::TimedOut`]. A TCP reset is reported at once.
    pub fn tcp(&self, ns: &Netns) -> Result<String, ConnectError> {
        ns.run(|| self.tcp_here())
    }

    /// Sends one UDP datagram from inside `ns` and returns the name of the
    /// [`UdpServer`] that echoed it.
    pub fn udp(&self, ns: &Netns) -> Result<String, ConnectError> {
        ns.run(|| self.udp_here())
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        if self.src.is_none() && self.src_port.is_none() {
            return None;
        }
        Some(SocketAddr::new(
            self.src.unwrap_or_else(|| unspecified(self.dst)),
            self.src_port.unwrap_or(0),
        ))
    }

    /// The TCP probe, on a thread that is already in the right namespace.
    fn tcp_here(&self) -> Result<String, ConnectError> {
        let deadline = Instant::now() + self.timeout;
        let what = format!("connect {} -> {}", self.describe_src(), self.dst);
        let mut stream = loop {
            match self.tcp_connect_once(deadline) {
                Ok(stream) => break stream,
                Err(Attempt::Icmp(Errno::ECONNREFUSED)) => return Err(ConnectError::Refused),
                Err(Attempt::Icmp(e)) => {
                    return Err(ConnectError::Unreachable(format!(
                        "{what}: the SYN was answered with an ICMP error ({e})"
                    )));
                }
                // With a fixed source port, the previous probe's socket for the
                // same 4-tuple may still be in LAST_ACK for a moment after it
                // was closed (the peer's final ACK is in flight); the kernel
                // then refuses to reuse the 4-tuple. There is no event to wait
                // for, so poll briefly until it is gone or the deadline passes.
                Err(Attempt::Connect(Errno::EADDRNOTAVAIL))
                    if self.src_port.is_some() && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(Attempt::Connect(e)) => return Err(classify(e, &what)),
                Err(Attempt::Setup(stage, e)) => {
                    return Err(ConnectError::Other(format!("{stage} ({what}): {e}")));
                }
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(nonzero(left)))
            .map_err(|e| ConnectError::Other(format!("SO_RCVTIMEO: {e}")))?;
        read_line(&mut stream)
    }

    /// One connection attempt with a fresh socket; errors name the failing
    /// step. std's `TcpStream` cannot bind before connecting, hence raw
    /// sockets.
    fn tcp_connect_once(&self, deadline: Instant) -> Result<TcpStream, Attempt> {
        let family = match self.dst {
            SocketAddr::V4(_) => AddressFamily::Inet,
            SocketAddr::V6(_) => AddressFamily::Inet6,
        };
        let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| Attempt::Setup("socket", e))?;
        // Lets a fixed source port be bound while an earlier probe's socket
        // on it is still closing.
        setsockopt(&fd, sockopt::ReuseAddr, &true)
            .map_err(|e| Attempt::Setup("SO_REUSEADDR", e))?;
        if let Some(local) = self.local_addr() {
            bind(fd.as_raw_fd(), &SockaddrStorage::from(local))
                .map_err(|e| Attempt::Setup("bind", e))?;
        }
        // On Linux a blocking connect() honours SO_SNDTIMEO (and reports
        // EINPROGRESS when it expires), which gives a connect timeout without
        // a non-blocking socket and poll().
        let timeout = nonzero(deadline.saturating_duration_since(Instant::now()));
        let tv = TimeVal::new(
            timeout.as_secs().try_into().unwrap_or(i64::MAX),
            timeout.subsec_micros().into(),
        );
        setsockopt(&fd, sockopt::SendTimeout, &tv).map_err(|e| Attempt::Setup("SO_SNDTIMEO", e))?;
        match sys_connect(fd.as_raw_fd(), &SockaddrStorage::from(self.dst)) {
            Ok(()) => Ok(TcpStream::from(fd)),
            // An ICMP error answering the first SYN arrives (over a veth,
            // synchronously) while connect() still holds the socket lock, so
            // the kernel records it only as a "soft" error and retransmits;
            // the connect then merely times out, like after a DROP. The soft
            // error tells the two apart.
            Err(Errno::EINPROGRESS) => match soft_error(&fd) {
                Some(errno) => Err(Attempt::Icmp(errno)),
                None => Err(Attempt::Connect(Errno::EINPROGRESS)),
            },
            Err(e) => Err(Attempt::Connect(e)),
        }
    }

    /// A TCP connection from inside `ns` that stays open: the stream, for a test that keeps
    /// talking over it (see `support::session`).
    pub fn open_tcp(&self, ns: &Netns) -> Result<TcpStream, ConnectError> {
        ns.run(|| {
            let deadline = Instant::now() + self.timeout;
            let what = format!("connect {} -> {}", self.describe_src(), self.dst);
            self.tcp_connect_once(deadline)
                .map_err(|attempt| match attempt {
                    Attempt::Icmp(Errno::ECONNREFUSED) => ConnectError::Refused,
                    Attempt::Connect(e) => classify(e, &what),
                    Attempt::Icmp(e) | Attempt::Setup(_, e) => {
                        ConnectError::Other(format!("{what}: {e}"))
                    }
                })
        })
    }

    /// A UDP socket inside `ns`, bound to the source and connected to the destination, for
    /// a flow a test keeps using.
    pub fn open_udp(&self, ns: &Netns) -> Result<UdpSocket, ConnectError> {
        ns.run(|| {
            let local = self
                .local_addr()
                .unwrap_or_else(|| SocketAddr::new(unspecified(self.dst), 0));
            let sock = UdpSocket::bind(local)
                .map_err(|e| ConnectError::Other(format!("bind UDP socket to {local}: {e}")))?;
            sock.connect(self.dst).map_err(|e| {
                ConnectError::Other(format!("connect UDP socket to {}: {e}", self.dst))
            })?;
            Ok(sock)
        })
    }

    /// The UDP probe, on a thread that is already in the right namespace.
    fn udp_here(&self) -> Result<String, ConnectError> {
        let local = self
            .local_addr()
            .unwrap_or_else(|| SocketAddr::new(unspecified(self.dst), 0));
        let sock = UdpSocket::bind(local)
            .map_err(|e| ConnectError::Other(format!("bind UDP socket to {local}: {e}")))?;
        // A connected UDP socket receives ICMP errors as ECONNREFUSED etc.
        sock.connect(self.dst)
            .map_err(|e| ConnectError::Other(format!("connect UDP socket to {}: {e}", self.dst)))?;
        let token = format!("probe-{}-{}", std::process::id(), unique_id());
        let what = format!("udp {} -> {}", self.describe_src(), self.dst);
        sock.send(token.as_bytes())
            .map_err(|e| classify_io(&e, &what))?;

        let deadline = Instant::now() + self.timeout;
        let mut buf = [0u8; 2048];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectError::TimedOut);
            }
            sock.set_read_timeout(Some(nonzero(left)))
                .map_err(|e| ConnectError::Other(format!("SO_RCVTIMEO: {e}")))?;
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    // Ignore stray datagrams that do not echo this probe's token.
                    if let Some(name) = text.strip_suffix(&format!(":{token}")) {
                        return Ok(name.to_string());
                    }
                }
                Err(e) => return Err(classify_io(&e, &what)),
            }
        }
    }

    fn describe_src(&self) -> String {
        match (self.src, self.src_port) {
            (_, Some(_)) => self.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            (Some(ip), None) => ip.to_string(),
            (None, None) => "any".to_string(),
        }
    }
}

/// Why one TCP connection attempt failed.
enum Attempt {
    /// Creating, configuring or binding the socket failed in this step.
    Setup(&'static str, Errno),
    /// connect() itself failed (EINPROGRESS: timed out without any answer).
    Connect(Errno),
    /// connect() timed out, but an ICMP error answered the SYN: the packet
    /// was rejected, not silently dropped.
    Icmp(Errno),
}

/// The "soft" error the kernel recorded for a connecting socket, if any.
/// `SO_ERROR` falls back to the soft error when there is no hard one; for a
/// socket in SYN_SENT only an ICMP error answering the SYN sets it.
fn soft_error(fd: &OwnedFd) -> Option<Errno> {
    match getsockopt(fd, sockopt::SocketError) {
        Ok(0) | Err(_) => None,
        Ok(code) => Some(Errno::from_raw(code)),
    }
}

/// Reads until newline or EOF and returns the first line.
fn read_line(stream: &mut TcpStream) -> Result<String, ConnectError> {
    let mut data = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                data.extend_from_slice(&buf[..n]);
                if data.contains(&b'\n') || data.len() > 4096 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let why = match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        "no reply before the timeout".to_string()
                    }
                    _ => format!("read failed: {e}"),
                };
                return Err(ConnectError::NoReply(why));
            }
        }
    }
    if data.is_empty() {
        return Err(ConnectError::NoReply(
            "connection closed without a reply".to_string(),
        ));
    }
    let text = String::from_utf8_lossy(&data);
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// TCP connection from inside `ns`, from `src`, to `dst`; returns the reply
/// line. Use [`super::DROP_TIMEOUT`] when the connection is expected to be
/// dropped, [`super::CONNECT_TIMEOUT`] when it is expected to succeed.
pub fn connect(
    ns: &Netns,
    src: IpAddr,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<String, ConnectError> {
    Connect::to(dst).from(src).timeout(timeout).tcp(ns)
}

/// UDP request from inside `ns`, from `src`, to `dst`; returns the name of
/// the [`UdpServer`] that answered.
pub fn udp_probe(
    ns: &Netns,
    src: IpAddr,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<String, ConnectError> {
    Connect::to(dst).from(src).timeout(timeout).udp(ns)
}

/// What a server saw, shared with its thread.
#[derive(Debug, Default)]
struct ServerStats {
    count: AtomicUsize,
    peers: Mutex<Vec<SocketAddr>>,
    errors: Mutex<Vec<String>>,
}

impl ServerStats {
    fn record(&self, peer: SocketAddr) {
        // Peers first, so that whoever sees the new count also sees the peer.
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(peer);
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn error(&self, err: String) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(err);
    }

    fn peers(&self) -> Vec<SocketAddr> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Starts `body` on a thread in `ns` after `make` created its socket there,
/// and returns the socket to the caller once it is bound, so that the server
/// is guaranteed to be listening when `start` returns.
fn spawn_server<S, M, B>(ns: &Netns, label: String, make: M, body: B) -> (Arc<S>, JoinHandle<()>)
where
    S: Send + Sync + 'static,
    M: FnOnce() -> io::Result<S> + Send + 'static,
    B: FnOnce(Arc<S>) + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let handle = ns.spawn(&label, move || match make() {
        Ok(sock) => {
            let sock = Arc::new(sock);
            if tx.send(Ok(Arc::clone(&sock))).is_ok() {
                body(sock);
            }
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    });
    match rx.recv() {
        Ok(Ok(sock)) => (sock, handle),
        Ok(Err(e)) => panic!("{label} in namespace {}: cannot bind: {e}", ns.name()),
        Err(_) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{label} in namespace {}: thread exited early", ns.name()),
        },
    }
}

/// A TCP server in a namespace: answers every connection with one line (its
/// reply text) and closes it; counts connections and remembers the peers'
/// addresses (useful to check that the source address survived DNAT).
/// Stops in `Drop`.
pub struct TcpServer {
    local: SocketAddr,
    reply: String,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    listener: Arc<TcpListener>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for TcpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpServer")
            .field("local", &self.local)
            .field("reply", &self.reply)
            .field("accepted", &self.accepted())
            .finish()
    }
}

impl TcpServer {
    /// Binds `bind` inside `ns` (port 0 picks a free port) and starts
    /// accepting; the server is listening when this returns. Panics if the
    /// address cannot be bound (e.g. it is not configured in `ns`).
    #[track_caller]
    pub fn start(ns: &Netns, bind: SocketAddr, reply: &str) -> TcpServer {
        let stats = Arc::new(ServerStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let line = format!("{reply}\n").into_bytes();
        let (thread_stats, thread_stop) = (Arc::clone(&stats), Arc::clone(&stop));
        let (listener, thread) = spawn_server(
            ns,
            format!("tcp-server {bind}"),
            move || TcpListener::bind(bind),
            move |listener: Arc<TcpListener>| {
                accept_loop(&listener, &line, &thread_stats, &thread_stop)
            },
        );
        let local = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr of TCP server {bind}: {e}"));
        TcpServer {
            local,
            reply: reply.to_string(),
            stats,
            stop,
            listener,
            thread: Some(thread),
        }
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The line the server answers with.
    pub fn reply(&self) -> &str {
        &self.reply
    }

    /// Number of connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.stats.count.load(Ordering::SeqCst)
    }

    /// Peer addresses of the accepted connections, in order.
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.stats.peers()
    }

    /// Unexpected errors the accept loop ran into (normally empty).
    pub fn errors(&self) -> Vec<String> {
        self.stats
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn accept_loop(listener: &TcpListener, line: &[u8], stats: &ServerStats, stop: &AtomicBool) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((mut stream, peer)) => {
                stats.record(peer);
                // The server closes first, so TIME_WAIT ends up here and a
                // client can reuse a fixed source port right away.
                let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                let _ = stream.write_all(line);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                stats.error(format!("accept: {e}"));
                return;
            }
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // shutdown() on a listening socket wakes a thread blocked in accept()
        // (it then fails with EINVAL), which is how the thread learns to stop.
        let _ = shutdown(self.listener.as_raw_fd(), Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A UDP server in a namespace: answers every datagram with
/// `<reply>:<payload>` (an echo tagged with the server's name), counts
/// datagrams and remembers the peers. Stops in `Drop`.
pub struct UdpServer {
    local: SocketAddr,
    reply: String,
    stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    socket: Arc<UdpSocket>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for UdpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpServer")
            .field("local", &self.local)
            .field("reply", &self.reply)
            .field("received", &self.received())
            .finish()
    }
}

impl UdpServer {
    /// Binds `bind` inside `ns` and starts answering; ready when this returns.
    #[track_caller]
    pub fn start(ns: &Netns, bind: SocketAddr, reply: &str) -> UdpServer {
        let stats = Arc::new(ServerStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let name = reply.to_string();
        let (thread_stats, thread_stop) = (Arc::clone(&stats), Arc::clone(&stop));
        let (socket, thread) = spawn_server(
            ns,
            format!("udp-server {bind}"),
            move || UdpSocket::bind(bind),
            move |socket: Arc<UdpSocket>| echo_loop(&socket, &name, &thread_stats, &thread_stop),
        );
        let local = socket
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr of UDP server {bind}: {e}"));
        UdpServer {
            local,
            reply: reply.to_string(),
            stats,
            stop,
            socket,
            thread: Some(thread),
        }
    }

    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Number of datagrams received so far.
    pub fn received(&self) -> usize {
        self.stats.count.load(Ordering::SeqCst)
    }

    /// Peer addresses of the received datagrams, in order.
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.stats.peers()
    }
}

fn echo_loop(socket: &UdpSocket, name: &str, stats: &ServerStats, stop: &AtomicBool) {
    let mut buf = [0u8; 2048];
    loop {
        let received = socket.recv_from(&mut buf);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match received {
            Ok((n, peer)) => {
                stats.record(peer);
                let mut answer = format!("{name}:").into_bytes();
                answer.extend_from_slice(&buf[..n]);
                let _ = socket.send_to(&answer, peer);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // An ICMP error for an earlier answer is reported on the next
            // receive of an unconnected socket; it concerns that client only.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => {
                stats.error(format!("recv_from: {e}"));
                return;
            }
        }
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // shutdown() wakes a thread blocked in recvfrom() even on an
        // unconnected UDP socket (the call itself reports ENOTCONN).
        let _ = shutdown(self.socket.as_raw_fd(), Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
