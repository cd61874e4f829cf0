# Solutions of 18_throughput_accounting.ipynb (see the exercise format in the notebooks' README).

# %% flops
def flops_per_token(layers, width, seq, vocab):
    # Training FLOPs (forward + backward) per token: 6 per weight, plus attention's products.
    weights = layers * 12 * width * width + width * vocab   # q, k, v, o, up, down; the head
    attention = layers * 2 * (2 * seq * width)              # scores and weighted sum, forward
    return 6 * weights + 3 * attention

# %% flops right: forward counted first, backward as twice the forward
def flops_per_token(layers, width, seq, vocab):
    forward = 2 * (layers * (4 * width * width + 2 * 4 * width * width) + width * vocab)
    forward += layers * 4 * seq * width
    return 3 * forward

# %% flops wrong: 6N alone: attention's products forgotten
def flops_per_token(layers, width, seq, vocab):
    return 6 * (layers * 12 * width * width + width * vocab)

# %% flops wrong: 6 x every parameter (embeddings, biases and norms counted as weights), no attention
def flops_per_token(layers, width, seq, vocab):
    per_block = 12 * width * width + 9 * width + 4 * width + 2 * 2 * width
    return 6 * (layers * per_block + vocab * width + seq * width + 2 * width + width * vocab + vocab)

# %% flops wrong: the forward pass only (2N + attention's forward)
def flops_per_token(layers, width, seq, vocab):
    return 2 * (layers * 12 * width * width + width * vocab) + layers * 4 * seq * width

# %% flops wrong: attention halved for the causal mask (the products here compute the whole square)
def flops_per_token(layers, width, seq, vocab):
    return 6 * (layers * 12 * width * width + width * vocab) + 6 * layers * seq * width

# %% flops wrong: the head left out (it is a weight matrix like the others)
def flops_per_token(layers, width, seq, vocab):
    return 6 * layers * 12 * width * width + 12 * layers * seq * width
