// tdiff case new: a case file from a model folder and fixed prompts (docs/design/design.md §5).
#include <memory>

#include <fmt/format.h>

#include "app/case_workflows.h"
#include "app/progress.h"
#include "cli/command.h"
#include "casefile/case_file.h"
#include "base/error.h"

namespace tdiff::cli {

namespace {

struct CaseNewOptions {
  std::string model;
  std::string tokens;
  std::int64_t random_prompts = 0;
  std::int64_t len = 0;
  std::uint64_t seed = 0;
  std::int64_t pad_to = 0;
  std::string pad_side = "right";
  std::string output;
  bool force = false;
  bool rehash = false;
  std::int64_t decode = 0;
  std::int64_t generate = 0;
  std::string chunks;
};

void run_case_new(const CaseNewOptions& o) {
  if (o.tokens.empty() && o.random_prompts == 0) throw CLI::RequiredError("--tokens or --random-prompts");
  app::check_case_target(o.output, o.force);  // before the weights are hashed
  // Config and prompts first: their errors are cheap to find, hashing the weights is not.
  CaseInfo info = case_for_model(o.model);
  const auto vocab = info.config.vocab_size;
  // Sizes are checked against what the model can take before anything is allocated (a
  // 10^12-token prompt ended in std::bad_alloc).
  const auto max_pos = info.config.max_position_embeddings;
  if (o.len > max_pos) input_error("--len {}: more tokens than the model's {} positions", o.len, max_pos);
  if (o.pad_to > max_pos) input_error("--pad-to {}: more tokens than the model's {} positions", o.pad_to, max_pos);
  constexpr std::int64_t kMaxPrompts = 4096;
  if (o.random_prompts > kMaxPrompts)
    input_error("--random-prompts {}: more than the {} prompts a case holds", o.random_prompts, kMaxPrompts);
  app::CaseRequest request;
  request.model_dir = o.model;
  request.prompts =
      o.tokens.empty() ? random_prompts(o.random_prompts, o.len, vocab, o.seed) : read_token_file(o.tokens, vocab);
  request.pad_to = o.pad_to;
  request.pad_left = o.pad_side == "left";
  request.seed = o.seed;
  request.replace = o.force;
  request.rehash = o.rehash;
  request.decode = o.decode;
  request.generate = o.generate;
  if (!o.chunks.empty() && o.decode == 0 && o.generate == 0)
    throw CLI::RequiresError("--prefill-chunks", "--decode or --generate");
  if (!o.chunks.empty()) request.chunks = parse_chunk_list(o.chunks, "--prefill-chunks");
  Progress progress("case new: generating token", static_cast<std::size_t>(o.generate));
  request.on_token = [&](std::int64_t done, std::int64_t) { progress.step(static_cast<std::size_t>(done), "greedy"); };
  ChecksumReport checksums;
  info = app::make_case(request, o.output, &checksums);
  const std::string schedule = info.schedule.describe(info.batch.seq());
  fmt::print("{}: {} prompts x {} tokens ({}), model {}\n", o.output, info.batch.rows(), info.batch.seq(),
             schedule.empty() ? o.pad_side + " padding" : "generation: " + schedule, info.model_path);
  // On stderr: how much of the checkpoint was read again (none, when the folder's checksum
  // cache vouched for every file).
  fmt::print(stderr, "{}\n", checksums.summary());
  if (!checksums.note.empty()) fmt::print(stderr, "tdiff: note: {}\n", checksums.note);
}

void run_case_seal(const std::string& file) {
  const app::Sealed s = app::seal_case(file);
  const std::string was = s.was.empty() ? "the record already matched" : s.was == "unsealed" ? "it had no record" : s.was;
  fmt::print("{}: sealed, {} bytes checksummed ({})\n", file, s.bytes, was);
}

}  // namespace

void setup_case(CLI::App& app) {
  auto* cmd = app.add_subcommand("case", "Create a case file (a model and fixed inputs), or seal one edited outside tdiff");
  cmd->require_subcommand(1);

  auto o = std::make_shared<CaseNewOptions>();
  auto* sub = cmd->add_subcommand("new", "Create a case file from a model folder and token-id prompts");
  sub->add_option("--model", o->model, "Model folder (HF layout: config.json + *.safetensors)")->required();
  auto* tokens = sub->add_option("--tokens", o->tokens,
                                 "Token file: one prompt per line, token ids separated by spaces");
  auto* random = sub->add_option("--random-prompts", o->random_prompts, "Draw N random prompts instead")
                     ->check(CLI::PositiveNumber);
  auto* len = sub->add_option("--len", o->len, "Length of each random prompt")->check(CLI::PositiveNumber);
  tokens->excludes(random);
  random->needs(len);
  len->needs(random);
  sub->add_option("--seed", o->seed, "Seed of the case (random prompts, later runs)")->required();
  sub->add_option("--pad-to", o->pad_to, "Pad every prompt to this length (default: the longest prompt)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--pad-side", o->pad_side, "Where padding goes")
      ->check(CLI::IsMember({"right", "left"}))
      ->capture_default_str();
  auto* decode = sub->add_option("--decode", o->decode,
                                 "A generation case: the last N tokens of every prompt are decode steps, judged one "
                                 "by one against the reference's rows (teacher-forced; prompts of one length)")
                     ->check(CLI::PositiveNumber);
  sub->add_option("--generate", o->generate,
                  "A generation case whose N decoded tokens the float64 reference chooses greedily after each prompt, "
                  "one decode step at a time against its cache (N token-steps of refcpu; prompts of one length)")
      ->check(CLI::PositiveNumber)
      ->excludes(decode);
  sub->add_option("--prefill-chunks", o->chunks,
                  "How the prompt before the decode steps is prefilled: chunk sizes summing to it (5,3,7; default whole)");
  sub->add_option("-o,--output", o->output, "Case file to write (atomically); an existing file is kept unless --force")
      ->required();
  sub->add_flag("--force", o->force, "replace an existing file at --output (its reference and recorded runs are lost)");
  sub->add_flag("--rehash", o->rehash,
                "hash every weight file whole, whatever the model folder's checksum cache says (the cache is refreshed)");
  sub->footer(
      "The SHA-256 of a weight file whose size, modification time and inode match the model folder's checksum\n"
      "cache (.tdiff-checksums.json in the folder, else under $XDG_CACHE_HOME/tdiff) is taken from it; stderr\n"
      "says how many files were hashed.\n"
      "Examples:\n"
      "  tdiff case new --model tiny-model --tokens cases/tiny/prompts.txt --seed 1 --pad-to 48 -o tiny.h5\n"
      "  tdiff case new --model tiny-model --random-prompts 4 --len 32 --seed 7 --pad-side left -o rand.h5\n"
      "  tdiff case new --model tiny-model --random-prompts 4 --len 32 --seed 8 --rehash -o fresh.h5\n"
      "  tdiff case new --model tiny-model --random-prompts 1 --len 40 --seed 9 --decode 16 --prefill-chunks 5,3,16 -o gen.h5\n"
      "  tdiff case new --model tiny-model --random-prompts 1 --len 24 --seed 9 --generate 16 --prefill-chunks 5,3,16 -o greedy.h5\n");
  sub->callback([o] { run_case_new(*o); });

  auto file = std::make_shared<std::string>();
  auto* seal = cmd->add_subcommand(
      "seal", "Record the checksum of a case file edited outside tdiff (h5py, HDF5 tools), after checking it reads");
  seal->add_option("file", *file, "case file to seal (replaced atomically)")->required();
  seal->footer(
      "tdiff keeps a case's checksum in the file's first 512 bytes and refuses a case that no longer matches it\n"
      "(\"the case file is damaged\"). A case changed on purpose is sealed again with this command.\n"
      "Example:\n"
      "  python3 -c 'import h5py; h5py.File(\"tiny.h5\", \"r+\").attrs[\"note\"] = \"edited\"' && tdiff case seal tiny.h5\n"
      "Exit code: 0, or 2 when the file does not read as a case (named).");
  seal->callback([file] { run_case_seal(*file); });
}

}  // namespace tdiff::cli
