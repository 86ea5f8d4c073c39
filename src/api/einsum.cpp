// einsum: Einstein summation written with kiln's primitives. Each operand first loses the axes only it needs (its
// repeated labels become a diagonal, a label found nowhere else is summed), then the operands are contracted in
// pairs, the pair with the smallest result first, each pair as one batched matmul (or, with nothing to contract, a
// broadcasting multiply), and the result is transposed into the output's order. So the JIT sees transposes, reshapes,
// reductions and matmuls, and fuses them as it fuses code written with them by hand.

#include "api/dispatch.h"

#include <kiln/error.h>
#include <kiln/ops.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {
namespace {

// A label is a letter's character code, or kEllipsisLabel + i for the i-th of the broadcast dimensions that `...`
// stands for, counted from the last (so operands whose ellipses cover fewer dimensions line up on the right).
using Label = int;
constexpr Label kEllipsisLabel = 256;

std::string label_name(Label label) {
  if (label < kEllipsisLabel) return std::string(1, static_cast<char>(label));
  return "... dimension " + std::to_string(label - kEllipsisLabel) + " from the end";
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// One side of the subscripts as written: letters, and where `...` stood (-1 if nowhere).
struct Term {
  std::vector<Label> letters;
  int ellipsis_at = -1;
};

class Parser {
 public:
  Parser(std::string_view subscripts, const Location& location) : location_(location) {
    for (char c : subscripts)
      if (c != ' ') text_ += c;
  }

  // The operands' terms and, if there is an `->`, the output's.
  void parse(std::vector<Term>& inputs, Term& output, bool& explicit_output) {
    const std::size_t arrow = text_.find("->");
    explicit_output = arrow != std::string::npos;
    const std::string left = text_.substr(0, arrow);
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = left.find(',', start);
      inputs.push_back(term(left.substr(start, comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (explicit_output) output = term(text_.substr(arrow + 2));
  }

 private:
  Term term(const std::string& text) const {
    Term result;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "...") == 0) {
        if (result.ellipsis_at >= 0) fail("'" + text + "' has more than one ellipsis");
        result.ellipsis_at = static_cast<int>(result.letters.size());
        i += 2;
      } else if (is_letter(text[i])) {
        result.letters.push_back(static_cast<unsigned char>(text[i]));
      } else {
        fail(std::string("unexpected character '") + text[i] + "' (labels are letters a-z and A-Z)");
      }
    }
    return result;
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw ValueError("einsum", "subscripts \"" + text_ + "\": " + why, location_);
  }

  std::string text_;
  Location location_;
};

// An operand (or an intermediate result) with a label for each of its axes.
struct Labelled {
  Tensor value;
  std::vector<Label> labels;
};

std::string describe_operand(std::size_t index, const Tensor& x) {
  return "operand " + std::to_string(index) + " (" + std::string(to_string(x.dtype())) + x.shape().to_string() + ")";
}

// The labels of a term for an operand of rank `rank`: its ellipsis covers the dimensions its letters leave.
std::vector<Label> expand(const Term& term, int rank, std::size_t index, const Tensor& x, const Location& location) {
  const int letters = static_cast<int>(term.letters.size());
  if (term.ellipsis_at < 0 ? letters != rank : letters > rank)
    throw ShapeError("einsum",
                     describe_operand(index, x) + " has rank " + std::to_string(rank) + " but its subscripts name " +
                         std::to_string(letters) + " axes" + (term.ellipsis_at >= 0 ? " besides the ellipsis" : ""),
                     location);
  std::vector<Label> labels(term.letters.begin(), term.letters.end());
  if (term.ellipsis_at >= 0) {
    const int covered = rank - letters;
    std::vector<Label> ellipsis;
    for (int i = covered - 1; i >= 0; --i) ellipsis.push_back(kEllipsisLabel + i);
    labels.insert(labels.begin() + term.ellipsis_at, ellipsis.begin(), ellipsis.end());
  }
  return labels;
}

// The elements whose labels `first` and `second` (axes of x) are equal: a diagonal along a new last axis. Both
// axes go to the end, are flattened into one of n * n elements, and every (n + 1)-th of those is kept.
Labelled diagonal(const Labelled& x, std::size_t first, std::size_t second, const Location& location) {
  std::vector<std::int64_t> permutation;
  std::vector<Label> labels;
  std::vector<std::int64_t> dims;
  for (std::size_t axis = 0; axis < x.labels.size(); ++axis) {
    if (axis == first || axis == second) continue;
    permutation.push_back(static_cast<std::int64_t>(axis));
    labels.push_back(x.labels[axis]);
    dims.push_back(x.value.shape().dims()[axis]);
  }
  permutation.push_back(static_cast<std::int64_t>(first));
  permutation.push_back(static_cast<std::int64_t>(second));
  const std::int64_t n = x.value.shape().dims()[first];
  std::vector<std::int64_t> flat = dims;
  flat.push_back(n * n);
  const Tensor moved = reshape(transpose(x.value, permutation, location), flat, location);
  SliceOptions every_diagonal_element;
  every_diagonal_element.start.assign(dims.size(), 0);
  every_diagonal_element.stop.assign(dims.size(), std::numeric_limits<std::int64_t>::max());
  every_diagonal_element.step.assign(dims.size(), 1);
  every_diagonal_element.start.push_back(0);
  every_diagonal_element.stop.push_back(n * n);
  every_diagonal_element.step.push_back(n + 1);
  labels.push_back(x.labels[first]);
  return {slice(moved, every_diagonal_element, location), labels};
}

// x with the axes whose labels are not in `keep` summed away.
Labelled sum_all_but(const Labelled& x, const std::vector<Label>& keep, const Location& location) {
  std::vector<std::int64_t> axes;
  std::vector<Label> labels;
  for (std::size_t axis = 0; axis < x.labels.size(); ++axis) {
    if (std::find(keep.begin(), keep.end(), x.labels[axis]) == keep.end())
      axes.push_back(static_cast<std::int64_t>(axis));
    else
      labels.push_back(x.labels[axis]);
  }
  if (axes.empty()) return x;
  return {reduce_sum(x.value, Axes(axes), false, location), labels};
}

// x's axes in the order of `order` (a permutation of x's labels).
Tensor arrange(const Labelled& x, const std::vector<Label>& order, const Location& location) {
  std::vector<std::int64_t> permutation;
  for (Label label : order)
    permutation.push_back(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin());
  bool identity = true;
  for (std::size_t i = 0; i < permutation.size(); ++i) identity &= permutation[i] == static_cast<std::int64_t>(i);
  return identity ? x.value : transpose(x.value, permutation, location);
}

bool contains(const std::vector<Label>& labels, Label label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

// The product of a and b summed over their shared labels that `keep` does not hold; the shared labels it holds
// are a batch. [batch, a's own, shared] x [batch, shared, b's own] is one batched matmul (a multiply with
// broadcasting when nothing is summed), reshaped to batch + a's own + b's own labels.
Labelled contract(const Labelled& a, const Labelled& b, const std::vector<Label>& keep,
                  const std::map<Label, std::int64_t>& sizes, const Location& location) {
  std::vector<Label> batch, summed, a_own, b_own;
  for (Label label : a.labels) {
    if (!contains(b.labels, label))
      a_own.push_back(label);
    else if (contains(keep, label))
      batch.push_back(label);
    else
      summed.push_back(label);
  }
  for (Label label : b.labels)
    if (!contains(a.labels, label)) b_own.push_back(label);
  auto size_of = [&](const std::vector<Label>& labels) {
    std::int64_t product = 1;
    for (Label label : labels) product *= sizes.at(label);
    return product;
  };
  auto dims_of = [&](const std::vector<Label>& labels) {
    std::vector<std::int64_t> dims;
    for (Label label : labels) dims.push_back(sizes.at(label));
    return dims;
  };
  auto concatenated = [](std::vector<Label> first, const std::vector<Label>& second,
                         const std::vector<Label>& third = {}) {
    first.insert(first.end(), second.begin(), second.end());
    first.insert(first.end(), third.begin(), third.end());
    return first;
  };
  // A label of size 1 in one operand broadcasts against the other's.
  auto broadcast_batch = [&](const Labelled& x) {
    std::vector<std::int64_t> dims;
    bool needed = false;
    for (std::size_t axis = 0; axis < x.labels.size(); ++axis) {
      dims.push_back(sizes.at(x.labels[axis]));
      needed |= dims.back() != x.value.shape().dims()[axis];
    }
    return needed ? Labelled{broadcast_to(x.value, Shape(dims), location), x.labels} : x;
  };
  const Labelled left = broadcast_batch(a), right = broadcast_batch(b);
  const std::int64_t a_size = size_of(a_own), b_size = size_of(b_own);
  // Matrices of rows by columns, with a leading batch axis only where there is a batch: a 2-D product is what
  // the JIT fuses with its epilogue.
  auto matrix = [&](const Tensor& x, std::int64_t rows, std::int64_t columns) {
    if (batch.empty()) return reshape(x, {rows, columns}, location);
    return reshape(x, {size_of(batch), rows, columns}, location);
  };
  Tensor product;
  if (summed.empty()) {
    product = mul(matrix(arrange(left, concatenated(batch, a_own), location), a_size, 1),
                  matrix(arrange(right, concatenated(batch, b_own), location), 1, b_size), location);
  } else {
    // Each operand as a matrix per batch item, transposed by matmul itself where its axes already lie in the
    // other order (b as [batch, b's own, summed]: attention's scores), so that no transpose is written out. The
    // batch and summed labels keep a's order (b moves its axes where its order differs).
    const std::int64_t summed_size = size_of(summed);
    MatmulOptions options;
    options.transpose_a = left.labels == concatenated(batch, summed, a_own);
    options.transpose_b = right.labels == concatenated(batch, b_own, summed);
    const Tensor a_matrix =
        options.transpose_a ? matrix(left.value, summed_size, a_size)
                            : matrix(arrange(left, concatenated(batch, a_own, summed), location), a_size, summed_size);
    const Tensor b_matrix =
        options.transpose_b ? matrix(right.value, b_size, summed_size)
                            : matrix(arrange(right, concatenated(batch, summed, b_own), location), summed_size, b_size);
    product = matmul(a_matrix, b_matrix, options, location);
  }
  const std::vector<Label> result_labels = concatenated(batch, a_own, b_own);
  return {reshape(product, dims_of(result_labels), location), result_labels};
}

// The labels that must survive contracting operands `first` and `second`: the output's and the other operands'.
std::vector<Label> labels_needed_beyond(const std::vector<Labelled>& operands, std::size_t first, std::size_t second,
                                        const std::vector<Label>& output) {
  std::vector<Label> keep = output;
  for (std::size_t other = 0; other < operands.size(); ++other)
    if (other != first && other != second)
      keep.insert(keep.end(), operands[other].labels.begin(), operands[other].labels.end());
  return keep;
}

// The number of elements contracting operands `first` and `second` makes.
std::int64_t result_size(const std::vector<Labelled>& operands, std::size_t first, std::size_t second,
                         const std::vector<Label>& output, const std::map<Label, std::int64_t>& sizes) {
  const std::vector<Label> keep = labels_needed_beyond(operands, first, second, output);
  std::vector<Label> counted;
  std::int64_t size = 1;
  for (std::size_t operand : {first, second})
    for (Label label : operands[operand].labels)
      if (contains(keep, label) && !contains(counted, label)) {
        counted.push_back(label);
        size *= sizes.at(label);
      }
  return size;
}

}  // namespace

Tensor einsum(std::string_view subscripts, const std::vector<Tensor>& operands, Location location) {
  if (operands.empty()) throw ValueError("einsum", "needs at least one operand", location);
  for (const Tensor& operand : operands) {
    detail::checked_rank(operand, "einsum", location);
    if (operand.dtype() == DType::boolean)
      throw DTypeError("einsum", "does not accept bool operands (as matmul): cast them to a number type", location);
    if (!operand.shape().is_static())
      throw ShapeError("einsum", "cannot contract a value whose shape depends on data", location);
  }
  std::vector<Term> terms;
  Term output_term;
  bool explicit_output = false;
  Parser(subscripts, location).parse(terms, output_term, explicit_output);
  if (terms.size() != operands.size())
    throw ValueError("einsum",
                     "subscripts \"" + std::string(subscripts) + "\" name " + std::to_string(terms.size()) +
                         " operands, but " + std::to_string(operands.size()) + " were given",
                     location);

  // Every label's size. Across operands a size of 1 broadcasts against n (as PyTorch's einsum and NumPy's
  // broadcasting do); within one operand a repeated label's axes must be equally long (a diagonal).
  std::vector<Labelled> inputs;
  std::map<Label, std::int64_t> sizes;
  std::map<Label, int> uses;
  int ellipsis_dimensions = 0;
  for (std::size_t index = 0; index < operands.size(); ++index) {
    const Tensor& x = operands[index];
    const std::vector<Label> labels = expand(terms[index], x.shape().rank(), index, x, location);
    std::map<Label, std::int64_t> own_sizes;
    for (std::size_t axis = 0; axis < labels.size(); ++axis) {
      const Label label = labels[axis];
      const std::int64_t size = x.shape().dims()[axis];
      if (label >= kEllipsisLabel) ellipsis_dimensions = std::max(ellipsis_dimensions, label - kEllipsisLabel + 1);
      auto [own, first_here] = own_sizes.emplace(label, size);
      if (!first_here && own->second != size)
        throw ShapeError("einsum",
                         "label " + label_name(label) + " is repeated in " + describe_operand(index, x) +
                             " on axes of different lengths, " + std::to_string(own->second) + " and " +
                             std::to_string(size),
                         location);
      auto [known, first_anywhere] = sizes.emplace(label, size);
      if (first_here && !first_anywhere && known->second != size) {
        if (known->second != 1 && size != 1)
          throw ShapeError("einsum",
                           "label " + label_name(label) + " is " + std::to_string(known->second) +
                               " long in one place and " + std::to_string(size) + " in " + describe_operand(index, x),
                           location);
        known->second = std::max(known->second, size);
      }
      ++uses[label];
    }
    inputs.push_back({x, labels});
  }

  // The output: as written, or (NumPy's rule) the ellipsis dimensions, then the letters used once, in order.
  std::vector<Label> output;
  // An explicit output without `...` sums the ellipsis dimensions away, as any label it leaves out.
  if (explicit_output) {
    output = output_term.letters;
    if (output_term.ellipsis_at >= 0) {
      std::vector<Label> ellipsis;
      for (int i = ellipsis_dimensions - 1; i >= 0; --i) ellipsis.push_back(kEllipsisLabel + i);
      output.insert(output.begin() + output_term.ellipsis_at, ellipsis.begin(), ellipsis.end());
    }
    for (std::size_t i = 0; i < output.size(); ++i) {
      if (!sizes.contains(output[i]))
        throw ValueError(
            "einsum",
            "output label " + label_name(output[i]) + " of \"" + std::string(subscripts) + "\" is not in any operand",
            location);
      if (std::find(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(i), output[i]) !=
          output.begin() + static_cast<std::ptrdiff_t>(i))
        throw ValueError("einsum", "output label " + label_name(output[i]) + " appears twice", location);
    }
  } else {
    for (int i = ellipsis_dimensions - 1; i >= 0; --i) output.push_back(kEllipsisLabel + i);
    for (const auto& [label, count] : uses)
      if (label < kEllipsisLabel && count == 1) output.push_back(label);
  }
  if (output.size() > static_cast<std::size_t>(Shape::max_rank))
    throw ShapeError("einsum",
                     "the output would have " + std::to_string(output.size()) + " axes, more than " +
                         std::to_string(Shape::max_rank),
                     location);

  // Each operand alone: repeated labels to diagonals, labels needed nowhere else summed.
  for (std::size_t index = 0; index < inputs.size(); ++index) {
    Labelled& x = inputs[index];
    for (bool repeated = true; repeated;) {
      repeated = false;
      for (std::size_t first = 0; first < x.labels.size() && !repeated; ++first)
        for (std::size_t second = first + 1; second < x.labels.size() && !repeated; ++second)
          if (x.labels[first] == x.labels[second]) {
            x = diagonal(x, first, second, location);
            repeated = true;
          }
    }
    std::vector<Label> keep = output;
    for (std::size_t other = 0; other < inputs.size(); ++other)
      if (other != index) keep.insert(keep.end(), inputs[other].labels.begin(), inputs[other].labels.end());
    x = sum_all_but(x, keep, location);
  }

  // Pairs in greedy order (opt_einsum's "greedy", which jnp.einsum uses by default): the pair whose result has the
  // fewest elements first, the earlier pair on a tie. Left to right, "ij,jk,k->i" would multiply two matrices;
  // greedily it is two matrix-vector products.
  while (inputs.size() > 1) {
    std::size_t best_first = 0, best_second = 1;
    std::int64_t best_size = -1;
    for (std::size_t first = 0; first < inputs.size(); ++first)
      for (std::size_t second = first + 1; second < inputs.size(); ++second) {
        const std::int64_t size = result_size(inputs, first, second, output, sizes);
        if (best_size < 0 || size < best_size) {
          best_size = size;
          best_first = first;
          best_second = second;
        }
      }
    const std::vector<Label> keep = labels_needed_beyond(inputs, best_first, best_second, output);
    inputs[best_first] = contract(inputs[best_first], inputs[best_second], keep, sizes, location);
    inputs.erase(inputs.begin() + static_cast<std::ptrdiff_t>(best_second));
  }
  const Labelled result = sum_all_but(inputs[0], output, location);
  // A label that was 1 long where it reached the output but longer elsewhere (summed there): stretch it.
  std::vector<std::int64_t> output_dims;
  for (Label label : output) output_dims.push_back(sizes.at(label));
  Tensor arranged = arrange(result, output, location);
  if (arranged.shape() != Shape(output_dims)) arranged = broadcast_to(arranged, Shape(output_dims), location);
  return arranged;
}

}  // namespace kiln
