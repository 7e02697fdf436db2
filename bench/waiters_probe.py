#!/usr/bin/env python3
"""Memory per waiting client of a `yardmaster serve --no-workers`, as the bench's `waiters`
case measures it, outside the bench so a profiler can wrap the server:

    python3 bench/waiters_probe.py BINARY N [WRAPPER...]
    KILL9=1 python3 bench/waiters_probe.py target/release/yardmaster 1000 heaptrack -o /tmp/w

Needs libtorch on LD_LIBRARY_PATH (`source scripts/libtorch.sh`, then `$LIBTORCH/lib`).
Holds N long-polls (`Prefer: wait=300`) and N event streams, each on its own raw socket,
waits until the server's `yardmaster_watches_held` counts them all, and prints RssAnon
per waiter at once and after SETTLE seconds (default 5). KILL9=1 ends the server with
SIGKILL, so a heap profiler's "leaked" list is what the held waits keep.
"""
import base64, json, os, secrets, signal, socket, subprocess, sys, tempfile, time, urllib.request, uuid
binary, n = sys.argv[1], int(sys.argv[2]); wrap = sys.argv[3:]
d = tempfile.mkdtemp()
token = "ym_" + uuid.uuid4().hex + "_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
port = 19000 + os.getpid() % 1000
env = dict(os.environ, YARDMASTER__STORE__URL=f"sqlite://{d}/ym.db?mode=rwc", YARDMASTER__SERVER__BIND=f"127.0.0.1:{port}",
           YARDMASTER__SERVER__MAX_CONNECTIONS="8000", YARDMASTER__SERVER__MAX_CONNECTIONS_PER_CLIENT="8000",
           YARDMASTER__AUTH__BOOTSTRAP_TOKEN=token, YARDMASTER__UPLOADS__DIR=f"{d}/up", RUST_LOG="warn")
p = subprocess.Popen(wrap + [binary, "serve", "--no-workers"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"
H = {"authorization": f"Bearer {token}", "content-type": "application/json"}
def req(path, body=None, headers={}):
    r = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(), headers={**H, **headers})
    return urllib.request.urlopen(r, timeout=60)
for _ in range(600):
    try: req("/readyz"); break
    except Exception: time.sleep(0.1)
ids = [j["id"] for j in json.load(req("/jobs:batch", {"jobs": [{"operation": "ping"}] * 100}))["jobs"]]
try: req(f"/jobs/{ids[0]}", headers={"prefer": "wait=1"}).read()
except Exception: pass
def pid():
    if not wrap: return p.pid
    return int(subprocess.run(["pgrep", "-f", "-n", binary + " serve"], capture_output=True, text=True).stdout.split()[-1])
def mem():
    s = open(f"/proc/{pid()}/status").read()
    return float([l for l in s.splitlines() if l.startswith("RssAnon:")][0].split()[1])
def held():
    t = req("/metrics").read().decode()
    found = [l for l in t.splitlines() if l.startswith("yardmaster_watches_held ")]
    return float(found[0].split()[1]) if found else None
idle, w0 = mem(), held()
socks = []
for i in range(n):
    for path, extra in ((f"/jobs/{ids[i % 100]}", "prefer: wait=300\r\n"), (f"/jobs/{ids[i % 100]}/events/stream", "")):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n{extra}\r\n".encode())
        socks.append(s)
deadline = time.time() + 120
while w0 is not None and held() < w0 + 2 * n:
    assert time.time() < deadline
    time.sleep(0.2)
first = mem()
time.sleep(float(os.environ.get("SETTLE", "5")))
loaded = mem()
print(f"at once {(first - idle) / (2 * n):.2f} KiB per waiter")
print(f"per waiter {(loaded - idle) / (2 * n):.2f} KiB (idle {idle/1024:.1f} MiB, loaded {loaded/1024:.1f} MiB)")
os.kill(pid(), signal.SIGKILL if os.environ.get("KILL9") else signal.SIGTERM); p.wait(timeout=60)
