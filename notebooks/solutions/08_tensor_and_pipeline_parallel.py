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
