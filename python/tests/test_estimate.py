"""memsnap.estimate: a step captured on fake CUDA tensors asks the caching allocator for what the
real step asks for."""
import json
import subprocess

import pytest

from conftest import memsnap_cli, run_python

# A small GPT-2 (its embedding is tied to its output layer) trained with AdamW, and a loss that
# is logged with .item(). MODE=fake captures three steps; MODE=real runs them on PyTorch's own
# allocator after warming the cuBLAS workspaces (which the capture does not see) and reports the
# peak above that base.
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
                      "annotations": [a["name"] for a in captured.snapshot["external_annotations"]],
                      "real_memory": torch.cuda.memory_allocated()}))
else:
    warm = torch.randn(64, 64, device="cuda", requires_grad=True)
    (warm @ warm).sum().backward()
    del warm
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    state = setup()
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        step(state)
        peaks.append(torch.cuda.max_memory_allocated() - base)
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
    assert any("cuBLAS" in line for line in fake["unseen"])


def test_memsnap_replays_the_capture_to_the_same_peak(captured_and_real):
    fake, _, path = captured_and_real
    cli = memsnap_cli()
    done = subprocess.run([cli, "replay", path, "--capacity-gib", "80", "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    device = json.loads(done.stdout)["devices"][0]
    assert device["peak_requested_bytes"] == fake["peak"], device
    assert device["num_ooms"] == 0 and device["failed_allocs"] == 0, device
    assert device["peak_allocated_bytes"] >= fake["peak"]


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
