#!/usr/bin/env python3
"""Write the op table of docs/supported.md from ir/ops.def and `pipecc --list-ops`.

    python3 tools/gen_supported.py build/pipecc            # rewrite docs/supported.md
    python3 tools/gen_supported.py build/pipecc --check    # exit 1 if it is out of date

The table sits between the two marker lines of docs/supported.md; the prose around it is
kept. The rows follow ir/ops.def, grouped under its section comments; the columns come
from the compiler's own predicates (tools/pipecc_ops.c), so the table says what the
compiler does, not what someone remembered to write.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- op table: made by tools/gen_supported.py from ir/ops.def and pipecc --list-ops -->"
END = "<!-- end of the op table -->"
WORDS = {"kernel": "yes", "fused": "yes, fused", "view": "yes, a view", "expanded": "expanded",
         "rewritten": "rewritten", "gradient": "yes", "no gradient flows": "none flows",
         "no": "no", "as rewritten": "as rewritten"}


def sections(path):
    """[(title, [op, ...]), ...] in the order of ir/ops.def."""
    out, title, in_comment, first = [], None, False, True
    for line in open(path):
        s = line.strip()
        if first and s.startswith("/*"):  # the file's own header comment
            first = "*/" not in s
            if first:
                in_comment = "header"
            continue
        if in_comment == "header":
            if "*/" in s:
                in_comment, first = False, False
            continue
        first = False
        m = re.match(r"OP\((\w+),", s)
        if m:
            if not out or out[-1][0] != title:
                out.append((title, []))
            out[-1][1].append(m.group(1))
        elif s.startswith("/*"):
            title = re.sub(r"^/\*\s*|\s*\*/$", "", s).rstrip(":;")
            title = title[:1].upper() + title[1:]
    return out


def table(pipecc):
    rows = subprocess.run([pipecc, "--list-ops"], check=True, capture_output=True, text=True).stdout
    lines = rows.strip().split("\n")
    assert lines[0].split("\t") == ["op", "cpu", "cuda", "train"], lines[0]
    facts = {r[0]: r[1:] for r in (l.split("\t") for l in lines[1:])}
    secs = sections(os.path.join(ROOT, "ir", "ops.def"))
    listed = [op for _, ops in secs for op in ops]
    assert sorted(listed) == sorted(facts), "ir/ops.def and pipecc --list-ops disagree"
    out = [BEGIN, "", f"{len(facts)} ops.", ""]
    for title, ops in secs:
        out += [f"### {title}", "", "| op | cpu | cuda | train |", "| --- | --- | --- | --- |"]
        out += [f"| {op} | " + " | ".join(WORDS[w] for w in facts[op]) + " |" for op in ops]
        out.append("")
    out.append(END)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipecc", help="the pipecc binary")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/supported.md is out of date")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "supported.md"))
    a = ap.parse_args()
    doc = open(a.doc).read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{a.doc}: the marker lines of the op table are missing")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = head + table(a.pipecc) + tail
    if a.check:
        if new != doc:
            sys.exit(f"{a.doc} is out of date: run python3 tools/gen_supported.py {a.pipecc}")
        print(f"{a.doc}: the op table is current")
        return
    if new != doc:
        tmp = a.doc + ".tmp"
        with open(tmp, "w") as f:
            f.write(new)
        os.replace(tmp, a.doc)
    print(f"wrote {a.doc}")


if __name__ == "__main__":
    main()
