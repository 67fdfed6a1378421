"""``memlint explain SNAPSHOT.pickle``: read a PyTorch memory snapshot and say where the memory went.

A snapshot is what ``torch.cuda.memory._snapshot()`` returns and
``torch.cuda.memory._dump_snapshot()`` pickles (or what ``memlint estimate
--snapshot`` writes).  :mod:`memlint.explain.load` reads it without running
anything it contains, :mod:`memlint.explain.analyse` computes the report,
:mod:`memlint.explain.cli` prints it.  Torch is never imported.
"""
