// The peer of `cargo bench --bench throughput`, on the given PostgreSQL database; prints one
// JSON line of figures.
//   node run.mjs POSTGRES_URL JOBS single|batched   drains JOBS queued no-op jobs
//   node run.mjs POSTGRES_URL JOBS latency RATE     adds JOBS jobs at RATE/s to a running
//                                                   worker; add -> start latency p50/p99
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [, , url, jobsArg, mode, rateArg] = process.argv;
const jobs = Number(jobsArg);
const quiet = new Logger(() => () => {});
const now = () => performance.timeOrigin + performance.now();

const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
await utils.migrate();
if (mode !== "latency") {
  for (let added = 0; added < jobs; added += 1000) {
    const count = Math.min(1000, jobs - added);
    await utils.addJobs(Array.from({ length: count }, () => ({ identifier: "noop", payload: {} })));
  }
}

let done = 0;
let finish;
const allDone = new Promise((resolve) => (finish = resolve));
const latencies = [];
const task = async (payload) => {
  if (payload.added !== undefined) latencies.push(now() - payload.added);
  if (++done === jobs) finish();
};
// "batched": the local queue and batched completion graphile-worker offers for throughput.
const worker = mode === "batched" ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } : {};
const start = process.hrtime.bigint();
const runner = await run({
  connectionString: url,
  concurrency: 8,
  noHandleSignals: true,
  pollInterval: 100,
  logger: quiet,
  taskList: { noop: task },
  preset: { worker },
});
if (mode === "latency") {
  // Offered load: one job every 1/RATE s on an absolute schedule, whatever each add costs.
  const interval = 1000 / Number(rateArg);
  const first = now();
  const adds = [];
  for (let n = 0; n < jobs; n++) {
    const wait = first + n * interval - now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    adds.push(utils.addJob("noop", { added: now() }));
  }
  await Promise.all(adds);
}
await allDone;
await runner.stop(); // flushes batched completions: every job is durably complete here
await utils.release();
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))];
const figures = mode === "latency" ? { jobs, p50_ms: at(0.5), p99_ms: at(0.99) } : { jobs, seconds, jobs_per_second: jobs / seconds };
console.log(JSON.stringify(figures));
