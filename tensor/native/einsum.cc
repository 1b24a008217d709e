// einsum as a composite: ellipses (...) spelled out as labels, repeated labels taken as
// diagonals, size-1 dims broadcast; labels summed out as early as possible, then the operands contracted
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

constexpr char kEllipsis = '.';  // "..." in the parsed subscripts, one character

// The subscripts of each input and of the output ("ij,jk->ik"; without "->" the labels that
// appear once, in alphabetical order, as numpy's and PyTorch's implicit mode), each "..."
// written as one kEllipsis.
std::pair<std::vector<Labels>, Labels> parse(std::string_view equation, size_t operands) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq.push_back(c);
  }
  for (size_t at = eq.find("..."); at != std::string::npos; at = eq.find("...", at + 1))
    eq.replace(at, 3, 1, kEllipsis);
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Labels> inputs(1);
  for (char c : lhs) {
    if (c == ',') {
      inputs.emplace_back();
      continue;
    }
    TDDP_CHECK(std::isalpha(static_cast<unsigned char>(c)) || c == kEllipsis,
               "einsum: invalid subscript '{}' in '{}' (letters and one ... per operand)", c, equation);
    TDDP_CHECK(c != kEllipsis || inputs.back().find(kEllipsis) == std::string::npos,
               "einsum: more than one ellipsis (...) in operand {} of '{}'", inputs.size() - 1, equation);
    inputs.back().push_back(c);
  }
  TDDP_CHECK(inputs.size() == operands, "einsum: the equation '{}' names {} operands, but {} were given", equation,
             inputs.size(), operands);
  Labels output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
    for (size_t i = 0; i < output.size(); ++i) {
      TDDP_CHECK(std::isalpha(static_cast<unsigned char>(output[i])) || output[i] == kEllipsis,
                 "einsum: invalid output subscript '{}' in '{}'", output[i], equation);
      TDDP_CHECK(output.find(output[i]) == i, "einsum: output subscript {} appears more than once in '{}'", output[i],
                 equation);
      TDDP_CHECK(lhs.find(output[i]) != std::string::npos,
                 "einsum: output subscript {} does not appear in the equation for any input operand in '{}'", output[i],
                 equation);
    }
  } else {
    std::map<char, int> count;
    bool ellipsis = false;
    for (const Labels& in : inputs) {
      for (char c : in) {
        if (c == kEllipsis) {
          ellipsis = true;
        } else {
          ++count[c];
        }
      }
    }
    for (const auto& [c, n] : count) {
      if (n == 1) output.push_back(c);
    }
    std::sort(output.begin(), output.end());
    if (ellipsis) output.insert(output.begin(), kEllipsis);  // the broadcast dims lead
  }
  return {inputs, output};
}

bool has(const Labels& labels, char c) { return labels.find(c) != std::string::npos; }

// A label as the user wrote it: a letter, or the ellipsis's k-th dim.
std::string label_name(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) ? std::string(1, c) : fmt::format("... (dim {})", c - 1);
}

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

// "..." as the labels of the dims it covers: the ellipses' dims are right-aligned across the
// operands (global dims 0 .. E - 1, labelled by the characters 1 .. E), and the output's "..."
// is all E of them.
void expand_ellipses(std::vector<Labels>& inputs, Labels& output, const std::vector<Tensor>& tensors) {
  std::vector<int64_t> covered(inputs.size(), 0);
  int64_t most = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!has(inputs[i], kEllipsis)) continue;
    covered[i] = tensors[i].dim() - static_cast<int64_t>(inputs[i].size() - 1);
    TDDP_CHECK(covered[i] >= 0,
               "einsum: operand {} has {} dims, fewer than the {} subscripts besides its ellipsis (...)", i,
               tensors[i].dim(), inputs[i].size() - 1);
    most = std::max(most, covered[i]);
  }
  const auto labels = [&](int64_t first, int64_t count) {
    Labels out;
    for (int64_t j = first; j < first + count; ++j) out.push_back(static_cast<char>(1 + j));
    return out;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t at = inputs[i].find(kEllipsis);
    if (at != std::string::npos) inputs[i].replace(at, 1, labels(most - covered[i], covered[i]));
  }
  const size_t at = output.find(kEllipsis);
  if (at != std::string::npos) output.replace(at, 1, labels(0, most));
}

// An operand with a label repeated takes that label's diagonal (a view, as torch.diagonal).
Operand diagonals(Operand op, size_t index) {
  for (size_t d = 0; d < op.labels.size(); ++d) {
    const size_t twin = op.labels.find(op.labels[d], d + 1);
    if (twin == std::string::npos) continue;
    const auto a = static_cast<int64_t>(d), b = static_cast<int64_t>(twin);
    TDDP_CHECK(op.t.size(a) == op.t.size(b),
               "einsum: subscript {} is repeated for operand {} but the sizes don't match, {} != {}", op.labels[d],
               index, op.t.size(a), op.t.size(b));
    Shape sizes = op.t.sizes(), strides = op.t.strides();
    strides[d] += strides[twin];
    sizes.erase(sizes.begin() + b);
    strides.erase(strides.begin() + b);
    op.t = op.t.as_strided(sizes, strides, op.t.storage_offset());
    op.labels.erase(twin, 1);
    --d;  // the same label may repeat a third time
  }
  return op;
}

// Dims of size 1 broadcast to their label's size in the other operands, as PyTorch's einsum.
void broadcast_labels(std::vector<Operand>& ops) {
  std::map<char, int64_t> size;
  for (const Operand& op : ops) {
    for (size_t d = 0; d < op.labels.size(); ++d) {
      const int64_t n = op.t.size(static_cast<int64_t>(d));
      int64_t& s = size.try_emplace(op.labels[d], n).first->second;
      TDDP_CHECK(s == n || s == 1 || n == 1,
                 "einsum: subscript {} has size {} for one operand and {} for another (only size 1 broadcasts)",
                 label_name(op.labels[d]), s, n);
      s = std::max(s, n);
    }
  }
  for (Operand& op : ops) {
    Shape target = op.t.sizes();
    for (size_t d = 0; d < op.labels.size(); ++d) target[d] = size[op.labels[d]];
    if (target != op.t.sizes()) op.t = op.t.expand(target);
  }
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& tensors) {
  TDDP_CHECK(!tensors.empty(), "einsum: must provide at least one operand");
  auto [inputs, output] = parse(equation, tensors.size());
  for (const Tensor& t : tensors) check_defined(t, "einsum", "operand");
  expand_ellipses(inputs, output, tensors);
  std::vector<Operand> ops;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TDDP_CHECK(static_cast<int64_t>(inputs[i].size()) == tensors[i].dim(),
               "einsum: the number of subscripts in the equation ({}) does not match the number of dimensions ({}) for "
               "operand {}",
               inputs[i].size(), tensors[i].dim(), i);
    ops.push_back(diagonals({tensors[i], inputs[i]}, i));
  }
  broadcast_labels(ops);
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
