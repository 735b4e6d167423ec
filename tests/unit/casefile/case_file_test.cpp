// Case files (casefile/case_file.h) on a small real model folder written here: a round trip,
// random prompts, token-file errors, reference updates with environment records, damaged files.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "casefile/case_file.h"
#include "base/error.h"
#include "model/stage_graph.h"
#include "model/tensor_contract.h"
#include "model_folder.h"
#include "base/sha256.h"

namespace fs = std::filesystem;
using namespace tdiff;

namespace {

using CaseFile = tdiff::testing::ModelFolderTest;
using tdiff::testing::slurp_bytes;

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

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
  const CaseInfo info = make_info();
  create_case(f, info);
  EXPECT_TRUE(reference_stages(f).empty());
  const auto stages = build_stages(config_);
  // Each tensor in the shape the case's contract gives it: reading checks it.
  const TensorContract contract(stages, config_, info.batch.rows(), info.batch.seq());
  auto shape_of = [&](const Stage& s) { return contract.find(s.name + "/" + s.outputs[0])->shape(); };
  {
    CaseUpdate u(f);
    // Written out of order: reference_stages() gives graph order back.
    for (std::size_t i : {std::size_t{5}, std::size_t{0}, stages.size() - 1})
      u.put_reference(stages[i].name, stages[i].outputs[0], Tensor(DType::f64, shape_of(stages[i])));
    EnvRecord env = capture_env("refcpu", "fixed", {"tdiff", "golden", "case file.h5"});
    env.extra["gpu"] = "none";
    u.put_env("golden-1", env);
    u.commit();
  }
  EXPECT_EQ(reference_stages(f), (std::vector<std::string>{stages[0].name, stages[5].name, stages.back().name}));
  EXPECT_EQ(reference_tensors(f, stages[0].name), std::vector<std::string>{stages[0].outputs[0]});
  EXPECT_EQ(read_reference(f, stages[5].name, stages[5].outputs[0]).shape(), shape_of(stages[5]));
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
  const std::string before = slurp_bytes(f);
  {
    CaseUpdate u(f);
    u.clear_reference();
    u.writer().write("/runs/r1/metrics", Tensor(DType::f64, {4}));
  }
  EXPECT_EQ(slurp_bytes(f), before);
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
