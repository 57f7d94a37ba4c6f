//! `drops`: denied packets, live, each with the policy rule that logged it in words.
//!
//! The kernel allows one listener per NFLOG group and network namespace. When the daemon runs
//! with drop logging it is that listener, and `drops` reads its stream
//! (`<state-dir>/drops.sock`); otherwise `drops` binds the groups itself. Either way the
//! prefixes are resolved against the policy files as they are now.

use std::io::{BufRead, Write as _};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::cli::DropsArgs;
use crate::drops::{
    Filters, Line, Observed, Resolver, StreamMessage, StreamRequest, Summary, packet,
};
use crate::engine::{self, Compiling};
use crate::settings::Settings;
use crate::system::host::host_facts;
use crate::system::nflog::{self, BindError, NflogSocket, Tuning};

/// What the reading thread hands the printing loop.
enum Event {
    Packet(Observed),
    Skipped(u64),
    /// The source ended: why.
    Ended(String),
}

/// How many packets may wait between the reader and the printer before the reader skips.
const QUEUE: usize = 4096;

/// `drops [--json] [--staged] [filters] [--since D] [--count N]`.
pub fn run(settings: &Settings, args: &DropsArgs) -> Result<ExitCode> {
    let resolver = resolver(settings);
    let filters = Filters {
        policy: args.policy.clone(),
        src: args.src,
        port: args.port,
        staged: args.staged,
    };
    let (sender, events) = mpsc::channel(QUEUE);
    let since_ms = args
        .since
        .map(|since| now_ms() - i64::try_from(since.as_millis()).unwrap_or(i64::MAX));
    match nflog::open_stream(&settings.state_dir, &StreamRequest { since_ms }) {
        Ok(stream) => {
            tracing::info!("reading the daemon's stream");
            read_stream(stream, sender)?;
        }
        Err(_) if args.since.is_some() => bail!(
            "--since shows drops from the daemon's buffer of recent drops, and no daemon serves \
             one here ({} cannot be opened; the daemon keeps it while it runs with drop \
             logging); without --since, `drops` reads the NFLOG groups itself from now on",
            nflog::stream_path(&settings.state_dir).display()
        ),
        Err(_) => read_groups(settings, sender)?,
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the event loop")?;
    runtime.block_on(show(events, &resolver, &filters, args))
}

/// The resolver of the policy files; with invalid or missing files, one that knows nothing
/// (every prefix is then "unknown").
fn resolver(settings: &Settings) -> Resolver {
    let facts = host_facts(&settings.config);
    match engine::compile(settings, &facts) {
        Compiling::Compiled(set, _) => Resolver::new(&set.model, &settings.config),
        Compiling::Invalid(_) => {
            eprintln!(
                "warning: the policy files are invalid (see `nodeport-guard validate`); prefixes are shown unresolved"
            );
            Resolver::default()
        }
        Compiling::MissingDirectory => {
            eprintln!(
                "warning: the policy directory `{}` does not exist; prefixes are shown unresolved",
                settings.config.policies_dir.display()
            );
            Resolver::default()
        }
    }
}

/// Binds our groups and reads them on a thread.
fn read_groups(settings: &Settings, sender: mpsc::Sender<Event>) -> Result<()> {
    let mut groups = vec![
        settings.config.nflog_group,
        settings.config.nflog_group_egress,
    ];
    groups.dedup();
    let mut socket = match NflogSocket::bind(&groups, Tuning::INTERACTIVE) {
        Ok(socket) => socket,
        Err(error @ BindError::Held { .. }) => {
            bail!("{error}; stop it or use the daemon's stream (`nodeport-guard run` serves it)")
        }
        Err(BindError::Other { error, .. })
            if error.raw_os_error() == Some(nix::errno::Errno::EPERM as i32) =>
        {
            bail!(
                "cannot listen on the NFLOG groups: {error}; `drops` needs root (CAP_NET_ADMIN) in the node's network namespace"
            )
        }
        Err(error) => return Err(error.into()),
    };
    std::thread::Builder::new()
        .name("nflog".into())
        .spawn(move || {
            let mut skipped = 0;
            loop {
                let batch = match socket.recv() {
                    Ok(batch) => batch,
                    Err(error) => {
                        let _ = sender.blocking_send(Event::Ended(format!(
                            "reading the NFLOG groups failed: {error}"
                        )));
                        return;
                    }
                };
                skipped += batch.lost;
                for logged in batch.packets {
                    let observed = Observed {
                        time_ms: now_ms(),
                        group: logged.group,
                        prefix: logged.prefix,
                        in_interface: logged.in_interface,
                        packet: packet::parse(&logged.payload),
                    };
                    match sender.try_send(Event::Packet(observed)) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => skipped += 1,
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                // A full queue keeps the count for the next time.
                if skipped > 0 && sender.try_send(Event::Skipped(skipped)).is_ok() {
                    skipped = 0;
                }
            }
        })
        .context("cannot start the reading thread")?;
    Ok(())
}

/// Reads the daemon's stream on a thread.
fn read_stream(stream: impl BufRead + Send + 'static, sender: mpsc::Sender<Event>) -> Result<()> {
    std::thread::Builder::new()
        .name("stream".into())
        .spawn(move || {
            for line in stream.lines() {
                let Ok(line) = line else { break };
                let event = match serde_json::from_str::<StreamMessage>(&line) {
                    Ok(StreamMessage::Drop(observed)) => Event::Packet(observed),
                    Ok(StreamMessage::Skipped { count }) => Event::Skipped(count),
                    Ok(StreamMessage::Refused { reason }) => Event::Ended(reason),
                    Err(_) => continue,
                };
                if sender.blocking_send(event).is_err() {
                    return;
                }
            }
            let _ = sender.blocking_send(Event::Ended("the daemon's stream closed".to_owned()));
        })
        .context("cannot start the reading thread")?;
    Ok(())
}

/// Prints what matches until `--count` is reached (exit 0), a signal (summary, exit 0) or the
/// source ends (summary, exit 1).
async fn show(
    mut events: mpsc::Receiver<Event>,
    resolver: &Resolver,
    filters: &Filters,
    args: &DropsArgs,
) -> Result<ExitCode> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let zone = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    let mut summary = Summary::default();
    let mut stdout = std::io::stdout().lock();
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        match event {
            Some(Event::Packet(observed)) => {
                let verdict = resolver.resolve(&observed.prefix);
                if !filters.matches(&observed, &verdict) {
                    summary.filtered += 1;
                    continue;
                }
                summary.count(&observed, &verdict);
                let line = Line::new(&observed, &verdict, &zone);
                let text = if args.json {
                    serde_json::to_string(&line)?
                } else {
                    line.text()
                };
                if writeln!(stdout, "{text}")
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    // The reader of our output went away (a closed pipe): nothing to show to.
                    return Ok(ExitCode::SUCCESS);
                }
                if args.count.is_some_and(|count| summary.shown >= count) {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Some(Event::Skipped(count)) => summary.skipped += count,
            Some(Event::Ended(why)) => {
                eprint!("{}", summary.render(10));
                bail!("{why}");
            }
            None => break,
        }
    }
    eprint!("{}", summary.render(10));
    Ok(ExitCode::SUCCESS)
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}
