#!/usr/bin/env python3
"""Where a profiled run's CPU went: reads `perf script` output of a system-wide
`perf record -g` (bench/profile.sh) on standard input and prints, per process, the share of
samples in each layer (by the sampled frame's own symbol: self time), then writes folded
stacks (one line per distinct stack, `flamegraph.pl`/`inferno-flamegraph` input) of the
yardmaster processes to the file named by the first argument.

Usage: perf script -F pid,tid,comm,ip,sym,dso -i perf.data | bench/layers.py stacks.folded JOBS
"""

import collections
import re
import sys

# The first rule whose pattern the frame (`symbol (dso)`) matches names its layer.
LAYERS = [
    ("kernel: syscalls, loopback TCP, fsync, scheduler", r"\[kernel\.kallsyms\]|\[unknown\] \(\[unknown\]\)$"),
    ("SQLite engine", r"^sqlite3|libsqlite3"),
    ("store driver (sqlx)", r"sqlx"),
    ("ORM and query building (sea-orm, sea-query)", r"sea_orm|sea_query"),
    ("broker client (lapin, amq-protocol)", r"lapin|amq_protocol|pinky_swear|async_rs|flume|async_global"),
    ("HTTP (actix-web, actix-http)", r"actix_http|actix_web|actix_server|actix_router|h2::|httparse"),
    ("serde (JSON)", r"serde"),
    ("logging (tracing)", r"tracing"),
    ("actor mailboxes and tasks (actix, tokio, futures)", r"actix|tokio|futures|async_channel|event_listener|mio::|parking_lot|std::sync|std::thread"),
    ("allocator and memory copies", r"malloc|free|realloc|calloc|memcpy|memmove|memset|_int_|alloc::"),
    ("time, ids, formatting", r"chrono|uuid|core::fmt|alloc::fmt|itoa|ryu"),
    ("hashing", r"hash|Hash|sip"),
    ("yardmaster's own code", r"yardmaster"),
    ("PostgreSQL server", r"postgres"),
    ("RabbitMQ server (BEAM)", r"beam|erts|\.so.*erl|jit"),
    ("node (the peer)", r"node|v8|libuv"),
    ("libc, other", r"libc|ld-linux"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in LAYERS]


def layer(frame):
    """The layer of a frame written `symbol (dso)`: by its symbol, or, for a frame perf could
    not name, by the object it ran in (the kernel, a library, or unresolved)."""
    symbol, _, dso = frame.partition(" (")
    if symbol.startswith("[unknown]") or not symbol:
        if "kernel" in dso:
            return COMPILED[0][0]
        if ".so" in dso:
            return layer(dso.rsplit("/", 1)[-1].rstrip(")") + " (lib)")
        for name, pattern in COMPILED:
            if name.startswith(("PostgreSQL", "RabbitMQ", "node")) and pattern.search(dso):
                return name
        return "unresolved"
    if "[k]" in frame or "kernel.kallsyms" in dso:
        return COMPILED[0][0]
    for name, pattern in COMPILED:
        if pattern.search(symbol) or (name.startswith(("PostgreSQL", "RabbitMQ", "node")) and pattern.search(dso)):
            return name
    return "unresolved"


def samples(lines):
    """Yields (pid, tid, comm, frames: innermost first) for each sample of `perf script`."""
    header, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if header:
                yield (*header, frames)
            header, frames = None, []
        elif not line.startswith(("\t", " ")):
            match = re.match(r"\s*(.*?)\s+(\d+)/(\d+)", line)
            if match:
                header = (int(match.group(2)), int(match.group(3)), match.group(1))
        else:
            parts = line.strip().split(None, 1)
            rest = parts[1] if len(parts) > 1 else "[unknown]"
            symbol = re.sub(r"\+0x[0-9a-f]+", "", rest)
            frames.append(symbol)
    if header:
        yield (*header, frames)


def process_name(frames_by_pid, comms):
    """Names each pid by its main thread's command, or by the binary its user frames ran."""
    names = {}
    for pid, frames in frames_by_pid.items():
        dsos = collections.Counter(
            re.search(r"\(([^)]*)\)$", frame).group(1).rsplit("/", 1)[-1]
            for frame in frames
            if re.search(r"\(([^)]*)\)$", frame) and "kernel" not in frame and ".so" not in frame
        )
        main = comms.get((pid, pid))
        binary = dsos.most_common(1)[0][0] if dsos else None
        if binary and binary.startswith("throughput"):
            binary = "bench (hosts in-process yardmaster / publisher)"
        names[pid] = binary or main or str(pid)
    return names


def main():
    folded_path = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    per_pid = collections.defaultdict(collections.Counter)
    tops = collections.defaultdict(list)
    comms = {}
    folded = collections.Counter()
    total = 0
    for pid, tid, comm, frames in samples(sys.stdin):
        if not frames:
            continue
        total += 1
        comms.setdefault((pid, tid), comm)
        per_pid[pid][layer(frames[0])] += 1
        tops[pid].append(frames[0])
        folded[(pid, ";".join(reversed([f.split(" (")[0] for f in frames])))] += 1
    names = process_name(tops, comms)
    by_name = collections.defaultdict(collections.Counter)
    symbols = collections.defaultdict(collections.Counter)
    for pid, counter in per_pid.items():
        by_name[names[pid]].update(counter)
        symbols[names[pid]].update(frame.split(" (")[0] for frame in tops[pid])
    print(f"{total} samples in all")
    for name, counter in sorted(by_name.items(), key=lambda item: -sum(item[1].values())):
        count = sum(counter.values())
        if count < total * 0.01:
            continue
        print(f"\n{name}: {count} samples ({100 * count / total:.1f}% of all)")
        for layer_name, n in counter.most_common():
            if n >= count * 0.005:
                print(f"  {100 * n / count:5.1f}%  {layer_name}")
        print("  top functions (self):")
        for symbol, n in symbols[name].most_common(15):
            print(f"  {100 * n / count:5.1f}%    {symbol[:110]}")
    yardmaster_pids = {pid for pid, name in names.items() if "yardmaster" in name or name.startswith("bench")}
    with open(folded_path, "w") as out:
        for (pid, stack), n in folded.most_common():
            if pid in yardmaster_pids:
                out.write(f"{names[pid].split(' ')[0]};{stack} {n}\n")


if __name__ == "__main__":
    main()
