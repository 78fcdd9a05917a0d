"""Writes torch-MAJOR.MINOR-{zip,legacy}.pt here with the torch it runs on: the files
test_torchfile.py reads as written by torch 1.13 (Debian's) and 2.15 (PyPI's).

    python3 python/tests/data/write_torch_files.py python/tests/data
"""
import collections, sys
import torch
sd = collections.OrderedDict(
    w=torch.arange(24, dtype=torch.float32).reshape(4, 6) / 8,
    b=torch.arange(6, dtype=torch.float32).to(torch.bfloat16),
    h=torch.arange(12, dtype=torch.float16).reshape(3, 4).t(),
    i=torch.tensor([1, -2, 3], dtype=torch.int64),
    flag=torch.tensor([True, False]))
obj = {"module": sd, "universal_checkpoint_info": {"universal_checkpoint_version": 0.2},
       "p": torch.nn.Parameter(torch.ones(2, 2))}
out = sys.argv[1]
torch.save(obj, f"{out}/torch-{'.'.join(torch.__version__.split('.')[:2])}-zip.pt")
torch.save(obj, f"{out}/torch-{'.'.join(torch.__version__.split('.')[:2])}-legacy.pt", _use_new_zipfile_serialization=False)
