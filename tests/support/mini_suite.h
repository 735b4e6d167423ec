#pragma once
// A scratch folder (CliTest) with a two-case suite: prompts 13-16 of the tiny golden set on the
// tiny model cut to two layers, for the suite-file tests and the `tdiff ci` tests.
#include <fstream>
#include <sstream>
#include <string>

#include "cli_support.h"

namespace tdiff::testing {

class MiniSuite : public CliTest {
 protected:
  // Prompts 13-16 of the tiny golden set on the same model cut to two layers (naive's bf16
  // top-k comparisons tie in L01), in two cases.
  void write_suite(const std::string& extra_case = "") {
    const std::string golden = slurp(std::string(TDIFF_SOURCE_DIR) + "/cases/tiny/golden.txt");
    std::stringstream in(golden), out;
    std::string line;
    for (int i = 1; std::getline(in, line); ++i)
      if (i >= 13 && i <= 16) out << line << "\n";
    std::ofstream(path("p.txt")) << out.str();
    std::ofstream(path("suite.toml")) << "name = \"mini\"\ntokens = \"p.txt\"\nrepeat = 2\n"
                                         "[model]\npreset = \"tiny\"\nseed = 1\nlayers = 2\n"
                                         "[[case]]\nname = \"right\"\nprompts = [1, 2]\npad_to = 34\nseed = 5\n"
                                         "[[case]]\nname = \"left\"\nprompts = [3, 4, 1]\npad_side = \"left\"\nseed = 6\n"
                                      << extra_case;
  }
  // The suite file with one line changed, for error tests.
  std::string suite_with(const std::string& from, const std::string& to) {
    write_suite();
    std::string text = slurp(path("suite.toml"));
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(path("bad.toml")) << text;
    return path("bad.toml");
  }
};

}  // namespace tdiff::testing
