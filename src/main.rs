//! The `nodeport-guard` binary: parses the command line and hands it to the commands, with the
//! runner that executes the system's programs.

use std::process::ExitCode;
use std::sync::Arc;

use clap::FromArgMatches as _;
use nodeport_guard::cli::Cli;
use nodeport_guard::dataplane::SystemRunner;

/// mimalloc: threads allocate without taking a shared lock (the compile and the kernel read
/// run side by side in a reload), and a resting daemon's freed pages go back to the system
/// (`system::runtime::release_free_memory`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Usage errors exit 1 like every other error (`--help` and `--version` exit 0).
fn main() -> ExitCode {
    let cli = match nodeport_guard::cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    nodeport_guard::commands::run(&cli, Arc::new(SystemRunner))
}

/// mimalloc's `mi_option_arena_eager_commit` (its `mimalloc.h`, version 3): whether the memory
/// of an arena it reserves is committed at once. The crate's own constants follow version 2.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Has the allocator commit its memory as it is used, not an arena at a time. By default
/// mimalloc commits whole arenas on Linux (overcommit makes that free) and then cannot give
/// their freed pages back: a resting daemon kept 30-52 MiB at 1,000 policies where it uses 10
/// (`docs/performance.md`). The option counts only before the first arena is reserved, which
/// happens before `main` (set at its top it changed nothing: 29-33 MiB): so this runs from the
/// ELF initializers, before the Rust runtime starts.
#[allow(unsafe_code)]
extern "C" fn commit_heap_on_use() {
    // SAFETY: sets a tunable of the allocator; any value is valid at any time, and mimalloc
    // reads its environment only for options not set yet.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
    }
}

#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static COMMIT_HEAP_ON_USE: extern "C" fn() = commit_heap_on_use;

#[cfg(test)]
mod tests {
    /// The initializer ran in this test binary too: the option reads 0, and its neighbours in
    /// mimalloc's own numbering keep their defaults (`deprecated_eager_commit` 1 before it,
    /// `purge_decommits` 1 and `allow_large_os_pages` 0 after it), which the crate's version 2
    /// numbering would not give.
    #[test]
    #[allow(unsafe_code)]
    fn the_eager_commit_option_is_mimalloc_s_and_is_off() {
        // SAFETY: reads a tunable; any option number is valid.
        let get = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        let option = super::MI_OPTION_ARENA_EAGER_COMMIT;
        assert_eq!(
            [
                get(option - 1),
                get(option),
                get(option + 1),
                get(option + 2)
            ],
            [1, 0, 1, 0]
        );
    }
}
