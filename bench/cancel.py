#!/usr/bin/env python3
"""Cancel → process gone: how long an uploaded script's processes outlive the cancel of its
job, measured from outside with the real binary, over ROUNDS cancels, on the embedded
default (one `serve`, SQLite) and on PostgreSQL + RabbitMQ (a `serve --no-workers` for the
API and a separate `worker` process that runs the scripts, so the cancel crosses processes).

Each round uploads a `run.sh` that starts a background `sleep` and waits, reads the process
group it recorded, posts the cancel (the clock starts when the answer arrives) and watches
/proc until nothing of the group is left. Prints p50 / p99 / max per deployment.

Usage: cancel.py --bin TARGET/debug/yardmaster [--rounds 50] [--only embedded|production]
Uses the local PostgreSQL (a scratch database of its own) and RabbitMQ (virtual host
`yardmaster_bench`, which `bench/services.sh` makes).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid

FOREVER = b"sleep 1000 &\necho $$ > pgid\nwait\n"
BOUNDARY = "yardmaster-cancel-bench"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, token, method, path, body=None, content_type="application/json"):
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def upload(base, token):
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="service"\r\n\r\ndefault\r\n'.encode(),
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="run.sh"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode() + FOREVER + b"\r\n",
        f"--{BOUNDARY}--\r\n".encode(),
    ]
    status, body = call(base, token, "POST", "/uploads", b"".join(parts), f"multipart/form-data; boundary={BOUNDARY}")
    assert status == 201, body
    return json.loads(body)["id"]


def group_alive(pgid):
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and (int(fields[2]) == pgid or int(name) == pgid):
            return True
    return False


def ready(base, process, log):
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2):
                return
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"the server died:\n{open(log).read()[-3000:]}")
        time.sleep(0.1)
    raise SystemExit("the server did not become ready")


def measure(base, token, rounds):
    took = []
    for _ in range(rounds):
        job = upload(base, token)
        deadline = time.monotonic() + 60
        while True:
            status, body = call(base, token, "GET", f"/jobs/{job}/files/pgid")
            if status == 200 and body.endswith(b"\n"):
                pgid = int(body)
                break
            assert time.monotonic() < deadline, f"job {job} never started"
            time.sleep(0.01)
        status, body = call(base, token, "POST", f"/jobs/{job}/cancel")
        assert status == 200, body
        cancelled = time.monotonic()
        while group_alive(pgid):
            assert time.monotonic() < cancelled + 120, f"job {job}'s processes outlived its cancel by 120 s"
            time.sleep(0.001)
        took.append(time.monotonic() - cancelled)
        if os.environ.get("CANCEL_VERBOSE"):
            print(f"  {job}: {took[-1] * 1000:.1f} ms", flush=True)
    took.sort()
    pick = lambda q: took[min(len(took) - 1, int(q * len(took)))]
    return pick(0.5), pick(0.99), took[-1]


def run(args, name, work, env, commands):
    token = subprocess.run([args.bin, "token", "new"], capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, **env, YARDMASTER__AUTH__BOOTSTRAP_TOKEN=token, RUST_LOG="warn",
               YARDMASTER__UPLOADS__DIR=os.path.join(work, "uploads"))
    port = free_port()
    processes = []
    try:
        for at, command in enumerate(commands):
            log = os.path.join(work, f"{name}-{at}.log")
            command = [part.replace("PORT", str(port)) for part in command]
            processes.append(subprocess.Popen([args.bin, *command], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
            if at == 0:
                ready(f"http://127.0.0.1:{port}", processes[0], log)
        p50, p99, most = measure(f"http://127.0.0.1:{port}", token, args.rounds)
        print(f"{name:<11} cancel -> processes gone over {args.rounds} cancels: "
              f"p50 {p50 * 1000:8.1f} ms  p99 {p99 * 1000:8.1f} ms  max {most * 1000:8.1f} ms", flush=True)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--only", choices=["embedded", "production"])
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="yardmaster-cancel-")
    try:
        if args.only in (None, "embedded"):
            env = {"YARDMASTER__STORE__URL": f"sqlite://{work}/cancel.db?mode=rwc"}
            run(args, "embedded", work, env, [["serve", "--bind", "127.0.0.1:PORT"]])
        if args.only in (None, "production"):
            database = f"yardmaster_cancel_{uuid.uuid4().hex[:12]}"
            subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c",
                            f'CREATE DATABASE "{database}"'], check=True)
            env = {
                "YARDMASTER__STORE__URL": f"postgres://postgres@127.0.0.1:5432/{database}",
                "YARDMASTER__TRANSPORT__KIND": "amqp",
                "YARDMASTER__TRANSPORT__AMQP__URL": "amqp://127.0.0.1:5672/yardmaster_bench",
                "YARDMASTER__TRANSPORT__AMQP__QUEUE_PREFIX": f"c{uuid.uuid4().hex[:8]}.",
            }
            try:
                run(args, "production", work, env,
                    [["serve", "--no-workers", "--bind", "127.0.0.1:PORT"], ["worker"]])
            finally:
                subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c",
                                f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'], check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
