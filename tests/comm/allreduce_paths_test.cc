// The paths an allreduce takes in ProcessGroupGloo, each checked against a double-precision
// reference on 2-4 ranks: small allreduces (up to 64 KiB: comm/gloo/small_allreduce.h, and on
// two ranks up to 192 KiB in one message each way) around their size limits, and large ones on the TCP ring
// (comm/transport/tcp_ring.h) for every dtype and op; every rank must hold the same bits. And
// the ring's two halves, the reduce-scatter and the allgather, alone and in place.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/comm/collective_values.h"
#include "tests/comm/comm_test_util.h"
#include "tinyddp/comm/process_group.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using tensor::DType;
using tensor::Tensor;
using tinyddp::testing::expect_values;
using tinyddp::testing::Expectations;
using tinyddp::testing::factor;
using tinyddp::testing::kDTypes;
using tinyddp::testing::make;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;
using tinyddp::testing::value;

// Allreduces of up to 64 KiB take a path of their own (comm/gloo/small_allreduce.h), on two
// ranks up to 192 KiB (ProcessGroupGloo::kPairMaxBytes). Around both limits, on 2 and 3 ranks, with values whose
// float32 sums round: the results match a double-precision sum and are bit-identical on every rank; more distinct sizes
// than the path keeps algorithms for, revisited, stay correct; small and large calls interleave.
TEST_CASE("small allreduces: bit-identical on every rank, around the size limit", "[comm][gloo][small]") {
  for (int size : {2, 3}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      const int r = pg.rank(), p = pg.size();
      const auto x = [](int rank, int64_t i) {
        return 0.1 * (rank + 1) + 1e-3 * static_cast<double>(i % 1000) + 1.0 / 3.0;
      };
      // 16384 floats = 64 KiB, 49152 = 192 KiB
      std::vector<int64_t> sizes = {1, 5, 16383, 16384, 16385, 40000, 49151, 49152, 49153};
      for (int64_t n = 2; n < 140; n += 2) sizes.push_back(n);  // past the 64 kept
      for (int64_t n = 2; n < 20; n += 2) sizes.push_back(n);   // evicted ones again
      for (int64_t n : sizes) {
        std::vector<double> mine(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = x(r, i);
        const Tensor t = tensor::from_vector(mine).to(tensor::kFloat32);
        pg.allreduce(t, ReduceOp::kAvg)->wait();
        expect_values(
            e, t,
            [&](int64_t i) {
              double s = 0;
              for (int q = 0; q < p; ++q) s += x(q, i);
              return s / p;
            },
            fmt::format("avg of {} floats", n));
        std::vector<Tensor> all;
        for (int q = 0; q < p; ++q) all.push_back(tensor::zeros({n}));
        pg.allgather(all, t)->wait();
        for (int q = 0; q < p; ++q) {
          if (!tensor::equal(all[q], t))
            e.failures.push_back(fmt::format("{} floats: rank {} holds other bits than rank {}", n, q, r));
        }
      }
    }));
  }
}

// Larger allreduces run on a TCP ring of their own (comm/transport/tcp_ring.h): on 2 ranks a
// reduce-scatter and an allgather of halves, on more a reduce-scatter then allgather over chunks of unequal
// size when the element count does not divide. Every dtype and op, values whose sums round,
// a NaN for min/max (combined in rank order on every rank): results match a double-precision
// reference and every rank holds the same bytes.
TEST_CASE("large allreduces: every dtype and op on 2-4 ranks, identical bytes on every rank", "[comm][gloo][ring]") {
  for (int size : {2, 3, 4}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      const int r = pg.rank(), p = pg.size();
      const auto x = [](int rank, int64_t i) {
        return 0.25 * (rank + 1) + 1e-3 * static_cast<double>(i % 997) + 1.0 / 3.0;
      };
      for (DType dtype : kDTypes) {
        const bool integral = !tensor::is_floating_point(dtype);
        // 256 KiB and a few elements: past both small paths in every dtype.
        const int64_t count = (256 << 10) / static_cast<int64_t>(tensor::element_size(dtype)) + 9;
        const auto input = [&](int rank, int64_t i) { return integral ? value(rank, i) : x(rank, i); };
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kAvg}) {
          if (op == ReduceOp::kAvg && integral) continue;
          const auto in = [&](int rank, int64_t i) {
            return op == ReduceOp::kProduct ? factor(rank, i) : input(rank, i);
          };
          const bool with_nan = (op == ReduceOp::kMin || op == ReduceOp::kMax) && !integral;
          Tensor t =
              make(count, dtype, [&](int64_t i) { return with_nan && r == 1 && i == 7 ? std::nan("") : in(r, i); });
          pg.allreduce(t, op)->wait();
          const std::string what =
              fmt::format("{} {} of {} x {}", p, reduce_op_name(op), count, tensor::dtype_name(dtype));
          // The reference: every rank's input as rounded to the dtype, combined in double.
          std::vector<std::vector<double>> inputs;
          for (int q = 0; q < p; ++q) {
            inputs.push_back(
                make(count, dtype, [&](int64_t i) { return in(q, i); }).to(tensor::kFloat64).to_vector<double>());
          }
          // Each of the p - 1 combinations may round once (16-bit types: in float, then to 16 bits).
          const double eps = dtype == tensor::kBFloat16  ? 0x1p-8
                             : dtype == tensor::kFloat16 ? 0x1p-11
                             : dtype == tensor::kFloat32 ? 0x1p-24
                                                         : 0x1p-53;
          const double tolerance = integral ? 0.0 : p * eps;
          const std::vector<double> got = t.to(tensor::kFloat64).to_vector<double>();
          for (int64_t i = with_nan ? 8 : 0; i < count; ++i) {  // element 7 holds a NaN on rank 1
            double acc = inputs[0][i];
            for (int q = 1; q < p; ++q) {
              const double v = inputs[q][i];
              if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
              if (op == ReduceOp::kProduct) acc *= v;
              if (op == ReduceOp::kMin) acc = std::min(acc, v);
              if (op == ReduceOp::kMax) acc = std::max(acc, v);
            }
            if (op == ReduceOp::kAvg) acc /= p;
            if (std::fabs(got[i] - acc) > tolerance * std::fabs(acc)) {
              e.failures.push_back(fmt::format("{}: element {} is {}, expected {}", what, i, got[i], acc));
              break;
            }
          }
          std::vector<Tensor> all;
          for (int q = 0; q < p; ++q) all.push_back(tensor::zeros({count}, dtype));
          pg.allgather(all, t)->wait();
          for (int q = 0; q < p; ++q) {
            if (std::memcmp(all[q].raw_data_ptr(), t.raw_data_ptr(), static_cast<size_t>(t.nbytes())) != 0) {
              e.failures.push_back(fmt::format("{}: rank {} holds other bytes than rank {}", what, q, r));
            }
          }
        }
      }
    }));
  }
}

TEST_CASE("allreduce is a reduce-scatter followed by an all-gather, on 2-4 ranks", "[comm][gloo][threads]") {
  // The identity the ring allreduce is built on (docs/comm.md): each rank reduces one chunk
  // over all ranks, then every rank gathers every reduced chunk. Random float32 values; both
  // routes are sums of W terms, within (W - 1) float32 roundings of the float64 sum of the
  // magnitudes, so of each other within twice that.
  for (int size : {2, 3, 4}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      const int w = pg.size();
      const int64_t chunk = 997, n = chunk * w;
      std::vector<Tensor> mine;  // every rank's values, made alike on each thread
      for (int q = 0; q < w; ++q) {
        tensor::Generator gen(100 + q);
        mine.push_back(tensor::randn({n}, {}, &gen));
      }
      Tensor exact = tensor::zeros({n}, tensor::kFloat64), magnitude = tensor::zeros({n}, tensor::kFloat64);
      for (const Tensor& x : mine) {
        exact = tensor::add(exact, x.to(tensor::kFloat64));
        magnitude = tensor::add(magnitude, tensor::abs(x.to(tensor::kFloat64)));
      }
      const double bound = (w - 1) * std::ldexp(1.0, -24) * tensor::max(magnitude).item<double>();
      const Tensor summed = mine[static_cast<size_t>(pg.rank())].clone();
      pg.allreduce(summed)->wait();
      std::vector<Tensor> pieces;
      for (int q = 0; q < w; ++q) pieces.push_back(mine[static_cast<size_t>(pg.rank())].narrow(0, q * chunk, chunk));
      const Tensor reduced = tensor::zeros({chunk});
      pg.reduce_scatter(reduced, pieces)->wait();
      std::vector<Tensor> gathered;
      for (int q = 0; q < w; ++q) gathered.push_back(tensor::zeros({chunk}));
      pg.allgather(gathered, reduced)->wait();
      const Tensor two_steps = tensor::cat(gathered, 0);
      e.expect_close(summed.to(tensor::kFloat64), exact, "allreduce against the float64 sum", 0.0, bound);
      e.expect_close(two_steps.to(tensor::kFloat64), exact, "reduce-scatter + all-gather against the float64 sum", 0.0,
                     bound);
      e.expect_close(two_steps, summed, "reduce-scatter + all-gather against allreduce", 0.0, 2 * bound);
    }));
  }
}

TEST_CASE("reduce_scatter and allgather in place: the output is the rank's own block of the inputs, on 1-4 ranks",
          "[comm][gloo][threads]") {
  // int64 values (the sums are exact: the reference is their formula), an odd block size; the
  // reduce-scatter's output is inputs[rank], the allgather's input is outputs[rank], all views
  // of one buffer (process_group.h); then float32 averages, in place and not, bit for bit.
  for (int size : {1, 2, 3, 4}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      const int64_t w = pg.size(), r = pg.rank(), block = 1001, n = block * w;
      const auto value = [](int64_t rank, int64_t i) { return ((rank + 1) * 1000003 * (i + 7)) % 9973 - 4000; };
      std::vector<int64_t> values(static_cast<size_t>(n)), sums(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        values[static_cast<size_t>(i)] = value(r, i);
        for (int64_t q = 0; q < w; ++q) sums[static_cast<size_t>(i)] += value(q, i);
      }
      const Tensor buffer = tensor::from_vector(values);
      std::vector<Tensor> blocks;
      for (int64_t q = 0; q < w; ++q) blocks.push_back(buffer.narrow(0, q * block, block));
      pg.reduce_scatter(blocks[static_cast<size_t>(r)], blocks)->wait();
      const std::vector<int64_t> got = blocks[static_cast<size_t>(r)].to_vector<int64_t>();
      e.expect(std::equal(got.begin(), got.end(), sums.begin() + r * block), "this rank's block holds its sums");
      pg.allgather(blocks, blocks[static_cast<size_t>(r)])->wait();
      e.expect(buffer.to_vector<int64_t>() == sums, "the allgather in place gives every block its sums");

      tensor::Generator gen(300 + static_cast<uint64_t>(r));
      const Tensor x = tensor::randn({n}, {}, &gen);
      std::vector<Tensor> copies;
      for (int64_t q = 0; q < w; ++q) copies.push_back(x.narrow(0, q * block, block).clone());
      const Tensor out = tensor::zeros({block});
      pg.reduce_scatter(out, copies, comm::ReduceOp::kAvg)->wait();
      std::vector<Tensor> in_place;
      for (int64_t q = 0; q < w; ++q) in_place.push_back(x.narrow(0, q * block, block));
      pg.reduce_scatter(in_place[static_cast<size_t>(r)], in_place, comm::ReduceOp::kAvg)->wait();
      e.expect(in_place[static_cast<size_t>(r)].to_vector<float>() == out.to_vector<float>(),
               "an average in place has the bits of one into another tensor");
    }));
  }
}
