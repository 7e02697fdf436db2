#!/usr/bin/env python3
"""Memory per in-flight job of a `yardmaster serve` (embedded default), as the bench's
`memory` case measures it, outside the bench so a profiler can wrap the server:

    python3 bench/memory_probe.py BINARY JOBS [WRAPPER...]
    python3 bench/memory_probe.py target/release/yardmaster 4000 heaptrack -o /tmp/inflight

Needs libtorch on LD_LIBRARY_PATH (`source scripts/libtorch.sh`, then `$LIBTORCH/lib`).
Starts the server (through WRAPPER if given), submits JOBS hour-long `sleep` jobs with
concurrency JOBS, waits until every one runs with its lease renewed once (its heartbeat
actor exists), and prints RssAnon per job from idle and the slope over the second half.
TRIM=1 also reads it after glibc's malloc_trim (gdb); STATS=1 with ERR=FILE (the server's
stderr) prints glibc's malloc_stats totals, idle and loaded. The server gets SIGTERM at the end.
"""
import base64, json, os, secrets, signal, sqlite3, subprocess, sys, tempfile, time, urllib.request, uuid

binary, n = sys.argv[1], int(sys.argv[2])
wrap = sys.argv[3:]  # e.g. heaptrack -o file
d = tempfile.mkdtemp()
db = f"{d}/ym.db"
token = "ym_" + uuid.uuid4().hex + "_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
port = 18000 + os.getpid() % 1000
env = dict(os.environ, YARDMASTER__STORE__URL=f"sqlite://{db}?mode=rwc",
           YARDMASTER__SERVER__BIND=f"127.0.0.1:{port}",
           YARDMASTER__QUEUES__DEFAULT__CONCURRENCY=str(n),
           YARDMASTER__WORKER__HEARTBEAT_MS="2000",
           YARDMASTER__AUTH__BOOTSTRAP_TOKEN=token,
           YARDMASTER__UPLOADS__DIR=f"{d}/uploads", RUST_LOG="warn")
p = subprocess.Popen(wrap + [binary, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=open(os.environ.get("ERR", "/dev/null"), "w"))
base = f"http://127.0.0.1:{port}"
def req(path, body=None):
    r = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                               headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    return urllib.request.urlopen(r, timeout=60)
for _ in range(600):
    try:
        req("/readyz"); break
    except Exception:
        time.sleep(0.1)
def pid():
    if not wrap: return p.pid
    out = subprocess.run(["pgrep", "-f", "-n", binary + " serve"], capture_output=True, text=True).stdout.split()
    return int(out[-1])
def mem():
    s = open(f"/proc/{pid()}/status").read()
    f = lambda k: float([l for l in s.splitlines() if l.startswith(k)][0].split()[1])
    return f("RssAnon:"), f("VmRSS:")
idle = mem()
def stats(tag):
    """glibc's malloc_stats (written to the server's stderr, ERR): its totals, MiB."""
    subprocess.run(["gdb", "-p", str(pid()), "-batch", "-ex", "call (void)malloc_stats()"], capture_output=True)
    time.sleep(0.5)
    total = open(os.environ["ERR"]).read().split("Total (incl. mmap):")[-1].split("\n")
    numbers = [int(line.split("=")[1]) for line in total[1:3]]
    print(f"{tag}: malloc system {numbers[0] / 2**20:.1f} MiB, in use {numbers[1] / 2**20:.1f} MiB")
if os.environ.get("STATS"): stats("idle")
q = "SELECT COUNT(*) FROM job WHERE status='running' AND julianday(leased_until)-julianday(started_at) > 61.0/86400"
rss = []
for half in (1, 2):
    for _ in range(n // 2 // 1000 or 1):
        req("/jobs:batch", {"jobs": [{"operation": "sleep", "payload": {"seconds": 3600}}] * min(1000, n // 2)})
    want = half * (n // 2)
    deadline = time.time() + 300
    while True:
        c = sqlite3.connect(db, timeout=30).execute(q).fetchone()[0]
        if c >= want: break
        assert time.time() < deadline, c
        time.sleep(0.2)
    rss.append(mem())
print(f"idle RssAnon {idle[0]/1024:.1f} MiB; per job from idle {(rss[1][0]-idle[0])/n:.2f} KiB (VmRSS {(rss[1][1]-idle[1])/n:.2f}); slope {(rss[1][0]-rss[0][0])/(n/2):.2f} KiB")
if os.environ.get("TRIM"):
    subprocess.run(["gdb","-p",str(pid()),"-batch","-ex","call (int)malloc_trim(0)"],capture_output=True)
    t=mem(); print(f"after malloc_trim: per job from idle {(t[0]-idle[0])/n:.2f} KiB")
if os.environ.get("STATS"): stats("loaded")
os.kill(pid(), signal.SIGTERM)
p.wait(timeout=120)
