# Solutions of notebook 14 (collective algorithms). Each section replaces the exercise cell it
# names; "wrong:" sections are plausible mistakes the check must reject, "right:" sections
# other right answers it must accept.

# %% ring
%%dist
def ring_all_reduce(tensor, group):
    # Sum `tensor` over the ranks of `group`, in place, with send/recv around a ring.
    n, me = dist.get_world_size(group), dist.get_rank(group)
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.view(-1).tensor_split(n)           # views: writing a chunk writes the tensor
    for step in range(n - 1):                          # reduce-scatter
        send_i, recv_i = (me - step) % n, (me - step - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        request = dist.isend(chunks[send_i], group=group, group_dst=right)
        dist.recv(incoming, group=group, group_src=left)
        request.wait()
        chunks[recv_i].add_(incoming)
    for step in range(n - 1):                          # all-gather: copy the complete chunks
        send_i, recv_i = (me - step + 1) % n, (me - step) % n
        request = dist.isend(chunks[send_i], group=group, group_dst=right)
        dist.recv(chunks[recv_i], group=group, group_src=left)
        request.wait()

# %% ring right: both directions of every step posted at once with batch_isend_irecv
%%dist
def ring_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    chunks = tensor.view(-1).tensor_split(n)
    for phase in ("reduce", "gather"):
        for step in range(n - 1):
            offset = 0 if phase == "reduce" else 1
            send_i, recv_i = (me - step + offset) % n, (me - step - 1 + offset) % n
            incoming = torch.empty_like(chunks[recv_i])
            ops = [dist.P2POp(dist.isend, chunks[send_i], group=group, group_peer=(me + 1) % n),
                   dist.P2POp(dist.irecv, incoming, group=group, group_peer=(me - 1) % n)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            if phase == "reduce":
                chunks[recv_i].add_(incoming)
            else:
                chunks[recv_i].copy_(incoming)

# %% ring wrong: the whole tensor to the right neighbour, the left one's added (right on 2 ranks only)
%%dist
def ring_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    incoming = torch.empty_like(tensor)
    request = dist.isend(tensor.clone(), group=group, group_dst=(me + 1) % n)
    dist.recv(incoming, group=group, group_src=(me - 1) % n)
    request.wait()
    tensor.add_(incoming)

# %% ring wrong: whole tensors passed round the ring N-1 times (the right sum, N-1 times the bytes)
%%dist
def ring_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    passing = tensor.clone()
    for _ in range(n - 1):
        incoming = torch.empty_like(passing)
        request = dist.isend(passing, group=group, group_dst=(me + 1) % n)
        dist.recv(incoming, group=group, group_src=(me - 1) % n)
        request.wait()
        tensor.add_(incoming)
        passing = incoming

# %% ring wrong: the reduce-scatter alone (each rank has one complete chunk, the rest partial)
%%dist
def ring_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    chunks = tensor.view(-1).tensor_split(n)
    for step in range(n - 1):
        send_i, recv_i = (me - step) % n, (me - step - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        request = dist.isend(chunks[send_i], group=group, group_dst=(me + 1) % n)
        dist.recv(incoming, group=group, group_src=(me - 1) % n)
        request.wait()
        chunks[recv_i].add_(incoming)

# %% ring wrong: chunks of len // N elements, so the remainder never travels
%%dist
def ring_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    size = tensor.numel() // n
    flat = tensor.view(-1)
    chunks = [flat[i * size:(i + 1) * size] for i in range(n)]
    for phase in ("reduce", "gather"):
        for step in range(n - 1):
            offset = 0 if phase == "reduce" else 1
            send_i, recv_i = (me - step + offset) % n, (me - step - 1 + offset) % n
            incoming = torch.empty_like(chunks[recv_i])
            request = dist.isend(chunks[send_i], group=group, group_dst=(me + 1) % n)
            dist.recv(incoming, group=group, group_src=(me - 1) % n)
            request.wait()
            if phase == "reduce":
                chunks[recv_i].add_(incoming)
            else:
                chunks[recv_i].copy_(incoming)

# %% ring wrong: the library's all-reduce called inside
%%dist
def ring_all_reduce(tensor, group):
    dist.all_reduce(tensor, group=group)

# %% tree
%%dist
def tree_all_reduce(tensor, group):
    # Sum `tensor` over the ranks of `group`, in place: reduce up a tree to rank 0, broadcast down.
    n, me = dist.get_world_size(group), dist.get_rank(group)
    low = me & -me if me else 1 << (n - 1).bit_length()   # rank 0: above every child
    incoming = torch.empty_like(tensor)
    s = 1
    while s < low:                                         # children me + 1, me + 2, me + 4, ...
        if me + s < n:
            dist.recv(incoming, group=group, group_src=me + s)
            tensor.add_(incoming)
        s *= 2
    if me:
        dist.send(tensor, group=group, group_dst=me - low)     # up to the parent ...
        dist.recv(tensor, group=group, group_src=me - low)     # ... and the sum back down
    s = low // 2
    while s >= 1:                                          # down to the children, farthest first
        if me + s < n:
            dist.send(tensor, group=group, group_dst=me + s)
        s //= 2

# %% tree right: a binary tree in heap order (children 2r+1 and 2r+2)
%%dist
def tree_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    children = [c for c in (2 * me + 1, 2 * me + 2) if c < n]
    incoming = torch.empty_like(tensor)
    for child in children:
        dist.recv(incoming, group=group, group_src=child)
        tensor.add_(incoming)
    if me:
        parent = (me - 1) // 2
        dist.send(tensor, group=group, group_dst=parent)
        dist.recv(tensor, group=group, group_src=parent)
    for child in children:
        dist.send(tensor, group=group, group_dst=child)

# %% tree wrong: a star, every rank sending to rank 0 (N-1 messages in a row at the root)
%%dist
def tree_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    if me == 0:
        incoming = torch.empty_like(tensor)
        for other in range(1, n):
            dist.recv(incoming, group=group, group_src=other)
            tensor.add_(incoming)
        for other in range(1, n):
            dist.send(tensor, group=group, group_dst=other)
    else:
        dist.send(tensor, group=group, group_dst=0)
        dist.recv(tensor, group=group, group_src=0)

# %% tree wrong: a chain, N-1 rounds up and N-1 down
%%dist
def tree_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    incoming = torch.empty_like(tensor)
    if me + 1 < n:
        dist.recv(incoming, group=group, group_src=me + 1)
        tensor.add_(incoming)
    if me:
        dist.send(tensor, group=group, group_dst=me - 1)
        dist.recv(tensor, group=group, group_src=me - 1)
    if me + 1 < n:
        dist.send(tensor, group=group, group_dst=me + 1)

# %% tree wrong: the reduce without the broadcast (only rank 0 ends with the sum)
%%dist
def tree_all_reduce(tensor, group):
    n, me = dist.get_world_size(group), dist.get_rank(group)
    low = me & -me if me else 1 << (n - 1).bit_length()
    incoming = torch.empty_like(tensor)
    s = 1
    while s < low:
        if me + s < n:
            dist.recv(incoming, group=group, group_src=me + s)
            tensor.add_(incoming)
        s *= 2
    if me:
        dist.send(tensor.clone(), group=group, group_dst=me - low)

# %% tree wrong: the library's reduce and broadcast
%%dist
def tree_all_reduce(tensor, group):
    dist.reduce(tensor, dst=dist.get_global_rank(group, 0), group=group)
    dist.broadcast(tensor, src=dist.get_global_rank(group, 0), group=group)
