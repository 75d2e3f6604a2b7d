#!/usr/bin/env python3
"""A data-parallel training job on memsnap's allocator where one rank runs out of memory.

    torchrun --nproc-per-node 2 examples/ddp_ranks.py --out job/
    memsnap ranks job/          # which rank ran out, and what it held that the others did not
    memsnap serve job/          # the same in the browser: the Ranks view

Every rank trains the same GPT-2-shaped model (random weights, `transformers`) under DDP, with
a memory cap as if each had a GPU of --cap-gib (so ranks can also share a GPU), and evaluates
every few steps. The rank named by --oom-rank (default 1) evaluates longer sequences: its
evaluation runs out of memory, it halves its evaluation batch as batch-size finders do, and the
job goes on — the error is a ``torch.OutOfMemoryError`` the rank catches, not a crash. Every
rank writes ``rank{rank}.msgpack`` at the end, and ``rank{rank}-oom-{n}.msgpack`` at each
out-of-memory error (memsnap fills in the rank from torchrun's variables). With more ranks than
GPUs, ranks share the GPUs and use the gloo backend (NCCL needs a GPU per rank).
"""
import argparse
import os

import memsnap.torch as memsnap_torch
import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="job", help="folder for the rank snapshots")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--oom-rank", type=int, default=1, help="the rank that runs out of memory (-1: none)")
    parser.add_argument("--cap-gib", type=float, default=12.0, help="each rank's memory cap, in GiB")
    parser.add_argument("--eval-batch", type=int, default=32)
    return parser.parse_args()


def main():
    args = parse_args()
    memsnap_torch.install()  # before any CUDA memory is allocated
    memsnap_torch.record_history(stacks="python")
    os.makedirs(args.out, exist_ok=True)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    shared_gpus = world > torch.cuda.device_count()
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("gloo" if shared_gpus else "nccl")
    rank = dist.get_rank()
    memsnap_torch.dump_snapshot_on_oom(os.path.join(args.out, "rank{rank}-oom-{n}.msgpack"))

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=2048)
    model = GPT2LMHeadModel(config).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * (1 << 30) / total), device)
    generator = torch.Generator().manual_seed(rank)
    eval_batch, ooms = args.eval_batch, 0
    # This rank's evaluation data has longer sequences: its logits outgrow its memory.
    eval_length = 2048 if rank == args.oom_rank else 512
    for step in range(args.steps):
        length = int(torch.randint(128, 512, (1,), generator=generator))
        tokens = torch.randint(0, config.vocab_size, (args.batch, length), device=device)
        with memsnap_torch.annotate(f"step {step}"):
            loss = ddp(tokens, labels=tokens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        del tokens, loss
        if step % 4 != 3:
            continue
        while True:  # evaluation: no collectives, so one rank may retry alone
            try:
                with torch.no_grad(), memsnap_torch.annotate(f"evaluate {step}"):
                    tokens = torch.randint(0, config.vocab_size, (eval_batch, eval_length), device=device)
                    model(tokens, labels=tokens).loss.item()
                break
            except torch.OutOfMemoryError:
                ooms += 1
                tokens = None
                if eval_batch == 1:
                    raise
                eval_batch //= 2
                print(f"rank {rank}: out of memory evaluating at step {step}; evaluation batch now {eval_batch}",
                      flush=True)
    dist.barrier()
    path = os.path.join(args.out, f"rank{rank}.msgpack")
    memsnap_torch.dump_snapshot(path)
    print(f"rank {rank}: {args.steps} steps, {ooms} out-of-memory error(s), peak reserved "
          f"{torch.cuda.max_memory_reserved(device) / (1 << 30):.2f} GiB; snapshot {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
