"""Will it fit? A training step's memory on a GPU, found before it runs.

    import memsnap.estimate

    def setup():
        model = build_model().to("cuda")
        return model, torch.optim.AdamW(model.parameters())

    def step(state):
        model, optimizer = state
        model(batch()).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    print(memsnap.estimate.estimate(step, setup=setup, device="H200"))

``estimate`` captures the step on fake CUDA tensors, without allocating its memory
(``capture``, capture.py), and replays the capture through memsnap's simulation of PyTorch's
caching allocator on a device of the given size (fit.py): per step, the peak allocated and
reserved bytes; whether it runs out of memory and the Python stack of the allocation that fails;
the allocator settings that reserve least there; with ``batch_sizes=[...]``, the largest batch
that fits. ``memsnap estimate SCRIPT.py --device H200`` does the same for a script that defines
``step`` (``python -m memsnap.estimate``).
"""

from memsnap.estimate.capture import Capture, capture, cublas_workspace_bytes, settings_from_environment
from memsnap.estimate.fit import BatchEstimate, Estimate, estimate

__all__ = ["BatchEstimate", "Capture", "Estimate", "capture", "cublas_workspace_bytes", "estimate",
           "settings_from_environment"]
