//! Kernel tests of time-boxed grants (`grant`, `nodeport-guard.io/expires`) against a running
//! daemon, on every backend, with real connections: a grant lets a source the whitelist
//! denies in within a second of the file appearing; at its expiry, with no file event, new
//! connections from that source are dropped within two seconds, and with `revokeEstablished`
//! its established connection is cut too, while a whitelisted source's connection lives on.

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use support::daemon::{Daemon, daemon_config};
use support::session::{EchoServer, Session};
use support::{Backend, Connect, Guard, Lab, addr, backend_tests, sa};

/// The guarded TCP service on the node that keeps connections open (an echo server).
const SERVICE: u16 = 7100;
/// The guarded TCP service that answers each new connection (one of the lab's standard ones).
const NEW: u16 = support::ports::HOST_SERVICE;
/// How long an exchange may take on a connection that works.
const ANSWER: Duration = Duration::from_secs(1);
/// How long the grant lasts: long enough to open a connection under it.
const GRANT_FOR: Duration = Duration::from_secs(6);

/// Only `listed` may reach the service.
fn whitelist(listed: IpAddr) -> String {
    format!(
        r"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: whitelist
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: all()
  ingress:
    - action: Allow
      source:
        nets: [{listed}/32]
    - action: Deny
      protocol: TCP
      destination:
        ports: [{SERVICE}, {NEW}]
"
    )
}

/// Whether a new TCP connection from `src` to the answering service is answered.
fn connects(lab: &Lab, src: IpAddr) -> bool {
    Connect::to(sa(addr::NODE_V4, NEW))
        .from(src)
        .timeout(Duration::from_millis(250))
        .tcp(lab.client())
        .is_ok()
}

/// Polls until `wanted` holds or `within` has passed; returns how long it took.
fn poll_until(within: Duration, mut wanted: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if wanted() {
            return Some(started.elapsed());
        }
        if started.elapsed() >= within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn grant_lets_in_then_expires_and_cuts(backend: Backend) {
    let lab = Lab::new(backend);
    let _server = EchoServer::start(lab.node(), sa(addr::NODE_V4, SERVICE));
    let guard = Guard::with_config(&lab, &daemon_config("1h", "revokeEstablished: true\n"));
    let granted = IpAddr::from(addr::CLIENT_V4[0]);
    let kept = IpAddr::from(addr::CLIENT_V4[2]);
    guard.write_policy("whitelist.yaml", &whitelist(kept));
    let daemon = Daemon::start(&guard);
    assert!(!connects(&lab, granted), "the whitelist denies the source");
    let mut kept_session = Session::tcp(
        Connect::to(sa(addr::NODE_V4, SERVICE))
            .from(kept)
            .timeout(ANSWER)
            .open_tcp(lab.client())
            .expect("the whitelisted connection"),
    );

    // The grant ends at a whole second, `GRANT_FOR` from now.
    let until = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(GRANT_FOR).expect("duration"))
        .expect("time")
        .round(jiff::Unit::Second)
        .expect("round");
    let until_text = until.to_string();
    let written = guard.run_expect(
        &[
            "grant",
            "--src",
            &granted.to_string(),
            "--port",
            &format!("{SERVICE},{NEW}"),
            "--until",
            &until_text,
            "--name",
            "vendor",
            "--reason",
            "backup upload",
        ],
        0,
    );
    let written_at = Instant::now();
    assert!(written.stdout.contains("grant-vendor.yaml"), "{written}");
    assert!(written.stdout.contains(&until_text), "{written}");
    let mark = daemon.mark();
    let took = poll_until(Duration::from_secs(1), || connects(&lab, granted));
    assert!(
        took.is_some(),
        "{backend:?}: the granted source was not let in within a second of the file ({:?} since it was written)\n{}",
        written_at.elapsed(),
        daemon.log()
    );
    eprintln!(
        "{backend:?}: let in {:?} after the grant was written",
        took.unwrap_or_default()
    );
    let mut granted_session = Session::tcp(
        Connect::to(sa(addr::NODE_V4, SERVICE))
            .from(granted)
            .timeout(ANSWER)
            .open_tcp(lab.client())
            .expect("the granted connection"),
    );
    assert!(granted_session.exchange(ANSWER));
    let listed = guard.run_expect(&["grants", "--json"], 0);
    let list: serde_json::Value = serde_json::from_str(&listed.stdout).expect("GrantList JSON");
    assert_eq!(list["kind"], "GrantList");
    assert_eq!(list["items"][0]["name"], "grant-vendor");
    assert_eq!(list["items"][0]["status"], "active");
    assert_eq!(list["items"][0]["reason"], "backup upload");
    for command in ["plan", "status"] {
        let shown = guard.run_expect(&[command], 0);
        assert!(
            shown.stdout.contains("grant-vendor") && shown.stdout.contains("expires in"),
            "{command} shows the grant and when it ends: {shown}"
        );
    }

    // The expiry: no file event, no resync (1h). Until shortly before it the grant works;
    // from it on, new connections are dropped within two seconds, the granted connection is
    // cut and the whitelisted one lives on.
    let left = Duration::try_from(until.duration_since(jiff::Timestamp::now())).unwrap_or_default();
    let expiry = Instant::now() + left;
    let expiry_mark = daemon.mark();
    while Instant::now() + Duration::from_millis(400) < expiry {
        assert!(
            connects(&lab, granted),
            "{backend:?}: the grant stopped working before its expiry"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let denied = poll_until(
        expiry.saturating_duration_since(Instant::now()) + Duration::from_secs(2),
        || Instant::now() >= expiry && !connects(&lab, granted),
    );
    assert!(
        denied.is_some() && Instant::now() <= expiry + Duration::from_secs(2),
        "{backend:?}: new connections from the granted source still work two seconds after the expiry\n{}",
        daemon.log()
    );
    eprintln!(
        "{backend:?}: new connections dropped {:?} after the expiry",
        Instant::now().saturating_duration_since(expiry)
    );
    daemon.expect_log(
        expiry_mark,
        "revoked established connections",
        Duration::from_secs(2),
    );
    assert!(
        !granted_session.exchange(ANSWER),
        "{backend:?}: the granted source's established connection was not cut"
    );
    assert!(
        kept_session.exchange(ANSWER),
        "{backend:?}: the whitelisted connection was cut"
    );
    assert!(
        connects(&lab, kept),
        "the whitelist still lets its source in"
    );
    let log = daemon.log_since(mark);
    assert_eq!(
        log.matches("expiry enforced").count(),
        1,
        "each expiry is enforced once: {log}"
    );
    let at_expiry = daemon.log_since(expiry_mark);
    assert!(
        at_expiry.contains("event=Expired")
            && !at_expiry.contains("event=PoliciesChanged")
            && !at_expiry.contains("event=Resync"),
        "the reload was the expiry's own: {at_expiry}"
    );
    // The expired grant is a warning, in `plan --json` too.
    let planned = guard.run_expect(&["plan", "--json"], 0);
    let plan: serde_json::Value = serde_json::from_str(&planned.stdout).expect("Plan JSON");
    assert!(
        plan["warnings"]
            .as_array()
            .is_some_and(|warnings| warnings.iter().any(|w| w
                .as_str()
                .is_some_and(|w| w.contains("grant-vendor") && w.contains("expired")))),
        "{planned}"
    );
}
backend_tests!(grant_lets_in_then_expires_and_cuts);
