// The op profiler's reports (profiler.h): key averages, the summary (time per kind, the GPU's
// idle gaps), the text table and the Chrome trace, all from a stopped Profile's events.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/profiler.h"

namespace tinyddp::tensor::profiler {

namespace {

bool is_kernel(const Event& e) { return e.kind != Kind::kUser; }
bool on_gpu(const Event& e) { return e.device_start_us >= 0; }

// The length of the union of [start, end) intervals, and the span from the first start to the
// last end.
std::pair<double, double> union_and_span(std::vector<std::pair<double, double>> spans) {
  if (spans.empty()) return {0, 0};
  std::sort(spans.begin(), spans.end());
  double covered = 0, reach = spans.front().first;
  for (const auto& [start, end] : spans) {
    const double from = std::max(start, reach);
    if (end > from) covered += end - from;
    reach = std::max(reach, end);
  }
  return {covered, reach - spans.front().first};
}

std::string human_bytes_per_s(double bytes, double us) {
  if (bytes <= 0 || us <= 0) return "";
  return fmt::format("{:.1f}", bytes / us / 1e3);  // GB/s
}

std::string tflops(double flops, double us) {
  if (flops <= 0 || us <= 0) return "";
  return fmt::format("{:.2f}", flops / us / 1e6);
}

}  // namespace

std::vector<OpStats> Profile::key_averages() const {
  std::map<std::tuple<std::string, std::string, DeviceType>, OpStats> rows;
  for (const Event& e : events()) {
    if (!is_kernel(e)) continue;
    OpStats& row = rows[{e.name, e.kernel, e.device.type}];
    if (row.count == 0) {
      row.name = e.name;
      row.kernel = e.kernel;
      row.kind = e.kind;
      row.device_type = e.device.type;
    }
    row.count++;
    row.host_us += e.host_us();
    row.device_us += e.device_us();
    row.bytes += e.bytes;
    row.flops += e.flops;
  }
  std::vector<OpStats> out;
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(),
                   [](const OpStats& a, const OpStats& b) { return a.time_us() > b.time_us(); });
  return out;
}

Summary Profile::summary() const {
  Summary s;
  s.steps = steps_;
  s.wall_us = wall_us_;
  std::map<int, std::vector<std::pair<double, double>>> device_spans;
  std::map<Kind, double> per_kind;
  for (const Event& e : events()) {
    if (!is_kernel(e)) continue;
    s.host_in_kernels_us += e.host_us();
    if (on_gpu(e)) device_spans[e.device.index].push_back({e.device_start_us, e.device_end_us});
    per_kind[e.kind] += e.time_us();
  }
  for (const auto& [device, spans] : device_spans) {
    const auto [busy, span] = union_and_span(spans);
    s.device_busy_us += busy;
    s.device_idle_us += span - busy;
  }
  for (const auto& [kind, us] : per_kind) s.per_kind_us.push_back({kind, us});
  std::stable_sort(s.per_kind_us.begin(), s.per_kind_us.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return s;
}

std::string Profile::table(int row_limit) const {
  const std::vector<OpStats> rows = key_averages();
  const Summary s = summary();
  double total = 0;
  for (const OpStats& r : rows) total += r.time_us();
  const double per = s.steps > 0 ? static_cast<double>(s.steps) : 1.0;
  const std::string unit = s.steps > 0 ? "ms/step" : "ms";
  std::string out = fmt::format("{:<28} {:<24} {:<11} {:<4} {:>7} {:>9} {:>9} {:>6} {:>8} {:>8}\n", "op", "kernel",
                                "kind", "on", "calls", unit, "avg us", "%", "GB/s", "TFLOP/s");
  int shown = 0;
  for (const OpStats& r : rows) {
    if (row_limit > 0 && shown++ == row_limit) {
      out += fmt::format("... {} more rows\n", rows.size() - static_cast<size_t>(row_limit));
      break;
    }
    const double us = r.time_us();
    out +=
        fmt::format("{:<28} {:<24} {:<11} {:<4} {:>7} {:>9.3f} {:>9.1f} {:>6.1f} {:>8} {:>8}\n", r.name.substr(0, 28),
                    r.kernel.substr(0, 24), kind_name(r.kind), r.device_type == DeviceType::kCUDA ? "gpu" : "cpu",
                    r.count, us / 1e3 / per, us / static_cast<double>(r.count), total > 0 ? 100 * us / total : 0,
                    human_bytes_per_s(static_cast<double>(r.bytes), us), tflops(r.flops, us));
  }
  out += "\ntime per kind:";
  for (const auto& [kind, us] : s.per_kind_us) {
    out += fmt::format("  {} {:.3f} {} ({:.0f}%)", kind_name(kind), us / 1e3 / per, unit,
                       total > 0 ? 100 * us / total : 0);
  }
  out += fmt::format("\nwall {:.3f} {}; host inside kernel calls {:.3f} {}", s.wall_us / 1e3 / per, unit,
                     s.host_in_kernels_us / 1e3 / per, unit);
  if (s.device_busy_us > 0) {
    out += fmt::format("; GPU busy {:.3f} {}, idle between its kernels {:.3f} {} (waiting for the host)",
                       s.device_busy_us / 1e3 / per, unit, s.device_idle_us / 1e3 / per, unit);
  }
  return out + "\n";
}

std::string Profile::chrome_trace_json(int pid) const {
  nlohmann::json trace = nlohmann::json::array();
  const auto name_row = [&](int tid, const std::string& name) {
    trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    trace.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  };
  constexpr int kGpuRow = 1000;  // GPU d's row: kGpuRow + d, below the host threads
  std::set<int> threads, gpus;
  for (const Event& e : events()) {
    const auto span = [&](int tid, double start, double end) {
      nlohmann::json args = {{"kind", kind_name(e.kind)}, {"step", e.step}};
      if (!e.kernel.empty()) args["kernel"] = e.kernel;
      if (e.bytes > 0) args["bytes"] = e.bytes;
      if (e.flops > 0) args["flops"] = e.flops;
      trace.push_back({{"name", e.name},
                       {"cat", kind_name(e.kind)},
                       {"ph", "X"},
                       {"ts", start},
                       {"dur", end - start},
                       {"pid", pid},
                       {"tid", tid},
                       {"args", args}});
    };
    threads.insert(e.thread);
    span(e.thread, e.host_start_us, e.host_end_us);
    if (on_gpu(e)) {
      gpus.insert(e.device.index);
      span(kGpuRow + e.device.index, e.device_start_us, e.device_end_us);
    }
  }
  for (const int t : threads) name_row(t, fmt::format("host thread {}", t));
  for (const int d : gpus) name_row(kGpuRow + d, fmt::format("cuda:{} compute stream", d));
  const nlohmann::json doc = {
      {"traceEvents", trace},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"clock", "microseconds since the Profile started (host clock)"}, {"steps", steps_}}}};
  return doc.dump();
}

void Profile::export_chrome_trace(const std::string& path, int pid) const {
  std::ofstream file(path);
  TDDP_CHECK(file.good(), "profiler::Profile::export_chrome_trace: cannot write {}", path);
  file << chrome_trace_json(pid);
  file.close();
  TDDP_CHECK(file.good(), "profiler::Profile::export_chrome_trace: writing {} failed", path);
}

}  // namespace tinyddp::tensor::profiler
