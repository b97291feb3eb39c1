// `moegraph tokenize [MODEL_OR_TOKENIZER_JSON]`: text on stdin -> token ids on stdout, one line
// of ids per input line (as llama.cpp's tokenize tool); `--decode` the reverse, one line of ids
// (separated by spaces or commas) -> its text. The tokenizer is a tokenizer.json given directly,
// the one in a checkpoint folder, or the one beside a graph (the bundled model's by default).
#include <charconv>
#include <iostream>
#include <string>

#include "framework/core/error.h"
#include "framework/text/tokenizer.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {

namespace {

struct TokenizeArgs {
  std::string source;
  bool decode = false;
  bool no_special = false;
  bool skip_special = false;
};

std::filesystem::path tokenizer_path(const std::string& source) {
  const std::filesystem::path p(source);
  std::error_code ec;
  if (!source.empty() && std::filesystem::is_directory(p, ec) &&
      std::filesystem::exists(p / "tokenizer.json", ec)) {
    return p / "tokenizer.json";  // a checkpoint folder or an imported graph's folder
  }
  const std::string ext = p.extension().string();
  if (!source.empty() && ext != ".pbtxt" && ext != ".pb" && !std::filesystem::is_directory(p, ec)) {
    return p;  // a tokenizer.json (load says what is wrong with it)
  }
  return resolve_tokenizer(resolve_model(source), "");
}

// Reads one line (without its '\n') of at most text::kMaxEncodeBytes bytes; false at the end of
// the input.
bool read_line(std::streambuf& in, std::string& line, int64_t line_number) {
  line.clear();
  int c = in.sbumpc();
  if (c == std::char_traits<char>::eof()) return false;
  while (c != std::char_traits<char>::eof() && c != '\n') {
    MG_CHECK(line.size() < text::kMaxEncodeBytes,
             "stdin line {}: longer than {} MiB (one line is encoded at a time)", line_number,
             text::kMaxEncodeBytes >> 20);
    line += static_cast<char>(c);
    c = in.sbumpc();
  }
  return true;
}

std::vector<int32_t> parse_ids(const std::string& line, int64_t line_number,
                               const text::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t start = line.find_first_not_of(" ,\t\r[]", pos);
    if (start == std::string::npos) break;
    size_t end = line.find_first_of(" ,\t\r[]", start);
    if (end == std::string::npos) end = line.size();
    const std::string item = line.substr(start, end - start);
    int64_t v = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    MG_CHECK(ec == std::errc() && ptr == item.data() + item.size() && v >= 0,
             "stdin line {}: '{}' is not a token id (expected ids separated by spaces or "
             "commas)",
             line_number, item.substr(0, 40));
    MG_CHECK(v < tokenizer.id_bound(),
             "stdin line {}: token id {} is outside the tokenizer's {} ids ({})", line_number, v,
             tokenizer.id_bound(), tokenizer.name());
    ids.push_back(static_cast<int32_t>(v));
    pos = end;
  }
  return ids;
}

int tokenize(const TokenizeArgs& a) {
  const auto tokenizer = text::Tokenizer::load(tokenizer_path(a.source));
  std::streambuf& in = *std::cin.rdbuf();
  std::string line;
  for (int64_t n = 1; read_line(in, line, n); ++n) {
    if (a.decode) {
      std::cout << tokenizer->decode(parse_ids(line, n, *tokenizer), a.skip_special) << "\n";
    } else {
      std::cout << fmt::format("{}\n", fmt::join(tokenizer->encode(line, !a.no_special), " "));
    }
  }
  std::cout.flush();
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Text on stdin to token ids, one line of ids per input line (--decode: ids to text)");
  cmd->add_option("MODEL_OR_TOKENIZER_JSON", args->source,
                  "A tokenizer.json, a folder holding one, or a graph (its tokenizer.json "
                  "beside it); default: the bundled model's");
  cmd->add_flag("--decode", args->decode,
                "Read ids (separated by spaces or commas) per line, print their text");
  cmd->add_flag("--no-special", args->no_special,
                "Encode without the special tokens the tokenizer adds (BOS/EOS)");
  cmd->add_flag("--skip-special", args->skip_special,
                "With --decode: leave special tokens out of the text");
  return [args] { return tokenize(*args); };
}

}  // namespace mg::cli
