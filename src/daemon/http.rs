//! `/metrics` and `/healthz` over HTTP/1.1 (hyper), on a thread and event loop of their own, and
//! within limits that no client can turn against the node:
//!
//! - What a scrape costs (reading the kernel's counters, which runs programs, and writing the
//!   exposition) is done on a blocking thread at a lower priority ([`SCRAPE_NICE`]), so that no
//!   scrape can delay a reload. The event loop that accepts connections and answers them keeps
//!   the daemon's priority: on a busy node, `/healthz` must not wait behind every other
//!   process for the few microseconds a connection costs.
//! - The kernel's counters are read in one place, at most once per [`FRESH_FOR`], however many
//!   scrapes arrive: the first scrape after that reads them (one `iptables-save` or `nft
//!   list`), the scrapes that arrive meanwhile wait for its result, and the exposition made
//!   from it is shared by every response until it is stale ([`Exposition`]).
//! - The listening socket is made with `TCP_DEFER_ACCEPT` (by the caller): a connection
//!   reaches the server once its request has arrived, so idle connections never do (until
//!   [`HEAD_TIMEOUT`], after which the limits below close them).
//! - At most [`MAX_CONNECTIONS`] connections are open at once. A connection beyond them waits
//!   in the kernel's listen queue until one closes, except that a connection that has not sent
//!   its request head yet gives way to it (the one open longest is closed): idle connections
//!   cannot keep `/healthz` out.
//! - A request head larger than [`MAX_HEAD`] or not complete within [`HEAD_TIMEOUT`] is
//!   dropped; a connection lives at most [`CONNECTION_LIFETIME`]; one request per connection.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::{self, Shared};
use crate::counters::RuleCounter;

/// Connections open at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The largest request head read (hyper's smallest read buffer).
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay open in all (a client that does not read its answer).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(10);
/// How long one reading of the kernel's counters answers scrapes.
pub const FRESH_FOR: Duration = Duration::from_secs(1);
/// The nice value of the threads that read the counters and write the exposition (and of the
/// programs they run).
pub const SCRAPE_NICE: i32 = 10;

/// What the server needs to answer.
struct Server<F> {
    metrics: Shared,
    counters: F,
    stale_after: Duration,
    exposition: tokio::sync::Mutex<Option<Exposition>>,
}

/// One exposition, in both formats, shared by every response while it is fresh.
#[derive(Clone)]
struct Exposition {
    made: Instant,
    openmetrics: Bytes,
    prometheus: Bytes,
}

/// Starts the server on a thread of its own with `listener` (bound by the caller, so that a
/// wrong address stops the daemon at start). `counters` reads the kernel's counters (it runs
/// programs: it is called on a blocking thread); `stale_after` is how long the loop may be
/// silent before `/healthz` says it is unhealthy.
pub fn start<F>(
    listener: std::net::TcpListener,
    metrics: Shared,
    counters: F,
    stale_after: Duration,
) -> std::io::Result<()>
where
    F: Fn() -> Vec<RuleCounter> + Send + Sync + Clone + 'static,
{
    listener.set_nonblocking(true)?;
    // A current-thread runtime starts only its blocking threads: the scrapes' work.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(|| crate::system::runtime::lower_this_threads_priority(SCRAPE_NICE))
        .build()?;
    let server = Arc::new(Server {
        metrics,
        counters,
        stale_after,
        exposition: tokio::sync::Mutex::new(None),
    });
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, server).await,
                    Err(error) => tracing::error!(%error, "cannot serve /metrics"),
                }
            });
        })?;
    Ok(())
}

/// The open connections: which have not sent their request head yet, and how to close them.
#[derive(Default)]
struct Slots {
    open: Mutex<BTreeMap<u64, Slot>>,
    /// Signalled whenever a connection closes.
    freed: Notify,
}

struct Slot {
    waiting_for_head: Arc<std::sync::atomic::AtomicBool>,
    close: Arc<Notify>,
}

impl Slots {
    /// Takes a slot for connection `id`: a free one, or that of the connection waiting longest
    /// for its request head; `None` when all are serving requests.
    fn take(&self, id: u64) -> Option<Slot> {
        let mut open = self.open.lock().ok()?;
        if open.len() >= MAX_CONNECTIONS {
            let idle = open
                .iter()
                .find(|(_, slot)| {
                    slot.waiting_for_head
                        .load(std::sync::atomic::Ordering::Acquire)
                })
                .map(|(id, _)| *id)?;
            if let Some(evicted) = open.remove(&idle) {
                evicted.close.notify_one();
            }
        }
        let slot = Slot {
            waiting_for_head: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            close: Arc::new(Notify::new()),
        };
        open.insert(
            id,
            Slot {
                waiting_for_head: Arc::clone(&slot.waiting_for_head),
                close: Arc::clone(&slot.close),
            },
        );
        Some(slot)
    }

    fn release(&self, id: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&id);
        }
        self.freed.notify_waiters();
    }
}

async fn serve<F>(listener: TcpListener, server: Arc<Server<F>>)
where
    F: Fn() -> Vec<RuleCounter> + Send + Sync + Clone + 'static,
{
    let slots = Arc::new(Slots::default());
    let mut next_id = 0u64;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, say: wait instead of spinning.
                tracing::debug!(%error, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let slot = loop {
            let freed = slots.freed.notified();
            if let Some(slot) = slots.take(id) {
                break slot;
            }
            // Every connection is being answered: wait for one to finish.
            freed.await;
        };
        let server = Arc::clone(&server);
        let connection_slots = Arc::clone(&slots);
        tokio::spawn(async move {
            connection(stream, &server, &slot).await;
            connection_slots.release(id);
        });
        // Let the connections just opened read their heads before more are accepted (and
        // before one of them could be taken for idle).
        tokio::task::yield_now().await;
    }
}

/// One connection, until it is answered, too slow, or closed to make room.
async fn connection<F>(stream: tokio::net::TcpStream, server: &Arc<Server<F>>, slot: &Slot)
where
    F: Fn() -> Vec<RuleCounter> + Send + Sync + Clone + 'static,
{
    let waiting = Arc::clone(&slot.waiting_for_head);
    let handler = Arc::clone(server);
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        waiting.store(false, std::sync::atomic::Ordering::Release);
        let handler = Arc::clone(&handler);
        async move { Ok::<_, Infallible>(handler.answer(&request).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false);
    let serving = builder.serve_connection(TokioIo::new(stream), service);
    let head_deadline = async {
        tokio::time::sleep(HEAD_TIMEOUT).await;
        if !slot
            .waiting_for_head
            .load(std::sync::atomic::Ordering::Acquire)
        {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(CONNECTION_LIFETIME, serving) => {}
        () = head_deadline => {}
        () = slot.close.notified() => {}
    }
}

impl<F> Server<F>
where
    F: Fn() -> Vec<RuleCounter> + Send + Sync + Clone + 'static,
{
    async fn answer(&self, request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        match request.uri().path() {
            "/metrics" => {
                let exposition = self.exposition().await;
                let openmetrics = request
                    .headers()
                    .get_all(hyper::header::ACCEPT)
                    .iter()
                    .filter_map(|value| value.to_str().ok())
                    .any(|value| value.contains("application/openmetrics-text"));
                if openmetrics {
                    reply(
                        StatusCode::OK,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        exposition.openmetrics,
                    )
                } else {
                    reply(
                        StatusCode::OK,
                        "text/plain; version=0.0.4; charset=utf-8",
                        exposition.prometheus,
                    )
                }
            }
            "/healthz" => {
                let healthy = self
                    .metrics
                    .lock()
                    .ok()
                    .and_then(|m| m.heartbeat)
                    .is_some_and(|beat| beat.elapsed() < self.stale_after);
                if healthy {
                    reply(StatusCode::OK, TEXT, Bytes::from_static(b"ok\n"))
                } else {
                    reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        TEXT,
                        Bytes::from_static(b"the reconcile loop is not running\n"),
                    )
                }
            }
            _ => reply(
                StatusCode::NOT_FOUND,
                TEXT,
                Bytes::from_static(b"not found\n"),
            ),
        }
    }

    /// The exposition of the last second, or a new one: one reading of the kernel at a time
    /// (the lock is held across it, so concurrent scrapes wait for its result).
    async fn exposition(&self) -> Exposition {
        let mut cached = self.exposition.lock().await;
        if let Some(exposition) = cached.as_ref()
            && exposition.made.elapsed() < FRESH_FOR
        {
            return exposition.clone();
        }
        let counters = self.counters.clone();
        let shared = Arc::clone(&self.metrics);
        let written = tokio::task::spawn_blocking(move || {
            let rules = counters();
            let openmetrics = match shared.lock() {
                Ok(metrics) => metrics::render_openmetrics(&metrics, &rules),
                Err(_) => String::new(),
            };
            let prometheus = metrics::to_prometheus_text(&openmetrics);
            (openmetrics, prometheus)
        })
        .await
        .unwrap_or_default();
        let exposition = Exposition {
            made: Instant::now(),
            openmetrics: Bytes::from(written.0),
            prometheus: Bytes::from(written.1),
        };
        *cached = Some(exposition.clone());
        exposition
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}
