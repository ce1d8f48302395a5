"""The compute server: evaluation keys only; Primitive 1 and the noised releases."""
