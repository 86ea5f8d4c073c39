"""JAX: op-by-op dispatch vs jax.jit (XLA) on kiln-bench's workloads, on the
CPU or on the first GPU (`--device cuda`). The training workloads are
`jax.jit(jax.value_and_grad(loss))` and the Adam update, in one jitted function."""

from __future__ import annotations

import contextlib
from importlib import metadata

import numpy as np

from bench.peers import common


def make_peer(device: str = "cpu") -> common.Peer:
    import jax
    import jax.numpy as jnp

    def seed(x, y):
        z = jnp.matmul(x, y)
        z = z + jnp.sin(z)
        z = jax.nn.relu(z)
        return jnp.sum(z)

    def gelu(x):
        return jax.nn.gelu(x, approximate=True)

    def gelu_erf(x):
        return jax.nn.gelu(x, approximate=False)

    def softmax(x):
        return jax.nn.softmax(x, axis=-1)

    def layernorm(x, gamma, beta):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        centered = x - mean
        variance = jnp.mean(centered * centered, axis=-1, keepdims=True)
        return centered * jax.lax.rsqrt(variance + 1e-5) * gamma + beta

    def adam(parameter, gradient, m, v):
        learning_rate, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
        # Mixed precision (adam-bf16): a bf16 parameter and gradient, f32 moments; the update in f32.
        wide_parameter, gradient = parameter.astype(m.dtype), gradient.astype(m.dtype)
        correction1, correction2 = 1 - beta1**10, 1 - beta2**10
        new_m = beta1 * m + (1 - beta1) * gradient
        new_v = beta2 * v + (1 - beta2) * (gradient * gradient)
        step = (new_m / correction1) / (jnp.sqrt(new_v / correction2) + epsilon)
        result = wide_parameter - learning_rate * step
        return result.astype(parameter.dtype), new_m, new_v

    def attention(q, k, v):
        scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * 0.125
        return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)

    def block(x, wq, wk, wv, wo, w1, b1, w2, b2, gamma1, beta1, gamma2, beta2):
        # kiln-bench's block_body: a pre-norm transformer block, heads of 64.
        tokens, width = x.shape
        heads = width // 64

        def split_heads(t):
            return jnp.transpose(jnp.reshape(t, (tokens, heads, 64)), (1, 0, 2))

        h = layernorm(x, gamma1, beta1)
        q, k, v = split_heads(h @ wq), split_heads(h @ wk), split_heads(h @ wv)
        probabilities = jax.nn.softmax(jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * 0.125, axis=-1)
        attended = jnp.reshape(jnp.transpose(jnp.matmul(probabilities, v), (1, 0, 2)), (tokens, width))
        x1 = x + attended @ wo
        m = jax.nn.gelu(layernorm(x1, gamma2, beta2) @ w1 + b1, approximate=True)
        return x1 + m @ w2 + b2

    def conv(x, filters, bias):
        # kiln-bench's conv_body: a 3x3 convolution of NHWC images, same padding, bias, relu.
        y = jax.lax.conv_general_dilated(x, filters, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + bias)

    def stem(x, filters, bias):
        # kiln-bench's stem_body: a 7x7 convolution of NHWC images, stride 2, same padding, bias, relu.
        y = jax.lax.conv_general_dilated(x, filters, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + bias)

    def pool(x):
        # kiln-bench's pool_body: a 3x3 max pool of NHWC images, stride 2, same padding.
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    def depthwise(x, filters, bias):
        # kiln-bench's depthwise_body: a 3x3 depthwise convolution of NHWC images (HWIO filters with I = 1, a
        # group per channel), same padding, bias, relu.
        y = jax.lax.conv_general_dilated(x, filters, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         feature_group_count=x.shape[-1])
        return jax.nn.relu(y + bias)

    def mlp_loss(parameters, x, labels):
        # kiln-bench's mlp-train loss: 3 linear layers, relu between them, mean softmax cross-entropy.
        activations = x
        for layer in range(3):
            activations = activations @ parameters[2 * layer] + parameters[2 * layer + 1]
            if layer < 2:
                activations = jax.nn.relu(activations)
        log_probabilities = jax.nn.log_softmax(activations, axis=-1)
        return -jnp.mean(jnp.take_along_axis(log_probabilities, labels[:, None].astype(jnp.int32), axis=-1))

    def block_loss(parameters, x):
        # kiln-bench's block-train loss: the mean square of the block's output.
        return jnp.mean(jnp.square(block(x, *parameters)))

    def cnn_loss(parameters, images, labels):
        # kiln-bench's cnn-train loss: conv, pool, conv, the mean over the positions, a dense layer, mean softmax
        # cross-entropy.
        filters1, bias1, filters2, bias2, weights, bias = parameters
        features = conv(pool(conv(images, filters1, bias1)), filters2, bias2)
        log_probabilities = jax.nn.log_softmax(jnp.mean(features, axis=(1, 2)) @ weights + bias, axis=-1)
        return -jnp.mean(jnp.take_along_axis(log_probabilities, labels[:, None].astype(jnp.int32), axis=-1))

    def training_step(loss, count):
        # kiln-bench's training steps: the `count` parameters, their Adam first and second moments, then the data;
        # the loss, the updated parameters and moments out (Adam at step 10, as the adam workload).
        def step(*arguments):
            parameters = list(arguments[:count])
            value, gradients = jax.value_and_grad(loss)(parameters, *arguments[3 * count:])
            updated = [adam(p, g, m, v) for p, g, m, v in
                       zip(parameters, gradients, arguments[count:2 * count], arguments[2 * count:3 * count])]
            return (value, *(u[0] for u in updated), *(u[1] for u in updated), *(u[2] for u in updated))
        return step

    def gru_step(h, x, w, u, b):
        # kiln-bench's gru_step: gates z, r and the candidate from the input's and the state's products.
        hidden = h.shape[-1]
        from_input, from_state = x @ w + b, h @ u
        z = jax.nn.sigmoid(from_input[:, :hidden] + from_state[:, :hidden])
        r = jax.nn.sigmoid(from_input[:, hidden:2 * hidden] + from_state[:, hidden:2 * hidden])
        candidate = jnp.tanh(from_input[:, 2 * hidden:] + r * from_state[:, 2 * hidden:])
        return candidate + z * (h - candidate)

    def rnn(xs, h0, w, u, b):
        # kiln-bench's rnn_body: lax.scan over the steps, every state stacked.
        def step(h, x):
            following = gru_step(h, x, w, u, b)
            return following, following
        return jax.lax.scan(step, h0, xs)

    def rnn_loss(parameters, xs, h0):
        # kiln-bench's rnn-train loss: the mean square of every step's state of the rnn workload's GRU.
        return jnp.mean(jnp.square(rnn(xs, h0, *parameters)[1]))

    def solver(a, b):
        # kiln-bench's solver_body: conjugate gradients with lax.while_loop until |r| <= 1e-5 |b|.
        threshold = jnp.dot(b, b) * (1e-5 * 1e-5)

        def condition(state):
            return (state[3] > threshold) & (state[4] < 1000)

        def body(state):
            x, r, p, residual, iterations = state
            ap = a @ p
            alpha = residual / jnp.dot(p, ap)
            following = r - alpha * ap
            following_residual = jnp.dot(following, following)
            return (x + alpha * p, following, following + (following_residual / residual) * p, following_residual,
                    iterations + 1)

        x, _, _, _, iterations = jax.lax.while_loop(condition, body, (jnp.zeros_like(b), b, b, jnp.dot(b, b),
                                                                       jnp.int32(0)))
        return x, iterations

    def decode(x, w1, b1, w2, b2):
        # kiln-bench's decode_body: a transformer MLP on a few tokens, gelu in the tanh form.
        return jnp.matmul(jax.nn.gelu(jnp.matmul(x, w1) + b1, approximate=True), w2) + b2

    def set_threads(threads: int) -> str:
        if device == "cuda":
            return f"{target.device_kind}; host: all CPUs"
        # XLA:CPU has no thread-count option; its pool is sized by the CPUs
        # the process may run on, which __main__ limits to `threads`.
        return f"{len(jax.devices('cpu'))} device, {threads} CPUs (affinity)"

    def precision(tf32: bool | None):
        # The precision of every f32 matmul traced inside: jnp.matmul
        # op by op, and what jax.jit traces on the first call.
        if tf32 is None:
            return contextlib.nullcontext()
        return jax.default_matmul_precision("tensorfloat32" if tf32 else "float32")

    # jax.devices("gpu") raises when this jaxlib has no GPU support or sees no GPU.
    target = jax.devices("gpu")[0] if device == "cuda" else jax.devices("cpu")[0]
    return common.Peer(
        system="jax",
        label="JAX",
        version=lambda: f"jax {jax.__version__}, jaxlib {metadata.version('jaxlib')}",
        set_threads=set_threads,
        from_numpy=lambda array: jax.device_put(array, target),
        to_numpy=np.asarray,
        to_bf16=lambda array: array.astype(jax.numpy.bfloat16),
        to_f32=lambda array: array.astype(jax.numpy.float32),
        wait=jax.block_until_ready,
        device=f"{target.platform}:{target.id} ({target.device_kind})",
        precision=precision,
        modes={
            "standard": common.Mode("op-by-op", lambda body: body),
            "jit": common.Mode("jax.jit", jax.jit),
        },
        bodies=dict(seed=seed, add_one=lambda x: x + 1, gelu=gelu, gelu_erf=gelu_erf, softmax=softmax, layernorm=layernorm, adam=adam, attention=attention,
                    block=block, stem=stem, conv=conv, pool=pool, depthwise=depthwise,
                    mlp_train=training_step(mlp_loss, 6), block_train=training_step(block_loss, 12), rnn=rnn,
                    rnn_train=training_step(rnn_loss, 3),
                    cnn_train=training_step(cnn_loss, 6), solver=solver, decode=decode),
    )


if __name__ == "__main__":
    common.main(make_peer)
