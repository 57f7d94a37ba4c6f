//! The fake kernel itself: it refuses what the kernel refuses, writes all or nothing where the
//! kernel does, and prints saves and listings in the kernel's layout. What the reconciler does
//! through it is tested in `reconcile::tests`.

use super::FakeKernel;
use crate::dataplane::{DataplaneError, Runner, run_checked};
use crate::model::IpFamily;
use crate::state::State;

fn run(fake: &FakeKernel, program: &str, args: &[&str], stdin: &str) -> crate::dataplane::Output {
    fake.run(program, args, Some(stdin.as_bytes()))
        .expect("runs")
}

#[test]
fn the_fake_rejects_what_the_kernel_rejects() {
    let fake = FakeKernel::new();
    // A jump to a chain that does not exist.
    let missing = "*mangle\n:npg-a - [0:0]\n-A npg-a -j npg-missing\nCOMMIT\n";
    let legacy = run(&fake, "iptables-legacy-restore", &["--noflush"], missing);
    assert_eq!(legacy.code, Some(2));
    assert!(
        legacy.stderr.contains("Couldn't load target `npg-missing'"),
        "{}",
        legacy.stderr
    );
    assert!(
        legacy.stderr.contains("Error occurred at line: 3"),
        "{}",
        legacy.stderr
    );
    let nft = run(&fake, "iptables-nft-restore", &["--noflush"], missing);
    assert_eq!(nft.code, Some(2));
    assert!(
        nft.stderr.contains("Chain 'npg-missing' does not exist"),
        "{}",
        nft.stderr
    );
    // Nothing of a failed table is written.
    let save = run(&fake, "iptables-legacy-save", &[], "");
    assert!(!save.stdout.contains("npg-a"), "{}", save.stdout);

    // Sets: a duplicate, a missing one, one still in use.
    let create = "create npg4-a hash:net family inet maxelem 1048576\nadd npg4-a 192.0.2.1/32\n";
    assert!(run(&fake, "ipset", &["restore"], create).success);
    let again = run(&fake, "ipset", &["restore"], create);
    assert_eq!(again.code, Some(1));
    assert!(
        again.stderr.contains(
            "Error in line 1: Set cannot be created: set with the same name already exists"
        ),
        "{}",
        again.stderr
    );
    assert!(
        run(
            &fake,
            "ipset",
            &["restore"],
            "create npg4-a hash:net family inet maxelem 1048576 -exist\n"
        )
        .success
    );
    let absent = run(&fake, "ipset", &["restore"], "add npg4-zz 192.0.2.1\n");
    assert!(
        absent
            .stderr
            .contains("The set with the given name does not exist"),
        "{}",
        absent.stderr
    );
    let use_it =
        "*filter\n:npg-x - [0:0]\n-A npg-x -m set --match-set npg4-a src -j RETURN\nCOMMIT\n";
    assert!(run(&fake, "iptables-legacy-restore", &["--noflush"], use_it).success);
    let busy = run(&fake, "ipset", &["restore"], "destroy npg4-a\n");
    assert_eq!(busy.code, Some(1));
    assert!(
        busy.stderr
            .contains("Set cannot be destroyed: it is in use by a kernel component")
    );
    let no_set = run(
        &fake,
        "iptables-nft-restore",
        &["--noflush"],
        "*filter\n:npg-y - [0:0]\n-A npg-y -m set --match-set npg4-nope src -j RETURN\nCOMMIT\n",
    );
    assert!(
        no_set.stderr.contains("Set npg4-nope doesn't exist."),
        "{}",
        no_set.stderr
    );
    // As the kernel prints members: a /32 without its prefix.
    let saved = run(&fake, "ipset", &["save", "npg4-a"], "");
    assert!(
        saved.stdout.contains("\nadd npg4-a 192.0.2.1\n"),
        "{}",
        saved.stdout
    );
    let gone = fake
        .run("ipset", &["save", "npg4-gone"], None)
        .expect("runs");
    assert_eq!(gone.code, Some(1));
    assert!(
        gone.stderr
            .contains("The set with the given name does not exist")
    );
}

#[test]
fn the_fake_rejects_chains_in_use_and_unknown_tables_as_the_kernel_does() {
    let fake = FakeKernel::new();
    let set = run(
        &fake,
        "ipset",
        &["restore"],
        "create npg4-a hash:net\nadd npg4-a 192.0.2.1\n",
    );
    assert!(set.success, "{}", set.stderr);
    // Chains still referenced or not empty, and an unknown table.
    let referenced = "*mangle\n:npg-a - [0:0]\n:npg-b - [0:0]\n-A npg-a -j npg-b\nCOMMIT\n";
    assert!(run(&fake, "iptables-legacy-restore", &["--noflush"], referenced).success);
    let delete_b = "*mangle\n-X npg-b\nCOMMIT\n";
    let refused = run(&fake, "iptables-legacy-restore", &["--noflush"], delete_b);
    assert_eq!(
        (refused.code, refused.stderr.as_str()),
        (Some(1), "iptables-restore: line 2 failed\n")
    );
    let not_empty = run(
        &fake,
        "iptables-legacy-restore",
        &["--noflush"],
        "*mangle\n-X npg-a\nCOMMIT\n",
    );
    assert_eq!(not_empty.code, Some(1));
    assert!(run(&fake, "iptables-nft-restore", &["--noflush"], referenced).success);
    let nft_busy = run(&fake, "iptables-nft-restore", &["--noflush"], delete_b);
    assert_eq!(nft_busy.code, Some(4));
    assert!(
        nft_busy
            .stderr
            .contains("line 2: CHAIN_DEL failed (Device or resource busy): chain npg-b")
    );
    let unknown = run(
        &fake,
        "iptables-legacy-restore",
        &["--noflush"],
        "*foo\nCOMMIT\n",
    );
    assert_eq!(unknown.code, Some(2));
    assert!(unknown.stderr.contains("unable to initialize table 'foo'"));

    // Our error path points at the input line the tool named.
    let Err(DataplaneError::Failed(failure)) = run_checked(
        &fake,
        "iptables-legacy-restore",
        &["--noflush"],
        Some(delete_b),
    ) else {
        panic!("expected a failure");
    };
    assert_eq!(failure.input_line, Some((2, "-X npg-b".to_owned())));
    let Err(DataplaneError::Failed(failure)) = run_checked(
        &fake,
        "ipset",
        &["restore"],
        Some("add npg4-a 192.0.2.9\ncreate npg4-a hash:net\n"),
    ) else {
        panic!("expected a failure");
    };
    assert_eq!(
        failure.input_line,
        Some((2, "create npg4-a hash:net".to_owned()))
    );
}

#[test]
fn the_fake_writes_an_nft_script_all_or_nothing() {
    let fake = FakeKernel::new();
    // nft: one transaction, all or nothing.
    let script = "add table ip nodeport_guard\nadd set ip nodeport_guard s { type ipv4_addr; flags interval; }\nadd element ip nodeport_guard s { 192.0.2.0/24 }\nadd chain ip nodeport_guard c\nadd rule ip nodeport_guard c ip saddr @s counter return comment \"npg:A\"\nadd rule ip nodeport_guard c counter jump nope\n";
    let failed = run(&fake, "nft", &["-f", "-"], script);
    assert_eq!(failed.code, Some(1));
    assert!(
        failed.stderr.starts_with("/dev/stdin:6:"),
        "{}",
        failed.stderr
    );
    assert!(
        failed
            .stderr
            .contains("Error: Could not process rule: No such file or directory")
    );
    let listing = fake.run("nft", &["list", "tables"], None).expect("runs");
    assert!(
        !listing.stdout.contains("nodeport_guard"),
        "{}",
        listing.stdout
    );
    let good = script.replace("counter jump nope", "counter drop");
    assert!(run(&fake, "nft", &["-f", "-"], &good).success);
    let in_use = run(
        &fake,
        "nft",
        &["-f", "-"],
        "delete set ip nodeport_guard s\n",
    );
    assert!(
        in_use.stderr.contains("Device or resource busy"),
        "{}",
        in_use.stderr
    );
    let overlap = run(
        &fake,
        "nft",
        &["-f", "-"],
        "add element ip nodeport_guard s { 192.0.2.0/25 }\n",
    );
    assert!(
        overlap
            .stderr
            .contains("interval overlaps with an existing one")
    );
    let dup = run(
        &fake,
        "nft",
        &["-f", "-"],
        "create set ip nodeport_guard s { type ipv4_addr; flags interval; }\n",
    );
    assert!(!dup.success);
    let missing_table = fake
        .run("nft", &["list", "table", "ip6", "nodeport_guard"], None)
        .expect("runs");
    assert_eq!(missing_table.code, Some(1));
    assert!(missing_table.stderr.contains("No such file or directory"));

    // Anything else is not there.
    assert!(!fake.exists("conntrack"));
    let error = fake
        .run("conntrack", &["-F"], None)
        .expect_err("not emulated");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn saves_and_listings_have_the_kernels_layout() {
    let fake = FakeKernel::new();
    let script = "*filter\n:npg-b - [0:0]\n:npg-a - [0:0]\n-A npg-b -m comment --comment \"npg:B\" -j RETURN\n-I INPUT 1 -m comment --comment \"npg:H\" -j npg-b\nCOMMIT\n";
    assert!(run(&fake, "iptables-legacy-restore", &["--noflush"], script).success);
    fake.set_counters("npg:B", 3, 180);
    let save = fake
        .run("iptables-legacy-save", &["-c"], None)
        .expect("runs")
        .stdout;
    let lines: Vec<&str> = save.lines().collect();
    assert!(
        lines[0].starts_with("# Generated by iptables-save v1.8.9 on "),
        "{save}"
    );
    assert_eq!(
        &lines[1..lines.len() - 1],
        &[
            "*filter",
            ":INPUT ACCEPT [0:0]",
            ":FORWARD ACCEPT [0:0]",
            ":OUTPUT ACCEPT [0:0]",
            ":npg-a - [0:0]",
            ":npg-b - [0:0]",
            "[0:0] -A INPUT -m comment --comment \"npg:H\" -j npg-b",
            "[3:180] -A npg-b -m comment --comment \"npg:B\" -j RETURN",
            "COMMIT",
        ]
    );
    let mut state = State::default();
    crate::dataplane::iptables::parse::parse_iptables_save(&save, IpFamily::V4, &mut state)
        .expect("parses");
    let filter = state.tables.values().next().expect("filter");
    assert_eq!(
        filter.chains["npg-b"][0]
            .counters
            .as_ref()
            .map(|c| c.packets),
        Some(3)
    );
    assert_eq!(filter.hooks["INPUT"][0].position, 1);
    // nft: the indented listing with handles, as parse_listing reads it.
    let script = "add table ip nodeport_guard\nadd set ip nodeport_guard s { type ipv4_addr; flags interval; }\nadd element ip nodeport_guard s { 198.51.100.1/32, 192.0.2.0/24 }\nadd chain ip nodeport_guard npg-m-x\nadd rule ip nodeport_guard npg-m-x ip saddr @s counter return comment \"npg:R\"\nadd chain ip nodeport_guard npg-mangle-PREROUTING { type filter hook prerouting priority -151; policy accept; }\nadd rule ip nodeport_guard npg-mangle-PREROUTING counter jump npg-m-x comment \"npg:H nodeport-guard hook\"\n";
    assert!(run(&fake, "nft", &["-f", "-"], script).success);
    let listing = fake
        .run(
            "nft",
            &["-y", "-a", "list", "table", "ip", "nodeport_guard"],
            None,
        )
        .expect("runs")
        .stdout;
    assert_eq!(
        listing,
        "table ip nodeport_guard { # handle 1\n\tset s { # handle 1\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 192.0.2.0/24, 198.51.100.1 }\n\t}\n\n\tchain npg-m-x { # handle 2\n\t\tip saddr @s counter packets 0 bytes 0 return comment \"npg:R\" # handle 3\n\t}\n\n\tchain npg-mangle-PREROUTING { # handle 4\n\t\ttype filter hook prerouting priority -151; policy accept;\n\t\tcounter packets 0 bytes 0 jump npg-m-x comment \"npg:H nodeport-guard hook\" # handle 5\n\t}\n}\n"
    );
    let mut state = State::default();
    crate::dataplane::nftables::parse::parse_listing(&listing, IpFamily::V4, &mut state);
    assert_eq!(state.sets["s"].members.len(), 2);
    assert_eq!(
        state.tables.values().next().expect("mangle").hooks["PREROUTING"].len(),
        1
    );
    let named = fake
        .run(
            "nft",
            &[
                "list",
                "chain",
                "ip",
                "nodeport_guard",
                "npg-mangle-PREROUTING",
            ],
            None,
        )
        .expect("runs")
        .stdout;
    assert!(
        named.contains("priority mangle - 1; policy accept;"),
        "{named}"
    );
}
