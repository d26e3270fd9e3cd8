// attn tokenize: text to token ids (one JSON array per input) and, with
// --decode, ids back to text, through the public Tokenizer. Chat templates
// (--messages) will render Tokenizer::chat_template() and encode the result
// through EncodeInput below.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attn/tokenizer.hpp"
#include "nlohmann/json.hpp"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer, text, file, jsonl, messages;
  bool decode = false, no_special = false, info = false;
};

int PrintLine(const std::string& line) {
  if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() ||
      std::fputc('\n', stdout) == EOF) {
    return Fail("cannot write to stdout");
  }
  return 0;
}

Result<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return IoError(std::string(flag) + " '" + path + "' cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return IoError(std::string(flag) + " '" + path + "' cannot be read");
  return text.str();
}

// One input's output line: its ids as a JSON array, or (--decode) its text.
Result<std::string> Convert(const Tokenizer& tokenizer,
                            const TokenizeArgs& args, const std::string& input,
                            const std::string& where) {
  if (!args.decode) {
    ATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                          tokenizer.Encode(input, !args.no_special));
    return JsonLine(ids);
  }
  const nlohmann::json parsed = nlohmann::json::parse(input, nullptr, false);
  const nlohmann::json* list = &parsed;
  if (parsed.is_object() && parsed.contains("ids")) list = &parsed["ids"];
  std::vector<int64_t> ids;
  for (const nlohmann::json& id : list->is_array() ? *list : nlohmann::json()) {
    if (!id.is_number_integer()) break;
    ids.push_back(id.get<int64_t>());
  }
  if (!list->is_array() || ids.size() != list->size()) {
    return InvalidArgument(where + " is not a JSON array of integer ids");
  }
  ATTN_ASSIGN_OR_RETURN(std::string text, tokenizer.DecodeText(ids));
  return args.jsonl.empty() ? text : JsonLine({{"text", text}});
}

// --jsonl: one output line per input line, {"text": ...} (or, decoding,
// an array of ids); blank lines are skipped.
int ConvertLines(const Tokenizer& tokenizer, const TokenizeArgs& args,
                 const std::string& body) {
  std::istringstream lines(body);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where =
        "--jsonl '" + args.jsonl + "' line " + std::to_string(number);
    std::string input = line;
    if (!args.decode) {
      const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
      if (!parsed.is_object() || !parsed.contains("text") ||
          !parsed["text"].is_string()) {
        return Fail(where + " is not a JSON object with a string \"text\"");
      }
      input = parsed["text"].get<std::string>();
    }
    const Result<std::string> out = Convert(tokenizer, args, input, where);
    if (!out.ok()) return Fail(where + ": " + out.status().message());
    if (const int rc = PrintLine(*out)) return rc;
  }
  return 0;
}

int PrintInfo(const Tokenizer& tokenizer) {
  const nlohmann::json info = {
      {"kind", tokenizer.kind()},
      {"vocab_size", tokenizer.vocab_size()},
      {"bos_token", tokenizer.bos_token()},
      {"bos_id", tokenizer.bos_id()},
      {"eos_token", tokenizer.eos_token()},
      {"eos_ids", tokenizer.eos_ids()},
      {"add_bos", tokenizer.add_bos()},
      {"add_eos", tokenizer.add_eos()},
      {"has_chat_template", !tokenizer.chat_template().empty()}};
  return PrintLine(JsonLine(info));
}

// --messages: the conversation through the chat template with the
// generation prompt, its ids (the template writes the special tokens).
int EncodeMessages(const Tokenizer& tokenizer, const std::string& path) {
  const Result<std::string> body = ReadFile(path, "--messages");
  if (!body.ok()) return Fail(body.status().message());
  const Result<std::string> prompt = tokenizer.ApplyChatTemplate(*body, true);
  if (!prompt.ok()) {
    return Fail("--messages '" + path + "': " + prompt.status().message());
  }
  const Result<std::vector<int64_t>> ids = tokenizer.Encode(*prompt, false);
  return ids.ok() ? PrintLine(JsonLine(*ids)) : Fail(ids.status().message());
}

int Tokenize(const TokenizeArgs& args) {
  const int inputs = !args.text.empty() + !args.file.empty() +
                     !args.jsonl.empty() + !args.messages.empty();
  if (inputs != 1 && !(args.info && inputs == 0)) {
    return Usage("want one of --text, --file, --jsonl or --messages");
  }
  const auto tokenizer = Tokenizer::Load(args.tokenizer);
  if (!tokenizer.ok()) return Fail(tokenizer.status().message());
  if (args.info) return PrintInfo(**tokenizer);
  if (!args.messages.empty()) return EncodeMessages(**tokenizer, args.messages);
  if (!args.text.empty()) {
    const Result<std::string> out =
        Convert(**tokenizer, args, args.text, "--text");
    return out.ok() ? PrintLine(*out) : Fail(out.status().message());
  }
  const bool lines = !args.jsonl.empty();
  const char* flag = lines ? "--jsonl" : "--file";
  const Result<std::string> body =
      ReadFile(lines ? args.jsonl : args.file, flag);
  if (!body.ok()) return Fail(body.status().message());
  if (lines) return ConvertLines(**tokenizer, args, *body);
  const Result<std::string> out =
      Convert(**tokenizer, args, *body, "--file '" + args.file + "'");
  return out.ok() ? PrintLine(*out) : Fail(out.status().message());
}

}  // namespace

Command AddTokenizeCommand(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* command = app.add_subcommand(
      "tokenize", "Text to token ids (a JSON array per input), or ids to text");
  command
      ->add_option("--tokenizer", args->tokenizer,
                   "directory with tokenizer.json (+ tokenizer_config.json), "
                   "or GPT-2's vocab.json and merges.txt")
      ->required()
      ->check(FilePath());
  CLI::Option* text = command->add_option(
      "--text", args->text,
      "the text to encode (with --decode: a JSON array of ids)");
  CLI::Option* file = command
                          ->add_option("--file", args->file,
                                       "a file whose whole text is one input")
                          ->check(FilePath());
  CLI::Option* jsonl =
      command
          ->add_option("--jsonl", args->jsonl,
                       "a file of lines {\"text\": ...}, one output line each "
                       "(with --decode: "
                       "lines of id arrays, out {\"text\": ...})")
          ->check(FilePath());
  CLI::Option* messages =
      command
          ->add_option("--messages", args->messages,
                       "a JSON array of {\"role\", \"content\"}: its ids "
                       "through the chat template, with the generation prompt")
          ->check(FilePath());
  text->excludes(file)->excludes(jsonl)->excludes(messages);
  file->excludes(jsonl)->excludes(messages);
  jsonl->excludes(messages);
  CLI::Option* decode = command->add_flag("--decode", args->decode,
                                          "input ids, output their text");
  decode->excludes(messages);
  command
      ->add_flag("--no-special", args->no_special,
                 "do not add the post-processor's special tokens (BOS...); "
                 "special tokens written in the text still count")
      ->excludes(decode);
  command->add_flag(
      "--info", args->info,
      "print the tokenizer's kind, size and special tokens as JSON");
  return {command, [args] { return Tokenize(*args); }};
}

}  // namespace attn::cli
