"""Real models: memsnap reserves what PyTorch's own allocator reserves for the same program, and
its stacks name the model's source."""
import json

import pytest

from conftest import run_python

TRAIN = """
import json, os, random, sys, torch
if os.environ.get("USE_MEMSNAP") == "1":
    import memsnap.torch
    memsnap.torch.install()
torch.manual_seed(0); random.seed(0)
kind = os.environ["MODEL"]
if kind == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=8192)).cuda()
    def batch():
        return torch.randint(0, 8192, (4, random.choice([64, 128, 200, 256])), device="cuda")
    def loss_of(x):
        return model(x, labels=x).loss
else:
    import torchvision
    model = torchvision.models.resnet50().cuda()
    def batch():
        return torch.randn(random.choice([16, 24, 32]), 3, 160, 160, device="cuda")
    def loss_of(x):
        return model(x).square().mean()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(8):
    loss_of(batch()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
s = torch.cuda.memory_stats()
keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_retries",
        "num_device_alloc", "segment.all.peak", "active_bytes.all.peak", "requested_bytes.all.peak"]
print(json.dumps({k: s[k] for k in keys}))
"""


@pytest.mark.parametrize("model", ["gpt2", "resnet50"])
def test_training_statistics_equal_pytorchs_own_allocator(model):
    pytorch = run_python(TRAIN, env={"MODEL": model, "USE_MEMSNAP": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    memsnap = run_python(TRAIN, env={"MODEL": model, "USE_MEMSNAP": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    for key in ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_retries",
                "num_device_alloc", "segment.all.peak", "active_bytes.all.peak", "requested_bytes.all.peak"):
        assert memsnap[key] == pytorch[key], (key, memsnap, pytorch)


def test_gpt2_stacks_name_the_models_source():
    result = run_python("""
        import json, torch, memsnap.torch
        memsnap.torch.install()
        memsnap.torch.record_history(stacks="all", max_entries=200000)
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=4096)).cuda()
        x = torch.randint(0, 4096, (2, 64), device="cuda")
        model(x, labels=x).loss.backward()
        snapshot = torch.cuda.memory._snapshot()
        files = set()
        backward_without_python = 0
        for entry in snapshot["device_traces"][0]:
            names = [f["filename"] for f in entry.get("frames", [])]  # marker entries carry none, as in PyTorch's
            files.update(n.rsplit("/", 1)[-1] for n in names)
        print(json.dumps({"files": sorted(files)}))
    """)
    assert "modeling_gpt2.py" in result["files"]
    assert "<string>" in result["files"]  # the script itself (python -c)
