//! Long-lived connections for revocation tests: an echo server, and sessions (a TCP stream or
//! a connected UDP socket, opened with [`Connect`]) that exchange one message at a time, so a
//! test can tell the moment a connection stops carrying traffic.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::netns::Netns;

/// A TCP server in a namespace that echoes every line on every connection until it closes.
pub struct EchoServer {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    /// Listens on `bind` inside `ns`; listening when this returns.
    #[track_caller]
    pub fn start(ns: &Netns, bind: SocketAddr) -> EchoServer {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = ns.spawn(&format!("echo {bind}"), move || {
            let listener = match TcpListener::bind(bind) {
                Ok(listener) => listener,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = tx.send(Ok(listener.local_addr().expect("local_addr")));
            for stream in listener.incoming() {
                if thread_stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    std::thread::spawn(move || echo(stream));
                }
            }
        });
        let local = match rx.recv() {
            Ok(Ok(local)) => local,
            Ok(Err(e)) => panic!("echo server on {bind}: {e}"),
            Err(_) => panic!("echo server on {bind}: thread ended"),
        };
        EchoServer {
            local,
            stop,
            thread: Some(thread),
        }
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop; its thread is in the namespace, our connect is not needed
        // to succeed (the namespace may already be gone).
        let _ = TcpStream::connect_timeout(&self.local, Duration::from_millis(50));
        if let Some(thread) = self.thread.take() {
            drop(thread);
        }
    }
}

fn echo(stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if writer.write_all(format!("{line}\n").as_bytes()).is_err() {
            break;
        }
    }
}

/// Counts messages, so every exchange sends a fresh one.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A connection a test keeps talking over.
pub enum Session {
    /// A TCP stream to an [`EchoServer`].
    Tcp(BufReader<TcpStream>),
    /// A connected UDP socket to a `UdpServer` (which answers every datagram).
    Udp(UdpSocket),
}

impl Session {
    /// A TCP session over `stream`.
    pub fn tcp(stream: TcpStream) -> Session {
        Session::Tcp(BufReader::new(stream))
    }

    /// Sends one message and waits up to `timeout` for its answer: whether the connection
    /// still carries traffic.
    pub fn exchange(&mut self, timeout: Duration) -> bool {
        let message = format!("m{}", SEQUENCE.fetch_add(1, Ordering::SeqCst));
        match self {
            Session::Tcp(reader) => {
                let stream = reader.get_mut();
                if stream.set_read_timeout(Some(timeout)).is_err()
                    || stream.write_all(format!("{message}\n").as_bytes()).is_err()
                {
                    return false;
                }
                let mut line = String::new();
                matches!(reader.read_line(&mut line), Ok(n) if n > 0) && line.trim() == message
            }
            Session::Udp(socket) => {
                if socket.set_read_timeout(Some(timeout)).is_err()
                    || socket.send(message.as_bytes()).is_err()
                {
                    return false;
                }
                let mut buf = [0u8; 512];
                let deadline = std::time::Instant::now() + timeout;
                while std::time::Instant::now() < deadline {
                    match socket.recv(&mut buf) {
                        Ok(n) if String::from_utf8_lossy(&buf[..n]).ends_with(&message) => {
                            return true;
                        }
                        Ok(_) => continue,
                        Err(_) => return false,
                    }
                }
                false
            }
        }
    }
}
