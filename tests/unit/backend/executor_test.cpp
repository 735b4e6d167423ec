// The executor with an asynchronous backend (Backend::deferred_outputs, as hip): its outputs
// reach on_stage only after its finish(), in stage order, before another backend runs and at
// the end; device copies are released after their last reader; synchronous backends see no
// change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/executor.h"
#include "synth/synth.h"

namespace tdiff {
namespace {

// Every stage: out = in + 1 (one f64 element), with a log of what happened.
class Counting : public Backend {
 public:
  Counting(std::string name, bool async, std::vector<std::string>& log) : name_(std::move(name)), async_(async), log_(log) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> run(const Stage& s, const std::vector<const Tensor*>& in, RunContext&) override {
    log_.push_back(name_ + " run " + s.name);
    Tensor t(DType::f64, {1});
    t.data<double>()[0] = in.empty() ? 0.0 : in[0]->data<double>()[0] + 1;
    return {t};
  }
  bool implements(OpKind) const override { return true; }  // one rule for every kind
  bool deferred_outputs() const override { return async_; }
  void finish() override { log_.push_back(name_ + " finish"); }
  void release(const std::string& key) override { log_.push_back(name_ + " release " + key); }

 private:
  std::string name_;
  bool async_;
  std::vector<std::string>& log_;
};

// A RunContext over the tiny synthetic model (the stages here read no weights).
struct Context {
  Context() : dir(std::filesystem::temp_directory_path() / ("tdiff-executor-test-" + std::to_string(::getpid()))) {
    config = synth_preset("tiny");
    write_synth_model(config, 1, dir.string());
    weights = std::make_unique<WeightStore>(dir.string(), config);
  }
  ~Context() { std::filesystem::remove_all(dir); }
  RunContext ctx() { return RunContext{config, *weights, batch}; }
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<WeightStore> weights;
  Batch batch;
};

std::vector<Stage> chain(int n) {
  std::vector<Stage> stages;
  for (int i = 0; i < n; ++i) {
    Stage s;
    s.name = "s" + std::to_string(i);
    s.kind = OpKind::add;
    if (i > 0) s.inputs.push_back({"s" + std::to_string(i - 1), "y"});
    s.outputs = {"y"};
    stages.push_back(s);
  }
  return stages;
}

TEST(Executor, AsyncOutputsReachTapsAfterFinishInOrder) {
  std::vector<std::string> log;
  Counting gpu("gpu", true, log), cpu("cpu", false, log);
  const auto stages = chain(5);  // s0..s2 on gpu, s3 on cpu, s4 on gpu
  Context c;
  RunContext ctx = c.ctx();
  TensorMap env;
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& out) {
    log.push_back("tap " + s.name + " = " + std::to_string(static_cast<int>(out[0].data<double>()[0])));
  };
  execute(stages, [&](const Stage& s) -> Backend& { return s.name == "s3" ? cpu : gpu; }, ctx, env, hooks);
  const std::vector<std::string> want = {
      "gpu run s0", "gpu run s1", "gpu release s0/y", "gpu run s2", "gpu release s1/y",
      // the cpu stage reads s2's output: the gpu finishes and its taps run first
      "gpu finish", "tap s0 = 0", "tap s1 = 1", "tap s2 = 2",
      "cpu run s3", "tap s3 = 3", "gpu release s2/y",
      "gpu run s4", "cpu release s3/y", "gpu finish", "tap s4 = 4"};
  EXPECT_EQ(log, want);
  EXPECT_EQ(env.at("s4/y").data<double>()[0], 4.0);
}

TEST(Executor, SynchronousBackendsTapImmediately) {
  std::vector<std::string> log;
  Counting cpu("cpu", false, log);
  Context c;
  RunContext ctx = c.ctx();
  TensorMap env;
  ExecutorHooks hooks;
  hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>&) { log.push_back("tap " + s.name); };
  execute(chain(2), [&](const Stage&) -> Backend& { return cpu; }, ctx, env, hooks);
  EXPECT_EQ(log, (std::vector<std::string>{"cpu run s0", "tap s0", "cpu run s1", "tap s1", "cpu release s0/y"}));
}

// The replace hook (selection replay): later stages read the replacement, the taps still see
// the stage's own output, also when that output is deferred.
TEST(Executor, ReplacedOutputsFeedLaterStagesButTapsSeeTheOriginal) {
  std::vector<std::string> log;
  Counting gpu("gpu", true, log);
  Context c;
  RunContext ctx = c.ctx();
  TensorMap env;
  ExecutorHooks hooks;
  std::vector<double> tapped;
  hooks.on_stage = [&](const Stage&, std::size_t, const std::vector<Tensor>& out) { tapped.push_back(out[0].data<double>()[0]); };
  hooks.replace = [&](const Stage& s, std::size_t, std::vector<Tensor>& out) {
    if (s.name != "s1") return false;
    Tensor t(DType::f64, {1});
    t.data<double>()[0] = 10;
    out.push_back(t);
    return true;
  };
  execute(chain(3), [&](const Stage&) -> Backend& { return gpu; }, ctx, env, hooks);
  EXPECT_EQ(tapped, (std::vector<double>{0, 1, 11}));  // s1 tapped as computed, s2 = replacement + 1
  EXPECT_EQ(env.at("s2/y").data<double>()[0], 11.0);
}

}  // namespace
}  // namespace tdiff
