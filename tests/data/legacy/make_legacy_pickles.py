#!/usr/bin/env python3
"""Writes the legacy-layout snapshot pickles in this folder (run once; the outputs are committed).

PyTorch 1.13/2.0 snapshots differ from 2.x ones: a bare list of segments instead of a dict, blocks
without `address` whose `history` lists (addr, real_size, frames) instead of `frames`, and a single
`free` trace action. Names here hold C++ punctuation and invalid UTF-8 bytes on purpose, so the
views' escaping is exercised."""
import pickle

frames_a = [{"filename": "model.py", "line": 12, "name": "forward<float> & <lambda>"},
            {"filename": "/usr/lib/python3/train.py", "line": 40, "name": "<module>"}]
frames_b = [{"filename": "opt.py", "line": 7, "name": "step \"quoted\" 'x'"}]
segments = [
    {"device": 0, "address": 0x7f0000000000, "total_size": 2 << 20, "allocated_size": 1536,
     "active_size": 1536, "stream": 0, "segment_type": "small",
     "blocks": [
         {"size": 1024, "state": "active_allocated",
          "history": [{"addr": 0x7f0000000000, "real_size": 1000, "frames": frames_a}]},
         {"size": 512, "state": "active_allocated",
          "history": [{"addr": 0x7f0000000400, "real_size": 512, "frames": frames_b}]},
         {"size": (2 << 20) - 1536, "state": "inactive", "history": []},
     ]},
    {"device": 0, "address": 0x7f0000200000, "total_size": 20 << 20, "allocated_size": 0,
     "active_size": 0, "stream": 0, "segment_type": "large",
     "blocks": [{"size": 20 << 20, "state": "inactive", "history": []}]},
]
with open("bare_segment_list.pickle", "wb") as f:
    pickle.dump(segments, f, protocol=2)

bad_name = "kernel\udcff<&>"  # a lone surrogate: invalid UTF-8 bytes in the pickle
snapshot = {
    "segments": segments,
    "device_traces": [[
        {"action": "alloc", "addr": 0x7f0000000000, "size": 1000, "stream": 0, "frames": frames_a},
        {"action": "alloc", "addr": 0x7f0000000400, "size": 512, "stream": 0, "frames": frames_b},
        {"action": "free", "addr": 0x7f0000000400, "size": 512, "stream": 0, "frames": frames_b},
        {"action": "alloc", "addr": 0x7f0000000400, "size": 512, "stream": 0,
         "frames": [{"filename": "x.cu", "line": 1, "name": bad_name}]},
    ]],
}
with open("old_dict_layout.pickle", "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
