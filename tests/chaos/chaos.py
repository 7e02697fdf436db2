#!/usr/bin/env python3
"""The chaos run: real yardmaster processes on a private PostgreSQL cluster and a private
RabbitMQ node (started here, so faults never reach anyone else's servers), a few thousand
jobs submitted with idempotency keys, and faults at random times: workers SIGKILLed and
SIGTERMed, the API killed, commit-then-crash and publish-then-crash failpoints, the broker killed, PostgreSQL
stopped immediately, a worker's link to the broker cut, and a worker whose clock runs
minutes ahead. Then it waits for every job to end and checks, from the database:

  lost 0                    every submission answered 2xx still has the job it was answered
                            with (looked up by its idempotency key, whatever else it was
                            answered: a timeout, a 5xx, a reset)
  stuck 0                   every job a submission made ended, answered or not
  unexplained double runs 0 a job ran more than once only after a requeue said why
  double terminal events 0  a job ended once
  wrong outcomes 0          every job succeeded with the operation's result
  ticks not fired once 0    an every-second schedule, declared in every process (each runs
                            the scheduler, none leads): every tick from its first to its
                            last has exactly one job, none missed, none doubled, all ended
  over the limit 0          the jobs run under a limit (max_running 3 per tenant, 2 tenants,
                            across every process): RUNNING jobs of a tenant, sampled from the
                            rows every 100 ms from the first submission to the drain's end,
                            never above 3
  dependents started early 0  DAGs submitted in batches during the faults (each node a job of
                            the limited operation, waiting for up to three earlier nodes by
                            `#N`, every item with its idempotency key, so a batch is sent
                            again until answered): no node started before each of its
                            dependencies succeeded (by the store's clock, give or take 20 ms),
                            and every node is counted by the checks above as any job

Usage: chaos.py --bin-dir TARGET/debug [--profile short|long] [--seed N]
Exits 1 when any count above is not 0. Needs root (PostgreSQL runs as `postgres`,
RabbitMQ as `rabbitmq`), Debian's postgresql-15, rabbitmq-server and faketime.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PROFILES = {
    # jobs, seconds of faults at least, seconds between faults (min, max)
    "short": {"jobs": 1200, "chaos_seconds": 45, "fault_every": (2.0, 5.0), "dags": 8, "dag_nodes": 40},
    "long": {"jobs": 10000, "chaos_seconds": 600, "fault_every": (3.0, 10.0), "dags": 40, "dag_nodes": 100},
}
PG_BIN = "/usr/lib/postgresql/15/bin"
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
DRAIN_SECONDS = 300
# Every job runs under `max_running` per tenant, one of TENANTS by its key.
MAX_RUNNING = 3
TENANTS = 2
REQUEUE_EVENTS = (
    "job.lease_expired_requeue",
    "job.requeued_on_shutdown",
    "job.retry_scheduled",
    "job.retry_later",
    "job.requeued_batches_lost",
)


def log(message):
    print(f"chaos: {message}", flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(command, **kwargs):
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)


class Postgres:
    """A private cluster in `root`, run as the postgres user, on its own port."""

    def __init__(self, root):
        self.data = os.path.join(root, "pg")
        self.port = free_port()
        os.makedirs(self.data)
        shutil.chown(root, "postgres")
        shutil.chown(self.data, "postgres")
        self.as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "--auth=trust", "-U", "postgres", "-E", "UTF8"])
        self.options = f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on"
        self.start()
        self.psql("CREATE DATABASE chaos", database="postgres")

    def as_postgres(self, command):
        return run(["runuser", "-u", "postgres", "--", *command])

    def start(self):
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-o", self.options, "-w", "-t", "60", "-l",
                          os.path.join(self.data, "log"), "start"])

    def stop_immediately(self):
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"])

    def stop(self):
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "fast",
                        "-w", "stop"], capture_output=True)

    def url(self, database="chaos"):
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql, database="chaos"):
        # On standard input: a long run's id lists pass the limit of one argument.
        out = run(["psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", self.url(database), "-f", "-"],
                  input=sql)
        return out.stdout.strip()


class Rabbit:
    """A private RabbitMQ node in `root`, run as the rabbitmq user, on its own ports."""

    def __init__(self, root):
        self.root = os.path.join(root, "rabbit")
        os.makedirs(self.root)
        self.port = free_port()
        self.node = f"ymchaos{os.getpid()}@localhost"
        with open(os.path.join(self.root, "rabbitmq.conf"), "w") as conf:
            conf.write(f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n")
        open(os.path.join(self.root, "env.conf"), "w").close()
        with open(os.path.join(self.root, "enabled_plugins"), "w") as plugins:
            plugins.write("[].\n")
        run(["chown", "-R", "rabbitmq", self.root])
        self.env = {
            "HOME": "/var/lib/rabbitmq",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.root, "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": os.path.join(self.root, "env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.root, "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": os.path.join(self.root, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.root, "log"),
            "RABBITMQ_PID_FILE": os.path.join(self.root, "pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        self.start()

    def start(self):
        exports = " ".join(f"{key}={value}" for key, value in self.env.items())
        run(["su", "rabbitmq", "-s", "/bin/sh", "-c",
             f"cd {self.root}; {exports} /usr/lib/rabbitmq/bin/rabbitmq-server -detached"])
        # The node registers with epmd a moment after -detached returns.
        deadline = time.time() + 120
        while True:
            waited = subprocess.run(["rabbitmqctl", "-n", self.node, "await_startup", "--timeout", "60"],
                                    capture_output=True)
            if waited.returncode == 0:
                return
            if time.time() > deadline:
                raise RuntimeError(f"RabbitMQ node {self.node} did not start: {waited.stderr.decode()[-500:]}")
            time.sleep(0.5)

    def kill(self):
        with open(self.env["RABBITMQ_PID_FILE"]) as pid_file:
            pid = int(pid_file.read().strip())
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
                time.sleep(0.05)
            except ProcessLookupError:
                return

    def stop(self):
        subprocess.run(["rabbitmqctl", "-n", self.node, "stop"], capture_output=True)

    def url(self, port=None):
        return f"amqp://guest:guest@127.0.0.1:{port or self.port}/%2f"


class Cut:
    """A TCP relay between one worker and the broker that can be cut: every connection
    through it is dropped and new ones are refused until it is mended."""

    def __init__(self, target_port):
        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = []
        self.cut_until = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            if time.time() < self.cut_until:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def pump(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self, seconds):
        self.cut_until = time.time() + seconds
        with self.lock:
            sockets, self.open = self.open, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass


class Fleet:
    """The yardmaster processes, restarted when they die, as systemd would."""

    def __init__(self, bin_dir, pg, rabbit, root):
        self.binary = os.path.join(bin_dir, "examples", "custom_operation")
        self.api_port = free_port()
        # The API processes store it at start; the submitters send it.
        self.token = subprocess.check_output([self.binary, "token", "new"], text=True).strip()
        self.cut = Cut(rabbit.port)
        self.base = {
            "YARDMASTER__STORE__URL": pg.url(),
            "YARDMASTER__STORE__MAX_CONNECTIONS": "12",
            "YARDMASTER__STORE__CONNECT_TIMEOUT_SECONDS": "3",
            "YARDMASTER__TRANSPORT__KIND": "amqp",
            "YARDMASTER__TRANSPORT__AMQP__URL": rabbit.url(),
            "YARDMASTER__TRANSPORT__AMQP__CONNECT_TIMEOUT_SECONDS": "2",
            "YARDMASTER__WORKER__LEASE_MS": "3000",
            "YARDMASTER__WORKER__HEARTBEAT_MS": "500",
            "YARDMASTER__WORKER__GRACE_SECONDS": "2",
            "YARDMASTER__REAPER__INTERVAL_MS": "500",
            "YARDMASTER__REAPER__MAX_LEASE_REQUEUES": "50",
            "YARDMASTER__DISPATCH__INTERVAL_MS": "300",
            "YARDMASTER__DISPATCH__GRACE_MS": "1000",
            "YARDMASTER__QUEUES__DEFAULT__CONCURRENCY": "8",
            "YARDMASTER__AUTH__BOOTSTRAP_TOKEN": self.token,
            # Every process declares it and runs the scheduler: ticks go on through every fault.
            "YARDMASTER__SCHEDULES__CHAOS__EVERY_SECONDS": "1.0",
            "YARDMASTER__SCHEDULES__CHAOS__OVERLAP": "allow",
            "YARDMASTER__SCHEDULES__CHAOS__CATCH_UP": "all",
            "YARDMASTER__SCHEDULES__CHAOS__MAX_CATCH_UP": "1000",
            "YARDMASTER__SCHEDULES__CHAOS__JOB__OPERATION": "ping",
            "YARDMASTER__SCHEDULER__SETTLE_MS": "1000",
            "YARDMASTER__JOBS__OPERATIONS__COUNT__MAX_RUNNING": str(MAX_RUNNING),
            "RUST_LOG": "warn",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        self.logs = open(os.path.join(root, "processes.log"), "a")
        self.specs = {
            "api": (["serve", "--no-workers", "--bind", f"127.0.0.1:{self.api_port}"], {}),
            "worker-1": (["worker"], {"YARDMASTER__WORKER__ID": "worker-1"}),
            "worker-ahead": (["worker"], {"YARDMASTER__WORKER__ID": "worker-ahead", "LD_PRELOAD": LIBFAKETIME,
                                          "FAKETIME": "+300s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}),
            "worker-cut": (["worker"], {"YARDMASTER__WORKER__ID": "worker-cut",
                                        "YARDMASTER__TRANSPORT__AMQP__URL": rabbit.url(self.cut.port)}),
        }
        self.processes = {}
        self.stopping = False
        # Held while a process is restarted, so none starts once `stop` has begun.
        self.starting = threading.Lock()
        # Names sent SIGTERM whose exit is still to be seen, and the exit codes seen.
        self.terminated = set()
        self.term_exits = []
        for name in self.specs:
            self.start(name)

    def start(self, name, failpoint=None):
        args, extra = self.specs[name]
        env = {**self.base, **extra}
        if failpoint:
            env["YARDMASTER_FAILPOINT"] = failpoint
        self.processes[name] = subprocess.Popen([self.binary, *args], env=env, stdout=self.logs, stderr=self.logs)

    def supervise(self):
        """Restarts what died (a second later, as `RestartSec`); runs until told to stop."""
        while not self.stopping:
            for name, process in list(self.processes.items()):
                if process.poll() is not None and not self.stopping:
                    if name in self.terminated:
                        self.terminated.discard(name)
                        self.term_exits.append(process.returncode)
                    time.sleep(1)
                    with self.starting:
                        if not self.stopping:
                            self.start(name)
            time.sleep(0.2)

    def signal(self, name, sig):
        process = self.processes[name]
        if sig == signal.SIGTERM:
            # A SIGTERM is judged by the exit it gets (143) only once the process catches it:
            # before its handler is in (the loader mapping libtorch, start-up before the
            # first line of `build`), the signal's default kills it, as it would any program.
            wait_until_catching(process, signal.SIGTERM)
        if process.poll() is not None:
            return
        if sig == signal.SIGTERM:
            self.terminated.add(name)
        try:
            process.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self):
        """SIGTERM to every process still up; their exit codes (143 is a clean stop)."""
        with self.starting:
            self.stopping = True
        for process in self.processes.values():
            wait_until_catching(process, signal.SIGTERM)
        alive = {name: process for name, process in self.processes.items() if process.poll() is None}
        for process in alive.values():
            process.send_signal(signal.SIGTERM)
        codes = {}
        for name, process in alive.items():
            try:
                codes[name] = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = "hung"
        self.term_exits += list(codes.values())
        return codes


def catches(process, sig):
    """Whether `process` has a handler for `sig` (its `SigCgt` mask in /proc)."""
    try:
        with open(f"/proc/{process.pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return False


def wait_until_catching(process, sig, timeout=60):
    """Until `process` catches `sig` or has exited (a handler, once in, stays in)."""
    deadline = time.time() + timeout
    while process.poll() is None and not catches(process, sig) and time.time() < deadline:
        time.sleep(0.02)


def submit_all(port, token, keys, accepted, pace, deadline):
    """Submits each key until the API accepts it (2xx), one every `pace` seconds at most,
    so submissions go on while faults happen; idempotency makes retries safe."""
    for key in keys:
        next_at = time.time() + pace
        body = json.dumps({
            "operation": "count",
            "payload": {"delay_ms": random.randint(0, 300), "tag": key},
            "idempotency_key": key,
            "concurrency_key": f"tenant-{int(key.rsplit('-', 1)[1]) % TENANTS}",
            "max_retries": 10,
            "retry": {"base_seconds": 0.2, "cap_seconds": 2},
        }).encode()
        while time.time() < deadline:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/jobs", data=body, method="POST",
                                             headers={"content-type": "application/json",
                                                      "authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    if response.status in (200, 201):
                        accepted[key] = json.load(response)["id"]
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        time.sleep(max(0.0, next_at - time.time()))


def submit_dags(port, token, seed, dags, nodes, accepted, pace, deadline):
    """Submits `dags` graphs of `nodes` jobs, one batch each, every `pace` seconds: node i
    waits for up to three random earlier nodes. A batch is sent again until the API accepts
    it; its items' idempotency keys make that safe, and a node answered by the job an
    earlier attempt made is depended on as that job."""
    rng = random.Random(seed)
    for dag in range(dags):
        next_at = time.time() + pace
        items = []
        for at in range(nodes):
            key = f"dag-{seed}-{dag}-{at}"
            item = {
                "operation": "count",
                "payload": {"delay_ms": rng.randint(0, 100), "tag": key},
                "idempotency_key": key,
                "concurrency_key": f"tenant-{at % TENANTS}",
                "max_retries": 10,
                "retry": {"base_seconds": 0.2, "cap_seconds": 2},
            }
            if at > 0:
                item["depends_on"] = sorted({f"#{rng.randrange(at)}" for _ in range(rng.randint(0, 3))})
            items.append(item)
        body = json.dumps({"jobs": items}).encode()
        while time.time() < deadline:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/jobs:batch", data=body, method="POST",
                                             headers={"content-type": "application/json",
                                                      "authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    if response.status in (200, 201):
                        for item, job in zip(items, json.load(response)["jobs"]):
                            accepted[item["idempotency_key"]] = job["id"]
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        time.sleep(max(0.0, next_at - time.time()))


def started_early(pg, keys):
    """Nodes of the DAGs that started before one of their dependencies succeeded."""
    quoted = ",".join(f"'{key}'" for key in keys) or "NULL"
    return int(pg.psql(
        "SELECT COUNT(*) FROM job_dependency e JOIN job j ON j.id = e.job_id JOIN job d ON d.id = e.dependency_id "
        "JOIN job_event s ON s.job_id = j.id AND s.event = 'job.started' "
        f"WHERE j.idempotency_key IN ({quoted}) "
        "AND (d.status <> 'succeeded' OR s.ts < d.finished_at - INTERVAL '20 milliseconds')"))


class LimitSampler:
    """The most jobs of one limit key RUNNING at once, read from the rows every 100 ms
    (a sample that fails while PostgreSQL is down is skipped)."""

    def __init__(self, pg):
        self.pg, self.most, self.samples = pg, 0, 0
        self.done = threading.Event()
        threading.Thread(target=self.sample, daemon=True).start()

    def sample(self):
        sql = ("SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM job WHERE status = 'running' "
               "AND limit_key IS NOT NULL GROUP BY limit_key) AS running")
        while not self.done.wait(0.1):
            try:
                self.most = max(self.most, int(self.pg.psql(sql)))
                self.samples += 1
            except (subprocess.CalledProcessError, ValueError):
                pass


def inject_faults(fleet, pg, rabbit, rng, every, until, faults):
    kinds = ["worker_kill", "worker_term", "api_kill", "commit_then_crash", "publish_then_crash", "broker_kill",
             "postgres_stop", "network_cut"]
    weights = [4, 3, 2, 1, 1, 1, 1, 2]
    while until():
        time.sleep(rng.uniform(*every))
        kind = rng.choices(kinds, weights)[0]
        faults[kind] = faults.get(kind, 0) + 1
        log(f"fault: {kind}")
        if kind == "worker_kill":
            fleet.signal(rng.choice(["worker-1", "worker-ahead", "worker-cut"]), signal.SIGKILL)
        elif kind == "worker_term":
            fleet.signal(rng.choice(["worker-1", "worker-ahead", "worker-cut"]), signal.SIGTERM)
        elif kind == "api_kill":
            fleet.signal("api", signal.SIGKILL)
        elif kind == "commit_then_crash":
            # The next submission commits its job, then the API dies before publishing it.
            fleet.signal("api", signal.SIGKILL)
            fleet.processes["api"].wait()
            fleet.start("api", failpoint="submit.after_commit")
        elif kind == "publish_then_crash":
            # The next submission's messages are confirmed, then the API dies before its
            # outbox row is deleted: the sweep sends those jobs again, and each runs once.
            fleet.signal("api", signal.SIGKILL)
            fleet.processes["api"].wait()
            fleet.start("api", failpoint="submit.after_publish")
        elif kind == "broker_kill":
            rabbit.kill()
            time.sleep(rng.uniform(1, 3))
            rabbit.start()
        elif kind == "postgres_stop":
            pg.stop_immediately()
            time.sleep(rng.uniform(1, 4))
            pg.start()
        elif kind == "network_cut":
            fleet.cut.cut(rng.uniform(2, 8))


def made_by(pg, keys):
    """The jobs the submissions of `keys` made, by key: every job the client caused,
    whether or not an answer reached it."""
    quoted = ",".join(f"'{key}'" for key in keys)
    rows = pg.psql(f"SELECT idempotency_key, id FROM job WHERE idempotency_key IN ({quoted})")
    return dict(line.split("|") for line in filter(None, rows.splitlines()))


def check(pg, accepted, keys):
    """The counts the run is judged by, from the database."""
    made = made_by(pg, keys)
    # Answered with a job that is gone, or that its key no longer names.
    lost = sum(1 for key, job_id in accepted.items() if made.get(key) != job_id)
    ids = ",".join(f"'{job_id}'" for job_id in made.values()) or "NULL"
    not_ended = int(pg.psql(f"SELECT COUNT(*) FROM job WHERE id IN ({ids}) AND status NOT IN "
                            "('succeeded', 'failed', 'cancelled')"))
    wrong = int(pg.psql(f"SELECT COUNT(*) FROM job WHERE id IN ({ids}) AND (status <> 'succeeded' "
                        "OR result::jsonb <> '{\"counted\": true}'::jsonb)"))
    terminal = "'job.succeeded', 'job.failed', 'job.cancelled'"
    double_terminal = int(pg.psql(
        f"SELECT COUNT(*) FROM (SELECT job_id FROM job_event WHERE job_id IN ({ids}) AND event IN ({terminal}) "
        "GROUP BY job_id HAVING COUNT(*) > 1) AS doubled"))
    requeues = ",".join(f"'{event}'" for event in REQUEUE_EVENTS)
    unexplained = int(pg.psql(
        "SELECT COUNT(*) FROM job j WHERE j.id IN (" + ids + ") AND "
        "(SELECT COUNT(*) FROM execution_log e WHERE e.job_id = j.id::text) > 1 + "
        f"(SELECT COUNT(*) FROM job_event v WHERE v.job_id = j.id AND v.event IN ({requeues}))"))
    explained_reruns = int(pg.psql(
        "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM execution_log "
        f"WHERE job_id IN (SELECT id::text FROM job WHERE id IN ({ids})) GROUP BY job_id) AS runs"))
    wrong_jobs = pg.psql(
        f"SELECT id, status, error_code, left(error_message, 300) FROM job WHERE id IN ({ids}) AND "
        "(status <> 'succeeded' OR result::jsonb <> '{\"counted\": true}'::jsonb) LIMIT 5")
    for line in filter(None, wrong_jobs.splitlines()):
        job_id = line.split("|")[0]
        events = pg.psql(f"SELECT string_agg(event || coalesce(' (' || left(message, 120) || ')', ''), ' > ' "
                         f"ORDER BY id) FROM job_event WHERE job_id = '{job_id}'")
        log(f"wrong outcome: {line}; events: {events}")
    # A job's finished_at says whether it has ended, whatever faults it met.
    out_of_step = int(pg.psql(
        "SELECT COUNT(*) FROM job WHERE (status IN ('queued', 'running')) = (finished_at IS NOT NULL)"))
    return {
        "finished_at out of step": out_of_step,
        "lost": lost,
        "stuck": not_ended,
        "unexplained double runs": unexplained,
        "double terminal events": double_terminal,
        "wrong outcomes": wrong,
        "explained re-runs": explained_reruns,
    }


def check_ticks(pg, lose_one=False):
    """The ticks of the schedule every process declared: paused by hand (a client's change),
    then, once no tick is left half done, one job per tick from the first to the last."""
    pg.psql("UPDATE schedule SET paused = true, version = version + 1 WHERE name = 'chaos'")
    deadline = time.time() + 60
    unsettled = ("SELECT (SELECT COUNT(*) FROM schedule_tick WHERE outcome = 'firing') + (SELECT COUNT(*) FROM job "
                 "WHERE idempotency_key LIKE 'schedule:%' AND status NOT IN ('succeeded', 'failed', 'cancelled'))")
    while int(pg.psql(unsettled)) > 0 and time.time() < deadline:
        time.sleep(0.5)
    if lose_one:
        # The job and its events, as pruning deletes them (events hold no foreign key).
        pg.psql("WITH gone AS (DELETE FROM job WHERE id = (SELECT id FROM job WHERE idempotency_key LIKE 'schedule:%' "
                "LIMIT 1) RETURNING id) DELETE FROM job_event WHERE job_id IN (SELECT id FROM gone)")
    fired, span, other, jobs, ended = pg.psql(
        "SELECT (SELECT COUNT(*) FROM schedule_tick WHERE outcome = 'fired'), "
        "(SELECT COALESCE(EXTRACT(EPOCH FROM MAX(tick_at) - MIN(tick_at))::bigint + 1, 0) FROM schedule_tick), "
        "(SELECT COUNT(*) FROM schedule_tick WHERE outcome <> 'fired'), "
        "(SELECT COUNT(DISTINCT j.id) FROM job j WHERE j.idempotency_key LIKE 'schedule:%'), "
        "(SELECT COUNT(*) FROM job j WHERE j.idempotency_key LIKE 'schedule:%' AND j.status = 'succeeded')"
    ).split("|")
    fired, span, other, jobs, ended = int(fired), int(span), int(other), int(jobs), int(ended)
    log(f"schedule: {fired} ticks fired over {span} s, {other} otherwise, {jobs} jobs, {ended} succeeded")
    # Each tick second fired once, each with its own job, each job ran.
    bad = abs(span - fired) + other + abs(jobs - fired)
    return fired, bad + max(0, jobs - ended)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--profile", choices=PROFILES, default="short")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", action="store_true", help="keep the private servers' files")
    parser.add_argument("--self-test-lose-one", action="store_true",
                        help="delete one answered job and one tick's job before the checks, to see them counted")
    args = parser.parse_args()
    # A SIGTERM (a timeout, an impatient operator) still stops the private servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profile = PROFILES[args.profile]
    rng = random.Random(args.seed)
    random.seed(args.seed)
    log(f"seed {args.seed}, profile {args.profile}: {profile['jobs']} jobs")
    root = tempfile.mkdtemp(prefix="yardmaster-chaos-")
    os.chmod(root, 0o755)
    pg = rabbit = fleet = None
    try:
        pg = Postgres(root)
        rabbit = Rabbit(root)
        pg.psql("CREATE TABLE execution_log (job_id VARCHAR(64) NOT NULL)")
        run([os.path.join(args.bin_dir, "examples", "custom_operation"), "migrate"],
            env={"YARDMASTER__STORE__URL": pg.url(), "PATH": os.environ.get("PATH", "")})
        fleet = Fleet(args.bin_dir, pg, rabbit, root)
        threading.Thread(target=fleet.supervise, daemon=True).start()

        keys = [f"chaos-{args.seed}-{n}" for n in range(profile["jobs"])]
        accepted = {}
        started = time.time()
        submit_deadline = started + profile["chaos_seconds"] + 600
        pace = profile["chaos_seconds"] / (len(keys) / 4)
        submitters = [threading.Thread(target=submit_all, args=(fleet.api_port, fleet.token, keys[n::4], accepted, pace,
                                                                 submit_deadline)) for n in range(4)]
        dag_keys = [f"dag-{args.seed}-{dag}-{at}" for dag in range(profile["dags"]) for at in range(profile["dag_nodes"])]
        submitters.append(threading.Thread(target=submit_dags, args=(
            fleet.api_port, fleet.token, args.seed, profile["dags"], profile["dag_nodes"], accepted,
            profile["chaos_seconds"] / profile["dags"], submit_deadline)))
        limits = LimitSampler(pg)
        for submitter in submitters:
            submitter.start()
        faults = {}
        chaos_until = started + profile["chaos_seconds"]
        submitting = lambda: any(submitter.is_alive() for submitter in submitters)
        inject_faults(fleet, pg, rabbit, rng, profile["fault_every"],
                      lambda: time.time() < chaos_until or submitting(), faults)
        for submitter in submitters:
            submitter.join()
        keys = keys + dag_keys
        log(f"faults over after {time.time() - started:.0f} s; {len(accepted)} of {len(keys)} accepted; draining")

        drain_started = time.time()
        ids = ",".join(f"'{job_id}'" for job_id in made_by(pg, keys).values()) or "NULL"
        while time.time() < drain_started + DRAIN_SECONDS:
            left = int(pg.psql(f"SELECT COUNT(*) FROM job WHERE id IN ({ids}) AND status NOT IN "
                               "('succeeded', 'failed', 'cancelled')"))
            if left == 0:
                break
            time.sleep(0.5)
        drain = time.time() - drain_started
        limits.done.set()
        if args.self_test_lose_one and accepted:
            gone = next(iter(accepted.values()))
            pg.psql(f"DELETE FROM job_event WHERE job_id = '{gone}'; DELETE FROM job WHERE id = '{gone}'")
        counts = check(pg, accepted, keys)
        ticks, counts["ticks not fired once"] = check_ticks(pg, args.self_test_lose_one)
        counts["over the limit"] = max(0, limits.most - MAX_RUNNING)
        counts["dependents started early"] = started_early(pg, dag_keys)
        edges = int(pg.psql("SELECT COUNT(*) FROM job_dependency"))
        log(f"dags: {profile['dags']} of {profile['dag_nodes']} nodes, {edges} edges")
        log(f"limits: at most {limits.most} RUNNING of one tenant in {limits.samples} samples (max_running {MAX_RUNNING})")
        fleet.stop()
        fleet_term_exits = fleet.term_exits
        fleet = None

        print(f"seed: {args.seed}")
        print(f"profile: {args.profile}")
        print(f"jobs accepted: {len(accepted)} of {len(keys)}")
        print("faults: " + ", ".join(f"{kind} {n}" for kind, n in sorted(faults.items())))
        for name, value in counts.items():
            print(f"{name}: {value}")
        print(f"drain time: {drain:.1f} s")
        print(f"schedule ticks fired: {ticks}")
        unclean = [code for code in fleet_term_exits if code != 143]
        print(f"SIGTERM exits: {len(fleet_term_exits)}, not 143: {len(unclean)} {unclean if unclean else ''}")
        failed = [name for name in ("lost", "stuck", "unexplained double runs", "double terminal events",
                                    "wrong outcomes", "ticks not fired once", "over the limit",
                                    "dependents started early", "finished_at out of step") if counts[name] != 0]
        if unclean:
            failed.append("SIGTERM exits not 143")
        if len(accepted) < len(keys):
            failed.append("submissions never accepted")
        if failed:
            print("chaos: FAILED: " + ", ".join(failed), flush=True)
            return 1
        print("chaos: 1 passed, 0 failed", flush=True)
        return 0
    finally:
        if fleet is not None:
            fleet.stop()
        if rabbit is not None:
            rabbit.stop()
        if pg is not None:
            pg.stop()
        if args.keep:
            log(f"files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
