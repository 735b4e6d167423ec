// Release-layout checkpoints end to end: `tdiff synth --format release`, loading, the reference,
// and bad release files (exit 2, one line naming the tensor).
#include "cli_support.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "casefile/case_file.h"
#include "model/config.h"
#include "casefile/h5io.h"
#include "formats/safetensors.h"
#include "synth/synth.h"
#include "formats/weights.h"
#include "base/sha256.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;
using Result = testing::CliResult;

class CliReleaseTest : public testing::CliTest {
 protected:
  // The shard holding release tensor `name`.
  std::string shard_of(const std::string& model, const std::string& name) {
    const auto index = nlohmann::json::parse(testing::slurp(model + "/model.safetensors.index.json"));
    return model + "/" + index["weight_map"][name].get<std::string>();
  }
  // Overwrites one byte of release tensor `name` in place.
  void patch_byte(const std::string& model, const std::string& name, std::size_t at, std::uint8_t value) {
    const std::string shard = shard_of(model, name);
    std::uint64_t header = 0;
    std::ifstream(shard, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
    const std::size_t begin = SafetensorsFile(shard).info(name).begin;
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(8 + header + begin + at));
    f.write(reinterpret_cast<const char*>(&value), 1);
  }
  // Rewrites the shard holding `name` with that tensor given another shape (and its bytes cut
  // or zero-padded to match), or without it (no shape; the index forgets it too).
  void reshape(const std::string& model, const std::string& name, std::optional<Shape> shape) {
    const std::string shard = shard_of(model, name), tmp = shard + ".new";
    std::vector<SafetensorsStream::Entry> entries;
    std::map<std::string, Tensor> data;
    {
      SafetensorsFile in(shard);
      for (const auto& n : in.names()) {
        if (n == name && !shape) continue;
        const TensorInfo& info = in.info(n);
        Shape s = n == name ? *shape : info.shape;
        entries.push_back({n, info.format, s, static_cast<std::uint64_t>(shape_numel(s)) * dtype_size(info.dtype)});
        data.emplace(n, in.tensor(n).clone());
      }
      SafetensorsStream out(tmp, entries, {{"format", "pt"}});
      for (std::size_t i = 0; i < out.entries().size(); ++i) {
        const auto& e = out.entries()[i];
        std::vector<std::byte> bytes(e.bytes);
        const Tensor& t = data.at(e.name);
        std::memcpy(bytes.data(), t.raw(), std::min<std::size_t>(bytes.size(), static_cast<std::size_t>(t.nbytes())));
        out.write(out.data_offset(i), bytes.data(), bytes.size());
      }
      out.close();
    }
    fs::rename(tmp, shard);
    if (!shape) {
      const std::string index_path = model + "/model.safetensors.index.json";
      auto index = nlohmann::json::parse(testing::slurp(index_path));
      index["weight_map"].erase(name);
      std::ofstream(index_path) << index.dump(2);
    }
  }
};

TEST_F(CliReleaseTest, ReferenceEqualsDequantisedHfModel) {
  const std::string rel = path("rel");
  Result r = run(fmt::format("synth --preset tiny --format release --shard-gb 0.0002 --seed 3 -o '{}'", rel));
  ASSERT_EQ(r.code, 0) << r.err;
  // The release's own files: a release config.json (legacy keys), shards and their index.
  const auto config = nlohmann::json::parse(testing::slurp(rel + "/config.json"));
  EXPECT_EQ(config["compress_ratios"], nlohmann::json({0, 4, 128, 4, 0}));  // 4 layers and the MTP entry
  EXPECT_EQ(config["num_hash_layers"], 1);
  EXPECT_FALSE(config.contains("layer_types"));
  EXPECT_TRUE(fs::exists(rel + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(rel + "/model.safetensors"));
  const ModelConfig c = load_config(rel + "/config.json");
  EXPECT_EQ(c.layer_types, synth_preset("tiny").layer_types);
  ModelWeights files(rel);
  EXPECT_GT(files.files().size(), 2u);  // sharded at 200 kB
  EXPECT_EQ(files.info("layers.1.attn.wq_a.weight").format, "F8_E4M3");
  EXPECT_EQ(files.info("layers.1.attn.wq_a.scale").format, "F8_E8M0");
  EXPECT_EQ(files.info("layers.1.ffn.experts.7.w3.weight").format, "I8");
  EXPECT_EQ(files.info("layers.1.ffn.experts.7.w3.weight").shape, (Shape{32, 32}));  // [I, D/2]
  EXPECT_EQ(files.info("layers.1.ffn.experts.7.w3.scale").shape, (Shape{32, 2}));   // [I, D/32]

  // The same model dequantised, written in the HF layout as float32 (exact: a 4-bit
  // significand times a power of two).
  const std::string hf = path("hf");
  fs::create_directories(hf);
  write_text_file(hf + "/config.json", config_to_json(c).dump(2));
  WeightStore store(rel, c);
  EXPECT_TRUE(store.release_layout());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, spec] : expected_weights(c)) {
    if (spec.integer) {
      tensors.emplace_back(name, store.i64(name).clone());
      continue;
    }
    const Tensor& w = store.f64(name);
    Tensor w32 = w.to(DType::f32);
    ASSERT_EQ(std::memcmp(w32.to(DType::f64).raw(), w.raw(), static_cast<std::size_t>(w.nbytes())), 0) << name;
    tensors.emplace_back(name, std::move(w32));
  }
  write_safetensors(hf + "/model.safetensors", tensors);

  for (const std::string& m : {rel, hf}) {
    r = run(fmt::format("case new --model '{}' --random-prompts 2 --len 40 --seed 5 -o '{}.h5'", m, m));
    ASSERT_EQ(r.code, 0) << r.err;
    r = run(fmt::format("golden '{}.h5'", m));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  const auto keys = h5_list_datasets(rel + ".h5", "/reference");
  ASSERT_GT(keys.size(), 100u);
  EXPECT_EQ(keys, h5_list_datasets(hf + ".h5", "/reference"));
  for (const auto& k : keys) {
    const Tensor a = h5_read(rel + ".h5", k), b = h5_read(hf + ".h5", k);
    ASSERT_EQ(a.nbytes(), b.nbytes()) << k;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.nbytes())), 0) << k;
  }
  // And `tdiff run` takes the release model as the candidate's weights too.
  r = run(fmt::format("run '{}.h5' --backend emu --policy fixed -o '{}'", rel, path("report")));
  EXPECT_LE(r.code, 1) << r.err;
}

// What the reference streams: any rows of a matrix (FP8 pieces crossing 128-row blocks) and
// one routed expert at a time equal the same part of the whole dequantised tensor.
TEST_F(CliReleaseTest, RowsAndExpertsOnDemandEqualTheWholeTensor) {
  const std::string rel = path("rel");
  Result r = run(fmt::format("synth --preset small --layers 1 --format release --seed 4 -o '{}'", rel));
  ASSERT_EQ(r.code, 0) << r.err;
  const ModelConfig c = load_config(rel + "/config.json");
  WeightStore store(rel, c);
  int fp8_crossing = 0;
  for (const auto& [name, spec] : expected_weights(c)) {
    if (spec.integer) continue;
    const Tensor whole = store.f64(name).clone();
    if (spec.shape.size() == 3) {
      const std::int64_t per = spec.shape[1] * spec.shape[2];
      for (std::int64_t e : {std::int64_t{0}, spec.shape[0] - 1}) {
        const Tensor one = store.expert_f64(name, e);
        ASSERT_EQ(one.shape(), (Shape{spec.shape[1], spec.shape[2]})) << name;
        EXPECT_EQ(std::memcmp(one.raw(), whole.data<double>() + e * per, one.nbytes()), 0) << name << " expert " << e;
      }
      continue;
    }
    if (spec.shape.size() != 2) continue;
    const std::int64_t O = spec.shape[0], K = spec.shape[1], r0 = O / 3;
    std::vector<double> part(static_cast<std::size_t>((O - r0) * K));
    store.rows_f64(name, r0, O, part.data());
    EXPECT_EQ(std::memcmp(part.data(), whole.data<double>() + r0 * K, part.size() * sizeof(double)), 0) << name;
    fp8_crossing += O > 128 && r0 % 128 != 0 && name.find("proj") != std::string::npos;
  }
  EXPECT_GT(fp8_crossing, 0);  // some FP8 matrix was read from inside one block across the next
}

TEST_F(CliReleaseTest, NanCodeNamesTheTensor) {
  const std::string rel = path("rel");
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --seed 3 -o '{}'", rel)).code, 0);
  patch_byte(rel, "layers.0.attn.wq_a.weight", 5, 0x7F);  // an E4M3 NaN code
  // case new reads every weight (weights changed after it are the checksum's business).
  const Result r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 5 -o '{}'", rel, path("c.h5")));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("layers.0.attn.wq_a.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NaN code"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("c.h5")));
}

// case new reads the weights on all threads: with NaN codes in two tensors (in two shards) the
// error names the first by name, on 1 thread and on 4.
TEST_F(CliReleaseTest, TwoNanCodesNameTheFirstWhateverTheThreadCount) {
  const std::string rel = path("rel");
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --shard-gb 0.0002 --seed 3 -o '{}'", rel)).code, 0);
  ASSERT_NE(shard_of(rel, "layers.0.attn.wq_a.weight"), shard_of(rel, "layers.3.attn.wq_a.weight"));
  patch_byte(rel, "layers.3.attn.wq_a.weight", 7, 0x7F);
  patch_byte(rel, "layers.0.attn.wq_a.weight", 5, 0xFF);  // -NaN
  const char* before = std::getenv("OMP_NUM_THREADS");
  const std::string saved = before ? before : "";
  for (const char* threads : {"1", "4"}) {
    ::setenv("OMP_NUM_THREADS", threads, 1);
    const Result r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 5 -o '{}'", rel, path("c.h5")));
    if (before) ::setenv("OMP_NUM_THREADS", saved.c_str(), 1);
    else ::unsetenv("OMP_NUM_THREADS");
    EXPECT_EQ(r.code, 2) << threads << ": " << r.err;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("layers.0.attn.wq_a.weight"), std::string::npos) << threads << ": " << r.err;
    EXPECT_FALSE(fs::exists(path("c.h5")));
  }
}

// Every shard's SHA-256 is recorded (hashed on all threads, each under its own name), and a
// shard changed afterwards is named by golden.
TEST_F(CliReleaseTest, EveryShardIsRecordedAndAChangedOneIsNamed) {
  const std::string rel = path("rel"), c = path("c.h5");
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --shard-gb 0.0002 --seed 3 -o '{}'", rel)).code, 0);
  ASSERT_EQ(run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 5 -o '{}'", rel, c)).code, 0);
  const CaseInfo info = read_case(c);
  std::size_t shards = 0;
  for (const auto& entry : fs::directory_iterator(rel)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".safetensors")) continue;
    ++shards;
    ASSERT_TRUE(info.checksums.count(name)) << name;
    EXPECT_EQ(info.checksums.at(name), file_sha256(entry.path().string())) << name;
  }
  EXPECT_GT(shards, 2u);
  EXPECT_EQ(info.checksums.size(), shards);
  const std::string changed = shard_of(rel, "layers.3.attn.wq_a.weight");
  patch_byte(rel, "layers.3.attn.wq_a.weight", 7, 0x01);
  const Result r = run(fmt::format("golden '{}'", c));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(changed), std::string::npos) << r.err;
}

TEST_F(CliReleaseTest, BadScaleShapeNamesTheScale) {
  const std::string rel = path("rel");
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --seed 3 -o '{}'", rel)).code, 0);
  reshape(rel, "layers.2.ffn.experts.3.w2.scale", Shape{64, 2});  // [D, I/32] is [64, 1]
  const Result r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 5 -o '{}'", rel, path("c.h5")));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("layers.2.ffn.experts.3.w2.scale' has shape [64,2], the weight needs [64,1]"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("c.h5")));
}

// The hip backend keeps a layer's routed experts as stored, all one way: a release whose
// experts are quantised but for one part is refused at the first read, naming that part.
TEST_F(CliReleaseTest, PartlyQuantisedExpertsNameThePart) {
  const std::string rel = path("rel");
  ASSERT_EQ(run(fmt::format("synth --preset tiny --format release --seed 3 -o '{}'", rel)).code, 0);
  reshape(rel, "layers.2.ffn.experts.3.w2.scale", std::nullopt);
  const Result r = run(fmt::format("case new --model '{}' --random-prompts 1 --len 16 --seed 5 -o '{}'", rel, path("c.h5")));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("tensor 'layers.2.ffn.experts.3.w2.weight' has no scale but expert 0's w2 has one"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("c.h5")));
}

TEST_F(CliReleaseTest, LayerListsAndFormatOptions) {
  // Layers 1-2 of tiny: CSA and HCA, renumbered 0 and 1.
  Result r = run(fmt::format("synth --preset tiny --layers 1-2 --seed 3 -o '{}'", path("m")));
  ASSERT_EQ(r.code, 0) << r.err;
  const ModelConfig c = load_config(path("m/config.json"));
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{LayerType::csa, LayerType::hca}));
  for (const char* bad : {"3-1", "0,0", "9", "x", "1-9"}) {
    r = run(fmt::format("synth --preset tiny --layers {} --seed 3 -o '{}'", bad, path("b")));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(testing::count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("--layers"), std::string::npos) << r.err;
  }
  r = run(fmt::format("synth --preset tiny --format release --dtype bf16 --seed 3 -o '{}'", path("b")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--dtype applies to --format hf"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("b")));
}

}  // namespace
}  // namespace tdiff
