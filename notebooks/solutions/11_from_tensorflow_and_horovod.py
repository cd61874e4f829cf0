# Solutions of 11_from_tensorflow_and_horovod.ipynb (see testbed/exercises.py for the format).

# %% overlap
%%dist
class OverlappingAverager:
    """Horovod-style: each gradient's all-reduce starts during backward()."""

    def __init__(self, model):
        self.pending = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        # called during backward, as soon as p.grad is final: start its all-reduce, do not wait
        self.pending.append((p, dist.all_reduce(p.grad, async_op=True)))

    def synchronize(self):
        for p, handle in self.pending:
            handle.wait()
            p.grad /= world_size
        self.pending.clear()

# %% overlap wrong: all-reduces only in synchronize(): correct numbers, but no overlap with backward
%%dist
class OverlappingAverager:
    def __init__(self, model):
        self.pending = []
        self.params = list(model.parameters())

    def synchronize(self):
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad /= world_size

# %% overlap wrong: started during backward, but the sums are never divided by world_size
%%dist
class OverlappingAverager:
    def __init__(self, model):
        self.pending = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        self.pending.append((p, dist.all_reduce(p.grad, async_op=True)))

    def synchronize(self):
        for p, handle in self.pending:
            handle.wait()
        self.pending.clear()

# %% overlap wrong: asynchronous all-reduce, but waited for inside the hook: nothing is in flight after backward
%%dist
class OverlappingAverager:
    def __init__(self, model):
        self.pending = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        handle = dist.all_reduce(p.grad, async_op=True)
        handle.wait()
        self.pending.append((p, handle))

    def synchronize(self):
        for p, handle in self.pending:
            p.grad /= world_size
        self.pending.clear()
