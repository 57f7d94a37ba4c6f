//! The hidden `generate`: the man pages and shell completions, from the same definition the
//! binary parses its command line with.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::GenerateWhat;

/// `generate man|completions --out-dir DIR`.
pub fn run(what: GenerateWhat, out_dir: &Path) -> Result<ExitCode> {
    fs_err::create_dir_all(out_dir)?;
    let mut command = crate::cli::command();
    match what {
        GenerateWhat::Man => {
            // One page for the program and one per command, which the main page refers to;
            // the main page also gets the sections a man page has beyond `--help`.
            clap_mangen::generate_to(command.clone(), out_dir)?;
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            page.extend_from_slice(MAN_SECTIONS.as_bytes());
            fs_err::write(out_dir.join("nodeport-guard.1"), page)?;
        }
        GenerateWhat::Completions => {
            for shell in [
                clap_complete::Shell::Bash,
                clap_complete::Shell::Zsh,
                clap_complete::Shell::Fish,
            ] {
                clap_complete::generate_to(shell, &mut command, "nodeport-guard", out_dir)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The main man page's sections beyond the options and commands (roff).
pub const MAN_SECTIONS: &str = r#".SH "POLICY FILES"
Files \fB*.yaml\fR and \fB*.yml\fR directly in the policy directory
(\fB/etc/nodeport\-guard/policies\fR by default), each with one or more documents or lists of
Calico resources, \fBapiVersion: projectcalico.org/v3\fR:
.TP
.B GlobalNetworkPolicy
\fBorder\fR, \fBselector\fR, \fBtypes\fR, \fBingress\fR, \fBegress\fR, \fBpreDNAT\fR,
\fBapplyOnForward\fR, \fBdoNotTrack\fR, \fBtier\fR; rules with \fBaction\fR (Allow, Deny, Pass,
Log), \fBprotocol\fR, \fBnotProtocol\fR, \fBicmp\fR, \fBnotICMP\fR, \fBipVersion\fR,
\fBsource\fR and \fBdestination\fR (\fBnets\fR, \fBnotNets\fR, \fBselector\fR,
\fBnotSelector\fR, \fBports\fR, \fBnotPorts\fR). Whitelists for NodePorts and published ports
are \fBpreDNAT: true\fR policies: they run in mangle PREROUTING, before kube\-proxy's and
docker's DNAT, and have no default deny.
.TP
.B StagedGlobalNetworkPolicy
The same, with \fBstagedAction\fR (Set, Delete): it decides nothing and logs to NFLOG what it
would do, with prefixes naming \fBstaged:\fIpolicy\fR.
.TP
.B GlobalNetworkSet
\fBmetadata.labels\fR and \fBspec.nets\fR, which rule selectors match.
.TP
.B HostEndpoint
\fBspec.node\fR, \fBspec.interfaceName\fR, \fBspec.expectedIPs\fR, \fBspec.ports\fR,
\fBspec.profiles\fR. Without one for this node, an implicit endpoint for every interface exists,
which allows everything no policy denies.
.TP
.B Tier
\fBspec.order\fR and \fBspec.defaultAction\fR (Deny, Pass).
.PP
\fBnodeport\-guard schema\fR prints the JSON Schema of these files; \fBvalidate\fR checks them
without root.
.SH CONFIGURATION
\fB/etc/nodeport\-guard/config.yaml\fR (\fB\-\-config\fR); a missing file means all defaults,
unknown keys are errors. Keys: \fBpoliciesDir\fR, \fBbackend\fR (auto, iptables\-legacy,
iptables\-nft, nftables), \fBmarkMask\fR (0xffff0000), \fBnflogGroup\fR (1),
\fBnflogGroupEgress\fR (2), \fBlogActions\fR ([Deny]), \fBlogTarget\fR (nflog; log writes
\fBLog\fR rules to the kernel log as Felix does, with \fBlogPrefix\fR ("calico\-packet: ") and
\fBlogLevel\fR (5)), \fBfailsafeInbound\fR,
\fBfailsafeOutbound\fR, \fBnodeName\fR, \fBhostLabels\fR, \fBhostInterfaceExclude\fR,
\fBipv6\fR (auto), \fBresyncInterval\fR (90s), \fBdebounce\fR (200ms), \fBallowEmpty\fR (false),
\fBrevokeEstablished\fR (false), \fBnflogListener\fR (false), \fBmetricsAddress\fR (null),
\fBearlyDrop\fR (true: TCP SYNs that pre\-DNAT policy denies are dropped in raw PREROUTING,
before connection tracking).
The packaged file explains each; \fBnodeport\-guard schema \-\-config\-schema\fR prints its
schema.
.SH FILES
.TP
.B /etc/nodeport\-guard/config.yaml
The configuration.
.TP
.B /etc/nodeport\-guard/policies/
The policy files.
.TP
.B /run/nodeport\-guard/
The state directory (\fB\-\-state\-dir\fR): the lock, a pending confirmation, the daemon's
status, the last apply and rollback, the policy files last applied, the drop stream socket.
.SH "EXIT STATUS"
0 on success; 1 on an error or invalid input (nothing was changed in the kernel); 2 from
\fBplan \-\-detailed\-exitcode\fR when there are changes, and from
\fBstatus \-\-detailed\-exitcode\fR when the kernel is out of sync.
.SH ENVIRONMENT
.TP
.B NODEPORT_GUARD_POLICIES, NODEPORT_GUARD_STATE_DIR, NODEPORT_GUARD_NODE_NAME
Defaults for \fB\-\-policies\fR, \fB\-\-state\-dir\fR and \fB\-\-node\-name\fR.
.TP
.B RUST_LOG
Log filter, overriding \fB\-v\fR.
.TP
.B NO_COLOR
Set to anything but the empty string: no colors.
.SH EXAMPLES
.TP
.B nodeport\-guard validate
Check the policy files (as confd's check_cmd).
.TP
.B nodeport\-guard plan
Show what would change in the kernel, and which sources a change cuts off: first per policy
and set, then a diff per chain (\fB\-\-full\fR for every line), then a summary line:
.RS
.nf
What changes:
  policy allow\-cluster\-nodeport\-only (tier default): new: 12 rules in 2 chains
  nodeport\-guard's own chains (connection state, dispatch, failsafe ports): new: 42 rules in 8 chains
  jumps from the kernel's chains into ours: 2 to fix
  set npg4\-this\-host (IPv4): new, 1 member

# create chain npg\-pi\-allow\-cluste_poZ0iv3s (IPv4 mangle): ingress rules of policy `allow\-cluster\-nodeport\-only` (tier default)
@@ \-0,0 +1,9 @@
+\-A npg\-pi\-allow\-cluste_poZ0iv3s \-s 198.51.100.10/32 \-m comment ...
\&...
Plan: 10 chains to add, 0 to change, 0 to remove; 2 jumps to fix; ...
.fi
.RE
.TP
.B nodeport\-guard apply \-\-confirm\-timeout 60
Apply, and roll back unless \fBnodeport\-guard confirm\fR follows within a minute.
.TP
.B nodeport\-guard trace \-\-src 198.51.100.11 \-\-dst 192.0.2.1 \-\-dport 30008
Why this client is dropped, rule by rule, without the kernel.
.TP
.B nodeport\-guard drops \-\-policy allow\-cluster\-nodeport\-only
Who is being dropped by that policy, live.
.TP
.B nodeport\-guard status \-\-detailed\-exitcode
Whether the kernel holds what the policies say (exit 0 in sync, 2 out of sync), with the packets
per policy rule as the kernel counts them:
.RS
.nf
POLICY                       DIRECTION  RULE       PACKETS           BYTES  IN\-KERNEL
allow\-cluster\-nodeport\-only  ingress       0            14             840  yes
allow\-cluster\-nodeport\-only  ingress       1             2             120  yes

In sync: the kernel holds exactly what the policies say (iptables\-nft).
.fi
.RE
.SH "SEE ALSO"
\fBiptables\fR(8), \fBipset\fR(8), \fBnft\fR(8), \fBconntrack\fR(8),
Calico's GlobalNetworkPolicy reference.
"#;
