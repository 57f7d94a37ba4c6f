//! `grant`: write (or, with `--revoke`, delete) one time-boxed grant file in the policy
//! directory. Nothing is written unless the directory, with the new file, validates.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};

use crate::cli::{GrantArgs, GrantProto};
use crate::counters::PolicyFile;
use crate::grants::{self, Grant, GrantProtocol};
use crate::policy_set;
use crate::settings::Settings;

/// `grant …` and `grant --revoke NAME`.
pub fn run(settings: &Settings, args: &GrantArgs) -> Result<ExitCode> {
    let dir = &settings.config.policies_dir;
    if let Some(name) = &args.revoke {
        return revoke(dir, name);
    }
    let now = settings.load.now;
    let expires = match (&args.for_, &args.until) {
        (Some(duration), _) => {
            if *duration < std::time::Duration::from_secs(1) {
                bail!("`--for` must be at least 1s: a grant ends at a whole second");
            }
            let duration = jiff::SignedDuration::try_from(*duration)
                .ok()
                .and_then(|duration| now.checked_add(duration).ok());
            duration.with_context(|| {
                format!("`--for` is too long: the grant would end after {}", jiff::Timestamp::MAX)
            })?
        }
        (None, Some(until)) => crate::validate::expiry::parse_time(until).with_context(|| {
            format!(
                "`--until` `{until}` is not an RFC 3339 time with its offset, like `2026-12-05T18:00:00Z`"
            )
        })?,
        (None, None) => bail!("say how long the grant lasts: `--for DURATION` or `--until TIME`"),
    };
    // To the second, down: a grant's end is read by people, and access never lasts longer
    // than was asked.
    let expires = expires
        .round(
            jiff::TimestampRound::new()
                .smallest(jiff::Unit::Second)
                .mode(jiff::RoundMode::Floor),
        )
        .unwrap_or(expires);
    if expires <= now {
        bail!("the grant would end at {expires}, which has passed: nothing written");
    }
    let (Some(first_source), Some(first_port)) = (args.src.first(), args.port.first()) else {
        bail!("a grant needs `--src` and `--port`");
    };
    let name = match &args.name {
        Some(name) => name.clone(),
        None => grants::default_name(first_source, *first_port),
    };
    check_name(&name)?;
    if !dir.is_dir() {
        bail!(
            "the policy directory `{}` does not exist or is not a directory",
            dir.display()
        );
    }
    let path = dir.join(grants::file_name(&name));
    if path.exists() && !args.replace {
        bail!(
            "a grant named `{name}` exists (`{}`): pass `--replace` to replace it, or choose another `--name`",
            path.display()
        );
    }
    let current = policy_set::load_with(std::slice::from_ref(dir), settings.load);
    let mut grant = Grant {
        name,
        sources: args.src.clone(),
        ports: args.port.clone(),
        protocol: match args.proto {
            GrantProto::Tcp => GrantProtocol::Tcp,
            GrantProto::Udp => GrantProtocol::Udp,
        },
        expires,
        granted_by: crate::system::host::invoking_user(),
        reason: args.reason.clone(),
        order: 0.0,
    };
    grant.order = match grants::first_order(&current.validated, &grant.policy_name()) {
        Ok(order) => order,
        Err(why) => {
            eprintln!("error: {why}; nothing written");
            return Ok(ExitCode::from(1));
        }
    };
    let text = grant.render();
    // The directory as it will be: the new file in place of the old one of its name.
    let mut files: Vec<PolicyFile> = crate::counters::policy_files(&current.sources)
        .into_iter()
        .filter(|file| file.path != path)
        .collect();
    files.push(PolicyFile {
        path: path.clone(),
        text: text.clone(),
    });
    let checked = policy_set::from_files(&files, now);
    if !checked.is_valid() || !current.is_valid() {
        let shown = if current.is_valid() {
            &checked
        } else {
            &current
        };
        super::output::eprint_diagnostics(&shown.diagnostics, &shown.sources);
        eprintln!("error: the policy directory would not be valid: nothing written");
        return Ok(ExitCode::from(1));
    }
    write_atomically(&path, &text)?;
    warn_if_still_denied(settings, &checked, &grant);
    let sources: Vec<String> = grant.sources.iter().map(ToString::to_string).collect();
    let ports: Vec<String> = grant.ports.iter().map(ToString::to_string).collect();
    println!("wrote {}", path.display());
    println!(
        "{} may reach {} port{} {} until {} ({})",
        sources.join(", "),
        grant.protocol.as_str(),
        if ports.len() == 1 { "" } else { "s" },
        ports.join(", "),
        expires,
        grants::relative(expires, now)
    );
    eprintln!(
        "the daemon enforces it within a second; without the daemon, run `nodeport-guard apply`"
    );
    Ok(ExitCode::SUCCESS)
}

/// A grant only allows: a tier before `default`, or a normal (filter) policy that selects the
/// host, may still deny the granted source. Follows a new connection from the first source to
/// each port with `trace`'s evaluator and says so when it is not allowed.
fn warn_if_still_denied(settings: &Settings, set: &policy_set::PolicySet, grant: &Grant) {
    let facts = crate::system::host::host_facts(&settings.config);
    let Some(source) = grant.sources.first() else {
        return;
    };
    let family = crate::model::IpFamily::of_net(source);
    let Some(destination) = facts
        .interfaces
        .iter()
        .flat_map(|interface| &interface.addresses)
        .find(|address| {
            crate::model::IpFamily::of_addr(address) == family && !address.is_loopback()
        })
    else {
        return;
    };
    for port in &grant.ports {
        let packet = inbound_packet(source.network(), *destination, grant.protocol, *port);
        let traced = crate::trace::trace(&set.model, &settings.config, &facts, &packet);
        if traced.verdict.outcome == crate::trace::Outcome::Dropped {
            eprintln!(
                "warning: a new connection from {} to port {port} would still be dropped: {}; a grant only allows, and tiers before `default` and normal (filter) policies still apply (`nodeport-guard trace --src {} --dst {destination} --dport {port}` shows the path)",
                source.network(),
                traced.verdict.reason,
                source.network()
            );
        }
    }
}

/// A new connection from `source` to `port` of this host's `destination`, as `trace` follows it.
fn inbound_packet(
    source: std::net::IpAddr,
    destination: std::net::IpAddr,
    protocol: GrantProtocol,
    port: u16,
) -> crate::trace::Packet {
    crate::trace::Packet {
        src: source,
        dst: destination,
        protocol: match protocol {
            GrantProtocol::Tcp => 6,
            GrantProtocol::Udp => 17,
        },
        sport: Some(crate::trace::DEFAULT_SOURCE_PORT),
        dport: Some(port),
        icmp_type: None,
        icmp_code: None,
        in_interface: None,
        out_interface: None,
        travel: crate::trace::Travel::Inbound,
        state: crate::trace::ConnState::New,
    }
}

/// A grant's name becomes part of a file name and a policy name: lowercase letters, digits
/// and `-` only, so it can neither leave the directory nor need quoting.
fn check_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !valid {
        bail!(
            "`{name}` is not a grant name: use lowercase letters, digits and `-` (not first or last)"
        );
    }
    Ok(())
}

/// Writes `text` to `path` through a hidden temporary file in the same directory (which the
/// loader skips) and a rename, so the daemon never reads half a file.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary: PathBuf = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut file = fs_err::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs_err::rename(&temporary, path)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error).with_context(|| format!("cannot write `{}`", path.display()));
    }
    Ok(())
}

/// `grant --revoke NAME`: deletes `grant-NAME.yaml`. NAME may also be the policy's name,
/// `grant-NAME`, as `grants` lists it.
fn revoke(dir: &Path, name: &str) -> Result<ExitCode> {
    check_name(name)?;
    let name = match name.strip_prefix(grants::GRANT_PREFIX) {
        Some(short) if !dir.join(grants::file_name(name)).exists() => short,
        _ => name,
    };
    let path = dir.join(grants::file_name(name));
    match std::fs::remove_file(&path) {
        Ok(()) => {
            println!("removed {}", path.display());
            eprintln!(
                "the daemon enforces it within a second; without the daemon, run `nodeport-guard apply`"
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "error: no grant named `{name}`: `{}` does not exist (`nodeport-guard grants` lists them)",
                path.display()
            );
            Ok(ExitCode::from(1))
        }
        Err(error) => Err(error).with_context(|| format!("cannot remove `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests;
