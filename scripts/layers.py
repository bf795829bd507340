#!/usr/bin/env python3
"""The crate's layers, checked against its imports, and the picture of them.

Reads every `crate::` path in src/ (use lines and inline paths, tests included) and
checks two rules: a top-level module imports only modules of its own layer or below
(LAYERS, ground first: the one place the order is written), and no files import each
other in a loop. `--write` refreshes the dependency diagram in docs/architecture.md
(Mermaid, between the markers), drawn from the same imports; `--check` (make lint, make
test) fails on a broken rule or a diagram that no longer matches the code.

    python3 scripts/layers.py --check
    python3 scripts/layers.py --write
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
DOC = os.path.join(ROOT, "docs", "architecture.md")
BEGIN, END = "<!-- layers:begin (scripts/layers.py --write) -->", "<!-- layers:end -->"

# Ground first; a module may import its own layer's modules and every layer below.
LAYERS = [
    ["error", "sync", "failpoint", "stats", "fixture"],
    ["config", "partition_spec"],
    ["shred"],
    ["write"],
    ["storage"],
    ["catalog"],
    ["table"],
    ["rowops"],
    ["evolve"],
    ["validate"],
    ["commit"],
    ["writer"],
    ["ffi"],
]
LAYER_OF = {m: i for i, layer in enumerate(LAYERS) for m in layer}

PATH = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*)\{([^}]*)\}")


def files():
    for dirpath, _, names in os.walk(SRC):
        for name in names:
            if name.endswith(".rs"):
                yield os.path.relpath(os.path.join(dirpath, name), SRC)


def module_of(rel):
    """src-relative file → its module path, e.g. commit/committer/encode.rs → commit::committer::encode."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts)


def file_modules():
    return {module_of(f): f for f in files()}


def imports(rel, modules):
    """The files a file names through crate:: paths (the longest module prefix of each)."""
    text = open(os.path.join(SRC, rel)).read()
    text = re.sub(r"//[^\n]*", "", text)  # doc and line comments name paths without importing them
    paths = set(PATH.findall(text))
    for prefix, names in GROUP.findall(text):
        for name in names.split(","):
            name = name.strip().split(" ")[0]
            if name and name != "self":
                paths.add(prefix + name)
            elif name == "self":
                paths.add(prefix.rstrip(":"))
    out = set()
    for p in paths:
        parts = p.split("::")
        for n in range(len(parts), 0, -1):
            cand = "::".join(parts[:n])
            if cand in modules:
                out.add(modules[cand])
                break
    out.discard(rel)
    return out


def graph():
    modules = file_modules()
    return {rel: imports(rel, modules) for rel in modules.values()}


def top(rel):
    return rel.split(os.sep)[0].removesuffix(".rs")


def layer_problems(g):
    problems = []
    for rel, deps in sorted(g.items()):
        a = top(rel)
        if a == "lib":
            continue
        if a not in LAYER_OF:
            problems.append(f"src/{rel}: module {a} is in no layer of scripts/layers.py")
            continue
        for d in sorted(deps):
            b = top(d)
            if b in LAYER_OF and LAYER_OF[b] > LAYER_OF[a]:
                problems.append(f"src/{rel} imports src/{d}: {a} (layer {LAYER_OF[a]}) is below {b} (layer {LAYER_OF[b]})")
    return problems


def circles(g):
    """Strongly connected groups of more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def diagram(g):
    """Mermaid: one box per top-level module, in its layer, an arrow per module import."""
    edges = sorted({(top(a), top(b)) for a, deps in g.items() for b in deps
                    if top(a) != top(b) and top(a) != "lib"})
    lines = ["```mermaid", "flowchart BT"]
    for i, layer in enumerate(LAYERS):
        lines.append(f"  subgraph L{i}[\"layer {i}\"]")
        lines.extend(f"    {m}" for m in layer)
        lines.append("  end")
    lines.extend(f"  {a} --> {b}" for a, b in edges)
    lines.append("```")
    return "\n".join(lines)


def block(g):
    return f"{BEGIN}\n{diagram(g)}\n{END}"


def main():
    g = graph()
    problems = layer_problems(g)
    problems += ["import circle: " + " -> ".join("src/" + f for f in c) for c in circles(g)]
    doc = open(DOC).read()
    start, end = doc.find(BEGIN), doc.find(END)
    if "--write" in sys.argv:
        new = block(g)
        doc = doc[:start] + new + doc[end + len(END):] if start >= 0 else doc.rstrip() + "\n\n" + new + "\n"
        open(DOC, "w").write(doc)
    elif start < 0 or doc[start:end + len(END)] != block(g):
        problems.append("docs/architecture.md: the layer diagram differs from the code (python3 scripts/layers.py --write)")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
