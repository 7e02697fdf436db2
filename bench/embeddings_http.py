#!/usr/bin/env python3
"""What a client waiting on a `compute_embeddings` job costs the server that computes it:
a `yardmaster serve` (embedded default, default model on the CPU) given the same 16,384
protein-like inputs (UniProt-like lengths, median 300) over HTTP, rounds alternating

- `long-poll`: the client waits with `GET /jobs/{id}` and `Prefer: wait=60`;
- `events`: the client pages `GET /jobs/{id}/events?after=` every 200 ms until the job ends;

and for each prints embeddings/s from the job's own `started_at` to `finished_at`, and the
server's CPU over the round by thread (/proc), the libtorch threads apart from the rest.

    source scripts/libtorch.sh
    python3 bench/embeddings_http.py target/release/yardmaster [ROUNDS] [INPUTS]

The server gets a 16 MiB body limit (the inputs are 5.4 MB of JSON) and SIGTERM at the end.
"""
import base64, collections, datetime, json, math, os, random, secrets, subprocess, sys, tempfile, time
import urllib.request, uuid

binary = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
count = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
d = tempfile.mkdtemp()
token = "ym_" + uuid.uuid4().hex + "_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
port = 18000 + os.getpid() % 1000
env = dict(os.environ, YARDMASTER__STORE__URL=f"sqlite://{d}/ym.db?mode=rwc",
           YARDMASTER__SERVER__BIND=f"127.0.0.1:{port}", YARDMASTER__SERVER__MAX_BODY_BYTES=str(16 << 20),
           YARDMASTER__INFERENCE__MODEL=f"{d}/default.pt", YARDMASTER__INFERENCE__DEVICE="cpu",
           YARDMASTER__AUTH__BOOTSTRAP_TOKEN=token, YARDMASTER__UPLOADS__DIR=f"{d}/uploads", RUST_LOG="warn")
subprocess.run([binary, "model", "init"], env=env, check=True, stdout=subprocess.DEVNULL)
server = subprocess.Popen([binary, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"


def call(method, path, body=None, headers=()):
    request = urllib.request.Request(base + path, body, dict(headers, authorization=f"Bearer {token}"), method=method)
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


for _ in range(600):
    try:
        call("GET", "/health")
        break
    except Exception:
        time.sleep(0.1)

rng = random.Random(11)
RESIDUES = "ACDEFGHIKLMNPQRSTVWY"


def length():
    while True:
        n = int(math.exp(rng.gauss(math.log(300), 0.6)))
        if 1 <= n <= 510:
            return n


inputs = ["".join(rng.choice(RESIDUES) for _ in range(length())) for _ in range(count)]
clock = os.sysconf("SC_CLK_TCK")


def threads():
    main = open(f"/proc/{server.pid}/comm").read().strip()
    ticks = collections.Counter()
    for tid in os.listdir(f"/proc/{server.pid}/task"):
        try:
            stat = open(f"/proc/{server.pid}/task/{tid}/stat").read()
        except FileNotFoundError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        # libtorch's and the actor's threads keep the process's name (the main thread's is
        # counted with them: it only waits).
        ticks["libtorch" if name == main else "rest"] += int(fields[11]) + int(fields[12])
    return ticks


def run(mode, set_name):
    body = json.dumps({"operation": "compute_embeddings", "payload": {"set": set_name, "inputs": inputs}}).encode()
    before = threads()
    job = call("POST", "/jobs", body, {"content-type": "application/json"})
    if mode == "long-poll":
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            job = call("GET", f"/jobs/{job['id']}", headers={"prefer": "wait=60"})
    else:
        after, ended = 0, False
        while not ended:
            time.sleep(0.2)
            while page := call("GET", f"/jobs/{job['id']}/events?after={after}")["events"]:
                for event in page:
                    after = event["id"]
                    ended |= event["event"] in ("job.succeeded", "job.failed", "job.cancelled")
        job = call("GET", f"/jobs/{job['id']}")
    spent = threads() - before
    assert job["status"] == "succeeded", job["status"]
    at = lambda key: datetime.datetime.fromisoformat(job[key].replace("Z", "+00:00"))
    seconds = (at("finished_at") - at("started_at")).total_seconds()
    cpu = {key: ticks / clock * 1e6 / count for key, ticks in spent.items()}
    print(f"{mode:10s} {count / seconds:8.0f}/s  {seconds:5.2f} s   CPU per embedding: "
          f"libtorch {cpu.get('libtorch', 0):5.0f} µs, the rest {cpu.get('rest', 0):4.0f} µs", flush=True)


try:
    run("events", "warm-up")
    for i in range(rounds):
        for mode in ("long-poll", "events"):
            run(mode, f"{mode}-{i}")
finally:
    server.terminate()
    server.wait()
