"""TensorFlow: the seed article's own code, tf.function vs
tf.function(jit_compile=True) (XLA), on kiln-bench's workloads, on the CPU or
the first GPU (`--device cuda`)."""

from __future__ import annotations

import contextlib

import numpy as np

from bench.peers import common


def make_peer(device: str = "cpu") -> common.Peer:
    import tensorflow as tf

    def seed(x, y):  # the article's function, verbatim
        z = tf.matmul(x, y)
        z = z + tf.sin(z)
        z = tf.nn.relu(z)
        return tf.reduce_sum(z)

    def gelu(x):
        return tf.nn.gelu(x, approximate=True)

    def gelu_erf(x):
        return tf.nn.gelu(x, approximate=False)

    def softmax(x):
        return tf.nn.softmax(x, axis=-1)

    def layernorm(x, gamma, beta):  # what tf.keras.layers.LayerNormalization computes
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-5)

    def adam(parameter, gradient, m, v):
        learning_rate, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
        # Mixed precision (adam-bf16): a bf16 parameter and gradient, f32 moments; the update in f32.
        wide_parameter, gradient = tf.cast(parameter, m.dtype), tf.cast(gradient, m.dtype)
        correction1, correction2 = 1 - beta1**10, 1 - beta2**10
        new_m = beta1 * m + (1 - beta1) * gradient
        new_v = beta2 * v + (1 - beta2) * (gradient * gradient)
        step = (new_m / correction1) / (tf.sqrt(new_v / correction2) + epsilon)
        result = wide_parameter - learning_rate * step
        return tf.cast(result, parameter.dtype), new_m, new_v

    def attention(q, k, v):
        scores = tf.matmul(q, k, transpose_b=True) * 0.125
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)

    def block(x, wq, wk, wv, wo, w1, b1, w2, b2, gamma1, beta1, gamma2, beta2):
        # kiln-bench's block_body: a pre-norm transformer block, heads of 64.
        tokens, width = x.shape
        heads = width // 64

        def split_heads(t):
            return tf.transpose(tf.reshape(t, (tokens, heads, 64)), (1, 0, 2))

        h = layernorm(x, gamma1, beta1)
        q, k, v = split_heads(tf.matmul(h, wq)), split_heads(tf.matmul(h, wk)), split_heads(tf.matmul(h, wv))
        probabilities = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) * 0.125, axis=-1)
        attended = tf.reshape(tf.transpose(tf.matmul(probabilities, v), (1, 0, 2)), (tokens, width))
        x1 = x + tf.matmul(attended, wo)
        m = tf.nn.gelu(tf.matmul(layernorm(x1, gamma2, beta2), w1) + b1, approximate=True)
        return x1 + tf.matmul(m, w2) + b2

    def conv(x, filters, bias):  # kiln-bench's conv_body: NHWC images, HWIO filters
        return tf.nn.relu(tf.nn.conv2d(x, filters, 1, "SAME") + bias)

    def stem(x, filters, bias):  # kiln-bench's stem_body: 7x7, stride 2, same padding
        return tf.nn.relu(tf.nn.conv2d(x, filters, 2, "SAME") + bias)

    def pool(x):  # kiln-bench's pool_body: a 3x3 max pool of NHWC images, stride 2, same padding
        return tf.nn.max_pool2d(x, 3, 2, "SAME")

    def depthwise(x, filters, bias):
        # kiln-bench's depthwise_body: TensorFlow's depthwise filters are [height, width, channels, multiplier].
        y = tf.nn.depthwise_conv2d(x, tf.reshape(filters, [3, 3, x.shape[-1], 1]), [1, 1, 1, 1], "SAME")
        return tf.nn.relu(y + bias)

    def mlp_loss(parameters, x, labels):
        # kiln-bench's mlp-train loss: 3 linear layers, relu between them, mean softmax cross-entropy.
        activations = x
        for layer in range(3):
            activations = tf.matmul(activations, parameters[2 * layer]) + parameters[2 * layer + 1]
            if layer < 2:
                activations = tf.nn.relu(activations)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=activations))

    def block_loss(parameters, x):
        # kiln-bench's block-train loss: the mean square of the block's output.
        return tf.reduce_mean(tf.square(block(x, *parameters)))

    def cnn_loss(parameters, images, labels):
        # kiln-bench's cnn-train loss: conv, pool, conv, the mean over the positions, a dense layer, mean softmax
        # cross-entropy.
        filters1, bias1, filters2, bias2, weights, bias = parameters
        features = conv(pool(conv(images, filters1, bias1)), filters2, bias2)
        logits = tf.matmul(tf.reduce_mean(features, axis=[1, 2]), weights) + bias
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    def training_step(loss, count):
        # kiln-bench's training steps: a GradientTape over the `count` parameters, then the Adam update of each
        # (at step 10, as the adam workload); tf.function(jit_compile=True) compiles the whole of it.
        def step(*arguments):
            parameters = list(arguments[:count])
            with tf.GradientTape() as tape:
                tape.watch(parameters)
                value = loss(parameters, *arguments[3 * count:])
            gradients = tape.gradient(value, parameters)
            updated = [adam(p, g, m, v) for p, g, m, v in
                       zip(parameters, gradients, arguments[count:2 * count], arguments[2 * count:3 * count])]
            return (value, *(u[0] for u in updated), *(u[1] for u in updated), *(u[2] for u in updated))
        return step

    def gru_step(h, x, w, u, b):
        # kiln-bench's gru_step: gates z, r and the candidate from the input's and the state's products.
        hidden = h.shape[-1]
        from_input, from_state = tf.matmul(x, w) + b, tf.matmul(h, u)
        z = tf.sigmoid(from_input[:, :hidden] + from_state[:, :hidden])
        r = tf.sigmoid(from_input[:, hidden:2 * hidden] + from_state[:, hidden:2 * hidden])
        candidate = tf.tanh(from_input[:, 2 * hidden:] + r * from_state[:, 2 * hidden:])
        return candidate + z * (h - candidate)

    def rnn(xs, h0, w, u, b):
        # kiln-bench's rnn_body: tf.scan over the steps (a tf.while_loop), every state stacked.
        states = tf.scan(lambda h, x: gru_step(h, x, w, u, b), xs, initializer=h0)
        return states[-1], states

    def rnn_loss(parameters, xs, h0):
        # kiln-bench's rnn-train loss: the mean square of every step's state of the rnn workload's GRU.
        return tf.reduce_mean(tf.square(rnn(xs, h0, *parameters)[1]))

    def solver(a, b):
        # kiln-bench's solver_body: conjugate gradients with tf.while_loop until |r| <= 1e-5 |b|.
        def dot(p, q):
            return tf.reduce_sum(p * q)

        threshold = dot(b, b) * (1e-5 * 1e-5)

        def condition(x, r, p, residual, iterations):
            return tf.logical_and(residual > threshold, iterations < 1000)

        def body(x, r, p, residual, iterations):
            ap = tf.linalg.matvec(a, p)
            alpha = residual / dot(p, ap)
            following = r - alpha * ap
            following_residual = dot(following, following)
            return (x + alpha * p, following, following + (following_residual / residual) * p, following_residual,
                    iterations + 1)

        x, _, _, _, iterations = tf.while_loop(condition, body, (tf.zeros_like(b), b, b, dot(b, b), tf.constant(0)))
        return x, iterations

    def decode(x, w1, b1, w2, b2):
        # kiln-bench's decode_body: a transformer MLP on a few tokens, gelu in the tanh form.
        return tf.matmul(tf.nn.gelu(tf.matmul(x, w1) + b1, approximate=True), w2) + b2

    def set_threads(threads: int) -> str:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        return (f"intra-op {tf.config.threading.get_intra_op_parallelism_threads()}, "
                f"inter-op {tf.config.threading.get_inter_op_parallelism_threads()}")

    where = "/GPU:0" if device == "cuda" else "/CPU:0"
    if device == "cuda" and not tf.config.list_physical_devices("GPU"):
        raise RuntimeError(f"tensorflow {tf.__version__} sees no GPU")

    def from_numpy(array: np.ndarray):
        with tf.device(where):
            # Eager tf.constant lives in host memory; tf.identity copies it to the GPU.
            return tf.identity(tf.constant(array)) if device == "cuda" else tf.constant(array)

    @contextlib.contextmanager
    def precision(tf32: bool | None):
        if tf32 is None:
            yield
            return
        saved = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(bool(tf32))
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(saved)

    def wait(outputs) -> None:
        # Waits for pending device work without copying the outputs (.numpy()
        # would copy them: 64 MiB for gelu, which kiln does not pay). The
        # article's loop omits any wait.
        tf.test.experimental.sync_devices()

    return common.Peer(
        system="tensorflow",
        label="TF",
        version=lambda: f"tensorflow {tf.__version__}",
        set_threads=set_threads,
        from_numpy=from_numpy,
        to_numpy=lambda tensor: tensor.numpy(),
        to_bf16=lambda tensor: tf.cast(tensor, tf.bfloat16),
        to_f32=lambda tensor: tf.cast(tensor, tf.float32),
        wait=wait,
        device=where,
        precision=precision,
        modes={
            "standard": common.Mode("tf.function", lambda body: tf.function(body)),
            "jit": common.Mode("tf.function(jit_compile=True)", lambda body: tf.function(body, jit_compile=True)),
        },
        bodies=dict(seed=seed, add_one=lambda x: x + 1, gelu=gelu, gelu_erf=gelu_erf, softmax=softmax, layernorm=layernorm, adam=adam, attention=attention,
                    block=block, stem=stem, conv=conv, pool=pool, depthwise=depthwise,
                    mlp_train=training_step(mlp_loss, 6), block_train=training_step(block_loss, 12), rnn=rnn,
                    rnn_train=training_step(rnn_loss, 3),
                    cnn_train=training_step(cnn_loss, 6), solver=solver, decode=decode),
    )


if __name__ == "__main__":
    common.main(make_peer)
