#pragma once
// The request tdiff hands an engine it runs itself (`--candidate-cmd`: bisect, determinism,
// run, ci): a small JSON file that says which case to run, where to write the dump, and which
// stages to take from the case's reference instead of computing them. The engine reads it
// through the tap (tap.h: tdiff_tap_open_request, tdiff_tap_substitute) or tdiff_capture, and
// finds it in $TDIFF_REQUEST (and as the command's {request}). docs/reference/engine-protocol.md.
//
//   {"format": "tdiff-engine-request", "version": 1,
//    "case": "/abs/case.h5", "dump": "/abs/out.h5", "mode": "run",
//    "substitute": ["embed", "L00.attn.core"], "seed": 12345}
//
// substitute: every output of these stages is the reference's tensor (/reference/<stage>/...),
// whatever the engine would compute; the stages after them read it. seed: the run's seed, from
// which tdiff's own backends draw their atomic orders and unstable tie orders; an engine may
// ignore it (tdiff's examples/04_candidate_dump/tap_emu.cpp uses it).
#include <cstdint>
#include <string>
#include <vector>

namespace tdiff {

inline constexpr const char* kEngineRequestEnv = "TDIFF_REQUEST";

struct EngineRequest {
  std::string case_path, dump_path;
  std::string mode = "run";             // the dump's mode: "run", "replay" or "isolated"
  std::vector<std::string> substitute;  // stage names
  std::uint64_t seed = 0;
};

// Written whole (a temporary renamed into place).
void write_engine_request(const std::string& path, const EngineRequest& r);
// InputError naming the file and what is wrong with it.
EngineRequest read_engine_request(const std::string& path);

}  // namespace tdiff
