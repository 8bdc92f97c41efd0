// Key/value configuration with a schema: every option has a type, a default, an
// allowed range or set, and a one-line description. Values are validated when set,
// so a bad value is reported where it is given (C ABI, Lua, command line).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ptdp {

// The most CPU threads one process runs (num_threads' range, and
// OMP_NUM_THREADS's when num_threads is 0).
inline constexpr int kMaxProcessThreads = 4096;

struct OptionSpec {
  enum Type { Int, Float, String, Choice };
  const char *key;
  Type type;
  const char *default_value;
  double min, max;          // Int/Float range (inclusive)
  const char *choices;      // Choice: comma-separated allowed values
  const char *help;
};

const std::vector<OptionSpec> &option_schema();
const OptionSpec *find_option(const std::string &key);
std::string option_keys_list();  // "a, b, c" for error messages
// The shortest text (at least 15 significant digits' worth) that reads back as x.
std::string number_text(double x);

class Config {
 public:
  // Throws unknown_option (listing the keys) or bad_value (saying what is allowed).
  void set(const std::string &key, const std::string &value);
  std::string get(const std::string &key) const;  // value or default
  int64_t get_int(const std::string &key) const;
  double get_double(const std::string &key) const;
  bool is_set(const std::string &key) const { return values_.count(key) != 0; }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace ptdp
