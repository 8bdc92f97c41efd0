// `ptdp` — the launcher. `ptdp SCRIPT.lua [args]` runs a Lua experiment script in
// an embedded LuaJIT (ARCHITECTURE §7); `ptdp tokenize ...` builds a token dataset;
// `ptdp timeline-png ...` draws a timeline trace as a picture; `ptdp plot ...`
// draws a --log-json metrics file. Everything goes through the C ABI
// (capi/ptdp.h and capi/ptdp_tools.h), as any other program of the library's would.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/ptdp_tools.h"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

namespace {

bool is_dir(const std::string &p) { return access((p + "/ptdp.lua").c_str(), R_OK) == 0; }

std::string exe_dir() {
  std::vector<char> buf(4096);
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  std::string p(buf.data(), (size_t)n);
  return p.substr(0, p.find_last_of('/'));
}

// The Lua module directory: $PTDP_LUA_PATH, the installed share/ptdp/lua, or
// the source tree's lua/ next to the build directory.
std::string lua_dir() {
  // (Empty is unset, as for TMPDIR: '' named the root's /ptdp.lua.)
  if (const char *env = std::getenv("PTDP_LUA_PATH"); env && *env) return env;
  std::string exe = exe_dir();
  for (std::string cand : {exe + "/../share/ptdp/lua", exe + "/../lua", std::string(PTDP_SOURCE_LUA_DIR)})
    if (is_dir(cand)) return cand;
  return PTDP_SOURCE_LUA_DIR;
}

// A subcommand's command line: -1 when it parsed, else the exit status: 0
// after --help, 2 after one line naming the error (CLI11's own statuses,
// 100 and up, would read as a crash to a script).
// An option or argument given an empty value ('') that is not allowed one:
// CLI11 reads '' as 0 for a number and the commands take an empty path as "not
// given", so `--max-new-tokens ''` would generate nothing and an import's ''
// config.json be ignored, silently. Only --prompt may be empty (generation
// then starts a document).
const CLI::Option *empty_value(const CLI::App &app) {
  for (const CLI::Option *opt : app.get_options()) {
    if (opt->get_expected_min() == 0 || opt->get_name() == "--prompt") continue;
    for (const std::string &r : opt->results())  // (blank: white space alone, as '' read)
      if (r.find_first_not_of(" \t\n\r\f\v") == std::string::npos) return opt;
  }
  for (const CLI::App *sub : app.get_subcommands())
    if (const CLI::Option *opt = empty_value(*sub)) return opt;
  return nullptr;
}

// Whole numbers in decimal digits, as Megatron's argparse and `ptdp plan`
// read them: CLI11 alone reads 010 as octal 8 and 0x100 as 256. Leading zeros
// are dropped; any other form (hex, an exponent) is refused naming the option.
void decimal_integers(CLI::App &app) {
  for (CLI::Option *opt : app.get_options({})) {
    // ("UINT:UINT64" and the like: a whole-number type with a validator's name.)
    const std::string type = opt->get_type_name();
    if (type.rfind("FLOAT", 0) == 0) {  // decimal too: strtod also reads 0x1p3, inf and nan
      opt->transform(
          [](std::string v) {
            if (v.empty()) return v;
            char *end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.find_first_of("xXnN") != std::string::npos || std::isspace((unsigned char)v[0]) ||
                *end != '\0' || !std::isfinite(x))
              throw CLI::ValidationError("takes a finite number in decimal digits, got '" + v + "'");
            return v;
          },
          "", "decimal number");
      continue;
    }
    if (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0) continue;
    opt->transform(
        [type](std::string v) {
          if (v.empty()) return v;  // (an empty value is named as such after the parse)
          size_t at = v[0] == '-' ? 1 : 0;  // (no '+': as every integer the engine reads)
          if (at == v.size() || v.find_first_not_of("0123456789", at) != std::string::npos)
            throw CLI::ValidationError("takes a whole number in decimal digits, got '" + v + "'");
          while (at + 1 < v.size() && v[at] == '0') v.erase(at, 1);
          // Past 64 bits CLI11 would hold the largest value and the error
          // would show that, not what was given.
          const std::string most = type.rfind("UINT", 0) == 0 && v[0] != '-' ? "18446744073709551615"
                                   : v[0] == '-'                          ? "9223372036854775808"
                                                                          : "9223372036854775807";
          const std::string digits = v.substr(at);
          if (digits.size() > most.size() || (digits.size() == most.size() && digits > most))
            throw CLI::ValidationError(std::string("takes a whole number of 64 bits (") +
                                       (v[0] == '-' ? "at least -" : "at most ") + most + "), got '" + v + "'");
          return v;
        },
        "", "decimal");
  }
  for (CLI::App *sub : app.get_subcommands({})) decimal_integers(*sub);
}

// An option of one value given again: the last one is used, with a note, as
// train_gpt.lua's flags and Megatron's argparse take it (CLI11 said "At Most
// 1 required but received 2").
void last_one_wins(CLI::App &app) {
  for (CLI::Option *opt : app.get_options({}))
    if (opt->nonpositional() && opt->get_type_size_max() == 1 && opt->get_expected_max() == 1 &&
        opt->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App *sub : app.get_subcommands({})) last_one_wins(*sub);
}

void note_given_again(const std::string &command, const std::string &flag, size_t times,
                      const std::string &last) {
  std::fprintf(stderr, "%s: note: %s is given %zu times: the last one ('%s') is used\n", command.c_str(),
               flag.c_str(), times, last.c_str());
}

void note_repeated(const CLI::App &app, const std::string &name) {
  for (const CLI::Option *opt : app.get_options())
    if (opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeLast && opt->count() > 1)
      note_given_again(name, opt->get_name(), opt->count(), opt->results().back());
  for (const CLI::App *sub : app.get_subcommands()) note_repeated(*sub, name);
}

// The flag given a blank value on the command line (`--width ''`, `--width=`),
// or "": CLI11's own checks refuse one first, as "Value  not in range" or
// "1 required INT missing".
std::string flag_with_blank_value(int argc, char **argv) {
  const auto blank = [](const std::string &v) { return v.find_first_not_of(" \t\n\r\f\v") == std::string::npos; };
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    if (eq != std::string::npos && blank(a.substr(eq + 1))) return a.substr(0, eq);
    if (eq == std::string::npos && i + 1 < argc && blank(argv[i + 1])) return a;
  }
  return "";
}

// A command's flags through CLI11: -1 to go on, else the exit code (0 after
// --help, 2 after a usage error, printed on one line).
int parse_command_line(CLI::App &app, int argc, char **argv) {
  const std::string name = app.get_name();
  decimal_integers(app);
  last_one_wins(app);
  const auto blank_value = [&](const std::string &which) {
    std::fprintf(stderr, "%s: %s is given an empty value (or white space alone); give one (see %s --help)\n",
                 name.c_str(), which.c_str(), name.c_str());
    return 2;
  };
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::Success &e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    if (const std::string flag = flag_with_blank_value(argc, argv); !flag.empty()) return blank_value(flag);
    if (dynamic_cast<const CLI::ConversionError *>(&e))
      // CLI11 says only "Could not convert: --top-k = 2.5": add what is allowed.
      std::fprintf(stderr, "%s: %s: not a value of the option's type, or past its range (%s --help "
                   "gives each option's type: INT, UINT a whole number, FLOAT a number)\n",
                   name.c_str(), e.what(), name.c_str());
    else
      std::fprintf(stderr, "%s: %s (see %s --help)\n", name.c_str(), e.what(), name.c_str());
    return 2;
  }
  note_repeated(app, name);
  if (const CLI::Option *opt = empty_value(app))
    return blank_value(opt->nonpositional() ? opt->get_name() : "argument " + opt->get_name());
  return -1;
}

// The ptdp module's directory, to tell its errors from the script's.
std::string module_dir;

// Text as one printable line (ptdp_one_line_text): a message quoting a name
// with a line break in it stays one line.
std::string one_line(const char *text, size_t len) {
  std::string out(len * 4 + 1, '\0');
  size_t n = 0;
  if (ptdp_one_line_text(text, len, out.data(), out.size(), &n) != PTDP_OK) return std::string(text, len);
  out.resize(n);
  return out;
}

// Message handler: an error raised by the ptdp module (a bad option, a failed
// call: the message names the script line) is printed alone, on one line; an
// error in the user's own code gets its traceback, and PTDP_TRACEBACK=1 gives
// one always.

int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = "(error object is not a string)";
  // ptdp's own module not found although its file is there: the file could
  // not be opened (too many open files), which require reports as a missing
  // file with a traceback. Said in one line, with the reason.
  if (const char *at = std::strstr(msg, "module 'ptdp"); at && std::strstr(at, "' not found")) {
    std::string name(at + 8, std::strchr(at + 8, '\'') - (at + 8));
    std::string file = name;
    for (char &c : file) c = c == '.' ? '/' : c;
    file = module_dir + "/" + file + ".lua";
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    const int e = errno;
    if (fd >= 0) ::close(fd);
    if (fd < 0 && e != ENOENT) {
      lua_pushfstring(L, "cannot load the Lua module '%s': '%s' is there but cannot be opened (%s)",
                      name.c_str(), file.c_str(), std::strerror(e));
      return 1;
    }
  }
  const char *always = std::getenv("PTDP_TRACEBACK");
  bool from_module = false;
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {  // the first Lua function
    lua_getinfo(L, "S", &ar);
    if (std::strcmp(ar.what, "C") == 0) continue;
    from_module = std::strncmp(ar.source, ("@" + module_dir + "/ptdp").c_str(),
                               module_dir.size() + 6) == 0;
    break;
  }
  if (from_module && !(always && std::strcmp(always, "1") == 0)) {  // (a traceback keeps its lines)
    size_t len = 0;
    const char *text = lua_tolstring(L, 1, &len);
    lua_pushstring(L, text ? one_line(text, len).c_str() : msg);
    return 1;
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

// hold_input(path): a Lua file the script loads, held as an input of the run.
int hold_lua_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (ptdp_hold_input(path, "Lua file") != PTDP_OK) return luaL_error(L, "%s", ptdp_last_error());
  return 0;
}

// Every Lua file the script loads (require's Lua modules, dofile, loadfile)
// is an input of its run, as the script is: no output of the run replaces it.
const char *const kHoldLoadedFiles = R"(
local hold = ...
local find_module = package.loaders[2]
package.loaders[2] = function(name)
  local path = package.searchpath(name, package.path)
  if path then hold(path) end
  return find_module(name)
end
local dofile0, loadfile0 = dofile, loadfile
dofile = function(path, ...)
  if path then hold(path) end
  return dofile0(path, ...)
end
loadfile = function(path, ...)
  if path then hold(path) end
  return loadfile0(path, ...)
end
)";

int run_script(int argc, char **argv) {
  const char *script = argv[1];
  // A script's output is its log: flushed per line, so `| tee` shows progress
  // and a killed run keeps every line it printed (stderr is unbuffered).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  lua_State *L = luaL_newstate();
  if (!L) {
    std::fprintf(stderr, "ptdp: cannot create a Lua state (out of memory)\n");
    return 1;
  }
  luaL_openlibs(L);
  // package.path: the ptdp module first, then the script's own directory.
  std::string dir = lua_dir();
  module_dir = dir;
  // A module directory without the module: said with where it came from (a
  // script's require of it gave a traceback that never named PTDP_LUA_PATH).
  if (::access((dir + "/ptdp.lua").c_str(), R_OK) != 0) {
    const int e = errno;
    const char *env = std::getenv("PTDP_LUA_PATH");
    std::fprintf(stderr, "ptdp: cannot read the Lua module '%s/ptdp.lua': %s (%s)\n", dir.c_str(),
                 std::strerror(e),
                 env && *env ? "from PTDP_LUA_PATH: point it at ptdp's lua/ directory, or unset it"
                             : "the installed or source tree's lua/ directory: reinstall, or set PTDP_LUA_PATH");
    lua_close(L);
    return 1;
  }
  std::string sdir = script;
  size_t slash = sdir.find_last_of('/');
  sdir = slash == std::string::npos ? "." : sdir.substr(0, slash);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  std::string path = dir + "/?.lua;" + dir + "/?/init.lua;" + sdir + "/?.lua;" + lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, path.c_str());
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  // arg[0] = script, arg[1..n] = its arguments, as the standalone interpreter does.
  lua_newtable(L);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");

  // The script is an input of its run: no output of the run may replace it,
  // and a FIFO or directory is refused by kind instead of read (which waits).
  if (ptdp_hold_input(script, "script") != PTDP_OK) {
    std::fprintf(stderr, "ptdp: %s\n", ptdp_last_error());
    lua_close(L);
    return 1;
  }
  if (luaL_loadstring(L, kHoldLoadedFiles) != 0) {
    std::fprintf(stderr, "ptdp: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  lua_pushcfunction(L, hold_lua_file);
  lua_call(L, 1, 0);
  lua_pushcfunction(L, traceback);
  int rc = luaL_loadfile(L, script);
  if (rc == 0) {
    for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    rc = lua_pcall(L, argc - 2, 0, -(argc - 2) - 2);
  }
  if (rc != 0) {
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    // One "ptdp: " in front (the module's own errors carry it already).
    std::fprintf(stderr, "%s%s\n", std::strncmp(msg, "ptdp: ", 6) == 0 ? "" : "ptdp: ", msg);
    std::fflush(stderr);
    // Under mpirun the other processes may be waiting for this one: stop them now.
    ptdp_abort_job("the script failed (see above)");
    lua_close(L);
    return 1;
  }
  lua_close(L);
  return 0;
}

int run_tokenize(int argc, char **argv) {
  CLI::App app{"Tokenize text into a token dataset: ptdp's own file (--output FILE) or "
               "Megatron-LM's indexed dataset (--output-prefix PREFIX)",
               "ptdp tokenize"};
  std::vector<std::string> inputs, input_flags, json_keys{"text"};
  std::string output, prefix, format, tokenizer = "byte", vocab_file, merge_file, tokenizer_file;
  bool append_eod = false;
  int64_t workers = 1;
  app.add_option("inputs", inputs, "text files or directories");
  // One value per flag: a list would swallow the positional inputs after it.
  app.add_option("--input", input_flags, "an input file (Megatron's flag; may be repeated)")
      ->allow_extra_args(false);
  CLI::Option *out_opt = app.add_option(
      "-o,--output", output, "ptdp token dataset file to write (documents shuffled, each ending with EOD)");
  CLI::Option *prefix_opt = app.add_option(
      "--output-prefix", prefix,
      "Megatron indexed dataset to write: PREFIX_KEY_document.bin + .idx per JSON key, "
      "as Megatron's tools/preprocess_data.py (documents in input order)");
  out_opt->excludes(prefix_opt);
  app.add_option("--format", format,
                 "jsonl | fortune | lines | file (default: jsonl with --output-prefix, fortune with --output)");
  app.add_option("--json-keys", json_keys,
                 "keys of each JSON line to tokenize (jsonl): --json-keys text,title or repeat the flag")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--tokenizer-type,--tokenizer", tokenizer,
                 "byte | GPT2BPETokenizer (GPT-2's byte-level BPE: give --vocab-file and "
                 "--merge-file, or --tokenizer-file) | HuggingFaceTokenizer (a tokenizer.json of "
                 "GPT-2's, LLaMA 3's or LLaMA 2's / Mistral's kind: give --tokenizer-file)")
      ->capture_default_str();
  app.add_option("--vocab-file", vocab_file, "GPT2BPETokenizer's vocab.json");
  app.add_option("--merge-file", merge_file, "GPT2BPETokenizer's merges.txt");
  app.add_option("--tokenizer-file", tokenizer_file,
                 "a Hugging Face tokenizer.json: GPT2BPETokenizer's (instead of the two files) "
                 "or HuggingFaceTokenizer's");
  app.add_flag("--append-eod", append_eod,
               "end each non-empty document with the end-of-document token (Megatron's flag; "
               "--output always does)");
  app.add_option("--workers", workers,
                 "threads encoding the text (0: one per core, at most 1024); the output is the "
                 "same for any number")
      ->capture_default_str();
  if (const int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  inputs.insert(inputs.end(), input_flags.begin(), input_flags.end());
  auto usage_error = [](const char *msg) {
    std::fprintf(stderr, "ptdp tokenize: %s (--help for the flags)\n", msg);
    return 2;
  };
  if (inputs.empty()) return usage_error("no input given: name text files or directories");
  // An empty key in a list (--json-keys 'text,'): the option parser drops it in silence.
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    std::string list;
    if (a == "--json-keys" && i + 1 < argc) list = argv[i + 1];
    else if (a.rfind("--json-keys=", 0) == 0) list = a.substr(12);
    else continue;
    if (list.empty() || list.front() == ',' || list.back() == ',' || list.find(",,") != std::string::npos)
      return usage_error("--json-keys holds an empty key: list the keys with one comma between each");
  }
  if (output.empty() && prefix.empty())
    return usage_error("give --output FILE (a ptdp dataset) or --output-prefix PREFIX (a Megatron dataset)");
  std::vector<const char *> in;
  for (auto &s : inputs) in.push_back(s.c_str());
  // The tokenizer and its files, as the C ABI's key=value options.
  std::vector<std::string> kv = {"tokenizer_type=" + tokenizer};
  if (!vocab_file.empty()) kv.push_back("vocab_file=" + vocab_file);
  if (!merge_file.empty()) kv.push_back("merge_file=" + merge_file);
  if (!tokenizer_file.empty()) kv.push_back("tokenizer_file=" + tokenizer_file);
  kv.push_back("workers=" + std::to_string(workers));
  std::vector<const char *> opts;
  if (!output.empty()) {
    if (format.empty()) format = "fortune";
    if (format == "jsonl")
      return usage_error("--format jsonl writes Megatron's indexed dataset: give --output-prefix");
    if (app.count("--append-eod") > 0)  // (as the C ABI and Lua refuse it)
      return usage_error("--append-eod is for --output-prefix; --output always ends each document "
                         "with the end-of-document token");
    if (app.count("--json-keys") > 0)  // (it was ignored)
      return usage_error("--json-keys picks the keys of a jsonl corpus for --output-prefix; --output "
                         "reads no JSON");
    kv.push_back("output=" + output);
    kv.push_back("format=" + format);
    for (auto &s : kv) opts.push_back(s.c_str());
    int64_t docs = 0, tokens = 0;
    ptdp_status st = ptdp_tokenize_options(in.data(), (int32_t)in.size(), opts.data(),
                                           (int32_t)opts.size(), &docs, &tokens);
    if (st != PTDP_OK) {
      std::fprintf(stderr, "ptdp tokenize: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
      return 1;
    }
    std::printf("wrote %s: %lld documents, %lld tokens\n", output.c_str(), (long long)docs,
                (long long)tokens);
    return 0;
  }
  if (format.empty()) format = "jsonl";
  std::string keys;
  for (const auto &k : json_keys) keys += (keys.empty() ? "" : ",") + k;
  kv.insert(kv.end(), {"output_prefix=" + prefix, "format=" + format, "json_keys=" + keys,
                       std::string("append_eod=") + (append_eod ? "1" : "0")});
  for (auto &s : kv) opts.push_back(s.c_str());
  std::vector<int64_t> docs(json_keys.size()), tokens(json_keys.size());
  ptdp_status st = ptdp_tokenize_indexed(in.data(), (int32_t)in.size(), opts.data(),
                                         (int32_t)opts.size(), docs.data(), tokens.data());
  if (st != PTDP_OK) {
    std::fprintf(stderr, "ptdp tokenize: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
    return 1;
  }
  for (size_t k = 0; k < json_keys.size(); k++) {
    const std::string p = prefix + "_" + json_keys[k] + "_document";  // Megatron's naming
    std::printf("wrote %s.bin + %s.idx: %lld documents, %lld tokens (--data-path %s)\n",
                p.c_str(), p.c_str(), (long long)docs[k], (long long)tokens[k], p.c_str());
  }
  return 0;
}

int run_timeline_png(int argc, char **argv) {
  CLI::App app{"Draw a timeline trace (Chrome trace JSON) as a PNG", "ptdp timeline-png"};
  std::string trace, png;
  int width = 1600;
  app.add_option("trace", trace, "Chrome trace JSON (the trainer's `timeline` option)")->required();
  app.add_option("png", png, "PNG file to write")->required();
  // (The C ABI reads 0 as 1600; given here it is a width, and out of range.)
  app.add_option("--width", width, "picture width in pixels, 140 to 8192")->capture_default_str()->check(CLI::Range(140, 8192));
  if (const int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  ptdp_status st = ptdp_render_timeline(trace.c_str(), png.c_str(), width);
  if (st != PTDP_OK) {
    std::fprintf(stderr, "ptdp: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
    return 1;
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}

int run_plot(int argc, char **argv) {
  CLI::App app{"Plot a --log-json metrics file: loss and learning rate against iteration, as a PNG",
               "ptdp plot"};
  std::string log, png;
  app.add_option("log", log, "JSON lines written by train_gpt.lua --log-json")->required();
  app.add_option("png", png, "PNG file to write")->required();
  if (const int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  ptdp_status st = ptdp_plot_log(log.c_str(), png.c_str());
  if (st != PTDP_OK) {
    std::fprintf(stderr, "ptdp plot: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
    return 1;
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}

// ptdp ckpt inspect|verify|export-safetensors|import-safetensors: checkpoints
// without training.
int run_ckpt(int argc, char **argv) {
  CLI::App app{"Look into, check, export and import checkpoints", "ptdp ckpt"};
  app.require_subcommand(1);
  std::string dir, out, dtype = "f32";
  CLI::App *inspect = app.add_subcommand("inspect", "iteration, config, saved layout, every dataset");
  inspect->add_option("dir", dir, "a save directory (its newest checkpoint) or one iter_N")->required();
  CLI::App *verify = app.add_subcommand("verify", "manifest and every block's checksum; exit 1 on a fault");
  verify->add_option("dir", dir, "a save directory (its newest checkpoint) or one iter_N")->required();
  CLI::App *exp = app.add_subcommand("export-safetensors",
                                     "the parameters in Hugging Face's names and layouts (GPT-2 or the LLaMA family)");
  exp->add_option("dir", dir, "a save directory (its newest checkpoint) or one iter_N")->required();
  exp->add_option("out", out,
                  "a model directory to write (model.safetensors, config.json, "
                  "generation_config.json), or a .safetensors file (GPT-2 only)")
      ->required();
  exp->add_option("--dtype", dtype, "f32 | bf16 | f16")->capture_default_str();
  std::string in_file;
  std::vector<std::string> import_args;  // [config.json] DIR
  CLI::App *imp = app.add_subcommand(
      "import-safetensors",
      "a Hugging Face GPT-2, LLaMA, Mistral or Qwen2 model as a checkpoint at iteration 0");
  imp->add_option("file", in_file,
                  "the model directory, its .safetensors file or model.safetensors.index.json "
                  "(F32, F16 or BF16)")
      ->required();
  imp->add_option("paths", import_args,
                  "[config.json] DIR: its config (default: config.json beside the weights, or a "
                  "ptdp GPT-2 export's gpt2_config metadata) and the directory to save into")
      ->required()
      ->expected(1, 2);
  if (argc < 3) {  // no subcommand: say which there are
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  // A word that is not a subcommand (CLI11 alone says only "not expected").
  const std::string sub = argv[2];
  std::string names;
  bool known = false;
  for (const CLI::App *s : {inspect, verify, exp, imp}) {
    names += (names.empty() ? "" : ", ") + s->get_name();
    known = known || s->get_name() == sub;
  }
  if (sub.rfind("-", 0) != 0 && !known) {
    std::fprintf(stderr, "ptdp ckpt: unknown subcommand '%s'; the subcommands are: %s\n\n%s",
                 sub.c_str(), names.c_str(), app.help().c_str());
    return 2;
  }
  // import-safetensors' arguments by count (CLI11 says "paths: At Most 2
  // required but received 3"); it has no flags but --help.
  if (sub == "import-safetensors") {
    int n = 0;
    bool help = false;
    for (int i = 3; i < argc; i++) {
      const std::string a = argv[i];
      help = help || a == "--help" || a == "-h";
      n += a.rfind("-", 0) != 0;
    }
    if (!help && (n < 2 || n > 3)) {
      std::fprintf(stderr, "ptdp ckpt import-safetensors: takes 2 or 3 arguments, "
                   "MODEL_DIR|MODEL.safetensors [config.json] DIR; got %d (see ptdp ckpt "
                   "import-safetensors --help)\n", n);
      return 2;
    }
  }
  if (const int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  // Through the C ABI, whose report calls take a buffer: grow it until it fits.
  bool reported = false;  // a report was printed (a fault list, not only an error)
  auto report = [&reported](auto call) {
    std::vector<char> buf(1 << 16, '\0');
    size_t len = 0;
    ptdp_status st = call(buf.data(), buf.size(), &len);
    if (st == PTDP_ERR_BUFFER_TOO_SMALL) {
      buf.assign(len + 1, '\0');
      st = call(buf.data(), buf.size(), &len);
    }
    if ((st == PTDP_OK || st == PTDP_ERR_CORRUPT_DATA) && buf[0] != '\0') {
      std::fputs(buf.data(), stdout);
      reported = true;
    }
    return st;
  };
  ptdp_status st;
  if (inspect->parsed()) {
    st = report([&](char *b, size_t cap, size_t *len) { return ptdp_checkpoint_inspect(dir.c_str(), b, cap, len); });
  } else if (verify->parsed()) {
    st = report([&](char *b, size_t cap, size_t *len) { return ptdp_checkpoint_verify(dir.c_str(), b, cap, len); });
    if (st == PTDP_ERR_CORRUPT_DATA && reported) return 1;  // the report lists the faults
  } else if (imp->parsed()) {
    const std::string config = import_args.size() == 2 ? import_args[0] : "";
    const std::string into = import_args.back();
    st = ptdp_checkpoint_import_safetensors(in_file.c_str(), config.c_str(), into.c_str());
    if (st == PTDP_OK)
      std::printf(
          "wrote %s/iter_0000000 from %s (load it with --load %s, or --finetune --load %s)\n",
          into.c_str(), in_file.c_str(), into.c_str(), into.c_str());
  } else {
    st = ptdp_checkpoint_export_safetensors_dtype(dir.c_str(), out.c_str(), dtype.c_str());
    if (st == PTDP_OK) std::printf("wrote %s (%s)\n", out.c_str(), dtype.c_str());
  }
  if (st != PTDP_OK) {
    std::fprintf(stderr, "ptdp: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
    return 1;
  }
  return 0;
}

// ptdp plan --num-layers L --hidden-size H ... : the planner, through ptdp_plan.
// Flags become key=value options (a flag followed by another flag, or last, is
// a switch: key=1); the library checks every key and value. A flag given again
// takes its last value with a note, as the other commands' flags (the C ABI's
// list refuses a repeated key).
int run_plan(int argc, char **argv) {
  std::vector<std::string> opts;
  std::map<std::string, std::pair<size_t, size_t>> seen;  // key -> (its place in opts, times given)
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      opts = {"help"};
      break;
    }
    if (a.rfind("--", 0) != 0) {
      std::fprintf(stderr, "ptdp plan: expected a --flag, got '%s' (--help lists the flags)\n", a.c_str());
      return 2;
    }
    // A bare --flag passes an empty value: a switch takes it as on, an option
    // that needs a value refuses it (a bare --save-machine wrote a file "1").
    std::string key = a.substr(2), value;
    size_t eq = key.find('=');
    if (eq != std::string::npos) value = key.substr(eq + 1), key = key.substr(0, eq);
    else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) value = argv[++i];
    auto [it, fresh] = seen.emplace(key, std::make_pair(opts.size(), size_t(1)));
    if (fresh) opts.push_back(key + "=" + value);
    else opts[it->second.first] = key + "=" + value, it->second.second++;
  }
  for (const auto &[key, place] : seen)
    if (place.second > 1)
      note_given_again("ptdp plan", "--" + key, place.second, opts[place.first].substr(key.size() + 1));
  std::vector<const char *> c;
  for (auto &o : opts) c.push_back(o.c_str());
  std::vector<char> buf(1 << 16, '\0');
  size_t len = 0;
  ptdp_status st = ptdp_plan(c.data(), (int32_t)c.size(), buf.data(), buf.size(), &len);
  if (st == PTDP_ERR_BUFFER_TOO_SMALL) {
    buf.assign(len + 1, '\0');
    st = ptdp_plan(c.data(), (int32_t)c.size(), buf.data(), buf.size(), &len);
  }
  if (st != PTDP_OK) {
    std::fprintf(stderr, "ptdp plan: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
    return 1;
  }
  std::fputs(buf.data(), stdout);
  return 0;
}

// ptdp generate --load DIR --prompt TEXT: continues a text with the model of
// a checkpoint (its options from the manifest), in the layout given.
int run_generate(int argc, char **argv) {
  CLI::App app{"Continue a text with a checkpoint's model (its options come from the checkpoint)",
               "ptdp generate"};
  std::string load, prompt, tokenizer = "byte", tokenizer_file, vocab_file, merge_file, device;
  int max_new_tokens = 100, top_k = 0, t = 1, p = 1;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  app.add_option("--load", load, "a save directory (its newest checkpoint) or one iter_N")->required();
  app.add_option("--prompt", prompt, "the text to continue")->required();
  app.add_option("--max-new-tokens", max_new_tokens, "tokens to add at most")->capture_default_str();
  app.add_option("--temperature", temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", top_p, "and among those whose probabilities add up to p (1: all)")
      ->capture_default_str();
  app.add_option("--seed", seed, "the sampling's seed (0 to 2^64-1)")
      ->check(CLI::Validator(
          [](std::string &v) {  // CLI11 would wrap "-1" to 2^64 - 1 and cap 2^64
            errno = 0;
            char *end = nullptr;
            std::strtoull(v.c_str(), &end, 10);
            const bool ok = v.find('-') == std::string::npos && errno != ERANGE;
            return ok ? std::string() : "the seed is 0 to 2^64-1, got " + v;
          },
          "UINT64"))
      ->capture_default_str();
  app.add_option("--tokenizer-type,--tokenizer", tokenizer,
                 "byte | GPT2BPETokenizer | HuggingFaceTokenizer (the one the model was trained with)")
      ->capture_default_str();
  app.add_option("--tokenizer-file", tokenizer_file, "a Hugging Face tokenizer.json");
  app.add_option("--vocab-file", vocab_file, "GPT2BPETokenizer's vocab.json");
  app.add_option("--merge-file", merge_file, "GPT2BPETokenizer's merges.txt");
  app.add_option("--tensor-model-parallel-size", t, "t")->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", p, "p")->capture_default_str();
  app.add_option("--device", device, "cpu | cuda (default: the config's)");
  if (const int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  if (app.count("--seed") && temperature == 0) {  // (top_k and top_p: the engine says)
    std::fprintf(stderr, "ptdp generate: --seed keys the sampling, and --temperature 0 samples nothing "
                         "(greedy decoding takes the most likely token): give a --temperature > 0, "
                         "or leave --seed out\n");
    return 2;
  }
  ptdp_config *cfg = nullptr;
  ptdp_trainer *tr = nullptr;
  // Room for the usual text at once (a retry generates it all again): the
  // prompt, and 64 bytes a token, each byte as U+FFFD at worst; 64 MiB at most.
  const size_t room = 3 * (prompt.size() + 64 * (size_t)std::max(0, max_new_tokens)) + (1 << 16);
  std::vector<char> buf(std::min(room, (size_t)1 << 26), '\0');
  size_t len = 0;
  auto set = [&](const char *k, const std::string &v) {
    return v.empty() ? PTDP_OK : ptdp_config_set(cfg, k, v.c_str());
  };
  ptdp_status st = ptdp_config_create(&cfg);
  if (st == PTDP_OK) st = ptdp_config_set_model_from_checkpoint(cfg, load.c_str());
  // A batch of one sequence; the checkpoint's layout need not be this one.
  for (auto [k, v] : {std::pair<const char *, std::string>{"load", load},
                      {"tokenizer_type", tokenizer},
                      {"tokenizer_file", tokenizer_file},
                      {"vocab_file", vocab_file},
                      {"merge_file", merge_file},
                      {"device", device},
                      {"tensor_model_parallel_size", std::to_string(t)},
                      {"pipeline_model_parallel_size", std::to_string(p)},
                      {"micro_batch_size", "1"},
                      {"global_batch_size", "1"},
                      // The weights only: a checkpoint trained with any schedule
                      // or seed loads (nothing here trains on).
                      {"finetune", "1"}})
    if (st == PTDP_OK) st = set(k, v);
  if (st == PTDP_OK) st = ptdp_trainer_create(cfg, &tr);
  for (int attempt = 0; st == PTDP_OK && attempt < 2; attempt++) {
    st = ptdp_trainer_generate_top(tr, prompt.c_str(), max_new_tokens, temperature, top_k, top_p,
                                   seed, buf.data(), buf.size(), &len);
    if (st != PTDP_ERR_BUFFER_TOO_SMALL) break;
    buf.assign(len + 1, '\0');  // the same text again: the draw is keyed by the seed
    st = PTDP_OK;
  }
  // Under mpirun every process generates the same text (its ranks' part of
  // each step): the process of world rank 0 prints it, as training reports.
  double rank = 0;
  if (st == PTDP_OK) st = ptdp_trainer_get(tr, "rank", &rank);
  if (st != PTDP_OK) std::fprintf(stderr, "ptdp generate: %s: %s\n", ptdp_status_string(st), ptdp_last_error());
  else if (rank == 0) std::printf("%s\n", buf.data());
  ptdp_trainer_destroy(tr);
  ptdp_config_destroy(cfg);
  return st == PTDP_OK ? 0 : 1;
}

void usage(FILE *f) {
  std::fprintf(f,
               "usage: ptdp SCRIPT.lua [script arguments]   run a Lua experiment script\n"
               "       ptdp tokenize --output FILE INPUT... build a ptdp token dataset\n"
               "       ptdp tokenize --output-prefix P [--format jsonl] [--json-keys text] INPUT...\n"
               "                                            build a Megatron indexed dataset\n"
               "       ptdp timeline-png TRACE.json OUT.png [--width N]  draw a timeline\n"
               "       ptdp plot LOG.jsonl OUT.png         plot loss and learning rate of a --log-json file\n"
               "       ptdp ckpt inspect|verify DIR       look into / check a checkpoint\n"
               "       ptdp ckpt export-safetensors DIR OUT_DIR|OUT.safetensors [--dtype f32|bf16|f16]\n"
               "       ptdp ckpt import-safetensors MODEL_DIR|MODEL.safetensors [config.json] DIR\n"
               "       ptdp generate --load DIR --prompt TEXT [--max-new-tokens N] [--temperature T]\n"
               "                 [--top-k K] [--top-p P] [--tokenizer-type ...]  continue a text\n"
               "       ptdp plan --num-layers L --hidden-size H --num-attention-heads A\n"
               "                 --global-batch-size B --num-gpus N [--machine selene] ...  plan t, p, d, b, v\n"
               "       ptdp --version\n");
}

}  // namespace

// OpenMP threads that wait for work spin by default (libgomp: about 300,000
// turns per wait), which on a machine whose cores are busy with other work
// takes the cores from the threads that compute: a tiny 2-thread run took
// 823 ms a step beside a compile on 2 cores and 34 ms with waiting threads
// asleep (docs/benchmarks.md). libgomp reads its policy when it loads, before
// main, so unless the user chose one (OMP_WAIT_POLICY or GOMP_SPINCOUNT) the
// launcher starts itself again with OMP_WAIT_POLICY=PASSIVE; if that exec
// fails it goes on as it is.
static void sleep_while_waiting(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // not restarted: the policy stays the default
}

// A command whose answer could not be written (stdout on a full disk, or
// closed) fails; it exited 0 having printed nothing. Registered first, so it
// runs last at exit (a script's os.exit too), after every other handler; all
// streams are flushed first, as exit would.
void check_stdout_at_exit() {
  const int flushed = std::fflush(nullptr);
  if (!std::ferror(stdout)) return;
  std::fprintf(stderr, "ptdp: cannot write to standard output: %s\n",
               flushed != 0 ? std::strerror(errno) : "a write failed (a full disk, or a closed stream)");
  std::fflush(stderr);
  _exit(1);
}

int main(int argc, char **argv) {
  std::atexit(check_stdout_at_exit);
  sleep_while_waiting(argv);
  // An interrupted command leaves no temporary files beside its outputs.
  ptdp_remove_temp_files_on_signal();
  // The program and its library are inputs of every command: no output
  // replaces them (a sweep's --profile-ops overwrote the ptdp executable).
  Dl_info lib{};
  char *exe = realpath("/proc/self/exe", nullptr);  // (named as the file, not as /proc's link)
  const ptdp_status held = ptdp_hold_input(exe ? exe : "/proc/self/exe", "ptdp program");
  std::free(exe);
  if (held != PTDP_OK ||
      (dladdr(reinterpret_cast<void *>(&ptdp_version), &lib) != 0 && lib.dli_fname &&
       std::strchr(lib.dli_fname, '/') && ptdp_hold_input(lib.dli_fname, "ptdp library") != PTDP_OK)) {
    std::fprintf(stderr, "ptdp: %s\n", ptdp_last_error());
    return 1;
  }
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  // (Alone: an argument after them would be ignored in silence.)
  if ((cmd == "--version" || cmd == "--help" || cmd == "-h") && argc > 2) {
    std::fprintf(stderr, "ptdp: %s takes no arguments, got '%s'\n", cmd.c_str(), argv[2]);
    return 2;
  }
  if (cmd == "--version") {
    std::printf("ptdp %s\n", ptdp_version());
    return 0;
  }
  if (cmd == "--help" || cmd == "-h") {
    usage(stdout);
    return 0;
  }
  if (cmd == "tokenize") return run_tokenize(argc, argv);
  if (cmd == "timeline-png") return run_timeline_png(argc, argv);
  if (cmd == "plot") return run_plot(argc, argv);
  if (cmd == "ckpt") return run_ckpt(argc, argv);
  if (cmd == "plan") return run_plan(argc, argv);
  if (cmd == "generate") return run_generate(argc, argv);
  if (cmd.size() > 4 && cmd.compare(cmd.size() - 4, 4, ".lua") == 0) return run_script(argc, argv);
  std::fprintf(stderr, "ptdp: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return 2;
}
