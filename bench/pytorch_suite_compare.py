#!/usr/bin/env python3
"""PyTorch's CUDA memory tests, on PyTorch's allocator and on memsnap's, side by side.

    pytorch_suite_compare.py BASELINE.xml MEMSNAP.xml [--markdown OUT.md]

Reads the two JUnit files that bench/gpu/pytorch_suite.sh writes and prints the counts, then
every test that passes on PyTorch's allocator and not on memsnap's (with the first line of its
error), then the tests whose outcome differs the other way. With --markdown, also writes the
per-class table python/README.md shows. Exits 1 when a test passes on PyTorch's allocator only.
"""
from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET


def outcomes(path: str) -> dict[str, tuple[str, str]]:
    """test name ("Class::test") -> (passed | failed | skipped, first line of the message)."""
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + "::" + case.get("name", "")
        state, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
                text = child.get("message") or child.text or ""
                message = text.strip().splitlines()[0][:240] if text.strip() else ""
            elif child.tag == "skipped" and state == "passed":
                state = "skipped"
                message = (child.get("message") or "").strip().splitlines()[0][:240] if child.get("message") else ""
        result[name] = (state, message)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("memsnap")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    base, ours = outcomes(args.baseline), outcomes(args.memsnap)

    def count(results, state):
        return sum(1 for s, _ in results.values() if s == state)

    for label, results in (("PyTorch's allocator", base), ("memsnap", ours)):
        print(f"{label}: {count(results, 'passed')} passed, {count(results, 'failed')} failed, "
              f"{count(results, 'skipped')} skipped")
    passing = [n for n, (s, _) in base.items() if s == "passed"]
    regressions = [n for n in passing if ours.get(n, ("missing", ""))[0] != "passed"]
    print(f"{len(passing)} tests pass on PyTorch's allocator; {len(passing) - len(regressions)} of them pass "
          f"with memsnap; {len(regressions)} do not")
    for name in regressions:
        state, message = ours.get(name, ("missing", ""))
        print(f"  {state:8} {name}  {message}")
    others = [n for n in sorted(set(base) | set(ours))
              if n not in regressions and base.get(n, ("missing",))[0] != ours.get(n, ("missing",))[0]]
    if others:
        print("other differences (PyTorch's allocator -> memsnap):")
        for name in others:
            print(f"  {base.get(name, ('missing',))[0]} -> {ours.get(name, ('missing',))[0]}  {name}")

    if args.markdown:
        by_class = collections.OrderedDict()
        for name in sorted(base):
            cls = name.split("::")[0]
            row = by_class.setdefault(cls, collections.Counter())
            b, o = base[name][0], ours.get(name, ("missing",))[0]
            row["tests"] += 1
            row[f"base_{b}"] += 1
            if b == "passed":
                row["ours_passed" if o == "passed" else "regressed"] += 1
        lines = ["| class | tests | pass on PyTorch's allocator | of those, pass with memsnap | fail on PyTorch's too | skipped |",
                 "|---|---|---|---|---|---|"]
        total = collections.Counter()
        for cls, row in by_class.items():
            total.update(row)
            lines.append(f"| `{cls}` | {row['tests']} | {row['base_passed']} | {row['ours_passed']} | "
                         f"{row['base_failed']} | {row['base_skipped']} |")
        lines.append(f"| all | {total['tests']} | {total['base_passed']} | {total['ours_passed']} | "
                     f"{total['base_failed']} | {total['base_skipped']} |")
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
