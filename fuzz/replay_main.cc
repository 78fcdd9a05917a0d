// The replay driver that stands in for libFuzzer where there is no libFuzzer (gcc,
// SHARDCHECK_FUZZ=OFF): it runs LLVMFuzzerTestOneInput on every file named on the
// command line, recursing into directories, so CI replays the corpora with the very
// same target code. A crash or a finding (abort) fails the run; so does an empty run,
// since a corpus that silently vanished would otherwise pass.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::vector<char>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

void list_inputs(const fs::path& path, std::vector<fs::path>& out) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
      if (entry.is_regular_file(ec)) out.push_back(entry.path());
    }
  } else {
    out.push_back(path);
  }
}

int run_one(const fs::path& path) {
  std::vector<char> bytes;
  if (!read_file(path, bytes)) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  // An exact-size heap copy, so a sanitizer sees any read past the input's end.
  std::unique_ptr<std::uint8_t[]> copy(new std::uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
  std::copy(bytes.begin(), bytes.end(), copy.get());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(copy.get(), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) list_inputs(argv[i], inputs);
  std::sort(inputs.begin(), inputs.end());  // a stable order makes a failing log comparable
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...  (no inputs found)\n", argc > 0 ? argv[0] : "replay");
    return 2;
  }
  int failures = 0;
  for (const auto& path : inputs) failures += run_one(path);
  std::fprintf(stderr, "replay: %zu inputs, %d unreadable\n", inputs.size(), failures);
  return failures == 0 ? 0 : 1;
}
