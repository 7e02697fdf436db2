// The peer of `cargo bench --bench throughput`: drains N no-op jobs with graphile-worker on
// the given PostgreSQL database and prints one JSON line of figures.
//   node run.mjs POSTGRES_URL JOBS single|batched
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [, , url, jobsArg, mode] = process.argv;
const jobs = Number(jobsArg);
const quiet = new Logger(() => () => {});

const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
await utils.migrate();
for (let added = 0; added < jobs; added += 1000) {
  const count = Math.min(1000, jobs - added);
  await utils.addJobs(Array.from({ length: count }, () => ({ identifier: "noop", payload: {} })));
}
await utils.release();

let done = 0;
let finish;
const allDone = new Promise((resolve) => (finish = resolve));
// "batched": the local queue and batched completion graphile-worker offers for throughput.
const worker = mode === "batched" ? { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } : {};
const start = process.hrtime.bigint();
const runner = await run({
  connectionString: url,
  concurrency: 8,
  noHandleSignals: true,
  pollInterval: 100,
  logger: quiet,
  taskList: { noop: async () => { if (++done === jobs) finish(); } },
  preset: { worker },
});
await allDone;
await runner.stop(); // flushes batched completions: every job is durably complete here
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({ jobs, seconds, jobs_per_second: jobs / seconds }));
