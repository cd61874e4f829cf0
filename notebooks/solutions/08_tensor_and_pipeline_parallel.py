# Solutions to the exercises of 08_tensor_and_pipeline_parallel.ipynb, and plausible wrong answers the checks reject.

# %% tp_shapes
def tp_local_shape(shape, style, world_size):
    if style == "colwise":  # output features: dim 0 of the weight, and the bias
        return (shape[0] // world_size, *shape[1:])
    if len(shape) == 1:  # row-wise bias: added once, after the all-reduce
        return tuple(shape)
    return (shape[0], shape[1] // world_size)


# %% tp_shapes wrong: column-wise and row-wise swapped
def tp_local_shape(shape, style, world_size):
    if style == "rowwise":
        return (shape[0] // world_size, *shape[1:])
    if len(shape) == 1:
        return tuple(shape)
    return (shape[0], shape[1] // world_size)


# %% tp_shapes wrong: the row-wise bias sharded too
def tp_local_shape(shape, style, world_size):
    if style == "colwise" or len(shape) == 1:
        return (shape[0] // world_size, *shape[1:])
    return (shape[0], shape[1] // world_size)


# %% bubble
def bubble_fraction(p, m):
    return (p - 1) / (m + p - 1)


# %% bubble wrong: idle over the ideal time, (p - 1) / m (Megatron-LM's figure), where the share of the whole step is asked
def bubble_fraction(p, m):
    return (p - 1) / m


# %% bubble wrong: counts only the warm-up, not the drain
def bubble_fraction(p, m):
    return (p - 1) / (2 * (m + p - 1))

# %% tp-by-hand
%%dist
class CopyToTP(torch.autograd.Function):  # Megatron's f
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)  # every rank has the whole input already

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)  # the partial input gradients of every slice, summed
        return grad

class ReduceFromTP(torch.autograd.Function):  # Megatron's g
    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)  # the row-wise partial products, summed
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad  # the same on every rank: each slice needs exactly it

# %% tp-by-hand wrong: g averages the partial outputs (ReduceOp.AVG) instead of summing them
%%dist
class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad

class ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad

# %% tp-by-hand wrong: f is the identity both ways (the input's gradient stays partial)
%%dist
class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad

class ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad

# %% tp-by-hand wrong: g all-reduces in backward too, as if an all-reduce were its own adjoint
%%dist
class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad

class ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad

# %% gpipe
%%dist
def gpipe_step(stage, x, target, m):
    first, last = rank == 0, rank == world_size - 1
    micro = BATCH // m
    inputs, outputs = [], []
    for i in range(m):  # all forwards
        if first:
            a = x[i * micro:(i + 1) * micro]
        else:
            a = torch.empty(micro, WIDTH, device=device)
            dist.recv(a, rank - 1)
            a.requires_grad_()  # a leaf: its gradient goes back to the previous stage
        out = stage(a)
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(a)
        outputs.append(out)
    for i in range(m):  # then all backwards, in the same order on every stage
        if last:
            (loss_fn(outputs[i], target[i * micro:(i + 1) * micro]) / m).backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, rank + 1)
            outputs[i].backward(grad)
        if not first:
            dist.send(inputs[i].grad, rank - 1)

# %% gpipe wrong: each micro-batch's loss not divided by m (the gradient of a sum of m means)
%%dist
def gpipe_step(stage, x, target, m):
    first, last = rank == 0, rank == world_size - 1
    micro = BATCH // m
    inputs, outputs = [], []
    for i in range(m):
        if first:
            a = x[i * micro:(i + 1) * micro]
        else:
            a = torch.empty(micro, WIDTH, device=device)
            dist.recv(a, rank - 1)
            a.requires_grad_()
        out = stage(a)
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(a)
        outputs.append(out)
    for i in range(m):
        if last:
            loss_fn(outputs[i], target[i * micro:(i + 1) * micro]).backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, rank + 1)
            outputs[i].backward(grad)
        if not first:
            dist.send(inputs[i].grad, rank - 1)

# %% gpipe wrong: a middle or first stage starts backward from its own output's sum, not the received gradient
%%dist
def gpipe_step(stage, x, target, m):
    first, last = rank == 0, rank == world_size - 1
    micro = BATCH // m
    inputs, outputs = [], []
    for i in range(m):
        if first:
            a = x[i * micro:(i + 1) * micro]
        else:
            a = torch.empty(micro, WIDTH, device=device)
            dist.recv(a, rank - 1)
            a.requires_grad_()
        out = stage(a)
        if not last:
            dist.send(out.detach(), rank + 1)
        inputs.append(a)
        outputs.append(out)
    for i in range(m):
        if last:
            (loss_fn(outputs[i], target[i * micro:(i + 1) * micro]) / m).backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, rank + 1)
            outputs[i].sum().backward()
        if not first:
            dist.send(inputs[i].grad, rank - 1)

# %% gpipe wrong: no pipelining: each micro-batch goes forward and backward through every stage before the next
%%dist
def gpipe_step(stage, x, target, m):
    first, last = rank == 0, rank == world_size - 1
    micro = BATCH // m
    for i in range(m):
        if first:
            a = x[i * micro:(i + 1) * micro]
        else:
            a = torch.empty(micro, WIDTH, device=device)
            dist.recv(a, rank - 1)
            a.requires_grad_()
        out = stage(a)
        if last:
            (loss_fn(out, target[i * micro:(i + 1) * micro]) / m).backward()
        else:
            dist.send(out.detach(), rank + 1)
            grad = torch.empty_like(out)
            dist.recv(grad, rank + 1)
            out.backward(grad)
        if not first:
            dist.send(a.grad, rank - 1)
