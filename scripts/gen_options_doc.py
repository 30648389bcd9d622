#!/usr/bin/env python3
"""The README's option table, generated from src/options.def.

Rewrites the lines between the BEGIN OPTIONS and END OPTIONS markers of
README.md with one table row per HM_OPTION row of src/options.def: name,
default, accepted values and meaning (the row's MEANING string, verbatim).

  python3 scripts/gen_options_doc.py           # rewrite README.md (make options-doc)
  python3 scripts/gen_options_doc.py --check   # exit 1 and show a diff if it is out of date
"""

import argparse
import ast
import difflib
import operator
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- BEGIN OPTIONS"
END = "<!-- END OPTIONS -->"
MARKER = (BEGIN + " (generated from src/options.def by scripts/gen_options_doc.py;"
          " edit options.def, then run `make options-doc`) -->")


class DefError(Exception):
    pass


def strip_comments(text):
    """Remove /* */ and // comments, keeping string literals intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise DefError("unterminated comment")
            out.append(" ")
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(body):
    """Split a macro call's arguments at top-level commas."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            j = i + 1
            while j < len(body) and body[j] != '"':
                j += 2 if body[j] == "\\" else 1
            cur.append(body[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    args.append("".join(cur).strip())
    return args


def string_value(arg):
    """The value of one or more adjacent C string literals (or None for NULL)."""
    if arg == "NULL":
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    if not parts or re.sub(r'"((?:[^"\\]|\\.)*)"', "", arg).strip():
        raise DefError("not a string literal: %s" % arg)
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), "".join(parts))


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitOr: operator.or_, ast.BitAnd: operator.and_}
_NAMES = {"INT_MAX": 2**31 - 1, "LONG_MAX": 2**63 - 1, "LONG_MIN": -2**63, "UINT32_MAX": 2**32 - 1}


def int_value(arg):
    """An integer constant expression of options.def (literals with L/U
    suffixes, + - * / << >> | &, parentheses, INT_MAX/LONG_MAX); None if it
    is something else."""
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", arg).replace("/", "//")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in _NAMES:
            return _NAMES[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(arg)

    try:
        return ev(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def parse_def(path):
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    rows = []
    for m in re.finditer(r"\bHM_OPTION\s*\(", text):
        i, depth = m.end(), 1
        while i < len(text) and depth:
            c = text[i]
            if c == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        args = split_args(text[m.end():i - 1])
        if len(args) != 7:
            raise DefError("HM_OPTION with %d arguments, expected 7: %s" % (len(args), args[:1]))
        name, typ, dflt, lo, hi, choices, meaning = args
        rows.append({"name": "HAKMEM_" + name, "type": typ, "def": dflt, "min": lo, "max": hi,
                     "choices": string_value(choices), "meaning": string_value(meaning)})
    if not rows:
        raise DefError("no HM_OPTION rows in %s" % path)
    return rows


def code(v):
    return "`%s`" % v


def number(arg):
    v = int_value(arg)
    return str(v) if v is not None else arg


def row_cells(r):
    if r["type"] == "BOOL":
        dflt, values = code(number(r["def"])), "`0`, `1`"
    elif r["type"] == "INT":
        dflt, values = code(number(r["def"])), "%s to %s" % (code(number(r["min"])), code(number(r["max"])))
    elif r["type"] == "PATH":
        dflt, values = "(unset)", "a file path"
    elif r["type"] == "CHOICE":
        if r["choices"] is None:
            raise DefError("%s: CHOICE without choices" % r["name"])
        names = r["choices"].split("|")
        i = int_value(r["def"])
        dflt = code(names[i]) if i is not None and 0 <= i < len(names) else code(r["def"])
        values = ", ".join(code(n) for n in names)
    else:
        raise DefError("%s: unknown type %s" % (r["name"], r["type"]))
    # the text as it is, with Markdown's special characters escaped
    meaning = re.sub(r"([\\`*_|<>\[\]])", r"\\\1", " ".join(r["meaning"].split()))
    return [code(r["name"]), dflt, values, meaning]


def table(rows):
    lines = [MARKER, "| variable | default | values | meaning |", "| --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    lines.append(END)
    return lines


def render(readme_text, rows):
    lines = readme_text.split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith(BEGIN)]
    ends = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise DefError("README needs exactly one '%s ... -->' line followed by one '%s' line" % (BEGIN, END))
    return "\n".join(lines[:starts[0]] + table(rows) + lines[ends[0] + 1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--def", dest="defs", default=os.path.join(REPO, "src", "options.def"))
    ap.add_argument("--readme", default=os.path.join(REPO, "README.md"))
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the README is out of date")
    a = ap.parse_args()
    try:
        rows = parse_def(a.defs)
        with open(a.readme, encoding="utf-8") as f:
            old = f.read()
        new = render(old, rows)
    except (OSError, DefError) as e:
        print("gen_options_doc: %s" % e, file=sys.stderr)
        return 2
    if old == new:
        print("%s: option table up to date (%d options)" % (a.readme, len(rows)))
        return 0
    if a.check:
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                   a.readme, a.readme + " (from options.def)"))
        print("\n%s is out of date with %s: run `make options-doc` (scripts/gen_options_doc.py)"
              % (a.readme, a.defs), file=sys.stderr)
        return 1
    with open(a.readme, "w", encoding="utf-8") as f:
        f.write(new)
    print("%s: option table rewritten (%d options)" % (a.readme, len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
