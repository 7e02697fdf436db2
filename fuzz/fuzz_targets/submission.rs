//! Any bytes as a `POST /jobs` body: parsed and validated as the API does, never a panic;
//! whatever is accepted holds no NUL character and names a known queue.
#![no_main]

use libfuzzer_sys::fuzz_target;
use yardmaster::api::fuzzing;

fuzz_target!(|body: &[u8]| {
    fuzzing::submission(body);
});
