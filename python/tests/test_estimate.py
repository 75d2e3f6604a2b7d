"""memsnap.estimate: a step captured on fake CUDA tensors asks the caching allocator for what the
real step asks for."""
import json
import os
import subprocess
import sys

import pytest

from conftest import memsnap_cli, run_python

# A small GPT-2 (its embedding is tied to its output layer) trained with AdamW, and a loss that
# is logged with .item(). MODE=fake captures three steps; MODE=real runs them on PyTorch's own
# allocator in a fresh process (so the cuBLAS workspace is made by the first step, as the capture
# models it) and reports each step's peak.
STEP = """
import json, os, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=16384, n_positions=256)
def setup():
    model = GPT2LMHeadModel(config).to("cuda")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)
def step(state):
    model, optimizer = state
    ids = torch.randint(0, config.vocab_size, (8, 256), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    logged = loss.item()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if os.environ["MODE"] == "fake":
    import memsnap.estimate
    captured = memsnap.estimate.capture(step, setup=setup, steps=3)
    captured.dump(os.environ["OUT"])
    trace = captured.snapshot["device_traces"][0]
    names = {f["name"] for e in trace if e["action"] == "alloc" for f in e["frames"]}
    print(json.dumps({"peak": captured.peak_live_bytes, "steps": captured.step_peak_live_bytes,
                      "unseen": captured.unseen,
                      "allocs": sum(e["action"] == "alloc" for e in trace),
                      "frees": sum(e["action"] == "free_completed" for e in trace),
                      "names_forward": "forward" in names, "names_step": "step" in names,
                      "workspaces": sum(e["action"] == "alloc" and e["frames"][0]["name"].startswith("cuBLAS workspace")
                                        for e in trace),
                      "foreach": any(f["name"] == "_multi_tensor_adamw" or f["name"] == "_multi_tensor_adam"
                                     for e in trace if e["action"] == "alloc" for f in e["frames"]),
                      "annotations": [a["name"] for a in captured.snapshot["external_annotations"]],
                      "backward": [[e["frames"][1]["name"], e.get("forward_frames", [])]
                                   for e in trace if e["action"] == "alloc" and len(e["frames"]) > 1
                                   and e["frames"][1]["name"].endswith("Backward0")],
                      "real_memory": torch.cuda.memory_allocated()}))
else:
    state = setup()
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        step(state)
        peaks.append(torch.cuda.max_memory_allocated())
    print(json.dumps({"steps": peaks, "peak": max(peaks)}))
"""


@pytest.fixture(scope="module")
def captured_and_real(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("estimate") / "step.pickle")
    fake = run_python(STEP, env={"MODE": "fake", "OUT": out})
    real = run_python(STEP, env={"MODE": "real"})
    return fake, real, out


def test_the_captured_peak_is_the_real_peak_within_two_percent(captured_and_real):
    fake, real, _ = captured_and_real
    for index, (predicted, measured) in enumerate(zip(fake["steps"], real["steps"])):
        assert abs(predicted - measured) <= 0.02 * measured, (index, fake["steps"], real["steps"])


def test_the_capture_allocates_no_tensor_memory_and_frees_what_dies(captured_and_real):
    fake, _, _ = captured_and_real
    assert fake["real_memory"] == 0
    assert fake["allocs"] > 100 and fake["frees"] < fake["allocs"]  # parameters and state stay
    assert fake["names_forward"] and fake["names_step"]  # the model's forward, the optimizer's step
    assert fake["annotations"] == ["estimate step 1", "estimate step 1", "estimate step 2",
                                   "estimate step 2", "estimate step 3", "estimate step 3"]
    assert fake["workspaces"] == 2  # one stream, two threads (forward, autograd's): one each
    assert not any("cuBLAS workspace" in line for line in fake["unseen"])
    assert fake["foreach"]  # AdamW's foreach path, as on a real CUDA run


def test_backward_storages_are_named_by_their_node_and_forward_line(captured_and_real):
    fake, _, _ = captured_and_real
    backward = fake["backward"]
    assert len(backward) > 20, backward  # each layer's gradients, three steps
    nodes = {node for node, _ in backward}
    assert {"AddmmBackward0", "NativeLayerNormBackward0"} <= nodes, nodes
    # The forward call that made the node, as PyTorch's anomaly mode records it (traceback lines,
    # outermost first): this script's step(), then GPT-2's modeling code; never the capture's
    # own frames or the fake tensors' dispatch machinery.
    for node, forward in backward:
        assert forward, node
        assert any('File "<string>"' in line and "in step" in line for line in forward), forward
        assert not any("/torch/_subclasses/" in line or "/memsnap/" in line for line in forward), forward
    assert sum(any("modeling_gpt2.py" in line for line in forward) for _, forward in backward) > len(backward) // 2


def test_memsnap_replays_the_capture_to_the_same_peak(captured_and_real):
    fake, _, path = captured_and_real
    cli = memsnap_cli()
    done = subprocess.run([cli, "replay", path, "--capacity-gib", "80", "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    device = json.loads(done.stdout)["devices"][0]
    # The trace holds the bytes each storage asks for; the capture's own peak counts them rounded
    # to 512 as the allocator rounds them, and the allocator may hand out a larger block whole.
    assert device["peak_requested_bytes"] <= fake["peak"] <= device["peak_allocated_bytes"], device
    assert device["num_ooms"] == 0 and device["failed_allocs"] == 0, device


def test_without_a_visible_device_it_says_why():
    result = run_python("""
        import json
        import memsnap.estimate
        try:
            memsnap.estimate.capture(lambda: None)
        except RuntimeError as error:
            print(json.dumps({"error": str(error)}))
    """, env={"CUDA_VISIBLE_DEVICES": ""})
    assert "needs a CUDA device to be visible" in result["error"]


@pytest.mark.parametrize("arguments, error", [
    ({"step": None}, TypeError), ({"step": print, "setup": 3}, TypeError),
    ({"step": print, "steps": 0}, ValueError), ({"step": print, "steps": True}, ValueError),
])
def test_bad_arguments_are_refused(arguments, error):
    import memsnap.estimate
    step = arguments.pop("step")
    with pytest.raises(error):
        memsnap.estimate.capture(step, **arguments)


# A model whose memory grows with the batch: setup(batch_size) builds it, step trains it.
SCRIPT = """
import torch
def setup(batch_size=16):
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).to("cuda")
    return model, torch.optim.AdamW(model.parameters()), batch_size
def step(state):
    model, optimizer, batch_size = state
    x = torch.randn(batch_size, 1024, device="cuda")
    loss = model(x).square().mean()   # the script's line 9
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
if __name__ == "__main__":
    raise SystemExit("the estimate must not run the script's main block")
"""


@pytest.fixture()
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_estimate_says_where_a_step_runs_out_and_what_it_would_need(script):
    result = run_python(f"""
        import json, runpy, memsnap.estimate
        names = runpy.run_path({str(script)!r}, run_name="train")
        roomy = memsnap.estimate.estimate(names["step"], setup=names["setup"], device=1 << 30)
        tight = memsnap.estimate.estimate(names["step"], setup=names["setup"], device=40 << 20)
        print(json.dumps({{"roomy": roomy.details, "tight": tight.details, "report": str(tight)}}))
    """)
    roomy, tight = result["roomy"], result["tight"]
    assert roomy["fits"] and [s["name"] for s in roomy["steps"]] == [
        "setup", "estimate step 1", "estimate step 2", "estimate step 3"]
    # 4 x 4 MiB of weights, AdamW's two states and the gradients: 64 MiB live in each step.
    assert roomy["peak_allocated_bytes"] > 64 << 20
    assert roomy["tune"] is not None and roomy["tune"]["verdict"] in ("keep", "change")
    assert not tight["fits"]
    failure = tight["failure"]
    # 16 MiB of weights, then the first product's cuBLAS workspace (32 MiB) in the forward pass.
    assert failure["step"] == "estimate step 1", failure
    assert failure["frames"][0] == "cuBLAS workspace of aten::addmm", failure
    assert failure["site"].startswith("forward (") and any("train.py" in f for f in failure["frames"]), failure
    assert failure["unlimited_peak_requested_bytes"] > 40 << 20
    assert "Does not fit" in result["report"] and "train.py" in result["report"]
    assert "Not in the estimate" in result["report"]


def test_the_largest_batch_that_fits_is_the_one_that_runs(script):
    """A memory cap between the predicted peaks of two batch sizes: PyTorch's own allocator, under
    that cap (set_per_process_memory_fraction), runs the one predicted to fit and runs out of
    memory on the next."""
    sizes = [1024 * k for k in range(1, 9)]
    predicted = run_python(f"""
        import json, runpy, memsnap.estimate
        names = runpy.run_path({str(script)!r}, run_name="train")
        peaks = {{b: memsnap.estimate.estimate(names["step"], setup=lambda b=b: names["setup"](b), device=1 << 40,
                                               tune=False).peak_reserved_bytes for b in {sizes}}}
        cap = (peaks[5120] + peaks[6144]) // 2
        batches = memsnap.estimate.estimate(names["step"], setup=names["setup"], device=cap,
                                            batch_sizes={sizes}, tune=False)
        print(json.dumps({{"peaks": peaks, "cap": cap, "largest": batches.largest_fitting, "table": str(batches)}}))
    """)
    assert predicted["largest"] == 5120, predicted
    assert "Largest batch size that fits" in predicted["table"]
    real = {}
    for batch in (5120, 6144):
        real[batch] = run_python(f"""
            import json, runpy, torch
            names = runpy.run_path({str(script)!r}, run_name="train")
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction({predicted["cap"]} / total)
            state = names["setup"]({batch})
            try:
                for _ in range(3):
                    names["step"](state)
                print(json.dumps({{"ran": True, "reserved": torch.cuda.max_memory_reserved()}}))
            except torch.OutOfMemoryError:
                print(json.dumps({{"ran": False}}))
        """)
    assert real[5120]["ran"] and not real[6144]["ran"], (real, predicted["cap"])
    assert real[5120]["reserved"] == predicted["peaks"]["5120"], (real, predicted["peaks"])


def test_memsnap_estimate_runs_a_script(script, tmp_path):
    cli = memsnap_cli()
    saved = tmp_path / "capture.pickle"
    done = subprocess.run([cli, "estimate", str(script), "--capacity-gib", "1", "--json", "--steps", "2",
                           "--save", str(saved)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, MEMSNAP_PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr
    details = json.loads(done.stdout)
    assert details["fits"] and len(details["steps"]) == 3 and details["unseen"]
    # The saved capture is a file every command reads; estimate reads it back the same.
    again = subprocess.run([cli, "estimate", str(saved), "--capacity-gib", "1", "--json"], capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["peak_reserved_bytes"] == details["peak_reserved_bytes"]


@pytest.mark.parametrize("arguments, message", [
    (["--device", "A100"], "unknown device 'A100'"),
    (["--capacity-gib", "-1"], "--capacity-gib must be between"),
    (["--capacity-gib", "1", "--batch-sizes", "8,x"], "--batch-sizes must be integers"),
    (["--capacity-gib", "1", "--settings", "expandable_segments:maybe"], "settings:"),
    (["--capacity-gib", "1", "--steps", "0"], "--steps must be from 1 to 1000"),
])
def test_python_m_estimate_refuses_bad_arguments_in_one_line(script, arguments, message):
    done = subprocess.run([sys.executable, "-m", "memsnap.estimate", str(script), *arguments],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr


def test_memsnap_torch_estimate_is_the_same_function():
    import memsnap.estimate
    import memsnap.torch
    assert memsnap.torch.estimate is memsnap.estimate.estimate


def test_bad_settings_are_refused_before_the_capture_runs():
    import memsnap.estimate
    ran = []
    with pytest.raises(ValueError, match="settings"):
        memsnap.estimate.estimate(lambda: ran.append(1), device=1 << 30, settings="max_split_size_mb:-4")
    assert not ran
