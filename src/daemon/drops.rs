//! The daemon as the NFLOG listener: it counts denied packets per policy rule and per source
//! for `/metrics`,
//! keeps a bounded ring of recent ones, and streams them to `drops` over
//! `<state-dir>/drops.sock` (mode 0600).
//!
//! Everything is bounded: the ring, the counters' label sets, each client's queue (a slow
//! client skips packets, and is told how many), the number of clients. The reading runs on its
//! own thread, so a flood never holds up a reload; the reload only swaps the resolver.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::metrics;
use crate::drops::{Observed, Recent, Resolver, StreamMessage, StreamRequest, packet};
use crate::settings::Settings;
use crate::system::nflog::{self, NflogSocket, Tuning};

/// Recent packets kept for `drops --since`.
pub const RECENT: usize = 4096;
/// Packets queued for one client before it skips.
const CLIENT_QUEUE: usize = 1024;
/// Clients served at once.
const CLIENTS: usize = 16;

/// One client of the stream.
struct Client {
    sender: SyncSender<StreamMessage>,
    skipped: Arc<AtomicU64>,
}

/// What the reader and the stream share.
#[derive(Default)]
struct Fanout {
    recent: Option<Recent>,
    clients: Vec<Client>,
}

impl Fanout {
    /// Keeps `observed` and hands it to every client that keeps up.
    fn deliver(&mut self, observed: &Observed) {
        self.recent
            .get_or_insert_with(|| Recent::new(RECENT))
            .push(observed.clone());
        self.clients.retain(|client| {
            match client
                .sender
                .try_send(StreamMessage::Drop(observed.clone()))
            {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    client.skipped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Adds a client, with the packets since `since_ms` queued first (as many as fit).
    fn subscribe(
        &mut self,
        since_ms: Option<i64>,
    ) -> Option<(Receiver<StreamMessage>, Arc<AtomicU64>)> {
        self.clients.retain(|c| !is_gone(&c.sender));
        if self.clients.len() >= CLIENTS {
            return None;
        }
        let (sender, receiver) = sync_channel(CLIENT_QUEUE);
        let skipped = Arc::new(AtomicU64::new(0));
        if let (Some(since), Some(recent)) = (since_ms, &self.recent) {
            for observed in recent.since(since) {
                if sender.try_send(StreamMessage::Drop(observed)).is_err() {
                    skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.clients.push(Client {
            sender,
            skipped: skipped.clone(),
        });
        Some((receiver, skipped))
    }
}

/// Whether the client's thread has gone (probing with a message the thread ignores).
fn is_gone(sender: &SyncSender<StreamMessage>) -> bool {
    matches!(
        sender.try_send(StreamMessage::Skipped { count: 0 }),
        Err(TrySendError::Disconnected(_))
    )
}

/// The daemon's drop log: shared by the reader thread, the stream and the reload loop.
pub struct DropLog {
    resolver: RwLock<Resolver>,
    fanout: Mutex<Fanout>,
    metrics: metrics::Shared,
    socket_path: PathBuf,
}

impl DropLog {
    /// Starts listening when `nflogListener` is on and denials log (`logActions` has Deny);
    /// warns and returns `None` when the groups cannot be had: enforcing goes on without drop
    /// counting.
    pub fn start(settings: &Settings, metrics: metrics::Shared) -> Option<Arc<DropLog>> {
        if !settings.config.nflog_listener {
            tracing::debug!(
                "nflogListener is off: the NFLOG groups stay free for `drops` and tcpdump"
            );
            return None;
        }
        if !settings
            .config
            .log_actions
            .contains(&crate::model::Action::Deny)
        {
            tracing::info!("denials are not logged (logActions has no Deny); no drop counting");
            return None;
        }
        let mut groups = vec![
            settings.config.nflog_group,
            settings.config.nflog_group_egress,
        ];
        groups.dedup();
        let socket = match NflogSocket::bind(&groups, Tuning::BATCHED) {
            Ok(socket) => socket,
            Err(error) => {
                tracing::warn!(
                    "{error}; the daemon enforces the policies but does not count drops, and `drops` reads the groups only once that program lets go"
                );
                return None;
            }
        };
        let log = Arc::new(DropLog {
            resolver: RwLock::new(Resolver::default()),
            fanout: Mutex::new(Fanout::default()),
            metrics,
            socket_path: nflog::stream_path(&settings.state_dir),
        });
        if let Ok(mut metrics) = log.metrics.lock() {
            metrics.drops_listening = true;
        }
        let reader = log.clone();
        let started = std::thread::Builder::new()
            .name("nflog".into())
            .spawn(move || reader.read(socket));
        if let Err(error) = started {
            tracing::warn!(%error, "cannot start the NFLOG reader; no drop counting");
            return None;
        }
        match listen(&log.socket_path) {
            Ok(listener) => {
                let server = log.clone();
                let _ = std::thread::Builder::new()
                    .name("drops-stream".into())
                    .spawn(move || server.serve(listener));
            }
            Err(error) => tracing::warn!(
                socket = %log.socket_path.display(),
                "cannot serve the drop stream; `drops` cannot read drops while the daemon runs: {error}"
            ),
        }
        tracing::info!(groups = ?groups, socket = %log.socket_path.display(), "counting drops");
        Some(log)
    }

    /// Resolves prefixes against a newly applied policy set from now on.
    pub fn set_resolver(&self, resolver: Resolver) {
        if let Ok(mut current) = self.resolver.write() {
            *current = resolver;
        }
    }

    /// Removes the stream socket (the daemon is stopping).
    pub fn close(&self) {
        let _ = std::fs::remove_file(&self.socket_path);
    }

    fn read(&self, mut socket: NflogSocket) {
        loop {
            let batch = match socket.recv() {
                Ok(batch) => batch,
                Err(error) => {
                    tracing::warn!(%error, "reading the NFLOG groups failed; drop counting stops");
                    if let Ok(mut metrics) = self.metrics.lock() {
                        metrics.drops_listening = false;
                    }
                    return;
                }
            };
            let now = jiff::Timestamp::now().as_millisecond();
            let observed: Vec<Observed> = batch
                .packets
                .into_iter()
                .map(|logged| Observed {
                    time_ms: now,
                    group: logged.group,
                    prefix: logged.prefix,
                    in_interface: logged.in_interface,
                    packet: packet::parse(&logged.payload),
                })
                .collect();
            if let (Ok(resolver), Ok(mut metrics)) = (self.resolver.read(), self.metrics.lock()) {
                let metrics = &mut *metrics;
                metrics.drops_skipped += batch.lost;
                crate::drops::count_batch(
                    &resolver,
                    &observed,
                    &mut metrics.dropped,
                    &mut metrics.dropped_sources,
                );
            }
            if let Ok(mut fanout) = self.fanout.lock() {
                for packet in &observed {
                    fanout.deliver(packet);
                }
            }
        }
    }

    fn serve(self: Arc<DropLog>, listener: UnixListener) {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let log = self.clone();
            let _ = std::thread::Builder::new()
                .name("drops-client".into())
                .spawn(move || log.client(stream));
        }
    }

    fn client(&self, mut stream: UnixStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        let Ok(reader) = stream.try_clone() else {
            return;
        };
        if BufReader::new(reader).take_line(&mut line).is_err() {
            return;
        }
        let request: StreamRequest = serde_json::from_str(line.trim()).unwrap_or_default();
        let subscribed = self
            .fanout
            .lock()
            .ok()
            .and_then(|mut fanout| fanout.subscribe(request.since_ms));
        let Some((receiver, skipped)) = subscribed else {
            let refused = StreamMessage::Refused {
                reason: format!("the daemon serves {CLIENTS} `drops` at once, and that many run"),
            };
            let _ = writeln!(
                stream,
                "{}",
                serde_json::to_string(&refused).unwrap_or_default()
            );
            return;
        };
        for message in receiver {
            // The liveness probe: an empty line (which clients skip) finds a client gone.
            if matches!(message, StreamMessage::Skipped { count: 0 }) {
                if stream.write_all(b"\n").is_err() {
                    return;
                }
                continue;
            }
            let mut out = serde_json::to_string(&message).unwrap_or_default();
            out.push('\n');
            let lost = skipped.swap(0, Ordering::Relaxed);
            if lost > 0 {
                let notice = StreamMessage::Skipped { count: lost };
                out.push_str(&serde_json::to_string(&notice).unwrap_or_default());
                out.push('\n');
            }
            if stream.write_all(out.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// Reads one line, at most 4 KiB.
trait TakeLine {
    fn take_line(self, line: &mut String) -> std::io::Result<usize>;
}

impl<R: std::io::Read> TakeLine for BufReader<R> {
    fn take_line(self, line: &mut String) -> std::io::Result<usize> {
        std::io::Read::take(self, 4096).read_line(line)
    }
}

/// Binds the stream socket, replacing a stale one, readable and writable by root only.
fn listen(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(time_ms: i64) -> Observed {
        Observed {
            time_ms,
            group: 1,
            prefix: "DPI0|p".into(),
            in_interface: None,
            packet: None,
        }
    }

    #[test]
    fn a_slow_client_skips_and_is_told() {
        let mut fanout = Fanout::default();
        for i in 0..10 {
            fanout.deliver(&observed(i));
        }
        let (receiver, skipped) = fanout.subscribe(Some(5)).expect("subscribed");
        for i in 10..(10 + CLIENT_QUEUE as i64) {
            fanout.deliver(&observed(i));
        }
        // 5 recent ones queued first, then the queue filled up: 5 live ones skipped.
        assert_eq!(skipped.load(Ordering::Relaxed), 5);
        let times: Vec<i64> = receiver
            .try_iter()
            .filter_map(|m| match m {
                StreamMessage::Drop(o) => Some(o.time_ms),
                StreamMessage::Skipped { .. } | StreamMessage::Refused { .. } => None,
            })
            .collect();
        assert_eq!(times.len(), CLIENT_QUEUE);
        assert_eq!(&times[..6], &[5, 6, 7, 8, 9, 10]);
        assert_eq!(
            fanout.recent.as_ref().map(Recent::len),
            Some(RECENT.min(10 + CLIENT_QUEUE))
        );
    }

    #[test]
    fn gone_clients_are_dropped_and_clients_are_bounded() {
        let mut fanout = Fanout::default();
        let (receiver, _) = fanout.subscribe(None).expect("subscribed");
        drop(receiver);
        fanout.deliver(&observed(1));
        assert!(fanout.clients.is_empty());
        let kept: Vec<_> = (0..CLIENTS)
            .map(|_| fanout.subscribe(None).expect("room"))
            .collect();
        assert!(fanout.subscribe(None).is_none());
        drop(kept);
        assert!(fanout.subscribe(None).is_some());
    }
}
