"""A torchvision ResNet-50 trained a few steps on PyTorch's own allocator, for `memsnap record`:
each segment PyTorch's caching allocator takes with cudaMalloc is a block of the snapshot, so
the recording shows what PyTorch reserved and when, and `memsnap replay` can set other settings
against the same requests. One oversized batch runs out of memory and is caught, as a batch-size
finder does.

    memsnap record -o resnet.msgpack -- python3 examples/record/torch_training.py
"""
import torch
import torchvision


def train(steps, batch):
    model = torchvision.models.resnet50().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        images = torch.randn(batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return model


def main():
    model = train(steps=3, batch=32)
    try:
        model(torch.randn(20000, 3, 224, 224, device="cuda"))
    except torch.OutOfMemoryError:
        print("batch of 20000 ran out of memory; going on with 32")
    torch.cuda.empty_cache()
    train(steps=2, batch=32)
    print(f"reserved by PyTorch at the end: {torch.cuda.memory_reserved() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
