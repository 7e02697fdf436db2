//! The `yardmaster` binary: the command line with the built-in operations.

use std::process::ExitCode;

use yardmaster::ops::OperationRegistry;

yardmaster::use_jemalloc!();

fn main() -> ExitCode {
    yardmaster::cli::main_with(OperationRegistry::builtin())
}
