#!/usr/bin/env python3
"""Real snapshots whose truth the program plants, for memsnap's verdicts (growth, ranks,
explain-oom). Run THERE (the GPU machine) with the memsnap package installed:

    python3 bench/gpu/verdict_recordings.py OUT_DIR CASE... | all

Cases: ddp_leak (4 ranks on one GPU under torchrun, gloo; run alone it launches torchrun
itself), side_stream_pending, request_too_large, live_exhaustion_capped,
fragmentation_capped, no_leak_steady, leak_no_annotations. Each case runs in a fresh process
and writes OUT_DIR/CASE/: its snapshots (.msgpack), truth.json (what the program did and what
is true, with the figures measured while it ran) and log lines on stdout. The lines a verdict
should name are found in this file by their "# site:" markers, not hard-coded.
"""
import json
import os
import struct
import subprocess
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
STEPS = 40
HERE = os.path.abspath(__file__)
PROGRAM = "bench/gpu/verdict_recordings.py"
CASES = ["ddp_leak", "side_stream_pending", "request_too_large", "live_exhaustion_capped",
         "fragmentation_capped", "no_leak_steady", "leak_no_annotations"]
DDP_RANKS = 4
LEAK_RANK = 2


def site_line(marker):
    """verdict_recordings.py:<line> of the line carrying '# site: MARKER'."""
    with open(HERE) as source:
        for number, text in enumerate(source, 1):
            if text.rstrip().endswith("# site: " + marker):
                return f"{os.path.basename(HERE)}:{number}"
    raise LookupError(marker)


def log(*parts):
    print(*parts, flush=True)


# --- a small msgpack reader, to check what the written snapshots hold (no msgpack package there)


def _unpack(data, pos):
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0x80 <= b <= 0x8F:
        return _unpack_map(data, pos, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _unpack_array(data, pos, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return data[pos:pos + n].decode("utf-8", "replace"), pos + n
    if b == 0xC0:
        return None, pos
    if b == 0xC2:
        return False, pos
    if b == 0xC3:
        return True, pos
    fixed = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
             0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if b in fixed:
        fmt = fixed[b]
        size = struct.calcsize(fmt)
        return struct.unpack_from(fmt, data, pos)[0], pos + size
    lengths = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I",
               0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if b in lengths:
        fmt = lengths[b]
        n = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        if b in (0xC4, 0xC5, 0xC6):
            return bytes(data[pos:pos + n]), pos + n
        if b in (0xD9, 0xDA, 0xDB):
            return data[pos:pos + n].decode("utf-8", "replace"), pos + n
        if b in (0xDC, 0xDD):
            return _unpack_array(data, pos, n)
        return _unpack_map(data, pos, n)
    ext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
    if b in ext:
        return None, pos + 1 + ext[b]
    if b in (0xC7, 0xC8, 0xC9):
        fmt = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[b]
        n = struct.unpack_from(fmt, data, pos)[0]
        return None, pos + struct.calcsize(fmt) + 1 + n
    raise ValueError(f"msgpack byte 0x{b:02x} at {pos - 1}")


def _unpack_array(data, pos, n):
    items = []
    for _ in range(n):
        item, pos = _unpack(data, pos)
        items.append(item)
    return items, pos


def _unpack_map(data, pos, n):
    result = {}
    for _ in range(n):
        key, pos = _unpack(data, pos)
        value, pos = _unpack(data, pos)
        result[key] = value
    return result, pos


def snapshot_summary(path):
    """What a written snapshot holds: annotation names (START events, counted by name, numbers
    folded to N), trace length, block states, and the rank memsnap filled in."""
    with open(path, "rb") as f:
        data = f.read()
    doc, _ = _unpack(data, 0)
    names = {}
    for annotation in doc.get("external_annotations") or []:
        if annotation[1] != "START":
            continue
        name = "".join("N" if c.isdigit() else c for c in annotation[2])
        while "NN" in name:
            name = name.replace("NN", "N")
        names[name] = names.get(name, 0) + 1
    states = {}
    for segment in doc.get("segments") or []:
        for block in segment[11]:
            key = ["active_allocated", "active_pending_free", "inactive"][block[3]]
            states[key] = states.get(key, 0) + block[1]
    traces = doc.get("device_traces") or []
    process = doc.get("process") or {}
    return {"bytes": len(data), "annotations_started": names,
            "trace_entries": sum(len(t) for t in traces), "block_bytes_by_state": states,
            "rank": process.get("rank"), "world_size": process.get("world_size")}


# --- common ------------------------------------------------------------------------------------


def start(max_entries=100_000, settings=None):
    """memsnap installed and recording (level all, Python stacks) before any CUDA allocation."""
    import memsnap.torch as memsnap_torch
    import torch

    memsnap_torch.install(settings)
    memsnap_torch.record_history("all", stacks="python", max_entries=max_entries)
    return memsnap_torch, torch


def recorded(torch):
    return f"2026-11-28, H200, torch {torch.__version__}"


def stats_now(torch):
    s = torch.cuda.memory_stats()
    return {"allocated": s["allocated_bytes.all.current"], "active": s["active_bytes.all.current"],
            "reserved": s["reserved_bytes.all.current"],
            "pending_free": s["active_bytes.all.current"] - s["allocated_bytes.all.current"]}


def largest_free_block(torch):
    largest = 0
    for segment in torch.cuda.memory_snapshot():
        for block in segment["blocks"]:
            if block["state"] == "inactive":
                largest = max(largest, block["size"])
    return largest


def write_truth(out, case, files, truth, measured, program_case=None):
    import torch

    document = {"case": case, "files": files,
                "program": f"{PROGRAM} {program_case or case}", "recorded": recorded(torch),
                "truth": truth, "measured": measured}
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(document, f, indent=2)
        f.write("\n")
    log(f"{case}: truth.json written")


def cap_to(torch, cap_bytes):
    """A memory cap of cap_bytes through set_per_process_memory_fraction; the cap as the
    allocator applies it (fraction times cudaMemGetInfo's total, truncated)."""
    total = torch.cuda.mem_get_info()[1]
    fraction = cap_bytes / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    return fraction, int(fraction * total), total


# --- 1. ddp_leak -------------------------------------------------------------------------------


def make_mlp(torch, width_in, width_hidden, device):
    return torch.nn.Sequential(
        torch.nn.Linear(width_in, width_hidden), torch.nn.GELU(),
        torch.nn.Linear(width_hidden, width_hidden), torch.nn.GELU(),
        torch.nn.Linear(width_hidden, width_in)).to(device)


def leak_two_mib(kept, device):
    import torch

    tensor = torch.empty(2 * MIB, dtype=torch.uint8, device=device)  # site: leak_two_mib
    kept.append(tensor)


def ddp_leak(out):
    memsnap_torch, torch = start()
    import torch.distributed as dist

    torch.cuda.set_device(0)  # the four ranks share the one GPU
    device = torch.device("cuda", 0)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = make_mlp(torch, 256, 1024, device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    kept = []
    per_step = []
    for n in range(STEPS):
        with memsnap_torch.annotate(f"step {n}"):
            x = torch.randn(64, 256, device=device)
            loss = (ddp(x) - x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if rank == LEAK_RANK:
                leak_two_mib(kept, device)
            del x, loss
        per_step.append(torch.cuda.memory_allocated())
    torch.cuda.synchronize()
    dist.barrier()
    path = os.path.join(out, f"rank{rank}.msgpack")
    memsnap_torch.dump_snapshot(path)
    mine = {"rank": rank, "allocated_after_each_step": per_step,
            "allocated_growth_step1_to_last": per_step[-1] - per_step[0],
            "leaked_tensors": len(kept), "leaked_bytes": sum(t.numel() for t in kept),
            "snapshot": snapshot_summary(path)}
    log(f"ddp_leak rank {rank}: allocated {per_step[0]} -> {per_step[-1]} B; {mine['snapshot']}")
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        files = [f"rank{r}.msgpack" for r in range(world)]
        growth = {}
        for r in range(world):
            if r == LEAK_RANK:
                growth[f"rank{r}.msgpack"] = {"verdict": "growing", "site_line": site_line("leak_two_mib"),
                                              "bytes_per_step": 2 * MIB, "steps": STEPS,
                                              "step_annotation": "step "}
            else:
                growth[f"rank{r}.msgpack"] = {"verdict": "nothing_grows", "site_line": None,
                                              "bytes_per_step": None, "steps": STEPS,
                                              "step_annotation": "step "}
        truth = {"growth": growth,
                 "ranks": {"outlier_ranks": [LEAK_RANK],
                           "typical_ranks": [r for r in range(world) if r != LEAK_RANK],
                           "why": f"rank {LEAK_RANK} keeps a new 2 MiB tensor every training step "
                                  f"(leak_two_mib, {site_line('leak_two_mib')}): {STEPS} x 2 MiB = "
                                  f"{STEPS * 2} MiB more live memory than the other ranks at the end; "
                                  "the other ranks run the same steps and leak nothing"}}
        measured = {"world_size": world, "backend": "gloo", "gpus": torch.cuda.device_count(),
                    "ranks": {str(m["rank"]): m for m in everyone}}
        write_truth(out, "ddp_leak", files, truth, measured)
    dist.barrier()
    dist.destroy_process_group()


# --- 2. side_stream_pending --------------------------------------------------------------------


def side_stream_pending(out):
    memsnap_torch, torch = start()
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    n = 16384  # 4 products of 16384^2 bf16 a step: ~50 ms of the side stream's time a step
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    elements = 1280 * 1024 // 4  # 1.25 MiB of float32
    with torch.cuda.stream(side):  # warm-up: cuBLAS's handle and workspace for the side stream
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    figures = []
    t0 = time.perf_counter()
    for step in range(STEPS):
        with memsnap_torch.annotate(f"step {step}"):
            t = torch.randn(elements, device="cuda")  # site: side_stream_tensor
            side.wait_stream(main)
            with torch.cuda.stream(side):
                for _ in range(4):  # keeps the side stream busy: it falls further behind each step
                    torch.matmul(a, b, out=c)
                t.mul_(2.0)  # the side stream uses the tensor
            t.record_stream(side)
            del t
        figures.append(stats_now(torch))
    host_s = time.perf_counter() - t0
    path = os.path.join(out, "side_stream_pending.msgpack")
    memsnap_torch.dump_snapshot(path)  # no synchronize first: the frees are still pending
    after_loop = stats_now(torch)
    summary = snapshot_summary(path)
    torch.cuda.synchronize()
    probe = torch.empty(16, device="cuda")  # an allocation processes the side stream's events
    after_sync = stats_now(torch)
    del probe
    pending = [f["pending_free"] for f in figures]
    steps_up = sum(1 for x, y in zip(pending, pending[1:]) if y > x)
    deltas = sorted({y - x for x, y in zip(pending, pending[1:])})
    log(f"side_stream_pending: pending {pending[0]} -> {pending[-1]} B over {STEPS} steps "
        f"({steps_up} of {STEPS - 1} steps up); reserved {figures[0]['reserved']} -> "
        f"{figures[-1]['reserved']}; host {host_s:.3f} s; after sync {after_sync}; {summary}")
    per_step = max(deltas, key=[y - x for x, y in zip(pending, pending[1:])].count)  # a typical step
    truth = {"growth": {"side_stream_pending.msgpack": {
        "verdict": "growing", "site_line": site_line("side_stream_tensor"),
        "bytes_per_step": per_step, "steps": STEPS, "step_annotation": "step "}}}
    measured = {
        "tensor_bytes": elements * 4, "side_stream_matmuls_per_step": 4, "matmul_size": n,
        "host_seconds_for_40_steps": round(host_s, 4),
        "pending_free_bytes_after_each_step": pending,
        "allocated_bytes_after_each_step": [f["allocated"] for f in figures],
        "active_bytes_after_each_step": [f["active"] for f in figures],
        "reserved_bytes_after_each_step": [f["reserved"] for f in figures],
        "steps_where_pending_rose": steps_up, "pending_step_deltas_seen": deltas,
        "at_snapshot": after_loop, "after_synchronize_and_one_allocation": after_sync,
        "snapshot": summary,
        "note": "pending_free = active_bytes.all.current - allocated_bytes.all.current "
                "(freed with record_stream, waiting for the side stream's event)"}
    write_truth(out, "side_stream_pending", ["side_stream_pending.msgpack"], truth, measured)


# --- 3-5. out-of-memory cases ------------------------------------------------------------------


def oom_figures(torch, error):
    figures = stats_now(torch)
    figures["largest_free_cached_block"] = largest_free_block(torch)
    figures["mem_get_info"] = list(torch.cuda.mem_get_info())
    figures["error_message"] = str(error)
    return figures


def request_too_large(out):
    memsnap_torch, torch = start()
    path = os.path.join(out, "request_too_large.msgpack")
    memsnap_torch.dump_snapshot_on_oom(path)
    keep = [torch.randn(16 * MIB // 4, device="cuda"), torch.ones(1000, device="cuda"),
            torch.zeros(256 * 1024, device="cuda")]
    requested = 2 ** 40
    error = None
    try:
        huge = torch.empty(requested, dtype=torch.uint8, device="cuda")  # site: request_too_large
        del huge
    except torch.OutOfMemoryError as caught:
        error = caught
    assert error is not None, "1 TiB was granted"
    memsnap_torch.dump_snapshot_on_oom(None)
    figures = oom_figures(torch, error)
    total = torch.cuda.get_device_properties(0).total_memory
    log(f"request_too_large: {figures}")
    truth = {"oom": {"request_too_large.msgpack": {
        "cause": "request_too_large", "requested_bytes": requested, "cap_bytes": None,
        "cap_fraction": None, "avoided_by": None}}}
    measured = dict(figures, device_total_bytes=total, live_tensors=len(keep),
                    failing_line=site_line("request_too_large"),
                    snapshot=snapshot_summary(path))
    write_truth(out, "request_too_large", ["request_too_large.msgpack"], truth, measured)


def live_exhaustion_capped(out):
    memsnap_torch, torch = start()
    path = os.path.join(out, "live_exhaustion_capped.msgpack")
    fraction, cap, total = cap_to(torch, 8 * GIB)
    memsnap_torch.dump_snapshot_on_oom(path)
    live = [torch.empty(2 * GIB, dtype=torch.uint8, device="cuda") for _ in range(3)]  # 6 GiB live
    requested = 3 * GIB
    error = None
    try:
        more = torch.empty(requested, dtype=torch.uint8, device="cuda")  # site: live_exhaustion
        del more
    except torch.OutOfMemoryError as caught:
        error = caught
    assert error is not None, "3 GiB more was granted under an 8 GiB cap"
    memsnap_torch.dump_snapshot_on_oom(None)
    figures = oom_figures(torch, error)
    log(f"live_exhaustion_capped: cap {cap} B (fraction {fraction!r} of {total}); {figures}")
    truth = {"oom": {"live_exhaustion_capped.msgpack": {
        "cause": "exhaustion", "requested_bytes": requested, "cap_bytes": cap, "cap_fraction": fraction,
        "avoided_by": None}}}
    measured = dict(figures, cap_bytes=cap, cap_fraction=fraction, device_total_bytes=total,
                    live_bytes=sum(t.numel() for t in live),
                    live_plus_request=sum(t.numel() for t in live) + requested,
                    failing_line=site_line("live_exhaustion"), snapshot=snapshot_summary(path),
                    remedy="less live memory (or a larger cap): 6 GiB live + 3 GiB asked > 8 GiB cap")
    write_truth(out, "live_exhaustion_capped", ["live_exhaustion_capped.msgpack"], truth, measured)


def fragment(torch):
    """8 GiB cap; 3 x 2.5 GiB of activations freed (3 cached segments), then 75 tensors of
    100 MiB carved from those segments, every other one freed: ~3.7 GiB live, ~3.7 GiB cached
    in 100 MiB holes between live blocks (no segment wholly free, so none can be released)."""
    fraction, cap, total = cap_to(torch, 8 * GIB)
    warmup = [torch.empty(2560 * MIB, dtype=torch.uint8, device="cuda") for _ in range(3)]
    del warmup
    blocks = [torch.empty(100 * MIB, dtype=torch.uint8, device="cuda") for _ in range(75)]
    live = blocks[1::2]
    del blocks
    return fraction, cap, total, live


def fragmentation_capped(out):
    memsnap_torch, torch = start()
    path = os.path.join(out, "fragmentation_capped.msgpack")
    fraction, cap, total, live = fragment(torch)
    before = stats_now(torch)
    before["largest_free_cached_block"] = largest_free_block(torch)
    memsnap_torch.dump_snapshot_on_oom(path)
    requested = GIB
    error = None
    try:
        more = torch.empty(requested, dtype=torch.uint8, device="cuda")  # site: fragmentation
        del more
    except torch.OutOfMemoryError as caught:
        error = caught
    assert error is not None, "1 GiB was granted: no fragmentation OOM"
    memsnap_torch.dump_snapshot_on_oom(None)
    figures = oom_figures(torch, error)
    log(f"fragmentation_capped: cap {cap} B; before the request {before}; at the error {figures}")
    # The same program in a fresh process with expandable segments.
    env = dict(os.environ)
    result = subprocess.run([sys.executable, HERE, out, "fragmentation_capped_expandable"],
                            env=env, capture_output=True, text=True, timeout=300)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    expandable_path = os.path.join(out, "expandable.json")
    expandable = json.load(open(expandable_path)) if os.path.exists(expandable_path) else {
        "returncode": result.returncode}
    if os.path.exists(expandable_path):
        os.remove(expandable_path)
    avoided = expandable.get("oom") is False
    truth = {"oom": {"fragmentation_capped.msgpack": {
        "cause": "fragmentation", "requested_bytes": requested, "cap_bytes": cap, "cap_fraction": fraction,
        "avoided_by": "expandable_segments:True" if avoided else None}}}
    live_bytes = sum(t.numel() for t in live)
    measured = dict(figures, cap_bytes=cap, cap_fraction=fraction, device_total_bytes=total,
                    live_tensors=len(live), live_bytes=live_bytes, live_plus_request=live_bytes + requested,
                    before_request=before, failing_line=site_line("fragmentation"),
                    snapshot=snapshot_summary(path), expandable_segments_fresh_process=expandable)
    write_truth(out, "fragmentation_capped", ["fragmentation_capped.msgpack"], truth, measured)


def fragmentation_capped_expandable(out):
    memsnap_torch, torch = start(settings="expandable_segments:True")
    fraction, cap, total, live = fragment(torch)
    before = stats_now(torch)
    result = {"settings": "expandable_segments:True", "cap_bytes": cap, "before_request": before}
    try:
        more = torch.empty(GIB, dtype=torch.uint8, device="cuda")
        result["oom"] = False
        result["after_request"] = stats_now(torch)
        del more
    except torch.OutOfMemoryError as error:
        result["oom"] = True
        result["error_message"] = str(error)
    log(f"fragmentation_capped (expandable segments, fresh process): {result}")
    with open(os.path.join(out, "expandable.json"), "w") as f:
        json.dump(result, f)


# --- 6-7. steady training, and a leak without annotations --------------------------------------


def no_leak_steady(out):
    memsnap_torch, torch = start()
    torch.manual_seed(0)
    model = make_mlp(torch, 1024, 4096, "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_step = []
    for n in range(STEPS):
        with memsnap_torch.annotate(f"step {n}"):
            x = torch.randn(128, 1024, device="cuda")
            loss = (model(x) - x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del x, loss
        per_step.append(stats_now(torch))
    path = os.path.join(out, "no_leak_steady.msgpack")
    memsnap_torch.dump_snapshot(path)
    summary = snapshot_summary(path)
    allocated = [f["allocated"] for f in per_step]
    log(f"no_leak_steady: allocated after each step {sorted(set(allocated))}; {summary}")
    truth = {"growth": {"no_leak_steady.msgpack": {
        "verdict": "nothing_grows", "site_line": None, "bytes_per_step": None, "steps": STEPS,
        "step_annotation": "step "}}}
    measured = {"allocated_bytes_after_each_step": allocated,
                "reserved_bytes_after_each_step": [f["reserved"] for f in per_step],
                "allocated_growth_step1_to_last": allocated[-1] - allocated[0], "snapshot": summary}
    write_truth(out, "no_leak_steady", ["no_leak_steady.msgpack"], truth, measured)


def leak_one_mib(kept):
    import torch

    tensor = torch.empty(MIB, dtype=torch.uint8, device="cuda")  # site: leak_one_mib
    kept.append(tensor)


def leak_no_annotations(out):
    memsnap_torch, torch = start()
    torch.manual_seed(0)
    model = make_mlp(torch, 512, 2048, "cuda")
    kept = []
    per_step = []
    for n in range(STEPS):  # no annotation, and no optimizer (whose step is a record_function range)
        x = torch.randn(64, 512, device="cuda")
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-1e-3)
                p.grad = None
        leak_one_mib(kept)
        del x, loss
        per_step.append(torch.cuda.memory_allocated())
    path = os.path.join(out, "leak_no_annotations.msgpack")
    memsnap_torch.dump_snapshot(path)
    summary = snapshot_summary(path)
    log(f"leak_no_annotations: allocated {per_step[0]} -> {per_step[-1]}; {summary}")
    truth = {"growth": {"leak_no_annotations.msgpack": {
        "verdict": "growing", "site_line": site_line("leak_one_mib"), "bytes_per_step": MIB,
        "steps": STEPS, "step_annotation": None}}}
    measured = {"allocated_bytes_after_each_step": per_step,
                "allocated_step_deltas_seen": sorted({y - x for x, y in zip(per_step, per_step[1:])}),
                "leaked_bytes": len(kept) * MIB, "snapshot": summary}
    write_truth(out, "leak_no_annotations", ["leak_no_annotations.msgpack"], truth, measured)


# --- driver ------------------------------------------------------------------------------------


def run_case_process(out, case):
    """One case in a fresh process; ddp_leak under torchrun, its ranks sharing the one GPU."""
    if case == "ddp_leak":
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(DDP_RANKS), HERE, out, case]
    else:
        command = [sys.executable, HERE, out, case]
    started = time.perf_counter()
    status = subprocess.run(command).returncode
    log(f"== {case}: exit {status} in {time.perf_counter() - started:.1f} s")
    return status


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    cases = CASES if sys.argv[2:] == ["all"] else sys.argv[2:]
    internal = {"fragmentation_capped_expandable"}
    for case in cases:
        if case not in CASES and case not in internal:
            sys.exit(f"unknown case {case!r}; cases: {', '.join(CASES)}, all")
    # One case named: run it here (for ddp_leak, only as a torchrun rank); several: each in a
    # fresh process of its own (memory caps and allocator settings are per process).
    if len(cases) == 1 and (cases[0] != "ddp_leak" or "LOCAL_RANK" in os.environ):
        case = cases[0]
        directory = out if case in internal else os.path.join(out, case)
        os.makedirs(directory, exist_ok=True)
        globals()[case](directory)
        return
    failed = [case for case in cases if run_case_process(out, case) != 0]
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
