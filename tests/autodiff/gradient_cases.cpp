// The cases that check every derivative rule against finite differences (gradient_check.h): each names the ops
// whose rules it exercises. Inputs are random, of odd sizes, away from zero and from where a derivative is not
// defined (kinks, ties, jumps); shapes broadcast, and rank 0 and empty tensors appear.

#include "autodiff/gradient_check.h"

#include <functional>

namespace kiln::testing {
namespace {

using Tensors = std::vector<Tensor>;

GradientCase unary(const std::string& op, Tensor (*function)(const Tensor&, Location), Tensor input) {
  return {op + " " + input.shape().to_string(),
          {op},
          [function](const Tensors& x) { return Tensors{function(x[0], Location::current())}; },
          {std::move(input)}};
}

GradientCase binary(const std::string& op, Tensor (*function)(const Tensor&, const Tensor&, Location), Tensor a,
                    Tensor b) {
  return {op + " " + a.shape().to_string() + " " + b.shape().to_string(),
          {op},
          [function](const Tensors& x) { return Tensors{function(x[0], x[1], Location::current())}; },
          {std::move(a), std::move(b)}};
}

Tensor input(const Shape& shape, std::uint64_t seed) { return random_input(shape, seed); }
Tensor positive(const Shape& shape, std::uint64_t seed) { return random_input(shape, seed, 0.5, 2.0, false); }

// Indices given as whole f64 numbers, as every input of a case is: rounded, the differences' steps leave them as
// they are, and round has no derivative. (An index tensor made inside the function would be a capture, which the
// compiled tests' reference evaluation does not take.)
Tensor integers(const Tensor& x, DType dtype = DType::i64) { return cast(round(x), dtype); }

void add_elementwise(std::vector<GradientCase>& cases) {
  using Unary = Tensor (*)(const Tensor&, Location);
  const std::vector<std::pair<std::string, Unary>> any_sign = {
      {"neg", kiln::neg},         {"abs", kiln::abs},  {"square", kiln::square}, {"relu", kiln::relu},
      {"sin", kiln::sin},         {"cos", kiln::cos},  {"exp", kiln::exp},       {"tanh", kiln::tanh},
      {"sigmoid", kiln::sigmoid}, {"erf", kiln::erf},  {"erfc", kiln::erfc},     {"expm1", kiln::expm1},
      {"atan", kiln::atan},       {"sign", kiln::sign}};
  std::uint64_t seed = 100;
  auto next = [&seed] { return ++seed; };
  for (const auto& [op, function] : any_sign) {
    cases.push_back(unary(op, function, input({3, 5}, next())));
    cases.push_back(unary(op, function, input({}, next())));
  }
  const std::vector<std::pair<std::string, Unary>> positive_only = {
      {"log", kiln::log}, {"sqrt", kiln::sqrt}, {"rsqrt", kiln::rsqrt}, {"log1p", kiln::log1p}};
  for (const auto& [op, function] : positive_only) {
    cases.push_back(unary(op, function, positive({7}, next())));
    cases.push_back(unary(op, function, positive({0, 3}, next())));
  }
  // Steps: no derivative, away from the jumps (x + 0.5 off the integers by more than the difference step).
  for (const auto& [op, function] : std::vector<std::pair<std::string, Unary>>{
           {"floor", kiln::floor}, {"ceil", kiln::ceil}, {"round", kiln::round}}) {
    const Tensor near_quarters = floor(input({5}, next()) * 4) + 0.25;
    cases.push_back(unary(op, function, near_quarters));
  }

  using Binary = Tensor (*)(const Tensor&, const Tensor&, Location);
  const std::vector<std::pair<std::string, Binary>> arithmetic = {
      {"add", kiln::add},         {"sub", kiln::sub},         {"mul", kiln::mul},          {"div", kiln::div},
      {"maximum", kiln::maximum}, {"minimum", kiln::minimum}, {"copysign", kiln::copysign}};
  for (const auto& [op, function] : arithmetic) {
    cases.push_back(binary(op, function, input({4, 1, 3}, next()), input({5, 3}, next())));
    cases.push_back(binary(op, function, input({}, next()), input({3}, next())));
  }
  cases.push_back(binary("pow", kiln::pow, positive({4, 1, 3}, next()), input({5, 3}, next())));
  cases.push_back(binary("pow", kiln::pow, positive({}, next()), input({}, next())));
  // remainder and fmod away from their jumps (x / y off the integers).
  const Tensor dividend = input({2, 5}, next()) * 3, divisor = positive({5}, next());
  const Tensor off_jumps = (floor(dividend / divisor) + 0.5) * divisor;
  cases.push_back(binary("remainder", kiln::remainder, off_jumps, divisor));
  cases.push_back(binary("fmod", kiln::fmod, off_jumps, -divisor));
  cases.push_back({"where",
                   {"where"},
                   [](const Tensors& x) { return Tensors{where(x[0] > x[1], x[0] * x[1], sin(x[1]))}; },
                   {input({4, 1}, next()), input({3}, next())}});
  cases.push_back({"where with a constant branch",
                   {"where"},
                   [](const Tensors& x) { return Tensors{where(x[0] > 0, x[0], 2.0)}; },
                   {input({6}, next())}});
  cases.push_back({"cast f64 -> f64 through i32 and f32",
                   {"cast"},
                   [](const Tensors& x) {
                     // A cast to an integer has no derivative; one between floats carries it.
                     return Tensors{cast(cast(x[0], DType::f32), DType::f64) *
                                    cast(cast(x[0], DType::i32), DType::f64)};
                   },
                   {floor(input({5}, next()) * 8) + 0.5},
                   1e-3,
                   1e-3});
  cases.push_back({"comparisons and logical ops, no derivative",
                   {"lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or", "logical_not"},
                   [](const Tensors& x) {
                     const Tensor a = x[0] < x[1], b = x[0] >= x[1], c = x[0] == x[1] || x[0] != x[1];
                     const Tensor d = logical_and(x[0] <= x[1], !(x[0] > x[1]));
                     return Tensors{where(logical_or(a && c, b && d), x[0], x[1])};
                   },
                   {input({5}, next()), input({5}, next())}});
}

void add_reductions(std::vector<GradientCase>& cases) {
  std::uint64_t seed = 300;
  auto next = [&seed] { return ++seed; };
  using Reduction = Tensor (*)(const Tensor&, Axes, bool, Location);
  for (const auto& [op, function] :
       std::vector<std::pair<std::string, Reduction>>{{"reduce_sum", kiln::reduce_sum},
                                                      {"reduce_mean", kiln::reduce_mean},
                                                      {"reduce_max", kiln::reduce_max},
                                                      {"reduce_min", kiln::reduce_min},
                                                      {"reduce_prod", kiln::reduce_prod}}) {
    for (bool keepdims : {false, true})
      cases.push_back({op + " over axes 0 and 2" + (keepdims ? ", keepdims" : ""),
                       {op},
                       [function, keepdims](const Tensors& x) {
                         return Tensors{function(x[0], Axes{0, 2}, keepdims, Location::current())};
                       },
                       {input({3, 5, 2}, next())}});
    cases.push_back(
        {op + " of everything",
         {op},
         [function](const Tensors& x) { return Tensors{function(x[0], Axes(), false, Location::current())}; },
         {input({7}, next())}});
    cases.push_back(
        {op + " of a scalar over no axes",
         {op},
         [function](const Tensors& x) { return Tensors{function(x[0], Axes(), false, Location::current())}; },
         {input({}, next())}});
  }
  cases.push_back({"reduce_sum of an empty axis",
                   {"reduce_sum"},
                   [](const Tensors& x) { return Tensors{reduce_sum(x[0], 0)}; },
                   {input({0, 3}, next())}});
  // Products with zeros: the derivative is the product of the others, no division.
  cases.push_back({"reduce_prod with one zero",
                   {"reduce_prod"},
                   [](const Tensors& x) { return Tensors{reduce_prod(x[0], 1)}; },
                   {from_vector<double>({0.5, 0, 2, -1.5, 3, 0.25, 0, 0, 4}, {3, 3})}});
  cases.push_back({"argmax and argmin, no derivative",
                   {"argmax", "argmin"},
                   [](const Tensors& x) {
                     return Tensors{take_along_axis(x[0], argmax(x[0], 1, true), 1) +
                                    take_along_axis(x[0], argmin(x[0], 1, true), 1) * 2};
                   },
                   {input({4, 5}, next())}});

  using Scan = Tensor (*)(const Tensor&, std::int64_t, ScanOptions, Location);
  for (const auto& [op, function] : std::vector<std::pair<std::string, Scan>>{
           {"cumsum", kiln::cumsum}, {"cumprod", kiln::cumprod}, {"cummax", kiln::cummax}, {"cummin", kiln::cummin}})
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true})
        cases.push_back({op + (exclusive ? " exclusive" : "") + (reverse ? " reverse" : ""),
                         {op},
                         [function, exclusive, reverse](const Tensors& x) {
                           Tensor y =
                               function(x[0], 1, {.exclusive = exclusive, .reverse = reverse}, Location::current());
                           // An exclusive extreme scan starts at -inf or +inf: keep the finite part.
                           if (exclusive) y = slice(y, {.start = {0, reverse ? 0 : 1}, .stop = {3, reverse ? 6 : 7}});
                           return Tensors{y};
                         },
                         {input({3, 7, 2}, next())}});
  cases.push_back({"cumprod with zeros",
                   {"cumprod"},
                   [](const Tensors& x) { return Tensors{cumprod(x[0], 0)}; },
                   {from_vector<double>({0.5, 0, 2, -1.5, 0, 3, 0.75}, {7})}});
  cases.push_back({"cumsum of rank 1",
                   {"cumsum"},
                   [](const Tensors& x) { return Tensors{cumsum(x[0], 0)}; },
                   {input({1}, next())}});

  cases.push_back({"sort ascending",
                   {"sort"},
                   [](const Tensors& x) { return Tensors{sort(x[0], 0) * x[0]}; },
                   {input({5, 3}, next())}});
  cases.push_back(
      {"sort descending, argsort",
       {"sort", "argsort"},
       [](const Tensors& x) { return Tensors{sort(x[0], -1, true) + take_along_axis(x[0], argsort(x[0], -1), -1)}; },
       {input({2, 6}, next())}});
  cases.push_back(
      {"top_k", {"top_k"}, [](const Tensors& x) { return Tensors{top_k(x[0], 3).values}; }, {input({4, 7}, next())}});
}

void add_matmuls(std::vector<GradientCase>& cases) {
  std::uint64_t seed = 500;
  auto next = [&seed] { return ++seed; };
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      const Shape a = transpose_a ? Shape{4, 3} : Shape{3, 4}, b = transpose_b ? Shape{5, 4} : Shape{4, 5};
      cases.push_back({std::string("matmul") + (transpose_a ? " a^T" : " a") + (transpose_b ? " b^T" : " b"),
                       {"matmul"},
                       [transpose_a, transpose_b](const Tensors& x) {
                         return Tensors{matmul(x[0], x[1], {.transpose_a = transpose_a, .transpose_b = transpose_b})};
                       },
                       {input(a, next()), input(b, next())}});
    }
  cases.push_back({"matmul with batches broadcast",
                   {"matmul"},
                   [](const Tensors& x) { return Tensors{matmul(x[0], x[1])}; },
                   {input({2, 1, 3, 4}, next()), input({5, 4, 2}, next())}});
  cases.push_back(
      {"matmul batched with transposes",
       {"matmul"},
       [](const Tensors& x) { return Tensors{matmul(x[0], x[1], {.transpose_a = true, .transpose_b = true})}; },
       {input({3, 4, 2}, next()), input({3, 5, 4}, next())}});
  // A weight under a batched operand (a dense layer over [batch, tokens, width]): its adjoint is one product whose
  // depth runs through the batch (transpose_matmul), with the weight stored either way; an empty batch too.
  for (bool transpose_b : {false, true})
    for (const Shape& a : {Shape{2, 3, 4}, Shape{2, 1, 3, 4}, Shape{0, 3, 4}})
      cases.push_back(
          {std::string("matmul of a batched operand by a weight") + (transpose_b ? "^T " : " ") + a.to_string(),
           {"matmul"},
           [transpose_b](const Tensors& x) { return Tensors{matmul(x[0], x[1], {.transpose_b = transpose_b})}; },
           {input(a, next()), input(transpose_b ? Shape{5, 4} : Shape{4, 5}, next())}});
  cases.push_back({"matmul of vectors",
                   {"matmul"},
                   [](const Tensors& x) {
                     return Tensors{matmul(x[0], x[1]), matmul(x[1], x[2])};
                   },
                   {input({3}, next()), input({3, 4}, next()), input({4}, next())}});
  cases.push_back({"matmul with an empty contraction",
                   {"matmul"},
                   [](const Tensors& x) { return Tensors{matmul(x[0], x[1])}; },
                   {input({3, 0}, next()), input({0, 2}, next())}});
}

void add_shape_ops(std::vector<GradientCase>& cases) {
  std::uint64_t seed = 700;
  auto next = [&seed] { return ++seed; };
  cases.push_back({"reshape, expand_dims, squeeze",
                   {"reshape", "expand_dims", "squeeze"},
                   [](const Tensors& x) {
                     return Tensors{squeeze(expand_dims(reshape(x[0], {5, 3}), 1) * 2, 1)};
                   },
                   {input({3, 5}, next())}});
  cases.push_back({"transpose",
                   {"transpose"},
                   [](const Tensors& x) {
                     return Tensors{transpose(x[0], {2, 0, 1}) * transpose(x[1])};
                   },
                   {input({2, 3, 5}, next()), input({3, 2}, next())}});
  cases.push_back({"broadcast_to",
                   {"broadcast_to"},
                   [](const Tensors& x) {
                     return Tensors{sin(broadcast_to(x[0], Shape{4, 3, 5}))};
                   },
                   {input({3, 1}, next())}});
  cases.push_back({"slice with steps",
                   {"slice"},
                   [](const Tensors& x) {
                     return Tensors{slice(x[0], {.start = {1, 7}, .stop = {6, 0}, .step = {2, -3}}),
                                    slice(x[0], {.start = {4}, .step = {-1}})};
                   },
                   {input({7, 9}, next())}});
  // Strided windows of one value, summed (the adjoints meet in one phase layout where their steps agree): every
  // phase of step 3 and 2, crops (10 and 9 are no multiples of 3 and 2), one element along a strided axis, a step
  // beyond the axis, and a reversed and a differently strided window that share no layout with the others.
  cases.push_back({"strided slices of one value",
                   {"slice"},
                   [](const Tensors& x) {
                     Tensor sum = slice(x[0], {.start = {0, 1}, .stop = {9, 9}, .step = {3, 2}});
                     sum = sum + slice(x[0], {.start = {1, 0}, .stop = {10, 8}, .step = {3, 2}});
                     sum = sum + 2.0 * slice(x[0], {.start = {2, 2}, .stop = {10, 9}, .step = {3, 2}});
                     sum = sum + slice(x[0], {.start = {9, 8}, .stop = {0, 0}, .step = {-3, -2}});
                     return Tensors{sum * slice(x[0], {.start = {3, 1}, .stop = {9, 9}, .step = {2, 2}}),
                                    slice(x[0], {.start = {5, 7}, .stop = {6, 8}, .step = {4, 5}}),
                                    slice(x[0], {.start = {1, 3}, .step = {20, 1}})};
                   },
                   {input({10, 9}, next())}});
  cases.push_back({"slice of one element, empty slice",
                   {"slice"},
                   [](const Tensors& x) {
                     return Tensors{slice(x[0], {.start = {2}, .stop = {3}}), slice(x[0], {.start = {3}, .stop = {3}})};
                   },
                   {input({5}, next())}});
  cases.push_back({"concat",
                   {"concat"},
                   [](const Tensors& x) {
                     return Tensors{concat({x[0], ones({2, 3}, DType::f64), x[1] * x[1]}, 0)};
                   },
                   {input({3, 3}, next()), input({1, 3}, next())}});
  cases.push_back({"gather with repeated and negative indices",
                   {"gather"},
                   [](const Tensors& x) { return Tensors{gather(x[0], integers(x[1]), 1)}; },
                   {input({2, 4, 3}, next()), from_vector<double>({0, 2, -1, 2, 0, 2}, {2, 3})}});
  cases.push_back({"take_along_axis with repeats",
                   {"take_along_axis"},
                   [](const Tensors& x) { return Tensors{take_along_axis(x[0], integers(x[1], DType::i32), 1)}; },
                   {input({2, 5, 3}, next()), from_vector<double>({0, 0, 4, -1, 2, 1, 1, 1, 3, 3, 0, 2}, {2, 2, 3})}});
  cases.push_back({"scatter_add",
                   {"scatter_add"},
                   [](const Tensors& x) { return Tensors{scatter_add(x[0], integers(x[2]), x[1] * x[1], 0)}; },
                   {input({4, 3}, next()), input({4, 3}, next()), from_vector<double>({1, 3, 1, -1}, {4})}});
  cases.push_back(
      {"iota and constants, no derivative",
       {"iota", "constant"},
       [](const Tensors& x) { return Tensors{x[0] * cast(arange(5), DType::f64) + full({5}, 2.0, DType::f64)}; },
       {input({5}, next())}});
}

void add_composites(std::vector<GradientCase>& cases) {
  std::uint64_t seed = 900;
  auto next = [&seed] { return ++seed; };
  cases.push_back({"softmax, log_softmax",
                   {},
                   [](const Tensors& x) {
                     return Tensors{nn::softmax(x[0]), nn::log_softmax(x[0], 0)};
                   },
                   {input({3, 5}, next())}});
  cases.push_back({"layer_norm",
                   {},
                   [](const Tensors& x) { return Tensors{nn::layer_norm(x[0], x[1], x[2])}; },
                   {input({3, 5}, next()), input({5}, next()), input({5}, next())}});
  cases.push_back({"reduce_logsumexp",
                   {},
                   [](const Tensors& x) { return Tensors{reduce_logsumexp(x[0], 1)}; },
                   {input({3, 5}, next())}});
  cases.push_back({"conv2d same, strided",
                   {},
                   [](const Tensors& x) {
                     return Tensors{nn::conv2d(x[0], x[1], {.strides = {2, 1}, .padding = nn::Padding::same})};
                   },
                   {input({2, 5, 4, 3}, next()), input({3, 3, 3, 2}, next())}});
  // Stride 1: the input's gradient is the transposed convolution, one product of the cotangent's windows.
  cases.push_back(
      {"conv2d same, valid, dilated, padded unevenly; conv1d",
       {},
       [](const Tensors& x) {
         return Tensors{nn::conv2d(x[0], x[1], {.padding = nn::Padding::same}),
                        nn::conv2d(x[0], x[1], {.dilations = {1, 2}}),
                        nn::conv2d(x[0], x[1], {.explicit_padding = std::array<nn::PaddingPair, 2>{{{0, 2}, {1, 0}}}}),
                        nn::conv1d(x[2], x[3], {.padding = nn::Padding::same})};
       },
       {input({2, 5, 6, 3}, next()), input({3, 2, 3, 2}, next()), input({2, 7, 3}, next()), input({3, 3, 4}, next())}});
  // Groups of two channels (a convolution per group) and a depthwise convolution with two filters per channel.
  cases.push_back({"conv2d grouped and depthwise",
                   {},
                   [](const Tensors& x) {
                     return Tensors{nn::conv2d(x[0], x[1], {.padding = nn::Padding::same}),
                                    nn::conv2d(x[0], x[1], {.strides = {2, 1}}),
                                    nn::conv2d(x[0], x[2], {.strides = {1, 2}, .padding = nn::Padding::same})};
                   },
                   {input({2, 5, 6, 4}, next()), input({3, 2, 2, 4}, next()), input({3, 3, 1, 8}, next())}});
  // More groups than a product each (api/convolution.cpp): one batched product of the windows.
  cases.push_back({"conv2d in 17 groups",
                   {},
                   [](const Tensors& x) { return Tensors{nn::conv2d(x[0], x[1], {.padding = nn::Padding::same})}; },
                   {input({1, 3, 4, 34}, next()), input({2, 2, 2, 17}, next())}});
  cases.push_back({"max_pool2d, avg_pool2d",
                   {},
                   [](const Tensors& x) {
                     return Tensors{
                         nn::max_pool2d(x[0], {.window = {2, 2}}),
                         nn::avg_pool2d(x[0], {.window = {3, 3}, .strides = {{2, 2}}, .padding = nn::Padding::same})};
                   },
                   {input({2, 5, 5, 3}, next())}});
  // Same padding (1, 2) and (0, 1) around windows of stride 2: traced, the padding's crop of the phases' sum starts
  // at phase 1 and at phase 0 (slice_of_phases).
  cases.push_back({"pools cropping their phases",
                   {},
                   [](const Tensors& x) {
                     const auto strides = std::array<std::int64_t, 2>{2, 2};
                     return Tensors{
                         nn::avg_pool2d(x[0], {.window = {5, 5}, .strides = strides, .padding = nn::Padding::same}),
                         nn::max_pool2d(x[0], {.window = {3, 3}, .strides = strides, .padding = nn::Padding::same})};
                   },
                   {input({1, 6, 8, 2}, next())}});
  cases.push_back({"cross entropies",
                   {},
                   [](const Tensors& x) {
                     return Tensors{nn::sparse_softmax_cross_entropy(x[0], integers(x[2])),
                                    nn::sigmoid_cross_entropy(x[0], nn::sigmoid(x[1]))};
                   },
                   {input({3, 5}, next()), input({3, 5}, next()), from_vector<double>({1, 0, 4}, {3})}});
  cases.push_back({"gelu, silu, softplus, rms_norm",
                   {},
                   [](const Tensors& x) {
                     return Tensors{nn::gelu(x[0]), nn::silu(x[0]), nn::softplus(x[0]), nn::rms_norm(x[0])};
                   },
                   {input({4, 3}, next())}});
}

// Control flow: derivatives of regions (src/autodiff/control_rules.h). Predicates sit far from their switching
// point, so that the differences' steps keep the branch taken. A while_loop has a forward-mode derivative only
// (tests/autodiff/control_flow_test.cpp).
void add_control_flow(std::vector<GradientCase>& cases, const std::function<std::uint64_t()>& next) {
  for (const double side : {1.0, -1.0}) {
    cases.push_back({side > 0 ? "cond, true branch, tuple and capture" : "cond, false branch, tuple and capture",
                     {"cond"},
                     [side](const Tensors& x) {
                       const Tensor scale = x[2];  // captured by both branches
                       const auto [first, second] = cond(
                           reduce_sum(x[0]) * side > -100.0,
                           [&](const Tensor& a, const Tensor& b) {
                             return std::tuple{sin(a) * b * scale, reduce_sum(a * b, {0})};
                           },
                           [&](const Tensor& a, const Tensor& b) {
                             return std::tuple{a / (b * b + 1.0), reduce_sum(exp(a), {0}) * scale};
                           },
                           x[0] * side + (side < 0 ? 1000.0 : 0.0), x[1]);
                       return Tensors{first, second};
                     },
                     {input({3, 4}, next()), input({4}, next()), input({}, next())}});
  }
  cases.push_back({"switch_case, clamped index, rank 0",
                   {"cond"},
                   [](const Tensors& x) {
                     const std::tuple branches{[](const Tensor& a) { return a * a * a; },
                                               [](const Tensor& a) { return tanh(a); },
                                               [](const Tensor& a) { return a * (a + 1.0); }};
                     return Tensors{switch_case(integers(x[1], DType::i32), branches, x[0])};
                   },
                   {input({}, next()), from_vector<double>({7}, Shape())}});
  for (const bool reverse : {false, true}) {
    cases.push_back({reverse ? "scan reversed, recurrent cell with captured weights" : "scan, recurrent cell",
                     {"scan_loop", "result"},
                     [reverse](const Tensors& x) {
                       const Tensor weights = x[1], bias = x[3];
                       const auto [last, outputs] = scan(
                           [&](const Tensor& state, const Tensor& element) {
                             const Tensor next = tanh(matmul(state, weights) + element + bias);
                             return std::pair{next, std::tuple{next * state, reduce_sum(element)}};
                           },
                           x[0], x[2], {.reverse = reverse});
                       return Tensors{last, std::get<0>(outputs), std::get<1>(outputs)};
                     },
                     {input({2, 3}, next()), input({3, 3}, next()), input({5, 2, 3}, next()), input({3}, next())}});
  }
  cases.push_back(
      {"fori_loop of static bounds: integer and float carries",
       {"scan_loop"},
       [](const Tensors& x) {
         const auto [count, value] = fori_loop(
             0, 4,
             [&](const Tensor& i, const std::pair<Tensor, Tensor>& state) {
               return std::pair{state.first + 1, state.second * cos(state.second) + cast(i, DType::f64) * x[1]};
             },
             std::pair{integers(x[2], DType::i32), x[0]});
         return Tensors{value, cast(count, DType::f64) * x[0]};
       },
       {input({4}, next()), input({4}, next()), from_vector<double>({2}, Shape())}});
  cases.push_back({"scan of length 0, and a cond in a scan",
                   {"scan_loop", "cond"},
                   [](const Tensors& x) {
                     const auto [empty_last, empty_outputs] = scan(
                         [](const Tensor& state, const Tensor& element) {
                           return std::pair{state * element, state + element};
                         },
                         x[0], x[1]);
                     const auto [last, outputs] = scan(
                         [](const Tensor& state, const Tensor& element) {
                           const Tensor next = cond(
                               element > 0.0, [](const Tensor& s, const Tensor& e) { return s * e; },
                               [](const Tensor& s, const Tensor& e) { return s - sin(e); }, state, element);
                           return std::pair{next, next * next};
                         },
                         x[0], x[2]);
                     return Tensors{empty_last, empty_outputs, last, outputs};
                   },
                   {input({}, next()), input({0}, next()), input({6}, next())}});
}

}  // namespace

std::vector<GradientCase> gradient_cases() {
  std::vector<GradientCase> cases;
  add_elementwise(cases);
  add_reductions(cases);
  add_matmuls(cases);
  add_shape_ops(cases);
  add_composites(cases);
  std::uint64_t seed = 900;
  add_control_flow(cases, [&seed] { return ++seed; });
  return cases;
}

std::string gradient_case_test_name(const ::testing::TestParamInfo<std::size_t>& info) {
  std::string name = gradient_cases().at(info.param).name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return std::to_string(info.param) + "_" + name;
}

}  // namespace kiln::testing
