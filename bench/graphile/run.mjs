// The peer of `cargo bench --bench throughput`, on the given PostgreSQL database; prints
// "ready" once its jobs are in the table, then one JSON line of figures.
//   node run.mjs POSTGRES_URL JOBS CONCURRENCY POOL single|batched
//       drains JOBS queued no-op jobs; the window runs from the first task to the last
//       completion durably written (the runner stopped, its batched completions flushed)
//   node run.mjs POSTGRES_URL JOBS CONCURRENCY POOL latency RATE
//       adds JOBS jobs at RATE/s to a running worker; add -> start latency percentiles
// Node's own CPU over the window comes from process.cpuUsage().
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [, , url, jobsArg, concurrencyArg, poolArg, mode, rateArg] = process.argv;
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
console.log("ready");

let done = 0;
let finish;
let first;
let firstCpu;
const allDone = new Promise((resolve) => (finish = resolve));
const latencies = [];
const task = async (payload) => {
  if (first === undefined) {
    first = process.hrtime.bigint();
    firstCpu = process.cpuUsage();
  }
  if (payload.added !== undefined) latencies.push(now() - payload.added);
  if (++done === jobs) finish();
};
// "batched": the local queue and batched completion graphile-worker offers for throughput.
const worker = mode === "batched" ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } : {};
const startCpu = process.cpuUsage();
const runner = await run({
  connectionString: url,
  concurrency: Number(concurrencyArg),
  maxPoolSize: Number(poolArg),
  noHandleSignals: true,
  pollInterval: 100,
  logger: quiet,
  taskList: { noop: task },
  preset: { worker },
});
if (mode === "latency") {
  // Offered load: one job every 1/RATE s on an absolute schedule, whatever each add costs.
  const interval = 1000 / Number(rateArg);
  const start = now();
  const adds = [];
  for (let n = 0; n < jobs; n++) {
    const wait = start + n * interval - now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    adds.push(utils.addJob("noop", { added: now() }));
  }
  await Promise.all(adds);
}
await allDone;
await runner.stop(); // flushes batched completions: every job is durably complete here
const seconds = Number(process.hrtime.bigint() - first) / 1e9;
const cpu = process.cpuUsage(mode === "latency" ? startCpu : firstCpu);
await utils.release();
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))];
const figures =
  mode === "latency"
    ? { jobs, p50_ms: at(0.5), p99_ms: at(0.99), p999_ms: at(0.999) }
    : { jobs, seconds, jobs_per_second: jobs / seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6 };
console.log(JSON.stringify(figures));
