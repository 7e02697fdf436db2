#!/usr/bin/env python3
"""A worker far from its database and broker: every byte between one `yardmaster worker`
and PostgreSQL and RabbitMQ crosses a relay that delays it by DELAY_MS each way (20 ms:
another data centre). Prints how many instant jobs per second that worker starts, at the
concurrency and prefetch given, so fair dispatch can be judged across real latency: with
the broker window at max(concurrency, prefetch), every free slot has a delivery in flight.

It also counts round trips: a chunk from the worker to PostgreSQL or RabbitMQ after that
server last sent it something begins one. Two figures per job: the round trips on all the
worker's connections together, and the time a job holds a slot measured in round trips
(concurrency / rate / round-trip time), which is what bounds the rate. The last line is
the same figures as JSON, for `scripts/bench.sh`.

Usage: far_worker.py --bin TARGET/debug/yardmaster [--jobs 300] [--delay-ms 20]
                     [--concurrency 8] [--prefetch 1]
Uses the local PostgreSQL (database `test`, a scratch database of its own) and RabbitMQ
(virtual host `yardmaster_bench`, which `bench/services.sh` makes).
"""

import argparse
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import deque


class DelayRelay:
    """Forwards TCP connections to `target`, holding every chunk `delay` seconds."""

    def __init__(self, target_port, delay):
        self.target, self.delay = target_port, delay
        self.turns = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Which way the last chunk went: a chunk from the client after the server has
            # answered starts a new round trip.
            last = {"way": None}
            for way, (source, sink) in enumerate(((client, upstream), (upstream, client))):
                chunks = deque()
                ready = threading.Condition()
                threading.Thread(target=self.read, args=(source, chunks, ready, way, last), daemon=True).start()
                threading.Thread(target=self.write, args=(sink, chunks, ready), daemon=True).start()

    def read(self, source, chunks, ready, way, last):
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            with self.lock:
                if data and way == 0 and last["way"] != 0:
                    self.turns += 1
                if data:
                    last["way"] = way
            with ready:
                chunks.append((time.monotonic() + self.delay, data))
                ready.notify()
            if not data:
                return

    @staticmethod
    def write(sink, chunks, ready):
        while True:
            with ready:
                while not chunks:
                    ready.wait()
                due, data = chunks.popleft()
            time.sleep(max(0.0, due - time.monotonic()))
            if not data:
                try:
                    sink.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                sink.sendall(data)
            except OSError:
                return


def psql(url, sql):
    return subprocess.run(["psql", "-X", "-A", "-t", "-q", url, "-c", sql], check=True, capture_output=True,
                          text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--delay-ms", type=float, default=20)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prefetch", type=int, default=1)
    args = parser.parse_args()
    database = f"far_{uuid.uuid4().hex[:12]}"
    psql("postgres://postgres@127.0.0.1:5432/test", f"CREATE DATABASE {database}")
    near_db = f"postgres://postgres@127.0.0.1:5432/{database}"
    db_relay = DelayRelay(5432, args.delay_ms / 1000)
    mq_relay = DelayRelay(5672, args.delay_ms / 1000)
    prefix = f"far{uuid.uuid4().hex[:8]}."
    common = {
        "PATH": os.environ["PATH"],
        "RUST_LOG": "warn",
        "YARDMASTER__TRANSPORT__KIND": "amqp",
        "YARDMASTER__TRANSPORT__AMQP__QUEUE_PREFIX": prefix,
    }
    api_port = socket.create_server(("127.0.0.1", 0)).getsockname()[1]
    token = subprocess.check_output([args.bin, "token", "new"], text=True).strip()
    api_env = {**common, "YARDMASTER__STORE__URL": near_db, "YARDMASTER__AUTH__BOOTSTRAP_TOKEN": token,
               "YARDMASTER__TRANSPORT__AMQP__URL": "amqp://127.0.0.1:5672/yardmaster_bench"}
    subprocess.run([args.bin, "migrate"], env=api_env, check=True, capture_output=True)
    processes = [subprocess.Popen([args.bin, "serve", "--no-workers", "--bind", f"127.0.0.1:{api_port}"],
                                  env=api_env)]
    try:
        far_env = {
            **common,
            "YARDMASTER__STORE__URL": f"postgres://postgres@127.0.0.1:{db_relay.port}/{database}",
            "YARDMASTER__TRANSPORT__AMQP__URL": f"amqp://127.0.0.1:{mq_relay.port}/yardmaster_bench",
            "YARDMASTER__QUEUES__DEFAULT__CONCURRENCY": str(args.concurrency),
            "YARDMASTER__QUEUES__DEFAULT__PREFETCH": str(args.prefetch),
            "YARDMASTER__DISPATCH__ENABLED": "false",
            "YARDMASTER__WORKER__ID": "far",
        }
        processes.append(subprocess.Popen([args.bin, "worker", "--queue", "default"], env=far_env))
        body = json.dumps({"jobs": [{"operation": "ping"} for _ in range(args.jobs)]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{api_port}/jobs:batch", data=body, method="POST",
                                         headers={"content-type": "application/json",
                                                  "authorization": f"Bearer {token}"})
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(request, timeout=30).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        started = time.time()
        turns_before = db_relay.turns, mq_relay.turns
        while int(psql(near_db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'")) < args.jobs:
            if time.time() - started > 600:
                raise SystemExit("far worker: jobs did not finish within 10 minutes")
            time.sleep(0.2)
        window = psql(near_db, "SELECT EXTRACT(EPOCH FROM MAX(started_at) - MIN(started_at)) FROM job")
        rate = (args.jobs - 1) / max(float(window), 1e-9)
        db_turns = (db_relay.turns - turns_before[0]) / args.jobs
        mq_turns = (mq_relay.turns - turns_before[1]) / args.jobs
        print(f"far worker: {args.jobs} jobs, {args.delay_ms:g} ms each way, concurrency {args.concurrency}, "
              f"prefetch {args.prefetch}: {rate:.1f} jobs started/s ({float(window):.2f} s from first to last start)")
        print(f"  round trips per job, all connections: {db_turns:.2f} to PostgreSQL, {mq_turns:.2f} to RabbitMQ")
        per_slot = args.concurrency / rate / (2 * args.delay_ms / 1000) if args.delay_ms > 0 else None
        if per_slot is not None:
            print(f"  time per job per slot, in round trips of {2 * args.delay_ms:g} ms: {per_slot:.1f}")
        print(json.dumps({"delay_ms": args.delay_ms, "concurrency": args.concurrency, "prefetch": args.prefetch,
                          "jobs": args.jobs, "rate": rate, "db_round_trips": db_turns,
                          "mq_round_trips": mq_turns, "slot_round_trips": per_slot}))
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        psql("postgres://postgres@127.0.0.1:5432/test", f"DROP DATABASE {database} WITH (FORCE)")


if __name__ == "__main__":
    main()
