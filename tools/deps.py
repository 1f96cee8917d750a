#!/usr/bin/env python3
"""The import graph of a crate's files: circles, upward imports, sizes.

Reads every `.rs` file under a crate's `src/`, resolves each `crate::a::b::…` and
`super::…`/`self::…` path (in `use` items and inline in code) to the file that defines the
module, and prints:

- the largest import circles (strongly connected components of the file graph);
- imports that run against the layer order declared in LAYERS below (an "upward" import);
- the largest production files (tests, fuzzing and examples excluded);
- each crate's share of the workspace's lines.

`tools/deps.py --check` exits 1 when an upward import exists or a circle is larger than
MAX_CIRCLE files, so CI fails on a new one; `--crate store` graphs the store crate (CI checks
both).  Test files (`tests.rs`, `*_tests.rs`, `tests/`,
`#[cfg(test)]` blocks) are left out of the graph: tests may reach anywhere.
"""

import argparse
import os
import re
import sys

# Layer order of each crate's src/ (keyed by package name), lowest first.  A file may import its own layer and the ones
# below it.  The key is a module path prefix (longest match wins); a file whose module matches
# no key is reported.
LAYERS = {
    "pnfsd": [
        # byte and wire codecs, no I/O
        ("xdr", 0),
        ("alloc", 0),
        ("progress", 0),
        # transport and storage: the ONC RPC transport (record marking, headers, auth flavors),
        # the volume file, the preflight checks and the NVMe namespaces (the store is its own
        # crate, below: `crate::store::…` names it through lib.rs's re-export)
        ("rpc", 1),
        ("volume", 1),
        ("device_watch", 1),
        ("preflight", 1),
        ("nvme", 1),
        # NFSv4 wire types, status mapping and the per-op counters
        ("nfs4::types", 2),
        ("nfs4::status", 2),
        ("nfs4::opcode", 2),
        ("metrics::ops", 2),
        ("metrics::hist", 2),
        # client state and the export rules
        ("nfs4::state", 3),
        ("exports", 3),
        # the NFS part of the configuration, which the services read
        ("nfs4::options", 3),
        # services: each takes narrow handles to what it needs, never the whole server
        ("nfs4::layouts", 4),
        ("nfs4::delegs", 4),
        # what state::Inner holds for the delegations (a field), below the state it is in
        ("nfs4::delegs::book", 2.9),
        ("nfs4::copy", 4),
        ("nfs4::attr", 4),
        ("nfs4::callback", 4),
        # what an operation runs with: the server, which builds the services' handles (the
        # composition root), and the COMPOUND context
        ("server", 5),
        ("nfs4::ctx", 5),
        ("nfs4::helpers", 5),
        # one file per operation, then the dispatcher
        ("nfs4::ops", 6),
        ("nfs4::compound", 7),
        ("nfs4", 7),
        # configuration, then what puts it all together and serves it
        ("config", 8),
        ("admin", 9),
        ("daemon", 9),
        ("metrics", 9),
        ("fuzzing", 9),
        ("lib", 10),
        ("main", 10),
    ],
    # The store (store/src): the file layer over the tree layer, joined by `Inner`.
    "store": [
        # the API types, which both layers name, and a split volume's device
        ("types", 0),
        ("split", 0),
        # the tree layer: the on-disk B+tree, its cache, changes over it, records and formats
        ("btree", 1),
        ("cache", 1),
        ("kv", 1),
        ("keys", 1),
        ("format", 1),
        ("meta_blocks", 1),
        ("inode", 1),
        ("extents", 1),
        ("dirfilter", 1),
        # the locked state and `apply` of log items
        ("state", 2),
        # the shared core: `Inner` (the one interface the file layer reaches the tree
        # through), the write-back, mkfs and mount
        ("inner", 3),
        ("writeback", 3),
        ("mount", 3),
        # the file layer (`impl Store` per concept) and its face, lib.rs (`Store` itself)
        ("ns", 4),
        ("rename", 4),
        ("setattr", 4),
        ("data", 4),
        ("blocks", 4),
        ("layout_map", 4),
        ("copy", 4),
        ("xattr", 4),
        ("misc", 4),
        ("lib", 4),
        ("fuzzing", 5),
    ],
}
MAX_CIRCLE = 10
# Upward imports that exist today and are still to be removed (each a line "from -> to" in
# this file, relative to the crate's src/), per crate. `--check` fails on any other: the list
# can only shrink. Both crates have none today.
ALLOWED_UPWARD = {
    "pnfsd": os.path.join(os.path.dirname(os.path.abspath(__file__)), "deps-allowed-upward.txt"),
}

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{")
# `pub use store;` in lib.rs: another crate re-exported as a module; paths into it are no
# edge of this crate's graph.
REEXPORT_RE = re.compile(r"^\s*pub\s+use\s+(?:::)?([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
MOD_DECL_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
PATH_ATTR_RE = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.split("\n"):
        i = line.find("//")
        out.append(line if i < 0 else line[:i])
    return "\n".join(out)


def strip_strings(text):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def strip_cfg_test(text):
    """Drops `#[cfg(test)]` items (a `mod tests { … }` block or a single item)."""
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k = j + len("#[cfg(test)]")
        # the item ends at `;` before any `{`, or at the matching `}`
        semi = text.find(";", k)
        brace = text.find("{", k)
        if brace < 0 or (0 <= semi < brace):
            i = semi + 1 if semi >= 0 else len(text)
            continue
        depth = 0
        m = brace
        while m < len(text):
            c = text[m]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            m += 1
        i = m + 1
    return "".join(out)


def is_test_file(rel):
    base = os.path.basename(rel)
    parts = rel.split(os.sep)
    return (
        base == "tests.rs"
        or base.endswith("_tests.rs")
        or "tests" in parts[:-1]
        or base == "log_capture.rs"
    )


def is_excluded_from_size(rel):
    base = os.path.basename(rel)
    return is_test_file(rel) or "fuzzing" in base or "fuzzing" in rel.split(os.sep)


class Crate:
    def __init__(self, name, src):
        self.name = name
        self.src = src
        self.files = {}  # module path (tuple) -> relative file path
        self.mod_of = {}  # relative file path -> module path
        self.external = set()  # crates re-exported at the root (`pub use store;`)
        self._walk()

    def _walk(self):
        roots = []
        for root in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(self.src, root)):
                roots.append(root)
        for r in roots:
            key = (r[:-3],) if r == "main.rs" else ()
            self._visit(r, key, is_mod_rs=True)
        if "lib.rs" in roots:
            with open(os.path.join(self.src, "lib.rs"), encoding="utf-8") as f:
                self.external = set(REEXPORT_RE.findall(strip_comments(f.read())))

    def _visit(self, rel, modpath, is_mod_rs):
        if rel in self.mod_of:
            return
        full = os.path.join(self.src, rel)
        if not os.path.exists(full):
            return
        if modpath in self.files and modpath != ():
            return
        self.files[modpath] = rel
        self.mod_of[rel] = modpath
        with open(full, encoding="utf-8") as f:
            text = strip_comments(f.read())
        d = os.path.dirname(rel) if is_mod_rs else rel[:-3]
        paths = {m.group(2): m.group(1) for m in PATH_ATTR_RE.finditer(text)}
        for m in MOD_DECL_RE.finditer(text):
            name = m.group(1)
            if name in paths:
                child = os.path.normpath(os.path.join(os.path.dirname(rel), paths[name]))
                self._visit(child, modpath + (name,), child.endswith("mod.rs"))
                continue
            a = os.path.join(d, name + ".rs")
            b = os.path.join(d, name, "mod.rs")
            if os.path.exists(os.path.join(self.src, a)):
                self._visit(a, modpath + (name,), False)
            elif os.path.exists(os.path.join(self.src, b)):
                self._visit(b, modpath + (name,), True)

    def resolve(self, segs):
        """The file of the longest module prefix of `segs` (None inside a re-exported crate)."""
        segs = tuple(segs)
        if segs and segs[0] in self.external and segs[:1] not in self.files:
            return None
        while segs:
            if segs in self.files:
                return self.files[segs]
            segs = segs[:-1]
        return self.files.get(())

    def edges(self):
        graph = {}
        for rel, modpath in self.mod_of.items():
            if is_test_file(rel):
                continue
            with open(os.path.join(self.src, rel), encoding="utf-8") as f:
                text = strip_cfg_test(strip_strings(strip_comments(f.read())))
            base = modpath if rel.endswith("mod.rs") or rel == "lib.rs" else modpath[:-1]
            # `self::` in a non-mod.rs file is the file's own module
            own = modpath
            targets = set()
            # `use a::b::{c, d::e}` groups: expand one level of names
            for g in USE_GROUP_RE.finditer(text):
                prefix = g.group(1).split("::")
                start = g.end()
                depth, k = 1, start
                while k < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[k], 0)
                    k += 1
                inner = text[start : k - 1]
                for item in re.split(r"[,{}]", inner):
                    item = item.strip().split(" as ")[0].strip()
                    if not item or item == "self" or item == "*":
                        segs = self._abs(prefix, base, own)
                    else:
                        segs = self._abs(prefix + item.split("::"), base, own)
                    if segs is not None:
                        t = self.resolve(segs)
                        if t:
                            targets.add(t)
            for m in PATH_RE.finditer(text):
                segs = self._abs([m.group(1)] + m.group(2)[2:].split("::"), base, own)
                if segs is None:
                    continue
                t = self.resolve(segs)
                if t:
                    targets.add(t)
            # paths relative to a child module (`mod hosts;` then `hosts::Hosts`)
            children = [m.group(1) for m in MOD_DECL_RE.finditer(text)]
            child_base = modpath
            for c in children:
                for m in re.finditer(r"(?<![:\w])" + c + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
                    t = self.resolve(child_base + (c,) + tuple(m.group(1)[2:].split("::")))
                    if t:
                        targets.add(t)
                for m in re.finditer(r"\buse\s+" + c + r"::\{", text):
                    pass  # the child's file is already an edge through the path above
            targets.discard(rel)
            graph[rel] = {t for t in targets if not is_test_file(t)}
        return graph

    @staticmethod
    def _abs(segs, base, own):
        out = []
        head = segs[0]
        rest = segs[1:]
        if head == "crate":
            out = []
        elif head == "self":
            out = list(own)
        elif head == "super":
            out = list(own[:-1])
            while rest and rest[0] == "super":
                out = out[:-1]
                rest = rest[1:]
        else:
            return None
        return tuple(out + [s for s in rest if s not in ("self",)])


def tarjan(graph):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def layer_of(modpath, table):
    name = "::".join(modpath) if modpath else "lib"
    best = None
    for key, rank in table:
        if name == key or name.startswith(key + "::"):
            if best is None or len(key) > len(best[0]):
                best = (key, rank)
    return best


def count_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for _ in f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--crate", default="server", help="crate folder to graph (default server)")
    ap.add_argument("--check", action="store_true", help="exit 1 on an upward import or a large circle")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    cdir = os.path.join(root, args.crate)
    with open(os.path.join(cdir, "Cargo.toml")) as f:
        name = re.search(r'^name\s*=\s*"([^"]+)"', f.read(), re.M).group(1)
    crate = Crate(name, os.path.join(cdir, "src"))
    graph = crate.edges()

    comps = sorted(tarjan(graph), key=len, reverse=True)
    big = [c for c in comps if len(c) > 1]
    print(f"crate {name}: {len(graph)} production files")
    print(f"largest import circle: {len(big[0]) if big else 1} files; circles over 1 file: {len(big)}")
    for c in big[:3]:
        print(f"  circle of {len(c)}: " + " ".join(sorted(c)[:40]) + (" …" if len(c) > 40 else ""))

    up = []
    unknown = set()
    table = LAYERS.get(name)
    if table:
        for a, ts in graph.items():
            la = layer_of(crate.mod_of[a], table)
            if la is None:
                unknown.add(a)
                continue
            for b in ts:
                lb = layer_of(crate.mod_of[b], table)
                if lb is None:
                    unknown.add(b)
                    continue
                if lb[1] > la[1]:
                    up.append((a, la, b, lb))
    print(f"upward imports: {len(up)}")
    for a, la, b, lb in sorted(up):
        print(f"  {a} ({la[0]}, {la[1]}) -> {b} ({lb[0]}, {lb[1]})")
    for u in sorted(unknown):
        print(f"  no layer declared for {u}")

    sizes = []
    for rel in crate.mod_of:
        if is_excluded_from_size(rel):
            continue
        sizes.append((count_lines(os.path.join(crate.src, rel)), rel))
    sizes.sort(reverse=True)
    print("largest production files:")
    for n, rel in sizes[: args.top]:
        print(f"  {n:6d} {args.crate}/src/{rel}")
    over = [s for s in sizes if s[0] > 700]
    print(f"production files over 700 lines: {len(over)}")

    total = 0
    per = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("target", ".git")]
        for fn in filenames:
            if fn.endswith(".rs"):
                n = count_lines(os.path.join(dirpath, fn))
                total += n
                top = os.path.relpath(dirpath, root).split(os.sep)[0]
                per[top] = per.get(top, 0) + n
    share = 100.0 * per.get(args.crate, 0) / max(total, 1)
    print(f"lines of {args.crate}/: {per.get(args.crate, 0)} of {total} in the workspace ({share:.0f} %)")

    if args.check:
        bad = False
        allowed = set()
        allowed_file = ALLOWED_UPWARD.get(name)
        if allowed_file and os.path.exists(allowed_file):
            with open(allowed_file) as f:
                allowed = {l.strip() for l in f if l.strip() and not l.startswith("#")}
        new = [(a, b) for a, _, b, _ in up if f"{a} -> {b}" not in allowed]
        for a, b in new:
            print(f"FAIL: upward import {a} -> {b}", file=sys.stderr)
        if new:
            bad = True
        gone = allowed - {f"{a} -> {b}" for a, _, b, _ in up}
        for g in sorted(gone):
            print(f"note: {g} is gone: remove it from {os.path.basename(allowed_file)}")
        if big and len(big[0]) > MAX_CIRCLE:
            print(f"FAIL: an import circle of {len(big[0])} files (most {MAX_CIRCLE})", file=sys.stderr)
            bad = True
        if unknown:
            print(f"FAIL: {len(unknown)} files in no declared layer", file=sys.stderr)
            bad = True
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
