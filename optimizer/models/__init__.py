"""The models behind every plan: pure functions from a job and a configuration grid to bytes, seconds and money.

- ``memory`` and ``activations``: per-GPU bytes by component (weights, gradients, optimizer states, activations,
  logits and loss buffers, overhead);
- ``timing``: step time and wall-clock hours;
- ``cost``: the bill for a rental term;
- ``uncertainty``: the plan at the low and high percentiles of the models' held-out errors;
- ``engines``: what each training engine can launch, so the solver proposes only runnable plans.
"""
