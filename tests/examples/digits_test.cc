// The digits reader (examples/digits.h) against scikit-learn's own reader of the same file
// (fixtures/digits_reference.txt, made by fixtures/make_digits_fixture.py), its errors on
// damaged files, and the seeded split and batches.
#include "examples/digits.h"
#include "examples/train_data.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "tests/test_util.h"

namespace ex = tinyddp::examples;
using Catch::Contains;
using tinyddp::testing::temp_path;

namespace {

// Writes `text` gzip-compressed to `path`.
void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

// One CSV row: 64 pixel fields `pixel` and a label.
std::string row(const std::string& pixel, const std::string& label) {
  std::string out;
  for (int i = 0; i < 64; ++i) out += pixel + ",";
  return out + label + "\n";
}

std::string load_error(const std::string& path) {
  try {
    ex::load_digits(path);
  } catch (const tinyddp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("digits: the reader reads what scikit-learn's load_digits reads", "[examples][digits][fixture]") {
  const std::string path = ex::default_digits_path();
  if (!std::filesystem::exists(path))
    TINYDDP_SKIP(path + " is missing: bash scripts/setup.sh installs python3-sklearn");
  const auto ref = tinyddp::testing::load_fixture("tests/examples/fixtures/digits_reference.txt");
  const ex::Digits digits = ex::load_digits(path);
  REQUIRE(digits.rows() == static_cast<int64_t>(ref.at("rows")[0]));
  REQUIRE(digits.pixels.size() == static_cast<size_t>(digits.rows() * 64));

  std::vector<double> counts(10, 0), by_class(10, 0), by_position(64, 0);
  for (int64_t r = 0; r < digits.rows(); ++r) {
    counts[digits.labels[r]] += 1;
    for (int64_t p = 0; p < 64; ++p) {
      const double raw = digits.pixels[r * 64 + p] * 16;  // exact: k/16 is a float
      by_class[digits.labels[r]] += raw;
      by_position[p] += raw;
    }
  }
  CHECK(counts == ref.at("class_counts"));
  CHECK(by_class == ref.at("pixel_sum_by_class"));
  CHECK(by_position == ref.at("pixel_sum_by_position"));
  for (const auto& [name, r] :
       {std::pair<std::string, int64_t>{"first", 0}, {"row_1000", 1000}, {"last", digits.rows() - 1}}) {
    INFO(name);
    const tinyddp::tensor::Tensor inputs = digits.inputs({r});
    std::vector<double> raw;
    for (int64_t p = 0; p < 64; ++p) raw.push_back(tinyddp::testing::at(inputs, {0, p}) * 16);
    CHECK(raw == ref.at(name + "_pixels"));
    CHECK(digits.targets({r}).item<int64_t>() == static_cast<int64_t>(ref.at(name + "_label")[0]));
  }
}

TEST_CASE("digits: damaged files get errors naming the file, line and field", "[examples][digits][errors]") {
  const std::string good = row("3", "7");
  const std::string path = temp_path("digits_bad.csv.gz");
  const auto with = [&](const std::string& text) {
    write_gzip(path, text);
    return load_error(path);
  };
  CHECK(with(good + good) == "(no error)");
  CHECK_THAT(with(good + "1,2,3\n"), Contains(path + " line 2: 3 fields, expected 65"));
  CHECK_THAT(with(good + row("3", "7,1")), Contains("line 2: more than 65 fields"));
  CHECK_THAT(with(row("x", "7")), Contains("line 1, field 1: 'x' is not an integer"));
  CHECK_THAT(with(row("2.5", "7")), Contains("'2.5' is not an integer"));
  CHECK_THAT(with(row("17", "7")), Contains("line 1, field 1: pixel 17 is outside 0..16"));
  CHECK_THAT(with(row("-1", "7")), Contains("pixel -1 is outside 0..16"));
  CHECK_THAT(with(good + row("0", "10")), Contains("line 2, field 65: label 10 is outside 0..9"));
  CHECK_THAT(with(""), Contains("holds no rows"));
  CHECK_THAT(load_error(temp_path("no_such_digits.csv.gz")), Contains("cannot open"));

  // A gzip stream cut short: zlib notices, and the reader says the file is damaged.
  std::string many;
  for (int i = 0; i < 200; ++i) many += row(std::to_string(i % 17), std::to_string(i % 10));
  write_gzip(path, many);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  CHECK_THAT(load_error(path), Contains("is damaged"));

  // Plain (uncompressed) CSV reads too, CRLF line ends included.
  std::ofstream(temp_path("digits_plain.csv"))
      << "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
         "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,16,4\r\n";
  const ex::Digits plain = ex::load_digits(temp_path("digits_plain.csv"));
  REQUIRE(plain.rows() == 1);
  CHECK(plain.pixels[63] == 1.0f);
  CHECK(plain.labels[0] == 4);
}

TEST_CASE("digits: the split and the batches are seeded, disjoint and cover the data", "[examples][digits]") {
  const std::vector<int64_t> p = ex::seeded_permutation(100, 3);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(p == ex::seeded_permutation(100, 3));
  CHECK(p != ex::seeded_permutation(100, 4));
  CHECK(p != identity);

  const ex::DigitsSplit split = ex::split_digits(1797, 297, 0);
  CHECK(split.train.size() == 1500);
  CHECK(split.held_out.size() == 297);
  std::set<int64_t> all(split.train.begin(), split.train.end());
  all.insert(split.held_out.begin(), split.held_out.end());
  CHECK(all.size() == 1797);

  CHECK_THROWS_WITH(ex::split_digits(10, 10, 0), Contains("cannot hold out 10 of 10 rows"));
}

TEST_CASE("digits: train's batches come from DistributedSampler shares that make up one process's batch",
          "[examples][digits][data]") {
  const std::string path = ex::default_digits_path();
  if (!std::filesystem::exists(path))
    TINYDDP_SKIP(path + " is missing: bash scripts/setup.sh installs python3-sklearn");
  // Rows are told apart by their pixels' sum and label (the digits have few exact duplicates).
  const auto rows_of = [](const ex::Batch& b) {
    std::multiset<std::pair<int64_t, double>> rows;
    for (int64_t i = 0; i < b.inputs.size(0); ++i) {
      rows.insert({b.targets[i].item<int64_t>(),
                   tinyddp::tensor::sum(b.inputs[i].to(tinyddp::tensor::kFloat64)).item<double>()});
    }
    return rows;
  };
  const auto one = ex::digits_dataset(path, 0, 64, 0, 1);
  const auto rank0 = ex::digits_dataset(path, 0, 64, 0, 2), rank1 = ex::digits_dataset(path, 0, 64, 1, 2);
  CHECK_THAT(one->describe(), Contains("1500 training digits from " + path + " (23 batches of 64 per epoch)"));
  std::multiset<std::pair<int64_t, double>> epoch0, epoch1;
  for (int64_t step : {0, 5, 22, 23, 30}) {  // 23 batches per epoch: steps 23 and 30 are epoch 1
    INFO("step " << step);
    const ex::Batch whole = one->batch(step), a = rank0->batch(step), b = rank1->batch(step);
    CHECK(whole.inputs.sizes() == tinyddp::tensor::Shape{64, 64});
    CHECK(a.inputs.sizes() == tinyddp::tensor::Shape{32, 64});
    std::multiset<std::pair<int64_t, double>> together = rows_of(a);
    const auto more = rows_of(b);
    together.insert(more.begin(), more.end());
    CHECK(together == rows_of(whole));
    (step < 23 ? epoch0 : epoch1).insert(together.begin(), together.end());
  }
  CHECK(epoch0 != epoch1);  // a new order each epoch
  // Steps asked again or out of order give the same rows (a resumed run replays its batches).
  CHECK(rows_of(one->batch(5)) == rows_of(ex::digits_dataset(path, 0, 64, 0, 1)->batch(5)));
  CHECK_THROWS_WITH(ex::digits_dataset(path, 0, 2000, 0, 1),
                    Contains("--batch 2000: larger than the 1500 training digits"));
}
