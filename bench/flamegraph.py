#!/usr/bin/env python3
"""A flame graph as SVG from folded stacks (`frame;frame;… count` lines, as bench/layers.py
writes them): each frame's width is its share of the samples, callers below callees.

Usage: bench/flamegraph.py TITLE < stacks.folded > flame.svg
"""

import html
import sys
import zlib

WIDTH, ROW, FONT = 1600, 16, 11
MIN_WIDTH = 0.3  # pixels; narrower frames are left out


def tree(lines):
    """A nested dict: name -> [count, children]."""
    root = [0, {}]
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        root[0] += n
        node = root
        for frame in stack.split(";"):
            child = node[1].setdefault(frame, [0, {}])
            child[0] += n
            node = child
    return root


def colour(name):
    hue = zlib.crc32(name.split("::")[0].encode()) % 60
    return f"hsl({hue}, 80%, 60%)"


def render(title, root):
    rects = []
    depth_max = [0]

    def walk(node, x, depth):
        for name, child in sorted(node[1].items()):
            width = child[0] / root[0] * WIDTH
            if width >= MIN_WIDTH:
                depth_max[0] = max(depth_max[0], depth)
                rects.append((x, depth, width, name, child[0]))
                walk(child, x, depth + 1)
            x += width

    walk(root, 0.0, 0)
    height = (depth_max[0] + 3) * ROW
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="{FONT}">',
        f'<text x="4" y="{ROW - 4}">{html.escape(title)} ({root[0]} samples)</text>',
    ]
    for x, depth, width, name, count in rects:
        y = height - (depth + 1) * ROW
        label = html.escape(name)
        share = 100 * count / root[0]
        out.append(
            f'<g><title>{label} ({count} samples, {share:.2f}%)</title>'
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 1}" fill="{colour(name)}"/>'
        )
        chars = int(width / (FONT * 0.6))
        if chars >= 4:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            out.append(f'<text x="{x + 2:.2f}" y="{y + ROW - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(sys.argv[1] if len(sys.argv) > 1 else "flame graph", tree(sys.stdin)))
