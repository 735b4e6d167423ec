// Locations in the reports (diff/location.h): an error planted at a known element of every
// stage output of a padded two-row case, in a dump judged on real tokens only, is reported at
// that element's batch row, token (or query, entry), head, stream and channel, the same in the
// terminal, report.csv, report.json and report.html; a new NaN is pointed at; a backend's run,
// a generic compare and a dump that dropped a batch dimension of 1 are located the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "base/dtype.h"
#include "casefile/case_file.h"
#include "casefile/h5io.h"
#include "diff/real_rows.h"
#include "model/tensor_contract.h"
#include "tap/tap.hpp"

namespace tdiff {
namespace {

using testing::CliResult;
using testing::slurp;

constexpr std::int64_t kRow = 1, kToken = 9;  // row 1 of 40 tokens after row 0 of 26 and padding

class CliLocation : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    ASSERT_EQ(run(fmt::format("synth --preset tiny --seed 1 -o '{}'", path("m"))).code, 0);
    make_case("c.h5", {26, 40});
  }
  void make_case(const std::string& name, const std::vector<int>& lengths) const {
    std::ofstream f(path(name + ".txt"));
    for (int len : lengths) {
      for (int i = 0; i < len; ++i) f << (i ? " " : "") << 1 + (i * 7 + len) % 200;
      f << "\n";
    }
    f.close();
    ASSERT_EQ(run(fmt::format("case new --model '{}' --tokens '{}' --seed 2 -o '{}'", path("m"), path(name + ".txt"),
                              path(name)))
                  .code,
              0);
    ASSERT_EQ(run(fmt::format("golden '{}'", path(name))).code, 0);
  }
  // The element planted in `spec`: row 1, token 9 (entry 0 of a compressed layer's rows, query 9
  // of scores and masks), the last index of every other axis; row 0 where row 1's is padding.
  static std::vector<std::int64_t> planted(const TensorSpec& spec, const Batch& b, std::int64_t rate) {
    std::vector<std::int64_t> idx;
    for (std::size_t d = 0; d < spec.axes.size(); ++d) {
      const Axis& a = spec.axes[d];
      if (d == 0 && a.name == "B")
        idx.push_back(kRow);
      else if (d == 0 && a.name == "N")
        idx.push_back(kRow * b.seq() + kToken);
      else if (d == 1 && a.name == "S")
        idx.push_back(kToken);
      else if (d == 1 && a.name == "n")
        idx.push_back(0);
      else
        idx.push_back(a.size - 1);
    }
    const RealRows rows = real_rows(spec.shape(), b, rate);
    if (rows.rows > 1 && !rows.real[static_cast<std::size_t>(flat(spec.shape(), idx) / rows.row_size)]) idx[0] = 0;
    return idx;
  }
  static std::int64_t flat(const Shape& s, const std::vector<std::int64_t>& idx) {
    std::int64_t f = 0;
    for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
    return f;
  }
};

// Changes element `at` of `t` so that the reports must point there: a float by a large error,
// a flag flipped, a selection's token given an id it did not take.
bool plant(Tensor& t, const TensorSpec& spec, std::int64_t at) {
  if (spec.value == ValueClass::floating) {
    double& v = t.data<double>()[at];
    if (!std::isfinite(v)) return false;  // a mask's -inf: no error to plant there
    v += 3.0 * (std::fabs(v) + 1.0);
    return true;
  }
  if (spec.value == ValueClass::boolean) {
    auto* v = static_cast<std::uint8_t*>(static_cast<void*>(t.raw()));
    v[at] = !v[at];
    return true;
  }
  const std::int64_t k = spec.axes.back().size, first = at - at % k;
  std::set<std::int64_t> taken(t.data<std::int64_t>() + first, t.data<std::int64_t>() + first + k);
  for (std::int64_t id = spec.range->lo < 0 ? 0 : spec.range->lo; id < spec.range->hi; ++id)
    if (!taken.count(id)) {
      t.data<std::int64_t>()[at] = id;
      return true;
    }
  return false;  // every id taken: nothing to plant
}

// report.csv by key: column name -> field (RFC 4180 quotes undone).
std::map<std::string, std::map<std::string, std::string>> csv_rows(const std::string& text) {
  auto fields = [](const std::string& line) {
    std::vector<std::string> out(1);
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      const char ch = line[i];
      if (ch == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"')
        out.back() += ch, ++i;
      else if (ch == '"')
        quoted = !quoted;
      else if (ch == ',' && !quoted)
        out.emplace_back();
      else
        out.back() += ch;
    }
    return out;
  };
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const auto header = fields(line);
  std::map<std::string, std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto f = fields(line);
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    rows[row["stage"] + "/" + row["tensor"]] = row;
  }
  return rows;
}

// "row 1, token 9, ch 3" -> {{"row", 1}, {"token", 9}, {"ch", 3}}.
std::vector<std::pair<std::string, std::int64_t>> parse_location(const std::string& text) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto space = part.rfind(' ');
    const auto begin = part.find_first_not_of(' ');
    out.emplace_back(part.substr(begin, space - begin), std::stoll(part.substr(space + 1)));
  }
  return out;
}

TEST_F(CliLocation, AnErrorPlantedInEveryStageOutputIsLocatedThereInEveryReport) {
  const CaseInfo info = read_case(path("c.h5"));
  const auto stages = build_stages(info.config);
  const TensorContract contract(stages, info.config, info.batch.rows(), info.batch.seq());
  std::map<std::string, std::int64_t> rate;
  for (const auto& s : stages) rate[s.name] = real_rows_rate(s, info.config);
  std::map<std::string, std::vector<std::int64_t>> where;  // key -> planted index
  Tap tap(path("dump.h5"));
  for (const TensorSpec& spec : contract.specs()) {
    if (!h5_exists(path("c.h5"), "/reference/" + spec.key())) continue;
    Tensor t = h5_read(path("c.h5"), "/reference/" + spec.key());
    if (t.numel() == 0) continue;
    const auto idx = planted(spec, info.batch, rate[spec.stage]);
    if (plant(t, spec, flat(t.shape(), idx))) where[spec.key()] = idx;
    tap.write_raw(spec.key(), std::string(dtype_name(t.dtype())), t.raw(), t.shape());
  }
  tap.close();
  ASSERT_GT(where.size(), 150u);
  const CliResult r =
      run(fmt::format("run '{}' --candidate-dump '{}' -o '{}'", path("c.h5"), path("dump.h5"), path("rep")));
  ASSERT_EQ(r.code, 1) << r.out << r.err;

  const auto j = nlohmann::json::parse(slurp(path("rep/report.json")));
  const auto csv = csv_rows(slurp(path("rep/report.csv")));
  const std::string html = slurp(path("rep/report.html"));
  int checked = 0;
  for (const auto& row : j["rows"]) {
    const std::string key = row["stage"].get<std::string>() + "/" + row["tensor"].get<std::string>();
    const auto it = where.find(key);
    if (it == where.end()) continue;
    SCOPED_TRACE(key);
    ASSERT_TRUE(row.contains("location")) << row.dump();
    const auto& loc = row["location"];
    const TensorSpec& spec = *contract.find(key);
    const auto& idx = it->second;
    // The batch row and the token (query, entry) planted.
    const std::int64_t row_planted = spec.axes[0].name == "N" ? idx[0] / info.batch.seq() : idx[0];
    EXPECT_EQ(loc["at"]["row"], row_planted) << loc.dump();
    if (spec.axes[0].name == "N")
      EXPECT_EQ(loc["at"]["token"], kToken) << loc.dump();
    else if (spec.axes[1].name == "S")
      EXPECT_EQ(loc["at"].contains("token") ? loc["at"]["token"] : loc["at"]["query"], kToken) << loc.dump();
    else if (spec.axes[1].name == "n")
      EXPECT_EQ(loc["at"]["entry"], 0) << loc.dump();
    if (spec.value == ValueClass::index) {
      EXPECT_EQ(loc["what"], "other selection");
    } else {  // the element itself, as a flat index of the padded batch's tensor
      EXPECT_EQ(loc["what"], spec.value == ValueClass::boolean ? "differs" : "largest error");
      EXPECT_EQ(loc["index"], flat(spec.shape(), idx)) << loc.dump();
    }
    // report.csv says the same; the terminal and report.html print it for every row that is not a PASS.
    const auto& c = csv.at(key);
    EXPECT_EQ(c.at("err_kind"), loc["what"]);
    nlohmann::json from_csv = nlohmann::json::object();
    for (const auto& [name, i] : parse_location(c.at("err_at"))) from_csv[name] = i;
    EXPECT_EQ(from_csv, loc["at"]) << c.at("err_at");
    const std::string line = loc["what"].get<std::string>() + " at " + c.at("err_at");
    if (row["verdict"] != "PASS") {
      EXPECT_NE(r.out.find(line), std::string::npos) << line;
      EXPECT_NE(html.find(line), std::string::npos) << line;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(where.size()));
  // The user's lines: heads of the attention output, channels of hc_head's output.
  EXPECT_NE(r.out.find("L02.attn.core"), std::string::npos);
  const std::string core = fmt::format("largest error at row 1, token 9, head {}, ch {}",
                                       info.config.num_attention_heads - 1, info.config.head_dim - 1);
  EXPECT_NE(r.out.find(core), std::string::npos) << r.out;
  EXPECT_NE(html.find(core), std::string::npos);
  const std::string y = fmt::format("row 1, token 9, ch {}", info.config.hidden_size - 1);
  EXPECT_EQ(csv.at("final.hc_head/y").at("err_at"), y);
  EXPECT_NE(html.find("other selection at row 1, token 9"), std::string::npos);
}

// The user's two other lines: two heads swapped in a padded dump, and a new NaN beside a larger
// finite error; then a dump that dropped the batch dimension of a one-row case.
TEST_F(CliLocation, SwappedHeadsANewNaNAndADroppedBatchDimension) {
  const CaseInfo info = read_case(path("c.h5"));
  const std::int64_t S = info.batch.seq(), H = info.config.num_attention_heads, d = info.config.head_dim;
  Tensor o = h5_read(path("c.h5"), "/reference/L02.attn.core/o");
  Tensor swapped = o.clone();
  for (std::int64_t t = 0; t < 2 * S; ++t)
    for (std::int64_t c = 0; c < d; ++c)
      std::swap(swapped.data<double>()[(t * H + 1) * d + c], swapped.data<double>()[(t * H + 2) * d + c]);
  Tap tap(path("swap.h5"));
  tap.write_raw("L02.attn.core/o", "f64", swapped.raw(), swapped.shape());
  tap.close();
  const CliResult r = run(fmt::format("run '{}' --candidate-dump '{}' --no-reports", path("c.h5"), path("swap.h5")));
  const auto at = r.out.find("largest error at row ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto loc = parse_location(r.out.substr(at + 17, r.out.find(':', at) - at - 17));
  ASSERT_EQ(loc.size(), 4u) << r.out;
  EXPECT_EQ(loc[2].first, "head");
  EXPECT_TRUE(loc[2].second == 1 || loc[2].second == 2) << r.out;
  EXPECT_LT(loc[1].second, loc[0].second == 0 ? 26 : 40) << "a real token of its row: " << r.out;

  Tensor nan = o.clone();
  nan.data<double>()[((0 * S + 2) * H + 0) * d + 0] += 100.0;  // the largest finite error
  nan.data<double>()[((1 * S + 9) * H + 1) * d + 3] = std::numeric_limits<double>::quiet_NaN();
  Tap tap2(path("nan.h5"));
  tap2.write_raw("L02.attn.core/o", "f64", nan.raw(), nan.shape());
  tap2.close();
  const CliResult n =
      run(fmt::format("run '{}' --candidate-dump '{}' -o '{}'", path("c.h5"), path("nan.h5"), path("nan")));
  EXPECT_NE(n.out.find(fmt::format("new NaN at row 1, token 9, head 1, ch 3: reference {:.6g}, candidate nan",
                                   o.data<double>()[((1 * S + 9) * H + 1) * d + 3])),
            std::string::npos)
      << n.out;
  const auto j = nlohmann::json::parse(slurp(path("nan/report.json")));
  for (const auto& row : j["rows"])
    if (row["stage"] == "L02.attn.core") {
      EXPECT_EQ(row["location"]["what"], "new NaN");
      EXPECT_EQ(row["location"]["at"], (nlohmann::json{{"row", 1}, {"token", 9}, {"head", 1}, {"ch", 3}}));
      EXPECT_EQ(row["largest_error"]["at"], (nlohmann::json{{"row", 0}, {"token", 2}, {"head", 0}, {"ch", 0}}));
    }
  EXPECT_NE(slurp(path("nan/report.csv")).find("\"row 1, token 9, head 1, ch 3\",new NaN,"), std::string::npos);

  // One row: the capture drops the batch dimension ([S,H,d]); compared in the reference's shape.
  make_case("one.h5", {21});
  Tensor one = h5_read(path("one.h5"), "/reference/L02.attn.core/o");
  one.data<double>()[(7 * H + 2) * d + 5] += 1.0;
  Tap tap3(path("one-dump.h5"));
  tap3.write_raw("L02.attn.core/o", "f64", one.raw(), {one.dim(1), H, d});
  tap3.close();
  const CliResult b =
      run(fmt::format("run '{}' --candidate-dump '{}' --no-reports", path("one.h5"), path("one-dump.h5")));
  EXPECT_NE(b.out.find("largest error at row 0, token 7, head 2, ch 5"), std::string::npos) << b.out << b.err;
}

// A backend's run and a generic compare of the case with the dump name the same axes.
TEST_F(CliLocation, BackendRunsAndGenericComparesAreLocatedInTheModelsTerms) {
  const CliResult r = run(fmt::format("run '{}' --backend emu --policy naive -o '{}'", path("c.h5"), path("emu")));
  ASSERT_NE(r.code, 2) << r.err;
  const auto j = nlohmann::json::parse(slurp(path("emu/report.json")));
  int located = 0;
  for (const auto& row : j["rows"]) {
    if (!row.contains("location")) continue;
    for (const auto& [name, v] : row["location"]["at"].items()) EXPECT_FALSE(name.starts_with("dim")) << row.dump();
    if (row["location"]["at"].contains("row")) {
      EXPECT_LT(row["location"]["at"]["row"].get<int>(), 2);
      ++located;
    }
  }
  EXPECT_GT(located, 100);
  Tensor o = h5_read(path("c.h5"), "/reference/L02.attn.core/o");
  o.data<double>()[((1 * 40 + 9) * 4 + 1) * o.dim(3) + 3] += 1.0;
  Tap tap(path("d.h5"));
  tap.write_raw("L02.attn.core/o", "f64", o.raw(), o.shape());
  tap.close();
  const CliResult c = run(fmt::format("compare '{}' '{}' --group-b / --no-reports", path("c.h5"), path("d.h5")));
  EXPECT_NE(c.out.find("largest error at row 1, token 9, head 1, ch 3"), std::string::npos) << c.out << c.err;
}

}  // namespace
}  // namespace tdiff
