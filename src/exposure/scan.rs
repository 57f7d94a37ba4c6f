//! The inventory read from the kernel: the nat listings the dataplane reads (through the
//! `Runner`) and the sockets `system::sockets` dumps, parsed by this module's pure readers.

use std::io;

use super::{Dnat, Inventory, Listening, Transport, nft, xtables};
use crate::dataplane::{Host, nat};
use crate::system::sockets;

/// The DNAT rules nat `PREROUTING` reaches, in iptables and in other programs' nftables
/// tables, and notes on what could not be read.
pub fn published(runner: &dyn Host) -> (Vec<Dnat>, Vec<String>) {
    let listings = nat::read(runner);
    let mut dnat = Vec::new();
    let mut notes = listings.notes;
    for (family, text) in &listings.iptables {
        let (found, more) = xtables::parse_nat(text, *family);
        dnat.extend(found);
        notes.extend(more);
    }
    for json in &listings.nft_json {
        match nft::parse_ruleset(json) {
            Ok((found, more)) => {
                dnat.extend(found);
                notes.extend(more);
            }
            Err(error) => notes.push(format!("cannot read `nft -j list table`'s JSON: {error}")),
        }
    }
    (dnat, notes)
}

/// What the kernel shows of ports reachable from outside. An error when the sockets cannot
/// be read (an audit without them would hide what matters most); a nat table that cannot be
/// read is a note.
pub fn inventory(runner: &dyn Host) -> io::Result<Inventory> {
    let (dnat, notes) = published(runner);
    let ipv6_off = !crate::system::host::kernel_takes_ipv6();
    let mut inventory = Inventory {
        dnat,
        notes,
        ipv6_off,
        ..Inventory::default()
    };
    if ipv6_off {
        inventory.notes.push(format!(
            "IPv6 is off in this kernel (`{}` is 1, or missing): no IPv6 port is reachable",
            crate::system::host::DISABLE_IPV6
        ));
    }
    inventory.sockets = sockets::listening()
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot list the sockets (sock_diag): {error}"),
            )
        })?
        .into_iter()
        .filter_map(|bound| {
            let protocol = match bound.protocol {
                6 => Transport::Tcp,
                17 => Transport::Udp,
                _ => return None,
            };
            Some(Listening {
                protocol,
                address: bound.address,
                port: bound.port,
                dual_stack: bound.dual_stack,
                processes: bound.processes,
            })
        })
        .collect();
    Ok(inventory)
}
