#!/usr/bin/env python3
"""`memsnap serve FILE...` with the files a user names one by one:

- a readable file beside a truncated one: the readable one is served and the other is listed
  with its reason (on stderr and in GET /api/snapshots' "not_opened"), not fatal;
- files of unrelated runs (no rank in them or their names) are snapshots, not a job: no Ranks
  view (GET /api/ranks is 404);
- files that name two ranks (rank0.pickle, rank1.pickle) are a job, and a file beside them
  that names none is not one of its ranks;
- nothing readable at all: exit status 1 with one error line;
- no file at all: an empty server, for uploads, that lists nothing and takes one.

usage: serve_given_files.py MEMSNAP DATA_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request


def serve(memsnap, files):
    """Starts memsnap serve on a free port; returns (process, base URL, stderr lines so far)."""
    process = subprocess.Popen([memsnap, "serve", "--port", "0", *files], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.search(r"http://\S+/", line)
    if not match:
        process.kill()
        raise AssertionError(f"no URL from memsnap serve: {line!r} {process.stderr.read()}")
    return process, match.group(0)


def get(url):
    """(status, JSON body); the API holds requests until the files given are read."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)
    except urllib.error.URLError as error:  # the server is gone
        return None, {"error": str(error.reason)}


def stop(process):
    process.terminate()
    try:
        _, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return stderr


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    memsnap, data = sys.argv[1], sys.argv[2]
    mlp = os.path.join(data, "pytorch-2.11", "mlp_train.pickle")
    streams = os.path.join(data, "pytorch-2.11", "two_streams.pickle")
    pools = os.path.join(data, "pytorch-2.11-pools", "pool_oom.pickle")
    problems = []
    folder = tempfile.mkdtemp(prefix="memsnap-serve-files-")
    try:
        truncated = os.path.join(folder, "truncated.pickle")
        with open(mlp, "rb") as source, open(truncated, "wb") as out:
            out.write(source.read(3000))

        process, url = serve(memsnap, [mlp, truncated])
        status, listed = get(url + "api/snapshots")
        ranks_status, _ = get(url + "api/ranks")
        stderr = stop(process)
        names = [s["name"] for s in listed.get("snapshots", [])]
        not_opened = listed.get("not_opened", [])
        if status != 200 or names != ["mlp_train.pickle"]:
            problems.append(f"good + truncated: expected mlp_train.pickle served, got {status} {names}")
        if len(not_opened) != 1 or not_opened[0]["file"] != truncated or "truncated" not in not_opened[0]["error"]:
            problems.append(f"good + truncated: the truncated file is not listed with its reason: {not_opened}")
        if f"not opened: {truncated}" not in stderr:
            problems.append(f"good + truncated: stderr does not name the file not opened: {stderr}")
        if ranks_status != 404:
            problems.append(f"good + truncated: /api/ranks answered {ranks_status}, expected 404 (no job)")

        process, url = serve(memsnap, [mlp, streams, pools])
        status, listed = get(url + "api/snapshots")
        ranks_status, _ = get(url + "api/ranks")
        stderr = stop(process)
        if status != 200 or len(listed.get("snapshots", [])) != 3:
            problems.append(f"unrelated files: expected 3 snapshots, got {status} {listed}")
        if ranks_status != 404 or "not the ranks of one job" not in stderr:
            problems.append(f"unrelated files made a job: /api/ranks {ranks_status}; stderr {stderr}")

        ranked = [os.path.join(folder, name) for name in ("rank0.pickle", "rank1.pickle")]
        shutil.copy(mlp, ranked[0])
        shutil.copy(streams, ranked[1])
        process, url = serve(memsnap, [*ranked, pools])
        ranks_status, job = get(url + "api/ranks")
        stop(process)
        rows = [(r["rank"], os.path.basename(r["file"])) for r in job.get("ranks", [])]
        if ranks_status != 200 or rows != [(0, "rank0.pickle"), (1, "rank1.pickle")]:
            problems.append(f"two named ranks: expected a job of ranks 0 and 1, got {ranks_status} {rows}")

        process, url = serve(memsnap, [])
        status, listed = get(url + "api/snapshots")
        with open(mlp, "rb") as source:
            upload = urllib.request.Request(url + "api/snapshots?name=mlp_train.pickle", data=source.read(), method="POST",
                                            headers={"Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(upload, timeout=60) as response:
                uploaded = response.status
        except (urllib.error.HTTPError, urllib.error.URLError) as error:
            uploaded = getattr(error, "code", str(error))
        after, listed_after = get(url + "api/snapshots")
        alive = process.poll() is None
        stop(process)
        if status != 200 or listed.get("snapshots") != [] or not alive:
            problems.append(f"no file: expected an empty server that stays up, got {status} {listed}, running {alive}")
        if uploaded not in (200, 201) or after != 200 or len(listed_after.get("snapshots", [])) != 1:
            problems.append(f"no file: an upload was not taken: {uploaded}, then {after} {listed_after}")

        run = subprocess.run([memsnap, "serve", "--port", "0", truncated], capture_output=True, text=True, timeout=60)
        errors = run.stderr.splitlines()
        if run.returncode != 1 or not errors or not errors[-1].startswith("memsnap: error: ") or "truncated" not in errors[-1]:
            problems.append(f"nothing readable: expected exit 1 with the reason, got {run.returncode}: {errors}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for problem in problems:
        print("FAIL", problem)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
