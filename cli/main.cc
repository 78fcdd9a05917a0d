#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "commands.h"

namespace {

// SHARDCHECK_VERSION is CMake's project version (CMakeLists.txt), the one the Python
// package is checked against (python/tests).
constexpr const char* kVersion = "shardcheck " SHARDCHECK_VERSION " (affine map format 1)";

// `shardcheck --help` covers every subcommand: what it prints, the files it writes and
// its exit codes (README "The command line" says the same at length). Each subcommand's
// own --help ends with its section.
struct HelpSection {
  const char* subcommand;
  const char* text;
};

constexpr HelpSection kSections[] = {
    {"check", R"(  check MAP.json [--json]
      Checks a bare map, or every parameter of an envelope {"version": 1, "params": {...}},
      against spec 3 conditions 1-6. Prints `valid` or `refused KIND: MESSAGE` per map
      (envelope lines start with the parameter name); --json prints one JSON object per
      line instead (param, verdict, kind, message, rank, piece, address, side, path).
      Writes no files.
      Exit: 0 every map valid; 1 some map refused (a map whose text JSON cannot
      hold, such as a key given twice, is refused format); 2 unreadable file (a
      directory is named as one), or text not shaped like a map or an envelope.
)"},
    {"repro", R"(  repro CASE.json [--policy strict|legacy | --target NAME] [--oracle truth|same-map] [--json]
  repro DIR [...] [--junit FILE]
      Replays a case file. Prints `refused KIND: ...`, `exact`, or `WRONG` with the first
      differing element; --json prints one JSON object. Given a folder, replays every
      *.json below it, one line per case (PASS, FAIL or ERROR) and a count. Writes no
      files but --junit FILE (one test case per case file).
      Exit: 0 refused or exact, as the case expects; 1 silently wrong, a target fault, or
      not what the case expects (any case, for a folder); 2 unreadable or unusable case,
      a target that does not start, or bad usage.
)"},
    {"digest", R"(  digest MAP.json [--dtype D] [--scale-power P] [--state S] [--param NAME] SHARD...
  digest CASE.json [--state S]
      Prints the content digest of the tensor a map and its shards describe, and each
      rank's share (SHARD: a raw little-endian file, RANK=PATH or PATH). Writes no files.
      Exit: 0 computed (and equal to the recorded value, with --state); 1 map or shards
      refused, or the recorded value differs or is missing; 2 unreadable input, bad usage.
)"},
    {"campaign", R"(  campaign [--seed S] [--cases N] [--time SECONDS] [--jobs J] [--out DIR] [...]
  campaign --resume DIR [--jobs J] [...]
      Generates (layout, corruption) cases, runs them through the oracle, prints a table.
      Without --cases or --time it runs 60 s; --seed takes 0 to 2^64-1 (default random,
      printed); --jobs 0 (the default) means one worker per core.
      Writes into --out (default campaign-out/), kept current while it runs:
        findings/SIGNATURE.json  one minimised case file per finding signature
        report.json              totals, table rows, findings, `complete`
        table.txt                the table
        report.html              the report as one page, with charts (docs/reports.md)
        checkpoint.json          what --resume reads
      --junit FILE and --markdown FILE also write a JUnit XML report (a test case per
      finding signature and per table row) and a Markdown summary (docs/reports.md).
      Prints `new finding: SIGNATURE (case I) -> FILE` as each finding file is written.
      One run at a time writes a folder (a lock), and never into another run's outputs:
      --overwrite removes them first, --resume DIR continues a stopped campaign. The
      report files and the folder are tried before the first case runs.
      SIGINT/SIGTERM stop at the next case boundary, the outputs written for --resume;
      a second SIGINT stops at once.
      Exit: 0 nothing silently wrong and no finding; 1 a finding (silently wrong, a
      crash, time-out or out-of-memory case, a target fault; valid-but-different only
      with --strict-layout); 2 bad usage, a target that does not start, a checkpoint
      that cannot be resumed, an --out in use or holding another run's outputs, a
      report file that cannot be written, or cases lost or doubled by the campaign
      itself (its ledger does not add up); 3 the outputs are incomplete: a file could
      not be written (a full disk), the verdict line says which; 130 stopped by SIGINT
      (at once, by a second one) or 143 by SIGTERM before the end: resume it.
  campaign merge DIR... --out DIR [--junit FILE] [--markdown FILE] [--target CMD] [--overwrite]
      Combines the output directories of the N shards of one campaign (--shard I/N) into
      one: report.json, table.txt and findings/ (the smallest case per signature) in
      --out, as one unsharded run would write them (docs/scale-out.md). Each finding
      file it carries must be the case its shard records and fail when replayed as
      `repro` replays it; the shards' exec: target runs only when given as --target.
      Exit: as the campaign's (0, 1, 3); 2 also for shards of different campaigns, a
      shard given twice, missing or unfinished, a shard whose tallies, findings and
      files disagree, a finding file that is not its case or does not fail when
      replayed, or an --out in use or holding another run's outputs.
)"},
    {"deepspeed",
     R"(  deepspeed inspect CHECKPOINT_DIR [--cases DIR] [--json] [--max-checkpoint-bytes N] [--unsafe-load]
      Reads a DeepSpeed 0.19.8 checkpoint's affine maps (universal_checkpoint_info) and
      AutoEP placements, checks each with the core and rebuilds every parameter they
      describe with strict conversion; prints a table, writes a case file per refused
      map into --cases (default shardcheck-inspect/). Runs the Python package
      (python -m shardcheck; $SHARDCHECK_PYTHON picks the interpreter), which reads the
      files without torch and runs nothing from them (contract 2); --unsafe-load is full
      unpickling with torch.load (runs code from the file: trusted files only).
      Exit: 0 every parameter rebuilt exactly; 1 some map refused; 2 unreadable or
      refused checkpoint (stderr names the file and why), or no Python package.
)"},
    {"plan", R"(  plan SOURCE.json TARGET.json [--json] [--dtype D] [--compare-replicas] [--max-segments N]
      Plans the transfer from the shards of the source map to those of the target map
      (contract section 11) and prints its summary: segments, elements and bytes per
      (source rank, target rank) pair and read per source rank; --json prints the plan
      (segments as DeepSpeed's TransferSegment.to_dict). Or prints `refused KIND: ...`.
      Writes no files.
      Exit: 0 planned; 1 refused; 2 unreadable file, not a map, or bad usage.
)"},
    {"reduce", R"(  reduce CASE.json --out FILE [--policy P | --target T] [--backend B] [--max-evaluations N]
      Reduces a case file while it shows the same thing: a finding file its signature, any
      other case its outcome and refusal kind under the implementation. Edits are tried
      one by one (remove a rank, a piece, an axis; lower an integer; zero the values;
      simplify the dtype), each kept when the case still shows it, until no single edit
      does (locally minimal) or N replays were made. Writes FILE (the case with a
      `reduced` record) and prints one line.
      Exit: 0 reduced (or already minimal); 2 unreadable or unusable case, a case that does
      not show it when replayed, or bad usage; 3 FILE could not be written.
)"},
};

std::string overview() {
  std::string text = "Subcommands (SUBCOMMAND --help lists its options; --help-all lists them all):\n";
  for (const HelpSection& section : kSections) text += std::string("\n") + section.text;
  text +=
      "\nExit codes shared by every subcommand: 0 nothing found, 1 something refused or found,\n"
      "2 unreadable input or bad usage; campaign (and merge) also 3, outputs incomplete, and\n"
      "campaign 130 or 143, stopped by SIGINT or SIGTERM. --help and --version exit 0.";
  return text;
}

}  // namespace

namespace {

// A campaign's workers run the device code on OpenMP threads, whose default wait is a
// spin: on a machine whose cores the workers already fill, a worker's spinning threads
// starve the others (--backend device-omp: 344 cases/s against 1,669 with passive waits
// at load 6). libgomp reads OMP_WAIT_POLICY once, when it is loaded, so a campaign that
// was not given one is started again with it. Not for the other commands: one conversion
// at a time has the cores to itself.
void wait_passively_in_campaigns(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != "campaign" || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only when it fails: then the campaign spins
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardcheck::cli;
  wait_passively_in_campaigns(argc, argv);
  CLI::App app{"shardcheck: verify DeepSpeed affine shard maps and replay conversion cases", "shardcheck"};
  app.set_version_flag("--version", kVersion);
  app.set_help_all_flag("--help-all", "Print this help and every subcommand's options, then exit");
  app.require_subcommand(1);
  RunState state;
  register_check(app, state);
  register_repro(app, state);
  register_digest(app, state);
  register_campaign(app, state);
  register_plan(app, state);
  register_reduce(app, state);
  register_deepspeed(app, state);
  register_serve_protocol(app, state);
  // After the subcommands are made, so that they do not inherit the whole overview.
  app.footer(overview());
  for (const HelpSection& section : kSections) {
    app.get_subcommand(section.subcommand)->footer(section.text);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes would collide with ours: only help and version succeed.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardcheck: %s\n", e.what());
    return kExitUsage;
  }
  return state.exit_code;
}
