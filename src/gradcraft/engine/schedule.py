"""Order the unrealized part of a graph for execution.

`schedule(targets)` walks back from the target tensors through unrealized
nodes (stopping at tensors that already hold a buffer), and returns the nodes
in a topological order together with how many times each intermediate output
is read, so the realizer can free it after its last reader.
"""

from gradcraft.errors import RuntimeError_


def output_key(tensor) -> tuple:
    return (id(tensor._node), tensor._index)


def schedule(targets):
    """Returns (nodes in execution order, {output_key: number of readers in this schedule})."""
    order = []
    readers: dict[tuple, int] = {}
    visited: set[int] = set()
    # Iterative post-order DFS: graphs of thousands of ops would overflow Python's recursion limit.
    stack = [(t._node, False) for t in targets if t._buf is None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for inp, version in zip(node.inputs, node.input_versions):
            if inp._buf is None:
                key = (id(inp._node), inp._index)  # output_key(inp), written out: this loop is hot
                readers[key] = readers.get(key, 0) + 1
                if key[0] not in visited:
                    stack.append((inp._node, False))
            elif inp._storage.version != version:  # (a realized tensor has a Storage)
                raise RuntimeError_(
                    f"a lazy tensor ({node.op}) reads a {tuple(inp.shape)} tensor that was modified in place after the "
                    "lazy tensor was built; realize it before the update (e.g. call .realize() first)"
                )
    return _writes_last(order), readers


def _writes_last(order: list) -> list:
    """Move in-place writes (`assign`) after every other node, so that all reads of a parameter in a
    training step see its old value, unless some node reads an assign's result (keep order then)."""
    assigns = [n for n in order if n.op == "assign"]
    if not assigns:
        return order
    assign_ids = {id(n) for n in assigns}
    if any(
        inp._node is not None and id(inp._node) in assign_ids and inp._buf is None for n in order for inp in n.inputs
    ):
        return order
    return [n for n in order if id(n) not in assign_ids] + assigns
