#!/usr/bin/env python3
"""Instructions a drain costs, thread by thread, and where two drains differ: counts, not samples.

Drains here move 10-15% (at times 2x) from one minute to the next, more than most changes
to the hot path are worth; callgrind counts the instructions each thread executes, the
same for the same work whatever else the machine does. Run one small drain under it per
build or setting, each thread on its own (valgrind makes a drain ~50x slower, so keep it to
a few thousand jobs; work done per interval, such as the releaser's looks and the sweeps,
then comes ~50x more often per job: compare the SQLite writer's thread, which only runs
statements):

    BENCH_ONLY=embedded BENCH_JOBS=3000 BENCH_FLOWING=1 BENCH_FLOW_PRIORITIES=none \\
        BENCH_FLOW_LIMIT=1 valgrind --tool=callgrind --separate-threads=yes \\
        --callgrind-out-file=/tmp/a/cg.out <bench binary> --bench
    python3 bench/instructions.py /tmp/a/cg.out             # every thread's total
    python3 bench/instructions.py /tmp/a/cg.out /tmp/b/cg.out [--top 20]

With two runs it pairs their SQLite writer threads (the thread that deletes the most
B-tree entries: claims and outcomes are its work alone) and lists the functions whose own
instructions differ most. The store's pool may run a drain's transactions on several of its
connections, each a thread of its own, so a writer thread can hold part of a drain; with
`--all-threads` the two runs are compared whole, every thread's functions summed (the
bench's own threads and its seeding included). `callgrind_annotate` (valgrind's) reads the
files.
"""
import argparse
import glob
import re
import subprocess
import sys


def functions(path):
    """Instructions by function (own, not inclusive) in one thread's file."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True,
                         check=True).stdout
    counts = {}
    for line in out.splitlines():
        match = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*)", line)
        if not match:
            continue
        name = re.sub(r"\s*\[[^\]]*\]$", "", match.group(2).strip()).replace("???:", "")
        counts[name] = max(counts.get(name, 0), int(match.group(1).replace(",", "")))
    return counts


def threads(prefix):
    """Each thread's file of one run, with its total."""
    found = []
    for path in sorted(glob.glob(prefix + "-*")):
        with open(path) as file:
            total = next((int(line.split()[1]) for line in file if line.startswith("totals:")), 0)
        found.append((path, total))
    if not found:
        sys.exit(f"no thread files {prefix}-*: run callgrind with --separate-threads=yes")
    return found


def writer(prefix):
    """The run's SQLite writer thread: the one deleting the most B-tree entries."""
    def deletes(path):
        return functions(path).get("sqlite3BtreeDelete", 0)
    busy = [path for path, total in threads(prefix) if total > 10_000_000]
    return max(busy, key=deletes)


def summed(prefix):
    """Instructions by function over every thread of one run (a function recursing, as
    SQLite's parser does, counted once under its name)."""
    counts = {}
    for path, _ in threads(prefix):
        for name, count in functions(path).items():
            name = re.sub(r"'\d+$", "", name)
            counts[name] = counts.get(name, 0) + count
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="callgrind output prefixes (--callgrind-out-file)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--all-threads", action="store_true", help="compare the runs whole, not their writers")
    args = parser.parse_args()
    for run in args.runs:
        found = threads(run)
        listed = " ".join(f"{path.rsplit('-', 1)[1]}:{total:,}" for path, total in found)
        print(f"{run}: {listed} (all: {sum(total for _, total in found):,})")
    if len(args.runs) != 2:
        return
    if args.all_threads:
        a, b = (summed(run) for run in args.runs)
        print(f"every thread: {args.runs[0]} -> {args.runs[1]}")
    else:
        before, after = (writer(run) for run in args.runs)
        a, b = functions(before), functions(after)
        print(f"writer threads: {before} -> {after}")
    deltas = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in set(a) | set(b)), reverse=True)
    print(f"{'difference':>14} {'before':>14}  function (own instructions)")
    for delta, name in deltas[:args.top] + [(None, "...")] + deltas[-5:]:
        if delta is None:
            print(" " * 30 + "...")
            continue
        print(f"{delta:>14,} {a.get(name, 0):>14,}  {name[:150]}")


if __name__ == "__main__":
    main()
