// Case files (core/case_file) and the `case new` / `info` commands, on a small real model
// folder written here (config.json + model.safetensors), including every bad-input path.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "base/error.h"
#include "formats/safetensors.h"
#include "model/stage_graph.h"
#include "formats/weights.h"
#include "base/sha256.h"

namespace fs = std::filesystem;
using namespace tdiff;

namespace {

// Small enough to write in milliseconds; every layer type and both MLP types appear.
ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 50, c.hidden_size = 16, c.num_hidden_layers = 3, c.num_attention_heads = 2;
  c.head_dim = 16, c.rope_dim = 4, c.q_lora_rank = 8, c.o_groups = 1, c.o_lora_rank = 8;
  c.n_routed_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 8;
  c.index_n_heads = 2, c.index_head_dim = 8, c.index_topk = 2, c.sliding_window = 4;
  c.csa_rate = 2, c.hca_rate = 4, c.hc_mult = 2;
  c.layer_types = {LayerType::sliding, LayerType::csa, LayerType::hca};
  c.mlp_types = {MlpType::hash_moe, MlpType::moe, MlpType::moe};
  c.validate("small_config");
  return c;
}

// Writes config.json and model.safetensors; `shape_override` gives one weight a wrong shape.
void write_model(const std::string& dir, const ModelConfig& c, const std::string& bad_name = "",
                 const Shape& bad_shape = {}) {
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "config.json") << config_to_json(c).dump(2);
  std::mt19937_64 rng(42);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, spec] : expected_weights(c)) {
    const Shape shape = name == bad_name ? bad_shape : spec.shape;
    Tensor t(spec.integer ? DType::i64 : DType::f32, shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      if (spec.integer) t.data<std::int64_t>()[i] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.n_routed_experts));
      else t.data<float>()[i] = static_cast<float>(static_cast<double>(rng() % 2001) / 1000.0 - 1.0) * 0.05f;
    }
    tensors.emplace_back(name, std::move(t));
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

struct Result {
  int code = -1;
  std::string out, err;
};

class CaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tdiff-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    model_ = (dir_ / "model").string();
    write_model(model_, config_);
    tokens_ = path("prompts.txt");
    std::ofstream(tokens_) << "1 17 42 3 3 3 49\n\n  0 8 8 8 9  \n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string out(const std::string& name) const { return (dir_ / "out" / name).string(); }
  bool out_dir_empty() const { return fs::is_empty(dir_ / "out"); }

  Result tdiff(const std::string& args) const {
    Result r;
    const std::string o = path("stdout.txt"), e = path("stderr.txt");
    const int rc = std::system(fmt::format("{} {} > '{}' 2> '{}'", TDIFF_BIN, args, o, e).c_str());
    r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp(o);
    r.err = slurp(e);
    return r;
  }
  // Exit code 2, exactly one line on stderr that names `what`, nothing left in out/.
  void expect_input_error(const std::string& args, const std::string& what) const {
    const Result r = tdiff(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "stderr does not name " << what << ": " << r.err;
    EXPECT_TRUE(out_dir_empty()) << "output left behind for: " << args;
  }
  CaseInfo make_info(const std::string& pad_side = "right", std::int64_t pad_to = 0) const {
    CaseInfo c = case_for_model(model_);
    add_weight_checksums(c);
    const PromptSet p = read_token_file(tokens_, c.config.vocab_size);
    c.batch = pad_prompts(p, pad_to, pad_side == "left", c.config.vocab_size);
    c.seed = 9;
    c.pad_to = pad_to;
    c.pad_side = pad_side;
    c.prompts = p.lines;
    return c;
  }

  fs::path dir_;
  ModelConfig config_ = small_config();
  std::string model_, tokens_;
};

using CaseFile = CaseTest;
using CaseCli = CaseTest;

std::vector<std::int64_t> row(const Tensor& t, std::int64_t r) {
  const auto S = t.dim(1);
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < S; ++i) v.push_back(static_cast<std::int64_t>(t.value(r * S + i)));
  return v;
}

}  // namespace

TEST_F(CaseFile, RoundTrip) {
  const CaseInfo c = make_info("left", 10);
  const std::string f = out("case.h5");
  create_case(f, c);
  const CaseInfo r = read_case(f);
  EXPECT_EQ(r.format_version, "1");
  EXPECT_EQ(r.config_text, c.config_text);
  EXPECT_EQ(r.config.num_hidden_layers, 3);
  EXPECT_EQ(r.model_path, fs::weakly_canonical(model_).string());
  ASSERT_EQ(r.checksums.size(), 1u);
  EXPECT_EQ(r.checksums.at("model.safetensors"), file_sha256(model_ + "/model.safetensors"));
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.pad_to, 10);
  EXPECT_EQ(r.pad_side, "left");
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"1 17 42 3 3 3 49", "0 8 8 8 9"}));
  ASSERT_EQ(r.batch.ids.shape(), (Shape{2, 10}));
  EXPECT_EQ(row(r.batch.ids, 0), (std::vector<std::int64_t>{0, 0, 0, 1, 17, 42, 3, 3, 3, 49}));
  EXPECT_EQ(row(r.batch.mask, 1), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(row(r.batch.pos, 1), (std::vector<std::int64_t>{-5, -4, -3, -2, -1, 0, 1, 2, 3, 4}));
  EXPECT_EQ(r.batch.start, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(r.batch.length, (std::vector<std::int64_t>{7, 5}));
  // Stored types: ids i64, mask bool, pos i64.
  EXPECT_EQ(h5_read(f, "/inputs/mask").dtype(), DType::boolean);
  EXPECT_EQ(h5_read(f, "/inputs/pos").dtype(), DType::i64);
}

TEST_F(CaseFile, RandomPromptsAreDeterministic) {
  const auto a = random_prompts(3, 20, 50, 7), b = random_prompts(3, 20, 50, 7), c = random_prompts(3, 20, 50, 8);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids, c.ids);
  ASSERT_EQ(a.ids.size(), 3u);
  for (const auto& p : a.ids) {
    EXPECT_EQ(p.size(), 20u);
    for (auto id : p) EXPECT_TRUE(id >= 0 && id < 50);
  }
  // Fixed by the seed on every platform (mt19937_64 and integer arithmetic only).
  EXPECT_EQ(random_prompts(1, 6, 1000, 1).lines[0], "528 462 930 246 384 409");
  EXPECT_THROW(random_prompts(0, 4, 50, 1), InputError);
}

TEST_F(CaseFile, TokenFileErrorsNameFileAndLine) {
  const std::string bad = path("bad.txt");
  std::ofstream(bad) << "1 2 3\n\n4 x5 6\n";
  EXPECT_EQ(input_error_of([&] { read_token_file(bad, 50); }),
            bad + ":3:3: not a token id (expected integers separated by spaces)");
  std::ofstream(bad) << "1 2 3\n4 50 6\n";
  EXPECT_EQ(input_error_of([&] { read_token_file(bad, 50); }), bad + ":2: token id 50 is outside the vocabulary 0..49");
  std::ofstream(bad) << "1 -2\n";
  EXPECT_NE(input_error_of([&] { read_token_file(bad, 50); }).find(bad + ":1:"), std::string::npos);
  std::ofstream(bad) << "\n \n";
  EXPECT_NE(input_error_of([&] { read_token_file(bad, 50); }).find("no prompts"), std::string::npos);
  EXPECT_EQ(input_error_of([&] { read_token_file(path("none.txt"), 50); }), path("none.txt") + ": token file does not exist");
  const PromptSet p = read_token_file(tokens_, 50);
  EXPECT_EQ(input_error_of([&] { pad_prompts(p, 6, false, 50); }),
            tokens_ + ":1: the prompt has 7 tokens, more than --pad-to 6");
}

TEST_F(CaseFile, ReferenceEnvAndAtomicUpdate) {
  const std::string f = out("case.h5");
  create_case(f, make_info());
  EXPECT_TRUE(reference_stages(f).empty());
  const auto stages = build_stages(config_);
  {
    CaseUpdate u(f);
    // Written out of order: reference_stages() gives graph order back.
    for (std::size_t i : {std::size_t{5}, std::size_t{0}, stages.size() - 1})
      u.put_reference(stages[i].name, stages[i].outputs[0], Tensor(DType::f64, {2, 3}));
    EnvRecord env = capture_env("refcpu", "fixed", {"tdiff", "golden", "case file.h5"});
    env.extra["gpu"] = "none";
    u.put_env("golden-1", env);
    u.commit();
  }
  EXPECT_EQ(reference_stages(f), (std::vector<std::string>{stages[0].name, stages[5].name, stages.back().name}));
  EXPECT_EQ(reference_tensors(f, stages[0].name), std::vector<std::string>{stages[0].outputs[0]});
  EXPECT_EQ(read_reference(f, stages[5].name, stages[5].outputs[0]).shape(), (Shape{2, 3}));
  const auto env = read_env_records(f);
  ASSERT_EQ(env.count("golden-1"), 1u);
  const EnvRecord& e = env.at("golden-1");
  EXPECT_EQ(e.backend, "refcpu");
  EXPECT_EQ(e.policy, "fixed");
  EXPECT_EQ(e.command_line, "tdiff golden 'case file.h5'");
  EXPECT_EQ(e.extra.at("gpu"), "none");
  EXPECT_GT(e.omp_threads, 0);
  EXPECT_EQ(e.date_utc.size(), 20u);
  EXPECT_FALSE(e.compiler.empty());
  EXPECT_TRUE(case_runs(f).empty());

  // Dropped without commit: the case is byte for byte what it was.
  const std::string before = slurp(f);
  {
    CaseUpdate u(f);
    u.clear_reference();
    u.writer().write("/runs/r1/metrics", Tensor(DType::f64, {4}));
  }
  EXPECT_EQ(slurp(f), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "out"), fs::directory_iterator()), 1);
  EXPECT_EQ(read_case(f).prompts.size(), 2u);
}

// Every run adds an environment record (a dozen attributes, so HDF5 keeps them in dense
// storage) and the next update copies them: repeated updates must keep working (HDF5 1.10
// crashed copying dense variable-length string attributes; they are fixed-length now).
TEST_F(CaseFile, ManyUpdatesWithEnvironmentRecords) {
  const std::string f = out("case.h5");
  create_case(f, make_info());
  for (int i = 0; i < 4; ++i) {
    CaseUpdate u(f);
    EnvRecord env = capture_env("emu", "fixed", {"tdiff", "run", "case.h5"});
    for (int k = 0; k < 10; ++k) env.extra["key" + std::to_string(k)] = std::string(200 + k, 'x');
    u.put_env("run-" + std::to_string(i), env);
    u.writer().set_attr("/runs/run-" + std::to_string(i), "report_csv", std::string(100000, 'y'));
    u.commit();
  }
  const auto env = read_env_records(f);
  EXPECT_EQ(env.size(), 4u);
  EXPECT_EQ(env.at("run-3").extra.at("key9"), std::string(209, 'x'));
  EXPECT_EQ(h5_read_attrs(f, "/runs/run-0").at("report_csv").size(), 100000u);
}

TEST_F(CaseFile, ReadRejectsDamagedInputs) {
  const std::string f = out("case.h5");
  create_case(f, make_info());
  auto edit = [&](const std::function<void(H5Writer&)>& change) {
    const std::string g = out("edited.h5");
    H5Writer w(g, f);
    change(w);
    w.commit();
    return g;
  };
  Tensor ids = h5_read(f, "/inputs/ids");
  ids.data<std::int64_t>()[1] = 50;
  const std::string g1 = edit([&](H5Writer& w) { w.write("/inputs/ids", ids); });
  EXPECT_EQ(input_error_of([&] { read_case(g1); }), g1 + ": token id 50 at [0,1] is outside the vocabulary 0..49");
  const std::string g2 = edit([&](H5Writer& w) { w.set_attr("/", "format_version", "7"); });
  EXPECT_NE(input_error_of([&] { read_case(g2); }).find("case format version '7' is not supported"), std::string::npos);
  const std::string g3 = edit([&](H5Writer& w) { w.remove("/inputs/mask"); });
  EXPECT_EQ(input_error_of([&] { read_case(g3); }), g3 + ": dataset '/inputs/mask' is missing");
  const std::string g4 = edit([&](H5Writer& w) { w.set_attr("/", "model_config", "{\"model_type\": \"llama\"}"); });
  EXPECT_NE(input_error_of([&] { read_case(g4); }).find("model_type is 'llama'"), std::string::npos);
}

TEST_F(CaseCli, NewThenInfo) {
  const std::string f = out("case.h5");
  Result r = tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 3 --pad-to 12 -o '{}'", model_, tokens_, f));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 prompts x 12 tokens"), std::string::npos) << r.out;
  EXPECT_EQ(read_case(f).seed, 3u);

  r = tdiff(fmt::format("info '{}'", f));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 prompts x 12 tokens, padding right (pad-to 12), seed 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7 [0,7), 5 [0,5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compressed_sparse_attention"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference none (run: tdiff golden"), std::string::npos) << r.out;

  const std::string g = out("rand.h5");
  r = tdiff(fmt::format("case new --model '{}' --random-prompts 3 --len 5 --seed 4 --pad-side left -o '{}'", model_, g));
  ASSERT_EQ(r.code, 0) << r.err;
  const CaseInfo c = read_case(g);
  EXPECT_EQ(c.batch.ids.shape(), (Shape{3, 5}));
  EXPECT_EQ(c.prompts, random_prompts(3, 5, 50, 4).lines);
}

TEST_F(CaseCli, InfoModelStages) {
  Result r = tdiff(fmt::format("info --model '{}' --stages", model_));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto stages = build_stages(config_);
  std::istringstream lines(r.out);
  std::string line;
  std::size_t longest = 0;
  while (std::getline(lines, line)) longest = std::max(longest, line.size());
  EXPECT_LE(longest, 100u) << r.out;
  for (const auto& s : stages) EXPECT_NE(r.out.find(" " + s.name + " "), std::string::npos) << s.name;
  EXPECT_NE(r.out.find(fmt::format("{} of {} stages", stages.size(), stages.size())), std::string::npos);
  EXPECT_NE(r.out.find("model.safetensors"), std::string::npos);

  r = tdiff(fmt::format("info --model '{}' --stages 'L01.attn.*'", model_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("L00."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L01.attn."), std::string::npos) << r.out;
  expect_input_error(fmt::format("info --model '{}' --stages 'nope*'", model_), "nope*");
}

TEST_F(CaseCli, MissingModelDir) {
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", path("nomodel"), tokens_,
                                 out("c.h5")),
                     path("nomodel"));
}

TEST_F(CaseCli, TruncatedSafetensors) {
  const std::string cut = path("cut");
  fs::create_directories(cut);
  fs::copy_file(model_ + "/config.json", cut + "/config.json");
  fs::copy_file(model_ + "/model.safetensors", cut + "/model.safetensors");
  fs::resize_file(cut + "/model.safetensors", fs::file_size(cut + "/model.safetensors") - 100);
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", cut, tokens_, out("c.h5")),
                     "model.safetensors");
}

TEST_F(CaseCli, WeightWithWrongShape) {
  const std::string bad = path("badshape");
  write_model(bad, config_, "model.layers.1.self_attn.kv_proj.weight", {16, 15});
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", bad, tokens_, out("c.h5")),
                     "model.layers.1.self_attn.kv_proj.weight");
}

TEST_F(CaseCli, TokenOutsideVocabulary) {
  const std::string t = path("oov.txt");
  std::ofstream(t) << "1 2 3\n4 5 50\n";
  expect_input_error(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, t, out("c.h5")),
                     t + ":2:");
}

TEST_F(CaseCli, PadToTooSmall) {
  expect_input_error(
      fmt::format("case new --model '{}' --tokens '{}' --seed 1 --pad-to 5 -o '{}'", model_, tokens_, out("c.h5")),
      tokens_ + ":1:");
}

TEST_F(CaseCli, MissingTokenFile) {
  expect_input_error(
      fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, path("none.txt"), out("c.h5")),
      path("none.txt"));
}

TEST_F(CaseCli, ExistingCaseIsKeptOnError) {
  const std::string f = out("case.h5");
  ASSERT_EQ(tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 1 -o '{}'", model_, tokens_, f)).code, 0);
  const std::string before = slurp(f);
  EXPECT_EQ(tdiff(fmt::format("case new --model '{}' --tokens '{}' --seed 1 --pad-to 3 -o '{}'", model_, tokens_, f)).code, 2);
  EXPECT_EQ(slurp(f), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "out"), fs::directory_iterator()), 1);
}

TEST_F(CaseCli, InfoOnDamagedCaseFiles) {
  const std::string f = path("case.h5");
  create_case(f, make_info());
  const std::string cut = out("cut.h5");
  fs::copy_file(f, cut);
  fs::resize_file(cut, fs::file_size(f) / 2);
  Result r = tdiff(fmt::format("info '{}'", cut));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(cut), std::string::npos) << r.err;

  r = tdiff(fmt::format("info '{}'", tokens_));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(tokens_ + ": not an HDF5 file"), std::string::npos) << r.err;

  r = tdiff(fmt::format("info '{}'", path("missing.h5")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
}
