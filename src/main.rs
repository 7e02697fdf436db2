//! The `yardmaster` binary: the command line with the built-in operations.

use std::process::ExitCode;

use yardmaster::ops::OperationRegistry;

/// A job allocates and frees many small buffers (rows, JSON, futures, messages); mimalloc
/// serves them from per-thread pages, where glibc's allocator spent a fifth of the
/// embedded service's CPU (bench/profile.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    yardmaster::cli::main_with(OperationRegistry::builtin())
}
