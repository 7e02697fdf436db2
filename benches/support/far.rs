//! A worker far from its database and broker (`BENCH_ONLY=far`): `bench/far_worker.py` puts
//! a relay that holds every byte D ms each way between one `yardmaster worker` (8 slots,
//! prefetch 1, as the README's two-host setup) and PostgreSQL and RabbitMQ, for D = 0, 10
//! and 20, and counts the round trips a job costs. `BENCH_FAR_JOBS` jobs per case (default 300).

use std::process::Command;

use serde_json::Value;

use super::{number_or, release_binary};

/// The one-way delays measured, in milliseconds.
const DELAYS_MS: [u32; 3] = [0, 10, 20];
/// The worker's slots and prefetch.
const CONCURRENCY: u32 = 8;
const PREFETCH: u32 = 1;

/// One delay's figures, as `far_worker.py` printed them.
pub struct Far {
    delay_ms: u32,
    rate: f64,
    db_round_trips: f64,
    mq_round_trips: f64,
    slot_round_trips: Option<f64>,
}

pub fn figures() -> Vec<Far> {
    let jobs = number_or("BENCH_FAR_JOBS", 300);
    DELAYS_MS.iter().map(|delay| one(*delay, jobs)).collect()
}

fn one(delay_ms: u32, jobs: usize) -> Far {
    let output = Command::new("python3")
        .arg("bench/far_worker.py")
        .arg("--bin")
        .arg(release_binary())
        .args(["--jobs", &jobs.to_string(), "--delay-ms", &delay_ms.to_string()])
        .args(["--concurrency", &CONCURRENCY.to_string(), "--prefetch", &PREFETCH.to_string()])
        .output()
        .expect("python3 runs bench/far_worker.py");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "far_worker.py failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    for line in text.lines().filter(|line| !line.starts_with('{')) {
        println!("{line}");
    }
    let last = text.lines().rfind(|line| line.starts_with('{')).expect("far_worker.py prints its figures as JSON");
    let figures: Value = serde_json::from_str(last).expect("far_worker.py's JSON line parses");
    let number = |name: &str| figures[name].as_f64().unwrap_or(f64::NAN);
    Far {
        delay_ms,
        rate: number("rate"),
        db_round_trips: number("db_round_trips"),
        mq_round_trips: number("mq_round_trips"),
        slot_round_trips: figures["slot_round_trips"].as_f64(),
    }
}

impl Far {
    pub fn print(&self) {
        let per_slot = self.slot_round_trips.map_or("-".to_owned(), |trips| format!("{trips:.1}"));
        println!(
            "far worker  {:>3} ms each way ({:>3} ms round trip), {CONCURRENCY} slots, prefetch {PREFETCH}: {:>7.1} jobs/s  \
             a job holds a slot {:>5} round trips  round trips per job: {:.2} PostgreSQL, {:.2} RabbitMQ",
            self.delay_ms,
            2 * self.delay_ms,
            self.rate,
            per_slot,
            self.db_round_trips,
            self.mq_round_trips
        );
    }
}
