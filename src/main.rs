//! The `nodeport-guard` binary: a thin shell around the library's command line.

fn main() -> std::process::ExitCode {
    nodeport_guard::cli::main()
}
