#include "app/envelope.h"

#include "casefile/env_record.h"
#include "emu/arith.h"

namespace tdiff::app {

std::string run_id_for(const std::string& given, const std::string& command) {
  return given.empty() ? make_run_id(command) : given;
}

std::uint64_t run_seed_for(std::uint64_t given, const std::string& run_id) {
  if (given != 0) return given;
  std::uint64_t h = 0;
  for (unsigned char ch : run_id) h = arith::mix64(h ^ ch);
  return h;
}

}  // namespace tdiff::app
