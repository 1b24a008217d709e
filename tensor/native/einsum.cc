// einsum as a composite: labels summed out as early as possible, then the operands contracted
// left to right, each pair as one batched matmul ([batch, left, contracted] x [batch,
// contracted, right]), and the result permuted to the output's order. Its gradient is that of
// the sums, permutes, reshapes and matmuls it is made of, so it runs on every backend.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

using Labels = std::string;

struct Operand {
  Tensor t;
  Labels labels;
};

// The subscripts of each input and of the output ("ij,jk->ik"; without "->" the labels that
// appear once, in alphabetical order, as numpy's and PyTorch's implicit mode).
std::pair<std::vector<Labels>, Labels> parse(std::string_view equation, size_t operands) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq.push_back(c);
  }
  TDDP_CHECK(eq.find("...") == std::string::npos, "einsum: ellipsis (...) is not supported, in '{}'", equation);
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Labels> inputs(1);
  for (char c : lhs) {
    if (c == ',') {
      inputs.emplace_back();
      continue;
    }
    TDDP_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum: invalid subscript '{}' in '{}' (letters only)", c,
               equation);
    inputs.back().push_back(c);
  }
  TDDP_CHECK(inputs.size() == operands, "einsum: the equation '{}' names {} operands, but {} were given", equation,
             inputs.size(), operands);
  Labels output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
    for (size_t i = 0; i < output.size(); ++i) {
      TDDP_CHECK(std::isalpha(static_cast<unsigned char>(output[i])), "einsum: invalid output subscript '{}' in '{}'",
                 output[i], equation);
      TDDP_CHECK(output.find(output[i]) == i, "einsum: output subscript {} appears more than once in '{}'", output[i],
                 equation);
      TDDP_CHECK(lhs.find(output[i]) != std::string::npos,
                 "einsum: output subscript {} does not appear in the equation for any input operand in '{}'", output[i],
                 equation);
    }
  } else {
    std::map<char, int> count;
    for (const Labels& in : inputs) {
      for (char c : in) ++count[c];
    }
    for (const auto& [c, n] : count) {
      if (n == 1) output.push_back(c);
    }
    std::sort(output.begin(), output.end());
  }
  return {inputs, output};
}

bool has(const Labels& labels, char c) { return labels.find(c) != std::string::npos; }

// `op` with the labels not in `keep` summed out.
Operand sum_out(const Operand& op, const Labels& keep) {
  Shape dims;
  Labels rest;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (has(keep, op.labels[d])) {
      rest.push_back(op.labels[d]);
    } else {
      dims.push_back(static_cast<int64_t>(d));
    }
  }
  return dims.empty() ? op : Operand{sum(op.t, dims), rest};
}

// `op` permuted to the label order `order` (a permutation of its labels).
Tensor permuted(const Operand& op, const Labels& order) {
  Shape perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(op.labels.find(c)));
  return op.t.permute(perm);
}

int64_t size_product(const Operand& op, const Labels& labels) {
  int64_t n = 1;
  for (char c : labels) n *= op.t.size(static_cast<int64_t>(op.labels.find(c)));
  return n;
}

// a and b contracted over their shared labels that `later` does not need.
Operand contract(const Operand& a, const Operand& b, const Labels& later) {
  Labels batch, contracted, left, right;
  for (char c : a.labels) {
    if (has(b.labels, c)) {
      (has(later, c) ? batch : contracted).push_back(c);
    } else {
      left.push_back(c);
    }
  }
  for (char c : b.labels) {
    if (!has(a.labels, c)) right.push_back(c);
  }
  for (char c : batch + contracted) {
    const int64_t sa = a.t.size(static_cast<int64_t>(a.labels.find(c)));
    const int64_t sb = b.t.size(static_cast<int64_t>(b.labels.find(c)));
    TDDP_CHECK(sa == sb, "einsum: subscript {} has size {} for one operand and {} for another", c, sa, sb);
  }
  const int64_t nb = size_product(a, batch), nl = size_product(a, left), nc = size_product(a, contracted);
  const int64_t nr = size_product(b, right);
  const Tensor lhs = permuted(a, batch + left + contracted).reshape({nb, nl, nc});
  const Tensor rhs = permuted(b, batch + contracted + right).reshape({nb, nc, nr});
  Shape shape;
  for (char c : batch + left) shape.push_back(a.t.size(static_cast<int64_t>(a.labels.find(c))));
  for (char c : right) shape.push_back(b.t.size(static_cast<int64_t>(b.labels.find(c))));
  return {matmul(lhs, rhs).reshape(shape), batch + left + right};
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& tensors) {
  TDDP_CHECK(!tensors.empty(), "einsum: must provide at least one operand");
  const auto [inputs, output] = parse(equation, tensors.size());
  std::vector<Operand> ops;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "einsum", "operand");
    TDDP_CHECK(static_cast<int64_t>(inputs[i].size()) == tensors[i].dim(),
               "einsum: the number of subscripts in the equation ({}) does not match the number of dimensions ({}) for "
               "operand {}",
               inputs[i].size(), tensors[i].dim(), i);
    for (size_t d = 0; d < inputs[i].size(); ++d) {
      TDDP_CHECK(inputs[i].find(inputs[i][d]) == d,
                 "einsum: subscript {} repeated within operand {} (diagonals) is not supported", inputs[i][d], i);
    }
    ops.push_back({tensors[i], inputs[i]});
  }
  // What operand k and the ones after it still need: the output's labels and later operands'.
  const auto needed_after = [&](size_t k) {
    Labels need = output;
    for (size_t j = k + 1; j < ops.size(); ++j) need += ops[j].labels;
    return need;
  };
  Operand acc = sum_out(ops[0], needed_after(0));
  for (size_t k = 1; k < ops.size(); ++k) {
    const Labels later = needed_after(k);
    const Operand next = sum_out(ops[k], later + acc.labels);
    acc = sum_out(acc, later + next.labels);
    acc = contract(acc, next, later);
  }
  acc = sum_out(acc, output);
  return permuted(acc, output);
}

}  // namespace tinyddp::tensor
