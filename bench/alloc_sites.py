#!/usr/bin/env python3
"""Allocations per job by the yardmaster function that made them, from a heaptrack recording.

heaptrack sees the C library's allocator only, so the bench must allocate through it for
the recording: in benches/support/allocations.rs, forward `Counting`'s four calls to
`std::alloc::System` instead of `Jemalloc` (a local change, not kept), build the bench, then

    BENCH_ONLY=embedded BENCH_JOBS=20000 heaptrack -o /tmp/ht <bench binary> --bench
    heaptrack_print -f /tmp/ht.zst --flamegraph-cost-type allocations -F /tmp/ht.stacks
    python3 bench/alloc_sites.py /tmp/ht.stacks 20000

Each allocation is charged to the deepest yardmaster frame on its stack (SQLite's own, and
those under no yardmaster frame, on lines of their own); `--below NAME` lists, for frames
matching NAME, the frames under them instead. Start-up and the seeding are included, as in
the bench's own count.
"""
import collections
import re
import sys


def clean(frame):
    frame = re.sub(r" \(.*\)$", "", frame)
    return re.sub(r"::h[0-9a-f]{16}$", "", frame)


def stacks(path):
    for line in open(path, errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if count.isdigit():
            yield [clean(frame) for frame in stack.split(";") if frame], int(count)


def main():
    args = sys.argv[1:]
    below = None
    if "--below" in args:
        at = args.index("--below")
        below = args[at + 1]
        del args[at : at + 2]
    path, jobs = args[0], int(args[1])
    sites = collections.Counter()
    total = 0
    for frames, count in stacks(path):
        total += count
        if below is not None:
            hits = [at for at, frame in enumerate(frames) if below in frame]
            if hits:
                sites[" <- ".join(reversed(frames[hits[-1] + 1 : hits[-1] + 4]))] += count
            continue
        ours = [frame for frame in frames if "yardmaster" in frame and "allocations" not in frame]
        if ours:
            sites[ours[-1]] += count
        elif any("sqlite3" in frame for frame in frames):
            sites["<SQLite's own>"] += count
        else:
            sites["<under no yardmaster frame>"] += count
    print(f"{total / jobs:.1f} allocations per job in all")
    for site, count in sites.most_common(40):
        print(f"{count / jobs:8.2f}  {site[:220]}")


if __name__ == "__main__":
    main()
