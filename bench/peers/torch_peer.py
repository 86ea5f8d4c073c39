"""PyTorch: eager vs torch.compile on kiln-bench's workloads: Inductor's
C++/OpenMP backend on the CPU, its Triton backend on the first GPU
(`--device cuda`). The training workloads run autograd and torch.optim.Adam
(Training below); the others run under inference_mode."""

from __future__ import annotations

import contextlib

import numpy as np

from bench.peers import common


def make_peer(device: str = "cpu") -> common.Peer:
    import torch
    import torch.nn.functional as F

    def seed(x, y):
        z = torch.matmul(x, y)
        z = z + torch.sin(z)
        z = torch.relu(z)
        return torch.sum(z)

    def gelu(x):
        return F.gelu(x, approximate="tanh")

    def gelu_erf(x):
        return F.gelu(x, approximate="none")

    def softmax(x):
        return torch.softmax(x, dim=-1)

    def layernorm(x, gamma, beta):
        return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)

    def adam(parameter, gradient, m, v):
        learning_rate, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
        # Mixed precision (adam-bf16): a bf16 parameter and gradient, f32 moments; the update in f32.
        wide_parameter, gradient = parameter.to(m.dtype), gradient.to(m.dtype)
        correction1, correction2 = 1 - beta1**10, 1 - beta2**10
        new_m = beta1 * m + (1 - beta1) * gradient
        new_v = beta2 * v + (1 - beta2) * (gradient * gradient)
        step = (new_m / correction1) / (torch.sqrt(new_v / correction2) + epsilon)
        result = wide_parameter - learning_rate * step
        return result.to(parameter.dtype), new_m, new_v

    def attention(q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def block(x, wq, wk, wv, wo, w1, b1, w2, b2, gamma1, beta1, gamma2, beta2):
        # kiln-bench's block_body: a pre-norm transformer block, heads of 64.
        tokens, width = x.shape
        heads = width // 64

        def split_heads(t):
            return t.reshape(tokens, heads, 64).transpose(0, 1)

        h = layernorm(x, gamma1, beta1)
        q, k, v = split_heads(h @ wq), split_heads(h @ wk), split_heads(h @ wv)
        probabilities = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.125, dim=-1)
        attended = torch.matmul(probabilities, v).transpose(0, 1).reshape(tokens, width)
        x1 = x + attended @ wo
        m = F.gelu(layernorm(x1, gamma2, beta2) @ w1 + b1, approximate="tanh")
        return x1 + m @ w2 + b2

    def conv(x, filters, bias):
        # kiln-bench's conv_body on NHWC images: PyTorch convolves NCHW by OIHW, so the data is viewed as
        # channels-last NCHW (no copy) and the result viewed back.
        y = F.conv2d(x.permute(0, 3, 1, 2), filters.permute(3, 2, 0, 1), bias, padding="same")
        return torch.relu(y.permute(0, 2, 3, 1))

    def same_padding(size, window, stride):
        # TensorFlow's same padding of one axis (before, after): the odd element goes after. PyTorch's padding=
        # pads both sides alike, so strided windows are padded explicitly.
        total = max((-(-size // stride) - 1) * stride + window - size, 0)
        return total // 2, total - total // 2

    def stem(x, filters, bias):
        # kiln-bench's stem_body: a 7x7 convolution, stride 2, same padding (zeros, on the channels-last NCHW view).
        (top, bottom), (left, right) = same_padding(x.shape[1], 7, 2), same_padding(x.shape[2], 7, 2)
        padded = F.pad(x.permute(0, 3, 1, 2), (left, right, top, bottom))
        y = F.conv2d(padded, filters.permute(3, 2, 0, 1), bias, stride=2)
        return torch.relu(y.permute(0, 2, 3, 1))

    def pool(x):
        # kiln-bench's pool_body: a 3x3 max pool of NHWC images, stride 2, same padding: padded with -inf first,
        # on the channels-last NCHW view.
        (top, bottom), (left, right) = same_padding(x.shape[1], 3, 2), same_padding(x.shape[2], 3, 2)
        padded = F.pad(x.permute(0, 3, 1, 2), (left, right, top, bottom), value=float("-inf"))
        return F.max_pool2d(padded, 3, 2).permute(0, 2, 3, 1)

    def depthwise(x, filters, bias):
        # kiln-bench's depthwise_body on the channels-last NCHW view, as conv: a group per channel, OIHW filters
        # [channels, 1, 3, 3].
        y = F.conv2d(x.permute(0, 3, 1, 2), filters.permute(3, 2, 0, 1), bias, padding="same", groups=x.shape[-1])
        return torch.relu(y.permute(0, 2, 3, 1))

    def mlp_loss(parameters, x, labels):
        # kiln-bench's mlp-train loss: 3 linear layers, relu between them, mean softmax cross-entropy.
        activations = x
        for layer in range(3):
            activations = activations @ parameters[2 * layer] + parameters[2 * layer + 1]
            if layer < 2:
                activations = torch.relu(activations)
        return F.cross_entropy(activations, labels.long())

    def block_loss(parameters, x):
        # kiln-bench's block-train loss: the mean square of the block's output.
        return torch.mean(torch.square(block(x, *parameters)))

    def cnn_loss(parameters, images, labels):
        # kiln-bench's cnn-train loss: conv, pool, conv, the mean over the positions, a dense layer, mean softmax
        # cross-entropy.
        filters1, bias1, filters2, bias2, weights, bias = parameters
        features = conv(pool(conv(images, filters1, bias1)), filters2, bias2)
        return F.cross_entropy(torch.mean(features, dim=(1, 2)) @ weights + bias, labels.long())

    def gru_step(h, x, w, u, b):
        # kiln-bench's gru_step: gates z, r and the candidate from the input's and the state's products.
        hidden = h.shape[-1]
        from_input, from_state = x @ w + b, h @ u
        z = torch.sigmoid(from_input[:, :hidden] + from_state[:, :hidden])
        r = torch.sigmoid(from_input[:, hidden:2 * hidden] + from_state[:, hidden:2 * hidden])
        candidate = torch.tanh(from_input[:, 2 * hidden:] + r * from_state[:, 2 * hidden:])
        return candidate + z * (h - candidate)

    def rnn(xs, h0, w, u, b):
        # kiln-bench's rnn_body as a PyTorch user writes it: a Python loop over the steps (torch.compile traces it
        # unrolled), the states stacked.
        states, h = [], h0
        for x in xs:
            h = gru_step(h, x, w, u, b)
            states.append(h)
        return h, torch.stack(states)

    def rnn_loss(parameters, xs, h0):
        # kiln-bench's rnn-train loss: the mean square of every step's state of the rnn workload's GRU.
        return torch.mean(torch.square(rnn(xs, h0, *parameters)[1]))

    def solver(a, b):
        # kiln-bench's solver_body: conjugate gradients in a Python while loop until |r| <= 1e-5 |b| (its test reads
        # the residual each iteration: torch.compile breaks the graph there).
        threshold = torch.dot(b, b) * (1e-5 * 1e-5)
        x, r, p, residual, iterations = torch.zeros_like(b), b, b, torch.dot(b, b), 0
        while bool(residual > threshold) and iterations < 1000:
            ap = torch.mv(a, p)
            alpha = residual / torch.dot(p, ap)
            following = r - alpha * ap
            following_residual = torch.dot(following, following)
            x, r, p = x + alpha * p, following, following + (following_residual / residual) * p
            residual, iterations = following_residual, iterations + 1
        return x, torch.tensor(iterations, dtype=torch.int32)

    class Training:
        """A training workload as PyTorch users run one: the parameters as leaf tensors, loss.backward() and
        torch.optim.Adam(foreach=True), whose state starts at kiln-bench's inputs (step 9 done, so the call runs
        step 10's update, as kiln's). `make(compiled)` gives the callable of one mode: torch.compile over the
        forward and backward (AOTAutograd compiles both) and over the optimizer's step, or eager. Each call
        trains on, in place, as training does (kiln's step is a pure function of its inputs instead: the same
        work each call); the first call's results are copied out for the check against kiln's."""

        def __init__(self, loss, count):
            self.loss, self.count = loss, count

        def make(self, compiled: bool):
            state = {}

            def forward_backward(parameters, data):
                value = self.loss(parameters, *data)
                value.backward()
                return value

            def call(*arguments):
                count = self.count
                first_call = not state
                if first_call:
                    parameters = [argument.detach().clone().requires_grad_() for argument in arguments[:count]]
                    optimizer = torch.optim.Adam(parameters, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=True)
                    for parameter, m, v in zip(parameters, arguments[count:2 * count], arguments[2 * count:3 * count]):
                        optimizer.state[parameter] = {"step": torch.tensor(9.0), "exp_avg": m.clone(),
                                                      "exp_avg_sq": v.clone()}
                    state.update(parameters=parameters, optimizer=optimizer,
                                 forward_backward=torch.compile(forward_backward) if compiled else forward_backward,
                                 optimizer_step=torch.compile(optimizer.step) if compiled else optimizer.step)
                parameters, optimizer = state["parameters"], state["optimizer"]
                optimizer.zero_grad(set_to_none=True)
                value = state["forward_backward"](parameters, arguments[3 * count:])
                state["optimizer_step"]()
                results = [value.detach(), *(p.detach() for p in parameters),
                           *(optimizer.state[p]["exp_avg"] for p in parameters),
                           *(optimizer.state[p]["exp_avg_sq"] for p in parameters)]
                return [result.clone() for result in results] if first_call else results

            return call

    def decode(x, w1, b1, w2, b2):
        # kiln-bench's decode_body: a transformer MLP on a few tokens, gelu in the tanh form.
        return torch.matmul(F.gelu(torch.matmul(x, w1) + b1, approximate="tanh"), w2) + b2

    def set_threads(threads: int) -> str:
        torch.set_num_threads(threads)
        return f"intra-op {torch.get_num_threads()}, inter-op {torch.get_num_interop_threads()}"

    def no_grad(function):
        def call(*arguments):
            with torch.inference_mode():
                return function(*arguments)
        return call

    @contextlib.contextmanager
    def precision(tf32: bool | None):
        # TF32 in f32 matmuls (cuBLAS, and what Inductor generates): the
        # precision setting and the older allow_tf32 switch, set alike.
        if tf32 is None:
            yield
            return
        saved = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved[0])
            torch.backends.cuda.matmul.allow_tf32 = saved[1]

    def start_workload() -> None:
        # Each workload compiles afresh, as kiln does: without this, Dynamo
        # would recompile the same body at a second shape with dynamic
        # shapes (automatic_dynamic_shapes) and carry guards across workloads.
        torch._dynamo.reset()

    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device "
                               f"(built with CUDA {torch.version.cuda})")
        target = torch.device("cuda", 0)
        where = f"cuda:0 ({torch.cuda.get_device_name(0)})"
        from_numpy = lambda array: torch.from_numpy(array).to(target)  # noqa: E731
        to_numpy = lambda tensor: tensor.detach().cpu().numpy()  # noqa: E731
        wait = lambda outputs: torch.cuda.synchronize(target)  # noqa: E731
    else:
        where = "cpu"
        from_numpy = torch.from_numpy
        to_numpy = lambda tensor: tensor.detach().numpy()  # noqa: E731
        wait = lambda outputs: None  # noqa: E731 (CPU ops return when their work is done)

    return common.Peer(
        system="torch",
        label="torch",
        version=lambda: f"torch {torch.__version__}",
        set_threads=set_threads,
        from_numpy=from_numpy,
        to_numpy=to_numpy,
        to_bf16=lambda tensor: tensor.to(torch.bfloat16),
        to_f32=lambda tensor: tensor.float(),
        wait=wait,
        device=where,
        precision=precision,
        start_workload=start_workload,
        modes={
            "standard": common.Mode("eager", lambda body: body.make(False) if isinstance(body, Training)
                                    else no_grad(body)),
            "jit": common.Mode("torch.compile", lambda body: body.make(True) if isinstance(body, Training)
                               else no_grad(torch.compile(body))),
        },
        bodies=dict(seed=seed, add_one=lambda x: x + 1, gelu=gelu, gelu_erf=gelu_erf, softmax=softmax, layernorm=layernorm, adam=adam, attention=attention,
                    block=block, stem=stem, conv=conv, pool=pool, depthwise=depthwise,
                    mlp_train=Training(mlp_loss, 6), block_train=Training(block_loss, 12), rnn=rnn,
                    rnn_train=Training(rnn_loss, 3),
                    cnn_train=Training(cnn_loss, 6), solver=solver, decode=decode),
    )


if __name__ == "__main__":
    common.main(make_peer)
