#!/usr/bin/env python3
"""include_circles.py: the import circles among sim/'s C modules (x.c and x.h taken together),
from their #include "..." lines; prints them, or "none", and exits 1 where there is one.

    python3 tools/include_circles.py        (from the repository root)
"""
import glob
import os
import re
import sys


def module(path):
    return os.path.splitext(os.path.normpath(path))[0]


def edges():
    out = {}
    for f in glob.glob('sim/*.[ch]') + glob.glob('sim/bind/*.[ch]'):
        for line in open(f, encoding='utf-8', errors='replace'):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
            if not os.path.exists(target):
                target = os.path.normpath(os.path.join('sim', m.group(1)))
            if module(target) != module(f):
                out.setdefault(module(f), set()).add(module(target))
    return out


def circles(g):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


if __name__ == '__main__':
    found = circles(edges())
    for c in found:
        print('circle: ' + ' -> '.join(c))
    if not found:
        print('include circles among sim/ modules: none')
    sys.exit(1 if found else 0)
