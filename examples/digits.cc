// The handwritten digits of //examples:train (digits.h): reading python3-sklearn's CSV of the
// UCI set, the seeded train/held-out split, and the batches.
#include "examples/digits.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tinyddp/base/error.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;

std::string default_digits_path() {
  const char* env = std::getenv("TINYDDP_DIGITS");
  return env != nullptr && *env != '\0' ? env : kDigitsPath;
}

namespace {

// Lines of a file through zlib, which reads gzip streams and plain files alike.
class GzipLines {
 public:
  explicit GzipLines(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb"), &gzclose) {
    TDDP_CHECK(file_ != nullptr,
               "digits: cannot open {} ({}); install python3-sklearn (bash scripts/setup.sh) or set "
               "TINYDDP_DIGITS to the file",
               path, std::strerror(errno));
  }
  // The next line without its newline; false at the end of the file. A damaged or truncated
  // stream throws.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == end_ && !fill()) return !line.empty();
      const char* start = buffer_ + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      if (newline != nullptr) {
        line.append(start, static_cast<size_t>(newline - start));
        pos_ += static_cast<size_t>(newline - start) + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      line.append(start, end_ - pos_);
      pos_ = end_;
    }
  }

 private:
  bool fill() {
    const int n = gzread(file_.get(), buffer_, sizeof(buffer_));
    // A damaged stream returns -1; one cut short returns what it had, then 0 with an error.
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    TDDP_CHECK(n > 0 || code == Z_OK, "digits: {} is damaged: {} (reinstall python3-sklearn, or fetch the file again)",
               path_, message);
    pos_ = 0;
    end_ = static_cast<size_t>(n);
    return n > 0;
  }

  std::string path_;
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file_;
  char buffer_[1 << 16];
  size_t pos_ = 0, end_ = 0;
};

// The integer `field`, within [lo, hi], or a clear error naming where it is.
int parse_field(std::string_view field, int lo, int hi, const char* what, const std::string& path, int64_t line,
                int64_t column) {
  int value = 0;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  TDDP_CHECK(error == std::errc() && end == field.data() + field.size(),
             "digits: {} line {}, field {}: '{}' is not an integer", path, line, column, field);
  TDDP_CHECK(value >= lo && value <= hi, "digits: {} line {}, field {}: {} {} is outside {}..{}", path, line, column,
             what, value, lo, hi);
  return value;
}

}  // namespace

Digits load_digits(const std::string& path) {
  GzipLines lines(path);
  Digits digits;
  std::string line;
  int64_t number = 0;
  while (lines.next(line)) {
    ++number;
    if (line.empty()) continue;
    std::string_view rest = line;
    int64_t column = 0;
    for (; column <= kDigitsPixels; ++column) {
      const size_t comma = rest.find(',');
      const std::string_view field = rest.substr(0, comma);
      if (column < kDigitsPixels) {
        TDDP_CHECK(comma != std::string_view::npos,
                   "digits: {} line {}: {} fields, expected {} (64 pixels and a label)", path, number, column + 1,
                   kDigitsPixels + 1);
        digits.pixels.push_back(
            static_cast<float>(parse_field(field, 0, kDigitsMaxPixel, "pixel", path, number, column + 1)) /
            kDigitsMaxPixel);
        rest.remove_prefix(comma + 1);
      } else {
        TDDP_CHECK(comma == std::string_view::npos, "digits: {} line {}: more than {} fields (64 pixels and a label)",
                   path, number, kDigitsPixels + 1);
        digits.labels.push_back(parse_field(field, 0, kDigitsClasses - 1, "label", path, number, column + 1));
      }
    }
  }
  TDDP_CHECK(digits.rows() > 0, "digits: {} holds no rows", path);
  return digits;
}

t::Tensor Digits::inputs(const std::vector<int64_t>& index) const {
  std::vector<float> out;
  out.reserve(index.size() * kDigitsPixels);
  for (int64_t row : index) {
    TDDP_CHECK(row >= 0 && row < rows(), "digits: row {} is out of range for {} rows", row, rows());
    out.insert(out.end(), pixels.begin() + row * kDigitsPixels, pixels.begin() + (row + 1) * kDigitsPixels);
  }
  return t::from_vector(out, t::Shape{static_cast<int64_t>(index.size()), kDigitsPixels});
}

t::Tensor Digits::targets(const std::vector<int64_t>& index) const {
  std::vector<int64_t> out;
  out.reserve(index.size());
  for (int64_t row : index) {
    TDDP_CHECK(row >= 0 && row < rows(), "digits: row {} is out of range for {} rows", row, rows());
    out.push_back(labels[row]);
  }
  return t::from_vector(out, t::Shape{static_cast<int64_t>(index.size())});
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  t::Generator generator(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(generator.random64() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DigitsSplit split_digits(int64_t rows, int64_t held_out, uint64_t seed) {
  TDDP_CHECK(held_out > 0 && held_out < rows, "digits: cannot hold out {} of {} rows", held_out, rows);
  const std::vector<int64_t> order = seeded_permutation(rows, seed);
  return {std::vector<int64_t>(order.begin() + held_out, order.end()),
          std::vector<int64_t>(order.begin(), order.begin() + held_out)};
}

}  // namespace tinyddp::examples
