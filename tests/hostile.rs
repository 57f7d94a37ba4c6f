//! Hostile input: files built to exhaust memory or time, or to smuggle text into the kernel's
//! input, get a clear error naming the file, within bounded memory (the binary runs under a
//! 1 GiB address-space limit) and time (a hang is killed and reported), and never a panic.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nodeport-guard");
/// Far more than any of these inputs needs; only a hang comes near it.
const HANG: Duration = Duration::from_secs(60);

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `nodeport-guard --config /dev/null <args>` with 1 GiB of address space at most.
fn run(args: &[&str]) -> Outcome {
    let mut command = if Path::new("/usr/bin/prlimit").exists() {
        let mut command = Command::new("/usr/bin/prlimit");
        command.arg("--as=1073741824").arg("--").arg(BIN);
        command
    } else {
        Command::new(BIN)
    };
    let mut child = command
        .args(["--config", "/dev/null"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nodeport-guard");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let output = child.wait_with_output().expect("output");
            return Outcome {
                code: status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            };
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            panic!("nodeport-guard {args:?} hung for more than {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).expect("create");
    file.write_all(bytes).expect("write");
    path
}

/// Validating `file` fails cleanly: exit 1, an error naming the file, no panic.
fn assert_refused(file: &Path, expected: &str) -> Outcome {
    let outcome = run(&["validate", &file.display().to_string()]);
    assert_eq!(outcome.code, Some(1), "stderr: {}", outcome.stderr);
    assert!(
        !outcome.stderr.contains("panicked") && !outcome.stderr.contains("internal error"),
        "{}",
        outcome.stderr
    );
    let first = outcome.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&file.display().to_string()),
        "the error must name the file: {first}"
    );
    assert!(
        outcome.stderr.contains(expected),
        "expected {expected:?} in:\n{}",
        outcome.stderr
    );
    outcome
}

#[test]
fn an_alias_bomb_is_refused_early() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..30 {
        let previous = level - 1;
        let refs = vec![format!("*a{previous}"); 10].join(", ");
        text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
    }
    let file = write(dir.path(), "bomb.yaml", text.as_bytes());
    assert_refused(&file, "alias");
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let depth = 100_000;
    let text = format!("spec: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    let file = write(dir.path(), "deep.yaml", text.as_bytes());
    assert_refused(&file, "error:");
    let mapping: String = (0..5_000)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    let file = write(dir.path(), "deep-map.yaml", mapping.as_bytes());
    assert_refused(&file, "error:");
}

#[test]
fn huge_files_are_refused_before_reading_them_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("huge.yaml");
    let handle = std::fs::File::create(&file).expect("create");
    handle.set_len(64 * 1024 * 1024).expect("sparse file");
    assert_refused(&file, "bytes are allowed");
}

#[test]
fn many_documents_are_handled_in_bounded_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    for i in 0..5_000 {
        text.push_str(&format!(
            "---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {{name: set-{i}}}\nspec: {{nets: [192.0.2.0/24]}}\n"
        ));
    }
    let file = write(dir.path(), "many.yaml", text.as_bytes());
    let outcome = run(&["validate", &file.display().to_string()]);
    assert_eq!(outcome.code, Some(0), "{}", outcome.stderr);
    assert!(
        outcome.stdout.contains("5000 network sets"),
        "{}",
        outcome.stdout
    );
    let empty_documents = "---\n".repeat(2_000_000);
    let file = write(dir.path(), "markers.yaml", empty_documents.as_bytes());
    let outcome = run(&["validate", &file.display().to_string()]);
    assert_ne!(
        outcome.code, None,
        "no crash on a storm of document markers"
    );
}

#[test]
fn bytes_that_are_not_text_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(
        dir.path(),
        "latin1.yaml",
        b"kind: GlobalNetworkSet\nmetadata: {name: caf\xe9}\n",
    );
    assert_refused(&file, "not UTF-8");
    let file = write(
        dir.path(),
        "nul.yaml",
        b"kind: GlobalNetworkSet\0\nmetadata: {name: x}\n",
    );
    assert_refused(&file, "NUL byte");
}

#[test]
fn names_and_annotations_cannot_break_out_of_kernel_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = |name: &str, annotation: &str| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n  preDNAT: true\n  applyOnForward: true\n  ingress:\n  - action: Deny\n    metadata:\n      annotations:\n        note: {annotation}\n"
        )
    };
    let file = write(
        dir.path(),
        "name.yaml",
        policy("\"x\\\"\\n-A INPUT -j ACCEPT\\n#\"", "fine").as_bytes(),
    );
    assert_refused(&file, "name");
    let file = write(
        dir.path(),
        "newline.yaml",
        policy("x", "\"a\\nCOMMIT\\n*filter\"").as_bytes(),
    );
    assert_refused(&file, "control character");

    // Quotes and shell characters are allowed in annotations, and come out sanitised.
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("dir");
    write(
        &policies,
        "quote.yaml",
        policy("x", "'say \"hi\"; $(reboot) `id` \\\\ -j ACCEPT'").as_bytes(),
    );
    let outcome = run(&["--policies", &policies.display().to_string(), "render"]);
    assert_eq!(outcome.code, Some(0), "{}", outcome.stderr);
    let rule = outcome
        .stdout
        .lines()
        .find(|line| line.contains("note="))
        .expect("the annotation is rendered as a comment");
    let comment_start = rule.find("note=").expect("note");
    let comment = &rule[comment_start..];
    let comment = &comment[..comment.find('"').expect("the comment is closed")];
    assert!(!comment.contains(['$', '`', '\\', '\'']), "{comment}");
    assert_eq!(
        rule.matches('"').count() % 2,
        0,
        "quotes stay balanced: {rule}"
    );
}

#[test]
fn symlink_loops_fifos_and_devices_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::os::unix::fs::symlink(&b, &a).expect("link");
    std::os::unix::fs::symlink(&a, &b).expect("link");
    assert_refused(&a, "symbolic links");

    let fifo = dir.path().join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    assert_refused(&fifo, "not a regular file");

    let zero = dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("link");
    assert_refused(&zero, "not a regular file");

    // In a directory, they are reported too, and the good files are still read.
    write(
        dir.path(),
        "good.yaml",
        b"apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: ok}\n",
    );
    let outcome = run(&["validate", &dir.path().display().to_string()]);
    assert_eq!(outcome.code, Some(1));
    for name in ["a.yaml", "fifo.yaml", "zero.yaml"] {
        assert!(
            outcome.stderr.contains(name),
            "{name} not reported: {}",
            outcome.stderr
        );
    }
}

#[test]
fn files_others_may_change_are_reported_and_refused_when_strict() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(
        dir.path(),
        "open.yaml",
        b"apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: ok}\n",
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let dir_arg = dir.path().display().to_string();
    let relaxed = run(&["validate", &dir_arg]);
    assert_eq!(relaxed.code, Some(0), "{}", relaxed.stderr);
    assert!(
        relaxed.stderr.contains("warning:") && relaxed.stderr.contains("every user"),
        "{}",
        relaxed.stderr
    );
    let strict = run(&["--strict-permissions", "validate", &dir_arg]);
    assert_eq!(strict.code, Some(1), "{}", strict.stderr);
    assert!(
        strict.stderr.contains("error:") && strict.stderr.contains("open.yaml"),
        "{}",
        strict.stderr
    );
}

#[test]
fn a_config_file_others_may_change_is_reported() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(dir.path(), "config.yaml", b"nodeName: node1\n");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o646)).expect("chmod");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("dir");
    let run_with = |strict: bool| {
        let mut args = vec!["--config".to_owned(), config.display().to_string()];
        if strict {
            args.push("--strict-permissions".to_owned());
        }
        args.extend(["validate".to_owned(), policies.display().to_string()]);
        let output = Command::new(BIN).args(&args).output().expect("run");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run_with(false);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("config file"),
        "{stderr}"
    );
    let (code, stderr) = run_with(true);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error:") && stderr.contains("config file"),
        "{stderr}"
    );
}

/// A file not every user may read (here a root-only "secret" linked into
/// the policy directory, as `/etc/shadow` could be) is rejected by position
/// only: its lines never appear in the message, which may end up in a
/// journal others read. A world-readable file with the same text gets the
/// usual code frame.
#[test]
fn lines_of_files_others_may_not_read_are_never_quoted() {
    use std::os::unix::fs::PermissionsExt as _;
    let secret_dir = tempfile::tempdir().expect("tempdir");
    let secret = write(
        secret_dir.path(),
        "shadow",
        b"root:$6$TOPSECRETHASH$x:19000:0:99999:7:::\n",
    );
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let policies = tempfile::tempdir().expect("tempdir");
    let link = policies.path().join("linked.yaml");
    std::os::unix::fs::symlink(&secret, &link).expect("symlink");

    let out = run(&["validate", &policies.path().display().to_string()]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("linked.yaml:1:1: error:"),
        "the position is named: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("TOPSECRET") && !out.stdout.contains("TOPSECRET"),
        "the file's text leaked: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("not every user may read"),
        "{}",
        out.stderr
    );

    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let readable = run(&["validate", &policies.path().display().to_string()]);
    assert!(
        readable.stderr.contains("TOPSECRET"),
        "a file everyone may read is quoted: {}",
        readable.stderr
    );
}

/// `nodeport-guard schema | head -0`: a reader that goes away before the output is read ends
/// the command quietly with exit 1, not with a panic; with stderr gone too, not with an abort.
#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    for stderr_closed in [false, true] {
        let (closed_read, write_end) = nix::unistd::pipe().expect("pipe");
        drop(closed_read);
        let mut command = Command::new(BIN);
        command
            .args(["--config", "/dev/null", "schema"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end.try_clone().expect("dup")));
        if stderr_closed {
            command.stderr(Stdio::from(write_end));
        } else {
            drop(write_end);
            command.stderr(Stdio::piped());
        }
        let output = command.output().expect("run nodeport-guard schema");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "stderr closed: {stderr_closed}; {:?}; {stderr}",
            output.status
        );
        assert!(
            stderr.is_empty(),
            "nothing is said of a closed pipe: {stderr}"
        );
    }
}
