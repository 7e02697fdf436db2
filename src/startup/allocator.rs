//! The allocator of yardmaster's binaries: jemalloc, with dirty pages handed back to the
//! system by its background thread a second after they are freed.
//!
//! Measured with glibc's allocator (BENCHMARKS.md, 2026-11-29, memory): every thread that
//! allocates gets an arena of its own, and memory a burst frees in one (1,000 submissions
//! parsed by an HTTP worker, rows decoded on SQLite's threads) stays resident there, unused
//! by the others: 2.5–3.5 KiB per in-flight job. Capping the arenas returns it but costs a
//! third more CPU per job; jemalloc returns it and takes less CPU per job. Only Rust's
//! allocations go to it (its symbols are prefixed): SQLite and libtorch keep the C
//! library's allocator. `_RJEM_MALLOC_CONF` in the environment overrides the settings.

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read at its first allocation.
pub const SETTINGS: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Makes jemalloc, with [`SETTINGS`], the allocator of the binary (or bench) that invokes
/// it; a library's tests and fuzz targets keep the system's. Given a unit struct that wraps
/// jemalloc (the bench's counting one), that is the allocator, with the same settings.
#[macro_export]
macro_rules! use_jemalloc {
    () => {
        $crate::use_jemalloc!($crate::startup::allocator::Jemalloc);
    };
    ($allocator:path) => {
        #[global_allocator]
        static ALLOCATOR: $allocator = $allocator;

        /// Where jemalloc looks for its settings (a C string).
        #[export_name = "_rjem_malloc_conf"]
        static MALLOC_CONF: &u8 = &$crate::startup::allocator::SETTINGS[0];
    };
}
