"""Side-by-side benchmarks against PyTorch (`gradcraft bench`, and the scripts in bench/).

PyTorch is imported only when a benchmark runs its PyTorch side: `import gradcraft` never imports it.
torch_reference.py is the independent PyTorch implementation of our decoder that both the tests
(as the oracle of the models) and the benchmarks (as the eager-PyTorch side) use.
"""
