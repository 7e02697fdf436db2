//! Any text as the query string of `GET /jobs`, `GET /jobs/{id}/events` and the dead-letter
//! summary, parsed as the API does, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use yardmaster::api::fuzzing;

fuzz_target!(|query: &[u8]| {
    if let Ok(query) = std::str::from_utf8(query) {
        fuzzing::query_string(query);
    }
});
