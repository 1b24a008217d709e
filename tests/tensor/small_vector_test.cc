// SmallVector tests: inline storage up to N, growth to the heap, copies and moves in both
// states, insert/erase (including inserting a range of itself), comparison.
#include "tests/test_util.h"

using tinyddp::tensor::SmallVector;
using V = SmallVector<int64_t, 3>;

TEST_CASE("SmallVector behaves like std::vector inline and on the heap", "[small_vector]") {
  V v{1, 2};
  CHECK(v.size() == 2);
  v.push_back(3);
  const int64_t* inline_data = v.data();
  v.push_back(4);  // grows past N = 3: moves to the heap
  CHECK(v.data() != inline_data);
  CHECK(std::vector<int64_t>(v.begin(), v.end()) == std::vector<int64_t>{1, 2, 3, 4});
  v.push_back(v[0]);  // an element of itself, while growing
  CHECK(v.back() == 1);
  V copy = v;
  CHECK(copy == v);
  copy[0] = 9;
  CHECK(v[0] == 1);  // deep copy
  V moved = std::move(copy);
  CHECK(moved[0] == 9);
  CHECK(copy.empty());  // NOLINT: a moved-from vector is empty
  V small{7};
  V small_moved = std::move(small);
  CHECK(small_moved == V{7});
  moved = small_moved;
  CHECK(moved == V{7});
  moved = V{1, 2, 3, 4, 5, 6};
  CHECK(moved.size() == 6);
}

TEST_CASE("SmallVector insert, erase, resize and construction forms", "[small_vector]") {
  V v{1, 4};
  v.insert(v.begin() + 1, {2, 3});
  CHECK(v == V{1, 2, 3, 4});
  v.insert(v.end(), v.begin(), v.begin() + 2);  // a range of itself
  CHECK(v == V{1, 2, 3, 4, 1, 2});
  v.erase(v.begin());
  CHECK(v == V{2, 3, 4, 1, 2});
  v.insert(v.begin(), 0);
  CHECK(v.front() == 0);
  v.resize(2);
  CHECK(v == V{0, 2});
  v.resize(4, 7);
  CHECK(v == V{0, 2, 7, 7});
  v.pop_back();
  CHECK(v.size() == 3);
  CHECK(V(3, 5) == V{5, 5, 5});
  const std::vector<int64_t> source{9, 8, 7, 6};
  const V from_range(source.rbegin(), source.rend());
  CHECK(from_range == V{6, 7, 8, 9});
  CHECK(V{1, 2} != V{1, 2, 3});
  v.clear();
  CHECK(v.empty());
}
