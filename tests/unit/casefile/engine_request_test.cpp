// The engine request (casefile/engine_request.h): written whole and read back; a bad one is an
// InputError naming the file and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "casefile/engine_request.h"

namespace tdiff {
namespace {

namespace fs = std::filesystem;

class EngineRequestTest : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tdiff-request-" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  }
  std::string refused(const std::string& path) const {
    try {
      read_engine_request(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "accepted";
  }
};

TEST_F(EngineRequestTest, ReadsBackWhatItWrites) {
  EngineRequest r;
  r.case_path = "/cases/c.h5";
  r.dump_path = "/tmp/d.h5";
  r.mode = "isolated";
  r.substitute = {"embed", "L00.attn.core"};
  r.seed = 18446744073709551615ull;
  const std::string path = (dir / "r.json").string();
  write_engine_request(path, r);
  const EngineRequest back = read_engine_request(path);
  EXPECT_EQ(back.case_path, r.case_path);
  EXPECT_EQ(back.dump_path, r.dump_path);
  EXPECT_EQ(back.mode, r.mode);
  EXPECT_EQ(back.substitute, r.substitute);
  EXPECT_EQ(back.seed, r.seed);
}

TEST_F(EngineRequestTest, ABadRequestNamesTheFileAndTheField) {
  const std::string head = R"({"format": "tdiff-engine-request", "version": 1, )";
  EXPECT_NE(refused((dir / "none.json").string()).find("cannot read the engine request"), std::string::npos);
  EXPECT_NE(refused(file("a.json", "[1, 2")).find("a.json: the engine request is not a JSON object"), std::string::npos);
  EXPECT_NE(refused(file("b.json", R"({"format": "other", "version": 1})")).find("not a tdiff-engine-request"),
            std::string::npos);
  EXPECT_NE(refused(file("c.json", head + R"("dump": "/d.h5"})")).find("without \"case\""), std::string::npos);
  EXPECT_NE(refused(file("d.json", head + R"("case": "/c.h5", "dump": "/d.h5", "mode": "fast"})")).find("mode 'fast'"),
            std::string::npos);
  EXPECT_NE(refused(file("e.json", head + R"("case": "/c.h5", "dump": "/d.h5", "substitute": [1]})")).find("non-string"),
            std::string::npos);
  EXPECT_NE(refused(file("f.json", head + R"("case": "/c.h5", "dump": "/d.h5", "seed": -1})")).find("\"seed\""),
            std::string::npos);
}

}  // namespace
}  // namespace tdiff
