"""PyTorch: eager vs torch.compile (Inductor's C++/OpenMP CPU backend) on
kiln-bench's workloads."""

from __future__ import annotations

import numpy as np

from bench.peers import common


def make_peer() -> common.Peer:
    import torch
    import torch.nn.functional as F

    def seed(x, y):
        z = torch.matmul(x, y)
        z = z + torch.sin(z)
        z = torch.relu(z)
        return torch.sum(z)

    def gelu(x):
        return F.gelu(x, approximate="tanh")

    def softmax(x):
        return torch.softmax(x, dim=-1)

    def layernorm(x, gamma, beta):
        return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)

    def adam(parameter, gradient, m, v):
        learning_rate, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
        correction1, correction2 = 1 - beta1**10, 1 - beta2**10
        new_m = beta1 * m + (1 - beta1) * gradient
        new_v = beta2 * v + (1 - beta2) * (gradient * gradient)
        step = (new_m / correction1) / (torch.sqrt(new_v / correction2) + epsilon)
        return parameter - learning_rate * step, new_m, new_v

    def attention(q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def set_threads(threads: int) -> str:
        torch.set_num_threads(threads)
        return f"intra-op {torch.get_num_threads()}, inter-op {torch.get_num_interop_threads()}"

    def no_grad(function):
        def call(*arguments):
            with torch.inference_mode():
                return function(*arguments)
        return call

    return common.Peer(
        system="torch",
        label="torch",
        version=lambda: f"torch {torch.__version__}",
        set_threads=set_threads,
        from_numpy=torch.from_numpy,
        to_numpy=lambda tensor: tensor.detach().numpy(),
        wait=lambda outputs: None,  # CPU ops return when their work is done
        modes={
            "standard": common.Mode("eager", no_grad),
            "jit": common.Mode("torch.compile", lambda body: no_grad(torch.compile(body))),
        },
        bodies=dict(seed=seed, gelu=gelu, softmax=softmax, layernorm=layernorm, adam=adam, attention=attention),
    )


if __name__ == "__main__":
    common.main(make_peer)
