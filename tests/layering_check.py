#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own.

The folders are the layers (docs/DESIGN.md, "Components"): allocator -> history -> snapshot ->
replay -> viewer -> web -> cli, with record (the recorder `memsnap record` injects into CUDA
programs) beside replay over snapshot, api (the public C++ API's implementation) over snapshot,
and demo, torch_plugin, python and bench as users of the libraries. Each folder may include
itself and what ALLOWED lists for it; a project include is any `#include "folder/..."` whose
folder is one of the layers. The public API's headers (include/memsnap/) are below them all and
include only each other, so installing them installs nothing internal.
Usage: layering_check.py SOURCE_ROOT"""
import pathlib
import re
import sys

ALLOWED = {
    "allocator": set(),
    "history": {"allocator"},
    "snapshot": {"allocator", "history"},
    "record": {"allocator", "history", "snapshot"},
    "api": {"allocator", "history", "snapshot"},
    "replay": {"allocator", "snapshot"},
    "viewer": {"allocator", "snapshot", "replay"},
    "web": {"allocator", "snapshot", "replay", "viewer"},
    "cli": {"allocator", "snapshot", "replay", "viewer", "web", "record"},
    "demo": {"allocator", "history", "snapshot"},
    "torch_plugin": {"allocator", "history", "snapshot"},
    "python": {"allocator", "history", "snapshot", "replay", "viewer", "record"},
    "bench": {"allocator", "history", "snapshot", "replay"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.MULTILINE)
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    problems = []
    checked = 0
    for folder, allowed in ALLOWED.items():
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in {".h", ".cpp", ".cu"}:
                continue
            checked += 1
            for included in INCLUDE.findall(path.read_text(errors="replace")):
                if included in ALLOWED and included != folder and included not in allowed:
                    problems.append(f"{path.relative_to(root)} includes {included}/ "
                                    f"(a {folder}/ file may include {sorted(allowed) or 'no other layer'})")
    for path in sorted((root / "include").rglob("*")):
        if path.suffix != ".h":
            continue
        checked += 1
        for included in QUOTED.findall(path.read_text(errors="replace")):
            if not included.startswith("memsnap/"):
                problems.append(f"{path.relative_to(root)} includes \"{included}\" "
                                f"(a public header includes only the public API, \"memsnap/...\")")
    for problem in problems:
        print(problem)
    if checked == 0:
        print(f"no sources found under {root}")
        return 1
    print(f"{checked} files checked, {len(problems)} includes against the layering")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
