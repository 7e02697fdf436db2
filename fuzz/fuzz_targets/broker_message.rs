//! Any bytes as a message from the broker: decoded as a job id, an operation message and a
//! batch outcome, as the consumers do, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use yardmaster::api::fuzzing;

fuzz_target!(|body: &[u8]| {
    fuzzing::broker_message(body);
});
