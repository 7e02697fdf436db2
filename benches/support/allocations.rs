//! Counts the bench process's heap allocations over a window (`BENCH_COUNT_ALLOCATIONS=1`),
//! for the in-process drains' allocations per job: jemalloc underneath, as the binary runs,
//! with a count of calls and bytes on top while a window is open. Closed, each allocation
//! pays one relaxed load. Only Rust's allocations pass here: SQLite's own go to the C
//! library's allocator, as in the binary.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use yardmaster::startup::allocator::Jemalloc;

/// The bench's global allocator.
pub struct Counting;

static OPEN: AtomicBool = AtomicBool::new(false);
static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    if OPEN.load(Relaxed) {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(size as u64, Relaxed);
    }
}

// SAFETY: every call is passed to jemalloc unchanged; the counters touch no heap.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { Jemalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { Jemalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    /// A resize counts as an allocation of the new size (it may move the block).
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (calls, bytes) made while a [`Window`] was open.
pub struct Window {
    calls: u64,
    bytes: u64,
}

impl Window {
    /// Opens a window when `BENCH_COUNT_ALLOCATIONS=1`; `None` otherwise.
    pub fn open() -> Option<Window> {
        if std::env::var("BENCH_COUNT_ALLOCATIONS").as_deref() != Ok("1") {
            return None;
        }
        OPEN.store(true, Relaxed);
        Some(Window { calls: CALLS.load(Relaxed), bytes: BYTES.load(Relaxed) })
    }

    /// Closes it: the allocations since it opened, and their bytes, per `jobs`.
    pub fn per_job(self, jobs: usize) -> (f64, f64) {
        OPEN.store(false, Relaxed);
        let calls = CALLS.load(Relaxed) - self.calls;
        let bytes = BYTES.load(Relaxed) - self.bytes;
        (calls as f64 / jobs as f64, bytes as f64 / jobs as f64)
    }
}
